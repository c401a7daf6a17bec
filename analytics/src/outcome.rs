//! The outcome check: after an approved step was applied (its GPU Operator label changed), each
//! later analysis measures what happened to the tenants the step moved and compares it with
//! what replay predicted — GPUs freed, contended tenant-hours, memory that no longer fits, and
//! each tenant's effective use and memory before and after. The verdict is `pending` until
//! enough hours were recorded after the change, then `as_predicted`, `better` or `worse`; a
//! worse outcome becomes an `outcome_worse` finding. Rules in docs/analytics.md.
//!
//! Tenants are followed by *workload*, not by tenant key: a moved pod comes back as a new pod
//! (new UID, usually a new generated name), a Slurm user's next job has a new id.

use crate::measure::Measure;
use model::inventory::Sharing;
use std::collections::{BTreeMap, BTreeSet};

use model::figures::count;
use model::rollup::HOUR_MS;
use serde::{Deserialize, Serialize};

use crate::findings::{Ctx, Evidence, Finding, FindingKind, Severity, finding_id};
use crate::holdings::{Holding, RowHours};
use crate::recommendation::Target;
use crate::replay;

pub use crate::input::Applied;
pub use model::step_outcome::Verdict;

/// Predicted and measured totals of one step.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Totals {
    pub gpus_freed: f64,
    /// Contended tenant-hours over the hours measured after the change (the prediction is the
    /// replay's rate scaled to those hours).
    pub contention_hours: f64,
    /// Tenant-hours whose memory did not fit (no prediction other than zero is ever approved).
    pub memory_overflow_hours: f64,
}

/// One workload the step moved, before and after.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TenantOutcome {
    /// The workload: `namespace/pod-name-without-generated-suffix/container`, `jobs of user`,
    /// or the tenant's name.
    pub workload: String,
    /// The tenant key the step moved, and the keys the workload ran under after the change.
    pub tenant: String,
    pub tenants_after: Vec<String>,
    /// The GPUs (UUIDs) it held after the change.
    #[serde(default)]
    pub gpus_after: Vec<String>,
    /// Where the step put it.
    pub target: Option<Target>,
    /// Mean effective use per hour with demand (GPU-equivalents), before and after.
    pub effective_before: Option<f64>,
    pub effective_after: Option<f64>,
    /// Peak memory before and after.
    pub memory_before_bytes: Option<i64>,
    pub memory_after_bytes: Option<i64>,
    /// Hours with demand after the change, of them contended, and with memory that did not fit.
    pub hours_after: usize,
    pub contended_hours_after: usize,
    pub overflow_hours_after: usize,
}

/// The check of one applied step.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Outcome {
    pub action: i64,
    /// The recommendation's id and kind when it was approved.
    pub recommendation: String,
    pub kind: String,
    pub cluster: String,
    pub node: String,
    pub summary: String,
    pub applied_ms: i64,
    /// Hours measured after the change (the most any moved workload has).
    pub hours_after: usize,
    pub verdict: Verdict,
    /// Why the verdict, in sentences (empty for `as_predicted` and `pending`).
    pub reasons: Vec<String>,
    pub predicted: Totals,
    pub measured: Totals,
    pub tenants: Vec<TenantOutcome>,
}

/// The least hours with demand after a change before a verdict is given.
pub const MIN_HOURS_AFTER: usize = 6;
/// A freed-GPU count this far below (above) the prediction is worse (better).
const FREED_SLACK: f64 = 0.5;

/// The workload a tenant belongs to, from its kind and display name: a pod's name loses the
/// suffixes Kubernetes generates (the ReplicaSet's pod-template hash and the 5-character
/// random part: `api-7d9f8b6c5d-x2kqp` → `api`), a Slurm job becomes its user's jobs.
pub fn workload(kind: &str, name: &str) -> String {
    match kind {
        "pod" => {
            let mut parts: Vec<&str> = name.split('/').collect();
            if parts.len() == 3 {
                parts[1] = pod_base(parts[1]);
            }
            parts.join("/")
        }
        "slurm_job" => match name.rsplit_once(" (") {
            Some((_, user)) => format!("jobs of {}", user.trim_end_matches(')')),
            None => name.to_owned(),
        },
        _ => name.to_owned(),
    }
}

