//! Interference's pair-hours, measured from a node's minute rollups: per GPU-hour and
//! (victim, aggressor) pair of tenants sharing the GPU, the victim's rate in the minutes the
//! aggressor was idle (alone) and in those it was busy while the device was saturated
//! (contended). The rollup keeps them as it merges each hour, so an analysis adds up sums and
//! reads no minutes; the analysis measures an hour the same way where nothing kept holds.

use std::collections::{BTreeMap, HashMap};

use crate::profiling::Ratio;
use crate::rollup::{HOUR_MS, NodeRollup};

/// One GPU's minute rollups inside the ranges interference looks at, ordered by minute.
#[derive(Debug, Clone, Default)]
pub struct DeviceMinutes {
    pub cluster: String,
    pub node: String,
    pub gpu: String,
    pub minutes: Vec<DeviceMinute>,
}

/// What interference reads of a GPU's minute: how busy the device was.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DeviceMinute {
    pub bucket: i64,
    pub gpu_util_n: i32,
    pub gpu_util_sum: f64,
    /// Minutes' samples with DCGM's DRAM activity (MIG bandwidth saturation reads it).
    pub dram_active_n: i32,
    pub dram_active_sum: f64,
}

/// One tenant's minute rollups on one GPU, ordered by minute: only the minutes in which it ran
/// a kernel (a missing minute reads as idle).
#[derive(Debug, Clone, Default)]
pub struct TenantMinutes {
    pub cluster: String,
    pub gpu: String,
    pub tenant: String,
    pub minutes: Vec<TenantMinute>,
}

/// What interference reads of a tenant's minute: its activity and rate.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TenantMinute {
    pub bucket: i64,
    pub samples: i32,
    pub active_n: i32,
    pub sm_util_n: i32,
    pub sm_util_sum: f64,
    pub alloc_n: i32,
    pub alloc_share_sum: f64,
    pub eff_n: i32,
    pub eff_sum: f64,
}

/// One GPU-hour of one victim–aggressor pair on a shared GPU: the victim's rate in the minutes
/// the aggressor was idle (alone) and in those it was busy while the device was saturated
/// (contended). Sums, so hours add up to any range.
#[derive(Debug, Clone, PartialEq)]
pub struct PairHour {
    pub cluster: String,
    pub node: String,
    pub gpu: String,
    pub victim: String,
    pub aggressor: String,
    pub hour: i64,
    pub alone_n: u32,
    pub alone_sum: f64,
    pub contended_n: u32,
    pub contended_sum: f64,
    /// The first and last contended minute's start (ms); meaningless when `contended_n` is 0.
    pub contended_first: i64,
    pub contended_last: i64,
}

/// Under what a node-hour's pair-hours were measured: they are reused only while the mark's
/// text (thresholds and the node's MIG GPUs) and the node's hour rollups (their sample counts)
/// are the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairHourMark {
    pub hour_ms: i64,
    /// [`PairThresholds::mark`]: what the pair-hours were measured under.
    pub thresholds: String,
    /// Sum of the samples of the node's GPU-hour rows of that hour.
    pub gpu_samples: i64,
    /// Sum of the samples of the node's tenant-hour rows of that hour.
    pub tenant_samples: i64,
}

/// When a device counts as saturated in a minute: its mean utilization (NVML) reaches
/// `saturation`; on MIG, its mean DRAM activity (DCGM) reaches `mig_bandwidth_saturation`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairThresholds {
    pub saturation: f64,
    pub mig_bandwidth_saturation: f64,
}

impl Default for PairThresholds {
    fn default() -> Self {
        PairThresholds {
            saturation: 0.9,
            mig_bandwidth_saturation: 0.8,
        }
    }
}

