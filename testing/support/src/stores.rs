//! The stores' support, for the store's conformance suite and the collector's tests:
//! temporary directories, stores on both backends, fresh PostgreSQL databases on the suite's
//! throwaway server (GPULENS_TEST_PG), private PostgreSQL clusters for tests that must stop and
//! start the server, and a small simulated fleet.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use model::time::now_ms;
use model::wire::v1::Batch;
use simulator::{Fleet, Scenario};
use store::Store;

pub use crate::ports::free_port;

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

/// The suite's Citus cluster (a coordinator and two workers, tests/run.sh): the
/// coordinator's URL and the workers' ports, or None (skipping) when the suite did not start
/// one.
pub fn citus_base() -> Option<(String, Vec<u16>)> {
    let coordinator = std::env::var("GPULENS_TEST_CITUS");
    let workers = std::env::var("GPULENS_TEST_CITUS_WORKERS");
    match (coordinator, workers) {
        (Ok(url), Ok(w)) => Some((
            url,
            w.split(',')
                .map(|p| p.trim().parse().expect("GPULENS_TEST_CITUS_WORKERS: ports"))
                .collect(),
        )),
        _ if std::env::var("GPULENS_REQUIRE_CITUS").is_ok() => panic!(
            "GPULENS_REQUIRE_CITUS is set but GPULENS_TEST_CITUS(_WORKERS) is not: run the suite with tests/run.sh"
        ),
        _ => {
            eprintln!("skipping: no Citus cluster (run the suite with tests/run.sh)");
            None
        }
    }
}

/// A new, empty database on the suite's Citus cluster: created on the coordinator and on
/// each worker with the citus extension, the workers added to the coordinator's metadata,
/// then migrated (which distributes the tables, as `gpulens migrate` does on Citus).
pub async fn citus() -> Option<TestStore> {
    use sqlx::Connection;
    let (base, workers) = citus_base()?;
    let lock = citus_setup_lock(&base).await;
    let url = citus_database(&base, &workers).await;
    let store = Store::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    lock.close().await.unwrap();
    Some(TestStore { store, _dir: None })
}

/// Adding nodes touches cluster-wide objects (roles) on the workers, and two databases doing
/// it at once fail with "tuple concurrently updated": one test process at a time sets up its
/// database (and distributes its tables), holding this lock on the coordinator until it closes
/// the connection.
pub async fn citus_setup_lock(base: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut lock = sqlx::PgConnection::connect(base).await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(7210099)")
        .execute(&mut lock)
        .await
        .unwrap();
    lock
}

pub async fn citus_database(base: &str, workers: &[u16]) -> String {
    use sqlx::Connection;
    let url = fresh_database(base).await;
    let name = url.rsplit_once('/').unwrap().1.to_owned();
    for port in workers {
        let worker = format!("postgres://postgres@127.0.0.1:{port}/postgres");
        let mut conn = sqlx::PgConnection::connect(&worker).await.unwrap();
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .unwrap();
        let mut conn =
            sqlx::PgConnection::connect(&format!("postgres://postgres@127.0.0.1:{port}/{name}"))
                .await
                .unwrap();
        sqlx::raw_sql("CREATE EXTENSION citus")
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let port = url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|p| p.parse::<u16>().ok())
        .expect("GPULENS_TEST_CITUS: postgres://user@127.0.0.1:PORT/db");
    sqlx::raw_sql("CREATE EXTENSION citus")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("SELECT citus_set_coordinator_host('127.0.0.1', $1)")
        .bind(i32::from(port))
        .execute(&mut conn)
        .await
        .unwrap();
    for w in workers {
        sqlx::query("SELECT citus_add_node('127.0.0.1', $1)")
            .bind(i32::from(*w))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    url
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
