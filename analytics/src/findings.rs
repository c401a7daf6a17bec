//! Findings: what is wrong, for whom, where, since when, how bad, on which signal, and the
//! series that show it. Definitions and thresholds are in docs/analytics.md.

use crate::measure::Measure;
use std::collections::{BTreeMap, HashMap};

use model::figures::count;
use model::hour_series::GpuHour;
use model::rollup::HOUR_MS;

use crate::config::Config;
use crate::holdings::{Holding, idle_runs};
use crate::input::{GpuRef, Input};

pub use crate::finding::{
    DemandHour, Evidence, Finding, FindingKind, GIB, Severity, finding_id, gib, hours, stable_id,
    tenths,
};

/// Context the finding rules share.
pub struct Ctx<'a> {
    pub input: &'a Input,
    pub cfg: &'a Config,
    pub names: HashMap<(&'a str, &'a str), (&'a str, Option<&'a str>)>,
    pub gpus: HashMap<&'a str, &'a GpuRef>,
    /// Per cluster, a matcher of its tenant keys and the keys (built on first use).
    keys: std::sync::OnceLock<HashMap<String, (aho_corasick::AhoCorasick, Vec<String>)>>,
}

impl<'a> Ctx<'a> {
    pub fn new(input: &'a Input, cfg: &'a Config) -> Ctx<'a> {
        Ctx {
            input,
            cfg,
            names: input
                .tenants
                .iter()
                .map(|t| {
                    (
                        (t.cluster.as_str(), t.key.as_str()),
                        (t.name.as_str(), t.team.as_deref()),
                    )
                })
                .collect(),
            gpus: input.gpus.iter().map(|g| (g.uuid.as_str(), g)).collect(),
            keys: std::sync::OnceLock::new(),
        }
    }

    /// The tenant keys of `cluster` that occur in `text`, overlapping ones included.
    fn keys_in(&self, cluster: &str, text: &str) -> Vec<&str> {
        let by_cluster = self.keys.get_or_init(|| {
            let mut keys: HashMap<String, Vec<String>> = HashMap::new();
            for &(c, key) in self.names.keys() {
                keys.entry(c.to_owned()).or_default().push(key.to_owned());
            }
            keys.into_iter()
                .filter_map(|(c, keys)| {
                    let m = aho_corasick::AhoCorasick::new(&keys).ok()?;
                    Some((c, (m, keys)))
                })
                .collect()
        });
        let Some((matcher, keys)) = by_cluster.get(cluster) else {
            return Vec::new();
        };
        let mut found: Vec<&str> = matcher
            .find_overlapping_iter(text)
            .map(|m| keys[m.pattern().as_usize()].as_str())
            .collect();
        found.sort_unstable();
        found.dedup();
        found
    }

    pub fn gpu(&self, uuid: &str) -> Option<&'a GpuRef> {
        self.gpus.get(uuid).copied()
    }

    pub fn name(&self, cluster: &str, tenant: &str) -> String {
        self.names
            .get(&(cluster, tenant))
            .map_or_else(|| tenant.to_owned(), |n| n.0.to_owned())
    }

    /// `text` with every tenant key of `cluster` it mentions replaced by the tenant's name
    /// (a replay's reason names tenants by key).
    pub fn with_names(&self, cluster: &str, text: &str) -> String {
        let mut keys: Vec<(&str, &str)> = self
            .keys_in(cluster, text)
            .into_iter()
            .filter_map(|key| Some((key, self.names.get(&(cluster, key))?.0)))
            .collect();
        // Longer keys first, so a key that contains another is replaced whole.
        keys.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
        keys.iter()
            .fold(text.to_owned(), |t, (key, name)| t.replace(key, name))
    }

    pub fn team(&self, cluster: &str, tenant: &str) -> Option<String> {
        self.names
            .get(&(cluster, tenant))
            .and_then(|n| n.1.map(str::to_owned))
    }

    pub fn gpu_label(&self, uuid: &str) -> String {
        match self.gpu(uuid) {
            Some(g) => format!("GPU {} of {}", g.index, g.node),
            None => uuid.to_owned(),
        }
    }
}

