//! Group commit for PostgreSQL ingest. Batches that arrive while a transaction is in flight
//! wait in a queue and are stored together by the next one: one claim statement for all of
//! them (one per round when a node has several batches in the group), one COPY per table, one
//! commit. Each caller gets its own outcome only after
//! that commit (a 2xx still means committed), duplicates are told apart inside the group, a
//! group whose transaction lost to a concurrent one (deadlock, serialization failure) is tried
//! again whole, and a group that fails for any other reason but an unreachable database is
//! retried batch by batch, so one bad batch never fails its neighbours.
//!
//! Callers encode their rows (the CPU work) before queueing; committers only send. The queue
//! holds at most one batch per request in flight, which the listener bounds. A caller that
//! goes away (its client disconnected) leaves its batch queued: it is stored, and the agent's
//! retry is answered as a duplicate, as after any answer lost on the way back.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use model::Tenant;
use model::inventory::GpuInfo;
use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};
use tokio::sync::{Mutex, OnceCell, mpsc, oneshot};

use super::pgcopy::CopyWriter;
use crate::error::{Result, StoreError};
use crate::raw;
use crate::records::IngestOutcome;

/// At most this many batches, or rows, in one transaction.
const MAX_BATCHES: usize = 256;
const MAX_ROWS: u64 = 200_000;
/// Transactions in flight at once: each takes a group off the queue when it is free. Four
/// keep the CPU busy while others wait for their commit's WAL flush (`gpulens bench ingest`:
/// 2 left a sixth of the two cores idle; 4 stored 15–20 % more rows/s; 8 no more than 4).
const COMMITTERS: usize = 4;

