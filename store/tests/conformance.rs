//! One conformance suite, run against both backends: the same behaviour is required of the
//! embedded SQLite store, of PostgreSQL and of a Citus cluster (PostgreSQL distributed over a
//! coordinator and two workers). PostgreSQL and Citus run when the suite started them
//! (GPULENS_TEST_PG, GPULENS_TEST_CITUS, see tests/run.sh); otherwise those tests say they skip.

use std::collections::HashMap;

mod support;

use model::inventory::{GpuInfo, MigInstanceInfo};
use model::time::now_ms;
use store::rollup::{HOUR_MS, MINUTE_MS, bucket_of};
use store::{Agg, Entity, IngestOutcome, Metric, Resolution, Retention, Scope, SeriesQuery, Store};

use support::{batches, fleet, no_team};

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let t = crate::support::sqlite().await;
                    super::$name(&t.store).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(t) = crate::support::postgres().await {
                        super::$name(&t.store).await;
                    }
                }
            )*
        }
        mod citus {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(t) = crate::support::citus().await {
                        super::$name(&t.store).await;
                    }
                }
            )*
        }
    };
}

conformance!(
    stores_batches_and_lists_inventory,
    replays_are_stored_once,
    concurrent_batches_are_each_stored_once,
    rollups_match_raw_data,
    an_hour_rolled_up_in_pieces_is_its_minutes_merged,
    interference_minutes_are_the_wanted_slice_of_minute_rollups,
    series_use_the_right_resolution,
    retention_drops_old_data_per_resolution,
    missing_measurements_stay_null,
    alert_state_and_outbox_round_trip,
    remote_write_journal_keeps_what_waits,
    sealed_samples_answer_as_rows_did,
    a_backlog_of_rows_seals_in_steps,
    waiting_episodes_are_kept_current_and_read_by_overlap,
    reclaim_cases_move_once_and_keep_their_trail,
    pair_hours_are_kept_per_node_hour,
);

