//! Storage: the one place that knows SQL. Two backends with the same logical tables —
//! PostgreSQL for production, embedded SQLite as the default — behind one [`Store`] type.
//! Callers see records, series and outcomes; never sqlx types or SQL errors.

pub mod alerts;
mod citus;
mod group_commit;
pub mod label_actions;
mod migrate;
mod pgcopy;
mod postgres;
mod raw;
pub mod remote_write;
pub mod reports;
pub use model::rollup;
pub mod series;
mod span;
mod sqlite;

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use model::rollup::{DeviceMinute, DeviceMinutes, TenantMinute, TenantMinutes};
use model::wire::v1::Batch;
pub use raw::{BLOCK_MS, block_of};
pub use series::{Agg, Entity, Metric, Resolution, Series, SeriesQuery};

use rollup::{MINUTE_MS, NodeRollup};

/// How long each resolution is kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retention {
    pub raw: Duration,
    pub minute: Duration,
    pub hour: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            raw: Duration::from_secs(7 * 86_400),
            minute: Duration::from_secs(90 * 86_400),
            hour: Duration::from_secs(2 * 365 * 86_400),
        }
    }
}

/// What went wrong in storage, in the terms callers act on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or is overloaded; retrying later may succeed.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The request cannot be served as asked (bad range, unknown entity, …).
    #[error("{0}")]
    BadRequest(String),
    /// The transaction lost to a concurrent one (PostgreSQL's deadlock detector, a
    /// serialization failure: SQLSTATE class 40) and was rolled back whole; the same work
    /// tried again succeeds.
    #[error("database conflict: {0}")]
    Conflict(String),
    #[error("database error: {0}")]
    Internal(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        use sqlx::Error as E;
        match &e {
            E::Io(_) | E::PoolTimedOut | E::PoolClosed | E::Tls(_) | E::WorkerCrashed => {
                StoreError::Unavailable(e.to_string())
            }
            E::Database(db) => {
                // PostgreSQL: 08* connection exceptions, 53* insufficient resources,
                // 57P0x shutdown/crash/cannot-connect-now. SQLite: BUSY and LOCKED.
                let code = db.code().unwrap_or_default();
                if code.starts_with("08")
                    || code.starts_with("53")
                    || code.starts_with("57P")
                    || code == "5"
                    || code == "6"
                    || code == "517"
                {
                    StoreError::Unavailable(e.to_string())
                } else if code.starts_with("40") {
                    // 40001 serialization failure, 40P01 deadlock detected.
                    StoreError::Conflict(e.to_string())
                } else {
                    StoreError::Internal(e.to_string())
                }
            }
            _ => StoreError::Internal(e.to_string()),
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// The result of storing one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngestOutcome {
    /// Stored; the number of sample rows written.
    Stored { rows: u64 },
    /// A retry of a batch already stored (its sequence is not above the agent's last one).
    Duplicate { last_seq: u64 },
}

/// A node as the store knows it.
#[derive(Debug, Clone)]
pub struct NodeRecord {
    pub cluster: String,
    pub node: String,
    pub agent_version: Option<String>,
    pub interval_ms: i64,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
    pub last_sample_ms: Option<i64>,
    pub gpu_count: i64,
}

/// A GPU with its MIG instances.
#[derive(Debug, Clone)]
pub struct GpuRecord {
    pub cluster: String,
    pub node: String,
    pub uuid: String,
    pub index: i64,
    pub model: String,
    pub memory_total_bytes: i64,
    pub pci_bus_id: Option<String>,
    pub mig_enabled: bool,
    pub sharing: String,
    pub replicas: i64,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
    pub mig_instances: Vec<MigRecord>,
}

#[derive(Debug, Clone)]
pub struct MigRecord {
    pub gi_id: i64,
    pub ci_id: i64,
    pub profile: String,
    pub placement_start: Option<i64>,
    pub placement_size: Option<i64>,
    pub memory_total_bytes: i64,
    pub compute_slices: Option<i64>,
    pub uuid: Option<String>,
}

/// A tenant, merged over the nodes it was seen on.
#[derive(Debug, Clone)]
pub struct TenantRecord {
    pub cluster: String,
    pub key: String,
    pub kind: String,
    pub team: Option<String>,
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub container: Option<String>,
    pub pod_uid: Option<String>,
    pub job_id: Option<String>,
    pub user: Option<String>,
    pub account: Option<String>,
    pub uid: Option<i64>,
    pub nodes: Vec<String>,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
}

impl TenantRecord {
    /// The tenant's name as the model spells it everywhere (dashboard, reports, agent output).
    pub fn display_name(&self) -> String {
        let Some(kind) = model::TenantKind::parse(&self.kind) else {
            return self.key.clone();
        };
        model::Tenant {
            key: self.key.clone(),
            kind,
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            container: self.container.clone(),
            pod_uid: self.pod_uid.clone(),
            job_id: self.job_id.clone(),
            user: self.user.clone(),
            account: self.account.clone(),
            uid: self.uid.and_then(|u| u32::try_from(u).ok()),
        }
        .display_name()
    }
}

/// Row counts, for tests and the CLI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableCounts {
    pub gpu_samples: i64,
    pub mig_samples: i64,
    pub process_samples: i64,
    pub allocation_samples: i64,
    pub gpu_events: i64,
    pub gpu_rollup_1m: i64,
    pub gpu_rollup_1h: i64,
    pub tenant_rollup_1m: i64,
    pub tenant_rollup_1h: i64,
    pub cluster_rollup_1h: i64,
}

impl TableCounts {
    /// The tables counted after the four raw ones, in field order.
    const OTHERS: [&'static str; 6] = [
        "gpu_events",
        "gpu_rollup_1m",
        "gpu_rollup_1h",
        "tenant_rollup_1m",
        "tenant_rollup_1h",
        "cluster_rollup_1h",
    ];

    /// One SELECT of every count, in field order (sealed samples count as the rows they
    /// were); `cast` turns a sum into a 64-bit integer where the backend needs it.
    fn query(cast: &str) -> String {
        let columns: Vec<String> = raw::TABLES
            .iter()
            .map(|t| {
                format!(
                    "((SELECT count(*) FROM {}) + (SELECT coalesce(sum(n), 0){cast} FROM {}))",
                    t.hot, t.sealed
                )
            })
            .chain(
                Self::OTHERS
                    .iter()
                    .map(|t| format!("(SELECT count(*) FROM {t})")),
            )
            .collect();
        format!("SELECT {}", columns.join(", "))
    }

    fn from_row<R: sqlx::Row>(row: &R) -> Result<TableCounts>
    where
        usize: sqlx::ColumnIndex<R>,
        i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    {
        let v = |i: usize| -> Result<i64> { Ok(row.try_get::<i64, _>(i)?) };
        Ok(TableCounts {
            gpu_samples: v(0)?,
            mig_samples: v(1)?,
            process_samples: v(2)?,
            allocation_samples: v(3)?,
            gpu_events: v(4)?,
            gpu_rollup_1m: v(5)?,
            gpu_rollup_1h: v(6)?,
            tenant_rollup_1m: v(7)?,
            tenant_rollup_1h: v(8)?,
            cluster_rollup_1h: v(9)?,
        })
    }

