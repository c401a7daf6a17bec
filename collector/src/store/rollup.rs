//! Rollup arithmetic, shared by both storage backends: raw samples of one minute become one
//! row per GPU and one per (GPU, tenant); minute rows merge into hour rows. Every aggregate is
//! a count, a sum, a max or a histogram, so merging is exact and the same on PostgreSQL and
//! SQLite. Quantiles come from a 20-bin histogram (bins 0.05 wide), so a p95 read from a rollup
//! is within half a bin (0.025) of the true value and never above the bucket's max.

use std::collections::{BTreeMap, HashMap};

pub const MINUTE_MS: i64 = 60_000;
pub const HOUR_MS: i64 = 3_600_000;
pub const HIST_BINS: usize = 20;

/// Start of the bucket of width `width_ms` that contains `ts`.
pub fn bucket_of(ts: i64, width_ms: i64) -> i64 {
    ts - ts.rem_euclid(width_ms)
}

/// A fixed histogram of ratios in [0, 1].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hist(pub [u32; HIST_BINS]);

impl Hist {
    pub fn add(&mut self, v: f32) {
        let bin = ((f64::from(v) * HIST_BINS as f64) as usize).min(HIST_BINS - 1);
        self.0[bin] += 1;
    }

    pub fn merge(&mut self, other: &Hist) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }

    pub fn count(&self) -> u64 {
        self.0.iter().map(|&c| u64::from(c)).sum()
    }

    /// The q-quantile: the midpoint of the bin holding it, capped by the known maximum.
    pub fn quantile(&self, q: f64, max: Option<f32>) -> Option<f32> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = (q * n as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in self.0.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                let mid = (i as f32 + 0.5) / HIST_BINS as f32;
                return Some(match max {
                    Some(m) => mid.min(m),
                    None => mid,
                });
            }
        }
        max
    }

    /// What a rollup row stores: the counts, or NULL for an empty histogram.
    pub fn to_stored(&self) -> Option<Vec<u8>> {
        (self.count() > 0).then(|| self.to_bytes())
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.0.iter().flat_map(|c| c.to_le_bytes()).collect()
    }

    /// Reads a histogram back; anything of the wrong length reads as empty.
    pub fn from_bytes(b: &[u8]) -> Hist {
        let mut h = Hist::default();
        if b.len() == HIST_BINS * 4 {
            for (i, chunk) in b.chunks_exact(4).enumerate() {
                h.0[i] = u32::from_le_bytes(chunk.try_into().expect("4 bytes"));
            }
        }
        h
    }
}

/// The raw GPU columns a rollup needs.
#[derive(Debug, Clone, Default)]
pub struct RawGpu {
    pub gpu_uuid: String,
    pub ts: i64,
    pub interval_ms: i32,
    pub gpu_util: Option<f32>,
    pub sm_active: Option<f32>,
    pub sm_occupancy: Option<f32>,
    pub tensor_active: Option<f32>,
    pub dram_active: Option<f32>,
    pub mem_used_bytes: Option<i64>,
    pub mem_total_bytes: Option<i64>,
    pub power_w: Option<f32>,
    pub temp_c: Option<f32>,
    pub throttle_reasons: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct RawAllocation {
    pub gpu_uuid: String,
    pub ts: i64,
    pub tenant_key: String,
    pub share: f32,
}

#[derive(Debug, Clone)]
pub struct RawProcess {
    pub gpu_uuid: String,
    pub ts: i64,
    pub tenant_key: Option<String>,
    pub sm_util: Option<f32>,
    pub mem_used_bytes: Option<i64>,
}

/// NVML's "GPU idle" clock-event reason: not a throttle.
const THROTTLE_IDLE: i64 = 0x1;

/// Aggregates of one GPU over one bucket.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuAgg {
    pub samples: i32,
    pub covered_s: f64,
    pub gpu_util_n: i32,
    pub gpu_util_sum: f64,
    pub gpu_util_max: Option<f32>,
    pub gpu_util_hist: Hist,
    /// Samples in which a kernel ran (gpu_util > 0).
    pub busy_n: i32,
    pub sm_active_n: i32,
    pub sm_active_sum: f64,
    pub sm_active_max: Option<f32>,
    pub sm_active_hist: Hist,
    pub sm_occupancy_sum: f64,
    pub tensor_active_sum: f64,
    pub dram_active_sum: f64,
    pub mem_used_n: i32,
    pub mem_used_sum: f64,
    pub mem_used_max: Option<i64>,
    pub mem_total_max: Option<i64>,
    pub power_n: i32,
    pub power_sum: f64,
    pub power_max: Option<f32>,
    pub temp_n: i32,
    pub temp_sum: f64,
    pub temp_max: Option<f32>,
    /// Samples with a throttle reason other than "idle".
    pub throttled_n: i32,
    /// Sum over samples of the allocated share of the GPU (capped at 1 per sample).
    pub alloc_share_sum: f64,
}