/// idle_allocation: allocated, no kernel for at least `idle_min` (memory may be held).
pub fn idle_allocation(ctx: &Ctx, h: &Holding) -> Option<Finding> {
    let min_s = ctx.cfg.idle_min.as_secs_f64();
    let runs = idle_runs(&h.rows, HOUR_MS, min_s);
    if runs.is_empty() {
        return None;
    }
    let longest = runs.iter().map(|r| r.seconds()).fold(0.0, f64::max);
    let idle_in_runs: f64 = runs.iter().map(|r| r.seconds()).sum();
    let ratio = h.idle_ratio();
    let severity = if ratio >= 0.9 || longest >= 86_400.0 {
        Severity::Critical
    } else if longest >= 4.0 * 3600.0 {
        Severity::Warning
    } else {
        Severity::Info
    };
    let name = ctx.name(&h.cluster, &h.tenant);
    let (from, to) = (runs[0].from_ms, runs[runs.len() - 1].to_ms);
    let mem = h.mem_p99().map(|b| gib(b as f64));
    let mut metrics = BTreeMap::from([
        (Measure::IdleRuns, runs.len() as f64),
        (Measure::LongestIdleHours, longest / 3600.0),
        // The newest run: how long the holding has been idle now when the finding is ongoing
        // (what a reclaim policy's `min_idle` is held against).
        (
            Measure::LastIdleRunHours,
            runs[runs.len() - 1].seconds() / 3600.0,
        ),
        (Measure::IdleHoursInRuns, idle_in_runs / 3600.0),
        (Measure::IdleShareOfAllocation, ratio),
        (Measure::AllocatedGpuHours, h.allocated_hours()),
    ]);
    if let Some(m) = mem {
        metrics.insert(Measure::MemoryHeldGibP99, m);
    }
    Some(Finding {
        id: finding_id(
            FindingKind::IdleAllocation,
            &format!("{}/{}", h.gpu, h.tenant),
            from,
        ),
        kind: FindingKind::IdleAllocation,
        severity,
        cluster: h.cluster.clone(),
        node: h.node.clone(),
        gpu: Some(h.gpu.clone()),
        tenants: vec![h.tenant.clone()],
        team: ctx.team(&h.cluster, &h.tenant),
        pool: None,
        from_ms: from,
        to_ms: to,
        signal: "kernel activity (process SM time, gpu_util or DCGM sm_active)".into(),
        reason: None,
        summary: format!(
            "{name} held {} with no kernel for {} in {} of at least {} (longest {}); idle {:.0} % of its allocated time{}",
            ctx.gpu_label(&h.gpu),
            hours(idle_in_runs),
            count(runs.len() as f64, "run", "runs"),
            hours(min_s),
            hours(longest),
            ratio * 100.0,
            mem.map(|m| format!(", holding {m:.1} GiB"))
                .unwrap_or_default()
        ),
        metrics,
        evidence: vec![
            activity_evidence(h, from, to),
            Evidence::tenant(
                "tenant memory",
                "mem_used_bytes",
                &h.cluster,
                &h.tenant,
                from,
                to,
            ),
            Evidence::tenant(
                "allocated share",
                "alloc_share",
                &h.cluster,
                &h.tenant,
                from,
                to,
            ),
        ],
        demand_hours: Vec::new(),
    })
}

/// The series that shows a holding's activity as the analysis measured it: for a whole GPU,
/// the GPU's NVML utilization or DCGM SM activity when that was the signal; for a share of
/// one, the effective use attributed to the tenant; the tenant's own SM time (NVML process
/// accounting) otherwise.
pub fn activity_evidence(h: &Holding, from: i64, to: i64) -> Evidence {
    let gpu = format!("gpu:{}", h.gpu);
    // A GPU's own series speaks for its holder only when the holder has the whole GPU: on a
    // MIG instance or a time-sliced share it carries the other tenants' work too, so the use
    // attributed to the tenant is what shows it.
    let signal = h.signal();
    if !h.whole_gpu() && signal != "none" {
        return Evidence::tenant(
            "effective use attributed to it (the signal used)",
            "effective",
            &h.cluster,
            &h.tenant,
            from,
            to,
        );
    }
    match signal {
        "gpu_util" => Evidence::new(
            "GPU utilization (NVML, the signal used)",
            "gpu_util",
            gpu,
            from,
            to,
        ),
        "sm_active" => Evidence::new(
            "GPU SM activity (DCGM, the signal used)",
            "sm_active",
            gpu,
            from,
            to,
        ),
        _ => Evidence::tenant("tenant SM time", "sm_util", &h.cluster, &h.tenant, from, to),
    }
}

