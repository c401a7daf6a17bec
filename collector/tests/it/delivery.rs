//! Delivery over real sockets: nothing lost and nothing doubled across a PostgreSQL restart
//! during ingest; the demo's backfill end to end. Named heavy_ so nextest runs them one at a
//! time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use collector::config::{IngestConfig, TeamsConfig};
use collector::state::AppState;
use collector_shared::agent_auth::Auth;
use ingest_client::{Backoff, Client, Delivered};
use store::{Retention, Store};

use crate::support::{PgCluster, TempDir, fleet};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_postgres_restart_during_ingest_loses_nothing_and_doubles_nothing() {
    let Some(pg) = PgCluster::start() else { return };
    let store = Store::connect(&pg.url()).await.unwrap();
    store.migrate().await.unwrap();
    let mut auth = Auth::default();
    auth.add("restart-token", vec!["*".into()], None);
    let state = AppState::new(
        store.clone(),
        auth,
        IngestConfig::default(),
        Retention::default(),
        TeamsConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(collector::server::serve(
        listener,
        state,
        std::future::pending(),
    ));

    let f = fleet();
    let node = f.node_index("whole").unwrap();
    let client = Client::new(&format!("http://{addr}"), "restart-token").unwrap();
    let n_batches: u64 = 60;
    let start = collector::now_ms() - 3_600_000;
    let retries = Arc::new(AtomicUsize::new(0));
    let unavailable = Arc::new(AtomicUsize::new(0));
    let pg = Arc::new(pg);
    let mut restarted = false;
    for seq in 1..=n_batches {
        if seq == 20 {
            // Stop the database mid-stream, keep sending, bring it back after a while: longer
            // than the pool's 5 s acquire timeout, which rides out shorter outages by itself.
            pg.stop();
            let pg = pg.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(8)).await;
                tokio::task::spawn_blocking(move || pg.start_again())
                    .await
                    .unwrap();
            });
            restarted = true;
        }
        let batch = f.batch(node, "restart", seq, &[start + seq as i64 * 1000], 1000);
        let (r, u) = (retries.clone(), unavailable.clone());
        let policy = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            give_up_after: Some(Duration::from_secs(60)),
        };
        let delivered = client
            .send_with_retry(&batch, policy, move |e, _| {
                r.fetch_add(1, Ordering::SeqCst);
                if e.to_string().contains("HTTP 503") {
                    u.fetch_add(1, Ordering::SeqCst);
                }
            })
            .await
            .unwrap();
        assert!(
            matches!(delivered, Delivered::Stored { .. }),
            "batch {seq}: {delivered:?}"
        );
    }
    assert!(restarted);
    assert!(
        unavailable.load(Ordering::SeqCst) > 0,
        "the collector answered 503 while the database was down"
    );
    // Every batch exactly once: two GPUs per snapshot, one snapshot per batch.
    let counts = store.counts().await.unwrap();
    assert_eq!(counts.gpu_samples, 2 * n_batches as i64);
    // A retry of an already stored batch after the restart is still recognised.
    let again = f.batch(node, "restart", 5, &[start + 5000], 1000);
    assert_eq!(
        client
            .send_with_retry(&again, Backoff::default(), |_, _| {})
            .await
            .unwrap(),
        Delivered::Duplicate
    );
    assert_eq!(
        store.counts().await.unwrap().gpu_samples,
        2 * n_batches as i64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_the_demo_backfills_history_over_http() {
    let dir = TempDir::new("demo");
    let args = collector::commands::cli::DemoArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_owned(),
        scenario: None,
        history: Duration::from_secs(3 * 3600),
        history_step: Duration::from_secs(60),
        no_live: true,
    };
    collector::commands::demo::run(args).await.unwrap();
    let store = Store::connect(&format!(
        "sqlite://{}",
        dir.path().join("gpulens.db").display()
    ))
    .await
    .unwrap();
    let nodes = store.nodes().await.unwrap();
    assert_eq!(nodes.len(), 6, "the default scenario's six nodes");
    let counts = store.counts().await.unwrap();
    // 20 GPUs, one sample a minute for about three hours (the oldest ten minutes are skipped).
    assert!(
        counts.gpu_samples >= 20 * 165 && counts.gpu_samples <= 20 * 180,
        "{counts:?}"
    );
    assert!(
        counts.gpu_rollup_1m > 0 && counts.gpu_rollup_1h > 0 && counts.tenant_rollup_1m > 0,
        "{counts:?}"
    );

    // `gpulens analyze` stores what it prints (the dashboard serves it at once); `--no-store`
    // only prints.
    let analyze = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpulens"))
            .args(["analyze", "--since", "3h", "--format", "json", "--data-dir"])
            .arg(dir.path())
            .args(extra)
            .env_remove("GPULENS_DATABASE_URL")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stderr).unwrap()
    };
    let before = store.latest_analysis_ms().await.unwrap();
    let said = analyze(&["--no-store"]);
    assert!(!said.contains("stored as the newest analysis"), "{said}");
    assert_eq!(store.latest_analysis_ms().await.unwrap(), before);
    let said = analyze(&[]);
    assert!(said.contains("stored as the newest analysis"), "{said}");
    let after = store.latest_analysis_ms().await.unwrap();
    assert!(after.is_some() && after > before, "{before:?} → {after:?}");

    // A week without data names the weeks that have some; a data directory without a
    // database is said to be one, and none is made there.
    let gpulens = |args: &[&str], data_dir: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpulens"))
            .args(args)
            .arg("--data-dir")
            .arg(data_dir)
            .env_remove("GPULENS_DATABASE_URL")
            .env_remove("GPULENS_CONFIG")
            .output()
            .unwrap();
        assert!(!out.status.success(), "gpulens {args:?} succeeded");
        String::from_utf8(out.stderr).unwrap()
    };
    let err = gpulens(&["report", "--week", "2020-W01", "--no-store"], dir.path());
    let utc = collector::reports::week::zone("UTC").unwrap();
    let this_week = collector::reports::week::IsoWeek::containing(model::time::now_ms(), &utc);
    assert!(
        err.contains("error: no data for 2020-W01")
            && err.contains(&this_week.to_string())
            && (err.contains("pick one of those with --week") || err.contains("try again then")),
        "{err}"
    );
    let typo = dir.path().join("typo");
    for command in [&["analyze"][..], &["report"], &["labels", "plan"]] {
        let err = gpulens(command, &typo);
        assert!(
            err.contains(&format!(
                "no database at {}",
                typo.join("gpulens.db").display()
            )),
            "gpulens {command:?}: {err}"
        );
        assert!(
            !typo.exists(),
            "gpulens {command:?} made {}",
            typo.display()
        );
    }
    // A configuration's database is a collector's: the error does not offer the demo.
    let config = dir.path().join("collector.toml");
    let toml = format!("data_dir = {:?}\n", typo.display().to_string());
    std::fs::write(&config, toml).unwrap();
    let err = gpulens(&["analyze", "--config", config.to_str().unwrap()], &typo);
    assert!(
        err.contains("check the path") && !err.contains("gpulens demo"),
        "{err}"
    );
    assert!(!typo.exists());
}
