//! The listener's bounds with real sockets against `gpulens serve`: idle, trickling
//! and slow-body clients are closed after the configured timeouts while `/healthz` keeps
//! answering, and a connection over the cap gets 503 with Retry-After instead of a queue.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Killed, TempDir, free_port};

fn serve(dir: &TempDir, server: &str) -> (Killed, u16) {
    let config = dir.path().join("gpulens.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {:?}\n[[agents]]\ntoken = \"listener-token-0001\"\nnodes = [\"*\"]\n[server]\n{server}\n",
            dir.path().join("data")
        ),
    )
    .unwrap();
    let port = free_port();
    let child = Killed(
        Command::new(env!("CARGO_BIN_EXE_gpulens"))
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("GPULENS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while get(port, "/readyz").is_none_or(|r| !r.starts_with("HTTP/1.1 200")) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "serve did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, port)
}

/// One request on a fresh connection; the whole answer.
fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    Some(r)
}

/// Whether the server closed the connection (EOF, reset) within `within`, reading whatever it
/// sent first.
fn closed_by_server(s: &mut TcpStream, within: Duration) -> (bool, String) {
    s.set_read_timeout(Some(within)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (true, String::from_utf8_lossy(&got).into_owned()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (false, String::from_utf8_lossy(&got).into_owned());
            }
            Err(_) => return (true, String::from_utf8_lossy(&got).into_owned()),
        }
    }
}

#[test]
fn idle_trickling_and_slow_clients_are_closed_while_healthz_answers() {
    let dir = TempDir::new("listener");
    let (_server, port) = serve(&dir, "header_timeout = \"2s\"\nrequest_timeout = \"3s\"");
    // 2,000 connections that never send a byte.
    let mut idle: Vec<TcpStream> = (0..2000)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    // A header sent a byte at a time, and a body that never completes.
    let mut trickle = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut slow_body = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        slow_body,
        "POST /api/v1/ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer listener-token-0001\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"version\":"
    )
    .unwrap();
    // /healthz answers at once, with all of them open.
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        let t = Instant::now();
        let r = get(port, "/healthz").expect("healthz answers");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        slowest = slowest.max(t.elapsed());
        let _ = trickle.write_all(b"G");
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("slowest /healthz with 2,000 idle sockets open: {slowest:?}");
    assert!(
        slowest < Duration::from_secs(2),
        "healthz took {slowest:?} with idle sockets open"
    );
    // After the header timeout, the idle and trickling connections are gone.
    std::thread::sleep(Duration::from_secs(2));
    let (closed, _) = closed_by_server(&mut trickle, Duration::from_secs(5));
    assert!(closed, "a trickled header kept its connection");
    let still_open = idle
        .iter_mut()
        .take(200)
        .map(|s| closed_by_server(s, Duration::from_millis(50)).0)
        .filter(|closed| !closed)
        .count();
    assert_eq!(
        still_open, 0,
        "idle connections outlived the header timeout"
    );
    // The body that never completes gets 408 when the request timeout runs out.
    let (closed, answer) = closed_by_server(&mut slow_body, Duration::from_secs(10));
    assert!(closed, "a slow body kept its connection");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    // And the server still serves.
    assert!(get(port, "/healthz").unwrap().starts_with("HTTP/1.1 200"));
    // An over-long request target is the API's JSON 414, not hyper's bare answer.
    let long = format!("/api/v1/nodes?x={}", "a".repeat(16 * 1024));
    let answer = get(port, &long).unwrap();
    assert!(answer.starts_with("HTTP/1.1 414"), "{answer}");
    assert!(answer.contains("\"uri_too_long\""), "{answer}");
}

#[test]
fn a_connection_over_the_cap_gets_503_with_retry_after() {
    let dir = TempDir::new("listener-cap");
    let (_server, port) = serve(&dir, "max_connections = 4\nheader_timeout = \"30s\"");
    // The readiness probe's connection is closed; four more take every slot.
    std::thread::sleep(Duration::from_millis(200));
    let _held: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let r = get(port, "/api/v1/nodes").unwrap();
    assert!(r.starts_with("HTTP/1.1 503"), "{r}");
    assert!(r.to_ascii_lowercase().contains("retry-after: 1"), "{r}");
    assert!(r.contains("\"unavailable\""), "{r}");
}

/// The token the old manifests shipped (`CHANGE-ME-agent-token`, mounted as a Secret file)
/// and a short one are refused at start, before anything listens, with an error that names
/// the setting and not the value.
#[test]
fn serve_refuses_a_placeholder_or_short_agent_token_at_start() {
    let dir = TempDir::new("placeholder-token");
    let token_file = dir.path().join("agent-token");
    for (token, why) in [
        ("CHANGE-ME-agent-token\n", "placeholder"),
        ("s3cr3t-x\n", "at least 16 characters"),
    ] {
        std::fs::write(&token_file, token).unwrap();
        let config = dir.path().join("gpulens.toml");
        std::fs::write(
            &config,
            format!(
                "data_dir = {:?}\n[[agents]]\ntoken_file = {:?}\nnodes = [\"*\"]\n",
                dir.path().join("data"),
                token_file
            ),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_gpulens"))
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .env("GPULENS_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "serve started with {token:?}: {err}");
        assert!(
            err.contains("agents[0].token_file") && err.contains(why),
            "the error names the setting and why: {err}"
        );
        assert!(
            !err.contains(token.trim()),
            "the error shows the token: {err}"
        );
    }
}