    /// The raw samples of each kind (rows and sealed together), in the order of the first
    /// five of [`Store::RAW_TABLES`].
    pub fn raw(&self) -> [i64; 5] {
        [
            self.gpu_samples,
            self.mig_samples,
            self.process_samples,
            self.allocation_samples,
            self.gpu_events,
        ]
    }
}

/// What a rollup pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RollupStats {
    pub minutes: usize,
    pub gpu_rows: usize,
    pub tenant_rows: usize,
    /// Raw rows that could not be decoded (left where they are, skipped, counted): one bad row
    /// never stops a rollup pass.
    pub undecodable_rows: usize,
}

/// What a retention pass removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionStats {
    /// Partitions dropped (PostgreSQL) or tables pruned (SQLite).
    pub dropped: Vec<String>,
    pub rows_deleted: u64,
}

/// Maps a tenant's namespace, account or user to a team.
pub type TeamOf<'a> = &'a (dyn Fn(&model::Tenant) -> Option<String> + Send + Sync);

/// The storage backends.
#[derive(Debug, Clone)]
enum Backend {
    Postgres(postgres::PgStore),
    Sqlite(sqlite::SqliteStore),
}

/// The store: a backend plus what this process remembers about recent writes.
#[derive(Debug, Clone)]
pub struct Store {
    backend: Backend,
    written: Arc<Mutex<WriteCache>>,
    /// Seeds the fingerprints in [`WriteCache`], once per process.
    fingerprints: foldhash::quality::RandomState,
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match &$self.backend {
            Backend::Postgres($s) => $e,
            Backend::Sqlite($s) => $e,
        }
    };
}

/// Inventory and tenant records change rarely but arrive with every batch. Unchanged ones are
/// written at most once per [`REFRESH_MS`] (which bounds how stale their `last_seen` gets),
/// so a steady batch costs a handful of statements rather than one per tenant.
#[derive(Debug, Default)]
struct WriteCache {
    /// cluster → node → what was last written for it, looked up by `&str` (no allocation).
    nodes: HashMap<String, HashMap<String, NodeWrites>>,
}

/// (fingerprint, written at) of a node's inventory and of each of its tenants.
#[derive(Debug, Default)]
struct NodeWrites {
    inventory: Option<(u64, i64)>,
    tenants: HashMap<String, (u64, i64)>,
}

/// How often an unchanged inventory or tenant record is written again.
pub const REFRESH_MS: i64 = 60_000;

/// What of a batch's descriptive records the backend must write.
#[derive(Debug)]
pub struct Writes<'a> {
    pub inventory: bool,
    pub tenants: Vec<&'a model::Tenant>,
}