/// The characters Kubernetes uses for generated name suffixes (no vowels, no confusable digits).
fn generated(s: &str, lens: std::ops::RangeInclusive<usize>) -> bool {
    lens.contains(&s.len())
        && s.bytes()
            .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
}

fn pod_base(pod: &str) -> &str {
    let Some((rest, last)) = pod.rsplit_once('-') else {
        return pod;
    };
    if !generated(last, 5..=5) {
        return pod;
    }
    match rest.rsplit_once('-') {
        Some((base, hash)) if generated(hash, 6..=10) => base,
        _ => rest,
    }
}

/// One hour of a workload: summed over its holdings in that hour.
#[derive(Debug, Clone, Default)]
struct Hour {
    effective: f64,
    eff_p95: f64,
    mem_max: Option<i64>,
    in_demand: bool,
    gpus: BTreeSet<String>,
    /// Compute of the device it ran on: its slice for MIG, else the whole GPU.
    compute: f64,
}

/// Checks every applied step against the hours recorded since.
pub fn check(ctx: &Ctx, holdings: &[Holding]) -> Vec<Outcome> {
    let input = ctx.input;
    if input.applied.is_empty() {
        return Vec::new();
    }
    let kind_name: BTreeMap<(&str, &str), (&str, &str)> = input
        .tenants
        .iter()
        .map(|t| {
            (
                (t.cluster.as_str(), t.key.as_str()),
                (t.kind.as_str(), t.name.as_str()),
            )
        })
        .collect();
    let workload_of = |cluster: &str, key: &str| {
        kind_name
            .get(&(cluster, key))
            .map_or_else(|| key.to_owned(), |(k, n)| workload(k, n))
    };
    // Per GPU and hour: summed p95 demand and peak memory of every tenant on it.
    let mut device: BTreeMap<(&str, i64), (f64, i64)> = BTreeMap::new();
    for h in holdings {
        for u in h.hours().filter(|u| u.in_demand()) {
            let e = device.entry((h.gpu.as_str(), u.hour)).or_default();
            e.0 += u.eff_p95.unwrap_or(0.0);
            e.1 += u.mem_max_bytes.unwrap_or(0);
        }
    }
    // Each holding's workload, computed once: (cluster, workload) → holdings.
    let mut by_workload: BTreeMap<(&str, String), Vec<&Holding>> = BTreeMap::new();
    for h in holdings {
        by_workload
            .entry((h.cluster.as_str(), workload_of(&h.cluster, &h.tenant)))
            .or_default()
            .push(h);
    }
    let last_hour = holdings
        .iter()
        .filter_map(|h| h.rows.last().map(|r| r.0))
        .max();
    input
        .applied
        .iter()
        .map(|a| {
            let found = |key: &str| {
                let wl = workload_of(&a.recommendation.cluster, key);
                let hs = by_workload
                    .get(&(a.recommendation.cluster.as_str(), wl.clone()))
                    .map_or(&[][..], Vec::as_slice);
                (wl, hs)
            };
            check_one(ctx, a, &found, &device, last_hour)
        })
        .collect()
}