impl PairThresholds {
    /// The mark of pair-hours measured under these thresholds on a node whose GPUs in MIG mode
    /// are `mig` (a GPU's mode decides which signal saturates it). The leading version changes
    /// whenever what [`measure_pair_hours`] measures does, so hours kept by an older gpulens
    /// are measured again.
    pub fn mark<'a>(&self, mig: impl IntoIterator<Item = &'a str>) -> String {
        let mut uuids: Vec<&str> = mig.into_iter().collect();
        uuids.sort_unstable();
        uuids.dedup();
        let thresholds = format!(
            "v1,saturation={},mig_bandwidth_saturation={}",
            self.saturation, self.mig_bandwidth_saturation
        );
        if uuids.is_empty() {
            // As marks read before the MIG GPUs were part of them: kept sums stay valid.
            return thresholds;
        }
        // FNV-1a over the sorted UUIDs: stable across processes and builds.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in uuids.join(",").bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        format!("{thresholds},mig={h:016x}")
    }
}

/// Readings are stored as 32-bit floats: NVML's 90 % comes back as 0.8999999761581421. A
/// threshold is reached within this much, far below one percent point (NVML's resolution)
/// and far above the rounding of a mean of f32 readings.
const SENSOR_TOLERANCE: f64 = 1e-6;

/// Whether `value`, a reading or a mean of readings, reaches `threshold` at the sensor's
/// resolution.
pub fn reaches(value: f64, threshold: f64) -> bool {
    value >= threshold - SENSOR_TOLERANCE
}

fn saturated_minute(a: &DeviceMinute, mig: bool, t: &PairThresholds) -> Option<bool> {
    if mig {
        (a.dram_active_n > 0).then(|| {
            reaches(
                a.dram_active_sum / f64::from(a.dram_active_n),
                t.mig_bandwidth_saturation,
            )
        })
    } else {
        (a.gpu_util_n > 0).then(|| reaches(a.gpu_util_sum / f64::from(a.gpu_util_n), t.saturation))
    }
}

/// The tenant's rate in a minute: its processes' share of SM time (NVML), or on MIG its
/// instance's SM activity (DCGM). None when it ran no kernel for most of the minute.
fn rate(a: &TenantMinute) -> Option<f64> {
    if a.samples == 0 || a.active_n * 2 < a.samples {
        return None;
    }
    if a.sm_util_n > 0 {
        return Some(a.sm_util_sum / f64::from(a.sm_util_n));
    }
    let share = if a.alloc_n > 0 {
        a.alloc_share_sum / f64::from(a.alloc_n)
    } else {
        0.0
    };
    (a.eff_n > 0 && share > 0.0).then(|| a.eff_sum / f64::from(a.eff_n) / share)
}

fn busy(a: Option<&TenantMinute>) -> bool {
    a.is_some_and(|a| a.samples > 0 && a.active_n * 2 >= a.samples)
}

fn idle(a: Option<&TenantMinute>) -> bool {
    a.is_none_or(|a| a.active_n == 0)
}

/// A tenant's row for a minute, if it ran a kernel then.
fn at(series: &TenantMinutes, bucket: i64) -> Option<&TenantMinute> {
    series
        .minutes
        .binary_search_by_key(&bucket, |m| m.bucket)
        .ok()
        .map(|i| &series.minutes[i])
}

/// Pair-hours of the minutes given: for each pair of tenants with minutes on a GPU, the
/// victim's rate in the minutes the aggressor was idle and in those it was busy while the
/// device was saturated. `mig` says whether a GPU is in MIG mode. Pairs with nothing measured
/// in an hour are left out.
pub fn measure_pair_hours(
    devices: &[DeviceMinutes],
    tenants: &[TenantMinutes],
    mig: &dyn Fn(&str) -> bool,
    t: &PairThresholds,
) -> Vec<PairHour> {
    let mut on: HashMap<(&str, &str), Vec<&TenantMinutes>> = HashMap::new();
    for s in tenants {
        on.entry((&s.cluster, &s.gpu)).or_default().push(s);
    }
    let mut out = Vec::new();
    for device in devices {
        let Some(on_gpu) = on.get(&(device.cluster.as_str(), device.gpu.as_str())) else {
            continue;
        };
        let is_mig = mig(&device.gpu);
        for victim in on_gpu {
            for aggressor in on_gpu {
                if victim.tenant != aggressor.tenant {
                    out.extend(one_pair(device, victim, aggressor, is_mig, t));
                }
            }
        }
    }
    out
}