impl Store {
    /// Connects to `postgres://…` or opens `sqlite://PATH` (created when missing).
    pub async fn connect(url: &str) -> Result<Store> {
        let backend = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres(postgres::PgStore::connect(url).await?)
        } else if url.starts_with("sqlite:") {
            Backend::Sqlite(sqlite::SqliteStore::open(url).await?)
        } else {
            return Err(StoreError::BadRequest(format!(
                "database url must start with postgres:// or sqlite://, got {:?}",
                redact_url(url)
            )));
        };
        Ok(Store {
            backend,
            written: Arc::default(),
            fingerprints: Default::default(),
        })
    }

    pub fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Postgres(_) => "postgres",
            Backend::Sqlite(_) => "sqlite",
        }
    }

    /// Applies migrations that have not run yet; refuses if an applied one was edited.
    pub async fn migrate(&self) -> Result<Vec<String>> {
        dispatch!(self, s => s.migrate().await)
    }

    /// Makes sure the database is a Citus cluster's coordinator (creating the extension when
    /// the server has it), so that `migrate` distributes the tables.
    pub async fn require_citus(&self) -> Result<()> {
        match &self.backend {
            Backend::Postgres(s) => s.require_citus().await,
            Backend::Sqlite(_) => Err(StoreError::BadRequest(
                "Citus needs a PostgreSQL database: the embedded SQLite store is one file".into(),
            )),
        }
    }

    pub async fn ping(&self) -> Result<()> {
        dispatch!(self, s => s.ping().await)
    }

    /// Stores a validated batch atomically: everything or nothing, exactly once per
    /// (agent, sequence).
    pub async fn ingest(
        &self,
        batch: &Batch,
        received_ms: i64,
        team_of: TeamOf<'_>,
    ) -> Result<IngestOutcome> {
        let due = |seen: Option<&(u64, i64)>, fp: u64| {
            seen.is_none_or(|&(f, at)| f != fp || received_ms - at >= REFRESH_MS)
        };
        let inventory = batch
            .inventory
            .as_ref()
            .map(|i| self.fingerprints.hash_one(i));
        let fingerprints: Vec<(u64, &model::Tenant)> = batch
            .tenants
            .iter()
            .map(|t| (self.fingerprints.hash_one((t, team_of(t))), t))
            .collect();
        let (write_inventory, tenants) = {
            let cache = self.written.lock().expect("write cache");
            let seen = cache
                .nodes
                .get(&batch.cluster)
                .and_then(|c| c.get(&batch.node));
            let write_inventory =
                inventory.is_some_and(|fp| due(seen.and_then(|n| n.inventory.as_ref()), fp));
            let tenants: Vec<(u64, &model::Tenant)> = fingerprints
                .into_iter()
                .filter(|(fp, t)| due(seen.and_then(|n| n.tenants.get(&t.key)), *fp))
                .collect();
            (write_inventory, tenants)
        };
        let writes = Writes {
            inventory: write_inventory,
            tenants: tenants.iter().map(|(_, t)| *t).collect(),
        };
        let outcome = dispatch!(self, s => s.ingest(batch, received_ms, team_of, &writes).await)?;
        let wrote = write_inventory || !tenants.is_empty();
        if wrote && matches!(outcome, IngestOutcome::Stored { .. }) {
            // Only what is committed is remembered.
            let mut cache = self.written.lock().expect("write cache");
            let node = cache
                .nodes
                .entry(batch.cluster.clone())
                .or_default()
                .entry(batch.node.clone())
                .or_default();
            if let (true, Some(fp)) = (write_inventory, inventory) {
                node.inventory = Some((fp, received_ms));
            }
            for (fp, t) in &tenants {
                node.tenants.insert(t.key.clone(), (*fp, received_ms));
            }
        }
        Ok(outcome)
    }

    pub async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        dispatch!(self, s => s.nodes().await)
    }

    pub async fn gpus(&self, node: Option<&str>) -> Result<Vec<GpuRecord>> {
        dispatch!(self, s => s.gpus(node).await)
    }

    /// Whether gpulens has data for `entity`: one query that stops at the first matching row,
    /// instead of reading every node, GPU or tenant into memory.
    pub async fn is_known(&self, entity: &Entity) -> Result<bool> {
        let table = match entity {
            Entity::Fleet => return Ok(true),
            Entity::Node(_) | Entity::Cluster(_) => "nodes",
            Entity::Gpu(_) => "gpus",
            Entity::Tenant(_) | Entity::TenantIn(..) => "tenants",
        };
        let filters = entity.filters();
        dispatch!(self, s => s.exists(table, &filters).await)
    }

    pub async fn tenants(&self) -> Result<Vec<TenantRecord>> {
        let rows = dispatch!(self, s => s.tenant_rows().await)?;
        Ok(merge_tenants(rows))
    }

    pub async fn counts(&self) -> Result<TableCounts> {
        dispatch!(self, s => s.counts().await)
    }

    /// The raw sample tables, as [`Store::table_bytes`] measures them: the hot rows, then the
    /// sealed blocks.
    pub const RAW_TABLES: [&'static str; 9] = [
        "gpu_samples",
        "mig_samples",
        "process_samples",
        "allocation_samples",
        "gpu_events",
        "gpu_blocks",
        "mig_blocks",
        "process_blocks",
        "allocation_blocks",
    ];

    /// Rows and bytes on disk of each raw table, indexes (and TOAST) included, all partitions
    /// (and on Citus all shards) together; on SQLite the pages of the table and of its indexes.
    pub async fn table_bytes(&self) -> Result<Vec<(&'static str, i64, i64)>> {
        let mut out = Vec::new();
        for t in Self::RAW_TABLES {
            let rows = dispatch!(self, s => s.table_rows(t).await)?;
            out.push((t, rows, dispatch!(self, s => s.table_bytes(t).await)?));
        }
        Ok(out)
    }

    /// Makes the space of sealed-off hot rows reusable now, as autovacuum does within a minute
    /// or so on its own (PostgreSQL `VACUUM`; SQLite reuses freed pages by itself). For
    /// benchmarks.
    pub async fn reclaim_hot(&self) -> Result<()> {
        match &self.backend {
            Backend::Postgres(s) => s.vacuum(&Self::RAW_TABLES[..4]).await,
            Backend::Sqlite(_) => Ok(()),
        }
    }

    /// The newest sample timestamp stored for a node.
    pub async fn last_sample_ms(&self, cluster: &str, node: &str) -> Result<Option<i64>> {
        dispatch!(self, s => s.last_sample_ms(cluster, node).await)
    }

    pub async fn series(
        &self,
        q: &SeriesQuery,
        now_ms: i64,
        retention: &Retention,
    ) -> Result<Series> {
        let plan = q.plan(now_ms, retention)?;
        if plan.resolution == series::Resolution::Raw {
            let (table, filter) = series::raw_source(q);
            let samples =
                dispatch!(self, s => s.raw_records(table, &filter, q.from_ms, q.to_ms).await)?;
            let values = series::raw_points(q, &plan, table, &samples);
            return Ok(series::assemble(q, &plan, &values));
        }
        dispatch!(self, s => s.series(q, &plan).await)
    }

    /// Creates the time partitions that the coming days need (PostgreSQL; no-op on SQLite).
    pub async fn prepare_partitions(&self, now_ms: i64) -> Result<()> {
        dispatch!(self, s => s.prepare_partitions(now_ms).await)
    }

    /// Recomputes the rollups of every minute that received data, up to `until_ms` (minutes
    /// that end after it are left for later, as more data may still arrive for them).
    pub async fn rollup(&self, until_ms: i64) -> Result<RollupStats> {
        let pending = dispatch!(self, s => s.pending_minutes(until_ms).await)?;
        let mut stats = RollupStats::default();
        let mut cluster_hours: std::collections::BTreeSet<(String, i64)> =
            std::collections::BTreeSet::new();
        let mut by_node: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
        for (cluster, node, bucket) in pending {
            by_node.entry((cluster, node)).or_default().push(bucket);
        }
        for ((cluster, node), mut buckets) in by_node {
            buckets.sort_unstable();
            // Work through contiguous spans inside one hour, so memory stays bounded and each
            // span is one transaction: pending marks, raw reads and rollup writes together.
            for chunk in buckets
                .chunk_by(|a, b| b - a <= MINUTE_MS && b / rollup::HOUR_MS == a / rollup::HOUR_MS)
            {
                let from = chunk[0];
                let to = chunk[chunk.len() - 1] + MINUTE_MS;
                let (gpu_rows, tenant_rows, undecodable) =
                    dispatch!(self, s => s.rollup_span(&cluster, &node, from, to).await)?;
                stats.undecodable_rows += undecodable;
                cluster_hours.insert((cluster.clone(), rollup::bucket_of(from, rollup::HOUR_MS)));
                stats.minutes += chunk.len();
                stats.gpu_rows += gpu_rows;
                stats.tenant_rows += tenant_rows;
            }
        }
        // Each touched cluster-hour is merged once per pass, after all its nodes.
        for (cluster, hour) in cluster_hours {
            dispatch!(self, s => s.refresh_cluster_hour(&cluster, hour).await)?;
        }
        Ok(stats)
    }

    /// Re-merges one cluster-hour from its GPU hour rollups (after rollups were written
    /// directly, as benchmarks do).
    pub async fn refresh_cluster_hour(&self, cluster: &str, hour: i64) -> Result<()> {
        dispatch!(self, s => s.refresh_cluster_hour(cluster, hour).await)
    }

    /// Removes data older than each resolution's retention.
    pub async fn apply_retention(
        &self,
        now_ms: i64,
        retention: &Retention,
    ) -> Result<RetentionStats> {
        dispatch!(self, s => s.apply_retention(now_ms, retention).await)
    }

    /// Benchmark baseline: COPY a batch's rows into the raw tables and nothing else
    /// (PostgreSQL only).
    pub async fn raw_copy(&self, batch: &Batch) -> Result<u64> {
        match &self.backend {
            Backend::Postgres(s) => s.copy_only(batch).await,
            Backend::Sqlite(_) => Err(StoreError::BadRequest(
                "the raw COPY baseline needs PostgreSQL".into(),
            )),
        }
    }

    /// Benchmark: an immediate checkpoint (PostgreSQL's `CHECKPOINT`, which needs a superuser
    /// or the `pg_checkpoint` role), so that a measured phase starts with no dirty buffers and
    /// far from the next WAL-triggered checkpoint. Why it could not, as an error.
    pub async fn checkpoint(&self) -> Result<()> {
        match &self.backend {
            Backend::Postgres(s) => s.checkpoint().await,
            Backend::Sqlite(_) => Err(StoreError::BadRequest(
                "checkpoints between benchmark phases need PostgreSQL".into(),
            )),
        }
    }

    /// Benchmark fixture: synthetic hour rollups for a fleet (PostgreSQL only).
    pub async fn fill_hour_rollups(
        &self,
        cluster: &str,
        gpus: i64,
        hours: i64,
        to_ms: i64,
    ) -> Result<u64> {
        match &self.backend {
            Backend::Postgres(s) => {
                let rows = s.fill_hour_rollups(cluster, gpus, hours, to_ms).await?;
                let last = rollup::bucket_of(to_ms, rollup::HOUR_MS);
                for h in 0..hours {
                    s.refresh_cluster_hour(cluster, last - (h + 1) * rollup::HOUR_MS)
                        .await?;
                }
                Ok(rows)
            }
            Backend::Sqlite(_) => Err(StoreError::BadRequest(
                "the query benchmark needs PostgreSQL".into(),
            )),
        }
    }

    /// Benchmark fixture: writes precomputed minute (`"1m"`) or hour (`"1h"`) rollups of a
    /// node over [from, to), replacing what was there.
    pub async fn write_rollups(
        &self,
        res: &str,
        cluster: &str,
        node: &str,
        from_ms: i64,
        to_ms: i64,
        r: &NodeRollup,
    ) -> Result<()> {
        if !matches!(res, "1m" | "1h") {
            return Err(StoreError::BadRequest(format!(
                "rollup resolution must be 1m or 1h, not {res:?}"
            )));
        }
        dispatch!(self, s => s.write_rollups(res, cluster, node, from_ms, to_ms, r).await)
    }

    /// Minute rollups of a node over a range, for tests and analytics.
    pub async fn minute_rollups(
        &self,
        cluster: &str,
        node: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<NodeRollup> {
        dispatch!(self, s => s.read_minutes(cluster, node, from_ms, to_ms).await)
    }

    /// What the interference analysis reads of a node's minute rollups: per wanted GPU its
    /// minutes, and per tenant on it the minutes in which it ran a kernel (rows with no
    /// activity read the same as missing ones there, so they are not fetched). A third of the
    /// columns and no histograms: minute rows are the bulk of an analysis' reads.
    pub async fn interference_minutes(
        &self,
        cluster: &str,
        node: &str,
        wanted: &WantedMinutes,
    ) -> Result<(Vec<DeviceMinutes>, Vec<TenantMinutes>)> {
        let spans = wanted.values().flatten();
        let (Some(from), Some(to)) = (spans.clone().map(|s| s.0).min(), spans.map(|s| s.1).max())
        else {
            return Ok((Vec::new(), Vec::new()));
        };
        dispatch!(self, s => s.read_interference_minutes(cluster, node, from, to, wanted).await)
    }

    /// Records a planned GPU Operator change; returns its id.
    pub async fn insert_label_action(&self, a: &label_actions::NewLabelAction) -> Result<i64> {
        dispatch!(self, s => s.insert_label_action(a).await)
    }

    /// The label actions `filter` selects, newest first, with their steps.
    pub async fn label_actions(
        &self,
        filter: &label_actions::ActionFilter<'_>,
    ) -> Result<Vec<label_actions::LabelActionRecord>> {
        dispatch!(self, s => s.label_actions(filter).await)
    }

    /// Moves a label action from one state to another (see [`label_actions::Transition`]).
    /// False when it was in none of the `from` states.
    pub async fn transition_label_action(&self, t: &label_actions::Transition<'_>) -> Result<bool> {
        dispatch!(self, s => s.transition_label_action(t).await)
    }

    /// Records the label value a run is about to replace (the outcome check's rollback).
    pub async fn set_label_previous(&self, id: i64, value: Option<&str>) -> Result<()> {
        dispatch!(self, s => s.set_label_previous(id, value).await)
    }

    /// Appends a step to a label action's audit trail.
    pub async fn add_label_step(&self, id: i64, step: &label_actions::LabelStep) -> Result<()> {
        dispatch!(self, s => s.add_label_step(id, step).await)
    }

    /// Journals one remote-write request's series before it is answered.
    pub async fn journal_remote_write(
        &self,
        received_ms: i64,
        newest_ts: i64,
        body: &[u8],
    ) -> Result<()> {
        dispatch!(self, s => s.journal_remote_write(received_ms, newest_ts, body).await)
    }

    /// Each (cluster, node, highest stored sequence) of an agent id's streams.
    pub async fn stream_positions(&self, agent_id: &str) -> Result<Vec<(String, String, i64)>> {
        dispatch!(self, s => s.stream_positions(agent_id).await)
    }

    /// Every journaled remote-write request, oldest first: (received, body).
    pub async fn remote_write_journal(&self) -> Result<Vec<(i64, Vec<u8>)>> {
        dispatch!(self, s => s.remote_write_journal().await)
    }

    /// Deletes the journaled remote-write requests whose samples are all older than
    /// `waiting_from` (all when None).
    pub async fn prune_remote_write_journal(&self, waiting_from: Option<i64>) -> Result<u64> {
        dispatch!(self, s => s.prune_remote_write_journal(waiting_from).await)
    }

    /// Every stored alert (pending, firing, recently resolved).
    pub async fn load_alerts(&self) -> Result<Vec<alerts::AlertRecord>> {
        dispatch!(self, s => s.load_alerts().await)
    }

    /// Writes (inserts or replaces) `alerts` and deletes the alerts with the fingerprints
    /// `gone`, in one transaction.
    pub async fn save_alerts(&self, alerts: &[alerts::AlertRecord], gone: &[String]) -> Result<()> {
        dispatch!(self, s => s.save_alerts(alerts, gone).await)
    }

    /// Adds a notification to the outbox; returns its id.
    pub async fn enqueue_notification(&self, n: &alerts::NewNotification<'_>) -> Result<i64> {
        dispatch!(self, s => s.enqueue_notification(n).await)
    }

    /// The newest notification of every (receiver, group).
    pub async fn latest_notifications(&self) -> Result<Vec<alerts::GroupSent>> {
        dispatch!(self, s => s.latest_notifications().await)
    }

    /// A receiver's queued notifications, oldest first.
    pub async fn queued_notifications(
        &self,
        receiver: &str,
        limit: i64,
    ) -> Result<Vec<alerts::Queued>> {
        dispatch!(self, s => s.queued_notifications(receiver, limit).await)
    }

    /// Stores a delivery attempt and the notification's new state.
    pub async fn record_attempt(
        &self,
        id: i64,
        attempt: &alerts::Attempt,
        state: &str,
        next_ms: i64,
    ) -> Result<()> {
        dispatch!(self, s => s.record_attempt(id, attempt, state, next_ms).await)
    }

    /// Stored notifications, newest first, with their attempts.
    pub async fn notifications(
        &self,
        receiver: Option<&str>,
        limit: i64,
    ) -> Result<Vec<alerts::NotificationRecord>> {
        dispatch!(self, s => s.notifications(receiver, limit).await)
    }

    /// Marks a receiver's queued notifications superseded (a newer one carries all they
    /// would); returns how many.
    pub async fn supersede_queued(&self, receiver: &str) -> Result<u64> {
        dispatch!(self, s => s.supersede_queued(receiver).await)
    }

    /// Drops finished notifications older than `before_ms` (not a group's newest).
    pub async fn prune_notifications(&self, before_ms: i64) -> Result<u64> {
        dispatch!(self, s => s.prune_notifications(before_ms).await)
    }

    /// Stores a weekly report (replacing one of the same week and time zone).
    pub async fn save_report(&self, r: &reports::StoredReport) -> Result<()> {
        dispatch!(self, s => s.save_report(r).await)
    }

    /// Stored reports, newest first, without bodies.
    pub async fn reports(&self, limit: i64) -> Result<Vec<reports::StoredReport>> {
        dispatch!(self, s => s.reports(limit).await)
    }

    /// One stored report with its HTML and CSV.
    pub async fn report(
        &self,
        week: &str,
        timezone: &str,
    ) -> Result<Option<reports::StoredReport>> {
        dispatch!(self, s => s.report(week, timezone).await)
    }

    /// Hour rollups of a node over a range.
    pub async fn hour_rollups(
        &self,
        cluster: &str,
        node: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<NodeRollup> {
        dispatch!(self, s => s.read_hours(cluster, node, from_ms, to_ms).await)
    }
}

/// The aggregate columns shared by GPU and cluster rollups, in insert order.
macro_rules! agg_columns {
    () => {
        "samples, covered_s, gpu_util_n, gpu_util_sum, gpu_util_max, gpu_util_hist, busy_n, sm_active_n, sm_active_sum, sm_active_max, sm_active_hist, sm_occupancy_sum, tensor_active_sum, dram_active_sum, mem_used_n, mem_used_sum, mem_used_max, mem_total_max, power_n, power_sum, power_max, temp_n, temp_sum, temp_max, throttled_n, alloc_share_sum, sm_occupancy_n, tensor_active_n, dram_active_n"
    };
}

/// Columns of the GPU rollup tables, in insert order.
pub(crate) const GPU_ROLLUP_COLUMNS: &str =
    concat!("cluster, node, gpu_uuid, bucket, ", agg_columns!());

/// Columns of the cluster rollup table, in insert order.
pub(crate) const CLUSTER_ROLLUP_COLUMNS: &str = concat!("cluster, bucket, gpus, ", agg_columns!());

/// Binds a [`rollup::GpuAgg`]'s fields in `agg_columns!` order (either backend), with
/// `bind` (a query) or `push_bind` (a multi-row insert).
macro_rules! bind_gpu_agg {
    ($q:expr, $a:expr, $bind:ident) => {{
        let a = $a;
        $q.$bind(a.samples)
            .$bind(a.covered_s)
            .$bind(a.gpu_util_n)
            .$bind(a.gpu_util_sum)
            .$bind(a.gpu_util_max)
            .$bind(a.gpu_util_hist.to_stored())
            .$bind(a.busy_n)
            .$bind(a.sm_active_n)
            .$bind(a.sm_active_sum)
            .$bind(a.sm_active_max)
            .$bind(a.sm_active_hist.to_stored())
            .$bind(a.sm_occupancy_sum)
            .$bind(a.tensor_active_sum)
            .$bind(a.dram_active_sum)
            .$bind(a.mem_used_n)
            .$bind(a.mem_used_sum)
            .$bind(a.mem_used_max)
            .$bind(a.mem_total_max)
            .$bind(a.power_n)
            .$bind(a.power_sum)
            .$bind(a.power_max)
            .$bind(a.temp_n)
            .$bind(a.temp_sum)
            .$bind(a.temp_max)
            .$bind(a.throttled_n)
            .$bind(a.alloc_share_sum)
            .$bind(a.sm_occupancy_n)
            .$bind(a.tensor_active_n)
            .$bind(a.dram_active_n)
    }};
}
pub(crate) use bind_gpu_agg;

/// Columns of the tenant rollup tables, in insert order.
pub(crate) const TENANT_ROLLUP_COLUMNS: &str = "cluster, node, gpu_uuid, tenant_key, bucket, samples, covered_s, alloc_share_sum, alloc_n, present_n, sm_util_n, sm_util_sum, sm_util_max, busy_n, mem_used_n, mem_used_sum, mem_used_max, processes_max, eff_n, eff_sum, eff_dcgm_n, eff_hist, active_n, idle_n, idle_lead_s, idle_trail_s, idle_max_s";

/// Reads a [`rollup::GpuAgg`] from a row of a GPU rollup table (either backend).
macro_rules! read_gpu_agg {
    ($r:expr, $hist:ty) => {{
        let r = $r;
        let hist = |v: Option<$hist>| v.map(|b| rollup::Hist::from_bytes(&b)).unwrap_or_default();
        rollup::GpuAgg {
            samples: r.try_get("samples")?,
            covered_s: r.try_get("covered_s")?,
            gpu_util_n: r.try_get("gpu_util_n")?,
            gpu_util_sum: r.try_get("gpu_util_sum")?,
            gpu_util_max: r.try_get("gpu_util_max")?,
            gpu_util_hist: hist(r.try_get("gpu_util_hist")?),
            busy_n: r.try_get("busy_n")?,
            sm_active_n: r.try_get("sm_active_n")?,
            sm_active_sum: r.try_get("sm_active_sum")?,
            sm_active_max: r.try_get("sm_active_max")?,
            sm_active_hist: hist(r.try_get("sm_active_hist")?),
            sm_occupancy_n: r.try_get("sm_occupancy_n")?,
            sm_occupancy_sum: r.try_get("sm_occupancy_sum")?,
            tensor_active_n: r.try_get("tensor_active_n")?,
            tensor_active_sum: r.try_get("tensor_active_sum")?,
            dram_active_n: r.try_get("dram_active_n")?,
            dram_active_sum: r.try_get("dram_active_sum")?,
            mem_used_n: r.try_get("mem_used_n")?,
            mem_used_sum: r.try_get("mem_used_sum")?,
            mem_used_max: r.try_get("mem_used_max")?,
            mem_total_max: r.try_get("mem_total_max")?,
            power_n: r.try_get("power_n")?,
            power_sum: r.try_get("power_sum")?,
            power_max: r.try_get("power_max")?,
            temp_n: r.try_get("temp_n")?,
            temp_sum: r.try_get("temp_sum")?,
            temp_max: r.try_get("temp_max")?,
            throttled_n: r.try_get("throttled_n")?,
            alloc_share_sum: r.try_get("alloc_share_sum")?,
        }
    }};
}
pub(crate) use read_gpu_agg;

/// The GPU minute-rollup columns interference reads.
pub(crate) const INTERFERENCE_GPU_COLUMNS: &str =
    "gpu_uuid, bucket, gpu_util_n, gpu_util_sum, dram_active_n, dram_active_sum";
/// The tenant minute-rollup columns interference reads.
pub(crate) const INTERFERENCE_TENANT_COLUMNS: &str = "gpu_uuid, tenant_key, bucket, samples, active_n, sm_util_n, sm_util_sum, alloc_n, alloc_share_sum, eff_n, eff_sum";

/// The minute spans wanted per GPU of one node: GPU UUID → [from, to) ranges in ms.
pub type WantedMinutes = HashMap<String, Vec<(i64, i64)>>;

/// Groups one node's interference minute rows into a series per GPU and per (tenant, GPU),
/// keeping only the wanted minutes, each series in time order.
pub(crate) struct InterferenceSeries<'w> {
    wanted: &'w WantedMinutes,
    devices: HashMap<String, Vec<DeviceMinute>>,
    tenants: HashMap<String, HashMap<String, Vec<TenantMinute>>>,
}