/// zombie_process: GPU memory held by a process no tenant owns, for at least `zombie_min`.
pub fn zombies(ctx: &Ctx) -> Vec<Finding> {
    ctx.input
        .orphans
        .iter()
        .filter(|o| (o.last_seen_ms - o.first_seen_ms) as f64 / 1000.0 >= ctx.cfg.zombie_min.as_secs_f64())
        .filter(|o| o.mem_max_bytes > 0)
        .map(|o| {
            let secs = (o.last_seen_ms - o.first_seen_ms) as f64 / 1000.0;
            Finding {
                id: finding_id(FindingKind::ZombieProcess, &format!("{}/{}/{}", o.gpu, o.pid, o.start_time_ms), o.first_seen_ms),
                kind: FindingKind::ZombieProcess,
                severity: if gib(o.mem_max_bytes as f64) >= 4.0 { Severity::Warning } else { Severity::Info },
                cluster: o.cluster.clone(),
                node: o.node.clone(),
                gpu: Some(o.gpu.clone()),
                tenants: vec![],
                team: None,
                pool: None,
                from_ms: o.first_seen_ms,
                to_ms: o.last_seen_ms,
                signal: "process memory without a tenant".into(),
                reason: None,
                summary: format!(
                    "process {} on {} held {:.1} GiB for {} and belongs to no pod, job or user the agent can find",
                    o.pid,
                    ctx.gpu_label(&o.gpu),
                    gib(o.mem_max_bytes as f64),
                    hours(secs)
                ),
                metrics: BTreeMap::from([
                    (Measure::Pid, o.pid as f64),
                    (Measure::MemoryGib, gib(o.mem_max_bytes as f64)),
                    (Measure::Hours, secs / 3600.0),
                ]),
                evidence: vec![Evidence::new("GPU memory used", "mem_used_bytes", format!("gpu:{}", o.gpu), o.first_seen_ms, o.last_seen_ms)],
                demand_hours: Vec::new(),
            }
        })
        .collect()
}

/// One GPU's hours: (hour start, rollup).
type HourRow = (i64, GpuHour);

/// GPU-hours grouped per (cluster, node, GPU) in time order.
fn gpu_hours_by_gpu(input: &Input) -> BTreeMap<(&str, &str, &str), Vec<&HourRow>> {
    let mut by: BTreeMap<(&str, &str, &str), Vec<&HourRow>> = BTreeMap::new();
    for s in &input.gpu_hours {
        by.entry((&s.cluster, &s.node, &s.gpu))
            .or_default()
            .extend(s.hours.iter());
    }
    for v in by.values_mut() {
        v.sort_by_key(|r| r.0);
    }
    by
}

/// Tenants that held or used a GPU in [from, to), of the GPU's holdings `on_gpu`.
fn tenants_in(on_gpu: &[&Holding], from: i64, to: i64) -> Vec<String> {
    let mut t: Vec<String> = on_gpu
        .iter()
        .filter(|h| h.rows.iter().any(|(hour, _)| *hour >= from && *hour < to))
        .map(|h| h.tenant.clone())
        .collect();
    t.sort();
    t.dedup();
    t
}

/// A GPU whose hours a rule flagged in at least `pressure_min_hours` hours.
struct Flagged<'a> {
    cluster: &'a str,
    node: &'a str,
    gpu: &'a str,
    rows: Vec<&'a HourRow>,
    /// Flagged hours, and the span from the first of them to the end of the last.
    hours: usize,
    from: i64,
    to: i64,
    /// Tenants on the GPU during the span, and their names.
    tenants: Vec<String>,
    names: Vec<String>,
}

