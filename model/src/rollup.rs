//! Rollup arithmetic, shared by both storage backends: raw samples of one minute become one
//! row per GPU and one per (GPU, tenant); minute rows merge into hour rows. Every aggregate is
//! a count, a sum, a max or a histogram, so merging is exact and the same on PostgreSQL and
//! SQLite. Quantiles come from a 20-bin histogram (bins 0.05 wide), so a p95 read from a rollup
//! is within half a bin (0.025) of the true value and never above the bucket's max.

use std::collections::{BTreeMap, HashMap};

use crate::profiling::{PerRatio, Ratio};

mod energy;
mod hist;
mod ratio_agg;
mod stat;
pub use energy::{Claim, EnergyReading, MAX_GPU_WATTS, charges, sample_energy};
pub use hist::{HIST_BINS, Hist};
pub use ratio_agg::RatioAgg;
use stat::max_opt;
pub use stat::{Mean, Reading, Stat};

pub const MINUTE_MS: i64 = 60_000;
pub const HOUR_MS: i64 = 3_600_000;

/// Start of the bucket of width `width_ms` that contains `ts`.
pub fn bucket_of(ts: i64, width_ms: i64) -> i64 {
    ts - ts.rem_euclid(width_ms)
}

/// The raw GPU columns a rollup needs.
#[derive(Debug, Clone, Default)]
pub struct RawGpu {
    pub gpu_uuid: String,
    pub ts: i64,
    pub interval_ms: i32,
    pub gpu_util: Option<f32>,
    /// The DCGM profiling ratios ([`crate::profiling`]).
    pub ratios: PerRatio<Option<f32>>,
    pub mem_used_bytes: Option<i64>,
    pub mem_total_bytes: Option<i64>,
    pub power_w: Option<f32>,
    /// NVML's energy counter: joules since the driver loaded.
    pub energy_j: Option<f64>,
    pub temp_c: Option<f32>,
    pub throttle_reasons: Option<i64>,
}

impl RawGpu {
    /// DCGM's SM activity: what effective use rests on where it is known.
    pub fn sm_active(&self) -> Option<f32> {
        *self.ratios.get(Ratio::SmActive)
    }

    pub fn energy_reading(&self) -> EnergyReading {
        EnergyReading {
            ts: self.ts,
            interval_ms: self.interval_ms,
            counter_j: self.energy_j,
            power_w: self.power_w,
        }
    }
}

#[derive(Debug, Clone)]
pub struct RawAllocation {
    pub gpu_uuid: String,
    pub ts: i64,
    pub tenant_key: String,
    /// GPU instance id when the allocation is a MIG device.
    pub gi_id: Option<i32>,
    pub share: f32,
}

#[derive(Debug, Clone)]
pub struct RawProcess {
    pub gpu_uuid: String,
    pub ts: i64,
    pub tenant_key: Option<String>,
    pub gi_id: Option<i32>,
    pub sm_util: Option<f32>,
    pub mem_used_bytes: Option<i64>,
}

/// The MIG columns a rollup needs: DCGM's SM activity of one GPU instance.
#[derive(Debug, Clone)]
pub struct RawMig {
    pub gpu_uuid: String,
    pub ts: i64,
    pub gi_id: i32,
    pub sm_active: Option<f32>,
}

/// NVML's "GPU idle" clock-event reason: not a throttle.
const THROTTLE_IDLE: i64 = 0x1;

/// Aggregates of one GPU over one bucket.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuAgg {
    pub samples: i32,
    pub covered_s: f64,
    pub gpu_util: Stat<f32>,
    pub gpu_util_hist: Hist,
    /// Samples in which a kernel ran (gpu_util > 0).
    pub busy_n: i32,
    /// The DCGM profiling ratios, each counted on its own: dcgm-exporter's default counters
    /// include tensor and DRAM activity but not SM activity.
    pub ratios: PerRatio<RatioAgg>,
    pub mem_used: Stat<i64>,
    pub mem_total_max: Option<i64>,
    pub power: Stat<f32>,
    pub temp: Stat<f32>,
    /// Samples with a throttle reason other than "idle".
    pub throttled_n: i32,
    /// Sum over samples of the allocated share of the GPU (capped at 1 per sample).
    pub alloc_share_sum: f64,
    /// Samples whose energy is known (from the energy counter or the power reading).
    pub energy_n: i32,
    /// Joules the GPU drew over those samples ([`sample_energy`]).
    pub energy_j: f64,
}