impl<'w> InterferenceSeries<'w> {
    pub(crate) fn new(wanted: &'w WantedMinutes) -> Self {
        InterferenceSeries {
            wanted,
            devices: HashMap::new(),
            tenants: HashMap::new(),
        }
    }

    fn wanted(&self, gpu: &str, bucket: i64) -> bool {
        self.wanted
            .get(gpu)
            .is_some_and(|spans| spans.iter().any(|&(a, b)| bucket >= a && bucket < b))
    }

    pub(crate) fn device(&mut self, gpu: &str, m: DeviceMinute) {
        if !self.wanted(gpu, m.bucket) {
            return;
        }
        match self.devices.get_mut(gpu) {
            Some(v) => v.push(m),
            None => {
                self.devices.insert(gpu.to_owned(), vec![m]);
            }
        }
    }

    pub(crate) fn tenant(&mut self, gpu: &str, tenant: &str, m: TenantMinute) {
        if !self.wanted(gpu, m.bucket) {
            return;
        }
        // Look up by borrowed keys: allocate only for a new series.
        if !self.tenants.contains_key(gpu) {
            self.tenants.insert(gpu.to_owned(), HashMap::new());
        }
        let per = self.tenants.get_mut(gpu).expect("inserted above");
        match per.get_mut(tenant) {
            Some(v) => v.push(m),
            None => {
                per.insert(tenant.to_owned(), vec![m]);
            }
        }
    }

