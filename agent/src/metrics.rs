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
        let mut m = AgentMetrics {
            registry: Registry::with_prefix("gpulens"),
            published_drops: Default::default(),
            gpu_util: Default::default(),
            gpu_sm_active: Default::default(),
            gpu_mem_used: Default::default(),
            gpu_mem_total: Default::default(),
            gpu_power: Default::default(),
            gpu_temp: Default::default(),
            gpu_processes: Default::default(),
            mig_mem_used: Default::default(),
            sampler_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 4.0, 10))
            }),
            sampler_success: Default::default(),
            spool_bytes: Default::default(),
            spool_backlog_bytes: Default::default(),
            batches_sent: Default::default(),
            send_failures: Default::default(),
            dropped: Default::default(),
            xid_errors: Default::default(),
            spool_cap_bytes: Default::default(),
            disk_full: Default::default(),
            samples_missed: Default::default(),
            samples_late: Default::default(),
            listener_refused: Default::default(),
        };
        m.register_devices();
        m.register_agent();
        m
    }

    /// The device gauges and the samplers' health.
    fn register_devices(&mut self) {
        let r = &mut self.registry;
        reg(
            r,
            "gpu_utilization_ratio",
            "NVML utilization: share of time a kernel ran (0-1)",
            None,
            self.gpu_util.clone(),
        );
        reg(
            r,
            "gpu_sm_active_ratio",
            "DCGM: share of SMs with a warp resident (0-1); absent without DCGM",
            None,
            self.gpu_sm_active.clone(),
        );
        reg(
            r,
            "gpu_memory_used",
            "Framebuffer memory in use",
            Some(Unit::Bytes),
            self.gpu_mem_used.clone(),
        );
        reg(
            r,
            "gpu_memory_total",
            "Framebuffer memory",
            Some(Unit::Bytes),
            self.gpu_mem_total.clone(),
        );
        reg(
            r,
            "gpu_power",
            "Power draw",
            Some(Unit::Other("watts".into())),
            self.gpu_power.clone(),
        );
        reg(
            r,
            "gpu_temperature",
            "GPU temperature",
            Some(Unit::Celsius),
            self.gpu_temp.clone(),
        );
        reg(
            r,
            "gpu_processes",
            "Compute and MPS processes on the GPU",
            None,
            self.gpu_processes.clone(),
        );
        reg(
            r,
            "mig_memory_used",
            "Memory in use in a MIG instance",
            Some(Unit::Bytes),
            self.mig_mem_used.clone(),
        );
        reg(
            r,
            "agent_collector_duration",
            "Time one sampler took in the last cycles",
            Some(Unit::Seconds),
            self.sampler_duration.clone(),
        );
        reg(
            r,
            "agent_collector_success",
            "Whether the sampler's last run succeeded (1) or not (0)",
            None,
            self.sampler_success.clone(),
        );
    }

    /// The agent's own health: spool, delivery, drops, sampling slots, the listener.
    fn register_agent(&mut self) {
        let r = &mut self.registry;
        reg(
            r,
            "agent_spool",
            "Bytes in the disk spool",
            Some(Unit::Bytes),
            self.spool_bytes.clone(),
        );
        reg(
            r,
            "agent_spool_backlog",
            "Bytes in the spool not yet delivered",
            Some(Unit::Bytes),
            self.spool_backlog_bytes.clone(),
        );
        reg(
            r,
            "agent_batches_sent",
            "Batches the collector acknowledged",
            None,
            self.batches_sent.clone(),
        );
        reg(
            r,
            "agent_send_failures",
            "Delivery attempts that failed and will be retried",
            None,
            self.send_failures.clone(),
        );
        reg(
            r,
            "agent_batches_dropped",
            "Batches that left the spool without being stored, by reason",
            None,
            self.dropped.clone(),
        );
        reg(
            r,
            "agent_xid_errors",
            "XID errors seen",
            None,
            self.xid_errors.clone(),
        );
        reg(
            r,
            "agent_spool_cap",
            "The spool's cap in force: --spool-max-bytes, or less when the filesystem is short of room",
            Some(Unit::Bytes),
            self.spool_cap_bytes.clone(),
        );
        reg(
            r,
            "agent_disk_full",
            "Whether the state directory's filesystem is full for the spool (1): writes fail with ENOSPC, or free space is below the reserve (--spool-min-free-percent)",
            None,
            self.disk_full.clone(),
        );
        reg(
            r,
            "agent_samples_missed",
            "Sampling slots that passed without a sample (a cycle longer than the interval, a stalled process, a clock jump)",
            None,
            self.samples_missed.clone(),
        );
        reg(
            r,
            "agent_samples_late",
            "Samples taken more than a quarter interval after their slot began",
            None,
            self.samples_late.clone(),
        );
        reg(
            r,
            "agent_listener_connections_refused",
            "Connections to the /metrics and /healthz listener closed at once because it was serving as many as it takes",
            None,
            self.listener_refused.clone(),
        );
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

/// Registers `metric` under `name` (prefixed `gpulens_`), with its unit when it has one.
fn reg(
    r: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    metric: impl prometheus_client::registry::Metric,
) {
    match unit {
        Some(u) => r.register_with_unit(name, help, u, metric),
        None => r.register(name, help, metric),
    }
}