fn check_one<'a>(
    ctx: &Ctx,
    a: &Applied,
    found: &dyn Fn(&str) -> (String, &'a [&'a Holding]),
    device: &BTreeMap<(&str, i64), (f64, i64)>,
    last_hour: Option<i64>,
) -> Outcome {
    let r = &a.recommendation;
    let before_end = a.started_ms.div_euclid(HOUR_MS) * HOUR_MS;
    let after_start = (a.applied_ms + HOUR_MS - 1).div_euclid(HOUR_MS) * HOUR_MS;
    let moved: BTreeMap<&str, Option<&Target>> = r
        .tenants
        .iter()
        .map(|t| (t.as_str(), None))
        .chain(
            r.moves()
                .iter()
                .map(|m| (m.tenant.as_str(), Some(&m.target))),
        )
        .collect();
    let mut tenants = Vec::new();
    let mut gpus_before: BTreeSet<String> = BTreeSet::new();
    let mut gpus_after: BTreeSet<String> = BTreeSet::new();
    let last_hour = last_hour.unwrap_or(after_start);
    for (key, target) in moved {
        let (wl, workload_holdings) = found(key);
        let (hours, keys_after, gpus_of_workload) =
            workload_hours(ctx, workload_holdings, after_start);
        let before: Vec<(&i64, &Hour)> = hours
            .range(..before_end)
            .filter(|(_, u)| u.in_demand)
            .collect();
        let after: Vec<(&i64, &Hour)> = hours
            .range(after_start..)
            .filter(|(_, u)| u.in_demand)
            .collect();
        // The GPUs it held in the last two hours before, and in the last two recorded.
        for (hour, u) in &before {
            if **hour >= before_end - 2 * HOUR_MS {
                gpus_before.extend(u.gpus.iter().cloned());
            }
        }
        for (hour, u) in &after {
            if **hour >= last_hour - HOUR_MS {
                gpus_after.extend(u.gpus.iter().cloned());
            }
        }
        let mean = |hs: &[(&i64, &Hour)]| {
            (!hs.is_empty())
                .then(|| hs.iter().map(|(_, u)| u.effective).sum::<f64>() / hs.len() as f64)
        };
        let peak = |hs: &[(&i64, &Hour)]| hs.iter().filter_map(|(_, u)| u.mem_max).max();
        let (contended, overflow) = after_harm(ctx, &after, target, device);
        tenants.push(TenantOutcome {
            workload: wl,
            tenant: key.to_owned(),
            tenants_after: keys_after.into_iter().collect(),
            gpus_after: gpus_of_workload.into_iter().collect(),
            target: target.cloned(),
            effective_before: mean(&before),
            effective_after: mean(&after),
            memory_before_bytes: peak(&before),
            memory_after_bytes: peak(&after),
            hours_after: after.len(),
            contended_hours_after: contended,
            overflow_hours_after: overflow,
        });
    }
    let hours_after = tenants.iter().map(|t| t.hours_after).max().unwrap_or(0);
    let tenant_hours: usize = tenants.iter().map(|t| t.hours_after).sum();
    let rate = if r.replay.hours > 0 && !tenants.is_empty() {
        r.replay.contention_hours_after / (r.replay.hours * tenants.len()) as f64
    } else {
        0.0
    };
    let predicted = Totals {
        gpus_freed: r.replay.gpus_freed,
        contention_hours: rate * tenant_hours as f64,
        memory_overflow_hours: 0.0,
    };
    let measured = Totals {
        gpus_freed: gpus_before.len() as f64 - gpus_after.len() as f64,
        contention_hours: tenants.iter().map(|t| t.contended_hours_after as f64).sum(),
        memory_overflow_hours: tenants.iter().map(|t| t.overflow_hours_after as f64).sum(),
    };
    let (verdict, reasons) = verdict(ctx, after_start, &tenants, &predicted, &measured);
    Outcome {
        action: a.action,
        recommendation: r.id.clone(),
        kind: r.kind.as_str().into(),
        cluster: r.cluster.clone(),
        node: r.node.clone(),
        summary: r.summary.clone(),
        applied_ms: a.applied_ms,
        hours_after,
        verdict,
        reasons,
        predicted,
        measured,
        tenants,
    }
}

/// A workload's hours (over all its holdings), the tenant keys it ran under after the change
/// and the GPUs it held then.
fn workload_hours(
    ctx: &Ctx,
    workload_holdings: &[&Holding],
    after_start: i64,
) -> (BTreeMap<i64, Hour>, BTreeSet<String>, BTreeSet<String>) {
    let mut keys_after = BTreeSet::new();
    let mut gpus_of_workload = BTreeSet::new();
    let mut hours: BTreeMap<i64, Hour> = BTreeMap::new();
    for h in workload_holdings {
        let mig = ctx.gpu(&h.gpu).is_some_and(|g| g.sharing == Sharing::Mig);
        for ((hour, agg), u) in h.rows.iter().zip(h.hours()) {
            let e = hours.entry(*hour).or_default();
            // A MIG instance's compute is its slice (this hour's allocated share).
            let compute = if mig && agg.alloc_n > 0 {
                (agg.alloc_share_sum / f64::from(agg.alloc_n)).clamp(1.0 / 7.0, 1.0)
            } else {
                1.0
            };
            e.effective += RowHours::of(agg).used;
            e.eff_p95 += u.eff_p95.unwrap_or(0.0);
            e.mem_max = e.mem_max.max(u.mem_max_bytes);
            e.in_demand |= u.in_demand();
            if u.allocated {
                e.gpus.insert(h.gpu.clone());
            }
            e.compute = compute;
            if *hour >= after_start && u.in_demand() {
                keys_after.insert(h.tenant.clone());
                if u.allocated {
                    gpus_of_workload.insert(h.gpu.clone());
                }
            }
        }
    }
    (hours, keys_after, gpus_of_workload)
}

