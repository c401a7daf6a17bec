//! What the store reads and writes, as plain records: inventory, tenants, events, health,
//! counts, and the settings and keys the backends share.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::error::Result;

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
    pub sharing: model::inventory::Sharing,
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

/// A tenant, merged over the nodes it was seen on: the agent's description of it, its team,
/// and where and when it was seen.
#[derive(Debug, Clone)]
pub struct TenantRecord {
    pub cluster: String,
    pub tenant: model::Tenant,
    pub team: Option<String>,
    pub nodes: Vec<String>,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
}

impl TenantRecord {
    /// The tenant's key (`pod/<uid>/<container>`, `slurm/<job>`, `host/<uid>`).
    pub fn key(&self) -> &str {
        &self.tenant.key
    }

    /// The tenant's name as the model spells it everywhere (dashboard, reports, agent output).
    pub fn display_name(&self) -> String {
        self.tenant.display_name()
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
    /// The raw samples of each kind (rows and sealed together), in the order of the first
    /// five of [`crate::Store::RAW_TABLES`].
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

/// The minute spans wanted per GPU of one node: GPU UUID → [from, to) ranges in ms.
pub type WantedMinutes = HashMap<String, Vec<(i64, i64)>>;

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
    /// A lock that needs no release: SQLite has one writer, so every job is this process's.
    pub(crate) fn local() -> JobLock {
        JobLock { pg: None }
    }

    pub(crate) fn postgres(conn: sqlx::pool::PoolConnection<sqlx::Postgres>, key: i64) -> JobLock {
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
pub const LOCK_RECLAIM: i64 = 0x6770_756c_656e_7304;

/// The most (instance, tenant) pairs `mig_holders` returns.
pub const MAX_MIG_HOLDERS: i64 = 256;

/// Tenant rows of several nodes as one record per tenant: the newest row's fields, the
/// earliest first sighting, every node it was seen on.
pub(crate) fn merge_tenants(rows: Vec<(TenantRecord, String)>) -> Vec<TenantRecord> {
    let mut out: BTreeMap<(String, String), TenantRecord> = BTreeMap::new();
    for (rec, node) in rows {
        let e = out
            .entry((rec.cluster.clone(), rec.tenant.key.clone()))
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

/// What of a batch's descriptive records the backend must write.
#[derive(Debug)]
pub struct Writes<'a> {
    pub inventory: bool,
    pub tenants: Vec<&'a model::Tenant>,
}