/// One ordered pair's hours on one device.
fn one_pair(
    device: &DeviceMinutes,
    victim: &TenantMinutes,
    aggressor: &TenantMinutes,
    is_mig: bool,
    t: &PairThresholds,
) -> impl Iterator<Item = PairHour> {
    let mut hours: BTreeMap<i64, PairHour> = BTreeMap::new();
    for minute in &device.minutes {
        let bucket = minute.bucket;
        let Some(r) = at(victim, bucket).and_then(rate) else {
            continue;
        };
        let a = at(aggressor, bucket);
        let contended = if idle(a) {
            false
        } else if busy(a) && saturated_minute(minute, is_mig, t) == Some(true) {
            true
        } else {
            continue;
        };
        let hour = bucket - bucket.rem_euclid(HOUR_MS);
        let h = hours.entry(hour).or_insert_with(|| PairHour {
            cluster: device.cluster.clone(),
            node: device.node.clone(),
            gpu: device.gpu.clone(),
            victim: victim.tenant.clone(),
            aggressor: aggressor.tenant.clone(),
            hour,
            alone_n: 0,
            alone_sum: 0.0,
            contended_n: 0,
            contended_sum: 0.0,
            contended_first: i64::MAX,
            contended_last: i64::MIN,
        });
        if contended {
            h.contended_n += 1;
            h.contended_sum += r;
            h.contended_first = h.contended_first.min(bucket);
            h.contended_last = h.contended_last.max(bucket);
        } else {
            h.alone_n += 1;
            h.alone_sum += r;
        }
    }
    hours.into_values()
}

/// A node's pair-hours measured from its minute rollups `minutes`, and a mark (text `mark`)
/// for each hour of `hours` (their hour rollups) in which two or more tenants were on one GPU
/// — the only hours that can have pair-hours. What the rollup keeps as it merges an hour.
pub fn node_pair_hours(
    cluster: &str,
    node: &str,
    minutes: &NodeRollup,
    hours: &NodeRollup,
    mig: &dyn Fn(&str) -> bool,
    t: &PairThresholds,
    mark: &str,
) -> (Vec<PairHour>, Vec<PairHourMark>) {
    let shared = shared_hours(hours);
    if shared.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let mut devices: BTreeMap<&str, DeviceMinutes> = BTreeMap::new();
    for ((gpu, bucket), a) in &minutes.gpus {
        let d = devices.entry(gpu).or_insert_with(|| DeviceMinutes {
            cluster: cluster.into(),
            node: node.into(),
            gpu: gpu.clone(),
            minutes: Vec::new(),
        });
        d.minutes.push(DeviceMinute {
            bucket: *bucket,
            gpu_util_n: a.gpu_util.n,
            gpu_util_sum: a.gpu_util.sum,
            dram_active_n: a.ratios.get(Ratio::DramActive).n,
            dram_active_sum: a.ratios.get(Ratio::DramActive).sum,
        });
    }
    // As the store reads them for the analysis: only the minutes in which a tenant ran a
    // kernel (a missing minute reads as idle).
    let mut tenants: BTreeMap<(&str, &str), TenantMinutes> = BTreeMap::new();
    for ((gpu, tenant, bucket), a) in minutes.tenants.iter().filter(|(_, a)| a.active_n > 0) {
        let s = tenants
            .entry((gpu, tenant))
            .or_insert_with(|| TenantMinutes {
                cluster: cluster.into(),
                gpu: gpu.clone(),
                tenant: tenant.clone(),
                minutes: Vec::new(),
            });
        s.minutes.push(TenantMinute {
            bucket: *bucket,
            samples: a.samples,
            active_n: a.active_n,
            sm_util_n: a.sm_util.n,
            sm_util_sum: a.sm_util.sum,
            alloc_n: a.alloc_n,
            alloc_share_sum: a.alloc_share_sum,
            eff_n: a.eff_n,
            eff_sum: a.eff_sum,
        });
    }
    let devices: Vec<DeviceMinutes> = devices.into_values().collect();
    let tenants: Vec<TenantMinutes> = tenants.into_values().collect();
    let rows = measure_pair_hours(&devices, &tenants, mig, t);
    let marks = shared
        .into_iter()
        .map(|(hour_ms, (gpu_samples, tenant_samples))| PairHourMark {
            hour_ms,
            thresholds: mark.to_owned(),
            gpu_samples,
            tenant_samples,
        })
        .collect();
    (rows, marks)
}