/// Of a workload's hours after the change, those contended and those whose memory did not fit.
fn after_harm(
    ctx: &Ctx,
    after: &[(&i64, &Hour)],
    target: Option<&Target>,
    device: &BTreeMap<(&str, i64), (f64, i64)>,
) -> (usize, usize) {
    let cfg = ctx.cfg;
    let mig_memory = match target {
        Some(Target::Mig { memory_gib, .. }) => Some(memory_gib * (1u64 << 30) as f64),
        _ => None,
    };
    let mut contended = 0;
    let mut overflow = 0;
    for (hour, u) in after {
        let gpu_total = u
            .gpus
            .iter()
            .filter_map(|g| ctx.gpu(g))
            .map(|g| g.memory_total_bytes as f64)
            .fold(f64::INFINITY, f64::min);
        if u.compute < 1.0 {
            // A MIG instance is its own device.
            if u.eff_p95 >= cfg.saturation * u.compute {
                contended += 1;
            }
            let limit = mig_memory.unwrap_or(gpu_total * u.compute);
            if u.mem_max
                .is_some_and(|m| m as f64 >= cfg.memory_pressure * limit)
            {
                overflow += 1;
            }
        } else {
            let (demand, mem) = u.gpus.iter().fold((0.0f64, 0i64), |acc, g| {
                let d = device
                    .get(&(g.as_str(), **hour))
                    .copied()
                    .unwrap_or_default();
                (acc.0.max(d.0), acc.1.max(d.1))
            });
            if demand >= cfg.saturation {
                contended += 1;
            }
            if (mem as f64) >= cfg.memory_pressure * gpu_total {
                overflow += 1;
            }
        }
    }
    (contended, overflow)
}

/// The verdict and its reasons: pending until enough hours are measured after the change.
fn verdict(
    ctx: &Ctx,
    after_start: i64,
    tenants: &[TenantOutcome],
    predicted: &Totals,
    measured: &Totals,
) -> (Verdict, Vec<String>) {
    let hours_after = tenants.iter().map(|t| t.hours_after).max().unwrap_or(0);
    if hours_after < MIN_HOURS_AFTER {
        let since = (ctx.input.to_ms - after_start).max(0) / HOUR_MS;
        let why = if hours_after == 0 && since as usize >= MIN_HOURS_AFTER {
            vec![format!(
                "none of the moved workloads ran in the {since} hours since the change: nothing to measure"
            )]
        } else {
            Vec::new()
        };
        (Verdict::Pending, why)
    } else {
        judge(ctx, tenants, predicted, measured)
    }
}

