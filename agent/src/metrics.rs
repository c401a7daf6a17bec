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

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    pub reason: DropReason,
}

#[derive(Debug)]
pub struct AgentMetrics {
    registry: Registry,
    gpu_util: Family<GpuLabels, FGauge>,
    gpu_sm_active: Family<GpuLabels, FGauge>,
    gpu_mem_used: Family<GpuLabels, FGauge>,
    gpu_mem_total: Family<GpuLabels, FGauge>,
    gpu_power: Family<GpuLabels, FGauge>,
    gpu_temp: Family<GpuLabels, FGauge>,
    gpu_processes: Family<GpuLabels, FGauge>,
    mig_mem_used: Family<MigLabels, FGauge>,
    pub sampler_duration: Family<SamplerLabels, Histogram>,
    pub sampler_success: Family<SamplerLabels, Gauge>,
    pub spool_bytes: Gauge,
    pub spool_backlog_bytes: Gauge,
    pub batches_sent: Counter,
    pub send_failures: Counter,
    pub dropped: Family<DropLabels, Counter>,
    pub xid_errors: Counter,
    pub spool_cap_bytes: Gauge,
    pub disk_full: Gauge,
    pub samples_missed: Counter,
    pub samples_late: Counter,
    /// Connections to the /metrics listener closed at once because it was at its cap.
    pub listener_refused: Counter,
    /// The spool's drop counts already added to `dropped` (the spool counts since it opened).
    published_drops: std::sync::Mutex<crate::spool::Dropped>,
}

impl AgentMetrics {
    pub fn new() -> AgentMetrics {
        let mut r = Registry::with_prefix("gpulens");
        macro_rules! reg {
            ($name:literal, $help:literal, $unit:expr, $m:expr) => {{
                let m = $m;
                match $unit {
                    Some(u) => r.register_with_unit($name, $help, u, m.clone()),
                    None => r.register($name, $help, m.clone()),
                }
                m
            }};
        }
        let gpu_util = reg!(
            "gpu_utilization_ratio",
            "NVML utilization: share of time a kernel ran (0-1)",
            None::<Unit>,
            Family::<GpuLabels, FGauge>::default()
        );
        let gpu_sm_active = reg!(
            "gpu_sm_active_ratio",
            "DCGM: share of SMs with a warp resident (0-1); absent without DCGM",
            None::<Unit>,
            Family::<GpuLabels, FGauge>::default()
        );
        let gpu_mem_used = reg!(
            "gpu_memory_used",
            "Framebuffer memory in use",
            Some(Unit::Bytes),
            Family::<GpuLabels, FGauge>::default()
        );
        let gpu_mem_total = reg!(
            "gpu_memory_total",
            "Framebuffer memory",
            Some(Unit::Bytes),
            Family::<GpuLabels, FGauge>::default()
        );
        let gpu_power = reg!(
            "gpu_power",
            "Power draw",
            Some(Unit::Other("watts".into())),
            Family::<GpuLabels, FGauge>::default()
        );
        let gpu_temp = reg!(
            "gpu_temperature",
            "GPU temperature",
            Some(Unit::Celsius),
            Family::<GpuLabels, FGauge>::default()
        );
        let gpu_processes = reg!(
            "gpu_processes",
            "Compute and MPS processes on the GPU",
            None::<Unit>,
            Family::<GpuLabels, FGauge>::default()
        );
        let mig_mem_used = reg!(
            "mig_memory_used",
            "Memory in use in a MIG instance",
            Some(Unit::Bytes),
            Family::<MigLabels, FGauge>::default()
        );
        let sampler_duration = reg!(
            "agent_collector_duration",
            "Time one sampler took in the last cycles",
            Some(Unit::Seconds),
            Family::<SamplerLabels, Histogram>::new_with_constructor(|| Histogram::new(
                exponential_buckets(0.0001, 4.0, 10)
            ))
        );
        let sampler_success = reg!(
            "agent_collector_success",
            "Whether the sampler's last run succeeded (1) or not (0)",
            None::<Unit>,
            Family::<SamplerLabels, Gauge>::default()
        );
        let spool_bytes = reg!(
            "agent_spool",
            "Bytes in the disk spool",
            Some(Unit::Bytes),
            Gauge::default()
        );
        let spool_backlog_bytes = reg!(
            "agent_spool_backlog",
            "Bytes in the spool not yet delivered",
            Some(Unit::Bytes),
            Gauge::default()
        );
        let batches_sent = reg!(
            "agent_batches_sent",
            "Batches the collector acknowledged",
            None::<Unit>,
            Counter::default()
        );
        let send_failures = reg!(
            "agent_send_failures",
            "Delivery attempts that failed and will be retried",
            None::<Unit>,
            Counter::default()
        );
        let dropped = reg!(
            "agent_batches_dropped",
            "Batches that left the spool without being stored, by reason",
            None::<Unit>,
            Family::<DropLabels, Counter>::default()
        );
        let xid_errors = reg!(
            "agent_xid_errors",
            "XID errors seen",
            None::<Unit>,
            Counter::default()
        );
        let spool_cap_bytes = reg!(
            "agent_spool_cap",
            "The spool's cap in force: --spool-max-bytes, or less when the filesystem is short of room",
            Some(Unit::Bytes),
            Gauge::default()
        );
        let disk_full = reg!(
            "agent_disk_full",
            "Whether the state directory's filesystem is full for the spool (1): writes fail with ENOSPC, or free space is below the reserve (--spool-min-free-percent)",
            None::<Unit>,
            Gauge::default()
        );
        let samples_missed = reg!(
            "agent_samples_missed",
            "Sampling slots that passed without a sample (a cycle longer than the interval, a stalled process, a clock jump)",
            None::<Unit>,
            Counter::default()
        );
        let samples_late = reg!(
            "agent_samples_late",
            "Samples taken more than a quarter interval after their slot began",
            None::<Unit>,
            Counter::default()
        );
        let listener_refused = reg!(
            "agent_listener_connections_refused",
            "Connections to the /metrics and /healthz listener closed at once because it was serving as many as it takes",
            None::<Unit>,
            Counter::default()
        );
        AgentMetrics {
            registry: r,
            listener_refused,
            spool_cap_bytes,
            disk_full,
            samples_missed,
            samples_late,
            published_drops: Default::default(),
            gpu_util,
            gpu_sm_active,
            gpu_mem_used,
            gpu_mem_total,
            gpu_power,
            gpu_temp,
            gpu_processes,
            mig_mem_used,
            sampler_duration,
            sampler_success,
            spool_bytes,
            spool_backlog_bytes,
            batches_sent,
            send_failures,
            dropped,
            xid_errors,
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