    pub(crate) fn finish(
        self,
        cluster: &str,
        node: &str,
    ) -> (Vec<DeviceMinutes>, Vec<TenantMinutes>) {
        let devices = self
            .devices
            .into_iter()
            .map(|(gpu, mut minutes)| {
                minutes.sort_unstable_by_key(|m| m.bucket);
                DeviceMinutes {
                    cluster: cluster.to_owned(),
                    node: node.to_owned(),
                    gpu,
                    minutes,
                }
            })
            .collect();
        let tenants = self
            .tenants
            .into_iter()
            .flat_map(|(gpu, per)| {
                per.into_iter().map(move |(tenant, mut minutes)| {
                    minutes.sort_unstable_by_key(|m| m.bucket);
                    TenantMinutes {
                        cluster: cluster.to_owned(),
                        gpu: gpu.clone(),
                        tenant,
                        minutes,
                    }
                })
            })
            .collect();
        (devices, tenants)
    }
}

/// Decodes rows of [`INTERFERENCE_GPU_COLUMNS`] and [`INTERFERENCE_TENANT_COLUMNS`] (by
/// position; `bucket` in ms) into one node's [`InterferenceSeries`].
macro_rules! interference_rows {
    ($cluster:expr, $node:expr, $wanted:expr, $gpu_rows:expr, $tenant_rows:expr) => {{
        use model::rollup::{DeviceMinute, TenantMinute};
        let mut series = super::InterferenceSeries::new($wanted);
        for r in $gpu_rows {
            series.device(
                r.try_get(0)?,
                DeviceMinute {
                    bucket: r.try_get(1)?,
                    gpu_util_n: r.try_get(2)?,
                    gpu_util_sum: r.try_get(3)?,
                    dram_active_n: r.try_get(4)?,
                    dram_active_sum: r.try_get(5)?,
                },
            );
        }
        for r in $tenant_rows {
            series.tenant(
                r.try_get(0)?,
                r.try_get(1)?,
                TenantMinute {
                    bucket: r.try_get(2)?,
                    samples: r.try_get(3)?,
                    active_n: r.try_get(4)?,
                    sm_util_n: r.try_get(5)?,
                    sm_util_sum: r.try_get(6)?,
                    alloc_n: r.try_get(7)?,
                    alloc_share_sum: r.try_get(8)?,
                    eff_n: r.try_get(9)?,
                    eff_sum: r.try_get(10)?,
                },
            );
        }
        series.finish($cluster, $node)
    }};
}
pub(crate) use interference_rows;

