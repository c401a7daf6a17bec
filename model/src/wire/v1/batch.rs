//! The batch and what it carries, as it travels.

use serde::{Deserialize, Serialize};

use crate::{
    Allocation, GpuEvent, GpuInfo, GpuSample, MigSample, ProcessSample, Tenant, UnixMillis,
};

/// The version number this module speaks.
pub const VERSION: u32 = 1;

/// One request body of `POST /api/v1/ingest`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    /// Always 1 for this module.
    pub version: u32,
    pub cluster: String,
    /// The node the samples come from; must match the node bound to the sender's token.
    pub node: String,
    /// Identifies one agent installation on the node (it survives restarts through the
    /// agent's state directory). Sequence numbers count per agent id.
    pub agent_id: String,
    /// Strictly increasing per agent id. A batch whose sequence is not above the highest one
    /// already stored for its agent id is a retry: acknowledged, not stored again.
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// Nominal sampling interval in milliseconds; each snapshot stands for this much time.
    pub interval_ms: u32,
    /// The node's GPUs. Send it in every batch, or at least whenever it changes; a batch
    /// without inventory keeps the last known one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<Vec<GpuInfo>>,
    /// Tenants referenced by the snapshots' `tenant` keys. Written even when empty, as the
    /// snapshots' lists are.
    #[serde(default)]
    pub tenants: Vec<Tenant>,
    pub snapshots: Vec<Snapshot>,
}

/// Everything one sampling cycle saw. A list may be left out (it is then empty), but every
/// writer here writes each one, empty or not: the compact layout (`compact.rs`) would write a
/// list left out before another field as nil, which no list takes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    pub ts: UnixMillis,
    #[serde(default)]
    pub gpus: Vec<GpuSample>,
    #[serde(default)]
    pub mig: Vec<MigSample>,
    #[serde(default)]
    pub processes: Vec<ProcessSample>,
    #[serde(default)]
    pub allocations: Vec<Allocation>,
    #[serde(default)]
    pub events: Vec<GpuEvent>,
}

impl Snapshot {
    pub fn row_count(&self) -> usize {
        self.gpus.len()
            + self.mig.len()
            + self.processes.len()
            + self.allocations.len()
            + self.events.len()
    }
}

/// A node's advisory labels as the collector serves them to the node's agent
/// (`GET /api/v1/nodes/{node}/labels`), which writes them to its Node Feature Discovery file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeLabels {
    pub node: String,
    /// When the analysis the labels come from ran (RFC 3339).
    pub analyzed: String,
    /// `gpulens.io/…` labels; empty when the analysis says nothing about the node.
    pub labels: std::collections::BTreeMap<String, String>,
}

impl Batch {
    /// Rows of every kind the batch makes the store write: snapshot rows, and the inventory's
    /// GPUs and MIG instances.
    pub fn row_count(&self) -> usize {
        let inventory = self.inventory.as_deref().map_or(0, |gpus| {
            gpus.iter()
                .map(|g| 1 + g.mig_instances.len())
                .sum::<usize>()
        });
        self.snapshots
            .iter()
            .map(Snapshot::row_count)
            .sum::<usize>()
            + inventory
    }

    /// When the batch first shows a tenant: its earliest snapshot holding an allocation or a
    /// process of it, else the batch's first snapshot (a tenant the batch only declares).
    pub fn first_seen(&self, tenant: &str) -> Option<UnixMillis> {
        self.snapshots
            .iter()
            .filter(|s| {
                s.allocations.iter().any(|a| a.tenant == tenant)
                    || s.processes
                        .iter()
                        .any(|p| p.tenant.as_deref() == Some(tenant))
            })
            .map(|s| s.ts)
            .min()
            .or_else(|| self.time_range().map(|r| r.0))
    }

    /// The earliest and latest snapshot timestamps, if there are snapshots.
    pub fn time_range(&self) -> Option<(UnixMillis, UnixMillis)> {
        let min = self.snapshots.iter().map(|s| s.ts).min()?;
        let max = self.snapshots.iter().map(|s| s.ts).max()?;
        Some((min, max))
    }
}

// Which rows of a snapshot are the same row: validation refuses a repeat, and a producer
// drops one (`rows.rs`).

/// A GPU row's key: one row per GPU in a snapshot.
pub(super) fn gpu_key(g: &GpuSample) -> &str {
    &g.gpu_uuid
}

/// A MIG row's key: its GPU, GPU instance and compute instance.
pub(super) fn mig_key(m: &MigSample) -> (&str, u32, u32) {
    (&m.gpu_uuid, m.gi_id, m.ci_id)
}

/// A process row's key: its GPU, pid and start time (a reused pid is another process).
pub(super) fn process_key(p: &ProcessSample) -> (&str, u32, i64) {
    (&p.gpu_uuid, p.pid, p.start_time)
}

/// An allocation's key: its device (GPU, MIG instance, replica) and tenant.
pub(super) type AllocationKey<'a> = (&'a str, &'a str, Option<u32>, Option<u32>, Option<u32>);

pub(super) fn allocation_key(a: &Allocation) -> AllocationKey<'_> {
    (&a.gpu_uuid, &a.tenant, a.gi_id, a.ci_id, a.replica)
}

/// An event's key: its GPU, time, kind and code.
pub(super) fn event_key(e: &GpuEvent) -> (&str, i64, &str, i64) {
    (&e.gpu_uuid, e.ts, &e.kind, e.code)
}
