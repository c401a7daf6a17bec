//! Interference between tenants that share a device (time-slicing, MPS; MIG instances of one
//! GPU through shared memory bandwidth): the victim's rate drops while the aggressor is busy
//! and the device is saturated. Works on minute rollups of the GPUs where it can happen.

use std::collections::{BTreeMap, HashMap};

use model::rollup::{GpuAgg, HOUR_MS, MINUTE_MS};

use crate::config::Config;
use crate::findings::{Ctx, Evidence, Finding, FindingKind, Severity, finding_id, hours};
use crate::input::{DeviceMinute, Input, TenantMinute, TenantMinutes};

/// A GPU and time range whose minute rollups interference detection needs.
#[derive(Debug, Clone, PartialEq)]
pub struct MinuteRange {
    pub cluster: String,
    pub node: String,
    pub gpu: String,
    pub from_ms: i64,
    pub to_ms: i64,
}

/// The GPUs (and ranges) worth a minute-level look: at least one hour in which two tenants ran
/// kernels on the GPU while it was saturated (MIG: while its memory bandwidth was). The range
/// covers every hour with two or more tenants present, so the victim's rate alone is known too.
pub fn minute_ranges(input: &Input, cfg: &Config) -> Vec<MinuteRange> {
    let mig: HashMap<&str, bool> = input
        .gpus
        .iter()
        .map(|g| (g.uuid.as_str(), g.sharing == "mig"))
        .collect();
    // (gpu, hour) → (tenants present, tenants active)
    let mut per: BTreeMap<(&str, &str, &str, i64), (u32, u32)> = BTreeMap::new();
    for r in &input.tenant_hours {
        let e = per
            .entry((&r.cluster, &r.node, &r.gpu, r.bucket))
            .or_default();
        e.0 += 1;
        if r.agg.active_n > 0 {
            e.1 += 1;
        }
    }
    let saturated: HashMap<(&str, i64), bool> = input
        .gpu_hours
        .iter()
        .map(|r| {
            let is_mig = mig.get(r.gpu.as_str()).copied().unwrap_or(false);
            (
                (r.gpu.as_str(), r.bucket),
                saturated_hour(&r.agg, is_mig, cfg),
            )
        })
        .collect();
    let mut out: Vec<MinuteRange> = Vec::new();
    let mut current: Option<(MinuteRange, bool)> = None;
    for ((cluster, node, gpu, hour), (present, active)) in per {
        if present < 2 {
            continue;
        }
        let hot = active >= 2 && saturated.get(&(gpu, hour)).copied().unwrap_or(false);
        match &mut current {
            Some((r, any_hot)) if r.gpu == gpu && r.cluster == cluster => {
                r.to_ms = hour + HOUR_MS;
                *any_hot |= hot;
            }
            _ => {
                if let Some((r, true)) = current.take() {
                    out.push(r);
                }
                current = Some((
                    MinuteRange {
                        cluster: cluster.into(),
                        node: node.into(),
                        gpu: gpu.into(),
                        from_ms: hour,
                        to_ms: hour + HOUR_MS,
                    },
                    hot,
                ));
            }
        }
    }
    if let Some((r, true)) = current {
        out.push(r);
    }
    out
}

/// Readings are stored as 32-bit floats: NVML's 90 % comes back as 0.8999999761581421. A
/// threshold is reached within this much, far below one percent point (NVML's resolution)
/// and far above the rounding of a mean of f32 readings.
const SENSOR_TOLERANCE: f64 = 1e-6;

/// Whether `value`, a reading or a mean of readings, reaches `threshold` at the sensor's
/// resolution.
fn reaches(value: f64, threshold: f64) -> bool {
    value >= threshold - SENSOR_TOLERANCE
}

fn saturated_hour(a: &GpuAgg, mig: bool, cfg: &Config) -> bool {
    if mig {
        a.dram_active_n > 0
            && reaches(
                a.dram_active_sum / f64::from(a.dram_active_n),
                cfg.mig_bandwidth_saturation * 0.5,
            )
    } else {
        a.gpu_util_max
            .is_some_and(|m| reaches(f64::from(m), cfg.saturation))
    }
}

