//! What the analytics reads: inventory and rollups, as plain values. The collector fills an
//! [`Input`] from its store; tests and benchmarks can build one directly.

/// The hour and minute series the analysis reads; the store builds them, so they live in
/// `model`.
pub use model::hour_series::{GpuHour, GpuSeries, TenantSeries};
pub use model::pair_hours::{DeviceMinute, DeviceMinutes, PairHour, TenantMinute, TenantMinutes};
use serde::{Deserialize, Serialize};

use crate::recommendation::Recommendation;

/// A node and when its agent last reported.
#[derive(Debug, Clone)]
pub struct NodeRef {
    pub cluster: String,
    pub node: String,
    pub last_seen_ms: i64,
    pub interval_ms: i64,
    /// Per-GPU sharing mechanisms seen in place on the node (the collector's demand poll).
    pub mechanisms: Vec<crate::mechanism::Mechanism>,
}

/// A physical GPU with its sharing mode and MIG instances.
#[derive(Debug, Clone)]
pub struct GpuRef {
    pub cluster: String,
    pub node: String,
    pub uuid: String,
    pub index: i64,
    /// The product name NVML reports, e.g. "NVIDIA H100 80GB HBM3".
    pub model: String,
    pub memory_total_bytes: i64,
    /// exclusive | time_slicing | mps | mig
    pub sharing: model::inventory::Sharing,
    pub replicas: i64,
    pub mig: Vec<MigRef>,
}

/// A MIG instance as the agent saw it.
#[derive(Debug, Clone)]
pub struct MigRef {
    pub gi_id: i64,
    pub profile: String,
    pub placement_start: Option<i64>,
    pub memory_total_bytes: i64,
    pub compute_slices: Option<i64>,
}

/// A tenant's identity, as shown to people.
#[derive(Debug, Clone)]
pub struct TenantRef {
    pub cluster: String,
    pub key: String,
    /// pod | slurm_job | host_user
    pub kind: String,
    pub name: String,
    pub team: Option<String>,
    /// The nodes it has been seen on (what ties a cluster's parts together: [`crate::parts`]).
    pub nodes: Vec<String>,
}

/// Health counters and XID errors of one GPU over the range.
#[derive(Debug, Clone, Default)]
pub struct GpuHealth {
    pub cluster: String,
    pub node: String,
    pub gpu: String,
    /// (time, XID code)
    pub xids: Vec<(i64, i64)>,
    /// Latest volatile uncorrected ECC count, retired pages and remapped rows.
    pub ecc_uncorrected: Option<i64>,
    pub retired_pages: Option<i64>,
    pub remapped_rows: Option<i64>,
}

/// A process that held GPU memory while no tenant could be found for it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrphanProcess {
    pub cluster: String,
    pub node: String,
    pub gpu: String,
    pub pid: i64,
    pub start_time_ms: i64,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
    pub mem_max_bytes: i64,
}

/// Work that waited for GPUs: one pod (or job) asking for `count` units of one resource,
/// waiting from `from_ms` until the last time it was seen waiting, `to_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    pub cluster: String,
    /// `pod`, `slurm_job`, …
    pub source: String,
    /// How people name it: `namespace/pod`.
    pub name: String,
    /// The team it belongs to (the `[teams]` mapping of its namespace or account, else that).
    pub team: String,
    /// `nvidia.com/gpu`, `nvidia.com/gpu.shared`, `nvidia.com/mig-<profile>`.
    pub resource: String,
    pub count: i64,
    /// The GPU product it asks for (`nvidia.com/gpu.product` node selector), if any.
    pub product: Option<String>,
    /// The scheduler's reason and message.
    pub reason: String,
    pub message: String,
    pub from_ms: i64,
    pub to_ms: i64,
}

/// A step that was applied: the recommendation as approved, and when the change ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Applied {
    /// The label action that applied it.
    pub action: i64,
    /// When the run started (node cordoned): the hours before it are "before".
    pub started_ms: i64,
    /// When the label change succeeded: the hours from the next whole hour are "after".
    pub applied_ms: i64,
    pub recommendation: Recommendation,
}

