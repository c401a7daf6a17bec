//! Delivery end to end with real processes: the `gpulens` collector on PostgreSQL and
//! `gpulens-agent run` (simulated backend, 10 Hz). The collector is down for 20 s (200 batches,
//! the volume of a 3⅓-minute outage at 1 Hz), killed with SIGKILL, and the agent is killed with
//! SIGKILL and restarted. Afterwards every sample is in PostgreSQL exactly once, checked
//! against the agent's sequence numbers. Needs the suite's PostgreSQL (tests/run.sh).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().and_then(Path::parent).unwrap().join(name);
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (tests/run.sh does)",
        p.display()
    );
    p
}

fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([url, "-tAq", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

pub(crate) use test_support::free_port;

pub(crate) fn healthy(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut r = String::new();
    let _ = s.read_to_string(&mut r);
    r.starts_with("HTTP/1.1 200")
}

pub(crate) fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) struct Proc(pub(crate) Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn collector(db: &str, config: &Path, port: u16) -> Proc {
    let child = Command::new(workspace_bin("gpulens"))
        .args(["serve", "--config"])
        .arg(config)
        .args([
            "--database-url",
            db,
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .env("GPULENS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = Proc(child);
    wait_until("the collector", Duration::from_secs(30), || healthy(port));
    p
}

fn agent(port: u16, state: &Path, interval: &str) -> Proc {
    Proc(
        Command::new(env!("CARGO_BIN_EXE_gpulens-agent"))
            .args([
                "run",
                "--backend",
                "simulated",
                "--node",
                "gpu-h100-01",
                "--token",
                "delivery-token-1",
                "--listen",
                "off",
                // The state file then holds the exact next sequence number.
                "--seq-block",
                "1",
                // The host's free disk space is not this test's subject.
                "--spool-min-free-percent",
                "0",
            ])
            .arg("--scenario")
            .arg(root().join("scenarios/k8s-mixed.toml"))
            .args([
                "--collector",
                &format!("http://127.0.0.1:{port}"),
                "--interval",
                interval,
            ])
            .arg("--state-dir")
            .arg(state)
            .env("GPULENS_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// The agent's persisted (agent id, next sequence number) (exact with --seq-block 1).
fn agent_state(state: &Path) -> (String, i64) {
    let text = std::fs::read_to_string(state.join("agent-state")).unwrap();
    let mut p = text.split_whitespace();
    (
        p.next().unwrap().to_owned(),
        p.next().unwrap().parse().unwrap(),
    )
}

#[test]
fn heavy_outages_and_kills_lose_nothing_and_store_nothing_twice() {
    let Ok(base) = std::env::var("GPULENS_TEST_PG") else {
        assert!(
            std::env::var("GPULENS_REQUIRE_PG").is_err(),
            "GPULENS_TEST_PG is not set"
        );
        eprintln!("skipping: no PostgreSQL (run the suite with tests/run.sh)");
        return;
    };
    let name = format!("delivery_{}", std::process::id());
    psql(&base, &format!("CREATE DATABASE {name}"));
    let db = format!("{}/{name}", base.rsplit_once('/').unwrap().0);
    let work = agent::scratch::fresh_dir("delivery").unwrap();
    let config = work.join("collector.toml");
    std::fs::write(
        &config,
        "[[agents]]\ntoken = \"delivery-token-1\"\nnodes = [\"gpu-h100-01\"]\n",
    )
    .unwrap();
    let state = work.join("agent");
    let port = free_port();

    let mut c = collector(&db, &config, port);
    let mut a = agent(port, &state, "100ms");
    std::thread::sleep(Duration::from_secs(2));
    // The collector is killed outright and stays down while the agent keeps sampling.
    c.0.kill().unwrap();
    c.0.wait().unwrap();
    std::thread::sleep(Duration::from_secs(20));
    let (_, during) = agent_state(&state);
    c = collector(&db, &config, port);
    std::thread::sleep(Duration::from_secs(3));
    // The agent is killed outright and restarted on the same state directory.
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    a = agent(port, &state, "100ms");
    std::thread::sleep(Duration::from_secs(2));
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    // One more start to drain what is left; with a long interval, and skipping the instant it
    // starts in, it samples nothing new.
    a = agent(port, &state, "1h");
    std::thread::sleep(Duration::from_millis(500));
    let (agent_id, next_seq) = agent_state(&state);
    let last_created = next_seq - 1;
    let stored = || {
        psql(
            &db,
            &format!(
                "SELECT coalesce(max(last_seq), 0) FROM agent_streams WHERE agent_id = '{agent_id}'"
            ),
        )
        .parse::<i64>()
        .unwrap()
    };
    // Drained: every batch created is stored, or — when a SIGKILL came between reserving a
    // sequence number and spooling its batch (the in-memory loss the check below allows) —
    // nothing new has been stored for 3 s within that allowance.
    let mut progress = (stored(), Instant::now());
    wait_until("the backlog to drain", Duration::from_secs(90), || {
        let now = stored();
        if now != progress.0 {
            progress = (now, Instant::now());
        }
        now >= last_created
            || (now >= last_created - 2 && progress.1.elapsed() > Duration::from_secs(3))
    });
    drop(a);
    drop(c);

    assert!(
        during > 200,
        "the agent sampled through the outage ({during})"
    );
    let rows: i64 = psql(
        &db,
        "SELECT count(*) FROM gpu_samples WHERE node = 'gpu-h100-01'",
    )
    .parse()
    .unwrap();
    let instants: i64 = psql(
        &db,
        "SELECT count(DISTINCT ts) FROM gpu_samples WHERE node = 'gpu-h100-01'",
    )
    .parse()
    .unwrap();
    let per_instant: Vec<String> = psql(&db, "SELECT DISTINCT c FROM (SELECT count(*) AS c FROM gpu_samples WHERE node = 'gpu-h100-01' GROUP BY ts) x").lines().map(str::to_owned).collect();
    // Nothing twice: every instant has exactly one row per GPU (4 GPUs on this node).
    let detail = psql(
        &db,
        "SELECT c, count(*) FROM (SELECT ts, count(*) AS c FROM gpu_samples WHERE node = 'gpu-h100-01' GROUP BY ts) x GROUP BY c",
    );
    assert_eq!(
        per_instant,
        ["4"],
        "some instant was stored more or less than once per GPU: {detail}"
    );
    assert_eq!(rows, 4 * instants);
    // Nothing lost: one instant per batch, and every sequence number the agent took is there,
    // except at most the batch each SIGKILL caught in memory (two kills).
    assert!(
        instants <= last_created && instants >= last_created - 2,
        "{instants} instants for {last_created} batches created"
    );
    std::fs::remove_dir_all(&work).unwrap();
}