fn flagged<'a>(
    ctx: &Ctx<'a>,
    holdings: &[Holding],
    pred: impl Fn(&GpuHour) -> bool,
) -> Vec<Flagged<'a>> {
    let mut out = Vec::new();
    let mut by_gpu: HashMap<&str, Vec<&Holding>> = HashMap::new();
    for h in holdings {
        by_gpu.entry(h.gpu.as_str()).or_default().push(h);
    }
    for ((cluster, node, gpu), rows) in gpu_hours_by_gpu(ctx.input) {
        let hit: Vec<i64> = rows.iter().filter(|r| pred(&r.1)).map(|r| r.0).collect();
        let (Some(&from), Some(&last)) = (hit.first(), hit.last()) else {
            continue;
        };
        if (hit.len() as f64) < ctx.cfg.pressure_min_hours {
            continue;
        }
        let to = last + HOUR_MS;
        let tenants = tenants_in(by_gpu.get(gpu).map_or(&[], Vec::as_slice), from, to);
        let names = tenants.iter().map(|t| ctx.name(cluster, t)).collect();
        out.push(Flagged {
            cluster,
            node,
            gpu,
            rows,
            hours: hit.len(),
            from,
            to,
            tenants,
            names,
        });
    }
    out
}

impl Flagged<'_> {
    /// The finding of `kind` on this GPU over the flagged span: a warning from a day of
    /// flagged hours on, information before.
    fn finding<const N: usize>(
        self,
        kind: FindingKind,
        signal: &str,
        summary: String,
        metrics: [(Measure, f64); N],
        evidence: Vec<Evidence>,
    ) -> Finding {
        Finding {
            id: finding_id(kind, self.gpu, self.from),
            kind,
            severity: if self.hours >= 24 {
                Severity::Warning
            } else {
                Severity::Info
            },
            cluster: self.cluster.into(),
            node: self.node.into(),
            gpu: Some(self.gpu.into()),
            team: None,
            pool: None,
            from_ms: self.from,
            to_ms: self.to,
            signal: signal.into(),
            reason: None,
            summary,
            metrics: metrics.into_iter().collect(),
            evidence,
            tenants: self.tenants,
            demand_hours: Vec::new(),
        }
    }

    /// The GPU's series of `metric` over the flagged span.
    fn evidence(&self, label: &str, metric: &str) -> Evidence {
        Evidence::new(
            label,
            metric,
            format!("gpu:{}", self.gpu),
            self.from,
            self.to,
        )
    }

    /// The tenants' names, or `none` when no tenant is known.
    fn names_or(&self, none: &str) -> String {
        if self.names.is_empty() {
            none.into()
        } else {
            self.names.join(", ")
        }
    }
}

/// memory_pressure: the GPU's memory nearly full (≥ `memory_pressure` of total at peak) for
/// at least `pressure_min_hours` hours.
pub fn memory_pressure(ctx: &Ctx, holdings: &[Holding]) -> Vec<Finding> {
    let full = |a: &GpuHour| match (a.mem_used_max, a.mem_total_max) {
        (Some(u), Some(t)) if t > 0 => u as f64 / t as f64 >= ctx.cfg.memory_pressure,
        _ => false,
    };
    flagged(ctx, holdings, full)
        .into_iter()
        .map(|f| {
            let max = |of: fn(&GpuHour) -> Option<i64>| {
                f.rows.iter().filter_map(|r| of(&r.1)).max().unwrap_or(0)
            };
            let (peak, total) = (max(|h| h.mem_used_max), max(|h| h.mem_total_max));
            let summary = format!(
                "{} peaked at {:.1} of {:.1} GiB in {}; out-of-memory errors are likely for {}",
                ctx.gpu_label(f.gpu),
                gib(peak as f64),
                gib(total as f64),
                count(f.hours as f64, "hour", "hours"),
                f.names_or("its tenants"),
            );
            let metrics = [
                (Measure::HoursAboveThreshold, f.hours as f64),
                (Measure::PeakGib, gib(peak as f64)),
                (Measure::TotalGib, gib(total as f64)),
            ];
            let evidence = vec![f.evidence("GPU memory used", "mem_used_bytes")];
            f.finding(
                FindingKind::MemoryPressure,
                "memory used / total",
                summary,
                metrics,
                evidence,
            )
        })
        .collect()
}