fn max_opt<T: PartialOrd + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y > x { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

impl GpuAgg {
    pub fn add(&mut self, r: &RawGpu, alloc_share: f64) {
        self.samples += 1;
        self.covered_s += f64::from(r.interval_ms) / 1000.0;
        if let Some(v) = r.gpu_util {
            self.gpu_util_n += 1;
            self.gpu_util_sum += f64::from(v);
            self.gpu_util_max = max_opt(self.gpu_util_max, Some(v));
            self.gpu_util_hist.add(v);
            if v > 0.0 {
                self.busy_n += 1;
            }
        }
        if let Some(v) = r.sm_active {
            self.sm_active_n += 1;
            self.sm_active_sum += f64::from(v);
            self.sm_active_max = max_opt(self.sm_active_max, Some(v));
            self.sm_active_hist.add(v);
            self.sm_occupancy_sum += f64::from(r.sm_occupancy.unwrap_or(0.0));
            self.tensor_active_sum += f64::from(r.tensor_active.unwrap_or(0.0));
            self.dram_active_sum += f64::from(r.dram_active.unwrap_or(0.0));
        }
        if let Some(v) = r.mem_used_bytes {
            self.mem_used_n += 1;
            self.mem_used_sum += v as f64;
            self.mem_used_max = max_opt(self.mem_used_max, Some(v));
        }
        self.mem_total_max = max_opt(self.mem_total_max, r.mem_total_bytes);
        if let Some(v) = r.power_w {
            self.power_n += 1;
            self.power_sum += f64::from(v);
            self.power_max = max_opt(self.power_max, Some(v));
        }
        if let Some(v) = r.temp_c {
            self.temp_n += 1;
            self.temp_sum += f64::from(v);
        }
        self.temp_max = max_opt(self.temp_max, r.temp_c);
        if r.throttle_reasons.is_some_and(|t| t & !THROTTLE_IDLE != 0) {
            self.throttled_n += 1;
        }
        self.alloc_share_sum += alloc_share.min(1.0);
    }

    pub fn merge(&mut self, o: &GpuAgg) {
        self.samples += o.samples;
        self.covered_s += o.covered_s;
        self.gpu_util_n += o.gpu_util_n;
        self.gpu_util_sum += o.gpu_util_sum;
        self.gpu_util_max = max_opt(self.gpu_util_max, o.gpu_util_max);
        self.gpu_util_hist.merge(&o.gpu_util_hist);
        self.busy_n += o.busy_n;
        self.sm_active_n += o.sm_active_n;
        self.sm_active_sum += o.sm_active_sum;
        self.sm_active_max = max_opt(self.sm_active_max, o.sm_active_max);
        self.sm_active_hist.merge(&o.sm_active_hist);
        self.sm_occupancy_sum += o.sm_occupancy_sum;
        self.tensor_active_sum += o.tensor_active_sum;
        self.dram_active_sum += o.dram_active_sum;
        self.mem_used_n += o.mem_used_n;
        self.mem_used_sum += o.mem_used_sum;
        self.mem_used_max = max_opt(self.mem_used_max, o.mem_used_max);
        self.mem_total_max = max_opt(self.mem_total_max, o.mem_total_max);
        self.power_n += o.power_n;
        self.power_sum += o.power_sum;
        self.power_max = max_opt(self.power_max, o.power_max);
        self.temp_n += o.temp_n;
        self.temp_sum += o.temp_sum;
        self.temp_max = max_opt(self.temp_max, o.temp_max);
        self.throttled_n += o.throttled_n;
        self.alloc_share_sum += o.alloc_share_sum;
    }
}

/// Aggregates of one tenant on one GPU over one bucket.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantAgg {
    /// Snapshots in which the tenant held an allocation or ran a process on the GPU.
    pub samples: i32,
    pub covered_s: f64,
    pub alloc_share_sum: f64,
    pub alloc_n: i32,
    pub present_n: i32,
    pub sm_util_n: i32,
    pub sm_util_sum: f64,
    pub sm_util_max: Option<f32>,
    pub busy_n: i32,
    pub mem_used_n: i32,
    pub mem_used_sum: f64,
    pub mem_used_max: Option<i64>,
    pub processes_max: i32,
}

