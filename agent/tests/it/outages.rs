//! The agent's own losses, with real processes: `gpulens-agent run` (simulated backend)
//! shipping to the ingest stand-in (`agent::bench::standin::Receiver`, real sockets) that is made
//! slow, taken down, or given a full disk to spool on.
//! - a small spool and a slow collector: every slot that never arrives is counted, exactly;
//! - a full state directory (a tmpfs the test fills): the agent keeps running, survives a
//!   restart, and delivers again once space returns;
//! - restarts: the slot the agent starts in is sampled, and no slot twice.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent::bench::standin::{Arrival, Receiver};

use crate::delivery::{Proc, free_port, root, wait_until};

pub(crate) fn agent(collector: &str, state: &Path, interval: &str, extra: &[&str]) -> Proc {
    // The host's free disk space is not these tests' subject (a CI host at 88 % used made the
    // default 15 % reserve drop batches); the full-disk test sets its own reserve.
    let reserve: &[&str] = if extra.contains(&"--spool-min-free-percent") {
        &[]
    } else {
        &["--spool-min-free-percent", "0"]
    };
    Proc(
        Command::new(env!("CARGO_BIN_EXE_gpulens-agent"))
            .args(["run", "--backend", "simulated", "--node", "gpu-h100-01"])
            .args(reserve)
            .arg("--scenario")
            .arg(root().join("scenarios/k8s-mixed.toml"))
            .args([
                "--collector",
                collector,
                "--token",
                "t",
                "--interval",
                interval,
            ])
            .arg("--state-dir")
            .arg(state)
            .args(extra)
            .env("GPULENS_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// The agent's /metrics, or None while it does not answer.
pub(crate) fn metrics(port: u16) -> Option<String> {
    crate::metrics::get(port, "/metrics", "text/plain")
}

/// The sum of a metric's samples whose line starts with `prefix`.
fn value(text: &str, prefix: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Batches lost inside the agent: dropped from the spool for any reason but a refusal by the
/// collector, plus slots that got no sample.
pub(crate) fn lost(text: &str) -> u64 {
    value(
        text,
        "gpulens_agent_batches_dropped_total{reason=\"spool_full\"}",
    ) + value(
        text,
        "gpulens_agent_batches_dropped_total{reason=\"disk_full\"}",
    ) + value(
        text,
        "gpulens_agent_batches_dropped_total{reason=\"damaged\"}",
    ) + value(
        text,
        "gpulens_agent_batches_dropped_total{reason=\"spool_error\"}",
    ) + value(text, "gpulens_agent_samples_missed_total")
}

/// Each batch once (a resend after a lost acknowledgement arrives twice, as the collector
/// would see it, and is recognised there by its sequence number).
pub(crate) fn distinct_ts(arrivals: &[Arrival]) -> Vec<i64> {
    let mut seen = BTreeSet::new();
    let mut ts = Vec::new();
    for a in arrivals {
        if seen.insert((a.agent_id.clone(), a.seq)) {
            ts.extend(&a.ts);
        }
    }
    ts.sort_unstable();
    ts
}

pub(crate) fn work_dir(tag: &str) -> PathBuf {
    agent::scratch::fresh_dir(&format!("outage-{tag}")).unwrap()
}

#[test]
fn a_small_spool_and_a_slow_collector_count_every_missing_slot_exactly() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let rx = rt.block_on(Receiver::start(0)).unwrap();
    rx.set_delay(Duration::from_millis(2500));
    let work = work_dir("slow");
    let port = free_port();
    let a = agent(
        &rx.url(),
        &work,
        "100ms",
        &[
            "--spool-max-bytes",
            "102400",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ],
    );
    // Ten samples a second against 0.4 deliveries a second: the spool overflows.
    wait_until("the spool to overflow", Duration::from_secs(60), || {
        metrics(port).is_some_and(|m| lost(&m) > 20)
    });
    rx.set_delay(Duration::ZERO);
    // The backlog drains; then the counters hold still for a second.
    let settled = Instant::now();
    let counted = loop {
        assert!(settled.elapsed() < Duration::from_secs(60), "never settled");
        std::thread::sleep(Duration::from_millis(500));
        let Some(before) = metrics(port) else {
            continue;
        };
        if value(&before, "gpulens_agent_spool_backlog_bytes") > 4096 {
            continue;
        }
        std::thread::sleep(Duration::from_secs(1));
        let Some(after) = metrics(port) else { continue };
        if lost(&before) == lost(&after) {
            break lost(&after);
        }
    };
    let ts = distinct_ts(&rx.arrivals());
    drop(a);
    let unique: BTreeSet<i64> = ts.iter().copied().collect();
    assert_eq!(unique.len(), ts.len(), "a slot arrived twice");
    let (first, last) = (ts[0], *ts.last().unwrap());
    let missing = ((last - first) / 100 + 1) as u64 - ts.len() as u64;
    assert!(missing > 0, "nothing was lost, so nothing was tested");
    assert_eq!(
        counted, missing,
        "the agent counted {counted} lost batches; {missing} slots never arrived"
    );
    std::fs::remove_dir_all(&work).unwrap();
}

/// A small tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "gpulens-test"])
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes into `path` until the filesystem refuses.
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    for chunk in [64 * 1024, 4096, 512, 1] {
        let buf = vec![0xAAu8; chunk];
        while f.write_all(&buf).is_ok() {}
    }
    let _ = f.sync_all();
}

#[test]
fn a_full_disk_never_stops_the_agent_and_delivery_resumes_when_space_returns() {
    let work = work_dir("full");
    let Some(fs) = Tmpfs::mount(&work.join("fs"), "2m") else {
        assert!(
            std::env::var("GPULENS_REQUIRE_MOUNT").is_err(),
            "cannot mount a tmpfs (tests/run.sh sets GPULENS_REQUIRE_MOUNT when run as root)"
        );
        eprintln!("skipping: mounting a tmpfs needs root");
        return;
    };
    let state = fs.0.join("state");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut rx = rt.block_on(Receiver::start(0)).unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "--listen",
        listen.as_str(),
        // The spool's own reserve on the small disk, as in production.
        "--spool-min-free-percent",
        "15",
    ];
    let mut a = agent(&rx.url(), &state, "100ms", &args);
    wait_until("first deliveries", Duration::from_secs(30), || {
        rx.arrivals().len() >= 5
    });
    // The collector goes away, the spool grows, and something else fills the disk.
    rx.go_down();
    fill(&fs.0.join("filler"));
    wait_until(
        "the agent to meet the full disk",
        Duration::from_secs(30),
        || {
            metrics(port).is_some_and(|m| {
                value(
                    &m,
                    "gpulens_agent_batches_dropped_total{reason=\"disk_full\"}",
                ) > 0
            })
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        a.0.try_wait().unwrap().is_none(),
        "the agent exited on a full disk"
    );
    // A restart on the still-full disk: it starts and stays up (it used to exit in 50 ms).
    drop(a);
    a = agent(&rx.url(), &state, "100ms", &args);
    wait_until(
        "the restarted agent's metrics",
        Duration::from_secs(30),
        || metrics(port).is_some(),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        a.0.try_wait().unwrap().is_none(),
        "the restarted agent exited on a full disk"
    );
    let m = metrics(port).unwrap();
    assert!(
        m.contains("gpulens_agent_disk_full 1"),
        "the full disk shows on /metrics"
    );
    // Space returns, and so does the collector: new samples arrive.
    std::fs::remove_file(fs.0.join("filler")).unwrap();
    let back = agent::shipper::now_ms();
    rt.block_on(rx.come_back()).unwrap();
    wait_until(
        "samples taken after space returned",
        Duration::from_secs(30),
        || {
            rx.arrivals()
                .iter()
                .any(|x| x.ts.iter().any(|&t| t > back + 1000))
        },
    );
    let ts = distinct_ts(&rx.arrivals());
    let unique: BTreeSet<i64> = ts.iter().copied().collect();
    assert_eq!(unique.len(), ts.len(), "a slot arrived twice");
    drop(a);
    drop(fs);
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_restart_samples_the_slot_it_starts_in_and_never_one_twice() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let rx = rt.block_on(Receiver::start(0)).unwrap();
    let work = work_dir("restart");
    let newest = |rx: &Receiver| rx.arrivals().iter().flat_map(|a| a.ts.clone()).max();
    let mut a = agent(&rx.url(), &work, "2s", &[]);
    wait_until("two samples", Duration::from_secs(30), || {
        rx.arrivals().len() >= 2
    });
    // Killed just after sampling a slot, restarted within it: that slot is not taken again.
    let before = rx.arrivals().len();
    wait_until("a new sample", Duration::from_secs(10), || {
        rx.arrivals().len() > before
    });
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    a = agent(&rx.url(), &work, "2s", &[]);
    let sampled = newest(&rx).unwrap();
    wait_until(
        "a sample of the restarted agent",
        Duration::from_secs(10),
        || newest(&rx) > Some(sampled),
    );
    // Killed after sampling a slot, restarted after the next one began: it samples that one.
    let last = newest(&rx).unwrap();
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    let next = last + 2000;
    let now = agent::shipper::now_ms();
    if next + 150 > now {
        std::thread::sleep(Duration::from_millis((next + 150 - now) as u64));
    }
    let _a = agent(&rx.url(), &work, "2s", &[]);
    wait_until(
        "the slot the agent started in",
        Duration::from_secs(10),
        || newest(&rx) >= Some(next),
    );
    let ts = distinct_ts(&rx.arrivals());
    let unique: BTreeSet<i64> = ts.iter().copied().collect();
    assert_eq!(unique.len(), ts.len(), "a slot was sampled twice: {ts:?}");
    assert!(
        ts.windows(2).all(|w| w[1] - w[0] == 2000),
        "a slot was skipped across the restarts: {ts:?}"
    );
    std::fs::remove_dir_all(&work).unwrap();
}
