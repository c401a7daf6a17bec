//! The agent's `/metrics`: native `gpulens_…` gauges from the last sampling cycle (a scrape
//! never calls NVML) and the agent's own health. Labels are bounded: GPUs and MIG instances
//! of this node, samplers, drop reasons; never pids or free text.

use std::sync::atomic::AtomicU64;

use model::GpuInfo;
use model::wire::v1::Snapshot;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

type FGauge = Gauge<f64, AtomicU64>;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuLabels {
    pub cluster: String,
    pub node: String,
    pub gpu_uuid: String,
    pub gpu_index: String,
    pub gpu_model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MigLabels {
    pub cluster: String,
    pub node: String,
    pub gpu_uuid: String,
    pub gpu_instance: String,
    pub compute_instance: String,
    pub profile: String,
}

/// Which part of a sampling cycle.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Sampler {
    Gpu,
    Dcgm,
}

/// Why a batch left the spool without being stored.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum DropReason {
    /// The spool reached its cap (configured, or what the filesystem can take).
    SpoolFull,
    /// A write met a full filesystem.
    DiskFull,
    /// A spooled record failed its checksum.
    Damaged,
    /// The spool could not be written for another reason (permissions, a broken disk).
    SpoolError,
    /// The collector refused the batch outright.
    Rejected,
}

impl EncodeLabelValue for Sampler {
    fn encode(&self, e: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(
            e,
            match self {
                Sampler::Gpu => "gpu",
                Sampler::Dcgm => "dcgm",
            },
        )
    }
}

impl EncodeLabelValue for DropReason {
    fn encode(&self, e: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(
            e,
            match self {
                DropReason::SpoolFull => "spool_full",
                DropReason::DiskFull => "disk_full",
                DropReason::Damaged => "damaged",
                DropReason::SpoolError => "spool_error",
                DropReason::Rejected => "rejected",
            },
        )
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SamplerLabels {
    pub sampler: Sampler,
}

/// A GPU's reading the driver answered outside its domain.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadingLabels {
    pub gpu_uuid: String,
    pub reading: String,
}

/// A GPU's row dropped from a snapshot's list.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RowLabels {
    pub gpu_uuid: String,
    pub rows: String,
}

/// A tenant's field taken out of a cycle (`key` when the tenant went).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantFieldLabels {
    pub field: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    pub reason: DropReason,
}

