//! Group commit for PostgreSQL ingest. Batches that arrive while a transaction is in flight
//! wait in a queue and are stored together by the next one: one claim statement per batch, one
//! COPY per table for all of them, one commit. Each caller gets its own outcome only after
//! that commit (a 2xx still means committed), duplicates are told apart inside the group, and
//! a group that fails for any reason but an unreachable database is retried batch by batch,
//! so one bad batch never fails its neighbours.
//!
//! Callers encode their rows (the CPU work) before queueing; committers only send. The queue
//! holds at most one batch per request in flight, which the listener bounds. A caller that
//! goes away (its client disconnected) leaves its batch queued: it is stored, and the agent's
//! retry is answered as a duplicate, as after any answer lost on the way back.

use std::sync::Arc;

use model::Tenant;
use model::inventory::GpuInfo;
use sqlx::{PgPool, Postgres};
use tokio::sync::{Mutex, mpsc, oneshot};

use super::pgcopy::CopyWriter;
use super::{IngestOutcome, Result, StoreError};

/// At most this many batches, or rows, in one transaction.
const MAX_BATCHES: usize = 256;
const MAX_ROWS: u64 = 200_000;
/// Transactions in flight at once: each takes a group off the queue when it is free.
const COMMITTERS: usize = 2;

/// The raw tables' COPY statements, in the order of [`Staged::rows`].
pub(crate) const COPIES: [&str; 5] = [
    "COPY gpu_samples (cluster, node, gpu_uuid, ts, interval_ms, gpu_util, mem_util, mem_used_bytes, mem_total_bytes, power_w, energy_j, temp_c, sm_clock_mhz, mem_clock_mhz, throttle_reasons, pcie_rx_bytes_per_s, pcie_tx_bytes_per_s, nvlink_rx_bytes_per_s, nvlink_tx_bytes_per_s, ecc_corrected, ecc_uncorrected, retired_pages, remapped_rows, enc_util, dec_util, sm_active, sm_occupancy, dram_active, tensor_active, gr_engine_active) FROM STDIN (FORMAT binary)",
    "COPY mig_samples (cluster, node, gpu_uuid, gi_id, ci_id, ts, mem_used_bytes, mem_total_bytes, sm_active, sm_occupancy, dram_active, tensor_active, gr_engine_active) FROM STDIN (FORMAT binary)",
    "COPY process_samples (cluster, node, gpu_uuid, ts, pid, start_time, kind, gi_id, ci_id, tenant_key, sm_util, mem_util, enc_util, dec_util, mem_used_bytes) FROM STDIN (FORMAT binary)",
    "COPY allocation_samples (cluster, node, gpu_uuid, ts, tenant_key, gi_id, ci_id, replica, share) FROM STDIN (FORMAT binary)",
    "COPY gpu_events (cluster, node, gpu_uuid, ts, kind, code, message) FROM STDIN (FORMAT binary)",
];

/// What claiming a batch's sequence number writes besides it.
#[derive(Debug)]
pub(crate) struct Claim {
    pub cluster: String,
    pub node: String,
    pub agent_id: String,
    pub seq: i64,
    pub received_ms: i64,
    pub agent_version: Option<String>,
    pub interval_ms: i32,
    pub last_sample: Option<i64>,
    /// Minute starts (ms) to mark for rollup.
    pub minutes: Vec<i64>,
}

/// One batch, ready to store: owned, its sample rows already encoded.
#[derive(Debug)]
pub(crate) struct Staged {
    pub claim: Claim,
    /// The node's inventory, when it is due to be written.
    pub inventory: Option<Vec<GpuInfo>>,
    /// Tenants due to be written, with their teams.
    pub tenants: Vec<(Tenant, Option<String>)>,
    /// Encoded rows per raw table, in the order of [`COPIES`].
    pub rows: [CopyWriter; 5],
}

impl Staged {
    fn row_count(&self) -> u64 {
        self.rows.iter().map(CopyWriter::rows).sum()
    }
}

type Job = (Staged, oneshot::Sender<Result<IngestOutcome>>);

/// The queue in front of the committers.
#[derive(Debug, Clone)]
pub(crate) struct GroupCommit {
    queue: mpsc::UnboundedSender<Job>,
}

