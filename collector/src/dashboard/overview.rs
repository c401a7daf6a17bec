//! `/`: the fleet at a glance — funnel, trends, findings by kind, the biggest wasters.

use super::page::*;
use super::series::*;
use analytics::Measure;
use model::profiling::Ratio;
use std::collections::HashSet;

fn tenant_lines(
    a: &Analysis,
    kind: FindingKind,
    metric: Measure,
    fmt: fn(f64) -> String,
) -> Vec<pages::TenantLine> {
    let mut f: Vec<&Finding> = a.findings.iter().filter(|f| f.kind == kind).collect();
    let value = |f: &Finding| f.metrics.get(&metric).copied().unwrap_or(0.0);
    if kind == FindingKind::Underutilized {
        f.sort_by(|x, y| value(x).total_cmp(&value(y)));
    } else {
        f.sort_by(|x, y| value(y).total_cmp(&value(x)));
    }
    // One row per tenant and node, as the findings list groups them: a pod's two GPUs with
    // the same finding read as one row that says "2 GPUs", not as two identical rows. The
    // row keeps the first (worst) value.
    let mut lines: Vec<pages::TenantLine> = Vec::new();
    for f in f {
        let key = f.tenants.first().cloned().unwrap_or_default();
        if let Some(l) = lines.iter_mut().find(|l| l.key == key && l.node == f.node) {
            l.gpus += 1;
            continue;
        }
        lines.push(pages::TenantLine {
            name: name_of(a, &key),
            key,
            team: f.team.clone().unwrap_or_default(),
            node: f.node.clone(),
            gpus: 1,
            value: fmt(value(f)),
            finding_id: f.id.clone(),
        });
    }
    lines.truncate(8);
    lines
}

/// The waiting_demand findings as the overview's "Waiting while idle" rows, most reclaimable
/// first.
fn demand_lines(a: &Analysis) -> Vec<pages::DemandLine> {
    let mut rows: Vec<pages::DemandLine> = a
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::WaitingDemand)
        .map(|f| {
            let m = |k: Measure| f.metrics.get(&k).copied().unwrap_or(0.0);
            pages::DemandLine {
                finding_id: f.id.clone(),
                team: f.team.clone().unwrap_or_default(),
                pool: f.pool.clone().unwrap_or_else(|| "any GPU".into()),
                waited_gpu_hours: m(Measure::WaitingGpuHours),
                peak_gpus: m(Measure::WaitingGpusPeak),
                idle_held_gpu_hours: m(Measure::IdleHeldGpuHours),
                reclaimable_gpu_hours: m(Measure::ReclaimableGpuHours),
                reclaimable_cost: web::format::money(
                    m(Measure::ReclaimableCost),
                    &a.funnel.currency,
                ),
                fragmented_gpu_hours: m(Measure::FragmentedGpuHours),
                holders: f.tenants.iter().map(|k| name_of(a, k)).collect(),
            }
        })
        .collect();
    rows.sort_by(|x, y| {
        y.reclaimable_gpu_hours
            .total_cmp(&x.reclaimable_gpu_hours)
            .then(y.waited_gpu_hours.total_cmp(&x.waited_gpu_hours))
    });
    rows
}