/// Reads a [`rollup::TenantAgg`] from a row of a tenant rollup table (either backend).
macro_rules! read_tenant_agg {
    ($r:expr) => {{
        let r = $r;
        rollup::TenantAgg {
            samples: r.try_get("samples")?,
            covered_s: r.try_get("covered_s")?,
            alloc_share_sum: r.try_get("alloc_share_sum")?,
            alloc_n: r.try_get("alloc_n")?,
            present_n: r.try_get("present_n")?,
            sm_util_n: r.try_get("sm_util_n")?,
            sm_util_sum: r.try_get("sm_util_sum")?,
            sm_util_max: r.try_get("sm_util_max")?,
            busy_n: r.try_get("busy_n")?,
            mem_used_n: r.try_get("mem_used_n")?,
            mem_used_sum: r.try_get("mem_used_sum")?,
            mem_used_max: r.try_get("mem_used_max")?,
            processes_max: r.try_get("processes_max")?,
            eff_n: r.try_get("eff_n")?,
            eff_sum: r.try_get("eff_sum")?,
            eff_dcgm_n: r.try_get("eff_dcgm_n")?,
            eff_hist: r
                .try_get::<Option<Vec<u8>>, _>("eff_hist")?
                .map(|b| rollup::Hist::from_bytes(&b))
                .unwrap_or_default(),
            active_n: r.try_get("active_n")?,
            idle_n: r.try_get("idle_n")?,
            idle_lead_s: r.try_get("idle_lead_s")?,
            idle_trail_s: r.try_get("idle_trail_s")?,
            idle_max_s: r.try_get("idle_max_s")?,
        }
    }};
}
pub(crate) use read_tenant_agg;

// Row → record mappings shared by both backends: their queries alias columns to these names.

macro_rules! node_record {
    ($r:expr) => {{
        let r = $r;
        NodeRecord {
            cluster: r.try_get("cluster")?,
            node: r.try_get("node")?,
            agent_version: r.try_get("agent_version")?,
            interval_ms: r.try_get("interval_ms")?,
            first_seen_ms: r.try_get("first_seen")?,
            last_seen_ms: r.try_get("last_seen")?,
            last_sample_ms: r.try_get("last_sample")?,
            gpu_count: r.try_get("gpu_count")?,
        }
    }};
}
pub(crate) use node_record;