/// The verdict once enough hours are in: worse on any harm the replay did not predict (a
/// workload contended in more hours than replay's rate plus its tolerance, memory that no
/// longer fits, fewer GPUs freed); better on more GPUs freed or less contention than
/// predicted; otherwise as predicted.
fn judge(
    ctx: &Ctx,
    tenants: &[TenantOutcome],
    predicted: &Totals,
    measured: &Totals,
) -> (Verdict, Vec<String>) {
    let tenant_hours: usize = tenants.iter().map(|t| t.hours_after).sum();
    let per_tenant_rate = predicted.contention_hours / tenant_hours.max(1) as f64;
    let mut worse = Vec::new();
    for t in tenants {
        let allowed = per_tenant_rate * t.hours_after as f64
            + replay::allowed(ctx.cfg.replay_tolerance, t.hours_after);
        if t.contended_hours_after as f64 > allowed {
            let eff = match (t.effective_before, t.effective_after) {
                (Some(b), Some(a)) => {
                    format!("; its effective use went from {:.2} to {:.2} GPU", b, a)
                }
                _ => String::new(),
            };
            worse.push(format!(
                "{} was contended in {} of {} hours after the change (replay allowed {:.0}){eff}",
                t.workload,
                t.contended_hours_after,
                t.hours_after,
                allowed.floor()
            ));
        }
        if t.overflow_hours_after > 0 {
            worse.push(format!(
                "{}'s memory did not fit in {} of {} hours after the change (peak {:.1} GiB, {:.1} GiB before)",
                t.workload,
                t.overflow_hours_after,
                t.hours_after,
                t.memory_after_bytes.unwrap_or(0) as f64 / (1u64 << 30) as f64,
                t.memory_before_bytes.unwrap_or(0) as f64 / (1u64 << 30) as f64,
            ));
        }
    }
    if measured.gpus_freed < predicted.gpus_freed - FREED_SLACK {
        worse.push(format!(
            "{} freed, {:.0} predicted",
            count(measured.gpus_freed.max(0.0), "GPU", "GPUs"),
            predicted.gpus_freed
        ));
    }
    if !worse.is_empty() {
        return (Verdict::Worse, worse);
    }
    let mut better = Vec::new();
    if measured.gpus_freed > predicted.gpus_freed + FREED_SLACK {
        better.push(format!(
            "{} freed, {:.0} predicted",
            count(measured.gpus_freed, "GPU", "GPUs"),
            predicted.gpus_freed
        ));
    }
    if predicted.contention_hours >= 1.0
        && measured.contention_hours < predicted.contention_hours - 1.0
    {
        better.push(format!(
            "{}, {:.0} predicted",
            count(
                measured.contention_hours,
                "contended tenant-hour",
                "contended tenant-hours"
            ),
            predicted.contention_hours
        ));
    }
    if better.is_empty() {
        (Verdict::AsPredicted, Vec::new())
    } else {
        (Verdict::Better, better)
    }
}