impl GpuAgg {
    pub fn add(&mut self, r: &RawGpu, alloc_share: f64) {
        self.samples += 1;
        self.covered_s += f64::from(r.interval_ms) / 1000.0;
        if let Some(v) = r.gpu_util {
            self.gpu_util.add(v);
            self.gpu_util_hist.add(v);
            if v > 0.0 {
                self.busy_n += 1;
            }
        }
        for ((spec, v), agg) in r.ratios.iter().zip(&mut self.ratios.0) {
            if let Some(v) = v {
                agg.add(*v, spec.rollup);
            }
        }
        if let Some(v) = r.mem_used_bytes {
            self.mem_used.add(v);
        }
        self.mem_total_max = max_opt(self.mem_total_max, r.mem_total_bytes);
        for (s, v) in [(&mut self.power, r.power_w), (&mut self.temp, r.temp_c)] {
            if let Some(v) = v {
                s.add(v);
            }
        }
        if r.throttle_reasons.is_some_and(|t| t & !THROTTLE_IDLE != 0) {
            self.throttled_n += 1;
        }
        self.alloc_share_sum += alloc_share.min(1.0);
    }

    pub fn merge(&mut self, o: &GpuAgg) {
        self.samples += o.samples;
        self.covered_s += o.covered_s;
        self.gpu_util.merge(&o.gpu_util);
        self.gpu_util_hist.merge(&o.gpu_util_hist);
        self.busy_n += o.busy_n;
        for (a, b) in self.ratios.0.iter_mut().zip(&o.ratios.0) {
            a.merge(b);
        }
        self.mem_used.merge(&o.mem_used);
        self.mem_total_max = max_opt(self.mem_total_max, o.mem_total_max);
        self.power.merge(&o.power);
        self.temp.merge(&o.temp);
        self.throttled_n += o.throttled_n;
        self.alloc_share_sum += o.alloc_share_sum;
        self.energy_n += o.energy_n;
        self.energy_j += o.energy_j;
    }
}

/// Aggregates of one tenant on one GPU over one bucket.
///
/// Besides counts and sums, a tenant bucket carries the tenant's *effective* use (see
/// [`TenantAgg::eff_sum`]) and the idle runs needed to find allocations that ran no kernel for
/// a long time: the idle seconds at the start and end of the bucket and the longest idle run
/// inside it. Those three merge exactly across adjacent buckets, so an hour row knows the
/// longest idle run of its minutes and analytics can chain hours.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantAgg {
    /// Snapshots in which the tenant held an allocation or ran a process on the GPU.
    pub samples: i32,
    pub covered_s: f64,
    pub alloc_share_sum: f64,
    pub alloc_n: i32,
    pub present_n: i32,
    pub sm_util: Stat<f32>,
    pub busy_n: i32,
    pub mem_used: Stat<i64>,
    pub processes_max: i32,
    /// Samples in which the tenant's effective use is known.
    pub eff_n: i32,
    /// Sum of the tenant's effective use per sample, in GPU-equivalents (a share of the whole
    /// physical GPU): DCGM `sm_active` when known (the device's, split by the tenant's share of
    /// process SM time; a MIG instance's, scaled by its slice share), else NVML `gpu_util`
    /// split the same way.
    pub eff_sum: f64,
    /// Of `eff_n`, the samples whose effective use rests on DCGM `sm_active`.
    pub eff_dcgm_n: i32,
    /// Histogram of the per-sample effective use (for compute quantiles when right-sizing).
    pub eff_hist: Hist,
    /// Samples in which a kernel of the tenant ran, by the best signal available.
    pub active_n: i32,
    /// Samples in which the tenant held an allocation and is known to have run no kernel.
    pub idle_n: i32,
    /// Idle seconds from the start of the bucket to the first non-idle sample.
    pub idle_lead_s: f64,
    /// Idle seconds from the last non-idle sample to the end of the bucket.
    pub idle_trail_s: f64,
    /// The longest idle run inside the bucket, in seconds.
    pub idle_max_s: f64,
    /// Joules of the GPU's energy charged to the tenant (docs/cost.md, "Energy"): by its share
    /// of the GPU's use at each instant, by its allocated share when nobody used the GPU.
    pub energy_j: f64,
    /// Of `energy_j`, the joules charged while the tenant's allocation ran no kernel.
    pub idle_energy_j: f64,
}