/// The raw tables' COPY statements, in the order of [`Staged::rows`].
pub(crate) static COPIES: std::sync::LazyLock<[String; 5]> = std::sync::LazyLock::new(|| {
    let copy =
        |table: &str, columns: &str| format!("COPY {table} ({columns}) FROM STDIN (FORMAT binary)");
    let raw = |t: &raw::RawTable| copy(t.hot, &raw::columns(t));
    [
        raw(&raw::GPU),
        raw(&raw::MIG),
        raw(&raw::PROCESS),
        raw(&raw::ALLOCATION),
        copy(raw::EVENTS, raw::EVENT_COLUMNS),
    ]
});

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
    /// Tenants due to be written, with their teams and when the batch first shows each.
    pub tenants: Vec<(Tenant, Option<String>, Option<i64>)>,
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
        let citus = Arc::new(OnceCell::new());
        for _ in 0..COMMITTERS {
            tokio::spawn(committer(pool.clone(), rx.clone(), citus.clone()));
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

/// A committer keeps its connection from one group to the next while groups come back to back
/// (no pool round trip and liveness ping per transaction); after this long with no group it
/// gives the connection back to the pool, which tests it before lending it again.
const KEEP_IDLE: Duration = Duration::from_secs(1);

/// Whether the database is a Citus cluster, asked once for all committers.
type IsCitus = Arc<OnceCell<bool>>;

async fn committer(pool: PgPool, rx: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>, citus: IsCitus) {
    let mut held: Option<PoolConnection<Postgres>> = None;
    loop {
        let next = next_group(&rx);
        tokio::pin!(next);
        let next = match held {
            Some(_) => tokio::select! {
                group = &mut next => group,
                () = tokio::time::sleep(KEEP_IDLE) => {
                    // Idle: the connection goes back to the pool, for queries and upkeep.
                    held = None;
                    next.await
                }
            },
            None => next.await,
        };
        let Some(group) = next else {
            return;
        };
        let conn = match held.take() {
            Some(conn) => Ok(conn),
            None => fresh(&pool, &citus).await,
        };
        match conn {
            Ok(mut conn) => {
                let citus = citus.get().copied().unwrap_or(false);
                if commit(&mut conn, group, citus).await {
                    held = Some(conn);
                } else {
                    // It may be broken (a restarted or unreachable server): never lent again.
                    conn.close_on_drop();
                }
            }
            Err(e) => {
                for (_, reply) in group {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Everything queued once this committer's turn at the queue comes: at least one batch
/// (waiting for it), at most [`MAX_BATCHES`] or [`MAX_ROWS`]. `None` once the store has shut
/// down.
async fn next_group(rx: &Mutex<mpsc::UnboundedReceiver<Job>>) -> Option<Vec<Job>> {
    let mut rx = rx.lock().await;
    let first = rx.recv().await?;
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
    Some(group)
}

/// A connection from the pool; the first one also tells whether the database is Citus.
async fn fresh(pool: &PgPool, citus: &IsCitus) -> Result<PoolConnection<Postgres>> {
    let mut conn = pool.acquire().await?;
    citus
        .get_or_try_init(|| super::citus::installed(&mut conn))
        .await?;
    Ok(conn)
}

/// Stores the group and answers its callers; false when the database was unreachable.
async fn commit(conn: &mut PgConnection, group: Vec<Job>, citus: bool) -> bool {
    let (staged, replies): (Vec<Staged>, Vec<_>) = group.into_iter().unzip();
    match store_again_on_conflict(conn, &staged, citus).await {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(Ok(outcome));
            }
            true
        }
        Err(e) if staged.len() == 1 || matches!(e, StoreError::Unavailable(_)) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
            !matches!(e, StoreError::Unavailable(_))
        }
        Err(e) => {
            tracing::debug!(error = %e, batches = staged.len(), "group commit failed; storing its batches one by one");
            let mut reachable = true;
            for (s, reply) in staged.into_iter().zip(replies) {
                let one = store_again_on_conflict(conn, std::slice::from_ref(&s), citus)
                    .await
                    .map(|mut v| v.remove(0));
                reachable &= !matches!(one, Err(StoreError::Unavailable(_)));
                let _ = reply.send(one);
            }
            reachable
        }
    }
}

/// [`store`], tried again when its transaction lost to a concurrent one
/// ([`crate::error::try_again`]). Rows are locked in key order within a round
/// ([`rounds`]), but a node whose batches come from two agent ids in one group locks again in a
/// later round, so two committers can still deadlock, PostgreSQL's detector then failing one of
/// them.
async fn store_again_on_conflict(
    conn: &mut PgConnection,
    group: &[Staged],
    citus: bool,
) -> Result<Vec<IngestOutcome>> {
    let mut tries = 1;
    loop {
        let outcome = store(conn, group, citus).await;
        if !crate::error::try_again(&outcome, &mut tries, "group commit") {
            return outcome;
        }
    }
}

/// One transaction for the group: claims in key order, one round of distinct nodes at a
/// time (a replay, or an older sequence number than one stored before it, is a duplicate and
/// writes nothing), the records of the claimed batches, one COPY per table, commit.
async fn store(
    conn: &mut PgConnection,
    group: &[Staged],
    citus: bool,
) -> Result<Vec<IngestOutcome>> {
    let mut tx = conn.begin().await?;
    let mut outcomes: Vec<Option<IngestOutcome>> = group.iter().map(|_| None).collect();
    let mut claimed = Vec::with_capacity(group.len());
    for round in rounds(group) {
        let claims: Vec<&Claim> = round.iter().map(|&i| &group[i].claim).collect();
        let won = claim(&mut tx, &claims, citus).await?;
        for (&i, won) in round.iter().zip(won) {
            let s = &group[i];
            outcomes[i] = Some(if won {
                write_records(&mut tx, s).await?;
                claimed.push(s);
                IngestOutcome::Stored {
                    rows: s.row_count(),
                }
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
                IngestOutcome::Duplicate {
                    last_seq: last as u64,
                }
            });
        }
    }
    for (i, statement) in COPIES.iter().enumerate() {
        let mut all = CopyWriter::new();
        for s in &claimed {
            all.append(&s.rows[i]);
        }
        super::pgcopy::copy(&mut tx, statement, all).await?;
    }
    tx.commit().await?;
    Ok(outcomes
        .into_iter()
        .map(|o| o.expect("every batch of the group is in one round"))
        .collect())
}

/// The group's batches (indexes) in rounds in which no node appears twice: a node's k-th batch
/// of the group goes to round k, so each node's batches keep their arrival order. One claim
/// statement may touch a node's rows only once. Each round is in key order (cluster, node,
/// agent id), the order its rows are locked in, so that two committers' rounds never wait on
/// each other in a cycle.
fn rounds(group: &[Staged]) -> Vec<Vec<usize>> {
    let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (i, s) in group.iter().enumerate() {
        let k = seen
            .entry((s.claim.cluster.as_str(), s.claim.node.as_str()))
            .or_insert(0);
        if *k == rounds.len() {
            rounds.push(Vec::new());
        }
        rounds[*k].push(i);
        *k += 1;
    }
    for round in &mut rounds {
        round.sort_by_key(|&i| {
            let c = &group[i].claim;
            (&c.cluster, &c.node, &c.agent_id)
        });
    }
    rounds
}

/// Claims the batches' sequence numbers, touches their nodes and marks their minutes for
/// rollup; the last two only for the batches whose claim succeeds. A claim advances its
/// agent's high-water mark only if the batch is newer and locks the row until commit, so
/// concurrent batches of one agent serialise; rows are locked in key order. The batches must
/// be of distinct nodes ([`rounds`]). One round trip for all of them; on Citus one per batch
/// ([`claim_one`]: Citus plans the arrays through the coordinator, the one-batch statement it
/// routes to the batch's node). A round of one batch, the most common, also takes
/// [`claim_one`]: without the arrays' unnesting and joins it costs PostgreSQL 30–40 µs less
/// CPU per call (docs/PERFORMANCE.md, "what pipelining and the claim are worth"). Whether each
/// batch was claimed (false for a replay), in the order given.
async fn claim(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    claims: &[&Claim],
    citus: bool,
) -> Result<Vec<bool>> {
    if citus || claims.len() == 1 {
        let mut won = Vec::with_capacity(claims.len());
        for c in claims {
            won.push(claim_one(tx, c).await?);
        }
        return Ok(won);
    }
    let mut owners = Vec::new();
    let mut minutes = Vec::new();
    for (i, c) in claims.iter().enumerate() {
        owners.extend(c.minutes.iter().map(|_| i as i64 + 1));
        minutes.extend_from_slice(&c.minutes);
    }
    let won: Vec<i64> = sqlx::query_scalar(
        "WITH input AS (
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::int[], $8::bigint[])
               WITH ORDINALITY AS i (cluster, node, agent_id, seq, received_ms, agent_version, interval_ms, last_sample, ord)
         ), claim AS (
             INSERT INTO agent_streams (cluster, node, agent_id, last_seq, last_seen)
             SELECT cluster, node, agent_id, seq, to_timestamp(received_ms / 1000.0) FROM input ORDER BY cluster, node, agent_id
             ON CONFLICT (cluster, node, agent_id) DO UPDATE SET last_seq = excluded.last_seq, last_seen = excluded.last_seen
             WHERE agent_streams.last_seq < excluded.last_seq RETURNING cluster, node, agent_id
         ), won AS (
             SELECT input.* FROM input JOIN claim USING (cluster, node, agent_id)
         ), touch AS (
             INSERT INTO nodes (cluster, node, agent_version, interval_ms, first_seen, last_seen, last_sample)
             SELECT cluster, node, agent_version, interval_ms, to_timestamp(received_ms / 1000.0), to_timestamp(received_ms / 1000.0),
                    to_timestamp(last_sample / 1000.0) FROM won ORDER BY cluster, node
             ON CONFLICT (cluster, node) DO UPDATE SET agent_version = excluded.agent_version, interval_ms = excluded.interval_ms,
               last_seen = excluded.last_seen, last_sample = greatest(nodes.last_sample, excluded.last_sample)
         ), pending AS (
             INSERT INTO rollup_pending (cluster, node, bucket)
             SELECT won.cluster, won.node, to_timestamp(m.minute / 1000.0) FROM won JOIN unnest($9::bigint[], $10::bigint[]) AS m (owner, minute) ON m.owner = won.ord
             ON CONFLICT DO NOTHING
         )
         SELECT ord FROM won",
    )
    .bind(claims.iter().map(|c| c.cluster.as_str()).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.node.as_str()).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.agent_id.as_str()).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.seq).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.received_ms).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.agent_version.as_deref()).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.interval_ms).collect::<Vec<_>>())
    .bind(claims.iter().map(|c| c.last_sample).collect::<Vec<_>>())
    .bind(owners)
    .bind(minutes)
    .fetch_all(&mut **tx)
    .await?;
    let mut claimed = vec![false; claims.len()];
    for ord in won {
        claimed[ord as usize - 1] = true;
    }
    Ok(claimed)
}