fn saturated_minute(a: &DeviceMinute, mig: bool, cfg: &Config) -> Option<bool> {
    if mig {
        (a.dram_active_n > 0).then(|| {
            reaches(
                a.dram_active_sum / f64::from(a.dram_active_n),
                cfg.mig_bandwidth_saturation,
            )
        })
    } else {
        (a.gpu_util_n > 0)
            .then(|| reaches(a.gpu_util_sum / f64::from(a.gpu_util_n), cfg.saturation))
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

/// Interference findings from the input's minute rollups.
pub fn interference(ctx: &Ctx) -> Vec<Finding> {
    let cfg = ctx.cfg;
    let input = ctx.input;
    let mut tenants: HashMap<(&str, &str), Vec<&TenantMinutes>> = HashMap::new();
    for t in &input.tenant_minutes {
        tenants.entry((&t.cluster, &t.gpu)).or_default().push(t);
    }
    for list in tenants.values_mut() {
        list.sort_by(|a, b| a.tenant.cmp(&b.tenant));
    }
    let mut devices: Vec<_> = input.device_minutes.iter().collect();
    devices.sort_by(|a, b| (&a.cluster, &a.node, &a.gpu).cmp(&(&b.cluster, &b.node, &b.gpu)));
    let mut out = Vec::new();
    for device in devices {
        let (cluster, node, gpu) = (
            device.cluster.as_str(),
            device.node.as_str(),
            device.gpu.as_str(),
        );
        let is_mig = ctx.gpu(gpu).is_some_and(|g| g.sharing == "mig");
        let Some(on_gpu) = tenants.get(&(cluster, gpu)) else {
            continue;
        };
        for v_rows in on_gpu {
            let victim = v_rows.tenant.as_str();
            for a_rows in on_gpu {
                let aggressor = a_rows.tenant.as_str();
                if victim == aggressor {
                    continue;
                }
                let mut alone = Vec::new();
                let mut contended = Vec::new();
                for minute in &device.minutes {
                    let bucket = minute.bucket;
                    let Some(r) = at(v_rows, bucket).and_then(rate) else {
                        continue;
                    };
                    let a = at(a_rows, bucket);
                    if idle(a) {
                        alone.push(r);
                    } else if busy(a) && saturated_minute(minute, is_mig, cfg) == Some(true) {
                        contended.push((bucket, r));
                    }
                }
                let min = (cfg.interference_min.as_secs() / 60) as usize;
                if alone.len() < min || contended.len() < min {
                    continue;
                }
                let alone_rate = alone.iter().sum::<f64>() / alone.len() as f64;
                let hit_rate = contended.iter().map(|c| c.1).sum::<f64>() / contended.len() as f64;
                if alone_rate <= 0.0 {
                    continue;
                }
                let drop = 1.0 - hit_rate / alone_rate;
                if drop < cfg.interference_min_drop {
                    continue;
                }
                let contended_s = contended.len() as f64 * 60.0;
                // Rate-hours the victim lost, in units of its own rate alone.
                let score = drop * contended_s / 3600.0;
                let (from, to) = (contended[0].0, contended[contended.len() - 1].0 + MINUTE_MS);
                let (vn, an) = (ctx.name(cluster, victim), ctx.name(cluster, aggressor));
                let severity = if drop >= 0.35 && contended_s >= 4.0 * 3600.0 {
                    Severity::Critical
                } else if contended_s >= 3600.0 {
                    Severity::Warning
                } else {
                    Severity::Info
                };
                let what = if is_mig {
                    "its memory bandwidth was saturated"
                } else {
                    "the GPU was saturated"
                };
                out.push(Finding {
                    id: finding_id(FindingKind::Interference, &format!("{gpu}/{victim}/{aggressor}"), from),
                    kind: FindingKind::Interference,
                    severity,
                    cluster: cluster.into(),
                    node: node.into(),
                    gpu: Some(gpu.into()),
                    tenants: vec![victim.into(), aggressor.into()],
                    team: ctx.team(cluster, victim),
                    from_ms: from,
                    to_ms: to,
                    signal: if is_mig { "DCGM sm_active per MIG instance, dram_active" } else { "NVML process SM time, gpu_util" }.into(),
                    reason: None,
                    summary: format!(
                        "{vn} ran {:.0}% slower (SM share {:.2} → {:.2}) during {} while {an} was busy and {what} on {}; victim {vn}, aggressor {an}, score {score:.1}",
                        drop * 100.0,
                        alone_rate,
                        hit_rate,
                        hours(contended_s),
                        ctx.gpu_label(gpu)
                    ),
                    metrics: BTreeMap::from([
                        ("rate_drop".into(), drop),
                        ("victim_rate_alone".into(), alone_rate),
                        ("victim_rate_contended".into(), hit_rate),
                        ("contended_hours".into(), contended_s / 3600.0),
                        ("alone_hours".into(), alone.len() as f64 / 60.0),
                        ("score".into(), score),
                    ]),
                    evidence: vec![
                        Evidence::tenant(format!("victim {vn}: SM time"), "sm_util", cluster, victim, from, to),
                        Evidence::tenant(format!("aggressor {an}: SM time"), "sm_util", cluster, aggressor, from, to),
                        Evidence::new("GPU utilization", "gpu_util", format!("gpu:{gpu}"), from, to),
                    ],
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 22: an NVML reading of exactly 90 % is stored as an f32 and comes back as
    /// 0.8999999761581421; it must still count as saturated at the default 0.9.
    #[test]
    fn thresholds_are_met_at_the_sensors_resolution() {
        let cfg = Config::default();
        let ninety = f64::from(0.9f32);
        assert!(ninety < 0.9);
        let hour = GpuAgg {
            gpu_util_max: Some(0.9f32),
            ..GpuAgg::default()
        };
        assert!(saturated_hour(&hour, false, &cfg));
        let minute = DeviceMinute {
            bucket: 0,
            gpu_util_n: 60,
            gpu_util_sum: 60.0 * ninety,
            dram_active_n: 0,
            dram_active_sum: 0.0,
        };
        assert_eq!(saturated_minute(&minute, false, &cfg), Some(true));
        // One percent point below is not saturated.
        let below = DeviceMinute {
            gpu_util_sum: 60.0 * f64::from(0.89f32),
            ..minute
        };
        assert_eq!(saturated_minute(&below, false, &cfg), Some(false));
    }
}