/// Every answer read from raw samples, as text with values to 9 significant digits (the mean
/// of a step may sum its samples in another order once they come from blocks).
async fn raw_answers(store: &Store, from: i64, to: i64, now: i64) -> Vec<String> {
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
            (Metric::SmActive, Agg::P95),
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

/// Issue 20: sealing raw rows into blocks changes no answer read from raw samples (series at
/// raw resolution per GPU, node and tenant; MIG holders; latest health; orphans; counts), and
/// a rollup of minutes whose samples are partly sealed reads both forms.
async fn sealed_samples_answer_as_rows_did(store: &Store) {
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

/// Issue 20: the first seal after an upgrade finds up to the raw retention in rows; it seals
/// them an hour per transaction and loses nothing.
async fn a_backlog_of_rows_seals_in_steps(store: &Store) {
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

fn hour_ago(hours: i64) -> i64 {
    bucket_of(now_ms(), HOUR_MS) - hours * HOUR_MS
}

async fn stores_batches_and_lists_inventory(store: &Store) {
    let f = fleet();
    let t0 = hour_ago(2);
    let instants: Vec<i64> = (0..30).map(|i| t0 + i * 1000).collect();
    let mut expected_rows = 0;
    // (GPU, instance, tenant) of every MIG allocation sent, for `mig_holders` below.
    let mut mig_allocations = std::collections::BTreeSet::new();
    for b in batches(&f, "a1", &instants, 10, 1000) {
        for a in b.snapshots.iter().flat_map(|s| s.allocations.iter()) {
            if let Some(gi) = a.gi_id {
                mig_allocations.insert((a.gpu_uuid.clone(), i64::from(gi), a.tenant.clone()));
            }
        }
        // Sample rows only: `Batch::row_count` also counts the inventory toward the limit.
        expected_rows += b
            .snapshots
            .iter()
            .map(model::wire::v1::Snapshot::row_count)
            .sum::<usize>() as u64;
        let team = |t: &model::Tenant| t.team_source().map(str::to_owned);
        assert!(matches!(
            store.ingest(&b, t0, &team).await.unwrap(),
            IngestOutcome::Stored { .. }
        ));
    }
    let nodes = store.nodes().await.unwrap();
    assert_eq!(
        nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(),
        ["mig", "shared", "whole"]
    );
    assert_eq!(nodes.iter().map(|n| n.gpu_count).sum::<i64>(), 4);
    assert_eq!(nodes[0].last_sample_ms, Some(t0 + 29_000));
    let gpus = store.gpus(Some("mig")).await.unwrap();
    assert_eq!(gpus.len(), 1);
    assert!(gpus[0].mig_enabled);
    let profiles: Vec<&str> = gpus[0]
        .mig_instances
        .iter()
        .map(|m| m.profile.as_str())
        .collect();
    assert_eq!(profiles, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]);
    // Which tenant holds which MIG instance, from the raw allocations.
    let held = store
        .mig_holders(&gpus[0].uuid, t0, t0 + 3_600_000)
        .await
        .unwrap();
    let sent: Vec<(i64, String)> = mig_allocations
        .iter()
        .filter(|(g, _, _)| *g == gpus[0].uuid)
        .map(|(_, gi, t)| (*gi, t.clone()))
        .collect();
    assert_eq!(
        held, sent,
        "every MIG allocation sent, once per (instance, tenant)"
    );
    assert!(
        store
            .mig_holders(&gpus[0].uuid, t0 - 7_200_000, t0 - 3_600_000)
            .await
            .unwrap()
            .is_empty(),
        "nothing before the samples"
    );
    let tenants = store.tenants().await.unwrap();
    let kinds: Vec<&str> = tenants.iter().map(|t| t.tenant.kind.as_str()).collect();
    assert!(
        kinds.contains(&"pod") && kinds.contains(&"slurm_job") && kinds.contains(&"host_user"),
        "{kinds:?}"
    );
    let alice = tenants
        .iter()
        .find(|t| t.tenant.user.as_deref() == Some("alice"))
        .unwrap();
    assert_eq!(alice.team.as_deref(), Some("physics"));
    assert_eq!(alice.nodes, ["shared"]);
    // Every record sent comes back field by field (the PostgreSQL store writes them as arrays):
    // read back into the wire's types, the stored records equal what the batches carried.
    let sent = batches(&f, "a1", &instants, 10, 1000);
    let mut sent_tenants: Vec<(model::Tenant, Option<String>)> = sent
        .iter()
        .flat_map(|b| &b.tenants)
        .map(|t| (t.clone(), t.team_source().map(str::to_owned)))
        .collect();
    sent_tenants.sort_by(|a, b| a.0.key.cmp(&b.0.key));
    sent_tenants.dedup();
    let mut stored_tenants: Vec<(model::Tenant, Option<String>)> = tenants
        .iter()
        .map(|t| (t.tenant.clone(), t.team.clone()))
        .collect();
    stored_tenants.sort_by(|a, b| a.0.key.cmp(&b.0.key));
    assert_eq!(stored_tenants, sent_tenants);
    let by_gpu =
        |a: &(String, GpuInfo), b: &(String, GpuInfo)| (&a.0, &a.1.uuid).cmp(&(&b.0, &b.1.uuid));
    let mut sent_gpus: Vec<(String, GpuInfo)> = sent
        .iter()
        .flat_map(|b| {
            b.inventory
                .iter()
                .flatten()
                .map(|g| (b.node.clone(), g.clone()))
        })
        .collect();
    sent_gpus.sort_by(by_gpu);
    sent_gpus.dedup();
    let mut stored_gpus: Vec<(String, GpuInfo)> = store
        .gpus(None)
        .await
        .unwrap()
        .into_iter()
        .map(|g| {
            let gpu = GpuInfo {
                uuid: g.uuid,
                index: u32::try_from(g.index).unwrap(),
                model: g.model,
                memory_total_bytes: g.memory_total_bytes,
                pci_bus_id: g.pci_bus_id,
                mig_enabled: g.mig_enabled,
                sharing: g.sharing,
                replicas: u32::try_from(g.replicas).unwrap(),
                mig_instances: g
                    .mig_instances
                    .into_iter()
                    .map(|m| MigInstanceInfo {
                        gi_id: u32::try_from(m.gi_id).unwrap(),
                        ci_id: u32::try_from(m.ci_id).unwrap(),
                        profile: m.profile,
                        placement_start: m.placement_start.map(|v| u32::try_from(v).unwrap()),
                        placement_size: m.placement_size.map(|v| u32::try_from(v).unwrap()),
                        memory_total_bytes: m.memory_total_bytes,
                        compute_slices: m.compute_slices.map(|v| u32::try_from(v).unwrap()),
                        uuid: m.uuid,
                    })
                    .collect(),
            };
            (g.node, gpu)
        })
        .collect();
    stored_gpus.sort_by(by_gpu);
    // The store lists a GPU's instances by placement; compare them as sets.
    for (_, g) in sent_gpus.iter_mut().chain(stored_gpus.iter_mut()) {
        g.mig_instances.sort_by_key(|m| (m.gi_id, m.ci_id));
    }
    assert_eq!(stored_gpus, sent_gpus);
    let c = store.counts().await.unwrap();
    let total =
        c.gpu_samples + c.mig_samples + c.process_samples + c.allocation_samples + c.gpu_events;
    assert_eq!(total as u64, expected_rows);
    assert_eq!(c.gpu_samples, 4 * 30);
    assert_eq!(c.mig_samples, 4 * 30);
    // What the series API asks before reading: one lookup per entity.
    let cluster = nodes[0].cluster.clone();
    for (entity, known) in [
        (Entity::Fleet, true),
        (Entity::Node("mig".into()), true),
        (Entity::Node("nowhere".into()), false),
        (Entity::Cluster(cluster), true),
        (Entity::Cluster("elsewhere".into()), false),
        (Entity::Gpu(gpus[0].uuid.clone()), true),
        (Entity::Gpu("GPU-none".into()), false),
        (Entity::Tenant(alice.key().to_string()), true),
        (Entity::Tenant("pod/x/y/z".into()), false),
        (Entity::Node("' OR '1'='1".into()), false),
    ] {
        assert_eq!(store.is_known(&entity).await.unwrap(), known, "{entity:?}");
    }
}

async fn replays_are_stored_once(store: &Store) {
    let f = fleet();
    let t0 = hour_ago(1);
    let b1 = f.batch(0, "agent-x", 1, &[t0, t0 + 1000], 1000);
    let b2 = f.batch(0, "agent-x", 2, &[t0 + 2000], 1000);
    assert!(matches!(
        store.ingest(&b1, t0, &no_team).await.unwrap(),
        IngestOutcome::Stored { .. }
    ));
    assert!(matches!(
        store.ingest(&b2, t0, &no_team).await.unwrap(),
        IngestOutcome::Stored { .. }
    ));
    // The same batch again, and an older one: acknowledged, not stored.
    assert_eq!(
        store.ingest(&b2, t0, &no_team).await.unwrap(),
        IngestOutcome::Duplicate { last_seq: 2 }
    );
    assert_eq!(
        store.ingest(&b1, t0, &no_team).await.unwrap(),
        IngestOutcome::Duplicate { last_seq: 2 }
    );
    assert_eq!(store.counts().await.unwrap().gpu_samples, 2 * 3);
    // Another agent instance on the same node has its own sequence.
    let other = f.batch(0, "agent-y", 1, &[t0 + 3000], 1000);
    assert!(matches!(
        store.ingest(&other, t0, &no_team).await.unwrap(),
        IngestOutcome::Stored { .. }
    ));
    assert_eq!(store.counts().await.unwrap().gpu_samples, 2 * 4);
}

/// Many agents delivering at once, each batch sent twice (the copy racing the original, as a
/// retry after a lost answer does): exactly one of the two is stored, the other is a
/// duplicate, and the tables hold every batch once. On PostgreSQL the batches share
/// transactions (group commit); what each caller is told stays its own.
async fn concurrent_batches_are_each_stored_once(store: &Store) {
    let f = fleet();
    let t0 = hour_ago(1);
    let mut sends = Vec::new();
    let mut expected_gpu_rows = 0;
    for node in 0..f.nodes.len() {
        for agent in ["a", "b"] {
            for seq in 1..=5u64 {
                let ts = t0 + seq as i64 * 1000;
                let b = f.batch(node, agent, seq, &[ts], 1000);
                expected_gpu_rows += b.snapshots[0].gpus.len() as i64;
                sends.push(b.clone());
                sends.push(b);
            }
        }
    }
    let tasks: Vec<_> = sends
        .into_iter()
        .map(|b| {
            let store = store.clone();
            tokio::spawn(async move {
                let outcome = store.ingest(&b, t0, &no_team).await.unwrap();
                ((b.node, b.agent_id, b.seq), outcome)
            })
        })
        .collect();
    let mut stored: HashMap<(String, String, u64), usize> = HashMap::new();
    for t in tasks {
        let (key, outcome) = t.await.unwrap();
        let n = stored.entry(key.clone()).or_default();
        match outcome {
            IngestOutcome::Stored { rows } => {
                assert!(rows > 0);
                *n += 1;
            }
            // An agent's batches may overtake each other here (an agent sends one at a time):
            // the one that arrives after a newer one is a duplicate, never stored twice.
            IngestOutcome::Duplicate { last_seq } => assert!(last_seq >= 1, "{key:?}"),
        }
    }
    assert!(stored.values().all(|&n| n <= 1), "{stored:?}");
    let stored_batches = stored.values().sum::<usize>();
    assert!(stored_batches >= stored.len() / 5, "{stored:?}");
    // What was stored is what the counts say, row for row.
    let per_batch: HashMap<String, i64> = (0..f.nodes.len())
        .map(|n| {
            let b = f.batch(n, "x", 1, &[t0], 1000);
            (b.node.clone(), b.snapshots[0].gpus.len() as i64)
        })
        .collect();
    let rows: i64 = stored
        .iter()
        .filter(|(_, n)| **n == 1)
        .map(|((node, _, _), _)| per_batch[node])
        .sum();
    assert_eq!(store.counts().await.unwrap().gpu_samples, rows);
    assert!(rows <= expected_gpu_rows);
    // Sent again in order, one at a time, each is a duplicate of the highest stored.
    let again = f.batch(0, "a", 5, &[t0 + 5000], 1000);
    assert!(matches!(
        store.ingest(&again, t0, &no_team).await.unwrap(),
        IngestOutcome::Duplicate { last_seq: 5 }
    ));
}

/// Raw values of one GPU metric, grouped by bucket.
fn raw_by_bucket(
    f: &simulator::Fleet,
    node: usize,
    instants: &[i64],
    width: i64,
    metric: fn(&model::GpuSample) -> Option<f64>,
) -> HashMap<(String, i64), Vec<f64>> {
    let mut out: HashMap<(String, i64), Vec<f64>> = HashMap::new();
    for &ts in instants {
        let (snap, _) = f.snapshot(node, ts);
        for g in &snap.gpus {
            let e = out
                .entry((g.gpu_uuid.clone(), bucket_of(ts, width)))
                .or_default();
            if let Some(v) = metric(g) {
                e.push(v);
            }
        }
    }
    out
}

async fn rollups_match_raw_data(store: &Store) {
    let f = fleet();
    let t0 = hour_ago(4);
    // Two hours at 10 s, sent in 5-minute batches.
    let instants: Vec<i64> = (0..720).map(|i| t0 + i * 10_000).collect();
    for b in batches(&f, "r", &instants, 30, 10_000) {
        store.ingest(&b, t0, &no_team).await.unwrap();
    }
    let stats = store.rollup(now_ms()).await.unwrap();
    assert_eq!(stats.minutes, 3 * 120);
    // A second pass has nothing left to do.
    assert_eq!(store.rollup(now_ms()).await.unwrap().minutes, 0);

    for (node, name) in ["whole", "mig", "shared"].iter().enumerate() {
        let node = f.node_index(name).unwrap_or(node);
        let minutes = store
            .rollups(store::Rollups::Minute, "test", name, t0, t0 + 2 * HOUR_MS)
            .await
            .unwrap();
        let hours = store
            .rollups(store::Rollups::Hour, "test", name, t0, t0 + 2 * HOUR_MS)
            .await
            .unwrap();
        // Each span was a whole hour, merged from the minutes it wrote without reading them
        // back: the stored hours are the stored minutes merged.
        same_hours(name, &hours, &minutes);
        let raw_m = raw_by_bucket(&f, node, &instants, MINUTE_MS, |g| {
            g.gpu_util.map(f64::from)
        });
        let raw_h = raw_by_bucket(&f, node, &instants, HOUR_MS, |g| g.gpu_util.map(f64::from));
        let mem_h = raw_by_bucket(&f, node, &instants, HOUR_MS, |g| {
            g.mem_used_bytes.map(|m| m as f64)
        });
        assert_eq!(
            minutes.gpus.len(),
            raw_m.len(),
            "{name}: one row per GPU-minute"
        );
        assert_eq!(
            hours.gpus.len(),
            raw_h.len(),
            "{name}: one row per GPU-hour"
        );
        for (key, vals) in &raw_m {
            let agg = &minutes.gpus[key];
            assert_eq!(agg.samples, 6);
            assert!((agg.covered_s - 60.0).abs() < 1e-9);
            assert_eq!(agg.gpu_util.n as usize, vals.len());
            let sum: f64 = vals.iter().sum();
            assert!(
                (agg.gpu_util.sum - sum).abs() < 1e-3,
                "{name} {key:?}: {} vs {sum}",
                agg.gpu_util.sum
            );
            let max = vals
                .iter()
                .cloned()
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
            assert_eq!(
                agg.gpu_util
                    .max
                    .map(f64::from)
                    .map(|v| (v * 1000.0).round()),
                max.map(|v| (v * 1000.0).round())
            );
            assert_eq!(
                agg.busy_n as usize,
                vals.iter().filter(|v| **v > 0.0).count()
            );
        }
        for (key, vals) in &raw_h {
            let agg = &hours.gpus[key];
            assert_eq!(agg.samples, 360);
            if vals.is_empty() {
                // MIG: NVML reports no utilization; the rollup must not invent one.
                assert_eq!((agg.gpu_util.n, agg.gpu_util.max), (0, None), "{name}");
                continue;
            }
            let mean = vals.iter().sum::<f64>() / vals.len() as f64;
            assert!((agg.gpu_util.sum / f64::from(agg.gpu_util.n) - mean).abs() < 1e-4);
            let mut sorted = vals.clone();
            sorted.sort_by(f64::total_cmp);
            let exact = sorted[((0.95 * sorted.len() as f64).ceil() as usize).max(1) - 1];
            let sketched = f64::from(agg.gpu_util_hist.quantile(0.95, agg.gpu_util.max).unwrap());
            assert!(
                (sketched - exact).abs() <= 0.026,
                "{name}: p95 {sketched} vs exact {exact}"
            );
            let mem = &mem_h[key];
            assert_eq!(
                agg.mem_used.max,
                mem.iter()
                    .cloned()
                    .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
                    .map(|v| v as i64)
            );
        }
    }
    // Tenant rollups carry the allocation each tenant held: sum of shares over snapshots.
    let minutes = store
        .rollups(
            store::Rollups::Minute,
            "test",
            "shared",
            t0,
            t0 + 2 * HOUR_MS,
        )
        .await
        .unwrap();
    let mut expected: HashMap<String, f64> = HashMap::new();
    let node = f.node_index("shared").unwrap();
    for &ts in &instants {
        for a in f.snapshot(node, ts).0.allocations {
            *expected.entry(a.tenant).or_default() += f64::from(a.share);
        }
    }
    let mut got: HashMap<String, f64> = HashMap::new();
    for ((_, tenant, _), agg) in &minutes.tenants {
        *got.entry(tenant.clone()).or_default() += agg.alloc_share_sum;
    }
    for (tenant, share) in &expected {
        assert!(
            (got[tenant] - share).abs() < 1e-3,
            "{tenant}: {} vs {share}",
            got[tenant]
        );
    }
}

/// Hour rollups as the stored minutes merge into, to the bit.
fn same_hours(node: &str, hours: &store::rollup::NodeRollup, minutes: &store::rollup::NodeRollup) {
    let merged = store::rollup::to_hours(minutes);
    assert_eq!(hours.gpus, merged.gpus, "{node}: GPU hours");
    assert_eq!(hours.tenants, merged.tenants, "{node}: tenant hours");
}

/// An hour rolled up in two passes (its first 20 minutes, then the rest, as a live collector
/// does) reads its earlier minutes back to merge the hour; one rolled up whole merges the
/// minutes it wrote. Both store the hour its stored minutes merge into.
async fn an_hour_rolled_up_in_pieces_is_its_minutes_merged(store: &Store) {
    let f = fleet();
    let t0 = hour_ago(3);
    let instants: Vec<i64> = (0..360).map(|i| t0 + i * 10_000).collect();
    let (first, rest) = instants.split_at(120);
    for b in batches(&f, "p1", first, 30, 10_000) {
        store.ingest(&b, t0, &no_team).await.unwrap();
    }
    assert_eq!(
        store.rollup(t0 + 20 * MINUTE_MS).await.unwrap().minutes,
        3 * 20
    );
    for b in batches(&f, "p2", rest, 30, 10_000) {
        store.ingest(&b, t0, &no_team).await.unwrap();
    }
    assert_eq!(store.rollup(now_ms()).await.unwrap().minutes, 3 * 40);
    for name in ["whole", "mig", "shared"] {
        let minutes = store
            .rollups(store::Rollups::Minute, "test", name, t0, t0 + HOUR_MS)
            .await
            .unwrap();
        let hours = store
            .rollups(store::Rollups::Hour, "test", name, t0, t0 + HOUR_MS)
            .await
            .unwrap();
        assert_eq!(
            minutes.gpus.len() % 60,
            0,
            "{name}: every minute of the hour"
        );
        assert!(!hours.gpus.is_empty(), "{name}");
        same_hours(name, &hours, &minutes);
    }
}

async fn interference_minutes_are_the_wanted_slice_of_minute_rollups(store: &Store) {
    let f = fleet();
    let t0 = hour_ago(3);
    let instants: Vec<i64> = (0..360).map(|i| t0 + i * 10_000).collect();
    for b in batches(&f, "im", &instants, 30, 10_000) {
        store.ingest(&b, t0, &no_team).await.unwrap();
    }
    store.rollup(now_ms()).await.unwrap();
    let full = store
        .rollups(store::Rollups::Minute, "test", "shared", t0, t0 + HOUR_MS)
        .await
        .unwrap();
    let gpu = full.gpus.keys().next().unwrap().0.clone();
    // The wanted span: minutes 10 to 40 of the hour on one GPU.
    let (from, to) = (t0 + 10 * MINUTE_MS, t0 + 40 * MINUTE_MS);
    let wanted = HashMap::from([(gpu.clone(), vec![(from, to)])]);
    let (devices, tenants) = store
        .interference_minutes("test", "shared", &wanted)
        .await
        .unwrap();
    assert_eq!(devices.len(), 1);
    let d = &devices[0];
    assert_eq!((d.cluster.as_str(), d.node.as_str()), ("test", "shared"));
    let buckets: Vec<i64> = d.minutes.iter().map(|m| m.bucket).collect();
    let expected: Vec<i64> = (10..40).map(|m| t0 + m * MINUTE_MS).collect();
    assert_eq!(buckets, expected, "the wanted minutes, in order");
    for m in &d.minutes {
        let agg = &full.gpus[&(gpu.clone(), m.bucket)];
        assert_eq!(m.gpu_util_n, agg.gpu_util.n);
        assert!((m.gpu_util_sum - agg.gpu_util.sum).abs() < 1e-9);
    }
    // Per tenant: exactly the wanted minutes in which it ran a kernel, with the same numbers.
    let mut expected_rows = 0;
    for ((g, tenant, bucket), agg) in &full.tenants {
        let wanted_minute = *g == gpu && *bucket >= from && *bucket < to;
        let series = tenants.iter().find(|t| t.tenant == *tenant && t.gpu == *g);
        let got = series.and_then(|s| s.minutes.iter().find(|m| m.bucket == *bucket));
        if wanted_minute && agg.active_n > 0 {
            expected_rows += 1;
            let m = got.unwrap_or_else(|| panic!("{tenant} at {bucket} is missing"));
            assert_eq!(
                (m.samples, m.active_n, m.sm_util_n),
                (agg.samples, agg.active_n, agg.sm_util.n)
            );
            assert!((m.eff_sum - agg.eff_sum).abs() < 1e-9);
            assert!((m.alloc_share_sum - agg.alloc_share_sum).abs() < 1e-9);
        } else {
            assert!(
                got.is_none(),
                "{tenant} at {bucket} was not wanted or ran nothing"
            );
        }
    }
    let rows: usize = tenants.iter().map(|t| t.minutes.len()).sum();
    assert_eq!(rows, expected_rows);
    assert!(rows > 0, "the shared GPU had busy tenants");
    assert!(
        tenants
            .iter()
            .all(|t| t.minutes.windows(2).all(|w| w[0].bucket < w[1].bucket))
    );
}

async fn series_use_the_right_resolution(store: &Store) {
    let f = fleet();
    let now = now_ms();
    let t0 = bucket_of(now - 2 * HOUR_MS, HOUR_MS);
    let instants: Vec<i64> = (0..360).map(|i| t0 + i * 10_000).collect();
    for b in batches(&f, "s", &instants, 60, 10_000) {
        store.ingest(&b, t0, &no_team).await.unwrap();
    }
    store.rollup(now).await.unwrap();
    let gpu = store.gpus(Some("whole")).await.unwrap()[0].uuid.clone();
    let q = |metric, entity, step_ms, agg| SeriesQuery {
        metric,
        entity,
        from_ms: t0,
        to_ms: t0 + HOUR_MS,
        step_ms,
        agg,
    };
    let r = Retention::default();
    let series = |metric, entity, step_ms, agg| {
        let q = q(metric, entity, step_ms, agg);
        let r = &r;
        async move { store.series(&q, now, r).await.unwrap() }
    };

    let raw = series(Metric::GpuUtil, Entity::Gpu(gpu.clone()), 10_000, Agg::Mean).await;
    assert_eq!(raw.resolution, Resolution::Raw);
    assert_eq!(raw.points.len(), 360);
    assert!(raw.points.iter().all(|p| p.1.is_some()));

    let minute = series(
        Metric::GpuUtil,
        Entity::Gpu(gpu.clone()),
        300_000,
        Agg::Mean,
    )
    .await;
    assert_eq!(minute.resolution, Resolution::Minute);
    assert_eq!(minute.points.len(), 12);
    // The same mean either way.
    let raw5 = series(Metric::GpuUtil, Entity::Gpu(gpu.clone()), 50_000, Agg::Mean).await;
    let mean = |pts: &[(i64, Option<f64>)]| {
        pts.iter().filter_map(|p| p.1).sum::<f64>()
            / pts.iter().filter(|p| p.1.is_some()).count() as f64
    };
    assert!((mean(&minute.points) - mean(&raw5.points)).abs() < 1e-3);

    let hour = series(
        Metric::GpuUtil,
        Entity::Node("whole".into()),
        HOUR_MS,
        Agg::P95,
    )
    .await;
    assert_eq!(hour.resolution, Resolution::Hour);
    assert_eq!(hour.points.len(), 1);
    assert!(hour.points[0].1.is_some());

    // Cluster-wide hours come from the cluster rollup and equal the merge of every GPU-hour.
    let cluster_hour = series(
        Metric::GpuUtil,
        Entity::Cluster("test".into()),
        HOUR_MS,
        Agg::Mean,
    )
    .await;
    assert_eq!(cluster_hour.resolution, Resolution::Hour);
    let (mut n, mut sum) = (0, 0.0);
    for node in ["whole", "mig", "shared"] {
        for agg in store
            .rollups(store::Rollups::Hour, "test", node, t0, t0 + HOUR_MS)
            .await
            .unwrap()
            .gpus
            .values()
        {
            n += agg.gpu_util.n;
            sum += agg.gpu_util.sum;
        }
    }
    assert!((cluster_hour.points[0].1.unwrap() - sum / f64::from(n)).abs() < 1e-6);
    assert_eq!(store.counts().await.unwrap().cluster_rollup_1h, 1);
    let fleet_hour = series(Metric::GpuUtil, Entity::Fleet, HOUR_MS, Agg::P95).await;
    assert!(
        fleet_hour.points[0].1.is_some_and(|v| v > 0.5),
        "{:?}",
        fleet_hour.points
    );

    let fleet_alloc = series(Metric::AllocShare, Entity::Fleet, 600_000, Agg::Mean).await;
    assert_eq!(fleet_alloc.resolution, Resolution::Minute);
    assert!(
        fleet_alloc
            .points
            .iter()
            .all(|p| p.1.is_some_and(|v| v > 0.0 && v <= 1.0))
    );

    let tenant = store
        .tenants()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.tenant.pod.as_deref() == Some("train"))
        .unwrap();
    let tenant_series = |metric: Metric| {
        let q = q(
            metric,
            Entity::Tenant(tenant.key().to_string()),
            60_000,
            Agg::Mean,
        );
        async move { store.series(&q, now, &r).await.unwrap().points }
    };
    let sm = tenant_series(Metric::SmUtil).await;
    assert!(
        sm.iter().filter_map(|p| p.1).any(|v| v > 0.5),
        "training tenant is busy"
    );
    // Its effective use (the funnel's attribution) is read from the tenant rollups.
    let eff = tenant_series(Metric::Effective).await;
    assert!(
        eff.iter().filter_map(|p| p.1).any(|v| v > 0.0 && v <= 1.0),
        "training tenant has effective use: {eff:?}"
    );

    let err = store
        .series(
            &q(
                Metric::GpuUtil,
                Entity::Tenant(tenant.tenant.key),
                60_000,
                Agg::Mean,
            ),
            now,
            &r,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("GPU metric"), "{err}");
}

async fn retention_drops_old_data_per_resolution(store: &Store) {
    let f = fleet();
    let now = now_ms();
    let old = bucket_of(now - 100 * 86_400_000, HOUR_MS);
    let recent = bucket_of(now - 86_400_000, HOUR_MS);
    store
        .ingest(
            &f.batch(0, "ret", 1, &[old, old + 60_000], 60_000),
            now,
            &no_team,
        )
        .await
        .unwrap();
    store
        .ingest(&f.batch(0, "ret", 2, &[recent], 60_000), now, &no_team)
        .await
        .unwrap();
    store.rollup(now).await.unwrap();
    let before = store.counts().await.unwrap();
    assert_eq!(
        (
            before.gpu_samples,
            before.gpu_rollup_1m,
            before.gpu_rollup_1h
        ),
        (6, 6, 4)
    );

    // Default retention: raw 7 d, 1 m 90 d, 1 h 2 y. At 100 days only the hour rollup remains.
    let stats = store
        .apply_retention(now, &Retention::default())
        .await
        .unwrap();
    assert!(!stats.dropped.is_empty());
    let after = store.counts().await.unwrap();
    assert_eq!(after.gpu_samples, 2, "the recent samples stay");
    assert_eq!(after.gpu_rollup_1m, 2, "the recent minute rollups stay");
    assert_eq!(
        after.gpu_rollup_1h, 4,
        "hour rollups are kept for two years"
    );

    // Three years on, everything is gone.
    store
        .apply_retention(now + 3 * 365 * 86_400_000, &Retention::default())
        .await
        .unwrap();
    let gone = store.counts().await.unwrap();
    assert_eq!(
        (gone.gpu_samples, gone.gpu_rollup_1m, gone.gpu_rollup_1h),
        (0, 0, 0)
    );
}

async fn missing_measurements_stay_null(store: &Store) {
    let f = fleet();
    let t0 = hour_ago(1);
    let mig = f.node_index("mig").unwrap();
    store
        .ingest(&f.batch(mig, "n", 1, &[t0], 1000), t0, &no_team)
        .await
        .unwrap();
    let gpu = store.gpus(Some("mig")).await.unwrap()[0].uuid.clone();
    let s = store
        .series(
            &SeriesQuery {
                metric: Metric::GpuUtil,
                entity: Entity::Gpu(gpu.clone()),
                from_ms: t0,
                to_ms: t0 + 1000,
                step_ms: 1000,
                agg: Agg::Mean,
            },
            now_ms(),
            &Retention::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        s.points,
        vec![(t0, None)],
        "a MIG GPU has no NVML utilization: null, not 0"
    );
    let s = store
        .series(
            &SeriesQuery {
                metric: Metric::MemUsedBytes,
                entity: Entity::Gpu(gpu),
                from_ms: t0,
                to_ms: t0 + 1000,
                step_ms: 1000,
                agg: Agg::Max,
            },
            now_ms(),
            &Retention::default(),
        )
        .await
        .unwrap();
    assert!(s.points[0].1.is_some());
}

/// Adds an event PostgreSQL refuses (NUL in text) to `b`'s first snapshot: its events are
/// the last COPY of the batch, so it fails after the others ran.
fn poison(b: &mut model::wire::v1::Batch, t0: i64) {
    let gpu_uuid = b.snapshots[0].gpus[0].gpu_uuid.clone();
    b.snapshots[0].events.push(model::GpuEvent {
        gpu_uuid,
        ts: t0,
        kind: "xid".into(),
        code: 79,
        message: Some("bad\0byte".into()),
    });
}

/// PostgreSQL only: a batch that fails half-way leaves nothing behind and does not advance
/// the agent's sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_failed_batches_store_nothing() {
    let Some(t) = support::postgres().await else {
        return;
    };
    let f = fleet();
    let t0 = hour_ago(1);
    let mut b = f.batch(0, "atomic", 1, &[t0], 1000);
    poison(&mut b, t0);
    assert!(t.store.ingest(&b, t0, &no_team).await.is_err());
    assert_eq!(
        t.store.counts().await.unwrap(),
        store::TableCounts::default()
    );
    b.snapshots[0].events.clear();
    assert!(matches!(
        t.store.ingest(&b, t0, &no_team).await.unwrap(),
        IngestOutcome::Stored { .. }
    ));
}