macro_rules! mig_record {
    ($m:expr) => {{
        let m = $m;
        MigRecord {
            gi_id: m.try_get("gi_id")?,
            ci_id: m.try_get("ci_id")?,
            profile: m.try_get("profile")?,
            placement_start: m.try_get("placement_start")?,
            placement_size: m.try_get("placement_size")?,
            memory_total_bytes: m.try_get("memory_total_bytes")?,
            compute_slices: m.try_get("compute_slices")?,
            uuid: m.try_get("mig_uuid")?,
        }
    }};
}
pub(crate) use mig_record;

macro_rules! gpu_record {
    ($r:expr, $uuid:expr, $migs:expr) => {{
        let r = $r;
        GpuRecord {
            cluster: r.try_get("cluster")?,
            node: r.try_get("node")?,
            uuid: $uuid,
            index: r.try_get("gpu_index")?,
            model: r.try_get("model")?,
            memory_total_bytes: r.try_get("memory_total_bytes")?,
            pci_bus_id: r.try_get("pci_bus_id")?,
            mig_enabled: r.try_get("mig_enabled")?,
            sharing: r.try_get("sharing")?,
            replicas: r.try_get("replicas")?,
            first_seen_ms: r.try_get("first_seen")?,
            last_seen_ms: r.try_get("last_seen")?,
            mig_instances: $migs,
        }
    }};
}
pub(crate) use gpu_record;

/// GPU rows with their MIG instances attached: the instances grouped by GPU once (a lookup
/// per GPU, not a scan of every instance). Both backends read the same columns.
macro_rules! gpus_with_migs {
    ($rows:expr, $migs:expr) => {{
        let mut by_gpu: std::collections::HashMap<String, Vec<MigRecord>> =
            std::collections::HashMap::new();
        for m in $migs {
            by_gpu
                .entry(m.try_get::<String, _>("gpu_uuid")?)
                .or_default()
                .push(super::mig_record!(m));
        }
        let mut out = Vec::new();
        for r in $rows {
            let uuid: String = r.try_get("gpu_uuid")?;
            let mig_instances = by_gpu.remove(&uuid).unwrap_or_default();
            out.push(super::gpu_record!(r, uuid, mig_instances));
        }
        Ok(out)
    }};
}
pub(crate) use gpus_with_migs;

macro_rules! tenant_record {
    ($r:expr) => {{
        let r = $r;
        TenantRecord {
            cluster: r.try_get("cluster")?,
            key: r.try_get("tenant_key")?,
            kind: r.try_get("kind")?,
            team: r.try_get("team")?,
            namespace: r.try_get("namespace")?,
            pod: r.try_get("pod")?,
            container: r.try_get("container")?,
            pod_uid: r.try_get("pod_uid")?,
            job_id: r.try_get("job_id")?,
            user: r.try_get("username")?,
            account: r.try_get("account")?,
            uid: r.try_get("uid")?,
            nodes: Vec::new(),
            first_seen_ms: r.try_get("first_seen")?,
            last_seen_ms: r.try_get("last_seen")?,
        }
    }};
}
pub(crate) use tenant_record;

macro_rules! event_record {
    ($r:expr) => {{
        let r = $r;
        super::EventRecord {
            cluster: r.try_get("cluster")?,
            node: r.try_get("node")?,
            gpu_uuid: r.try_get("gpu_uuid")?,
            ts_ms: r.try_get("ts")?,
            kind: r.try_get("kind")?,
            code: r.try_get("code")?,
        }
    }};
}
pub(crate) use event_record;

/// Runs a series query's rows through the post-processing its shape needs (either backend).
macro_rules! series_values {
    ($rows:expr, $shape:expr) => {{
        let rows = $rows;
        let pairs = || -> std::result::Result<Vec<(i64, Option<f64>)>, sqlx::Error> {
            rows.iter()
                .map(|r| Ok((r.try_get::<i64, _>(0)?, r.try_get::<Option<f64>, _>(1)?)))
                .collect()
        };
        match $shape {
            series::Shape::Values => pairs()?,
            series::Shape::Histograms => series::hist_p95(
                rows.iter()
                    .map(|r| {
                        Ok((
                            r.try_get::<i64, _>(0)?,
                            r.try_get::<Option<Vec<u8>>, _>(1)?,
                            r.try_get::<Option<f64>, _>(2)?,
                        ))
                    })
                    .collect::<std::result::Result<Vec<_>, sqlx::Error>>()?
                    .into_iter(),
            ),
        }
    }};
}
pub(crate) use series_values;

fn merge_tenants(rows: Vec<(TenantRecord, String)>) -> Vec<TenantRecord> {
    let mut out: BTreeMap<(String, String), TenantRecord> = BTreeMap::new();
    for (rec, node) in rows {
        let e = out
            .entry((rec.cluster.clone(), rec.key.clone()))
            .or_insert_with(|| TenantRecord {
                nodes: Vec::new(),
                ..rec.clone()
            });
        e.first_seen_ms = e.first_seen_ms.min(rec.first_seen_ms);
        if rec.last_seen_ms >= e.last_seen_ms {
            let nodes = std::mem::take(&mut e.nodes);
            *e = TenantRecord {
                nodes,
                ..rec.clone()
            };
            e.first_seen_ms = e.first_seen_ms.min(rec.first_seen_ms);
        }
        if !e.nodes.contains(&node) {
            e.nodes.push(node);
        }
    }
    out.into_values().collect()
}

/// Hides a password in a database URL for messages and logs.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let creds = &url[scheme_end + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// The starts (ms, UTC midnight) of the days from `from_ms` to `to_ms`, both included.
pub(crate) fn days_between(from_ms: i64, to_ms: i64) -> Vec<i64> {
    let day = 86_400_000;
    let mut d = from_ms - from_ms.rem_euclid(day);
    let mut out = Vec::new();
    while d <= to_ms {
        out.push(d);
        d += day;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(redact_url("sqlite://x.db"), "sqlite://x.db");
    }
}

/// One XID (or other) event.
#[derive(Debug, Clone)]
pub struct EventRecord {
    pub cluster: String,
    pub node: String,
    pub gpu_uuid: String,
    pub ts_ms: i64,
    pub kind: String,
    pub code: i64,
}

/// The health counters of a GPU's latest sample.
#[derive(Debug, Clone)]
pub struct HealthRecord {
    pub cluster: String,
    pub node: String,
    pub gpu_uuid: String,
    pub ecc_uncorrected: Option<i64>,
    pub retired_pages: Option<i64>,
    pub remapped_rows: Option<i64>,
}

/// A process without a tenant, summarized over a range.
#[derive(Debug, Clone)]
pub struct OrphanRecord {
    pub cluster: String,
    pub node: String,
    pub gpu_uuid: String,
    pub pid: i64,
    pub start_time_ms: i64,
    pub first_ms: i64,
    pub last_ms: i64,
    pub mem_max_bytes: Option<i64>,
}

