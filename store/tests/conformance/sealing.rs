//! Sealed blocks answer as the raw rows did; a backlog seals in steps.

use model::time::now_ms;
use store::rollup::{HOUR_MS, MINUTE_MS, bucket_of};
use store::{Agg, Entity, Metric, Resolution, Retention, SeriesQuery, Store};

use crate::hour_ago;
use crate::support::{batches, fleet, no_team};

/// Every answer read from raw samples, as text with values to 9 significant digits (the mean
/// of a step may sum its samples in another order once they come from blocks).
pub(crate) async fn raw_answers(store: &Store, from: i64, to: i64, now: i64) -> Vec<String> {
    let r = Retention::default();
    let q = |metric, entity, step_ms, agg| SeriesQuery {
        metric,
        entity,
        from_ms: from,
        to_ms: to,
        step_ms,
        agg,
    };
    let mut out = Vec::new();
    let show = |s: store::Series| {
        s.points
            .iter()
            .map(|(t, v)| format!("{t}:{}", v.map_or("-".into(), |v| format!("{v:.9e}"))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for g in store.gpus(None).await.unwrap() {
        for (metric, agg) in [
            (Metric::GpuUtil, Agg::Mean),
            (Metric::Active, Agg::Mean),
            (Metric::Ratio(model::profiling::Ratio::SmActive), Agg::P95),
            (Metric::MemUsedBytes, Agg::Max),
            (Metric::PowerW, Agg::Mean),
        ] {
            let q = q(metric, Entity::Gpu(g.uuid.clone()), 10_000, agg);
            let s = store.series(&q, now, &r).await.unwrap();
            assert_eq!(s.resolution, Resolution::Raw);
            out.push(format!("{} {metric:?} {agg:?}: {}", g.uuid, show(s)));
        }
        out.push(format!(
            "holders {}: {:?}",
            g.uuid,
            store.mig_holders(&g.uuid, from, to).await.unwrap()
        ));
    }
    for node in ["whole", "mig", "shared"] {
        let q = q(Metric::GpuUtil, Entity::Node(node.into()), 30_000, Agg::Max);
        out.push(format!(
            "{node}: {}",
            show(store.series(&q, now, &r).await.unwrap())
        ));
    }
    for t in store.tenants().await.unwrap() {
        let q = q(
            Metric::SmUtil,
            Entity::Tenant(t.key().to_string()),
            20_000,
            Agg::Mean,
        );
        out.push(format!(
            "{}: {}",
            t.key(),
            show(store.series(&q, now, &r).await.unwrap())
        ));
    }
    let mut health: Vec<String> = store
        .latest_health()
        .await
        .unwrap()
        .iter()
        .map(|h| format!("{h:?}"))
        .collect();
    health.sort();
    out.extend(health);
    let mut orphans: Vec<String> = store
        .orphans(from, to)
        .await
        .unwrap()
        .iter()
        .map(|o| format!("{o:?}"))
        .collect();
    orphans.sort();
    out.extend(orphans);
    out
}

/// Sealing raw rows into blocks changes no answer read from raw samples (series at
/// raw resolution per GPU, node and tenant; MIG holders; latest health; orphans; counts), and
/// a rollup of minutes whose samples are partly sealed reads both forms.
pub(crate) async fn sealed_samples_answer_as_rows_did(store: &Store) {
    let f = fleet();
    let now = now_ms();
    let t0 = bucket_of(now - 2 * HOUR_MS, HOUR_MS);
    // Twenty minutes every 2 s, then the odd seconds of the same minutes from a second agent.
    let even: Vec<i64> = (0..600).map(|i| t0 + i * 2_000).collect();
    let odd: Vec<i64> = even.iter().map(|t| t + 1_000).collect();
    for b in batches(&f, "early", &even, 30, 2_000) {
        store.ingest(&b, t0, &no_team).await.unwrap();
    }
    store.rollup(now).await.unwrap();
    let (from, to) = (t0 - 7_000, t0 + 20 * MINUTE_MS + 13_000);
    let before = raw_answers(store, from, to, now).await;
    assert!(before.len() > 20, "{before:?}");
    let counts = store.counts().await.unwrap();
    let rows = counts.gpu_samples
        + counts.mig_samples
        + counts.process_samples
        + counts.allocation_samples;
    assert_eq!(store.seal(now).await.unwrap() as i64, rows);
    assert_eq!(store.seal(now).await.unwrap(), 0, "nothing is left to seal");
    assert_eq!(store.counts().await.unwrap(), counts);
    let after = raw_answers(store, from, to, now).await;
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(b, a);
    }
    assert_eq!(before.len(), after.len());

    // Late samples of sealed minutes: the rollup of those minutes reads the blocks and the
    // new rows together, and sealing them again adds a second block per series and minute.
    for b in batches(&f, "late", &odd, 30, 2_000) {
        store.ingest(&b, t0, &no_team).await.unwrap();
    }
    let stats = store.rollup(now).await.unwrap();
    assert_eq!(stats.minutes, 3 * 20);
    let minutes = store
        .rollups(
            store::Rollups::Minute,
            "test",
            "whole",
            t0,
            t0 + 20 * MINUTE_MS,
        )
        .await
        .unwrap();
    assert!(!minutes.gpus.is_empty());
    for (key, agg) in &minutes.gpus {
        assert_eq!(
            agg.samples, 60,
            "{key:?}: the sealed half and the late half"
        );
    }
    assert_eq!(store.seal(now).await.unwrap() as i64, rows);
    let all = store.counts().await.unwrap();
    assert_eq!(all.gpu_samples, 2 * counts.gpu_samples);
    let q = SeriesQuery {
        metric: Metric::GpuUtil,
        entity: Entity::Gpu(store.gpus(Some("whole")).await.unwrap()[0].uuid.clone()),
        from_ms: t0,
        to_ms: t0 + 20 * MINUTE_MS,
        step_ms: 1_000,
        agg: Agg::Mean,
    };
    let s = store.series(&q, now, &Retention::default()).await.unwrap();
    assert_eq!(s.points.len(), 1200);
    assert!(
        s.points.iter().all(|p| p.1.is_some()),
        "every second, from two blocks"
    );
}

/// The first seal after an upgrade finds up to the raw retention in rows; it seals
/// them an hour per transaction and loses nothing.
pub(crate) async fn a_backlog_of_rows_seals_in_steps(store: &Store) {
    let f = fleet();
    let now = now_ms();
    let t0 = hour_ago(5) + 17_000;
    let instants: Vec<i64> = (0..1100).map(|i| t0 + i * 10_000).collect();
    for b in batches(&f, "backlog", &instants, 60, 10_000) {
        store.ingest(&b, t0, &no_team).await.unwrap();
    }
    let counts = store.counts().await.unwrap();
    let rows = counts.gpu_samples
        + counts.mig_samples
        + counts.process_samples
        + counts.allocation_samples;
    assert_eq!(store.seal(now).await.unwrap() as i64, rows);
    assert_eq!(store.seal(now).await.unwrap(), 0);
    assert_eq!(store.counts().await.unwrap(), counts);
    let q = SeriesQuery {
        metric: Metric::PowerW,
        entity: Entity::Gpu(store.gpus(Some("whole")).await.unwrap()[0].uuid.clone()),
        from_ms: t0,
        to_ms: t0 + 1090 * 10_000,
        step_ms: 30_000,
        agg: Agg::Max,
    };
    let s = store.series(&q, now, &Retention::default()).await.unwrap();
    assert_eq!(s.resolution, Resolution::Raw);
    assert!(s.points.len() >= 363);
    assert!(s.points.iter().all(|p| p.1.is_some()), "{:?}", s.points);
}
