//! What adding a DCGM profiling ratio takes, shown with a stand-in one: with the feature
//! `dummy-field`, `model::profiling` declares `dummy_active` (its member of `Ratio`, its row
//! of `RATIOS`, its field in `GpuSample` and `MigSample`); its migrations are the statements
//! below. Nothing else names it, and it goes the whole way: the wire (JSON and validation),
//! the raw rows, hot and sealed, the minute and hour rollups and the series at every
//! resolution.
//!
//! Run with `cargo nextest run --workspace --features store/dummy-field --test dummy_field`
//! (the test suite does, tests/run.sh); without the feature this file is empty.
#![cfg(feature = "dummy-field")]

use model::profiling::Ratio;
use model::rollup::{HOUR_MS, bucket_of};
use model::time::now_ms;
use model::wire::v1::{Batch, Limits};
use sqlx::Connection;
use store::{Agg, Entity, Metric, Resolution, Retention, SeriesQuery, Store};
use test_support::stores::{TempDir, batches, fleet, no_team};

/// The stand-in's migrations, as its two migration files would hold them (SQLite's).
const MIGRATION: &[&str] = &[
    "ALTER TABLE gpu_samples ADD COLUMN dummy_active real",
    "ALTER TABLE mig_samples ADD COLUMN dummy_active real",
    "ALTER TABLE gpu_rollup_1m ADD COLUMN dummy_active_n integer NOT NULL DEFAULT 0",
    "ALTER TABLE gpu_rollup_1m ADD COLUMN dummy_active_sum real NOT NULL DEFAULT 0",
    "ALTER TABLE gpu_rollup_1h ADD COLUMN dummy_active_n integer NOT NULL DEFAULT 0",
    "ALTER TABLE gpu_rollup_1h ADD COLUMN dummy_active_sum real NOT NULL DEFAULT 0",
    "ALTER TABLE cluster_rollup_1h ADD COLUMN dummy_active_n integer NOT NULL DEFAULT 0",
    "ALTER TABLE cluster_rollup_1h ADD COLUMN dummy_active_sum real NOT NULL DEFAULT 0",
];

/// The stand-in's reading at second `i` of the history: a ramp, so every step's mean differs.
fn reading(i: usize) -> f32 {
    (i % 100) as f32 / 100.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ratio_declared_once_goes_from_the_wire_to_every_series() {
    assert_eq!(Ratio::parse("dummy_active"), Some(Ratio::DummyActive));
    let dir = TempDir::new("dummy-field");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = Store::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    for sql in MIGRATION {
        sqlx::query(sql).execute(&mut db).await.unwrap();
    }

    let now = now_ms();
    let t0 = bucket_of(now - 3 * HOUR_MS, HOUR_MS);
    let instants: Vec<i64> = (0..360).map(|i| t0 + i * 10_000).collect();
    let f = fleet();
    let mut second = 0;
    for mut b in batches(&f, "dummy", &instants, 60, 10_000) {
        for s in &mut b.snapshots {
            for g in &mut s.gpus {
                g.dummy_active = Some(reading(second));
                second += 1;
            }
        }
        // Through the wire: JSON out and in, then the collector's validation.
        let json = serde_json::to_string(&b).unwrap();
        assert!(json.contains("\"dummy_active\":"), "the wire carries it");
        let b: Batch = serde_json::from_str(&json).unwrap();
        b.validate(&Limits::default(), now).unwrap();
        store.ingest(&b, t0, &no_team).await.unwrap();
    }
    // An out-of-range reading is refused at the wire like any ratio's.
    let mut bad = batches(&f, "dummy", &instants[..1], 1, 10_000).remove(0);
    bad.snapshots[0].gpus[0].dummy_active = Some(7.0);
    let err = bad
        .validate(&Limits::default(), now)
        .unwrap_err()
        .to_string();
    assert!(err.contains("dummy_active"), "{err}");

    store.rollup(now).await.unwrap();
    let gpu = store.gpus(Some("whole")).await.unwrap()[0].uuid.clone();
    let metric = Metric::parse("dummy_active").expect("a series of its own");
    assert_eq!(metric, Metric::Ratio(Ratio::DummyActive));
    let retention = Retention::default();
    let series = |entity: Entity, step_ms: i64| {
        let q = SeriesQuery {
            metric,
            entity,
            from_ms: t0,
            to_ms: t0 + HOUR_MS,
            step_ms,
            agg: Agg::Mean,
        };
        let (store, retention) = (&store, &retention);
        async move { store.series(&q, now, retention).await.unwrap() }
    };
    let mean = |pts: &[(i64, Option<f64>)]| {
        let known: Vec<f64> = pts.iter().filter_map(|p| p.1).collect();
        assert!(!known.is_empty(), "no values");
        known.iter().sum::<f64>() / known.len() as f64
    };

    let raw = series(Entity::Gpu(gpu.clone()), 10_000).await;
    assert_eq!(raw.resolution, Resolution::Raw);
    assert_eq!(raw.points.len(), 360);
    assert!(
        raw.points.iter().all(|p| p.1.is_some()),
        "every second read"
    );
    let minute = series(Entity::Gpu(gpu.clone()), 300_000).await;
    assert_eq!(minute.resolution, Resolution::Minute);
    let hour = series(Entity::Gpu(gpu.clone()), HOUR_MS).await;
    assert_eq!(hour.resolution, Resolution::Hour);
    let cluster = series(Entity::Fleet, HOUR_MS).await;
    let want = mean(&raw.points);
    for (what, got) in [
        ("minute", mean(&minute.points)),
        ("hour", mean(&hour.points)),
    ] {
        assert!((got - want).abs() < 1e-3, "{what}: {got} against {want}");
    }
    assert!(mean(&cluster.points) > 0.0, "the cluster rollup keeps it");

    // Sealed, the raw hour answers as the rows did.
    store.seal(now).await.unwrap();
    let sealed = series(Entity::Gpu(gpu), 10_000).await;
    assert_eq!(sealed.points, raw.points);
}
