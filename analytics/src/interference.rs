//! Interference between tenants that share a device (time-slicing, MPS; MIG instances of one
//! GPU through shared memory bandwidth): the victim's rate drops while the aggressor is busy
//! and the device is saturated. Works on minute rollups of the GPUs where it can happen.

use crate::measure::Measure;
use model::inventory::Sharing;
use std::collections::{BTreeMap, HashMap};

use model::hour_series::{GpuHour, GpuSeries};
use model::pair_hours::{PairThresholds, reaches};
use model::rollup::{HOUR_MS, MINUTE_MS};

use crate::config::Config;
use crate::findings::{Ctx, Evidence, Finding, FindingKind, Severity, finding_id};
use crate::input::Input;

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
        .map(|g| (g.uuid.as_str(), g.sharing == Sharing::Mig))
        .collect();
    // One GPU at a time, in key order: its tenants' series side by side, its own series found
    // by key (a fleet's GPU-hours are never indexed all at once).
    let tenants = in_key_order(&input.tenant_hours, |s| [&s.cluster, &s.node, &s.gpu]);
    let gpus = in_key_order(&input.gpu_hours, |s| [&s.cluster, &s.node, &s.gpu]);
    let mut out = Vec::new();
    for gpu in
        tenants.chunk_by(|a, b| (&a.cluster, &a.node, &a.gpu) == (&b.cluster, &b.node, &b.gpu))
    {
        let (cluster, node, uuid) = (&gpu[0].cluster, &gpu[0].node, &gpu[0].gpu);
        // hour → (tenants present, tenants active)
        let mut per: BTreeMap<i64, (u32, u32)> = BTreeMap::new();
        for s in gpu {
            for (hour, agg) in &s.hours {
                let e = per.entry(*hour).or_default();
                e.0 += 1;
                if agg.active_n > 0 {
                    e.1 += 1;
                }
            }
        }
        let first = gpus.partition_point(|g| (&g.cluster, &g.node, &g.gpu) < (cluster, node, uuid));
        let own: Vec<&GpuSeries> = gpus[first..]
            .iter()
            .take_while(|g| (&g.cluster, &g.node, &g.gpu) == (cluster, node, uuid))
            .copied()
            .collect();
        let is_mig = mig.get(uuid.as_str()).copied().unwrap_or(false);
        // Where the GPU has more than one series for an hour, the last one read counts.
        let saturated = |hour: i64| {
            own.iter()
                .rev()
                .find_map(|g| {
                    let at = g.hours.binary_search_by_key(&hour, |(h, _)| *h).ok()?;
                    Some(saturated_hour(&g.hours[at].1, is_mig, cfg))
                })
                .unwrap_or(false)
        };
        // Every hour with two or more tenants present, from the first to the last, worth a
        // look when in one of them two ran kernels on a saturated GPU.
        let shared: Vec<(i64, bool)> = per
            .into_iter()
            .filter(|(_, (present, _))| *present >= 2)
            .map(|(hour, (_, active))| (hour, active >= 2 && saturated(hour)))
            .collect();
        if let (Some(first), Some(last)) = (shared.first(), shared.last())
            && shared.iter().any(|(_, hot)| *hot)
        {
            out.push(MinuteRange {
                cluster: cluster.clone(),
                node: node.clone(),
                gpu: uuid.clone(),
                from_ms: first.0,
                to_ms: last.0 + HOUR_MS,
            });
        }
    }
    out
}

/// References to `series` ordered by `key` (stable: series of one key keep their order).
/// Series the store reads are in key order already, and that is checked first.
fn in_key_order<S>(series: &[S], key: impl Fn(&S) -> [&String; 3]) -> Vec<&S> {
    let mut refs: Vec<&S> = series.iter().collect();
    if !refs.is_sorted_by(|a, b| key(a) <= key(b)) {
        refs.sort_by(|a, b| key(a).cmp(&key(b)));
    }
    refs
}

fn saturated_hour(a: &GpuHour, mig: bool, cfg: &Config) -> bool {
    if mig {
        a.dram_active
            .mean()
            .is_some_and(|m| reaches(m, cfg.mig_bandwidth_saturation * 0.5))
    } else {
        a.gpu_util_max
            .is_some_and(|m| reaches(f64::from(m), cfg.saturation))
    }
}