impl GroupCommit {
    /// Starts the committers on the current runtime; they stop when the last clone is dropped.
    pub fn start(pool: PgPool) -> GroupCommit {
        let (queue, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..COMMITTERS {
            tokio::spawn(committer(pool.clone(), rx.clone()));
        }
        GroupCommit { queue }
    }

    /// Stores one batch with whatever else is waiting; its outcome once committed.
    pub async fn store(&self, staged: Staged) -> Result<IngestOutcome> {
        let (done, outcome) = oneshot::channel();
        self.queue
            .send((staged, done))
            .map_err(|_| StoreError::Unavailable("the store is shutting down".into()))?;
        outcome
            .await
            .map_err(|_| StoreError::Unavailable("the store is shutting down".into()))?
    }
}

async fn committer(pool: PgPool, rx: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>) {
    loop {
        let group = {
            let mut rx = rx.lock().await;
            let Some(first) = rx.recv().await else {
                return;
            };
            let mut rows = first.0.row_count();
            let mut group = vec![first];
            while group.len() < MAX_BATCHES && rows < MAX_ROWS {
                match rx.try_recv() {
                    Ok(job) => {
                        rows += job.0.row_count();
                        group.push(job);
                    }
                    Err(_) => break,
                }
            }
            group
        };
        commit(&pool, group).await;
    }
}

async fn commit(pool: &PgPool, group: Vec<Job>) {
    let (staged, replies): (Vec<Staged>, Vec<_>) = group.into_iter().unzip();
    match store(pool, &staged).await {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(Ok(outcome));
            }
        }
        Err(e) if staged.len() == 1 || matches!(e, StoreError::Unavailable(_)) => {
            for reply in replies {
                let _ = reply.send(Err(copy_of(&e)));
            }
        }
        Err(e) => {
            tracing::debug!(error = %e, batches = staged.len(), "group commit failed; storing its batches one by one");
            for (s, reply) in staged.into_iter().zip(replies) {
                let one = store(pool, std::slice::from_ref(&s))
                    .await
                    .map(|mut v| v.remove(0));
                let _ = reply.send(one);
            }
        }
    }
}

fn copy_of(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
        StoreError::BadRequest(m) => StoreError::BadRequest(m.clone()),
        StoreError::Internal(m) => StoreError::Internal(m.clone()),
    }
}

/// One transaction for the group: claims in arrival order (a replay, or an older sequence
/// number than one stored before it, is a duplicate and writes nothing), the records of the
/// claimed batches, one COPY per table, commit.
async fn store(pool: &PgPool, group: &[Staged]) -> Result<Vec<IngestOutcome>> {
    let mut tx = pool.begin().await?;
    let mut outcomes = Vec::with_capacity(group.len());
    let mut claimed = Vec::with_capacity(group.len());
    for s in group {
        if claim(&mut tx, &s.claim).await? {
            write_records(&mut tx, s).await?;
            claimed.push(s);
            outcomes.push(IngestOutcome::Stored {
                rows: s.row_count(),
            });
        } else {
            let c = &s.claim;
            let last: i64 = sqlx::query_scalar(
                "SELECT last_seq FROM agent_streams WHERE cluster = $1 AND node = $2 AND agent_id = $3",
            )
            .bind(&c.cluster)
            .bind(&c.node)
            .bind(&c.agent_id)
            .fetch_one(&mut *tx)
            .await?;
            outcomes.push(IngestOutcome::Duplicate {
                last_seq: last as u64,
            });
        }
    }
    for (i, statement) in COPIES.iter().enumerate() {
        let mut all = CopyWriter::new();
        for s in &claimed {
            all.append(&s.rows[i]);
        }
        super::postgres::copy(&mut tx, statement, all).await?;
    }
    tx.commit().await?;
    Ok(outcomes)
}

/// Claims the batch's sequence number, touches the node and marks the minutes for rollup, in
/// one round trip; the last two only when the claim succeeds. The claim advances the agent's
/// high-water mark only if this batch is newer and locks the row until commit, so concurrent
/// batches of one agent serialise. False for a replay.
async fn claim(tx: &mut sqlx::Transaction<'_, Postgres>, c: &Claim) -> Result<bool> {
    let claimed: Option<i64> = sqlx::query_scalar(
        "WITH claim AS (
             INSERT INTO agent_streams (cluster, node, agent_id, last_seq, last_seen) VALUES ($1, $2, $3, $4, to_timestamp($5 / 1000.0))
             ON CONFLICT (cluster, node, agent_id) DO UPDATE SET last_seq = excluded.last_seq, last_seen = excluded.last_seen
             WHERE agent_streams.last_seq < excluded.last_seq RETURNING last_seq
         ), touch AS (
             INSERT INTO nodes (cluster, node, agent_version, interval_ms, first_seen, last_seen, last_sample)
             SELECT $1, $2, $6, $7, to_timestamp($5 / 1000.0), to_timestamp($5 / 1000.0), to_timestamp($8 / 1000.0) FROM claim
             ON CONFLICT (cluster, node) DO UPDATE SET agent_version = excluded.agent_version, interval_ms = excluded.interval_ms,
               last_seen = excluded.last_seen, last_sample = greatest(nodes.last_sample, excluded.last_sample)
         ), pending AS (
             INSERT INTO rollup_pending (cluster, node, bucket) SELECT $1, $2, to_timestamp(m / 1000.0) FROM claim, unnest($9::bigint[]) AS m
             ON CONFLICT DO NOTHING
         )
         SELECT last_seq FROM claim",
    )
    .bind(&c.cluster)
    .bind(&c.node)
    .bind(&c.agent_id)
    .bind(c.seq)
    .bind(c.received_ms)
    .bind(&c.agent_version)
    .bind(c.interval_ms)
    .bind(c.last_sample)
    .bind(&c.minutes)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(claimed.is_some())
}