/// Everything one analysis run reads.
#[derive(Debug, Clone, Default)]
pub struct Input {
    pub from_ms: i64,
    pub to_ms: i64,
    /// "Now" for agent silence.
    pub now_ms: i64,
    pub nodes: Vec<NodeRef>,
    pub gpus: Vec<GpuRef>,
    pub tenants: Vec<TenantRef>,
    /// Hour rollups, a series per GPU and per (tenant, GPU). A key may have more than one
    /// series (readers merge them); each series is in time order.
    pub gpu_hours: Vec<GpuSeries>,
    pub tenant_hours: Vec<TenantSeries>,
    /// What interference measured in the GPU-hours [`crate::minute_ranges`] asks for: one
    /// row per GPU, hour and (victim, aggressor) pair, made from that hour's minute rollups by
    /// [`crate::pair_hours`] as each node's minutes are read, so no analysis holds the fleet's
    /// minutes at once.
    pub pair_hours: Vec<PairHour>,
    pub health: Vec<GpuHealth>,
    pub orphans: Vec<OrphanProcess>,
    /// Steps applied through label actions whose outcome the analysis checks.
    pub applied: Vec<Applied>,
    /// Work that waited for GPUs in the window (pending pods), for `waiting_demand`.
    pub waiting: Vec<Waiting>,
}

impl Input {
    pub fn gpu(&self, uuid: &str) -> Option<&GpuRef> {
        self.gpus.iter().find(|g| g.uuid == uuid)
    }

    /// Every cluster the input names: of its nodes, GPUs, tenants, series, health, processes,
    /// applied steps and waiting work.
    pub fn clusters(&self) -> std::collections::BTreeSet<String> {
        let names = self
            .nodes
            .iter()
            .map(|n| &n.cluster)
            .chain(self.gpus.iter().map(|g| &g.cluster))
            .chain(self.tenants.iter().map(|t| &t.cluster))
            .chain(self.gpu_hours.iter().map(|s| &s.cluster))
            .chain(self.tenant_hours.iter().map(|s| &s.cluster))
            .chain(self.pair_hours.iter().map(|p| &p.cluster))
            .chain(self.health.iter().map(|h| &h.cluster))
            .chain(self.orphans.iter().map(|o| &o.cluster))
            .chain(self.applied.iter().map(|a| &a.recommendation.cluster))
            .chain(self.waiting.iter().map(|w| &w.cluster));
        names.cloned().collect()
    }

    /// What the input holds of `cluster` alone, over the same range: the analysis of a fleet
    /// one cluster at a time reads one of these after another (the collector reads each
    /// cluster's series into it; an input that holds them is split here).
    pub fn of_cluster(&self, cluster: &str) -> Input {
        Input {
            tenants: keep(&self.tenants, |t| t.cluster == cluster),
            waiting: keep(&self.waiting, |w| w.cluster == cluster),
            ..self.of_nodes(&|c, _| c == cluster)
        }
    }

    /// What the input holds of the nodes `keep` takes (by cluster and node name), over the
    /// same range; no tenants and no waiting work (they are not a node's).
    pub fn of_nodes(&self, take: &dyn Fn(&str, &str) -> bool) -> Input {
        Input {
            from_ms: self.from_ms,
            to_ms: self.to_ms,
            now_ms: self.now_ms,
            nodes: keep(&self.nodes, |n| take(&n.cluster, &n.node)),
            gpus: keep(&self.gpus, |g| take(&g.cluster, &g.node)),
            tenants: Vec::new(),
            gpu_hours: keep(&self.gpu_hours, |s| take(&s.cluster, &s.node)),
            tenant_hours: keep(&self.tenant_hours, |s| take(&s.cluster, &s.node)),
            pair_hours: keep(&self.pair_hours, |p| take(&p.cluster, &p.node)),
            health: keep(&self.health, |h| take(&h.cluster, &h.node)),
            orphans: keep(&self.orphans, |o| take(&o.cluster, &o.node)),
            applied: keep(&self.applied, |a| {
                take(&a.recommendation.cluster, &a.recommendation.node)
            }),
            waiting: Vec::new(),
        }
    }

    /// GPU-hour rows, over all series.
    pub fn gpu_hour_rows(&self) -> usize {
        self.gpu_hours.iter().map(|s| s.hours.len()).sum()
    }

    /// Tenant-hour rows, over all series.
    pub fn tenant_hour_rows(&self) -> usize {
        self.tenant_hours.iter().map(|s| s.hours.len()).sum()
    }
}

/// The items `take` takes, copied.
fn keep<T: Clone>(items: &[T], take: impl Fn(&T) -> bool) -> Vec<T> {
    items.iter().filter(|x| take(x)).cloned().collect()
}