/// Whether two or more tenants were on one GPU in `hours`, a node's rollups of one hour (keys
/// are in (GPU, tenant, hour) order): the hours whose pair-hours the rollup keeps.
pub fn shares_a_gpu(hours: &NodeRollup) -> bool {
    let keys = hours.tenants.keys();
    keys.clone().zip(keys.skip(1)).any(|(a, b)| a.0 == b.0)
}

/// The hours of `hours` in which some GPU had two or more tenants, with the hour's sample
/// counts over the node's GPU rows and tenant rows (what a mark records).
fn shared_hours(hours: &NodeRollup) -> BTreeMap<i64, (i64, i64)> {
    let mut tenants_on: HashMap<(&str, i64), u32> = HashMap::new();
    for (gpu, _, hour) in hours.tenants.keys() {
        *tenants_on.entry((gpu, *hour)).or_default() += 1;
    }
    let mut shared: BTreeMap<i64, (i64, i64)> = tenants_on
        .into_iter()
        .filter(|(_, n)| *n >= 2)
        .map(|((_, hour), _)| (hour, (0, 0)))
        .collect();
    for ((_, hour), a) in &hours.gpus {
        if let Some(s) = shared.get_mut(hour) {
            s.0 += i64::from(a.samples);
        }
    }
    for ((_, _, hour), a) in &hours.tenants {
        if let Some(s) = shared.get_mut(hour) {
            s.1 += i64::from(a.samples);
        }
    }
    shared
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An NVML reading of exactly 90 % is stored as an f32 and comes back as
    /// 0.8999999761581421; a minute of it must still count as saturated at 0.9.
    #[test]
    fn saturation_is_met_at_the_sensors_resolution() {
        let t = PairThresholds::default();
        let ninety = f64::from(0.9f32);
        assert!(ninety < 0.9);
        let minute = DeviceMinute {
            bucket: 0,
            gpu_util_n: 60,
            gpu_util_sum: 60.0 * ninety,
            dram_active_n: 0,
            dram_active_sum: 0.0,
        };
        assert_eq!(saturated_minute(&minute, false, &t), Some(true));
        let below = DeviceMinute {
            gpu_util_sum: 60.0 * f64::from(0.89f32),
            ..minute
        };
        assert_eq!(saturated_minute(&below, false, &t), Some(false));
        // On MIG the DRAM activity decides, and a minute without it says nothing.
        assert_eq!(saturated_minute(&minute, true, &t), None);
    }

    /// A mark names the thresholds and the node's MIG GPUs whatever their order; another
    /// threshold or another MIG set is another mark.
    #[test]
    fn marks_change_with_thresholds_and_mig_gpus() {
        let t = PairThresholds::default();
        assert_eq!(t.mark([]), "v1,saturation=0.9,mig_bandwidth_saturation=0.8");
        assert_eq!(t.mark(["GPU-b", "GPU-a"]), t.mark(["GPU-a", "GPU-b"]));
        assert_ne!(t.mark(["GPU-a"]), t.mark(["GPU-b"]));
        assert_ne!(t.mark(["GPU-a"]), t.mark([]));
        let other = PairThresholds {
            saturation: 0.85,
            ..t
        };
        assert_ne!(other.mark([]), t.mark([]));
    }
}
