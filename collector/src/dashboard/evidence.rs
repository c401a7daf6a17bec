//! The evidence a finding's page shows, one view per kind, each drawn to prove the claim:
//! - idle allocation: what the tenant held against the kernel activity attributed to it,
//!   and the memory it kept, in GiB;
//! - interference: the victim's SM time with the aggressor's running hours shaded, and the
//!   victim's hours alone against its hours contended;
//! - hardware: the XID events on the GPU's timeline, each with what to do about it;
//! - underutilized: the tenant's demand against what it holds and the slice the plan
//!   proposes;
//! - waiting demand: the GPUs the team's work waited for against the GPUs of its pool held
//!   idle meanwhile, hour by hour, then the idle holders' activity.

use super::page::*;
use super::series::*;
use analytics::Measure;
use web::chart::{Band, Mark, RefLine};

/// A finding's evidence: charts, tables, and the action to take.
#[derive(Debug, Default)]
pub(super) struct EvidenceView {
    pub charts: Vec<Chart>,
    pub tables: Vec<pages::EvidenceTable>,
    pub action: Option<String>,
}

/// The range an evidence chart covers: [from, to], at least an hour.
fn window(from: i64, to: i64) -> (i64, i64) {
    (from, from + (to - from).max(3_600_000))
}

/// The finding's window as an evidence chart covers it.
fn range(f: &Finding) -> (i64, i64) {
    window(f.from_ms, f.to_ms)
}

/// What the tenant held against the effective use attributed to it, both as a share of the
/// physical GPU, with reference lines (idle and underutilized evidence).
async fn held_and_used(
    state: &DashboardState,
    f: &Finding,
    k: &str,
    title: String,
    refs: Vec<RefLine>,
) -> Chart {
    let r = range(f);
    Chart {
        title,
        unit: "% of the GPU".into(),
        from_ms: r.0,
        to_ms: r.1,
        y_max: Some(100.0),
        lines: vec![
            line(
                "allocated",
                points(state, Metric::AllocShare, tenant(f, k), r, 100.0).await,
            ),
            line(
                format!("effective use ({} attributed to it)", signal_words(f)),
                points(state, Metric::Effective, tenant(f, k), r, 100.0).await,
            ),
        ],
        refs,
        empty_note: "No allocation of this tenant is recorded in the finding's window.".into(),
        ..Chart::default()
    }
}

/// Five-minute points up to two days, hourly beyond.
fn step(from: i64, to: i64) -> i64 {
    if to - from <= 2 * 86_400_000 {
        300_000
    } else {
        3_600_000
    }
}

/// One series over the finding's window, scaled (ratios × 100 for percent, bytes / GiB).
async fn points(
    state: &DashboardState,
    metric: Metric,
    entity: Entity,
    r: (i64, i64),
    scale: f64,
) -> Vec<(i64, Option<f64>)> {
    points_every(state, metric, entity, r, scale, step(r.0, r.1)).await
}

async fn points_every(
    state: &DashboardState,
    metric: Metric,
    entity: Entity,
    (from, to): (i64, i64),
    scale: f64,
    step: i64,
) -> Vec<(i64, Option<f64>)> {
    mean_series(state, metric, entity, from, to, step)
        .await
        .map(|s| {
            s.points
                .into_iter()
                .map(|(t, v)| (t, v.map(|x| x * scale)))
                .collect()
        })
        .unwrap_or_default()
}

fn line(name: impl Into<String>, points: Vec<(i64, Option<f64>)>) -> Line {
    Line {
        name: name.into(),
        points,
    }
}

/// A finding's tenant, in the finding's cluster (the same key can name another cluster's
/// tenant).
fn tenant(f: &Finding, k: &str) -> Entity {
    Entity::TenantIn(f.cluster.clone(), k.to_owned())
}

pub(super) async fn view(state: &DashboardState, a: &Analysis, f: &Finding) -> EvidenceView {
    match f.kind {
        FindingKind::IdleAllocation => idle(state, a, f).await,
        FindingKind::Interference => interference(state, a, f).await,
        FindingKind::Hardware => hardware(state, f).await,
        FindingKind::Underutilized => underutilized(state, a, f).await,
        FindingKind::WaitingDemand => waiting(state, a, f).await,
        _ => generic(state, f).await,
    }
}