/// GPU-hours of a per-sample sum of GPU shares over `samples` samples covering `covered_s`
/// seconds: the mean share × the time.
pub fn gpu_hours(share_sum: f64, samples: i32, covered_s: f64) -> f64 {
    share_sum / f64::from(samples.max(1)) * covered_s / 3600.0
}

/// Whether a bucket of `samples` covering `covered_s` seconds whose leading idle run lasted
/// `idle_lead_s` was idle throughout.
pub fn all_idle(samples: i32, idle_lead_s: f64, covered_s: f64) -> bool {
    samples > 0 && idle_lead_s >= covered_s - 1e-6
}

impl TenantAgg {
    /// GPU-hours the tenant's allocation held in the bucket: its mean share × the time covered.
    pub fn allocated_gpu_hours(&self) -> f64 {
        gpu_hours(self.alloc_share_sum, self.samples, self.covered_s)
    }

    /// GPU-hours of work the tenant did in the bucket, as measured: each sample's effective use
    /// × the time it covers (0 where its use is unknown). On a time-sliced or MPS GPU this can
    /// exceed what was allocated — a replica's share is what it was promised, not a ceiling.
    pub fn used_gpu_hours(&self) -> f64 {
        gpu_hours(self.eff_sum, self.samples, self.covered_s)
    }

    /// GPU-hours of the allocation used effectively: the use, at most the allocation, so that
    /// at every scope allocated ≥ effective and waste = allocated − effective.
    pub fn effective_gpu_hours(&self) -> f64 {
        self.used_gpu_hours().min(self.allocated_gpu_hours())
    }

    /// GPU-hours used beyond the allocation (idle replicas' time taken by a busy one): use −
    /// effective.
    pub fn borrowed_gpu_hours(&self) -> f64 {
        (self.used_gpu_hours() - self.allocated_gpu_hours()).max(0.0)
    }

    /// Whether every second the bucket covers was idle (its runs continue across a merge).
    pub fn all_idle(&self) -> bool {
        all_idle(self.samples, self.idle_lead_s, self.covered_s)
    }

    /// Extends the idle runs by one sample lasting `secs`; call before adding to `covered_s`.
    fn step_idle(&mut self, idle: bool, secs: f64) {
        if idle {
            if self.idle_lead_s >= self.covered_s - 1e-6 {
                self.idle_lead_s += secs;
            }
            self.idle_trail_s += secs;
            self.idle_max_s = self.idle_max_s.max(self.idle_trail_s);
            self.idle_n += 1;
        } else {
            self.idle_trail_s = 0.0;
        }
    }

