//! What every feature's settings section is made of: secrets that never print, and durations
//! written as humans write them ("15s", "7d"). Each feature's own section lives in its folder;
//! `config.rs` puts the sections together.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A secret string (token, database URL with password, webhook URL or key) whose `Debug`
/// never shows it. In the config it is written one of three ways:
/// - `"the value"` — in the file itself;
/// - `"${NAME}"` (the whole string) — from the environment variable `NAME`;
/// - `{ file = "/run/secrets/name" }` — from a file (a mounted Kubernetes Secret), with one
///   trailing newline removed; `{ env = "NAME" }` is the same as `"${NAME}"`.
///
/// An unset variable, an unreadable or empty file, or an empty value is an error at load
/// that names the variable or path, never the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

/// Files larger than this are not secrets (a mistaken path to a log or an image).
const MAX_SECRET_FILE: u64 = 64 * 1024;

impl Secret {
    /// The value of `${NAME}` (or `{ env = "NAME" }`).
    fn from_env(name: &str) -> Result<Secret, String> {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!(
                "{name:?} is not an environment variable name (letters, digits and _)"
            ));
        }
        match std::env::var(name) {
            Ok(v) if !v.is_empty() => Ok(Secret(v)),
            Ok(_) => Err(format!("environment variable {name} is empty")),
            Err(_) => Err(format!("environment variable {name} is not set")),
        }
    }

    /// The content of `{ file = "PATH" }`, one trailing newline removed.
    fn from_file(path: &std::path::Path) -> Result<Secret, String> {
        let meta = std::fs::metadata(path)
            .map_err(|e| format!("cannot read secret file {}: {e}", path.display()))?;
        if meta.len() > MAX_SECRET_FILE {
            return Err(format!(
                "secret file {} is {} bytes; a secret is at most {MAX_SECRET_FILE}",
                path.display(),
                meta.len()
            ));
        }
        let mut v = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read secret file {}: {e}", path.display()))?;
        if v.ends_with('\n') {
            v.pop();
            if v.ends_with('\r') {
                v.pop();
            }
        }
        if v.is_empty() {
            return Err(format!("secret file {} is empty", path.display()));
        }
        Ok(Secret(v))
    }

    fn from_text(v: &str) -> Result<Secret, String> {
        match v.strip_prefix("${").and_then(|r| r.strip_suffix('}')) {
            Some(name) => Secret::from_env(name),
            None if v.is_empty() => Err("a secret cannot be empty".into()),
            None => Ok(Secret(v.to_owned())),
        }
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        struct Form;
        impl<'de> serde::de::Visitor<'de> for Form {
            type Value = Secret;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a secret: \"value\", \"${ENV_NAME}\", { file = \"/path\" } or { env = \"NAME\" }")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Secret, E> {
                Secret::from_text(v).map_err(E::custom)
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Secret, A::Error> {
                use serde::de::Error;
                let Some(key) = m.next_key::<String>()? else {
                    return Err(A::Error::custom(
                        "a secret table needs its source: { file = \"/path\" } or { env = \"NAME\" }",
                    ));
                };
                let out = match key.as_str() {
                    "file" => Secret::from_file(std::path::Path::new(&m.next_value::<String>()?)),
                    "env" => Secret::from_env(&m.next_value::<String>()?),
                    other => {
                        return Err(A::Error::custom(format!(
                            "unknown secret source `{other}`; use file or env"
                        )));
                    }
                };
                if m.next_key::<String>()?.is_some() {
                    return Err(A::Error::custom("a secret has one source: file or env"));
                }
                out.map_err(A::Error::custom)
            }
        }
        d.deserialize_any(Form)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// The shortest bearer token the collector accepts (agents, API and scrape tokens):
/// `openssl rand -hex 24` gives 48 characters.
pub const MIN_TOKEN_LEN: usize = 16;

/// Words that mark a value someone was meant to replace (compared without case, dashes or
/// underscores): a shipped example such as `CHANGE-ME-agent-token` must never open ingest.
const PLACEHOLDER_WORDS: [&str; 7] = [
    "changeme",
    "replaceme",
    "placeholder",
    "example",
    "yourtoken",
    "fixme",
    "todo",
];

/// Refuses a bearer token that is short, a placeholder or nearly one character repeated;
/// the error names `setting` (e.g. `agents[0].token_file (/etc/gpulens/token)`), never the
/// value.
pub fn check_token(setting: &str, token: &str) -> Result<(), String> {
    let how = "make one with `openssl rand -hex 24`";
    if token.chars().count() < MIN_TOKEN_LEN {
        return Err(format!(
            "{setting}: a token must be at least {MIN_TOKEN_LEN} characters ({how})"
        ));
    }
    let squashed: String = token
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if let Some(w) = PLACEHOLDER_WORDS.iter().find(|w| squashed.contains(*w)) {
        return Err(format!(
            "{setting}: the token looks like a placeholder (it contains {w:?}); set a random one ({how})"
        ));
    }
    if token.starts_with('<') && token.ends_with('>') {
        return Err(format!(
            "{setting}: the token is a placeholder in angle brackets; set a random one ({how})"
        ));
    }
    let distinct: std::collections::BTreeSet<char> = token.chars().collect();
    if distinct.len() < 6 {
        return Err(format!(
            "{setting}: the token has only {} different characters; set a random one ({how})",
            distinct.len()
        ));
    }
    Ok(())
}

/// A duration in human form (`"15s"`, `"7d"`); errors say what was expected.
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    model::time::parse_duration(&s).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Holder {
        s: Secret,
    }

    fn parse(text: &str) -> Result<Secret, String> {
        toml::from_str::<Holder>(text)
            .map(|h| h.s)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn secrets_come_from_the_file_the_environment_or_a_file_on_disk() {
        assert_eq!(parse("s = \"abc\"").unwrap().0, "abc");
        // PATH is set wherever tests run (and setting variables is unsafe in a threaded test).
        let path = std::env::var("PATH").unwrap();
        assert_eq!(parse("s = \"${PATH}\"").unwrap().0, path);
        assert_eq!(parse("s = { env = \"PATH\" }").unwrap().0, path);
        let err = parse("s = {}").unwrap_err();
        assert!(err.contains("needs its source"), "{err}");
        let dir = std::env::temp_dir().join(format!(
            "gpulens-secret-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir(&dir).unwrap();
        let f = dir.join("token");
        std::fs::write(&f, "from-file\n").unwrap();
        let got = parse(&format!("s = {{ file = {:?} }}", f.display().to_string())).unwrap();
        assert_eq!(got.0, "from-file", "one trailing newline removed");
        assert_eq!(format!("{got:?}"), "Secret(***)");

        let err = parse("s = \"${GPULENS_TEST_SECRET_UNSET}\"").unwrap_err();
        assert!(
            err.contains("GPULENS_TEST_SECRET_UNSET is not set"),
            "{err}"
        );
        let err = parse("s = { file = \"/nonexistent/gpulens-token\" }").unwrap_err();
        assert!(err.contains("/nonexistent/gpulens-token"), "{err}");
        std::fs::write(&f, "\n").unwrap();
        let err = parse(&format!("s = {{ file = {:?} }}", f.display().to_string())).unwrap_err();
        assert!(err.contains("is empty"), "{err}");
        std::fs::write(&f, vec![b'x'; 70_000]).unwrap();
        let err = parse(&format!("s = {{ file = {:?} }}", f.display().to_string())).unwrap_err();
        assert!(err.contains("at most"), "{err}");
        let err = parse("s = { path = \"/x\" }").unwrap_err();
        assert!(err.contains("unknown secret source `path`"), "{err}");
        let err = parse("s = { file = \"/x\", env = \"Y\" }").unwrap_err();
        assert!(err.contains("one source"), "{err}");
        let err = parse("s = \"${BAD NAME}\"").unwrap_err();
        assert!(err.contains("not an environment variable name"), "{err}");
        let err = parse("s = \"\"").unwrap_err();
        assert!(err.contains("cannot be empty"), "{err}");
        // The value never appears in an error.
        std::fs::write(&f, "hunter2").unwrap();
        let err = toml::from_str::<Holder>(&format!(
            "s = {{ file = {:?} }}\nt = 1",
            f.display().to_string()
        ))
        .unwrap_err()
        .to_string();
        assert!(!err.contains("hunter2"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