/// Idle: the allocation against the kernel activity attributed to the tenant (both as a
/// share of the physical GPU), then the memory it kept.
async fn idle(state: &DashboardState, a: &Analysis, f: &Finding) -> EvidenceView {
    let Some(k) = f.tenants.first() else {
        return generic(state, f).await;
    };
    let who = name_of(a, k);
    let charts = vec![
        held_and_used(
            state,
            f,
            k,
            format!("What {who} held and what it used"),
            Vec::new(),
        )
        .await,
        memory_chart(state, f, k, &who, range(f), None).await,
    ];
    EvidenceView {
        charts,
        action: Some(format!(
            "Ask {who}'s owner{} to release the allocation, or reclaim it (the reclaim step, when the plan has one, is linked below).",
            f.team
                .as_deref()
                .map(|t| format!(" (team {t})"))
                .unwrap_or_default()
        )),
        ..EvidenceView::default()
    }
}

/// The tenant's memory in GiB, with the p99 the finding quotes and, when given, the memory
/// of the slice the plan proposes.
async fn memory_chart(
    state: &DashboardState,
    f: &Finding,
    k: &str,
    who: &str,
    r: (i64, i64),
    slice: Option<(String, f64)>,
) -> Chart {
    let mem = points(state, Metric::MemUsedBytes, tenant(f, k), r, 1.0 / GIB).await;
    let mut refs: Vec<RefLine> = [Measure::MemoryHeldGibP99, Measure::MemoryP99Gib]
        .iter()
        .filter_map(|m| f.metrics.get(m))
        .map(|v| RefLine {
            name: "p99 of hourly peaks".into(),
            value: *v,
        })
        .take(1)
        .collect();
    if let Some((name, gib)) = slice {
        refs.push(RefLine { name, value: gib });
    }
    Chart {
        title: format!("GPU memory held by {who}"),
        unit: "GiB".into(),
        from_ms: r.0,
        to_ms: r.1,
        y_max: None,
        lines: vec![line("memory used", mem)],
        empty_note: "No memory samples of this tenant in the finding's window.".into(),
        refs,
        ..Chart::default()
    }
}

/// The words for the signal a finding's effective use rests on.
fn signal_words(f: &Finding) -> &'static str {
    if f.signal.contains("sm_active") && !f.signal.contains("gpu_util") {
        "DCGM SM activity"
    } else {
        "kernel activity"
    }
}

/// A series value above this counts as "running" when shading an aggressor's hours.
const RUNNING: f64 = 5.0;