/// [`claim`] of one batch, in a form Citus routes to the batch's node. False for a replay.
async fn claim_one(tx: &mut sqlx::Transaction<'_, Postgres>, c: &Claim) -> Result<bool> {
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

/// The inventory and tenants a claimed batch carries, when due: one statement per table
/// (the rows of each in arrays), not one per GPU, MIG instance and tenant.
async fn write_records(tx: &mut sqlx::Transaction<'_, Postgres>, s: &Staged) -> Result<()> {
    let (cluster, node, at) = (&s.claim.cluster, &s.claim.node, s.claim.received_ms);
    if let Some(gpus) = &s.inventory {
        let uuids: Vec<&str> = gpus.iter().map(|g| g.uuid.as_str()).collect();
        sqlx::query(
            "INSERT INTO gpus (cluster, node, gpu_uuid, gpu_index, model, memory_total_bytes, pci_bus_id, mig_enabled, sharing, replicas, first_seen, last_seen)
             SELECT $1, $2, g.uuid, g.idx, g.model, g.mem, g.pci, g.mig, g.sharing, g.replicas, to_timestamp($3 / 1000.0), to_timestamp($3 / 1000.0)
             FROM unnest($4::text[], $5::int[], $6::text[], $7::bigint[], $8::text[], $9::bool[], $10::text[], $11::int[])
               AS g (uuid, idx, model, mem, pci, mig, sharing, replicas)
             ON CONFLICT (cluster, node, gpu_uuid) DO UPDATE SET gpu_index = excluded.gpu_index, model = excluded.model,
               memory_total_bytes = excluded.memory_total_bytes, pci_bus_id = excluded.pci_bus_id, mig_enabled = excluded.mig_enabled,
               sharing = excluded.sharing, replicas = excluded.replicas, last_seen = excluded.last_seen",
        )
        .bind(cluster)
        .bind(node)
        .bind(at)
        .bind(&uuids)
        .bind(gpus.iter().map(|g| g.index as i32).collect::<Vec<_>>())
        .bind(gpus.iter().map(|g| g.model.as_str()).collect::<Vec<_>>())
        .bind(gpus.iter().map(|g| g.memory_total_bytes).collect::<Vec<_>>())
        .bind(gpus.iter().map(|g| g.pci_bus_id.as_deref()).collect::<Vec<_>>())
        .bind(gpus.iter().map(|g| g.mig_enabled).collect::<Vec<_>>())
        .bind(gpus.iter().map(|g| g.sharing.as_str()).collect::<Vec<_>>())
        .bind(gpus.iter().map(|g| g.replicas as i32).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?;
        sqlx::query(
            "DELETE FROM mig_instances WHERE cluster = $1 AND node = $2 AND gpu_uuid = ANY($3::text[])",
        )
        .bind(cluster)
        .bind(node)
        .bind(&uuids)
        .execute(&mut **tx)
        .await?;
        let migs: Vec<_> = gpus
            .iter()
            .flat_map(|g| g.mig_instances.iter().map(move |m| (g.uuid.as_str(), m)))
            .collect();
        if !migs.is_empty() {
            sqlx::query(
                "INSERT INTO mig_instances (cluster, node, gpu_uuid, gi_id, ci_id, profile, placement_start, placement_size, memory_total_bytes, compute_slices, mig_uuid, last_seen)
                 SELECT $1, $2, m.gpu, m.gi, m.ci, m.profile, m.pstart, m.psize, m.mem, m.slices, m.uuid, to_timestamp($3 / 1000.0)
                 FROM unnest($4::text[], $5::int[], $6::int[], $7::text[], $8::int[], $9::int[], $10::bigint[], $11::int[], $12::text[])
                   AS m (gpu, gi, ci, profile, pstart, psize, mem, slices, uuid)
                 ON CONFLICT DO NOTHING",
            )
            .bind(cluster)
            .bind(node)
            .bind(at)
            .bind(migs.iter().map(|(g, _)| *g).collect::<Vec<_>>())
            .bind(migs.iter().map(|(_, m)| m.gi_id as i32).collect::<Vec<_>>())
            .bind(migs.iter().map(|(_, m)| m.ci_id as i32).collect::<Vec<_>>())
            .bind(migs.iter().map(|(_, m)| m.profile.as_str()).collect::<Vec<_>>())
            .bind(migs.iter().map(|(_, m)| m.placement_start.map(|v| v as i32)).collect::<Vec<_>>())
            .bind(migs.iter().map(|(_, m)| m.placement_size.map(|v| v as i32)).collect::<Vec<_>>())
            .bind(migs.iter().map(|(_, m)| m.memory_total_bytes).collect::<Vec<_>>())
            .bind(migs.iter().map(|(_, m)| m.compute_slices.map(|v| v as i32)).collect::<Vec<_>>())
            .bind(migs.iter().map(|(_, m)| m.uuid.as_deref()).collect::<Vec<_>>())
            .execute(&mut **tx)
            .await?;
        }
    }
    if !s.tenants.is_empty() {
        let text = |f: fn(&Tenant) -> Option<&str>| -> Vec<Option<&str>> {
            s.tenants.iter().map(|(t, _, _)| f(t)).collect()
        };
        sqlx::query(
            "INSERT INTO tenants (cluster, node, tenant_key, kind, namespace, pod, container, pod_uid, job_id, username, account, uid, team, first_seen, last_seen)
             SELECT $1, $2, t.key, t.kind, t.namespace, t.pod, t.container, t.pod_uid, t.job_id, t.username, t.account, t.uid, t.team,
                    to_timestamp(coalesce(t.first, $3) / 1000.0), to_timestamp($3 / 1000.0)
             FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::int[], $14::text[], $15::bigint[])
               AS t (key, kind, namespace, pod, container, pod_uid, job_id, username, account, uid, team, first)
             ON CONFLICT (cluster, node, tenant_key) DO UPDATE SET kind = excluded.kind, namespace = excluded.namespace, pod = excluded.pod,
               container = excluded.container, pod_uid = excluded.pod_uid, job_id = excluded.job_id, username = excluded.username,
               account = excluded.account, uid = excluded.uid, team = excluded.team, last_seen = greatest(tenants.last_seen, excluded.last_seen),
               first_seen = least(tenants.first_seen, excluded.first_seen)",
        )
        .bind(cluster)
        .bind(node)
        .bind(s.claim.last_sample.unwrap_or(at))
        .bind(s.tenants.iter().map(|(t, _, _)| t.key.as_str()).collect::<Vec<_>>())
        .bind(s.tenants.iter().map(|(t, _, _)| t.kind.as_str()).collect::<Vec<_>>())
        .bind(text(|t| t.namespace.as_deref()))
        .bind(text(|t| t.pod.as_deref()))
        .bind(text(|t| t.container.as_deref()))
        .bind(text(|t| t.pod_uid.as_deref()))
        .bind(text(|t| t.job_id.as_deref()))
        .bind(text(|t| t.user.as_deref()))
        .bind(text(|t| t.account.as_deref()))
        .bind(s.tenants.iter().map(|(t, _, _)| t.uid.map(|u| u as i32)).collect::<Vec<_>>())
        .bind(s.tenants.iter().map(|(_, team, _)| team.as_deref()).collect::<Vec<_>>())
        .bind(s.tenants.iter().map(|(_, _, first)| *first).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}