    /// Merges the next bucket `o` into this one. `adjacent` says whether `o` starts where this
    /// bucket ends; a gap between them breaks idle runs.
    pub fn merge_next(&mut self, o: &TenantAgg, adjacent: bool) {
        let self_all = self.all_idle();
        let o_all = o.all_idle();
        let joined = if adjacent {
            self.idle_trail_s + o.idle_lead_s
        } else {
            0.0
        };
        self.idle_max_s = self.idle_max_s.max(o.idle_max_s).max(joined);
        if self_all && adjacent {
            self.idle_lead_s += o.idle_lead_s;
        }
        self.idle_trail_s = if o_all && adjacent {
            self.idle_trail_s + o.covered_s
        } else {
            o.idle_trail_s
        };
        self.samples += o.samples;
        self.covered_s += o.covered_s;
        self.alloc_share_sum += o.alloc_share_sum;
        self.alloc_n += o.alloc_n;
        self.present_n += o.present_n;
        self.sm_util.merge(&o.sm_util);
        self.busy_n += o.busy_n;
        self.mem_used.merge(&o.mem_used);
        self.processes_max = self.processes_max.max(o.processes_max);
        self.eff_n += o.eff_n;
        self.eff_sum += o.eff_sum;
        self.eff_dcgm_n += o.eff_dcgm_n;
        self.eff_hist.merge(&o.eff_hist);
        self.active_n += o.active_n;
        self.idle_n += o.idle_n;
        self.energy_j += o.energy_j;
        self.idle_energy_j += o.idle_energy_j;
    }
}

/// Key of a GPU rollup row within one node.
pub type GpuKey = (String, i64);
/// Key of a tenant rollup row within one node: (gpu, tenant, bucket).
pub type TenantKey = (String, String, i64);

/// Rollups of one node over some buckets.
#[derive(Debug, Default)]
pub struct NodeRollup {
    pub gpus: BTreeMap<GpuKey, GpuAgg>,
    pub tenants: BTreeMap<TenantKey, TenantAgg>,
}

/// One tenant's processes on one GPU at one instant.
#[derive(Default)]
struct ProcsAt {
    count: i32,
    sm: Option<f32>,
    mem: Option<i64>,
    busy: bool,
    gi: Option<i32>,
}

/// What a tenant did on a GPU at one instant, as far as the signals tell.
struct UseAt {
    /// Effective use in GPU-equivalents, and whether it rests on DCGM.
    eff: Option<(f64, bool)>,
    /// Whether a kernel ran; `None` when no signal can tell (MIG without DCGM).
    active: Option<bool>,
}

/// The raw rows of snapshots, as the store keeps them: what [`aggregate`] reads.
#[derive(Debug, Default)]
pub struct RawRows {
    pub gpus: Vec<RawGpu>,
    pub allocations: Vec<RawAllocation>,
    pub processes: Vec<RawProcess>,
    pub mig: Vec<RawMig>,
}

impl RawRows {
    /// Adds one snapshot of a node sampled every `interval_ms`.
    pub fn push(&mut self, snap: &crate::wire::v1::Snapshot, interval_ms: i32) {
        let ts = snap.ts;
        self.gpus.extend(snap.gpus.iter().map(|g| RawGpu {
            gpu_uuid: g.gpu_uuid.clone(),
            ts,
            interval_ms,
            gpu_util: g.gpu_util,
            ratios: crate::profiling::of_gpu(g),
            mem_used_bytes: g.mem_used_bytes,
            mem_total_bytes: g.mem_total_bytes,
            power_w: g.power_w,
            temp_c: g.temp_c,
            energy_j: g.energy_j,
            throttle_reasons: g.throttle_reasons,
        }));
        self.allocations
            .extend(snap.allocations.iter().map(|a| RawAllocation {
                gpu_uuid: a.gpu_uuid.clone(),
                ts,
                tenant_key: a.tenant.clone(),
                gi_id: a.gi_id.map(|g| g as i32),
                share: a.share,
            }));
        self.processes
            .extend(snap.processes.iter().map(|p| RawProcess {
                gpu_uuid: p.gpu_uuid.clone(),
                ts,
                tenant_key: p.tenant.clone(),
                gi_id: p.gi_id.map(|g| g as i32),
                sm_util: p.sm_util,
                mem_used_bytes: p.mem_used_bytes,
            }));
        self.mig.extend(snap.mig.iter().map(|m| RawMig {
            gpu_uuid: m.gpu_uuid.clone(),
            ts,
            gi_id: m.gi_id as i32,
            sm_active: m.sm_active,
        }));
    }