/// Interference: the victim's SM time with the aggressor's running periods shaded, the
/// victim's hours alone against contended, then the GPU's utilization.
async fn interference(state: &DashboardState, a: &Analysis, f: &Finding) -> EvidenceView {
    let (Some(victim), Some(aggressor)) = (f.tenants.first(), f.tenants.get(1)) else {
        return generic(state, f).await;
    };
    let r = range(f);
    let (vn, an) = (name_of(a, victim), name_of(a, aggressor));
    // Five-minute points up to eight days: the aggressor's batches are shorter than an hour.
    let st = if r.1 - r.0 <= 8 * 86_400_000 {
        300_000
    } else {
        3_600_000
    };
    let v = points_every(state, Metric::SmUtil, tenant(f, victim), r, 100.0, st).await;
    let g = points_every(state, Metric::SmUtil, tenant(f, aggressor), r, 100.0, st).await;
    let running: BTreeSet<i64> = g
        .iter()
        .filter(|(_, x)| x.is_some_and(|x| x > RUNNING))
        .map(|(t, _)| *t)
        .collect();
    let spans = merge_spans(running.iter().map(|t| (*t, *t + st)));
    let (alone, contended): (Vec<f64>, Vec<f64>) = {
        let mut al = Vec::new();
        let mut co = Vec::new();
        for (t, x) in &v {
            if let Some(x) = x {
                if running.contains(t) {
                    co.push(*x);
                } else {
                    al.push(*x);
                }
            }
        }
        (al, co)
    };
    let per = if st >= 3_600_000 {
        "hour"
    } else {
        "five minutes"
    };
    let dist = |name: &str, xs: &[f64]| -> Vec<String> {
        let q = |p: f64| quantile(xs, p).map_or("–".into(), |v| format!("{v:.0} %"));
        vec![
            name.to_owned(),
            xs.len().to_string(),
            q(0.1),
            q(0.5),
            q(0.9),
        ]
    };
    let table = pages::EvidenceTable {
        caption: format!(
            "{vn}'s SM time per {per}, alone against while {an} ran (the analysis' own rates, read when the GPU was busy, are under Numbers)"
        ),
        headers: vec![
            "Victim's SM time".into(),
            "Points".into(),
            "p10".into(),
            "Median".into(),
            "p90".into(),
        ],
        rows: vec![
            dist("alone", &alone),
            dist(&format!("while {an} ran"), &contended),
        ],
    };
    let mut charts = vec![Chart {
        title: format!("{vn}'s SM time, with {an}'s running periods shaded"),
        unit: "%".into(),
        from_ms: r.0,
        to_ms: r.1,
        y_max: Some(100.0),
        lines: vec![line(format!("victim {vn}"), v)],
        bands: vec![Band {
            name: format!("aggressor {an} running (SM time above {RUNNING:.0} %)"),
            spans,
        }],
        empty_note: "No SM time recorded for the victim in the window.".into(),
        ..Chart::default()
    }];
    // The newest day up close, where single batches can be told apart.
    if r.1 - r.0 > 2 * 86_400_000 {
        let day = (r.1 - 86_400_000, r.1);
        let mut close = charts[0].clone();
        close.title = format!("The newest day up close: {vn}'s SM time and {an}'s runs");
        close.from_ms = day.0;
        close.to_ms = day.1;
        for l in &mut close.lines {
            l.points.retain(|(t, _)| *t >= day.0);
        }
        for b in &mut close.bands {
            b.spans.retain(|(_, to)| *to > day.0);
        }
        charts.push(close);
    }
    if let Some(gpu) = &f.gpu {
        charts.push(Chart {
            title: "GPU utilization (all tenants)".into(),
            unit: "%".into(),
            from_ms: r.0,
            to_ms: r.1,
            y_max: Some(100.0),
            lines: vec![line(
                "GPU utilization",
                points(state, Metric::GpuUtil, Entity::Gpu(gpu.clone()), r, 100.0).await,
            )],
            empty_note: "No utilization samples of this GPU in the window.".into(),
            ..Chart::default()
        });
    }
    EvidenceView {
        charts,
        tables: vec![table],
        action: Some(format!(
            "Keep {vn} and {an} off the same GPU: move one to a GPU of its own or another MIG instance (isolation), or schedule {an} outside {vn}'s busy hours."
        )),
    }
}

/// Sorted, touching spans merged into one.
fn merge_spans(spans: impl Iterator<Item = (i64, i64)>) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The `p` quantile of `xs` (nearest rank), `None` when empty.
fn quantile(xs: &[f64], p: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    Some(v[i])
}

/// The most events a hardware finding's page lists.
const MAX_EVENTS: usize = 200;