/// PostgreSQL only: a transaction its deadlock detector fails is a conflict (the work may be
/// tried again: group commit does, an agent is answered 503 with Retry-After), not an
/// internal error. Two connections lock two rows in opposite orders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_deadlock_is_a_conflict() {
    use sqlx::Connection;
    let Some(base) = support::pg_base() else {
        return;
    };
    let url = support::fresh_database(&base).await;
    let mut setup = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE pair (id int PRIMARY KEY, v int); INSERT INTO pair VALUES (1, 0), (2, 0)",
    )
    .execute(&mut setup)
    .await
    .unwrap();
    let lock = |first: i32, second: i32| {
        let url = url.clone();
        async move {
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
            let mut tx = conn.begin().await.unwrap();
            sqlx::query("UPDATE pair SET v = v + 1 WHERE id = $1")
                .bind(first)
                .execute(&mut *tx)
                .await
                .unwrap();
            // Both hold their first row before either asks for its second.
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            let second = sqlx::query("UPDATE pair SET v = v + 1 WHERE id = $1")
                .bind(second)
                .execute(&mut *tx)
                .await;
            match second {
                Ok(_) => tx.commit().await.map_err(store::StoreError::from),
                Err(e) => Err(store::StoreError::from(e)),
            }
        }
    };
    let (a, b) = tokio::join!(lock(1, 2), lock(2, 1));
    let failed: Vec<_> = [a, b].into_iter().filter_map(Result::err).collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        matches!(&failed[0], store::StoreError::Conflict(m) if m.contains("deadlock")),
        "{failed:?}"
    );
}