    /// [`aggregate`] over these rows.
    pub fn aggregate(&self, width_ms: i64) -> NodeRollup {
        aggregate(
            width_ms,
            &self.gpus,
            &self.allocations,
            &self.processes,
            &self.mig,
        )
    }
}

/// Aggregates raw rows of one node into buckets of `width_ms`.
pub fn aggregate(
    width_ms: i64,
    gpus: &[RawGpu],
    allocations: &[RawAllocation],
    processes: &[RawProcess],
    mig: &[RawMig],
) -> NodeRollup {
    let mut instants = instants(allocations, processes);
    let mig_active: HashMap<(&str, i64, i32), f32> = mig
        .iter()
        .filter_map(|m| Some(((m.gpu_uuid.as_str(), m.ts, m.gi_id), m.sm_active?)))
        .collect();

    // Idle runs need each tenant's samples in time order.
    let mut order: Vec<&RawGpu> = gpus.iter().collect();
    order.sort_by(|a, b| (a.gpu_uuid.as_str(), a.ts).cmp(&(b.gpu_uuid.as_str(), b.ts)));
    // A moment sent twice (the same `ts` in two batches: docs/ingest.md, "One snapshot per
    // moment") is one moment: its GPU row counts once, and the rows beside it are averaged
    // over the copies, so that allocations do not add up past the GPU nor memory double.
    let order: Vec<&RawGpu> = order
        .chunk_by(|a, b| a.gpu_uuid == b.gpu_uuid && a.ts == b.ts)
        .map(|copies| {
            if copies.len() > 1
                && let Some(at) = instants.get_mut(&(copies[0].gpu_uuid.as_str(), copies[0].ts))
            {
                at.count_once_of(copies.len() as u32);
            }
            copies[0]
        })
        .collect();

    let mut out = NodeRollup::default();
    let mut previous: Option<&RawGpu> = None;
    for g in order {
        let bucket = bucket_of(g.ts, width_ms);
        let energy = sample_energy(
            previous
                .filter(|p| p.gpu_uuid == g.gpu_uuid)
                .map(RawGpu::energy_reading),
            g.energy_reading(),
        );
        previous = Some(g);
        let at = instants.get(&(g.gpu_uuid.as_str(), g.ts));
        let alloc_total: f64 = at.map_or(0.0, |a| a.alloc.values().map(|v| v.0).sum());
        let gpu = out.gpus.entry((g.gpu_uuid.clone(), bucket)).or_default();
        gpu.add(g, alloc_total);
        if let Some(e) = energy {
            gpu.energy_n += 1;
            gpu.energy_j += e;
        }
        let Some(at) = at else { continue };
        let interval_s = f64::from(g.interval_ms) / 1000.0;
        let mut keys: Vec<&String> = at.alloc.keys().chain(at.procs.keys()).collect();
        keys.sort();
        keys.dedup();
        let sole = keys.len() == 1 && !at.unattributed;
        let uses: Vec<(&String, UseAt)> = keys
            .into_iter()
            .map(|tenant| {
                let u = use_at(
                    g,
                    at.alloc.get(tenant),
                    at.procs.get(tenant),
                    at.sm_total,
                    sole,
                    |gi| mig_active.get(&(g.gpu_uuid.as_str(), g.ts, gi)).copied(),
                );
                (tenant, u)
            })
            .collect();
        let claims: Vec<Claim> = uses
            .iter()
            .map(|(tenant, u)| Claim {
                used: u.eff.map(|e| e.0),
                allocated: at.alloc.get(*tenant).map(|a| a.0),
            })
            .collect();
        let device_use = g.sm_active().or(g.gpu_util).map(f64::from);
        let charges = charges(energy.unwrap_or(0.0), device_use, &claims);
        for ((tenant, use_at), charge) in uses.iter().zip(charges) {
            let t = out
                .tenants
                .entry((g.gpu_uuid.clone(), (*tenant).clone(), bucket))
                .or_default();
            t.add(
                at.alloc.get(*tenant),
                at.procs.get(*tenant),
                use_at,
                interval_s,
            );
            t.energy_j += charge;
            if at.alloc.contains_key(*tenant) && use_at.active == Some(false) {
                t.idle_energy_j += charge;
            }
        }
    }
    out
}