/// Each pool's forecast as the overview's "Capacity ahead" rows: those that run out first (at
/// the band's early edge), then the fullest.
fn outlook(f: &analytics::forecast::Forecasts) -> Vec<pages::OutlookLine> {
    use analytics::forecast::{Quantity, Scope};
    let mut rows: Vec<(Option<i64>, pages::OutlookLine)> = f
        .series
        .iter()
        .filter(|s| matches!(s.scope, Scope::Pool { .. }))
        .map(|s| {
            let p = |q| s.projection(q);
            let recent = |q| p(q).map_or(0.0, |p| p.recent);
            let day_mean = |q| f.at_horizon(p(q)?);
            let demand_ahead = day_mean(Quantity::Allocated)
                .map(|a| a + day_mean(Quantity::Waiting).unwrap_or(0.0));
            let alloc = p(Quantity::Allocated);
            let error = match alloc.and_then(|a| a.accuracy.as_ref()) {
                Some(acc) => acc.sentence(),
                None => alloc
                    .and_then(|a| a.note.clone())
                    .unwrap_or_else(|| "no forecast".into()),
            };
            let runs_out = match (&s.run_out, alloc.and_then(|a| a.model.as_ref())) {
                (Some(r), _) => r.sentence(),
                (None, Some(_)) => format!(
                    "keeps GPUs free over the next {} days, even at the measured error",
                    f.horizon_h / 24
                ),
                (None, None) => "–".into(),
            };
            let line = pages::OutlookLine {
                pool: s.scope.label(),
                gpus: s.capacity.unwrap_or(0.0),
                held_now: recent(Quantity::Allocated),
                waiting_now: recent(Quantity::Waiting),
                demand_ahead,
                short: s.run_out.is_some(),
                runs_out,
                error,
            };
            (s.run_out.as_ref().and_then(|r| r.earliest_ms), line)
        })
        .collect();
    rows.sort_by(|(a, x), (b, y)| {
        let fill = |l: &pages::OutlookLine| (l.held_now + l.waiting_now) / l.gpus.max(1.0);
        a.unwrap_or(i64::MAX)
            .cmp(&b.unwrap_or(i64::MAX))
            .then(fill(y).total_cmp(&fill(x)))
    });
    rows.into_iter().map(|(_, l)| l).collect()
}

/// What the overview's charts cover: a custom from/to where one is given and readable, else
/// the picked or default range; `said` in words for the captions.
struct Shown {
    range: &'static str,
    from: i64,
    to: i64,
    said: String,
    custom: Chosen,
    notice: Option<String>,
}

fn shown_range(state: &DashboardState, q: &RangeQuery) -> Shown {
    let now = model::time::now_ms();
    let (custom, notice) = match picked_range(state, &None, &q.from, &q.to) {
        Ok(c) => (c, None),
        Err(n) => (
            None,
            Some(n.replace("the analysed window", "the last 7 days")),
        ),
    };
    let (range, from, to, said) = match &custom {
        Some((f, t, _)) => ("", *f, *t, format!("{} to {} UTC", time(*f), time(*t))),
        None => {
            let (range, span) = range_ms(q.range.as_deref());
            (range, now - span, now, format!("last {range}"))
        }
    };
    Shown {
        range,
        from,
        to,
        said,
        custom,
        notice,
    }
}

