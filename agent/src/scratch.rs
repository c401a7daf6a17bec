//! Scratch directories for tests and benchmarks that no other run can share.
//!
//! A name made of the process id alone is not enough: CI and a developer's run may share `/tmp`
//! from different PID namespaces, and a run killed mid-test leaves its directory behind for the
//! next process that happens to get the same id. So a scratch directory's name also carries the
//! time in nanoseconds and a per-process counter, and it is created with `create_dir`, which
//! fails rather than reuse a directory that already exists.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// Creates a new, empty directory under the system temp dir whose name starts with
/// `gpulens-{tag}-`. The caller removes it when done; a directory left by a failed test is never
/// picked up again.
pub fn fresh_dir(tag: &str) -> std::io::Result<PathBuf> {
    let base = std::env::temp_dir();
    loop {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("gpulens-{tag}-{}-{nanos}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_calls_never_share_a_directory() {
        let a = super::fresh_dir("scratch-test").unwrap();
        let b = super::fresh_dir("scratch-test").unwrap();
        assert_ne!(a, b);
        assert!(a.is_dir() && b.is_dir());
        assert_eq!(std::fs::read_dir(&a).unwrap().count(), 0);
        std::fs::remove_dir(&a).unwrap();
        std::fs::remove_dir(&b).unwrap();
    }
}