/// throttling: clocks held back by a thermal or power limit in at least `throttle_share` of
/// the samples of `pressure_min_hours` hours; names the tenants busy meanwhile.
pub fn throttling(ctx: &Ctx, holdings: &[Holding]) -> Vec<Finding> {
    let hot = |a: &GpuHour| {
        a.samples > 0 && f64::from(a.throttled_n) / f64::from(a.samples) >= ctx.cfg.throttle_share
    };
    flagged(ctx, holdings, hot)
        .into_iter()
        .map(|f| {
            let temp = f
                .rows
                .iter()
                .filter_map(|r| r.1.temp_max)
                .fold(f32::MIN, f32::max);
            let power = f
                .rows
                .iter()
                .filter_map(|r| r.1.power_max)
                .fold(f32::MIN, f32::max);
            let summary = format!(
                "{} was throttled in {} (peak {temp:.0} °C, {power:.0} W) while {} ran",
                ctx.gpu_label(f.gpu),
                count(f.hours as f64, "hour", "hours"),
                f.names_or("no known tenant"),
            );
            let metrics = [
                (Measure::HoursThrottled, f.hours as f64),
                (Measure::TempMaxC, f64::from(temp)),
                (Measure::PowerMaxW, f64::from(power)),
            ];
            let evidence = vec![
                f.evidence("temperature", "temp_c"),
                f.evidence("power", "power_w"),
            ];
            let signal = "NVML clock-event reasons (thermal, power)";
            f.finding(FindingKind::Throttling, signal, summary, metrics, evidence)
        })
        .collect()
}

/// Why a GPU's hardware errors are unrecovered — the ones that make its hardware finding
/// critical — if they are: XID 48 (DBE), 63/64 (row remapping), 74 (NVLink), 79 (fallen off
/// the bus), 92-95 (ECC), or uncorrected ECC errors. Such a GPU is not counted as freed by
/// the plan: it is the hardware finding's until repaired.
pub fn unrecovered(h: &crate::input::GpuHealth) -> Option<String> {
    let mut codes: Vec<i64> = h
        .xids
        .iter()
        .map(|x| x.1)
        .filter(|c| matches!(c, 48 | 63 | 64 | 74 | 79 | 92 | 94 | 95))
        .collect();
    codes.sort_unstable();
    codes.dedup();
    if !codes.is_empty() {
        let codes: Vec<String> = codes.iter().map(i64::to_string).collect();
        return Some(format!("XID {}", codes.join(", ")));
    }
    h.ecc_uncorrected
        .filter(|&n| n > 0)
        .map(|_| "uncorrected ECC errors".to_owned())
}

/// hardware: XID errors, uncorrected ECC errors, retired pages or remapped rows.
pub fn hardware(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    for h in &ctx.input.health {
        let mut parts = Vec::new();
        let critical = unrecovered(h).is_some();
        if !h.xids.is_empty() {
            let mut codes: Vec<i64> = h.xids.iter().map(|x| x.1).collect();
            codes.sort_unstable();
            codes.dedup();
            let n = count(h.xids.len() as f64, "XID error", "XID errors");
            let codes: Vec<String> = codes.iter().map(i64::to_string).collect();
            let label = if codes.len() == 1 { "code" } else { "codes" };
            parts.push(format!("{n} ({label} {})", codes.join(", ")));
        }
        if let Some(n) = h.ecc_uncorrected.filter(|&n| n > 0) {
            parts.push(count(
                n as f64,
                "uncorrected ECC error",
                "uncorrected ECC errors",
            ));
        }
        if let Some(n) = h.retired_pages.filter(|&n| n > 0) {
            parts.push(count(n as f64, "retired page", "retired pages"));
        }
        if let Some(n) = h.remapped_rows.filter(|&n| n > 0) {
            parts.push(count(n as f64, "remapped row", "remapped rows"));
        }
        if parts.is_empty() {
            continue;
        }
        let from = h
            .xids
            .iter()
            .map(|x| x.0)
            .min()
            .unwrap_or(ctx.input.from_ms);
        let to = h.xids.iter().map(|x| x.0).max().unwrap_or(ctx.input.to_ms);
        out.push(Finding {
            id: finding_id(FindingKind::Hardware, &h.gpu, ctx.input.from_ms),
            kind: FindingKind::Hardware,
            severity: if critical {
                Severity::Critical
            } else {
                Severity::Warning
            },
            cluster: h.cluster.clone(),
            node: h.node.clone(),
            gpu: Some(h.gpu.clone()),
            tenants: vec![],
            team: None,
            pool: None,
            from_ms: from,
            to_ms: to.max(from),
            signal: "XID events, ECC and row-remapping counters".into(),
            reason: None,
            summary: format!("{}: {}", ctx.gpu_label(&h.gpu), parts.join(", ")),
            metrics: BTreeMap::from([
                (Measure::XidErrors, h.xids.len() as f64),
                (
                    Measure::EccUncorrected,
                    h.ecc_uncorrected.unwrap_or(0) as f64,
                ),
                (Measure::RetiredPages, h.retired_pages.unwrap_or(0) as f64),
                (Measure::RemappedRows, h.remapped_rows.unwrap_or(0) as f64),
            ]),
            evidence: vec![Evidence::new(
                "GPU utilization",
                "gpu_util",
                format!("gpu:{}", h.gpu),
                ctx.input.from_ms,
                ctx.input.to_ms,
            )],
            demand_hours: Vec::new(),
        });
    }
    out
}