/// An `outcome_worse` finding for each worse outcome: what was measured, and the way back.
pub fn findings(ctx: &Ctx, outcomes: &[Outcome]) -> Vec<Finding> {
    outcomes
        .iter()
        .filter(|o| o.verdict == Verdict::Worse)
        .map(|o| {
            let to = ctx.input.to_ms;
            let tenants: Vec<String> = o.tenants.iter().map(|t| t.tenant.clone()).collect();
            // The series that show the harm: the GPUs the workloads shared after the change
            // (saturation) and each workload's memory there.
            let gpus: BTreeSet<&String> = o.tenants.iter().flat_map(|t| &t.gpus_after).collect();
            let evidence = gpus
                .into_iter()
                .take(4)
                .map(|g| {
                    let metric = match ctx.gpu(g) {
                        Some(r) if r.sharing == Sharing::Mig => "sm_active",
                        _ => "gpu_util",
                    };
                    Evidence::new(
                        "GPU utilization after the change",
                        metric,
                        format!("gpu:{g}"),
                        o.applied_ms,
                        to,
                    )
                })
                .chain(o.tenants.iter().filter_map(|t| t.tenants_after.first()).take(4).map(
                    |key| {
                        Evidence::tenant(
                            "tenant memory after the change",
                            "mem_used_bytes",
                            &o.cluster,
                            key,
                            o.applied_ms,
                            to,
                        )
                    },
                ))
                .collect();
            Finding {
                id: finding_id(FindingKind::OutcomeWorse, &o.action.to_string(), o.applied_ms),
                kind: FindingKind::OutcomeWorse,
                severity: Severity::Warning,
                cluster: o.cluster.clone(),
                node: o.node.clone(),
                gpu: None,
                team: tenants.first().and_then(|t| ctx.team(&o.cluster, t)),
                pool: None,
                tenants,
                from_ms: o.applied_ms,
                to_ms: to,
                signal: "outcome_check".into(),
                reason: None,
                summary: format!(
                    "the {} change on {} (label action {}) turned out worse than replay predicted: {}; offer: roll it back",
                    o.kind,
                    o.node,
                    o.action,
                    o.reasons.join("; ")
                ),
                metrics: BTreeMap::from([
                    (Measure::Action, o.action as f64),
                    (Measure::HoursAfter, o.hours_after as f64),
                    (Measure::GpusFreedPredicted, o.predicted.gpus_freed),
                    (Measure::GpusFreedMeasured, o.measured.gpus_freed),
                    (Measure::ContentionHoursPredicted, o.predicted.contention_hours),
                    (Measure::ContentionHoursMeasured, o.measured.contention_hours),
                    (Measure::MemoryOverflowHours, o.measured.memory_overflow_hours),
                ]),
                evidence,
                demand_hours: Vec::new(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::input::Input;

    fn tenant(contended: usize, overflow: usize) -> TenantOutcome {
        TenantOutcome {
            workload: "web/api/main".into(),
            tenant: "pod/u1/main".into(),
            tenants_after: vec!["pod/u2/main".into()],
            gpus_after: vec!["GPU-1".into()],
            target: None,
            effective_before: Some(0.2),
            effective_after: Some(0.2),
            memory_before_bytes: Some(1 << 30),
            memory_after_bytes: Some(1 << 30),
            hours_after: 12,
            contended_hours_after: contended,
            overflow_hours_after: overflow,
        }
    }

    fn totals(freed: f64, contention: f64) -> Totals {
        Totals {
            gpus_freed: freed,
            contention_hours: contention,
            memory_overflow_hours: 0.0,
        }
    }

    #[test]
    fn verdicts_follow_the_documented_rules() {
        let (input, cfg) = (Input::default(), Config::default());
        let ctx = Ctx::new(&input, &cfg);
        let v = |ts: &[TenantOutcome], p: Totals, m: Totals| judge(&ctx, ts, &p, &m).0;
        // Replay's tolerance: one contended hour of twelve is within it, two are not.
        assert_eq!(
            v(&[tenant(1, 0)], totals(1.0, 0.0), totals(1.0, 1.0)),
            Verdict::AsPredicted
        );
        assert_eq!(
            v(&[tenant(2, 0)], totals(1.0, 0.0), totals(1.0, 2.0)),
            Verdict::Worse
        );
        // Contention replay predicted is not held against the step …
        assert_eq!(
            v(&[tenant(4, 0)], totals(1.0, 4.0), totals(1.0, 4.0)),
            Verdict::AsPredicted
        );
        // … and less of it than predicted is better.
        assert_eq!(
            v(&[tenant(0, 0)], totals(1.0, 4.0), totals(1.0, 0.0)),
            Verdict::Better
        );
        // Memory that no longer fits, or GPUs not freed, make it worse; more freed is better.
        assert_eq!(
            v(&[tenant(0, 1)], totals(1.0, 0.0), totals(1.0, 0.0)),
            Verdict::Worse
        );
        assert_eq!(
            v(&[tenant(0, 0)], totals(1.0, 0.0), totals(0.0, 0.0)),
            Verdict::Worse
        );
        assert_eq!(
            v(&[tenant(0, 0)], totals(1.0, 0.0), totals(2.0, 0.0)),
            Verdict::Better
        );
    }

    #[test]
    fn workloads_drop_generated_pod_suffixes_only() {
        assert_eq!(
            workload("pod", "web/api-7d9f8b6c5d-x2kqp/main"),
            "web/api/main"
        );
        assert_eq!(workload("pod", "web/api-x2kqp/main"), "web/api/main");
        // StatefulSet ordinals and plain names stay.
        assert_eq!(workload("pod", "db/pg-0/main"), "db/pg-0/main");
        assert_eq!(workload("pod", "web/api-2/main"), "web/api-2/main");
        // A word that happens to be 5 letters with vowels is not generated.
        assert_eq!(workload("pod", "web/api-model/main"), "web/api-model/main");
        assert_eq!(workload("slurm_job", "job 123 (alice)"), "jobs of alice");
        assert_eq!(workload("host_user", "bob (uid 1000)"), "bob (uid 1000)");
    }
}