/// A batch PostgreSQL refuses, sent at the same time as good ones: it alone fails (its group
/// is retried batch by batch), the others are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_bad_batch_fails_alone() {
    let Some(t) = support::postgres().await else {
        return;
    };
    let f = fleet();
    let t0 = hour_ago(1);
    let mut bad = f.batch(0, "bad", 1, &[t0], 1000);
    poison(&mut bad, t0);
    let good: Vec<_> = (0..f.nodes.len())
        .flat_map(|n| (1..=8u64).map(move |i| (n, i)))
        // One agent each: an agent's own batches could overtake each other here.
        .map(|(n, i)| f.batch(n, &format!("good-{i}"), 1, &[t0 + i as i64 * 1000], 1000))
        .collect();
    let good_rows: i64 = good.iter().map(|b| b.snapshots[0].gpus.len() as i64).sum();
    let mut tasks = Vec::new();
    for (i, b) in good.into_iter().enumerate() {
        if i == 4 {
            let (store, bad) = (t.store.clone(), bad.clone());
            tasks.push(tokio::spawn(async move {
                (true, store.ingest(&bad, t0, &no_team).await)
            }));
        }
        let store = t.store.clone();
        tasks.push(tokio::spawn(async move {
            (false, store.ingest(&b, t0, &no_team).await)
        }));
    }
    for task in tasks {
        match task.await.unwrap() {
            (true, outcome) => assert!(outcome.is_err(), "{outcome:?}"),
            (false, outcome) => assert!(
                matches!(outcome, Ok(IngestOutcome::Stored { .. })),
                "{outcome:?}"
            ),
        }
    }
    let counts = t.store.counts().await.unwrap();
    assert_eq!((counts.gpu_samples, counts.gpu_events), (good_rows, 0));
}