model::metric_set! {
    /// The agent's metric families, each with its exposed name (prefixed `gpulens_`) and help.
    pub struct AgentFamilies {
        gpu_util: Family<GpuLabels, FGauge> => "gpu_utilization_ratio",
            "NVML utilization: share of time a kernel ran (0-1)";
        gpu_sm_active: Family<GpuLabels, FGauge> => "gpu_sm_active_ratio",
            "DCGM: share of SMs with a warp resident (0-1); absent without DCGM";
        gpu_mem_used: Family<GpuLabels, FGauge> => "gpu_memory_used" in Unit::Bytes,
            "Framebuffer memory in use";
        gpu_mem_total: Family<GpuLabels, FGauge> => "gpu_memory_total" in Unit::Bytes,
            "Framebuffer memory";
        gpu_power: Family<GpuLabels, FGauge> => "gpu_power" in Unit::Other("watts".into()),
            "Power draw";
        gpu_temp: Family<GpuLabels, FGauge> => "gpu_temperature" in Unit::Celsius,
            "GPU temperature";
        gpu_processes: Family<GpuLabels, FGauge> => "gpu_processes",
            "Compute and MPS processes on the GPU";
        mig_mem_used: Family<MigLabels, FGauge> => "mig_memory_used" in Unit::Bytes,
            "Memory in use in a MIG instance";
        sampler_duration: Family<SamplerLabels, Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 4.0, 10)))
            => "agent_collector_duration" in Unit::Seconds,
            "Time one sampler took in the last cycles";
        sampler_success: Family<SamplerLabels, Gauge> => "agent_collector_success",
            "Whether the sampler's last run succeeded (1) or not (0)";
        spool_bytes: Gauge => "agent_spool" in Unit::Bytes,
            "Bytes in the disk spool";
        spool_backlog_bytes: Gauge => "agent_spool_backlog" in Unit::Bytes,
            "Bytes in the spool not yet delivered";
        batches_sent: Counter => "agent_batches_sent",
            "Batches the collector acknowledged";
        send_failures: Counter => "agent_send_failures",
            "Delivery attempts that failed and will be retried";
        dropped: Family<DropLabels, Counter> => "agent_batches_dropped",
            "Batches that left the spool without being stored, by reason";
        xid_errors: Counter => "agent_xid_errors",
            "XID errors seen";
        out_of_domain: Family<ReadingLabels, Counter> => "agent_readings_out_of_domain",
            "Readings the GPU reported outside what they can be (4294967295 degrees, more memory than any GPU has), sent as absent, by GPU and reading";
        rows_dropped: Family<RowLabels, Counter> => "agent_rows_dropped",
            "Rows no batch may hold (a pid past Linux's largest, a process listed twice, two equal XID errors in one millisecond), left out of the batch, by GPU and list";
        tenant_values_taken_out: Family<TenantFieldLabels, Counter> => "agent_tenant_values_taken_out",
            "Tenant values no batch may hold, by field: a field that is not text (an account a Slurm task rewrote, a user name holding an escape) sent as absent; key: the tenant left out, its processes sent unattributed";
        spool_cap_bytes: Gauge => "agent_spool_cap" in Unit::Bytes,
            "The spool's cap in force: --spool-max-bytes, or less when the filesystem is short of room";
        disk_full: Gauge => "agent_disk_full",
            "Whether the state directory's filesystem is full for the spool (1): writes fail with ENOSPC, or free space is below the reserve (--spool-min-free-percent)";
        samples_missed: Counter => "agent_samples_missed",
            "Sampling slots that passed without a sample (a cycle longer than the interval, a stalled process, a clock jump)";
        samples_late: Counter => "agent_samples_late",
            "Samples taken more than a quarter interval after their slot began";
        /// Connections to the /metrics listener closed at once because it was at its cap.
        listener_refused: Counter => "agent_listener_connections_refused",
            "Connections to the /metrics and /healthz listener closed at once because it was serving as many as it takes";
    }
}

/// The agent's registry and its families (read through `Deref`: `metrics.batches_sent`).
#[derive(Debug)]
pub struct AgentMetrics {
    registry: Registry,
    families: AgentFamilies,
    /// The spool's drop counts already added to `dropped` (the spool counts since it opened).
    published_drops: std::sync::Mutex<crate::spool::Dropped>,
}

impl std::ops::Deref for AgentMetrics {
    type Target = AgentFamilies;

    fn deref(&self) -> &AgentFamilies {
        &self.families
    }
}

impl AgentMetrics {
    pub fn new() -> AgentMetrics {
        let mut registry = Registry::with_prefix("gpulens");
        let families = AgentFamilies::register(&mut registry);
        AgentMetrics {
            registry,
            families,
            published_drops: Default::default(),
        }
    }

