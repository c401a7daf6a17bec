//! Batches are stored once, whole or not at all; what is missing stays missing.

use std::collections::HashMap;

use model::inventory::{GpuInfo, MigInstanceInfo};
use model::time::now_ms;
use store::{Agg, Entity, IngestOutcome, Metric, Retention, SeriesQuery, Store};

use crate::hour_ago;
use crate::support::{self, batches, fleet, no_team};

pub(crate) async fn stores_batches_and_lists_inventory(store: &Store) {
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

/// Stores `b` (received at `at`, no teams), which must be new: answered `Stored`.
async fn store_new(store: &Store, b: &model::wire::v1::Batch, at: i64) {
    assert!(matches!(
        store.ingest(b, at, &no_team).await.unwrap(),
        IngestOutcome::Stored { .. }
    ));
}

pub(crate) async fn replays_are_stored_once(store: &Store) {
    let f = fleet();
    let t0 = hour_ago(1);
    let b1 = f.batch(0, "agent-x", 1, &[t0, t0 + 1000], 1000);
    let b2 = f.batch(0, "agent-x", 2, &[t0 + 2000], 1000);
    store_new(store, &b1, t0).await;
    store_new(store, &b2, t0).await;
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
    store_new(store, &other, t0).await;
    assert_eq!(store.counts().await.unwrap().gpu_samples, 2 * 4);
}

/// Many agents delivering at once, each batch sent twice (the copy racing the original, as a
/// retry after a lost answer does): exactly one of the two is stored, the other is a
/// duplicate, and the tables hold every batch once. On PostgreSQL the batches share
/// transactions (group commit); what each caller is told stays its own.
pub(crate) async fn concurrent_batches_are_each_stored_once(store: &Store) {
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

pub(crate) async fn missing_measurements_stay_null(store: &Store) {
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
pub(crate) fn poison(b: &mut model::wire::v1::Batch, t0: i64) {
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
pub(crate) async fn postgres_failed_batches_store_nothing() {
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
    store_new(&t.store, &b, t0).await;
}

/// PostgreSQL only: a committer keeps its connection while groups come back to back and gives
/// it back to the pool once ingest goes quiet, so an idle collector holds none for queries and
/// upkeep to wait on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn postgres_quiet_committers_give_their_connections_back() {
    let Some(t) = support::postgres().await else {
        return;
    };
    let f = fleet();
    let t0 = hour_ago(1);
    for seq in 1..=3 {
        let b = f.batch(0, "quiet", seq, &[t0 + seq as i64 * 1000], 1000);
        store_new(&t.store, &b, t0).await;
    }
    assert!(
        t.store.pool_quiet(std::time::Duration::from_secs(10)).await,
        "connections still lent out after 10 s without ingest: {:?}",
        t.store.pool_connections()
    );
    // And the next batch gets one again.
    let b = f.batch(0, "quiet", 4, &[t0 + 4000], 1000);
    store_new(&t.store, &b, t0).await;
}

/// PostgreSQL only: a transaction its deadlock detector fails is a conflict (the work may be
/// tried again: group commit does, an agent is answered 503 with Retry-After), not an
/// internal error. Two connections lock two rows in opposite orders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn postgres_a_deadlock_is_a_conflict() {
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
pub(crate) async fn postgres_a_bad_batch_fails_alone() {
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