/// Hardware: the XID events on the GPU's timeline and in a table, with what each means and
/// what to do.
async fn hardware(state: &DashboardState, f: &Finding) -> EvidenceView {
    let Some(gpu) = &f.gpu else {
        return generic(state, f).await;
    };
    // The finding's window is first to last event; show an hour either side.
    let r = (f.from_ms - 3_600_000, f.to_ms.max(f.from_ms) + 3_600_000);
    let events: Vec<store::EventRecord> = state
        .shared
        .store
        .events(r.0, r.1)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|e| &e.gpu_uuid == gpu)
        .take(MAX_EVENTS)
        .collect();
    let marks = events
        .iter()
        .map(|e| {
            let (what, todo) = xid_meaning(e.code);
            Mark {
                t: e.ts_ms,
                label: e.code.to_string(),
                title: format!(
                    "{} {} {what} at {} UTC: {todo}",
                    e.kind.to_uppercase(),
                    e.code,
                    time(e.ts_ms),
                ),
            }
        })
        .collect();
    let rows = events
        .iter()
        .map(|e| {
            let (what, todo) = xid_meaning(e.code);
            vec![
                format!("{} UTC", time(e.ts_ms)),
                format!("{} {}", e.kind.to_uppercase(), e.code),
                what.to_owned(),
                todo.to_owned(),
            ]
        })
        .collect();
    // The action for the code seen most often.
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    for e in &events {
        *counts.entry(e.code).or_default() += 1;
    }
    let worst = counts.iter().max_by_key(|(_, n)| **n).map_or(
        "Drain the node and run the GPU's diagnostics (DCGM diag level 3).",
        |(c, _)| xid_meaning(*c).1,
    );
    let chart = Chart {
        title: format!("XID events on {}", short_gpu(gpu)),
        unit: "% GPU utilization".into(),
        from_ms: r.0,
        to_ms: r.1,
        y_max: Some(100.0),
        lines: vec![line(
            "GPU utilization",
            points(state, Metric::GpuUtil, Entity::Gpu(gpu.clone()), r, 100.0).await,
        )],
        marks,
        empty_note: "No utilization samples of this GPU around its events.".into(),
        ..Chart::default()
    };
    let mut tables = Vec::new();
    if !events.is_empty() {
        tables.push(pages::EvidenceTable {
            caption: format!(
                "{} on this GPU in the finding's window{}",
                model::figures::count(events.len() as f64, "event", "events"),
                if events.len() == MAX_EVENTS {
                    " (the first 200)"
                } else {
                    ""
                }
            ),
            headers: vec![
                "Time".into(),
                "Event".into(),
                "What it means".into(),
                "What to do".into(),
            ],
            rows,
        });
    }
    EvidenceView {
        charts: vec![chart],
        tables,
        action: Some(worst.to_owned()),
    }
}

fn short_gpu(uuid: &str) -> String {
    uuid.chars().take(12).collect::<String>() + "…"
}

/// What an XID code means and what an operator does about it, from NVIDIA's XID catalogue
/// (docs.nvidia.com/deploy/xid-errors): application faults need no hardware action; bus,
/// memory and firmware faults need the GPU drained and reset, and an RMA when they recur.
pub(super) fn xid_meaning(code: i64) -> (&'static str, &'static str) {
    match code {
        13 => (
            "graphics engine exception (usually the application)",
            "Check the application; no hardware action unless it recurs across jobs.",
        ),
        31 => (
            "GPU memory page fault (usually the application)",
            "Check the application; no hardware action unless it recurs across jobs.",
        ),
        43 => (
            "GPU stopped processing (the application's context was reset)",
            "Restart the workload; no hardware action unless it recurs.",
        ),
        45 => (
            "preemptive cleanup after an earlier error",
            "Follow the earlier XID in this list.",
        ),
        48 => (
            "double-bit ECC error",
            "Drain the node and reset the GPU; RMA if it recurs.",
        ),
        61 | 62 => (
            "internal micro-controller error",
            "Drain the node and reset the GPU; RMA if it recurs.",
        ),
        63 | 64 => (
            "ECC page retirement or row-remapping event",
            "Drain and reset the GPU to apply the remapping; RMA when remapping fails.",
        ),
        74 => (
            "NVLink error",
            "Drain the node, check the NVLink connections, reset the GPU; RMA if it recurs.",
        ),
        79 => (
            "GPU has fallen off the bus",
            "Drain the node and power-cycle it; check seating, power and cooling; RMA if it recurs.",
        ),
        92 => (
            "high single-bit ECC error rate",
            "Watch the ECC counters; drain and run diagnostics if the rate keeps rising.",
        ),
        94 => (
            "contained ECC error",
            "Restart the affected application; the GPU keeps running.",
        ),
        95 => (
            "uncontained ECC error",
            "Drain the node and reset the GPU; RMA if it recurs.",
        ),
        119 | 120 => (
            "GSP firmware error",
            "Drain the node and reset the GPU; update the driver if it recurs.",
        ),
        _ => (
            "an XID error",
            "Drain the node and run the GPU's diagnostics (DCGM diag level 3).",
        ),
    }
}

