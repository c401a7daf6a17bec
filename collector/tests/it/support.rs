//! Test support: the store's (temporary directories, stores on both backends, PostgreSQL
//! servers and clusters, a small fleet; in `store/tests/support`) and what only the
//! collector's tests need (other servers' APIs, Prometheus).

use std::process::Command;

#[path = "../../../store/tests/support/mod.rs"]
mod store_support;
pub use store_support::*;

/// GETs `url` and parses the answer as JSON (a test's view of another server's API).
pub async fn get_json(http: &reqwest::Client, url: &str) -> serde_json::Value {
    let body = http.get(url).send().await.unwrap().bytes().await.unwrap();
    serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{url}: not JSON: {e}"))
}

/// A child process killed (and reaped) when the test ends, however it ends.
pub struct Killed(pub std::process::Child);

/// Starts a Prometheus server with `config` (YAML), its data under `dir`; the process and its
/// base URL.
pub fn prometheus(dir: &TempDir, config: &str) -> (Killed, String) {
    let file = dir.path().join("prometheus.yml");
    std::fs::write(&file, config).unwrap();
    let port = free_port();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    (Killed(child), format!("http://127.0.0.1:{port}"))
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