/// Per (GPU, ts): allocations and processes by tenant.
#[derive(Default)]
struct AtInstant {
    alloc: HashMap<String, (f64, Option<i32>)>,
    procs: HashMap<String, ProcsAt>,
    /// SM time of every process on the GPU, attributed or not.
    sm_total: f64,
    unattributed: bool,
}

impl AtInstant {
    /// The instant's rows came in `k` copies of its snapshot: their mean is the snapshot.
    fn count_once_of(&mut self, k: u32) {
        let k_f = f64::from(k);
        for (share, _) in self.alloc.values_mut() {
            *share /= k_f;
        }
        for p in self.procs.values_mut() {
            p.count = (p.count + k as i32 - 1) / k as i32;
            p.sm = p.sm.map(|sm| sm / k as f32);
            p.mem = p.mem.map(|m| m / i64::from(k));
        }
        self.sm_total /= k_f;
    }
}

fn instants<'a>(
    allocations: &'a [RawAllocation],
    processes: &'a [RawProcess],
) -> HashMap<(&'a str, i64), AtInstant> {
    let mut instants: HashMap<(&str, i64), AtInstant> = HashMap::new();
    for a in allocations {
        let e = instants
            .entry((&a.gpu_uuid, a.ts))
            .or_default()
            .alloc
            .entry(a.tenant_key.clone())
            .or_default();
        e.0 += f64::from(a.share);
        e.1 = e.1.or(a.gi_id);
    }
    for p in processes {
        let at = instants.entry((&p.gpu_uuid, p.ts)).or_default();
        at.sm_total += f64::from(p.sm_util.unwrap_or(0.0));
        let Some(tenant) = &p.tenant_key else {
            at.unattributed = true;
            continue;
        };
        let e = at.procs.entry(tenant.clone()).or_default();
        e.count += 1;
        if let Some(u) = p.sm_util {
            e.sm = Some(e.sm.unwrap_or(0.0) + u);
        }
        if let Some(m) = p.mem_used_bytes {
            // Saturating: stored rows are in their domain, but a sum must never panic a pass.
            e.mem = Some(e.mem.unwrap_or(0).saturating_add(m));
        }
        e.busy |= p.sm_util.is_some_and(|u| u > 0.0);
        e.gi = e.gi.or(p.gi_id);
    }
    instants
}

impl TenantAgg {
    /// One snapshot of the tenant on the GPU: its allocation, its processes and their use.
    fn add(
        &mut self,
        alloc: Option<&(f64, Option<i32>)>,
        procs: Option<&ProcsAt>,
        use_at: &UseAt,
        interval_s: f64,
    ) {
        let t = self;
        t.step_idle(alloc.is_some() && use_at.active == Some(false), interval_s);
        t.samples += 1;
        t.covered_s += interval_s;
        if let Some(&(share, _)) = alloc {
            t.alloc_n += 1;
            t.alloc_share_sum += share.min(1.0);
        }
        if let Some((eff, dcgm)) = use_at.eff {
            let eff = eff.clamp(0.0, 1.0);
            t.eff_n += 1;
            t.eff_sum += eff;
            t.eff_hist.add(eff as f32);
            if dcgm {
                t.eff_dcgm_n += 1;
            }
        }
        if use_at.active == Some(true) {
            t.active_n += 1;
        }
        if let Some(p) = procs {
            t.present_n += 1;
            t.processes_max = t.processes_max.max(p.count);
            if let Some(sm) = p.sm {
                t.sm_util.add(sm.min(1.0));
            }
            if p.busy {
                t.busy_n += 1;
            }
            if let Some(mem) = p.mem {
                t.mem_used.add(mem);
            }
        }
    }
}