/// Underutilized: the tenant's effective use against what it holds now and the capacity of
/// the slice the plan proposes for it; then its memory against that slice's memory.
async fn underutilized(state: &DashboardState, a: &Analysis, f: &Finding) -> EvidenceView {
    let Some(k) = f.tenants.first() else {
        return generic(state, f).await;
    };
    let who = name_of(a, k);
    let proposed = a
        .recommendations
        .iter()
        .flat_map(|rec| rec.moves().iter().map(move |m| (rec, m)))
        .find(|(_, m)| &m.tenant == k && f.gpu.as_deref() == Some(m.from_gpu.as_str()));
    let mut refs = Vec::new();
    if let Some(p95) = f.metrics.get(&Measure::EffectiveP95Gpu) {
        // Drawn and labelled at the figure the summary and the Numbers table give.
        refs.push(RefLine {
            name: format!("p95 of its demand, {}", model::figures::gpu(*p95)),
            value: model::figures::round(*p95, 2) * 100.0,
        });
    }
    let mut slice_mem = None;
    if let Some((rec, m)) = proposed {
        let cap = match &m.target {
            analytics::recommend::Target::WholeGpu => 100.0,
            analytics::recommend::Target::Mig {
                compute_slices,
                memory_gib,
                profile,
            } => {
                slice_mem = Some((format!("memory of a MIG {profile} instance"), *memory_gib));
                f64::from(*compute_slices) / f64::from(mig_slices(profile)) * 100.0
            }
            analytics::recommend::Target::Share { replicas } => {
                100.0 / f64::from((*replicas).max(1))
            }
            // A pinned share: compute is the GPU's (its group's hours fit it), memory is
            // capped at the request.
            analytics::recommend::Target::PerGpu { memory_gib, .. } => {
                slice_mem = Some(("its memory request on the shared GPU".into(), *memory_gib));
                100.0
            }
        };
        refs.push(RefLine {
            name: format!(
                "{} proposed by {} of the fleet plan",
                m.target.describe(),
                rec.kind.step_on(&rec.node)
            ),
            value: cap,
        });
    }
    let charts = vec![
        held_and_used(
            state,
            f,
            k,
            format!("{who}'s demand against what it holds"),
            refs,
        )
        .await,
        memory_chart(state, f, k, &who, range(f), slice_mem).await,
    ];
    let action = match proposed {
        Some((rec, m)) => format!(
            "Move {who} to {} ({} of the fleet plan, replayed against its recorded demand).",
            m.target.describe(),
            rec.kind.step_on(&rec.node)
        ),
        None => format!(
            "No smaller slice holds {who}'s peaks with headroom on this node; keep it, or ask its owner whether the allocation can shrink."
        ),
    };
    EvidenceView {
        charts,
        action: Some(action),
        ..EvidenceView::default()
    }
}

/// Compute slices of the whole GPU in the MIG family that has `profile` (7 on A100/H100).
fn mig_slices(profile: &str) -> u32 {
    analytics::mig::FAMILIES
        .iter()
        .find(|f| f.profile(profile).is_some())
        .and_then(|f| f.profiles.iter().map(|p| p.compute_slices).max())
        .unwrap_or(7)
        .max(1)
}