/// The thresholds pair-hours are measured with, from the analysis' settings.
pub fn pair_thresholds(cfg: &Config) -> PairThresholds {
    PairThresholds {
        saturation: cfg.saturation,
        mig_bandwidth_saturation: cfg.mig_bandwidth_saturation,
    }
}

/// A pair's measurements summed over the hours of the window.
#[derive(Default)]
struct PairSums {
    alone_n: usize,
    alone_sum: f64,
    contended_n: usize,
    contended_sum: f64,
    first: i64,
    last: i64,
}

/// Interference findings from the input's pair-hours (see [`pair_hours`]).
pub fn interference(ctx: &Ctx) -> Vec<Finding> {
    // Ordered as findings are listed: by GPU, then victim, then aggressor.
    let mut pairs: BTreeMap<(&str, &str, &str, &str, &str), PairSums> = BTreeMap::new();
    for h in &ctx.input.pair_hours {
        let key = (
            h.cluster.as_str(),
            h.node.as_str(),
            h.gpu.as_str(),
            h.victim.as_str(),
            h.aggressor.as_str(),
        );
        let p = pairs.entry(key).or_insert_with(|| PairSums {
            first: i64::MAX,
            last: i64::MIN,
            ..PairSums::default()
        });
        p.alone_n += h.alone_n as usize;
        p.alone_sum += h.alone_sum;
        p.contended_n += h.contended_n as usize;
        p.contended_sum += h.contended_sum;
        if h.contended_n > 0 {
            p.first = p.first.min(h.contended_first);
            p.last = p.last.max(h.contended_last);
        }
    }
    pairs
        .into_iter()
        .filter_map(|(key, p)| finding(ctx, key, &p))
        .collect()
}