pub async fn overview(
    State(state): State<DashboardState>,
    caller: Caller,
    Query(q): Query<RangeQuery>,
) -> PageOrCsv {
    let Shown {
        range,
        from,
        to,
        said,
        custom,
        notice,
    } = shown_range(&state, &q);
    let a = analysis(&state).await?;
    let nodes = state.shared.store.nodes().await?;
    let alerts = crate::alerts::load(&state.shared.store).await?;
    // 15-minute points up to a day, hourly up to 8 days, 6-hourly beyond.
    let step = match to - from {
        s if s <= 86_400_000 => 900_000,
        s if s <= 8 * 86_400_000 => 3_600_000,
        _ => 6 * 3_600_000,
    };
    let (util, alloc, sm) = tokio::join!(
        fleet_series(&state, Metric::GpuUtil, from, to, step),
        fleet_series(&state, Metric::AllocShare, from, to, step),
        fleet_series(&state, Metric::Ratio(Ratio::SmActive), from, to, step),
    );
    let mut trends = Vec::new();
    for (name, metric) in TRENDS {
        let t = trend(&state, metric, from, to).await;
        trends.push(pages::Trend {
            name: name.into(),
            now: t.now.map(|x| x * 100.0),
            before: t.before.map(|x| x * 100.0),
            change: t.change,
            before_hours: t.before_hours,
            hours: t.hours,
            unit: "%".into(),
        });
    }
    let lines = [util, alloc, sm]
        .into_iter()
        .zip(TRENDS)
        .map(|(points, (name, _))| Line {
            name: name.into(),
            points,
        })
        .collect();
    let chart = Chart {
        title: format!("Fleet, {said}"),
        unit: "%".into(),
        from_ms: from,
        to_ms: to,
        y_max: Some(100.0),
        lines,
        empty_note: "No samples in this range.".into(),
        ..Chart::default()
    };
    let firing = alerts
        .iter()
        .filter(|x| x.state == crate::alerts::AlertState::Firing)
        .count();
    let mut v = pages::OverviewView {
        range: range.into(),
        ranges: ranges(),
        from: String::new(),
        to: String::new(),
        window: "no analysis yet".into(),
        analysed: a.is_some(),
        funnel: pages::FunnelView::default(),
        gpus: nodes.iter().map(|n| n.gpu_count).sum(),
        nodes: nodes.len(),
        gpus_freeable: 0,
        plan_line: "no plan yet".into(),
        findings: Vec::new(),
        firing_alerts: firing,
        top_idle: Vec::new(),
        top_underutilized: Vec::new(),
        trends,
        chart,
        limitations: Vec::new(),
        loading: state.shared.loading.progress(),
        top_wasters: Vec::new(),
        team_waste: Vec::new(),
        heatmap: heatmap(&state, a.as_deref(), &said, from, to).await,
        actions: Vec::new(),
        waste_per_month: None,
        window_length: String::new(),
        waiting: Vec::new(),
        capacity: Vec::new(),
        horizon: String::new(),
    };
    if let Some(a) = &a {
        from_analysis(&mut v, a, state.labels.mode);
        let tenants = state.shared.store.tenants().await?;
        v.top_wasters = top_wasters(a, &tenants);
        // Team-scoped people see the fleet's totals and their own teams' tenants.
        v.top_wasters
            .retain(|w| caller.sees_team(team_opt(&w.team)));
        v.top_idle.retain(|l| caller.sees_team(team_opt(&l.team)));
        v.top_underutilized
            .retain(|l| caller.sees_team(team_opt(&l.team)));
        v.waiting.retain(|l| caller.sees_team(team_opt(&l.team)));
        v.team_waste.retain(|l| caller.sees_team(team_opt(&l.team)));
    }
    if v.loading.is_some() {
        // A partial history's analysis would mislead: numbers wait for the whole week.
        v.analysed = false;
        v.funnel = pages::FunnelView::default();
    }
    let mut f = frame(&state, &caller, "Overview");
    f.refresh_s = Some(60);
    f.notice = notice;
    if let Some((_, _, (_, from, to))) = custom {
        (v.from, v.to) = (from, to);
    }
    page_or_table(q.asked(), "overview", v, pages::overview_tables, |v| {
        pages::overview(f, v)
    })
}

/// The fleet series the overview charts and compares with the range before.
const TRENDS: [(&str, Metric); 3] = [
    ("GPU utilization", Metric::GpuUtil),
    ("Allocated share", Metric::AllocShare),
    ("SM activity (DCGM)", Metric::Ratio(Ratio::SmActive)),
];

