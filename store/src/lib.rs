//! Storage: the one place that knows SQL. Two backends with the same logical tables —
//! PostgreSQL for production, embedded SQLite as the default — behind one [`Store`] type.
//! Callers see records, series and outcomes; never sqlx types or SQL errors.

/// Runs `$e` with `$s` bound to the store's backend, whichever it is.
macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match &$self.backend {
            $crate::Backend::Postgres($s) => $e,
            $crate::Backend::Sqlite($s) => $e,
        }
    };
}

pub mod alerts;
mod analysis_runs;
pub mod audit;
mod backend;
mod cluster_rollup;
mod db;
mod dialect;
mod error;
mod inventory;
pub mod label_actions;
mod migrate;
mod node_upkeep;
mod postgres;
mod raw;
pub mod reclaim_cases;
mod records;
pub mod remote_write;
pub mod reports;
mod rollup_columns;
mod rollup_pass;
mod rollup_reads;
mod rollup_rows;
mod scope;
mod secrets;
pub use model::rollup;
pub mod mechanisms;
pub mod pair_hours;
pub mod series;
mod span;
mod sql;
mod sqlite;
pub mod waiting;

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

pub use error::{Result, StoreError, redact_url};
use model::pair_hours::{DeviceMinutes, TenantMinutes};
use model::wire::v1::Batch;
pub use raw::{BLOCK_MS, block_of};
pub use records::{
    EventRecord, GpuRecord, HealthRecord, IngestOutcome, JobLock, LOCK_ALERTS, LOCK_ANALYTICS,
    LOCK_RECLAIM, LOCK_REPORTS, MAX_MIG_HOLDERS, MigRecord, NodeRecord, OrphanRecord, Retention,
    RetentionStats, RollupStats, TableCounts, TeamOf, TenantRecord, WantedMinutes, Writes,
};
pub use scope::Scope;
pub use series::{Agg, Entity, Metric, Resolution, Rollups, Series, SeriesQuery};

