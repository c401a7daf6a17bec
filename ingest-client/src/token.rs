//! The agent's credential: a fixed token, or a file read again as it changes — a projected
//! ServiceAccount token is rotated by the kubelet (it writes a new one when 80 % of the old
//! one's life has passed), so a token read once at start expires under a running agent.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest token a file may hold (a projected ServiceAccount token is about 1 KiB).
pub const MAX_TOKEN_BYTES: u64 = 64 * 1024;

/// How long a token read from a file is used before the file is read again.
pub const REREAD_EVERY: Duration = Duration::from_secs(30);

/// A bearer token. Cheap to clone; clones share the file's last reading.
#[derive(Clone)]
pub struct Token(Arc<Source>);

enum Source {
    Fixed(String),
    File {
        path: PathBuf,
        last: Mutex<(String, Instant)>,
    },
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.0 {
            Source::Fixed(_) => write!(f, "Token(fixed)"),
            Source::File { path, .. } => write!(f, "Token(file {})", path.display()),
        }
    }
}

impl Token {
    /// A token that never changes.
    pub fn fixed(token: &str) -> Token {
        Token(Arc::new(Source::Fixed(token.to_owned())))
    }

    /// The token in `path`, read now (an error names the file, never the token) and again
    /// every [`REREAD_EVERY`] when it is used; a file that cannot be read later keeps the last
    /// good token (logged), so a rotation in progress loses no batch.
    pub fn file(path: &Path) -> Result<Token, String> {
        let token = read(path)?;
        Ok(Token(Arc::new(Source::File {
            path: path.to_owned(),
            last: Mutex::new((token, Instant::now())),
        })))
    }

    /// The token to send now.
    pub fn current(&self) -> String {
        match &*self.0 {
            Source::Fixed(t) => t.clone(),
            Source::File { path, last } => {
                let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
                if last.1.elapsed() >= REREAD_EVERY {
                    match read(path) {
                        Ok(t) => *last = (t, Instant::now()),
                        Err(e) => {
                            tracing::warn!(error = %e, "keeping the last token read");
                            last.1 = Instant::now();
                        }
                    }
                }
                last.0.clone()
            }
        }
    }
}

/// The token in `path`: one line, a trailing newline removed; never echoed in errors.
pub fn read(path: &Path) -> Result<String, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if meta.len() > MAX_TOKEN_BYTES {
        return Err(format!(
            "{shown} is {} bytes; a token is at most {MAX_TOKEN_BYTES} bytes",
            meta.len()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: {e}"))?;
    let token = text.trim_end_matches(['\n', '\r']);
    if token.is_empty() || token.contains('\n') {
        return Err(format!("{shown} must hold the token on one line"));
    }
    Ok(token.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotated_file_is_read_again_and_a_broken_one_keeps_the_last_token() {
        let dir = std::env::temp_dir().join(format!("gpulens-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first-token-aaaaaaaa\n").unwrap();
        let t = Token::file(&path).unwrap();
        assert_eq!(t.current(), "first-token-aaaaaaaa");
        std::fs::write(&path, "second-token-bbbbbbb\n").unwrap();
        // Within the re-read interval the reading stands.
        assert_eq!(t.current(), "first-token-aaaaaaaa");
        let Source::File { last, .. } = &*t.0 else {
            unreachable!()
        };
        last.lock().unwrap().1 -= REREAD_EVERY;
        assert_eq!(t.current(), "second-token-bbbbbbb");
        std::fs::write(&path, "two\nlines\n").unwrap();
        last.lock().unwrap().1 -= REREAD_EVERY;
        assert_eq!(
            t.current(),
            "second-token-bbbbbbb",
            "a broken file keeps the last"
        );
        std::fs::write(&path, "").unwrap();
        let err = Token::file(&path).unwrap_err();
        assert!(err.contains("one line") && !err.contains("second"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