/// What the newest analysis adds to the overview: funnel, findings by kind, freeable GPUs and
/// the tenants wasting most.
fn from_analysis(v: &mut pages::OverviewView, a: &Analysis, mode: crate::labels::Mode) {
    let t = &a.funnel.total;
    v.window = window(a);
    v.funnel = pages::FunnelView {
        capacity: t.capacity_gpu_hours.unwrap_or(0.0),
        allocated: t.allocated_gpu_hours,
        active: t.active_gpu_hours,
        effective: t.effective_gpu_hours,
        waste: t.waste_gpu_hours,
        cost: t.cost,
        waste_cost: t.waste_cost,
        currency: a.funnel.currency.clone(),
        effective_ratio: t.effective_ratio,
        energy: t.energy.map(|e| pages::EnergyFigures {
            kwh: e.kwh,
            idle_kwh: e.idle_kwh,
            unallocated_kwh: e.unallocated_kwh.unwrap_or(0.0),
            co2e_kg: e.co2e_kg,
        }),
        signal: match t.effective_signal.as_str() {
            "sm_active" => "SM activity from DCGM".into(),
            "gpu_util" => "NVML GPU utilization (an upper bound without DCGM)".into(),
            "mixed" => "DCGM SM activity where reported, NVML utilization elsewhere".into(),
            _ => "nothing measurable".into(),
        },
    };
    let p = &a.plan;
    v.gpus_freeable = p.gpus_freed;
    v.plan_line = format!(
        "of {} in use · {} emptied · {}/month · {}",
        p.gpus_in_use,
        model::figures::count(p.nodes_freed as f64, "node", "nodes"),
        web::format::money(p.money_per_month, &p.currency),
        model::figures::count(p.steps.len() as f64, "step", "steps")
    );
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &a.findings {
        *counts.entry(f.kind.as_str()).or_default() += 1;
    }
    v.findings = counts.into_iter().map(|(k, n)| (k.into(), n)).collect();
    v.top_idle = tenant_lines(
        a,
        FindingKind::IdleAllocation,
        Measure::IdleHoursInRuns,
        |h| format!("{h:.0} h"),
    );
    v.top_underutilized = tenant_lines(
        a,
        FindingKind::Underutilized,
        Measure::EffectiveRatio,
        |r| format!("{:.0} %", r * 100.0),
    );
    v.limitations = a.limitations.clone();
    v.waiting = demand_lines(a);
    if let Some(f) = &a.forecast {
        v.capacity = outlook(f);
        v.horizon = model::figures::count((f.horizon_h / 168) as f64, "week", "weeks");
    }
    v.team_waste = team_waste(a);
    let hours = (a.funnel.to_ms - a.funnel.from_ms) as f64 / 3_600_000.0;
    let (length, observed) = window_coverage(hours, t.observed_share(v.gpus, hours));
    v.window_length = length;
    v.waste_per_month = (observed > 0.0).then(|| {
        web::format::money(
            t.waste_cost / observed * analytics::plan::HOURS_PER_MONTH,
            &a.funnel.currency,
        )
    });
    v.actions = first_steps(a, 3)
        .into_iter()
        .map(|r| pages::ActionLine {
            id: r.id.clone(),
            summary: super::recommendations::names_in(a, &r.summary),
            gpus_freed: r.replay.gpus_freed,
            per_month: super::recommendations::step_money(a, r),
            // A MIG layout or a sharing config is a label change to approve where the label
            // workflow is on; a reclaim or a move is done by people.
            approvable: mode == crate::labels::Mode::ApplyWithApproval
                && matches!(
                    r.proposal,
                    analytics::Proposal::MigLayout { .. } | analytics::Proposal::Sharing { .. }
                ),
        })
        .collect();
}

/// The first `n` steps that free GPUs, in the plan's order, each after the steps it requires
/// (transitively), which are listed too although they free nothing themselves: an operator
/// who follows the list top-down carries them out in an order that works. The
/// analysis lists its recommendations in that order (`plan.steps` first).
fn first_steps(a: &Analysis, n: usize) -> Vec<&analytics::Recommendation> {
    let by_id: HashMap<&str, &analytics::Recommendation> = a
        .recommendations
        .iter()
        .map(|r| (r.id.as_str(), r))
        .collect();
    let mut todo: Vec<&str> = a
        .plan
        .steps
        .iter()
        .filter(|id| {
            by_id
                .get(id.as_str())
                .is_some_and(|r| r.replay.gpus_freed > 0.0)
        })
        .take(n)
        .map(String::as_str)
        .collect();
    let mut chosen: HashSet<&str> = HashSet::new();
    while let Some(id) = todo.pop() {
        if let Some(r) = by_id.get(id).filter(|_| chosen.insert(id)) {
            todo.extend(r.requires.iter().map(String::as_str));
        }
    }
    a.recommendations
        .iter()
        .filter(|r| chosen.contains(r.id.as_str()))
        .collect()
}