/// A tenant's use of a GPU at one instant from the best signal there is:
/// - MIG instance: DCGM `sm_active` of the instance × its slice share; without DCGM only "no
///   process, so no kernel" is known.
/// - The only occupant of a GPU: the device's `sm_active`, else its `gpu_util`.
/// - A shared GPU: the device signal split by the tenant's share of process SM time.
fn use_at(
    g: &RawGpu,
    alloc: Option<&(f64, Option<i32>)>,
    procs: Option<&ProcsAt>,
    sm_total: f64,
    sole: bool,
    mig_active: impl Fn(i32) -> Option<f32>,
) -> UseAt {
    let gi = alloc.and_then(|a| a.1).or(procs.and_then(|p| p.gi));
    if let Some(gi) = gi {
        let slice_share = alloc.map(|a| a.0);
        return match (mig_active(gi), slice_share) {
            (Some(sa), Some(share)) => UseAt {
                eff: Some((f64::from(sa) * share, true)),
                active: Some(sa > 0.0),
            },
            (Some(sa), None) => UseAt {
                eff: None,
                active: Some(sa > 0.0),
            },
            (None, _) if procs.is_none() => UseAt {
                eff: Some((0.0, false)),
                active: Some(false),
            },
            (None, _) => UseAt {
                eff: None,
                active: None,
            },
        };
    }
    let Some(p) = procs else {
        return UseAt {
            eff: Some((0.0, g.sm_active().is_some())),
            active: Some(false),
        };
    };
    let device = match (g.sm_active(), g.gpu_util) {
        (Some(sa), _) => Some((f64::from(sa), true)),
        (None, Some(gu)) => Some((f64::from(gu), false)),
        (None, None) => None,
    };
    if sole {
        let active = match (p.sm, g.gpu_util, g.sm_active()) {
            (Some(sm), _, _) if sm > 0.0 => Some(true),
            (_, Some(gu), _) => Some(gu > 0.0),
            (_, None, Some(sa)) => Some(sa > 0.0),
            (sm, None, None) => sm.map(|s| s > 0.0),
        };
        return UseAt {
            eff: device.or(p.sm.map(|s| (f64::from(s), false))),
            active,
        };
    }
    match p.sm {
        Some(sm) => {
            let part = if sm_total > 0.0 {
                f64::from(sm) / sm_total
            } else {
                0.0
            };
            UseAt {
                eff: Some(match device {
                    Some((d, dcgm)) => (d * part, dcgm),
                    None => (f64::from(sm), false),
                }),
                active: Some(sm > 0.0),
            }
        }
        None => UseAt {
            eff: None,
            active: None,
        },
    }
}

/// Merges minute rollups into hour rollups.
pub fn to_hours(minutes: &NodeRollup) -> NodeRollup {
    let mut out = NodeRollup::default();
    for ((gpu, bucket), agg) in &minutes.gpus {
        out.gpus
            .entry((gpu.clone(), bucket_of(*bucket, HOUR_MS)))
            .or_default()
            .merge(agg);
    }
    // Minutes arrive in (gpu, tenant, bucket) order, so each hour's minutes come in time order.
    let mut last: Option<(&str, &str, i64)> = None;
    for ((gpu, tenant, bucket), agg) in &minutes.tenants {
        let hour = bucket_of(*bucket, HOUR_MS);
        let adjacent = last.is_some_and(|(g, t, b)| {
            g == gpu && t == tenant && b + MINUTE_MS == *bucket && bucket_of(b, HOUR_MS) == hour
        });
        match out.tenants.entry((gpu.clone(), tenant.clone(), hour)) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(agg.clone());
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                o.get_mut().merge_next(agg, adjacent)
            }
        }
        last = Some((gpu, tenant, *bucket));
    }
    out
}

#[cfg(test)]
mod tests;