/// A held background-job lock; dropping it without [`JobLock::release`] lets PostgreSQL
/// release it when the connection closes.
#[derive(Debug)]
pub struct JobLock {
    pg: Option<(sqlx::pool::PoolConnection<sqlx::Postgres>, i64)>,
}

impl JobLock {
    fn postgres(conn: sqlx::pool::PoolConnection<sqlx::Postgres>, key: i64) -> JobLock {
        JobLock {
            pg: Some((conn, key)),
        }
    }

    pub async fn release(self) -> Result<()> {
        if let Some((mut conn, key)) = self.pg {
            sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(key)
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }
}

/// Advisory lock keys of the background jobs (one collector runs each).
pub const LOCK_ANALYTICS: i64 = 0x6770_756c_656e_7301;
pub const LOCK_ALERTS: i64 = 0x6770_756c_656e_7302;
pub const LOCK_REPORTS: i64 = 0x6770_756c_656e_7303;

/// The most (instance, tenant) pairs `mig_holders` returns.
pub const MAX_MIG_HOLDERS: i64 = 256;

impl Store {
    /// Which tenants held which MIG instance (GPU instance id) of a GPU in [from, to), from
    /// the raw allocation samples.
    pub async fn mig_holders(
        &self,
        gpu_uuid: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<(i64, String)>> {
        let f = raw::Filter {
            eq: vec![("gpu_uuid", gpu_uuid)],
            null: Some(("gi_id", false)),
        };
        let t = &raw::ALLOCATION;
        let samples = dispatch!(self, s => s.raw_records(t, &f, from_ms, to_ms).await)?;
        let [gi, tenant] = ["gi_id", "tenant_key"].map(|c| t.key_at(c));
        let holders: std::collections::BTreeSet<(i64, String)> = samples
            .iter()
            .filter_map(|r| Some((r.int_key(gi)?, r.text(tenant)?.to_owned())))
            .collect();
        Ok(holders.into_iter().take(MAX_MIG_HOLDERS as usize).collect())
    }

    pub async fn events(&self, from_ms: i64, to_ms: i64) -> Result<Vec<EventRecord>> {
        dispatch!(self, s => s.events(from_ms, to_ms).await)
    }

    /// Health counters of each GPU's latest raw sample.
    pub async fn latest_health(&self) -> Result<Vec<HealthRecord>> {
        dispatch!(self, s => s.latest_health().await)
    }

    pub async fn orphans(&self, from_ms: i64, to_ms: i64) -> Result<Vec<OrphanRecord>> {
        let f = raw::Filter {
            eq: vec![],
            null: Some(("tenant_key", true)),
        };
        let t = &raw::PROCESS;
        let samples = dispatch!(self, s => s.raw_records(t, &f, from_ms, to_ms).await)?;
        let [cluster, node, gpu, pid, start] =
            ["cluster", "node", "gpu_uuid", "pid", "start_time"].map(|c| t.key_at(c));
        let mem = t.value("mem_used_bytes");
        let mut by_process: BTreeMap<(String, String, String, i64, i64), OrphanRecord> =
            BTreeMap::new();
        for r in &samples {
            let text = |at| r.text(at).unwrap_or_default().to_owned();
            let key = (
                text(cluster),
                text(node),
                text(gpu),
                r.int_key(pid).unwrap_or_default(),
                r.int_key(start).unwrap_or_default(),
            );
            let o = by_process.entry(key).or_insert_with_key(|k| OrphanRecord {
                cluster: k.0.clone(),
                node: k.1.clone(),
                gpu_uuid: k.2.clone(),
                pid: k.3,
                start_time_ms: k.4,
                first_ms: r.ts,
                last_ms: r.ts,
                mem_max_bytes: None,
            });
            o.first_ms = o.first_ms.min(r.ts);
            o.last_ms = o.last_ms.max(r.ts);
            o.mem_max_bytes = o.mem_max_bytes.max(r.int(mem));
        }
        Ok(by_process.into_values().collect())
    }

    /// Moves raw samples older than `cutoff_ms` out of the hot tables into sealed blocks, node
    /// by node (one transaction each); returns how many samples it sealed.
    pub async fn seal(&self, cutoff_ms: i64) -> Result<u64> {
        let cutoff = raw::block_of(cutoff_ms);
        let mut by_node: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for g in self.gpus(None).await? {
            by_node.entry((g.cluster, g.node)).or_default().push(g.uuid);
        }
        let mut sealed = 0;
        for ((cluster, node), gpus) in by_node {
            // Nothing to seal costs one probe per table; a backlog (the first pass after an
            // upgrade holds up to the raw retention in rows) is sealed an hour per
            // transaction, so memory stays bounded by an hour of one node.
            let Some(oldest) =
                dispatch!(self, s => s.oldest_hot(&cluster, &node, &gpus, cutoff).await)?
            else {
                continue;
            };
            let mut upto = raw::block_of(oldest);
            while upto < cutoff {
                upto = (upto + raw::SEAL_STEP_MS).min(cutoff);
                sealed += dispatch!(self, s => s.seal_node(&cluster, &node, &gpus, upto).await)?;
            }
        }
        Ok(sealed)
    }

    /// Stores an analysis result and keeps the newest `keep`.
    pub async fn save_analysis(
        &self,
        generated_ms: i64,
        from_ms: i64,
        to_ms: i64,
        body: &str,
        keep: i64,
    ) -> Result<()> {
        dispatch!(self, s => s.save_analysis(generated_ms, from_ms, to_ms, body, keep).await)
    }

    /// When the newest stored analysis ran (cheap: no body).
    pub async fn latest_analysis_ms(&self) -> Result<Option<i64>> {
        dispatch!(self, s => s.latest_analysis_ms().await)
    }

    /// The newest stored analysis (JSON; it carries its own time range).
    pub async fn latest_analysis(&self) -> Result<Option<String>> {
        dispatch!(self, s => s.latest_analysis().await)
    }

    /// The deployment's secret `name`: the stored one, or `fresh` stored now when there is
    /// none yet (the first collector to ask wins; every other one reads what it stored).
    pub async fn shared_secret(&self, name: &str, fresh: &[u8]) -> Result<Vec<u8>> {
        dispatch!(self, s => s.shared_secret(name, fresh, model::time::now_ms()).await)
    }

    /// Replaces the deployment's secret `name` (rotation): what signed with the old one no
    /// longer verifies once the collectors read the new one.
    pub async fn replace_secret(&self, name: &str, value: &[u8]) -> Result<()> {
        dispatch!(self, s => s.replace_secret(name, value, model::time::now_ms()).await)
    }

    /// Takes the job's lock, or None when another collector holds it. SQLite has one
    /// collector per file, so the lock is always granted there.
    pub async fn try_job_lock(&self, key: i64) -> Result<Option<JobLock>> {
        match &self.backend {
            Backend::Postgres(s) => s.try_job_lock(key).await,
            Backend::Sqlite(_) => Ok(Some(JobLock { pg: None })),
        }
    }
}