use rollup::NodeRollup;

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
    /// What the rollup measures interference's pair-hours with.
    pair_thresholds: model::pair_hours::PairThresholds,
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
            pair_thresholds: model::pair_hours::PairThresholds::default(),
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

    /// The active workers of a Citus coordinator, or `None` when the database is not one
    /// (SQLite, or PostgreSQL without the citus extension).
    pub async fn citus_workers(&self) -> Result<Option<usize>> {
        match &self.backend {
            Backend::Postgres(s) => s.citus_workers().await,
            Backend::Sqlite(_) => Ok(None),
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
        dispatch!(self, s => s.tables.nodes().await)
    }

    pub async fn gpus(&self, node: Option<&str>) -> Result<Vec<GpuRecord>> {
        dispatch!(self, s => s.tables.gpus(node).await)
    }

    /// The hour the stored history starts (the oldest GPU hour rollup), None without any.
    pub async fn first_hour(&self) -> Result<Option<i64>> {
        dispatch!(self, s => s.tables.first_hour().await)
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
        let rows = dispatch!(self, s => s.tables.tenant_rows().await)?;
        Ok(records::merge_tenants(rows))
    }

    pub async fn counts(&self) -> Result<TableCounts> {
        dispatch!(self, s => s.tables.counts().await)
    }

    /// The raw sample tables, as [`Store::table_bytes`] measures them: the hot rows, then the
    /// sealed blocks.
    pub const RAW_TABLES: [&'static str; 9] = raw::NAMES;

    /// Rows and bytes on disk of each raw table, indexes (and TOAST) included, all partitions
    /// (and on Citus all shards) together; on SQLite the pages of the table and of its indexes.
    pub async fn table_bytes(&self) -> Result<Vec<(&'static str, i64, i64)>> {
        let mut out = Vec::new();
        for t in Self::RAW_TABLES {
            let rows = dispatch!(self, s => s.tables.table_rows(t).await)?;
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
        dispatch!(self, s => s.tables.last_sample_ms(cluster, node).await)
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
            let samples = dispatch!(self, s => s.tables.raw_records(table, &filter, q.from_ms, q.to_ms).await)?;
            let values = series::raw_points(q, &plan, table, &samples);
            return Ok(series::assemble(q, &plan, &values));
        }
        dispatch!(self, s => s.tables.series(q, &plan).await)
    }

    /// Creates the time partitions that the coming days need (PostgreSQL; no-op on SQLite).
    pub async fn prepare_partitions(&self, now_ms: i64) -> Result<()> {
        dispatch!(self, s => s.prepare_partitions(now_ms).await)
    }

    /// Re-merges one cluster-hour from its GPU hour rollups (after rollups were written
    /// directly, as benchmarks do).
    pub async fn refresh_cluster_hour(&self, cluster: &str, hour: i64) -> Result<()> {
        dispatch!(self, s => s.tables.refresh_cluster_hour(cluster, hour).await)
    }

    /// Removes data older than each resolution's retention.
    pub async fn apply_retention(
        &self,
        now_ms: i64,
        retention: &Retention,
    ) -> Result<RetentionStats> {
        let mut stats = dispatch!(self, s => s.apply_retention(now_ms, retention).await)?;
        let cut = now_ms.saturating_sub(retention.hour.as_millis() as i64);
        stats.rows_deleted += dispatch!(self, s => s.tables.drop_pair_hours(i64::MIN, cut).await)?;
        Ok(stats)
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

    /// PostgreSQL's connection pool: connections open, and lent out right now (committers hold
    /// theirs while ingest keeps them busy). `None` on SQLite.
    pub fn pool_connections(&self) -> Option<(u32, u32)> {
        match &self.backend {
            Backend::Postgres(s) => Some(s.connections()),
            Backend::Sqlite(_) => None,
        }
    }

    /// Waits, for at most `within`, until no pool connection is lent out (ingest's committers
    /// give theirs back a second after their last group); whether none is. True at once on
    /// SQLite.
    pub async fn pool_quiet(&self, within: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + within;
        loop {
            if self.pool_connections().is_none_or(|(_, lent)| lent == 0) {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
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
                    s.tables
                        .refresh_cluster_hour(cluster, last - (h + 1) * rollup::HOUR_MS)
                        .await?;
                }
                Ok(rows)
            }
            Backend::Sqlite(_) => Err(StoreError::BadRequest(
                "the query benchmark needs PostgreSQL".into(),
            )),
        }
    }

    /// Benchmark fixture: writes precomputed minute or hour rollups of a node over [from, to),
    /// replacing what was there.
    pub async fn write_rollups(
        &self,
        width: Rollups,
        cluster: &str,
        node: &str,
        from_ms: i64,
        to_ms: i64,
        r: &NodeRollup,
    ) -> Result<()> {
        dispatch!(self, s => s.tables.write_rollups(width, cluster, node, from_ms, to_ms, r).await)
    }

    /// A node's minute or hour rollups over a range (the dashboard's charts, tests, benchmarks).
    pub async fn rollups(
        &self,
        width: Rollups,
        cluster: &str,
        node: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<NodeRollup> {
        dispatch!(self, s => s.tables.read_node_rollups(width, cluster, node, from_ms, to_ms).await)
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
        dispatch!(self, s => s.tables.read_interference_minutes(cluster, node, from, to, wanted).await)
    }

    /// Records a planned GPU Operator change; returns its id.
    pub async fn insert_label_action(&self, a: &label_actions::NewLabelAction) -> Result<i64> {
        dispatch!(self, s => s.tables.insert_label_action(a).await)
    }

    /// The label actions `filter` selects, newest first, with their steps.
    pub async fn label_actions(
        &self,
        filter: &label_actions::ActionFilter<'_>,
    ) -> Result<Vec<label_actions::LabelActionRecord>> {
        dispatch!(self, s => s.tables.label_actions(filter).await)
    }

    /// Moves a label action from one state to another (see [`label_actions::Transition`]).
    /// False when it was in none of the `from` states.
    pub async fn transition_label_action(&self, t: &label_actions::Transition<'_>) -> Result<bool> {
        dispatch!(self, s => s.tables.transition_label_action(t).await)
    }

    /// Records the label value a run is about to replace (the outcome check's rollback).
    pub async fn set_label_previous(&self, id: i64, value: Option<&str>) -> Result<()> {
        dispatch!(self, s => s.tables.set_label_previous(id, value).await)
    }

    /// Appends a step to a label action's audit trail.
    pub async fn add_label_step(&self, id: i64, step: &label_actions::LabelStep) -> Result<()> {
        dispatch!(self, s => s.tables.add_label_step(id, step).await)
    }

    /// Records a new reclaim case; returns its id.
    pub async fn insert_reclaim_case(&self, c: &reclaim_cases::NewCase) -> Result<i64> {
        dispatch!(self, s => s.tables.insert_reclaim_case(c).await)
    }

    /// The reclaim cases `filter` selects, newest first, with their steps.
    pub async fn reclaim_cases(
        &self,
        filter: &reclaim_cases::CaseFilter<'_>,
    ) -> Result<Vec<reclaim_cases::CaseRecord>> {
        dispatch!(self, s => s.tables.reclaim_cases(filter).await)
    }

    /// Moves a reclaim case from one state to another; false when it was in none of `from`.
    pub async fn move_reclaim_case(&self, m: &reclaim_cases::Move<'_>) -> Result<bool> {
        dispatch!(self, s => s.tables.move_reclaim_case(m).await)
    }

    /// Appends a step to a label action's or reclaim case's audit trail.
    pub async fn add_audit_step(
        &self,
        trail: audit::Trail,
        id: i64,
        step: &audit::Step,
    ) -> Result<()> {
        dispatch!(self, s => s.tables.add_audit_step(trail, id, step).await)
    }

    /// Journals one remote-write request's series before it is answered.
    pub async fn journal_remote_write(
        &self,
        received_ms: i64,
        newest_ts: i64,
        body: &[u8],
    ) -> Result<()> {
        dispatch!(self, s => s.tables.journal_remote_write(received_ms, newest_ts, body).await)
    }

    /// Each (cluster, node, highest stored sequence) of an agent id's streams.
    pub async fn stream_positions(&self, agent_id: &str) -> Result<Vec<(String, String, i64)>> {
        dispatch!(self, s => s.tables.stream_positions(agent_id).await)
    }

    /// Every journaled remote-write request, oldest first: (received, body).
    pub async fn remote_write_journal(&self) -> Result<Vec<(i64, Vec<u8>)>> {
        dispatch!(self, s => s.tables.remote_write_journal().await)
    }

    /// Deletes the journaled remote-write requests whose samples are all older than
    /// `waiting_from` (all when None).
    pub async fn prune_remote_write_journal(&self, waiting_from: Option<i64>) -> Result<u64> {
        dispatch!(self, s => s.tables.prune_remote_write_journal(waiting_from).await)
    }

    /// Every stored alert (pending, firing, recently resolved).
    pub async fn load_alerts(&self) -> Result<Vec<alerts::AlertRecord>> {
        dispatch!(self, s => s.tables.load_alerts().await)
    }

    /// Writes (inserts or replaces) `alerts` and deletes the alerts with the fingerprints
    /// `gone`, in one transaction.
    pub async fn save_alerts(&self, alerts: &[alerts::AlertRecord], gone: &[String]) -> Result<()> {
        dispatch!(self, s => s.tables.save_alerts(alerts, gone).await)
    }

    /// Adds a notification to the outbox; returns its id.
    pub async fn enqueue_notification(&self, n: &alerts::NewNotification<'_>) -> Result<i64> {
        dispatch!(self, s => s.tables.enqueue_notification(n).await)
    }

    /// The newest notification of every (receiver, group).
    pub async fn latest_notifications(&self) -> Result<Vec<alerts::GroupSent>> {
        dispatch!(self, s => s.tables.latest_notifications().await)
    }

    /// A receiver's queued notifications, oldest first.
    pub async fn queued_notifications(
        &self,
        receiver: &str,
        limit: i64,
    ) -> Result<Vec<alerts::Queued>> {
        dispatch!(self, s => s.tables.queued_notifications(receiver, limit).await)
    }

    /// Stores a delivery attempt and the notification's new state.
    pub async fn record_attempt(
        &self,
        id: i64,
        attempt: &alerts::Attempt,
        state: &str,
        next_ms: i64,
    ) -> Result<()> {
        dispatch!(self, s => s.tables.record_attempt(id, attempt, state, next_ms).await)
    }

    /// Stored notifications, newest first, with their attempts.
    pub async fn notifications(
        &self,
        receiver: Option<&str>,
        limit: i64,
    ) -> Result<Vec<alerts::NotificationRecord>> {
        dispatch!(self, s => s.tables.notifications(receiver, limit).await)
    }

    /// Marks a receiver's queued notifications superseded (a newer one carries all they
    /// would); returns how many.
    pub async fn supersede_queued(&self, receiver: &str) -> Result<u64> {
        dispatch!(self, s => s.tables.supersede_queued(receiver).await)
    }

    /// Drops finished notifications older than `before_ms` (not a group's newest).
    pub async fn prune_notifications(&self, before_ms: i64) -> Result<u64> {
        dispatch!(self, s => s.tables.prune_notifications(before_ms).await)
    }

    /// Stores a weekly report (replacing one of the same week and time zone).
    pub async fn save_report(&self, r: &reports::StoredReport) -> Result<()> {
        dispatch!(self, s => s.tables.save_report(r).await)
    }

    /// Stored reports, newest first, without bodies.
    pub async fn reports(&self, limit: i64) -> Result<Vec<reports::StoredReport>> {
        dispatch!(self, s => s.tables.reports(limit).await)
    }

    /// One stored report with its HTML and CSV.
    pub async fn report(
        &self,
        week: &str,
        timezone: &str,
    ) -> Result<Option<reports::StoredReport>> {
        dispatch!(self, s => s.tables.report(week, timezone).await)
    }

    /// Records one poll's waiting work (new episodes added, known ones brought up to date).
    pub async fn record_waiting(&self, rows: &[waiting::WaitingRecord]) -> Result<()> {
        dispatch!(self, s => s.tables.record_waiting(rows).await)
    }

    /// Replaces what `cluster`'s nodes were seen to have: (node, mechanism) pairs.
    pub async fn record_mechanisms(
        &self,
        cluster: &str,
        seen: &[(String, String)],
        seen_ms: i64,
    ) -> Result<()> {
        dispatch!(self, s => s.tables.record_mechanisms(cluster, seen, seen_ms).await)
    }

    /// Every per-GPU sharing mechanism seen on a node.
    pub async fn node_mechanisms(&self) -> Result<Vec<mechanisms::NodeMechanism>> {
        dispatch!(self, s => s.tables.node_mechanisms().await)
    }

    /// Waiting episodes that overlap `[from_ms, to_ms)`, oldest first (bounded).
    pub async fn waiting(&self, from_ms: i64, to_ms: i64) -> Result<Vec<waiting::WaitingRecord>> {
        dispatch!(self, s => s.tables.waiting(from_ms, to_ms).await)
    }

    /// Hands `visit` the mark of every node's kept pair-hours in `[from_ms, to_ms)` (of the
    /// scope's nodes) with its node (cluster, node, mark), in no set order: one streamed
    /// query, nothing held.
    pub async fn pair_hour_marks(
        &self,
        scope: Scope<'_>,
        from_ms: i64,
        to_ms: i64,
        visit: &mut (dyn FnMut(&str, &str, &pair_hours::PairHourMark) + Send),
    ) -> Result<()> {
        dispatch!(self, s => s.tables.pair_hour_marks(scope, from_ms, to_ms, visit).await)
    }

    /// Every node's kept pair-hours in `[from_ms, to_ms)` (of the scope's nodes) that `keep`
    /// takes, in no set order: one streamed query, and only what `keep` takes is held.
    pub async fn pair_hours(
        &self,
        scope: Scope<'_>,
        from_ms: i64,
        to_ms: i64,
        keep: &mut (dyn FnMut(&pair_hours::PairHour) -> bool + Send),
    ) -> Result<Vec<pair_hours::PairHour>> {
        dispatch!(self, s => s.tables.pair_hours(scope, from_ms, to_ms, keep).await)
    }

    /// Keeps a node's pair-hours of the hours `marks` name, replacing what was kept of them.
    pub async fn keep_pair_hours(
        &self,
        cluster: &str,
        node: &str,
        marks: &[pair_hours::PairHourMark],
        rows: &[pair_hours::PairHour],
    ) -> Result<()> {
        dispatch!(self, s => s.tables.keep_pair_hours(cluster, node, marks, rows).await)
    }

    /// Drops kept pair-hours (and their marks) of the hours in `[from_ms, to_ms)`: the next
    /// analysis measures them again from minutes.
    pub async fn drop_pair_hours(&self, from_ms: i64, to_ms: i64) -> Result<u64> {
        dispatch!(self, s => s.tables.drop_pair_hours(from_ms, to_ms).await)
    }

    /// Drops waiting episodes last seen before `before_ms`.
    pub async fn prune_waiting(&self, before_ms: i64) -> Result<u64> {
        dispatch!(self, s => s.tables.prune_waiting(before_ms).await)
    }

    /// Every GPU's and tenant's hour rollups in [from, to) (of the scope's nodes) as series,
    /// in key order (what the analysis reads): streamed from one query per table.
    pub async fn hour_series(
        &self,
        scope: Scope<'_>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<(
        Vec<model::hour_series::GpuSeries>,
        Vec<model::hour_series::TenantSeries>,
    )> {
        dispatch!(self, s => s.tables.read_hour_series(scope, from_ms, to_ms).await)
    }

    /// What each team held and used of each pool (cluster, GPU model), hour by hour in
    /// [from, to): the demand forecast's history. Newest first, at most a
    /// million rows (four weeks of 1,500 pool-team series; the oldest dropped).
    pub async fn use_hours(
        &self,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<model::hour_series::UseHour>> {
        dispatch!(self, s => s.tables.read_use_hours(from_ms, to_ms).await)
    }
}

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
        let samples = dispatch!(self, s => s.tables.raw_records(t, &f, from_ms, to_ms).await)?;
        let [gi, tenant] = ["gi_id", "tenant_key"].map(|c| t.key_at(c));
        let holders: std::collections::BTreeSet<(i64, String)> = samples
            .iter()
            .filter_map(|r| Some((r.int_key(gi)?, r.text(tenant)?.to_owned())))
            .collect();
        Ok(holders.into_iter().take(MAX_MIG_HOLDERS as usize).collect())
    }

    pub async fn events(&self, from_ms: i64, to_ms: i64) -> Result<Vec<EventRecord>> {
        dispatch!(self, s => s.tables.events(from_ms, to_ms).await)
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
        let samples = dispatch!(self, s => s.tables.raw_records(t, &f, from_ms, to_ms).await)?;
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
                dispatch!(self, s => s.tables.oldest_hot(&cluster, &node, &gpus, cutoff).await)?
            else {
                continue;
            };
            let mut upto = raw::block_of(oldest);
            while upto < cutoff {
                upto = (upto + raw::SEAL_STEP_MS).min(cutoff);
                sealed +=
                    dispatch!(self, s => s.tables.seal_node(&cluster, &node, &gpus, upto).await)?;
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
        dispatch!(self, s => s.tables.save_analysis(generated_ms, from_ms, to_ms, body, keep).await)
    }

    /// When the newest stored analysis ran (cheap: no body).
    pub async fn latest_analysis_ms(&self) -> Result<Option<i64>> {
        dispatch!(self, s => s.tables.latest_analysis_ms().await)
    }

    /// The newest stored analysis (JSON; it carries its own time range).
    pub async fn latest_analysis(&self) -> Result<Option<String>> {
        dispatch!(self, s => s.tables.latest_analysis().await)
    }

    /// Takes the job's lock, or None when another collector holds it. SQLite has one
    /// collector per file, so the lock is always granted there.
    pub async fn try_job_lock(&self, key: i64) -> Result<Option<JobLock>> {
        match &self.backend {
            Backend::Postgres(s) => s.try_job_lock(key).await,
            Backend::Sqlite(_) => Ok(Some(JobLock::local())),
        }
    }
}