async fn alert_state_and_outbox_round_trip(store: &Store) {
    use std::collections::BTreeMap;
    use store::alerts::{AlertRecord, Attempt, NewNotification};

    let alert = |fp: &str, state: &str| AlertRecord {
        fingerprint: fp.into(),
        rule: "GpuThrottling".into(),
        labels: BTreeMap::from([
            ("alertname".into(), "GpuThrottling".into()),
            ("node".into(), fp.into()),
        ]),
        annotations: BTreeMap::from([("summary".into(), "hot \"quoted\" ünïcode".into())]),
        state: state.into(),
        value: 2.5,
        active_ms: 1_000,
        starts_ms: (state != "pending").then_some(2_000),
        ends_ms: (state == "resolved").then_some(3_000),
        updated_ms: 3_000,
    };
    let alerts = vec![
        alert("a", "firing"),
        alert("b", "resolved"),
        alert("c", "pending"),
    ];
    store.save_alerts(&alerts, &[]).await.unwrap();
    assert_eq!(store.load_alerts().await.unwrap(), alerts);
    // An upsert replaces every field; the others go.
    let mut a = alerts[0].clone();
    a.state = "resolved".into();
    a.ends_ms = Some(4_000);
    a.annotations.clear();
    a.updated_ms = 4_000;
    store
        .save_alerts(std::slice::from_ref(&a), &["b".to_owned(), "c".to_owned()])
        .await
        .unwrap();
    assert_eq!(store.load_alerts().await.unwrap(), [a]);

    let n = |group: &'static str, at: i64| NewNotification {
        receiver: "hook",
        group_key: group,
        status: "firing",
        digest: "a",
        firing: 1,
        resolved: 0,
        payload: "{}",
        created_ms: at,
        state: "queued",
    };
    let first = store.enqueue_notification(&n("g1", 10)).await.unwrap();
    let second = store.enqueue_notification(&n("g1", 20)).await.unwrap();
    let other = store.enqueue_notification(&n("g2", 30)).await.unwrap();
    assert!(first < second && second < other);
    let mut latest = store.latest_notifications().await.unwrap();
    latest.sort();
    assert_eq!(
        latest,
        [
            ("hook".into(), "g1".into(), 20, "a".into()),
            ("hook".into(), "g2".into(), 30, "a".into())
        ]
    );
    let queued = store.queued_notifications("hook", 10).await.unwrap();
    assert_eq!(
        queued.iter().map(|q| q.id).collect::<Vec<_>>(),
        [first, second, other]
    );
    let attempt = |outcome: &str, status: Option<i32>| Attempt {
        ts_ms: 40,
        outcome: outcome.into(),
        http_status: status,
        detail: "x".into(),
        duration_ms: 3,
    };
    store
        .record_attempt(first, &attempt("retry", Some(503)), "queued", 1_040)
        .await
        .unwrap();
    let q = store.queued_notifications("hook", 1).await.unwrap();
    assert_eq!((q[0].id, q[0].attempts, q[0].next_ms), (first, 1, 1_040));
    store
        .record_attempt(first, &attempt("delivered", Some(200)), "delivered", 50)
        .await
        .unwrap();
    let list = store.notifications(Some("hook"), 10).await.unwrap();
    let f = list.iter().find(|x| x.id == first).unwrap();
    assert_eq!(
        (f.state.as_str(), f.attempts, f.delivered_ms),
        ("delivered", 2, Some(40))
    );
    assert_eq!(f.tries.len(), 2);
    assert_eq!(f.tries[0].http_status, Some(503));
    assert_eq!(store.supersede_queued("hook").await.unwrap(), 2);
    assert!(
        store
            .queued_notifications("hook", 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Pruning keeps each group's newest.
    assert_eq!(store.prune_notifications(i64::MAX).await.unwrap(), 1);
    let left: Vec<i64> = store
        .notifications(None, 10)
        .await
        .unwrap()
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(left, [other, second]);
}

async fn remote_write_journal_keeps_what_waits(store: &Store) {
    for (i, newest) in [10_i64, 20, 30].into_iter().enumerate() {
        store
            .journal_remote_write(1_000 + i as i64, newest, &[i as u8, 0xff])
            .await
            .unwrap();
    }
    // Rows whose samples are all older than the oldest waiting scrape (20) go.
    assert_eq!(store.prune_remote_write_journal(Some(20)).await.unwrap(), 1);
    assert_eq!(
        store.remote_write_journal().await.unwrap(),
        [(1_001, vec![1, 0xff]), (1_002, vec![2, 0xff])]
    );
    // Nothing waits: everything goes.
    assert_eq!(store.prune_remote_write_journal(None).await.unwrap(), 2);
    assert!(store.remote_write_journal().await.unwrap().is_empty());
    // Where a replay starts: the streams' stored positions.
    let t0 = hour_ago(1);
    let b = fleet().batch(0, "rw", 7, &[t0], 1000);
    store.ingest(&b, t0, &no_team).await.unwrap();
    assert_eq!(
        store.stream_positions("rw").await.unwrap(),
        [(b.cluster.clone(), b.node.clone(), 7)]
    );
    assert!(store.stream_positions("nobody").await.unwrap().is_empty());
}

async fn waiting_episodes_are_kept_current_and_read_by_overlap(store: &Store) {
    use store::waiting::WaitingRecord;
    let h = HOUR_MS;
    let pod = |uid: &str, since: i64, seen: i64, count: i64, reason: &str| WaitingRecord {
        cluster: "c1".into(),
        source: "pod".into(),
        uid: uid.into(),
        scope: "ml".into(),
        team: "ml-team".into(),
        name: format!("train-{uid}"),
        resource: "nvidia.com/gpu".into(),
        count,
        product: (uid == "a").then(|| "NVIDIA-H100-80GB-HBM3".to_owned()),
        reason: reason.into(),
        message: "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.".into(),
        since_ms: since,
        first_seen_ms: seen,
        last_seen_ms: seen,
    };
    store
        .record_waiting(&[
            pod("a", 0, 2 * h, 2, "Unschedulable"),
            pod("b", h, 2 * h, 1, ""),
        ])
        .await
        .unwrap();
    // The next poll: "a" still waits (its count and reason changed), "b" was scheduled.
    store
        .record_waiting(&[pod("a", 90 * h, 3 * h, 4, "SchedulingGated")])
        .await
        .unwrap();
    let all = store.waiting(0, 10 * h).await.unwrap();
    assert_eq!(all.len(), 2, "{all:?}");
    let a = &all[0];
    assert_eq!(
        (
            a.uid.as_str(),
            a.since_ms,
            a.first_seen_ms,
            a.last_seen_ms,
            a.count
        ),
        ("a", 0, 2 * h, 3 * h, 4),
        "an episode keeps when it began and takes the latest poll"
    );
    assert_eq!(a.reason, "SchedulingGated");
    assert_eq!(a.product.as_deref(), Some("NVIDIA-H100-80GB-HBM3"));
    assert_eq!(all[1].product, None);
    // Overlap: "b" waited [h, 2h]; a window after it sees only "a".
    let later = store.waiting(2 * h + 1, 10 * h).await.unwrap();
    assert_eq!(
        later.iter().map(|w| w.uid.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    assert!(store.waiting(5 * h, 6 * h).await.unwrap().is_empty());
    assert_eq!(store.prune_waiting(2 * h + 1).await.unwrap(), 1);
    assert_eq!(store.waiting(0, 10 * h).await.unwrap().len(), 1);
}

async fn pair_hours_are_kept_per_node_hour(store: &Store) {
    use store::pair_hours::{PairHour, PairHourMark};
    let h = HOUR_MS;
    let t0 = bucket_of(now_ms(), h) - 10 * h;
    let pair = |node: &str, hour: i64, victim: &str, alone_sum: f64| PairHour {
        cluster: "c1".into(),
        node: node.into(),
        gpu: "GPU-a".into(),
        victim: victim.into(),
        aggressor: "pod/x".into(),
        hour,
        alone_n: 40,
        alone_sum,
        contended_n: 12,
        contended_sum: 0.1 + 0.2,
        contended_first: hour + 5 * MINUTE_MS,
        contended_last: hour + 50 * MINUTE_MS,
    };
    let mark = |hour: i64, gpu_samples: i64| PairHourMark {
        hour_ms: hour,
        thresholds: "v1,saturation=0.9".into(),
        gpu_samples,
        tenant_samples: 2 * gpu_samples,
    };
    let rows = [
        pair("n1", t0, "pod/v", 1.0 / 3.0),
        pair("n1", t0 + h, "pod/v", 2.5),
        pair("n1", t0 + h, "pod/w", 7.25),
        // An hour no mark names is not kept.
        pair("n1", t0 + 2 * h, "pod/v", 9.0),
    ];
    store
        .keep_pair_hours("c1", "n1", &[mark(t0, 120), mark(t0 + h, 60)], &rows)
        .await
        .unwrap();
    store
        .keep_pair_hours("c1", "n2", &[mark(t0, 1)], &[pair("n2", t0, "pod/q", 4.0)])
        .await
        .unwrap();
    // The same node name in another cluster is another node, read only with the fleet's.
    let other = PairHour {
        cluster: "c2".into(),
        ..pair("n1", t0, "pod/v", 5.5)
    };
    store
        .keep_pair_hours("c2", "n1", &[mark(t0, 5)], std::slice::from_ref(&other))
        .await
        .unwrap();
    let window = (t0 - h, t0 + 5 * h);
    let of = |scope: Scope<'static>| async move {
        let rows = store
            .pair_hours(scope, window.0, window.1, &mut |_| true)
            .await
            .unwrap();
        let mut marks = 0;
        store
            .pair_hour_marks(scope, window.0, window.1, &mut |c, n, _| {
                assert!(scope.cluster().is_none_or(|want| want == c), "{c}");
                if let Scope::Nodes(_, nodes) = scope {
                    assert!(nodes.iter().any(|x| x == n), "{n}");
                }
                marks += 1;
            })
            .await
            .unwrap();
        (rows, marks)
    };
    assert_eq!(of(Scope::Cluster("c2")).await, (vec![other.clone()], 1));
    let (all, marks) = of(Scope::Fleet).await;
    assert_eq!((all.len(), marks), (5, 4));
    let (c1, marks) = of(Scope::Cluster("c1")).await;
    assert!(c1.iter().all(|r| r.cluster == "c1"));
    assert_eq!((c1.len(), marks), (4, 3));
    // Some nodes of a cluster: a node the list names that has nothing kept adds nothing, and
    // the same node name in another cluster is not read.
    let nodes = |names: &[&str]| -> &'static [String] {
        Vec::leak(names.iter().map(|n| n.to_string()).collect())
    };
    let (n2, marks) = of(Scope::Nodes("c1", nodes(&["n2", "n9"]))).await;
    assert_eq!((n2.len(), marks), (1, 1));
    assert_eq!(n2[0].victim, "pod/q");
    let (both, marks) = of(Scope::Nodes("c1", nodes(&["n1", "n2"]))).await;
    assert_eq!((both.len(), marks), (4, 3));
    assert_eq!(of(Scope::Nodes("c2", nodes(&["n2"]))).await, (vec![], 0));
    assert_eq!(
        of(Scope::Nodes("c2", nodes(&["n1"]))).await,
        (vec![other.clone()], 1)
    );
    let marks = node_marks(store, "n1", window.0, window.1).await;
    let mut hours: Vec<_> = marks
        .iter()
        .map(|m| (m.hour_ms, m.gpu_samples, m.tenant_samples))
        .collect();
    hours.sort();
    assert_eq!(hours, [(t0, 120, 240), (t0 + h, 60, 120)]);
    assert_eq!(marks[0].thresholds, "v1,saturation=0.9");
    let kept = node_pair_hours(store, "n1", window.0, window.1).await;
    assert_eq!(kept, rows[..3], "sums come back to the bit");
    // Measured again: an hour's rows and mark are replaced, the other hours stay.
    store
        .keep_pair_hours(
            "c1",
            "n1",
            &[mark(t0 + h, 61)],
            &[pair("n1", t0 + h, "pod/v", 3.0)],
        )
        .await
        .unwrap();
    let kept = node_pair_hours(store, "n1", window.0, window.1).await;
    assert_eq!(
        kept,
        [
            pair("n1", t0, "pod/v", 1.0 / 3.0),
            pair("n1", t0 + h, "pod/v", 3.0)
        ]
    );
    let marks = node_marks(store, "n1", t0 + h, t0 + 2 * h).await;
    assert_eq!(marks, [mark(t0 + h, 61)]);
    assert_eq!(
        node_pair_hours(store, "n2", window.0, window.1).await.len(),
        1
    );
    // Dropping a range of hours drops their rows and marks, on every node of every cluster.
    assert_eq!(store.drop_pair_hours(i64::MIN, t0 + h).await.unwrap(), 6);
    assert_eq!(
        node_pair_hours(store, "n1", window.0, window.1).await.len(),
        1
    );
    assert!(
        node_pair_hours(store, "n2", window.0, window.1)
            .await
            .is_empty()
    );
}

/// One node's kept pair-hours (of cluster c1) in [from, to), by pair then hour.
async fn node_pair_hours(
    store: &Store,
    node: &str,
    from: i64,
    to: i64,
) -> Vec<store::pair_hours::PairHour> {
    let mut rows = store
        .pair_hours(Scope::Cluster("c1"), from, to, &mut |r| r.node == node)
        .await
        .unwrap();
    rows.sort_by(|a, b| {
        (&a.gpu, &a.victim, &a.aggressor, a.hour).cmp(&(&b.gpu, &b.victim, &b.aggressor, b.hour))
    });
    rows
}

/// One node's pair-hour marks (of cluster c1) in [from, to), by hour.
async fn node_marks(
    store: &Store,
    node: &str,
    from: i64,
    to: i64,
) -> Vec<store::pair_hours::PairHourMark> {
    let mut marks = Vec::new();
    store
        .pair_hour_marks(Scope::Cluster("c1"), from, to, &mut |c, n, m| {
            assert_eq!(c, "c1");
            if n == node {
                marks.push(m.clone());
            }
        })
        .await
        .unwrap();
    marks.sort_by_key(|m| m.hour_ms);
    marks
}

async fn reclaim_cases_move_once_and_keep_their_trail(store: &Store) {
    use store::audit::{Step, Trail};
    use store::reclaim_cases::{CaseFilter, Move, NewCase};
    let h = HOUR_MS;
    let case = |tenant: &str, opened: i64| NewCase {
        cluster: "c1".into(),
        node: "gpu-1".into(),
        gpu: "GPU-1".into(),
        tenant: tenant.into(),
        tenant_name: format!("pod ml/{tenant}"),
        namespace: "ml".into(),
        pod: tenant.into(),
        pod_uid: "uid".into(),
        team: "vision".into(),
        policy: "notebooks".into(),
        action: "scale-to-zero".into(),
        dry_run: false,
        finding: "f1".into(),
        idle_hours: 30.5,
        idle_share: 0.97,
        signal_metric: "sm_util".into(),
        signal_entity: format!("tenant:{tenant}"),
        state: "noticed".into(),
        opened_ms: opened,
        act_after_ms: opened + 4 * h,
    };
    let a = store.insert_reclaim_case(&case("a", h)).await.unwrap();
    let b = store.insert_reclaim_case(&case("b", 2 * h)).await.unwrap();
    let step = |n: i64, what: &str| Step {
        ts_ms: n,
        actor: "gpulens".into(),
        step: what.into(),
        result: "ok".into(),
        detail: String::new(),
    };
    for (i, w) in ["opened", "notice", "approved"].iter().enumerate() {
        store
            .add_audit_step(Trail::ReclaimCases, a, &step(i as i64, w))
            .await
            .unwrap();
    }
    let moved = store
        .move_reclaim_case(&Move {
            by: Some("alice"),
            ..Move::new(a, &["noticed", "awaiting_approval"], "approved", 5 * h)
        })
        .await
        .unwrap();
    assert!(moved);
    assert!(
        !store
            .move_reclaim_case(&Move::new(a, &["noticed"], "cancelled", 5 * h))
            .await
            .unwrap(),
        "a case moves only from the states named"
    );
    store
        .move_reclaim_case(&Move {
            target: Some("Deployment ml/a"),
            undo: Some("kubectl scale"),
            ..Move::new(a, &["approved"], "acted", 6 * h)
        })
        .await
        .unwrap();
    store
        .move_reclaim_case(&Move {
            outcome: Some("freed GPU 0"),
            ..Move::new(a, &["acted"], "freed", 7 * h)
        })
        .await
        .unwrap();
    let all = store.reclaim_cases(&CaseFilter::newest(10)).await.unwrap();
    assert_eq!(all.iter().map(|c| c.id).collect::<Vec<_>>(), [b, a]);
    let got = &all[1];
    assert_eq!(
        got.case,
        NewCase {
            state: "freed".into(),
            ..case("a", h)
        },
        "the case reads back as recorded, in its new state"
    );
    assert_eq!(
        (
            got.decided_by.as_deref(),
            got.decided_ms,
            got.target.as_deref(),
            got.undo.as_deref(),
            got.acted_ms,
            got.finished_ms,
            got.outcome.as_deref()
        ),
        (
            Some("alice"),
            Some(5 * h),
            Some("Deployment ml/a"),
            Some("kubectl scale"),
            Some(6 * h),
            Some(7 * h),
            Some("freed GPU 0")
        )
    );
    assert_eq!(
        got.steps
            .iter()
            .map(|s| s.step.as_str())
            .collect::<Vec<_>>(),
        ["opened", "notice", "approved"]
    );
    let open = store
        .reclaim_cases(&CaseFilter {
            states: &store::reclaim_cases::OPEN,
            ..CaseFilter::newest(10)
        })
        .await
        .unwrap();
    assert_eq!(open.iter().map(|c| c.id).collect::<Vec<_>>(), [b]);
    let acted = store
        .reclaim_cases(&CaseFilter {
            acted_since_ms: Some(6 * h),
            opened_since_ms: Some(0),
            ..CaseFilter::newest(10)
        })
        .await
        .unwrap();
    assert_eq!(acted.len(), 1);
    assert_eq!(acted[0].case.state, "freed");
}

/// Issue 15: a stored row with a MIG id of 2^31 (accepted before ingest checked the domain)
/// made every rollup pass panic on decode, which stopped rollups, retention and remote-write
/// settling for good. Now the row is skipped and counted, and the rest rolls up.
#[tokio::test]
async fn a_row_the_store_cannot_decode_is_skipped_and_the_rollup_goes_on() {
    let dir = support::TempDir::new("undecodable");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = store::Store::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let t0 = hour_ago(1);
    let b = fleet().batch(0, "bad-row", 1, &[t0], 1000);
    store.ingest(&b, t0, &no_team).await.unwrap();
    // What an older collector stored: a valid u32 that no 32-bit column reads back.
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO allocation_samples (cluster, node, gpu_uuid, ts, tenant_key, gi_id, share) VALUES (?, ?, 'GPU-x', ?, 'pod/x/y', 2147483648, 1.0)",
    )
    .bind(&b.cluster)
    .bind(&b.node)
    .bind(t0)
    .execute(&raw)
    .await
    .unwrap();
    let stats = store.rollup(now_ms()).await.unwrap();
    assert_eq!(stats.undecodable_rows, 1);
    assert!(stats.minutes >= 1 && stats.gpu_rows > 0, "{stats:?}");
}

#[tokio::test]
async fn a_tenant_row_outside_the_wire_domain_is_left_out_not_fatal() {
    let dir = support::TempDir::new("tenant-domain");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = store::Store::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let t0 = hour_ago(1);
    let b = fleet().batch(0, "odd-tenant", 1, &[t0], 1000);
    store.ingest(&b, t0, &no_team).await.unwrap();
    let before = store.tenants().await.unwrap().len();
    assert!(before > 0);
    // Rows no agent batch can produce: a kind the wire does not know, a uid past u32.
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    for (key, kind, uid) in [("robot/1", "robot", 1i64), ("host/x", "host_user", 1 << 40)] {
        sqlx::query(
            "INSERT INTO tenants (cluster, node, tenant_key, kind, uid, first_seen, last_seen) VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&b.cluster)
        .bind(&b.node)
        .bind(key)
        .bind(kind)
        .bind(uid)
        .bind(t0)
        .bind(t0)
        .execute(&raw)
        .await
        .unwrap();
    }
    let after = store.tenants().await.unwrap();
    assert_eq!(after.len(), before, "{after:#?}");
    assert!(
        after
            .iter()
            .all(|t| !["robot/1", "host/x"].contains(&t.key()))
    );
}
