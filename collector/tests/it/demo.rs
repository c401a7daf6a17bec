//! `gpulens demo` stops on the first Ctrl-C or SIGTERM in every phase — loading the history,
//! analysing it, streaming live samples — within a few seconds, and says where it stopped.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Killed, TempDir, free_port};

/// Starts a demo, waits until its output shows `marker`, sends `signal` once, and returns
/// how long it took to exit and everything it printed.
fn signal_when(marker: &str, signal: &str, history: &str) -> (Duration, String) {
    let dir = TempDir::new("demo-stop");
    let (out, err) = (dir.path().join("out.log"), dir.path().join("err.log"));
    let mut demo = Killed(
        Command::new(env!("CARGO_BIN_EXE_gpulens"))
            .args(["demo", "--history", history, "--listen"])
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env("GPULENS_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap(),
    );
    let printed = || {
        std::fs::read_to_string(&out).unwrap_or_default()
            + &std::fs::read_to_string(&err).unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    while !printed().contains(marker) {
        assert!(
            demo.0.try_wait().unwrap().is_none(),
            "the demo ended before {marker:?}: {}",
            printed()
        );
        assert!(Instant::now() < deadline, "no {marker:?}: {}", printed());
        std::thread::sleep(Duration::from_millis(50));
    }
    let sent = Instant::now();
    let kill = Command::new("kill")
        .args(["-s", signal, &demo.0.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    loop {
        if let Some(status) = demo.0.try_wait().unwrap() {
            assert!(status.success(), "{status}: {}", printed());
            return (sent.elapsed(), printed());
        }
        assert!(
            sent.elapsed() < Duration::from_secs(30),
            "still running 30 s after one {signal}: {}",
            printed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn heavy_the_demo_stops_on_the_first_signal_in_every_phase() {
    // Loading a week of history (minutes of work): Ctrl-C stops it where it is.
    let (took, out) = signal_when("history is loading", "INT", "7d");
    assert!(out.contains("stopped while loading the history"), "{out}");
    assert!(!out.contains("history loaded"), "{out}");
    assert!(took < Duration::from_secs(10), "{took:?}: {out}");

    // Right after the history is in, while it is analysed: SIGTERM.
    let (took, out) = signal_when("history loaded", "TERM", "2h");
    assert!(took < Duration::from_secs(10), "{took:?}: {out}");
    assert!(!out.contains("retrying"), "{out}");

    // Streaming live samples.
    let (took, out) = signal_when("streaming live samples", "TERM", "1h");
    assert!(took < Duration::from_secs(10), "{took:?}: {out}");
}