/// Each team's waste over the analysed window (the funnel's team lines), the most costly
/// first; teams that wasted nothing are left out.
fn team_waste(a: &Analysis) -> Vec<pages::TeamWasteLine> {
    let mut rows: Vec<&analytics::FunnelRow> = a
        .funnel
        .by_team
        .iter()
        .filter(|r| r.waste_gpu_hours > 0.0)
        .collect();
    rows.sort_by(|x, y| {
        y.waste_cost
            .total_cmp(&x.waste_cost)
            .then(y.waste_gpu_hours.total_cmp(&x.waste_gpu_hours))
            .then(x.key.cmp(&y.key))
    });
    rows.into_iter()
        .map(|r| pages::TeamWasteLine {
            team: r.key.clone(),
            allocated_gpu_hours: r.allocated_gpu_hours,
            effective: r.effective_ratio,
            waste_gpu_hours: r.waste_gpu_hours,
            waste_cost: r.waste_cost,
        })
        .collect()
}

/// How many tenants the top-wasters table lists.
const TOP: usize = 8;

/// Tenants by the money their allocated but unused GPU-hours cost, with their most severe
/// finding (or none: waste below every finding's threshold still costs).
fn top_wasters(a: &Analysis, tenants: &[store::TenantRecord]) -> Vec<pages::WasterLine> {
    let team_of = team_map(tenants);
    let known: HashMap<&str, &store::TenantRecord> = tenants.iter().map(|t| (t.key(), t)).collect();
    let mut rows: Vec<&analytics::FunnelRow> = a
        .funnel
        .by_tenant
        .iter()
        .filter(|r| r.waste_cost > 0.0)
        .collect();
    rows.sort_by(|x, y| y.waste_cost.total_cmp(&x.waste_cost));
    rows.into_iter()
        .take(TOP)
        .map(|r| {
            let finding = a
                .findings
                .iter()
                .filter(|f| f.tenants.iter().any(|t| t == &r.key))
                .max_by_key(|f| f.severity)
                .map(|f| (f.id.clone(), f.kind.as_str().to_owned()));
            pages::WasterLine {
                key: r.key.clone(),
                name: known
                    .get(r.key.as_str())
                    .map_or_else(|| name_of(a, &r.key), |t| t.display_name()),
                team: team_of
                    .get(r.key.as_str())
                    .map_or_else(|| "–".into(), |t| (*t).to_owned()),
                waste_gpu_hours: r.waste_gpu_hours,
                waste_cost: web::format::money(r.waste_cost, &a.funnel.currency),
                effective: r.effective_ratio,
                finding,
            }
        })
        .collect()
}

/// The most GPUs the heatmap shows; beyond, the nodes wasting most come first.
const HEATMAP_GPUS: usize = 48;