impl TenantAgg {
    pub fn merge(&mut self, o: &TenantAgg) {
        self.samples += o.samples;
        self.covered_s += o.covered_s;
        self.alloc_share_sum += o.alloc_share_sum;
        self.alloc_n += o.alloc_n;
        self.present_n += o.present_n;
        self.sm_util_n += o.sm_util_n;
        self.sm_util_sum += o.sm_util_sum;
        self.sm_util_max = max_opt(self.sm_util_max, o.sm_util_max);
        self.busy_n += o.busy_n;
        self.mem_used_n += o.mem_used_n;
        self.mem_used_sum += o.mem_used_sum;
        self.mem_used_max = max_opt(self.mem_used_max, o.mem_used_max);
        self.processes_max = self.processes_max.max(o.processes_max);
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

/// Aggregates raw rows of one node into buckets of `width_ms`.
pub fn aggregate(
    width_ms: i64,
    gpus: &[RawGpu],
    allocations: &[RawAllocation],
    processes: &[RawProcess],
) -> NodeRollup {
    // Per (gpu, ts): allocations and processes by tenant.
    #[derive(Default)]
    struct AtInstant {
        alloc: HashMap<String, f64>,
        procs: HashMap<String, (i32, Option<f32>, Option<i64>, bool)>,
    }
    let mut instants: HashMap<(&str, i64), AtInstant> = HashMap::new();
    for a in allocations {
        *instants
            .entry((&a.gpu_uuid, a.ts))
            .or_default()
            .alloc
            .entry(a.tenant_key.clone())
            .or_default() += f64::from(a.share);
    }
    for p in processes {
        let Some(tenant) = &p.tenant_key else {
            continue;
        };
        let e = instants
            .entry((&p.gpu_uuid, p.ts))
            .or_default()
            .procs
            .entry(tenant.clone())
            .or_insert((0, None, None, false));
        e.0 += 1;
        if let Some(u) = p.sm_util {
            e.1 = Some(e.1.unwrap_or(0.0) + u);
        }
        if let Some(m) = p.mem_used_bytes {
            e.2 = Some(e.2.unwrap_or(0) + m);
        }
        e.3 |= p.sm_util.is_some_and(|u| u > 0.0);
    }
    let mut out = NodeRollup::default();
    for g in gpus {
        let bucket = bucket_of(g.ts, width_ms);
        let at = instants.get(&(g.gpu_uuid.as_str(), g.ts));
        let alloc_total: f64 = at.map_or(0.0, |a| a.alloc.values().sum());
        out.gpus
            .entry((g.gpu_uuid.clone(), bucket))
            .or_default()
            .add(g, alloc_total);
        let Some(at) = at else { continue };
        let interval_s = f64::from(g.interval_ms) / 1000.0;
        let mut keys: Vec<&String> = at.alloc.keys().chain(at.procs.keys()).collect();
        keys.sort();
        keys.dedup();
        for tenant in keys {
            let t = out
                .tenants
                .entry((g.gpu_uuid.clone(), tenant.clone(), bucket))
                .or_default();
            t.samples += 1;
            t.covered_s += interval_s;
            if let Some(share) = at.alloc.get(tenant) {
                t.alloc_n += 1;
                t.alloc_share_sum += share.min(1.0);
            }
            if let Some(&(count, sm, mem, busy)) = at.procs.get(tenant) {
                t.present_n += 1;
                t.processes_max = t.processes_max.max(count);
                if let Some(sm) = sm {
                    let sm = sm.min(1.0);
                    t.sm_util_n += 1;
                    t.sm_util_sum += f64::from(sm);
                    t.sm_util_max = max_opt(t.sm_util_max, Some(sm));
                }
                if busy {
                    t.busy_n += 1;
                }
                if let Some(mem) = mem {
                    t.mem_used_n += 1;
                    t.mem_used_sum += mem as f64;
                    t.mem_used_max = max_opt(t.mem_used_max, Some(mem));
                }
            }
        }
    }
    out
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
    for ((gpu, tenant, bucket), agg) in &minutes.tenants {
        out.tenants
            .entry((gpu.clone(), tenant.clone(), bucket_of(*bucket, HOUR_MS)))
            .or_default()
            .merge(agg);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(ts: i64, util: f32) -> RawGpu {
        RawGpu {
            gpu_uuid: "G".into(),
            ts,
            interval_ms: 1000,
            gpu_util: Some(util),
            ..RawGpu::default()
        }
    }

    #[test]
    fn histogram_quantiles_are_within_half_a_bin() {
        let mut h = Hist::default();
        let values: Vec<f32> = (0..1000).map(|i| i as f32 / 1000.0).collect();
        values.iter().for_each(|&v| h.add(v));
        let p95 = h.quantile(0.95, Some(0.999)).unwrap();
        assert!((p95 - 0.95).abs() <= 0.025, "{p95}");
        assert_eq!(Hist::from_bytes(&h.to_bytes()), h);
        assert_eq!(Hist::default().quantile(0.95, None), None);
        let mut one = Hist::default();
        one.add(1.0);
        assert_eq!(one.quantile(0.5, Some(1.0)), Some(0.975));
    }

    #[test]
    fn minutes_merge_into_hours_exactly() {
        let rows: Vec<RawGpu> = (0..7200)
            .map(|s| raw(s * 1000, (s % 10) as f32 / 10.0))
            .collect();
        let minutes = aggregate(MINUTE_MS, &rows, &[], &[]);
        assert_eq!(minutes.gpus.len(), 120);
        let hours = to_hours(&minutes);
        let direct = aggregate(HOUR_MS, &rows, &[], &[]);
        assert_eq!(hours.gpus.len(), 2);
        for (k, v) in &direct.gpus {
            let merged = &hours.gpus[k];
            assert_eq!(merged.samples, v.samples);
            assert!((merged.gpu_util_sum - v.gpu_util_sum).abs() < 1e-6);
            assert_eq!(merged.gpu_util_hist, v.gpu_util_hist);
            assert_eq!(merged.busy_n, 3240);
        }
    }

    #[test]
    fn tenants_get_allocation_and_use() {
        let rows = vec![raw(0, 0.5), raw(1000, 0.0)];
        let allocs = vec![
            RawAllocation {
                gpu_uuid: "G".into(),
                ts: 0,
                tenant_key: "t".into(),
                share: 0.25,
            },
            RawAllocation {
                gpu_uuid: "G".into(),
                ts: 1000,
                tenant_key: "t".into(),
                share: 0.25,
            },
        ];
        let procs = vec![RawProcess {
            gpu_uuid: "G".into(),
            ts: 0,
            tenant_key: Some("t".into()),
            sm_util: Some(0.5),
            mem_used_bytes: Some(100),
        }];
        let r = aggregate(MINUTE_MS, &rows, &allocs, &procs);
        let t = &r.tenants[&("G".to_string(), "t".to_string(), 0)];
        assert_eq!((t.samples, t.alloc_n, t.present_n, t.busy_n), (2, 2, 1, 1));
        assert!((t.alloc_share_sum - 0.5).abs() < 1e-9);
        assert_eq!(t.mem_used_max, Some(100));
        let g = &r.gpus[&("G".to_string(), 0)];
        assert!((g.alloc_share_sum - 0.5).abs() < 1e-9);
        assert_eq!(g.busy_n, 1);
    }
}