/// The inventory and tenants a claimed batch carries, when due.
async fn write_records(tx: &mut sqlx::Transaction<'_, Postgres>, s: &Staged) -> Result<()> {
    let (cluster, node, at) = (&s.claim.cluster, &s.claim.node, s.claim.received_ms);
    for g in s.inventory.iter().flatten() {
        sqlx::query(
            "INSERT INTO gpus (cluster, node, gpu_uuid, gpu_index, model, memory_total_bytes, pci_bus_id, mig_enabled, sharing, replicas, first_seen, last_seen)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, to_timestamp($11 / 1000.0), to_timestamp($11 / 1000.0))
             ON CONFLICT (cluster, node, gpu_uuid) DO UPDATE SET gpu_index = excluded.gpu_index, model = excluded.model,
               memory_total_bytes = excluded.memory_total_bytes, pci_bus_id = excluded.pci_bus_id, mig_enabled = excluded.mig_enabled,
               sharing = excluded.sharing, replicas = excluded.replicas, last_seen = excluded.last_seen",
        )
        .bind(cluster).bind(node).bind(&g.uuid).bind(g.index as i32).bind(&g.model).bind(g.memory_total_bytes)
        .bind(&g.pci_bus_id).bind(g.mig_enabled).bind(&g.sharing).bind(g.replicas as i32).bind(at)
        .execute(&mut **tx).await?;
        sqlx::query("DELETE FROM mig_instances WHERE cluster = $1 AND node = $2 AND gpu_uuid = $3")
            .bind(cluster)
            .bind(node)
            .bind(&g.uuid)
            .execute(&mut **tx)
            .await?;
        for m in &g.mig_instances {
            sqlx::query(
                "INSERT INTO mig_instances (cluster, node, gpu_uuid, gi_id, ci_id, profile, placement_start, placement_size, memory_total_bytes, compute_slices, mig_uuid, last_seen)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, to_timestamp($12 / 1000.0)) ON CONFLICT DO NOTHING",
            )
            .bind(cluster).bind(node).bind(&g.uuid).bind(m.gi_id as i32).bind(m.ci_id as i32).bind(&m.profile)
            .bind(m.placement_start.map(|v| v as i32)).bind(m.placement_size.map(|v| v as i32)).bind(m.memory_total_bytes)
            .bind(m.compute_slices.map(|v| v as i32)).bind(&m.uuid).bind(at)
            .execute(&mut **tx).await?;
        }
    }
    for (t, team) in &s.tenants {
        let seen = s.claim.last_sample.unwrap_or(at);
        sqlx::query(
            "INSERT INTO tenants (cluster, node, tenant_key, kind, namespace, pod, container, pod_uid, job_id, username, account, uid, team, first_seen, last_seen)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, to_timestamp($14 / 1000.0), to_timestamp($14 / 1000.0))
             ON CONFLICT (cluster, node, tenant_key) DO UPDATE SET kind = excluded.kind, namespace = excluded.namespace, pod = excluded.pod,
               container = excluded.container, pod_uid = excluded.pod_uid, job_id = excluded.job_id, username = excluded.username,
               account = excluded.account, uid = excluded.uid, team = excluded.team, last_seen = greatest(tenants.last_seen, excluded.last_seen)",
        )
        .bind(cluster).bind(node).bind(&t.key).bind(t.kind.as_str()).bind(&t.namespace).bind(&t.pod).bind(&t.container)
        .bind(&t.pod_uid).bind(&t.job_id).bind(&t.user).bind(&t.account).bind(t.uid.map(|u| u as i32)).bind(team).bind(seen)
        .execute(&mut **tx).await?;
    }
    Ok(())
}