/// Waiting demand: what waited against what of its pool was held idle, hour by hour (the
/// finding's own hours), then the idle holders' activity; what to do follows from which of
/// the two was short.
async fn waiting(state: &DashboardState, a: &Analysis, f: &Finding) -> EvidenceView {
    let mut view = generic(state, f).await;
    let hour = model::rollup::HOUR_MS;
    let (from, to) = range(f);
    let points = |pick: fn(&analytics::DemandHour) -> f64| -> Vec<(i64, Option<f64>)> {
        // Every hour of the window, so an hour nothing waited reads as zero, not a gap.
        let by_hour: HashMap<i64, f64> = f
            .demand_hours
            .iter()
            .map(|h| (h.hour_ms, pick(h)))
            .collect();
        (model::rollup::bucket_of(from, hour)..to)
            .step_by(hour as usize)
            .map(|t| (t, Some(by_hour.get(&t).copied().unwrap_or(0.0))))
            .collect()
    };
    let team = f.team.as_deref().unwrap_or("the team");
    let pool = f.pool.as_deref().unwrap_or("its pool");
    view.charts.insert(
        0,
        Chart {
            title: format!("What {team}'s work waited for, and what of {pool} was held idle"),
            unit: "GPUs, hour means".into(),
            from_ms: from,
            to_ms: to,
            lines: vec![
                line("GPUs waited for", points(|h| h.waiting_gpus)),
                line("GPUs of the pool held idle", points(|h| h.idle_gpus)),
            ],
            empty_note: "This finding was stored before gpulens kept its hours; the next analysis charts them.".into(),
            ..Chart::default()
        },
    );
    let metric = |k: Measure| f.metrics.get(&k).copied().unwrap_or(0.0);
    let holders: Vec<String> = f.tenants.iter().map(|k| name_of(a, k)).collect();
    view.action = Some(if metric(Measure::ReclaimableGpuHours) >= 1.0 {
        format!(
            "Free the idle holdings of {pool} for the waiting work: reclaim {} (the reclaim steps are linked below, and /reclaim runs the loop), or ask their owners to release them.{}",
            if holders.is_empty() {
                "them".to_owned()
            } else {
                holders.join(", ")
            },
            if metric(Measure::FragmentedGpuHours) >= 1.0 {
                " Some of it waited only because no one node had enough free GPUs: consolidate the pool's nodes (the plan's consolidation steps)."
            } else {
                ""
            }
        )
    } else if metric(Measure::FragmentedGpuHours) >= 1.0 {
        "Enough GPUs were free, but not on one node: consolidate the pool's nodes (the plan's consolidation steps) so whole-node requests fit.".to_owned()
    } else {
        format!(
            "Nothing of {pool} was held idle while it waited: the pool is short for {team}. Add GPUs to the pool, raise {team}'s quota where another team's is unused, or schedule the work outside its busy hours."
        )
    });
    view
}

/// Any other kind: its evidence series, one chart each, in the metric's unit (memory in GiB).
async fn generic(state: &DashboardState, f: &Finding) -> EvidenceView {
    let mut charts = Vec::new();
    for e in &f.evidence {
        let (Some(metric), Some(entity)) = (Metric::parse(&e.metric), Entity::parse(&e.entity))
        else {
            continue;
        };
        let r = window(e.from_ms, e.to_ms);
        let (unit, scale, y_max) = match metric.spec().unit {
            "ratio" => ("%", 100.0, Some(100.0)),
            "bytes" => ("GiB", 1.0 / GIB, None),
            "watts" => ("W", 1.0, None),
            "celsius" => ("°C", 1.0, None),
            u => (u, 1.0, None),
        };
        charts.push(Chart {
            title: e.label.clone(),
            unit: unit.into(),
            from_ms: r.0,
            to_ms: r.1,
            y_max,
            lines: vec![line(
                e.label.clone(),
                points(state, metric, entity, r, scale).await,
            )],
            empty_note: "Nothing was recorded for this series in the finding's window.".into(),
            ..Chart::default()
        });
    }
    EvidenceView {
        charts,
        ..EvidenceView::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_merge_and_quantiles_rank() {
        assert_eq!(
            merge_spans([(0, 10), (10, 20), (30, 40)].into_iter()),
            vec![(0, 20), (30, 40)]
        );
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), Some(2.0));
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.9), Some(3.0));
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.1), Some(1.0));
    }

    #[test]
    fn every_xid_has_an_action() {
        for code in [
            13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 999,
        ] {
            let (what, todo) = xid_meaning(code);
            assert!(!what.is_empty() && !todo.is_empty());
        }
        assert!(xid_meaning(79).1.contains("Drain"));
    }
}