/// agent_silent: a node whose agent has not reported for `silent_after`.
pub fn agent_silent(ctx: &Ctx) -> Vec<Finding> {
    let limit = ctx.cfg.silent_after.as_millis() as i64;
    ctx.input
        .nodes
        .iter()
        .filter(|n| ctx.input.now_ms - n.last_seen_ms > limit.max(3 * n.interval_ms))
        .map(|n| {
            let silent = (ctx.input.now_ms - n.last_seen_ms) as f64 / 1000.0;
            Finding {
                id: finding_id(FindingKind::AgentSilent, &n.node, n.last_seen_ms),
                kind: FindingKind::AgentSilent,
                severity: if silent >= 3600.0 {
                    Severity::Critical
                } else {
                    Severity::Warning
                },
                cluster: n.cluster.clone(),
                node: n.node.clone(),
                gpu: None,
                tenants: vec![],
                team: None,
                pool: None,
                from_ms: n.last_seen_ms,
                to_ms: ctx.input.now_ms,
                signal: "time since the agent's last batch".into(),
                reason: None,
                summary: format!(
                    "the agent on {} has sent nothing for {}; its GPUs are not being measured",
                    n.node,
                    hours(silent)
                ),
                metrics: BTreeMap::from([(Measure::SilentMinutes, silent / 60.0)]),
                evidence: vec![Evidence::new(
                    "GPU utilization",
                    "gpu_util",
                    format!("node:{}", n.node),
                    n.last_seen_ms - 3_600_000,
                    ctx.input.now_ms,
                )],
                demand_hours: Vec::new(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::activity_evidence;
    use crate::holdings::Holding;
    use model::rollup::TenantAgg;

    fn holding(share: f64, dcgm: bool) -> Holding {
        Holding {
            cluster: "c".into(),
            node: "n".into(),
            gpu: "GPU-1".into(),
            tenant: "pod/a".into(),
            total: TenantAgg {
                alloc_n: 60,
                alloc_share_sum: 60.0 * share,
                eff_n: 60,
                eff_dcgm_n: if dcgm { 60 } else { 0 },
                ..TenantAgg::default()
            },
            rows: Vec::new(),
        }
    }

    /// A whole GPU's own series is its holder's activity; on a MIG instance or a time-sliced
    /// share the GPU's series carries other tenants' work, so the evidence is the tenant's.
    #[test]
    fn a_shared_gpus_holder_is_shown_by_its_own_use() {
        let whole = activity_evidence(&holding(1.0, true), 0, 1);
        assert_eq!(
            (whole.metric.as_str(), whole.entity.as_str()),
            ("sm_active", "gpu:GPU-1")
        );
        let whole = activity_evidence(&holding(1.0, false), 0, 1);
        assert_eq!(
            (whole.metric.as_str(), whole.entity.as_str()),
            ("gpu_util", "gpu:GPU-1")
        );
        for share in [1.0 / 7.0, 0.25] {
            let part = activity_evidence(&holding(share, true), 0, 1);
            assert_eq!(
                (part.metric.as_str(), part.entity.as_str()),
                ("effective", "tenant:pod/a"),
                "{share}"
            );
        }
    }
}
