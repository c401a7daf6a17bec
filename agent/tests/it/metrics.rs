//! The agent's /metrics as Prometheus scrapes it: a running `gpulens-agent run` (simulated
//! backend) passes `promtool check metrics` (a golden scrape, as node_exporter does), with a
//! series per GPU and the agent's own health. tests/run.sh installs promtool.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::delivery::{Proc, free_port, root, wait_until};

use test_support::promtool;

pub(crate) fn get(port: u16, path: &str, accept: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    r.starts_with("HTTP/1.1 200").then_some(r)
}

#[test]
fn the_agents_metrics_pass_promtool() {
    if Command::new("promtool").arg("--version").output().is_err() {
        assert!(
            std::env::var("GPULENS_REQUIRE_PROMETHEUS").is_err(),
            "promtool is not installed"
        );
        eprintln!("skipping: no promtool (run the suite with tests/run.sh)");
        return;
    }
    let work = agent::scratch::fresh_dir("agent-metrics").unwrap();
    let port = free_port();
    let _agent = Proc(
        Command::new(env!("CARGO_BIN_EXE_gpulens-agent"))
            .args(["run", "--backend", "simulated", "--node", "gpu-h100-01"])
            .args(["--spool-min-free-percent", "0"])
            .arg("--scenario")
            .arg(root().join("scenarios/k8s-mixed.toml"))
            // No collector: the agent spools, and its metrics say so.
            .args([
                "--collector",
                "http://127.0.0.1:9",
                "--token",
                "metrics-token-1",
            ])
            .args([
                "--interval",
                "200ms",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .arg("--state-dir")
            .arg(&work)
            .env("GPULENS_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut text = String::new();
    wait_until(
        "a scrape with GPU series",
        Duration::from_secs(30),
        || match get(port, "/metrics", "text/plain") {
            Some(r) if r.contains("gpulens_gpu_utilization_ratio{") => {
                text = r;
                true
            }
            _ => false,
        },
    );
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    if let Err(e) = promtool::check_metrics(body) {
        panic!("promtool check metrics: {e}\n{body}");
    }
    if let Err(e) = promtool::check_vocabulary(body) {
        panic!("label vocabulary: {e}");
    }
    let gpus = body
        .lines()
        .filter(|l| l.starts_with("gpulens_gpu_memory_total_bytes{"))
        .count();
    assert_eq!(gpus, 4, "gpu-h100-01's four GPUs");
    assert!(
        body.contains("gpulens_agent_collector_success{sampler=\"gpu\"} 1"),
        "{body}"
    );
    // OpenMetrics when asked for it.
    let om = get(
        port,
        "/metrics",
        "application/openmetrics-text;version=1.0.0",
    )
    .unwrap();
    assert!(om.trim_end().ends_with("# EOF"));
    let _ = std::fs::remove_dir_all(&work);
}