/// GPUs × time over the range: allocation and effective use per GPU and column, from the
/// tenants' hour rollups (the funnel's own numbers).
async fn heatmap(
    state: &DashboardState,
    a: Option<&Analysis>,
    said: &str,
    from: i64,
    to: i64,
) -> Option<web::chart::Heatmap> {
    use web::chart::{HeatCell, HeatRow, Heatmap};
    // An hour a column up to two days, six hours up to 8 days, a day beyond.
    let column_ms: i64 = match to - from {
        s if s <= 2 * 86_400_000 => 3_600_000,
        s if s <= 8 * 86_400_000 => 6 * 3_600_000,
        _ => 86_400_000,
    };
    let gpus = state.shared.store.gpus(None).await.ok()?;
    if gpus.is_empty() {
        return None;
    }
    // Nodes in order of waste (the analysis' node rows), then by name.
    let waste: HashMap<&str, f64> = a
        .map(|a| {
            a.funnel
                .by_node
                .iter()
                .map(|r| (r.key.as_str(), r.waste_gpu_hours))
                .collect()
        })
        .unwrap_or_default();
    let mut nodes: Vec<(&str, &str)> = gpus
        .iter()
        .map(|g| (g.cluster.as_str(), g.node.as_str()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    nodes.sort_by(|x, y| {
        let w = |n: &(&str, &str)| waste.get(n.1).copied().unwrap_or(0.0);
        w(y).total_cmp(&w(x)).then(x.cmp(y))
    });
    let first = from - from.rem_euclid(column_ms);
    let cols = ((to - first + column_ms - 1) / column_ms).max(1) as usize;
    let mut rows = Vec::new();
    for (cluster, node) in &nodes {
        if rows.len() >= HEATMAP_GPUS {
            break;
        }
        let Ok(r) = state
            .shared
            .store
            .rollups(store::Rollups::Hour, cluster, node, first, to)
            .await
        else {
            continue;
        };
        let mut on_node: Vec<&store::GpuRecord> = gpus
            .iter()
            .filter(|g| g.cluster == *cluster && g.node == *node)
            .collect();
        on_node.sort_by_key(|g| g.index);
        for g in on_node {
            if rows.len() >= HEATMAP_GPUS {
                break;
            }
            let col = |b: i64| ((b - first) / column_ms).clamp(0, cols as i64 - 1) as usize;
            // Hours reported, allocated and effective GPU-hours per column.
            let mut acc = vec![(0.0_f64, 0.0_f64, 0.0_f64); cols];
            for ((u, b), agg) in &r.gpus {
                if u == &g.uuid {
                    acc[col(*b)].0 += agg.covered_s / 3600.0;
                }
            }
            for ((u, _, b), t) in &r.tenants {
                if u != &g.uuid || t.alloc_n == 0 {
                    continue;
                }
                let c = &mut acc[col(*b)];
                c.1 += t.allocated_gpu_hours();
                c.2 += t.effective_gpu_hours();
            }
            let cells = acc
                .into_iter()
                .map(|(h, al, ef)| {
                    (h > 0.0).then(|| HeatCell {
                        allocated: (al / h).min(1.0),
                        effective: (ef / h).min(1.0),
                    })
                })
                .collect();
            rows.push(HeatRow {
                label: format!("{node} GPU {}", g.index),
                href: format!("/gpus/{}", enc(&g.uuid)),
                cells,
            });
        }
    }
    let note = heatmap_note(rows.len(), gpus.len(), column_ms);
    Some(Heatmap {
        title: format!("Every GPU, {said}"),
        from_ms: first,
        to_ms: first + cols as i64 * column_ms,
        column_ms,
        rows,
        note,
    })
}

/// What the heatmap shows: every GPU, or the `shown` of `all` on the nodes wasting most.
fn heatmap_note(shown: usize, all: usize, column_ms: i64) -> String {
    if all > shown {
        return format!(
            "The {} of the nodes wasting most, of {all}; every GPU is on its node's page.",
            model::figures::count(shown as f64, "GPU", "GPUs"),
        );
    }
    let column = match column_ms {
        3_600_000 => "hour",
        86_400_000 => "day",
        _ => "six hours",
    };
    match shown {
        1 => format!("The one GPU, a column per {column}."),
        n => format!("All {n} GPUs, a column per {column}."),
    }
}

/// How long the analysed window is and how many of its hours have data behind the totals: the
/// `observed_share` of them ([`analytics::FunnelRow::observed_share`]; a fleet watched for a day
/// of a 7-day window wastes at seven times the rate its week's total suggests). The window reads "7 days
/// analysed", or with "(data for about 24 hours)" when under 95 % of it has data.
fn window_coverage(hours: f64, observed_share: f64) -> (String, f64) {
    let length = |h: f64| {
        let days = h / 24.0;
        if h >= 48.0 && (days - days.round()).abs() < 0.05 {
            format!("{days:.0} days")
        } else if h >= 48.0 {
            format!("{days:.1} days")
        } else {
            model::figures::count(h, "hour", "hours")
        }
    };
    let observed = observed_share * hours;
    let text = if observed < 0.95 * hours {
        format!(
            "{} analysed (data for about {})",
            length(hours),
            length(observed)
        )
    } else {
        format!("{} analysed", length(hours))
    };
    (text, observed)
}

#[cfg(test)]
mod tests {
    use super::heatmap_note;
    use analytics::{Analysis, Finding, FindingKind, FunnelRow, Severity};

    fn underutilized(tenant: &str, node: &str, gpu: &str, ratio: f64) -> Finding {
        Finding {
            id: format!("underutilized-{tenant}-{gpu}"),
            kind: FindingKind::Underutilized,
            severity: Severity::Warning,
            cluster: "c".into(),
            node: node.into(),
            gpu: Some(gpu.into()),
            tenants: vec![tenant.into()],
            team: Some("creative".into()),
            pool: None,
            from_ms: 0,
            to_ms: 1,
            signal: "gpu_util".into(),
            reason: None,
            summary: String::new(),
            metrics: [(analytics::Measure::EffectiveRatio, ratio)].into(),
            evidence: Vec::new(),
            demand_hours: Vec::new(),
        }
    }

    /// A pod holding two GPUs of a node, each underused, is one row that says so, not two
    /// rows an operator cannot tell apart; the same tenant on another node is a row of its own.
    #[test]
    fn a_tenants_gpus_on_one_node_are_one_row() {
        let a = Analysis {
            findings: vec![
                underutilized("pod/a", "l40s", "GPU-0", 0.18),
                underutilized("pod/b", "a10g", "GPU-5", 0.05),
                underutilized("pod/a", "l40s", "GPU-1", 0.19),
                underutilized("pod/a", "h100", "GPU-9", 0.30),
            ],
            ..Analysis::default()
        };
        let lines = super::tenant_lines(
            &a,
            FindingKind::Underutilized,
            analytics::Measure::EffectiveRatio,
            |r| format!("{:.0} %", r * 100.0),
        );
        let rows: Vec<(&str, &str, usize, &str)> = lines
            .iter()
            .map(|l| (l.key.as_str(), l.node.as_str(), l.gpus, l.value.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                ("pod/b", "a10g", 1, "5 %"),
                ("pod/a", "l40s", 2, "18 %"),
                ("pod/a", "h100", 1, "30 %"),
            ]
        );
    }

    #[test]
    fn the_heatmap_says_what_it_shows() {
        assert_eq!(
            heatmap_note(48, 200, 3_600_000),
            "The 48 GPUs of the nodes wasting most, of 200; every GPU is on its node's page."
        );
        assert_eq!(
            heatmap_note(16, 16, 86_400_000),
            "All 16 GPUs, a column per day."
        );
        assert_eq!(
            heatmap_note(1, 1, 21_600_000),
            "The one GPU, a column per six hours."
        );
    }

    /// The window's text and observed hours for a fleet of `gpus` observed for `capacity`
    /// GPU-hours.
    fn window_coverage(hours: f64, capacity: Option<f64>, gpus: i64) -> (String, f64) {
        let total = FunnelRow {
            capacity_gpu_hours: capacity,
            ..FunnelRow::default()
        };
        super::window_coverage(hours, total.observed_share(gpus, hours))
    }

    #[test]
    fn the_waste_rate_rests_on_the_hours_with_data() {
        // A week of 16 GPUs, fully observed; one GPU missing for a day still reads as a week.
        assert_eq!(
            window_coverage(168.0, Some(2688.0), 16),
            ("7 days analysed".into(), 168.0)
        );
        assert_eq!(
            window_coverage(168.0, Some(2664.0), 16).0,
            "7 days analysed"
        );
        // Installed a day ago: the week's totals are a day's.
        let (text, observed) = window_coverage(168.0, Some(384.0), 16);
        assert_eq!(text, "7 days analysed (data for about 24 hours)");
        assert_eq!(observed, 24.0);
        assert_eq!(
            window_coverage(168.0, Some(16.0 * 60.0), 16).0,
            "7 days analysed (data for about 2.5 days)"
        );
        assert_eq!(
            window_coverage(168.0, Some(16.0 * 72.0), 16).0,
            "7 days analysed (data for about 3 days)"
        );
        // No inventory or no capacity: the window as it is.
        assert_eq!(
            window_coverage(24.0, None, 16),
            ("24 hours analysed".into(), 24.0)
        );
        assert_eq!(window_coverage(24.0, Some(10.0), 0).1, 24.0);
        assert_eq!(window_coverage(1.0, Some(1.0), 1).0, "1 hour analysed");
    }
}
