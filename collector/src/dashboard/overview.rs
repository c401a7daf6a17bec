//! `/`: the fleet at a glance — funnel, trends, findings by kind, the biggest wasters.

use super::*;

fn tenant_lines(
    a: &Analysis,
    kind: FindingKind,
    metric: &str,
    fmt: fn(f64) -> String,
) -> Vec<pages::TenantLine> {
    let mut f: Vec<&Finding> = a.findings.iter().filter(|f| f.kind == kind).collect();
    let value = |f: &Finding| f.metrics.get(metric).copied().unwrap_or(0.0);
    if kind == FindingKind::Underutilized {
        f.sort_by(|x, y| value(x).total_cmp(&value(y)));
    } else {
        f.sort_by(|x, y| value(y).total_cmp(&value(x)));
    }
    f.into_iter()
        .take(8)
        .map(|f| {
            let key = f.tenants.first().cloned().unwrap_or_default();
            pages::TenantLine {
                name: name_of(a, &key),
                key,
                team: f.team.clone().unwrap_or_default(),
                node: f.node.clone(),
                value: fmt(value(f)),
                finding_id: f.id.clone(),
            }
        })
        .collect()
}

pub async fn overview(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Query(q): Query<RangeQuery>,
) -> Page {
    let now = model::time::now_ms();
    let (range, span) = range_ms(q.range.as_deref());
    let (from, to) = (now - span, now);
    let a = analysis(&state).await?;
    let nodes = state.store.nodes().await?;
    let alerts = crate::alerts::load(&state.store).await?;
    let step = match range {
        "24h" => 900_000,
        "7d" => 3_600_000,
        _ => 6 * 3_600_000,
    };
    let (util, alloc, sm) = tokio::join!(
        fleet_series(&state, Metric::GpuUtil, from, to, step),
        fleet_series(&state, Metric::AllocShare, from, to, step),
        fleet_series(&state, Metric::SmActive, from, to, step),
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
        title: format!("Fleet, last {range}"),
        unit: "%".into(),
        from_ms: from,
        to_ms: to,
        y_max: Some(100.0),
        lines,
        empty_note: "No samples in this range.".into(),
    };
    let firing = alerts
        .iter()
        .filter(|x| x.state == crate::alerts::AlertState::Firing)
        .count();
    let mut v = pages::OverviewView {
        range: range.into(),
        ranges: ranges(),
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
    };
    if let Some(a) = &a {
        from_analysis(&mut v, a);
    }
    let mut f = frame(&state, &headers, "Overview");
    f.refresh_s = Some(60);
    Ok(Html(pages::overview(f, v)))
}

/// The fleet series the overview charts and compares with the range before.
const TRENDS: [(&str, Metric); 3] = [
    ("GPU utilization", Metric::GpuUtil),
    ("Allocated share", Metric::AllocShare),
    ("SM activity (DCGM)", Metric::SmActive),
];

/// What the newest analysis adds to the overview: funnel, findings by kind, freeable GPUs and
/// the tenants wasting most.
fn from_analysis(v: &mut pages::OverviewView, a: &Analysis) {
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
        "of {} in use · {} node(s) emptied · {} {}/month · {} steps",
        p.gpus_in_use,
        p.nodes_freed,
        web::format::num(p.money_per_month),
        p.currency,
        p.steps.len()
    );
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &a.findings {
        *counts.entry(f.kind.as_str()).or_default() += 1;
    }
    v.findings = counts.into_iter().map(|(k, n)| (k.into(), n)).collect();
    v.top_idle = tenant_lines(a, FindingKind::IdleAllocation, "idle_hours_in_runs", |h| {
        format!("{h:.0} h")
    });
    v.top_underutilized = tenant_lines(a, FindingKind::Underutilized, "effective_ratio", |r| {
        format!("{:.0} %", r * 100.0)
    });
    v.limitations = a.limitations.clone();
}