    /// Replaces the device gauges with the last cycle's readings; absent readings have no
    /// series (never a 0).
    pub fn record(&self, cluster: &str, node: &str, inventory: &[GpuInfo], snap: &Snapshot) {
        for f in [
            &self.gpu_util,
            &self.gpu_sm_active,
            &self.gpu_mem_used,
            &self.gpu_mem_total,
            &self.gpu_power,
            &self.gpu_temp,
            &self.gpu_processes,
        ] {
            f.clear();
        }
        self.mig_mem_used.clear();
        for g in &snap.gpus {
            let Some(info) = inventory.iter().find(|i| i.uuid == g.gpu_uuid) else {
                continue;
            };
            let l = GpuLabels {
                cluster: cluster.to_owned(),
                node: node.to_owned(),
                gpu_uuid: g.gpu_uuid.clone(),
                gpu_index: info.index.to_string(),
                gpu_model: info.model.clone(),
            };
            let set = |f: &Family<GpuLabels, FGauge>, v: Option<f64>| {
                if let Some(v) = v {
                    f.get_or_create(&l).set(v);
                }
            };
            set(&self.gpu_util, g.gpu_util.map(f64::from));
            set(&self.gpu_sm_active, g.sm_active.map(f64::from));
            set(&self.gpu_mem_used, g.mem_used_bytes.map(|v| v as f64));
            set(&self.gpu_mem_total, g.mem_total_bytes.map(|v| v as f64));
            set(&self.gpu_power, g.power_w.map(f64::from));
            set(&self.gpu_temp, g.temp_c.map(f64::from));
            set(
                &self.gpu_processes,
                Some(
                    snap.processes
                        .iter()
                        .filter(|p| p.gpu_uuid == g.gpu_uuid)
                        .count() as f64,
                ),
            );
            for m in snap.mig.iter().filter(|m| m.gpu_uuid == g.gpu_uuid) {
                let profile = info
                    .mig_instances
                    .iter()
                    .find(|i| i.gi_id == m.gi_id && i.ci_id == m.ci_id)
                    .map_or_else(String::new, |i| i.profile.clone());
                if let Some(v) = m.mem_used_bytes {
                    self.mig_mem_used
                        .get_or_create(&MigLabels {
                            cluster: cluster.to_owned(),
                            node: node.to_owned(),
                            gpu_uuid: g.gpu_uuid.clone(),
                            gpu_instance: m.gi_id.to_string(),
                            compute_instance: m.ci_id.to_string(),
                            profile,
                        })
                        .set(v as f64);
                }
            }
        }
        self.xid_errors
            .inc_by(snap.events.iter().filter(|e| e.kind == "xid").count() as u64);
    }

    /// Counts what a cycle took out of its snapshot: readings outside their domains, rows no
    /// batch may hold.
    pub fn count_taken_out(&self, taken: &crate::out_of_domain::TakenOut) {
        for c in &taken.cleared {
            self.out_of_domain
                .get_or_create(&ReadingLabels {
                    gpu_uuid: c.gpu_uuid.clone(),
                    reading: c.reading.clone(),
                })
                .inc();
        }
        for d in &taken.dropped {
            self.rows_dropped
                .get_or_create(&RowLabels {
                    gpu_uuid: d.gpu_uuid.clone(),
                    rows: d.rows.to_owned(),
                })
                .inc();
        }
        for t in &taken.tenants {
            self.tenant_values_taken_out
                .get_or_create(&TenantFieldLabels {
                    field: t.field.to_owned(),
                })
                .inc();
        }
    }

    /// Publishes the spool's size, cap and drops after any change to it.
    pub fn record_spool(&self, spool: &crate::spool::Spool) {
        self.spool_bytes.set(spool.disk_bytes() as i64);
        self.spool_backlog_bytes.set(spool.backlog_bytes() as i64);
        self.spool_cap_bytes.set(spool.cap_bytes() as i64);
        self.disk_full.set(i64::from(spool.disk_is_full()));
        let now = spool.dropped;
        let mut seen = self.published_drops.lock().expect("published drops");
        let publish = |reason, now: u64, seen: &mut u64| {
            if now > *seen {
                self.count_drop(reason, now - *seen);
                *seen = now;
            }
        };
        publish(DropReason::SpoolFull, now.spool_full, &mut seen.spool_full);
        publish(DropReason::DiskFull, now.disk_full, &mut seen.disk_full);
        publish(DropReason::Damaged, now.damaged, &mut seen.damaged);
    }

    /// Counts batches lost for `reason`.
    pub fn count_drop(&self, reason: DropReason, n: u64) {
        self.dropped.get_or_create(&DropLabels { reason }).inc_by(n);
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }
}

impl Default for AgentMetrics {
    fn default() -> Self {
        AgentMetrics::new()
    }
}