/// The finding of one pair, when the victim's rate dropped enough for long enough.
fn finding(
    ctx: &Ctx,
    (cluster, node, gpu, victim, aggressor): (&str, &str, &str, &str, &str),
    p: &PairSums,
) -> Option<Finding> {
    let cfg = ctx.cfg;
    let is_mig = ctx.gpu(gpu).is_some_and(|g| g.sharing == Sharing::Mig);
    let min = (cfg.interference_min.as_secs() / 60) as usize;
    // Both rates need a minute at least, whatever `interference_min` is set to.
    if p.alone_n < min.max(1) || p.contended_n < min.max(1) {
        return None;
    }
    let alone_rate = p.alone_sum / p.alone_n as f64;
    let hit_rate = p.contended_sum / p.contended_n as f64;
    if alone_rate <= 0.0 {
        return None;
    }
    let drop = 1.0 - hit_rate / alone_rate;
    if drop < cfg.interference_min_drop {
        return None;
    }
    let contended_s = p.contended_n as f64 * 60.0;
    // Rate-hours the victim lost, in units of its own rate alone.
    let score = drop * contended_s / 3600.0;
    let (from, to) = (p.first, p.last + MINUTE_MS);
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
    Some(Finding {
        id: finding_id(
            FindingKind::Interference,
            &format!("{gpu}/{victim}/{aggressor}"),
            from,
        ),
        kind: FindingKind::Interference,
        severity,
        cluster: cluster.into(),
        node: node.into(),
        gpu: Some(gpu.into()),
        tenants: vec![victim.into(), aggressor.into()],
        team: ctx.team(cluster, victim),
        pool: None,
        from_ms: from,
        to_ms: to,
        signal: if is_mig {
            "DCGM sm_active per MIG instance, dram_active"
        } else {
            "NVML process SM time, gpu_util"
        }
        .into(),
        reason: None,
        summary: format!(
            "{vn} ran {:.0} % slower (SM share {:.2} → {:.2}) during {} while {an} was busy and {what} on {}; victim {vn}, aggressor {an}, score {score:.1}",
            drop * 100.0,
            alone_rate,
            hit_rate,
            crate::finding::contended_hours(contended_s / 3600.0),
            ctx.gpu_label(gpu)
        ),
        metrics: BTreeMap::from([
            (Measure::RateDrop, drop),
            (Measure::VictimRateAlone, alone_rate),
            (Measure::VictimRateContended, hit_rate),
            (Measure::ContendedHours, contended_s / 3600.0),
            (Measure::AloneHours, p.alone_n as f64 / 60.0),
            (Measure::Score, score),
        ]),
        evidence: vec![
            Evidence::tenant(
                format!("victim {vn}: SM time"),
                "sm_util",
                cluster,
                victim,
                from,
                to,
            ),
            Evidence::tenant(
                format!("aggressor {an}: SM time"),
                "sm_util",
                cluster,
                aggressor,
                from,
                to,
            ),
            Evidence::new(
                "GPU utilization",
                "gpu_util",
                format!("gpu:{gpu}"),
                from,
                to,
            ),
        ],
        demand_hours: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::PairHour;
    use model::pair_hours::{DeviceMinute, DeviceMinutes, TenantMinute, TenantMinutes};

    fn pair_hours(
        devices: &[DeviceMinutes],
        tenants: &[TenantMinutes],
        mig: &dyn Fn(&str) -> bool,
        cfg: &Config,
    ) -> Vec<PairHour> {
        model::pair_hours::measure_pair_hours(devices, tenants, mig, &pair_thresholds(cfg))
    }

    /// An NVML reading of exactly 90 % is stored as an f32 and comes back as
    /// 0.8999999761581421; it must still count as saturated at the default 0.9.
    #[test]
    fn thresholds_are_met_at_the_sensors_resolution() {
        let cfg = Config::default();
        let ninety = f64::from(0.9f32);
        assert!(ninety < 0.9);
        let hour = GpuHour {
            gpu_util_max: Some(0.9f32),
            ..GpuHour::default()
        };
        assert!(saturated_hour(&hour, false, &cfg));
        let below = GpuHour {
            gpu_util_max: Some(0.89f32),
            ..hour
        };
        assert!(!saturated_hour(&below, false, &cfg));
    }

    fn device(minutes: impl Iterator<Item = i64>) -> DeviceMinutes {
        DeviceMinutes {
            cluster: "c".into(),
            node: "n".into(),
            gpu: "GPU-1".into(),
            minutes: minutes
                .map(|bucket| DeviceMinute {
                    bucket,
                    gpu_util_n: 60,
                    gpu_util_sum: 60.0 * 0.95,
                    ..DeviceMinute::default()
                })
                .collect(),
        }
    }

    /// `tenant` ran at `rate` in each minute `busy` says.
    fn tenant(
        name: &str,
        range: std::ops::Range<i64>,
        busy: impl Fn(i64) -> Option<f64>,
    ) -> TenantMinutes {
        TenantMinutes {
            cluster: "c".into(),
            gpu: "GPU-1".into(),
            tenant: name.into(),
            minutes: range
                .filter_map(|m| {
                    let rate = busy(m)?;
                    Some(TenantMinute {
                        bucket: m * MINUTE_MS,
                        samples: 60,
                        active_n: 60,
                        sm_util_n: 60,
                        sm_util_sum: 60.0 * rate,
                        ..TenantMinute::default()
                    })
                })
                .collect(),
        }
    }

    /// Which GPUs interference wants minutes of: from the first to the last hour two tenants
    /// were on a GPU, when in one of them two ran kernels while it was saturated; the same
    /// ranges whatever order the series come in.
    #[test]
    fn minute_ranges_cover_shared_hours_of_gpus_that_were_hot_together() {
        use model::hour_series::{GpuSeries, TenantHour, TenantSeries};
        let h = HOUR_MS;
        let gpu = |uuid: &str, hot: &[i64]| GpuSeries {
            cluster: "c".into(),
            node: "n".into(),
            gpu: uuid.into(),
            hours: (0..6)
                .map(|i| {
                    let util = if hot.contains(&i) { 1.0 } else { 0.3 };
                    (
                        i * h,
                        GpuHour {
                            gpu_util_max: Some(util),
                            ..GpuHour::default()
                        },
                    )
                })
                .collect(),
        };
        let tenant = |uuid: &str, name: &str, hours: std::ops::Range<i64>| TenantSeries {
            cluster: "c".into(),
            node: "n".into(),
            gpu: uuid.into(),
            tenant: name.into(),
            hours: hours
                .map(|i| {
                    let busy = TenantHour {
                        samples: 60,
                        active_n: 60,
                        ..TenantHour::default()
                    };
                    (i * h, busy)
                })
                .collect(),
            ..TenantSeries::default()
        };
        let mut input = Input {
            gpu_hours: vec![
                // Shared from hour 1 to 4, saturated in hour 2: wanted.
                gpu("GPU-a", &[2]),
                // Shared but never saturated while shared: not wanted.
                gpu("GPU-b", &[5]),
                // One tenant only, saturated: not wanted.
                gpu("GPU-c", &[0, 1]),
            ],
            tenant_hours: vec![
                tenant("GPU-a", "t1", 0..5),
                tenant("GPU-a", "t2", 1..4),
                tenant("GPU-b", "t1", 0..3),
                tenant("GPU-b", "t2", 0..3),
                tenant("GPU-c", "t1", 0..6),
            ],
            ..Input::default()
        };
        let cfg = Config::default();
        let want = vec![MinuteRange {
            cluster: "c".into(),
            node: "n".into(),
            gpu: "GPU-a".into(),
            from_ms: h,
            to_ms: 4 * h,
        }];
        assert_eq!(minute_ranges(&input, &cfg), want);
        input.gpu_hours.reverse();
        input.tenant_hours.reverse();
        assert_eq!(minute_ranges(&input, &cfg), want);
    }

    /// A victim at 0.8 alone and 0.4 beside a busy aggressor over three hours: the pair-hours
    /// of each hour read on its own are those of the three read at once (so hours can be
    /// measured as they close), and they make one finding of a 50 % drop.
    #[test]
    fn pair_hours_add_up_across_hours_to_the_finding() {
        let cfg = Config::default();
        let minutes = 0..180;
        // The aggressor runs in the second half of every hour.
        let aggressor_busy = |m: i64| (m % 60 >= 30).then_some(0.5);
        let victim = tenant("v", minutes.clone(), |m| {
            Some(if m % 60 >= 30 { 0.4 } else { 0.8 })
        });
        let aggressor = tenant("a", minutes.clone(), aggressor_busy);
        let no_mig = |_: &str| false;
        let all = pair_hours(
            &[device(minutes.clone().map(|m| m * MINUTE_MS))],
            &[victim.clone(), aggressor.clone()],
            &no_mig,
            &cfg,
        );
        let mut by_hour = Vec::new();
        for h in 0..3 {
            let hour = h * 60..h * 60 + 60;
            let slice = |t: &TenantMinutes| TenantMinutes {
                minutes: t
                    .minutes
                    .iter()
                    .filter(|m| hour.contains(&(m.bucket / MINUTE_MS)))
                    .copied()
                    .collect(),
                ..t.clone()
            };
            by_hour.extend(pair_hours(
                &[device(hour.clone().map(|m| m * MINUTE_MS))],
                &[slice(&victim), slice(&aggressor)],
                &no_mig,
                &cfg,
            ));
        }
        by_hour.sort_by(|a, b| (&a.victim, a.hour).cmp(&(&b.victim, b.hour)));
        let mut all_sorted = all.clone();
        all_sorted.sort_by(|a, b| (&a.victim, a.hour).cmp(&(&b.victim, b.hour)));
        assert_eq!(by_hour, all_sorted);
        let v = all.iter().filter(|p| p.victim == "v").collect::<Vec<_>>();
        assert_eq!(v.len(), 3, "one row per hour");
        assert!(v.iter().all(|p| p.alone_n == 30 && p.contended_n == 30));
        let input = Input {
            gpus: vec![],
            pair_hours: all,
            ..Input::default()
        };
        let found = interference(&Ctx::new(&input, &cfg));
        assert_eq!(found.len(), 1, "the aggressor is never slowed: {found:?}");
        let f = &found[0];
        assert_eq!(f.tenants, vec!["v".to_owned(), "a".to_owned()]);
        assert!(
            (f.metrics[&Measure::RateDrop] - 0.5).abs() < 1e-9,
            "{:?}",
            f.metrics
        );
        assert_eq!(f.metrics[&Measure::ContendedHours], 1.5);
        assert_eq!((f.from_ms, f.to_ms), (30 * MINUTE_MS, 180 * MINUTE_MS));
        // With no least duration, a pair never seen alone (the aggressor) is still no finding.
        let cfg = Config {
            interference_min: std::time::Duration::ZERO,
            ..Config::default()
        };
        let found = interference(&Ctx::new(&input, &cfg));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].metrics.values().all(|v| v.is_finite()));
    }
}
