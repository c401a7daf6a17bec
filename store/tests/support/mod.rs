//! Test support shared by the store's conformance suite and the collector's tests (which
//! include this file): temporary directories, stores on both backends, fresh PostgreSQL
//! databases on the suite's throwaway server (GPULENS_TEST_PG), private PostgreSQL clusters
//! for tests that must stop and start the server, and a small simulated fleet.

#![allow(dead_code)] // each test crate uses its own part

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use model::time::now_ms;
use model::wire::v1::Batch;
use simulator::{Fleet, Scenario};
use store::Store;

#[path = "../../../tests/support/ports.rs"]
mod ports;
pub use ports::free_port;

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "gpulens-{tag}-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst),
            now_ms()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A store and whatever must live as long as it.
pub struct TestStore {
    pub store: Store,
    _dir: Option<TempDir>,
}

pub async fn sqlite() -> TestStore {
    let dir = TempDir::new("sqlite");
    let store = Store::connect(&format!("sqlite://{}", dir.path().join("t.db").display()))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    TestStore {
        store,
        _dir: Some(dir),
    }
}

/// The suite's PostgreSQL server, or None (skipping) when the suite did not start one.
pub fn pg_base() -> Option<String> {
    match std::env::var("GPULENS_TEST_PG") {
        Ok(url) => Some(url),
        Err(_) if std::env::var("GPULENS_REQUIRE_PG").is_ok() => {
            panic!(
                "GPULENS_REQUIRE_PG is set but GPULENS_TEST_PG is not: run the suite with tests/run.sh"
            )
        }
        Err(_) => {
            eprintln!("skipping: no PostgreSQL (run the suite with tests/run.sh)");
            None
        }
    }
}

/// A new, empty, migrated database on the suite's PostgreSQL server.
pub async fn postgres() -> Option<TestStore> {
    let base = pg_base()?;
    let url = fresh_database(&base).await;
    let store = Store::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    Some(TestStore { store, _dir: None })
}

pub async fn fresh_database(base: &str) -> String {
    use sqlx::Connection;
    static N: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "t_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst),
        now_ms() % 1_000_000
    );
    let mut conn = sqlx::PgConnection::connect(base).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let (prefix, _) = base.rsplit_once('/').unwrap();
    format!("{prefix}/{name}")
}

/// A PostgreSQL cluster of a test's own, which it may stop and start.
pub struct PgCluster {
    dir: TempDir,
    bin: PathBuf,
    pub port: u16,
    as_postgres: bool,
}

impl PgCluster {
    pub fn start() -> Option<PgCluster> {
        let bin = match std::env::var("GPULENS_TEST_PG_BIN") {
            Ok(b) => PathBuf::from(b),
            Err(_) if std::env::var("GPULENS_REQUIRE_PG").is_ok() => {
                panic!("GPULENS_TEST_PG_BIN is not set")
            }
            Err(_) => {
                eprintln!("skipping: no PostgreSQL binaries (run the suite with tests/run.sh)");
                return None;
            }
        };
        let dir = TempDir::new("pgcluster");
        let as_postgres =
            String::from_utf8_lossy(&Command::new("id").arg("-u").output().unwrap().stdout).trim()
                == "0";
        if as_postgres {
            run(Command::new("chown").arg("postgres").arg(dir.path()));
        }
        let port = free_port();
        let c = PgCluster {
            dir,
            bin,
            port,
            as_postgres,
        };
        run(c
            .pg("initdb")
            .args(["--auth=trust", "-U", "postgres", "-E", "UTF8", "-D"])
            .arg(c.data()));
        c.start_again();
        Some(c)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn start_again(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        run(self
            .pg("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("log"))
            .args(["-w", "-o", &opts, "start"]));
    }

    /// Stops the server the hard way: every connection is cut.
    pub fn stop(&self) {
        run(self
            .pg("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"]));
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self
            .pg("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

fn run(c: &mut Command) {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A small fleet with every sharing mode and all three tenant kinds.
pub const SCENARIO: &str = r#"
name = "conformance"
cluster = "test"
seed = 11
[[nodes]]
name = "whole"
model = "H100-80GB"
gpus = 2
dcgm = true
[[nodes]]
name = "mig"
model = "H100-80GB"
gpus = 1
sharing = "mig"
mig_layout = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
[[nodes]]
name = "shared"
model = "A100-80GB"
gpus = 1
sharing = "time_slicing"
replicas = 2
orchestrator = "slurm"
[[tenants]]
name = "train"
kind = "pod"
namespace = "ml"
node = "whole"
devices = ["0"]
pattern = "steady_training"
mem_gib = 60
[[tenants]]
name = "idle"
kind = "pod"
namespace = "ml"
node = "whole"
devices = ["1"]
pattern = "idle_holding_memory"
[[tenants]]
name = "nb"
kind = "pod"
namespace = "nb"
node = "mig"
devices = ["0/mig/0"]
pattern = "bursty_batch"
[[tenants]]
name = "alice"
kind = "slurm_job"
account = "physics"
node = "shared"
devices = ["0::0"]
pattern = "steady_training"
[[tenants]]
name = "bob"
kind = "host_user"
node = "shared"
devices = ["0::1"]
pattern = "steady_training"
intensity = 0.5
"#;

pub fn fleet() -> Fleet {
    Fleet::new(Scenario::from_toml(SCENARIO).unwrap())
}

/// Batches for every node covering `instants`, `per_batch` snapshots each, with sequence
/// numbers from 1 per node.
pub fn batches(
    fleet: &Fleet,
    agent: &str,
    instants: &[i64],
    per_batch: usize,
    interval_ms: u32,
) -> Vec<Batch> {
    let mut out = Vec::new();
    for node in 0..fleet.nodes.len() {
        for (i, chunk) in instants.chunks(per_batch).enumerate() {
            out.push(fleet.batch(node, agent, i as u64 + 1, chunk, interval_ms));
        }
    }
    out
}

pub fn no_team(_: &model::Tenant) -> Option<String> {
    None
}
