//! `promtool check metrics` on a scrape, for the golden-scrape tests of the collector and the
//! agent. Shared by both test binaries through `#[path]`; tests/run.sh installs promtool.

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `promtool check metrics` on `text`; its complaints, if any.
pub fn check_metrics(text: &str) -> Result<(), String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
