//! The overview: the fleet's funnel, trends, the plan's first steps, top tenants and wasters.

use super::*;

/// The fleet's funnel over the analysed window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FunnelView {
    pub capacity: f64,
    pub allocated: f64,
    pub active: f64,
    pub effective: f64,
    pub waste: f64,
    pub cost: f64,
    pub waste_cost: f64,
    pub currency: String,
    pub effective_ratio: Option<f64>,
    pub signal: String,
    /// The GPUs' energy over the window, where known.
    pub energy: Option<EnergyFigures>,
}

/// What the fleet's GPUs drew, in kWh: in all, charged to allocations that ran no kernel, and
/// charged to no tenant; with its emissions where a grid intensity is set.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EnergyFigures {
    pub kwh: f64,
    pub idle_kwh: f64,
    pub unallocated_kwh: f64,
    pub co2e_kg: Option<f64>,
}

impl EnergyFigures {
    /// The energy card's line under the figure.
    fn line(&self) -> String {
        let emissions = self.co2e_kg.map_or_else(
            || "no grid intensity set for emissions".to_owned(),
            |kg| format!("{} kg CO₂e", num(kg)),
        );
        format!(
            "{emissions}; {} kWh on GPUs nobody held",
            num(self.unallocated_kwh)
        )
    }

    /// The idle energy card's line: its share of the whole.
    fn idle_line(&self) -> String {
        let share = (self.kwh > 0.0).then(|| self.idle_kwh / self.kwh);
        format!(
            "{} of the energy, drawn by allocated GPUs that ran no kernel",
            pct(share)
        )
    }
}

/// A tenant in a top list.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantLine {
    pub key: String,
    pub name: String,
    pub team: String,
    pub node: String,
    /// The GPUs of `node` with this finding for this tenant (the row stands for them all).
    pub gpus: usize,
    pub value: String,
    pub finding_id: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Trend {
    pub name: String,
    pub now: Option<f64>,
    pub before: Option<f64>,
    /// Relative change over the hours both periods have data; None without any.
    pub change: Option<f64>,
    /// Hours of the previous period with data, of `hours`.
    pub before_hours: usize,
    pub hours: usize,
    pub unit: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct OverviewView {
    /// The range the charts and trends cover (`24h`, `7d`, `30d`; empty for a custom one),
    /// and a custom from/to as typed.
    pub range: String,
    pub ranges: Vec<String>,
    pub from: String,
    pub to: String,
    /// The analysed window of the funnel and findings.
    pub window: String,
    pub analysed: bool,
    pub funnel: FunnelView,
    pub gpus: i64,
    pub nodes: usize,
    /// GPUs the fleet plan frees (non-overlapping: every GPU counted by one step).
    pub gpus_freeable: usize,
    /// The plan in a line: "of 12 in use · 1 node emptied · 4,380 USD/month · 5 steps".
    pub plan_line: String,
    pub findings: Vec<(String, usize)>,
    pub firing_alerts: usize,
    pub top_idle: Vec<TenantLine>,
    pub top_underutilized: Vec<TenantLine>,
    pub trends: Vec<Trend>,
    pub chart: Chart,
    pub limitations: Vec<String>,
    /// History batches loaded of the total while a bulk load (the demo's backfill) runs.
    pub loading: Option<(u64, u64)>,
    /// Tenants by the money their unused allocation cost, whether or not they have a finding.
    pub top_wasters: Vec<WasterLine>,
    /// Each team's waste over the analysed window, the most costly first.
    pub team_waste: Vec<TeamWasteLine>,
    /// GPUs × time, coloured by effective use, with allocation shown.
    pub heatmap: Option<chart::Heatmap>,
    /// The plan's first steps (most GPUs freed first).
    pub actions: Vec<ActionLine>,
    /// The waste cost at the rate of the hours of data behind it, over a month (730 hours).
    pub waste_per_month: Option<String>,
    /// How long the analysed window is, and how much of it has data when not nearly all:
    /// "7 days analysed", "7 days analysed (data for about 24 hours)".
    pub window_length: String,
    /// Work that waited for GPUs beside idle holdings (waiting_demand findings), largest first.
    pub waiting: Vec<DemandLine>,
    /// Each pool's demand ahead at the forecast, those that run out first.
    pub capacity: Vec<OutlookLine>,
    /// How far the forecast looks, e.g. "4 weeks"; empty without a forecast.
    pub horizon: String,
}

/// One pool's demand forecast as the overview shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct OutlookLine {
    /// `cluster / model`.
    pub pool: String,
    pub gpus: f64,
    /// GPU-equivalents held and waited for over the history's last day.
    pub held_now: f64,
    pub waiting_now: f64,
    /// Held and waited for over the horizon's last day, at the forecast.
    pub demand_ahead: Option<f64>,
    /// When it runs out, in words ("keeps GPUs free" when it does not).
    pub runs_out: String,
    /// Whether it runs out within the horizon at the forecast or its band.
    pub short: bool,
    /// The forecast's measured error, or why there is none.
    pub error: String,
}

/// "Capacity ahead": each pool's demand forecast and when it runs out of GPUs.
fn capacity_table(rows: Vec<OutlookLine>, horizon: String, here: &str) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="note">"No forecast yet: it needs two days of history (docs/analytics.md, \"Demand forecast\")."</p> }.into_any();
    }
    let body = rows
        .into_iter()
        .map(|r| {
            view! {
                <tr>
                    <td>{r.pool}</td>
                    <td class="n">{num(r.gpus)}</td>
                    <td class="n">{num(r.held_now)}</td>
                    <td class="n">{num(r.waiting_now)}</td>
                    <td class="n">{r.demand_ahead.map(num).unwrap_or_else(|| "–".into())}</td>
                    <td class=if r.short { "warn" } else { "" }>{r.runs_out}</td>
                    <td>{r.error}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="scroll"><table><thead><tr><th scope="col">"Pool"</th><th scope="col" class="n">"GPUs"</th><th scope="col" class="n">"Held now"</th><th scope="col" class="n">"Waiting now"</th><th scope="col" class="n key">{format!("Held + waiting in {horizon}")}</th><th scope="col">"Runs out"</th><th scope="col">"Forecast error"</th></tr></thead><tbody>{body}</tbody></table></div>
        {table_note(here, "capacity")}
        <p class="note">"Held and waiting are GPU-equivalents (a day's mean); the forecast is a weekly and daily season with a trend fitted to the pools' recorded history; its error is measured by fitting it a week (on a short history a day) earlier and comparing with what followed. "<a href="/api/v1/forecast">"Hour by hour: /api/v1/forecast"</a>"."</p>
    }
    .into_any()
}

/// One team's waiting work in one pool (a waiting_demand finding), as the overview shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DemandLine {
    pub finding_id: String,
    pub team: String,
    /// The GPU product waited for, or "any GPU".
    pub pool: String,
    pub waited_gpu_hours: f64,
    pub peak_gpus: f64,
    pub idle_held_gpu_hours: f64,
    pub reclaimable_gpu_hours: f64,
    /// What the reclaimable GPU-hours cost, e.g. "15 USD".
    pub reclaimable_cost: String,
    pub fragmented_gpu_hours: f64,
    /// The idle holders whose reclaim would have let the work run, by name.
    pub holders: Vec<String>,
}

/// "Waiting while idle": each team's waiting work against the idle holdings of its pool.
fn demand_table(rows: Vec<DemandLine>, here: &str) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="note">"No work waited for GPUs in the analysed window, or none is read: pending pods are read when "<code>"[demand] pending_pods = true"</code>" (docs/demand.md)."</p> }.into_any();
    }
    let waited: f64 = rows.iter().map(|r| r.waited_gpu_hours).sum();
    let reclaimable: f64 = rows.iter().map(|r| r.reclaimable_gpu_hours).sum();
    // Teams that wait for one pool are each set against the same idle GPUs: "up to".
    let body = rows
        .into_iter()
        .map(|r| {
            let holders = if r.holders.is_empty() {
                "none idle".to_owned()
            } else {
                r.holders.join(", ")
            };
            view! {
                <tr>
                    <td><a href=format!("/findings/{}", enc(&r.finding_id))>{r.team}</a></td>
                    <td>{r.pool}</td>
                    <td class="n">{num(r.waited_gpu_hours)}</td>
                    <td class="n">{num(r.peak_gpus)}</td>
                    <td class="n">{num(r.idle_held_gpu_hours)}</td>
                    <td class="n">{num(r.reclaimable_gpu_hours)}</td>
                    <td class="n">{r.reclaimable_cost}</td>
                    <td class="n">{num(r.fragmented_gpu_hours)}</td>
                    <td>{holders}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <p><b>{format!("Work waited {} GPU-hours for GPUs; up to {} GPU-hours of it could have run on GPUs of its pool that were held idle meanwhile.", num(waited), num(reclaimable))}</b></p>
        <div class="scroll"><table>
            <caption>"Per team and GPU pool, hour by hour: reclaimable is the smaller of what waited and what was held idle in each hour; fragmented is work that waited while enough GPUs were free in total but not on one node."</caption>
            <thead><tr><th scope="col">"Team"</th><th scope="col">"Pool"</th><th scope="col" class="n key">"Waited GPU-h"</th><th scope="col" class="n">"Peak GPUs"</th><th scope="col" class="n">"Idle held GPU-h"</th><th scope="col" class="n">"Reclaimable GPU-h"</th><th scope="col" class="n">"Worth"</th><th scope="col" class="n">"Fragmented GPU-h"</th><th scope="col">"Idle holders"</th></tr></thead>
            <tbody>{body}</tbody>
        </table></div>
        {table_note(here, "waiting")}
    }
    .into_any()
}

/// A step of the plan, as the overview offers it.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionLine {
    pub id: String,
    pub summary: String,
    pub gpus_freed: f64,
    /// What the GPUs it frees cost a month, e.g. "≈ 1,095 USD a month".
    pub per_month: Option<String>,
    /// Whether approving its label change carries it out (otherwise people act on it).
    pub approvable: bool,
}

/// The overview's "what to do first": the top steps, what each frees, and where to approve.
fn action_list(rows: Vec<ActionLine>, plan_line: String) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="note">"Nothing to do: the plan frees no GPU in the analysed window ("{plan_line}")."</p> }.into_any();
    }
    let items = rows
        .into_iter()
        .map(|r| {
            let href = format!("/recommendations/{}", enc(&r.id));
            let act = if r.approvable {
                "Review and approve"
            } else {
                "Review: people act on it"
            };
            view! {
                <li>
                    <b>{if r.gpus_freed > 0.0 {
                        format!("Frees {}", model::figures::count(r.gpus_freed, "GPU", "GPUs"))
                    } else {
                        "First".to_owned()
                    }}</b>
                    {r.per_month.map(|m| format!(" · {m}"))}": "
                    {r.summary}" "
                    <a href=format!("{href}#apply")>{act}</a>
                </li>
            }
        })
        .collect_view();
    view! {
        <ol class="actions">{items}</ol>
        <p class="note"><a href="/recommendations">{format!("The whole plan: {plan_line}")}</a></p>
    }
    .into_any()
}

/// One team's allocated, effective and wasted GPU-hours over the analysed window.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamWasteLine {
    pub team: String,
    pub allocated_gpu_hours: f64,
    pub effective: Option<f64>,
    pub waste_gpu_hours: f64,
    pub waste_cost: f64,
}

/// Waste by team: what each team's allocations cost without being used.
fn team_waste_table(rows: Vec<TeamWasteLine>, currency: String, here: &str) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="note">"No team wasted GPU-hours in the analysed window."</p> }
            .into_any();
    }
    let waste: f64 = rows.iter().map(|r| r.waste_gpu_hours).sum();
    let allocated: f64 = rows.iter().map(|r| r.allocated_gpu_hours).sum();
    let total_cost = money(rows.iter().map(|r| r.waste_cost).sum(), &currency);
    let body = rows
        .into_iter()
        .map(|r| {
            let href = format!("/teams/{}", enc(&r.team));
            view! {
                <tr>
                    <td><a href=href>{r.team}</a></td>
                    <td class="n">{money(r.waste_cost, &currency)}</td>
                    <td class="n">{num(r.waste_gpu_hours)}</td>
                    <td class="n">{num(r.allocated_gpu_hours)}</td>
                    <td class="n">{pct(r.effective)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="scroll"><table>
            <caption>"Allocated GPU-hours not used, per team, the most costly first; a team links to its page"</caption>
            <thead><tr><th scope="col">"Team"</th><th scope="col" class="n key">"Waste"</th><th scope="col" class="n">"Waste GPU-h"</th><th scope="col" class="n">"Allocated GPU-h"</th><th scope="col" class="n">"Effective"</th></tr></thead>
            <tbody>{body}</tbody>
            <tfoot><tr><th scope="row">"Total of the teams shown"</th><td class="n">{total_cost}</td><td class="n">{num(waste)}</td><td class="n">{num(allocated)}</td><td></td></tr></tfoot>
        </table></div>
        {table_note(here, "teams")}
    }
    .into_any()
}

/// A tenant among the top wasters.
#[derive(Debug, Clone, PartialEq)]
pub struct WasterLine {
    pub key: String,
    pub name: String,
    pub team: String,
    pub waste_gpu_hours: f64,
    pub waste_cost: String,
    pub effective: Option<f64>,
    /// The tenant's most severe finding (id, kind), if any.
    pub finding: Option<(String, String)>,
}

fn tenant_table(
    rows: Vec<TenantLine>,
    what: &'static str,
    label: &'static str,
    (here, name): (&str, &str),
) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="note">"None in this window."</p> }.into_any();
    }
    let body = rows
        .into_iter()
        .map(|r| {
            let href = format!("/findings/{}", enc(&r.finding_id));
            let tenant = format!("/tenants/{}", enc(&r.key));
            view! {
                <tr>
                    <td><a href=tenant>{breakable(&r.name)}</a></td>
                    <td class="n"><a href=href>{r.value}</a></td>
                    <td>{r.team}</td>
                    <td>
                        <a href=format!("/nodes/{}", enc(&r.node))>{r.node.clone()}</a>
                        {(r.gpus > 1).then(|| format!(" ({}\u{a0}GPUs)", r.gpus))}
                    </td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="scroll"><table>
            <caption>{what}</caption>
            <thead><tr><th scope="col">"Tenant"</th><th scope="col" class="n key">{label}</th><th scope="col">"Team"</th><th scope="col">"Node"</th></tr></thead>
            <tbody>{body}</tbody>
        </table></div>
        {table_note(here, name)}
    }
    .into_any()
}

/// The trend table's rows: each fleet figure now, in the previous period, and the change.
fn trend_rows(trends: &[Trend]) -> impl IntoView + use<> {
    trends
        .iter()
        .map(|t| {
            let ch = match (t.change, t.before) {
                (Some(c), _) => crate::format::change(1.0 + c, 1.0),
                (None, Some(_)) => "too few hours".into(),
                (None, None) => "–".into(),
            };
            let before = match t.before {
                None => view! { "no previous data" }.into_any(),
                // A value from a sliver of the period is not a figure to compare with.
                Some(_) if t.before_hours * 10 < t.hours => view! {
                    "no comparable period"<br/>
                    <span class="note">{format!("data in {} of {} h", t.before_hours, t.hours)}</span>
                }
                .into_any(),
                Some(x) if t.before_hours < t.hours => view! {
                    {format!("{} {}", num(x), t.unit)}<br/>
                    <span class="note">{format!("{} of {} h", t.before_hours, t.hours)}</span>
                }
                .into_any(),
                Some(x) => view! { {format!("{} {}", num(x), t.unit)} }.into_any(),
            };
            view! {
                <tr>
                    <td>{t.name.clone()}</td>
                    <td class="n">{t.now.map_or("–".into(), |x| format!("{} {}", num(x), t.unit))}</td>
                    <td class="n">{before}</td>
                    <td class="n">{ch}</td>
                </tr>
            }
        })
        .collect_view()
}

/// What the page says before the first analysis: the history still loading, or none yet.
fn analysis_notice(loading: Option<(u64, u64)>, analysed: bool) -> Option<AnyView> {
    match loading {
        Some((done, total)) => Some(view! {
            <p class="notice" role="status"><b>"Loading history: "</b>{format!(
                "{done} of {total} batches ({} %). The funnel, findings and plan appear when the history is in and analysed (about a minute); charts show what has arrived so far. This page reloads itself.",
                done * 100 / total.max(1)
            )}</p>
        }.into_any()),
        None if !analysed => Some(view! { <p class="error">"No analysis yet: the first one runs shortly after the collector starts."</p> }.into_any()),
        None => None,
    }
}

/// The tenants whose allocations cost most without being used, with their finding if any.
fn waster_table(rows: Vec<WasterLine>, here: &str) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="note">"No waste in the analysed window."</p> }.into_any();
    }
    let body = rows
        .into_iter()
        .map(|r| {
            let finding = match &r.finding {
                Some((id, kind)) => {
                    view! { <a href=format!("/findings/{}", enc(id))>{format::kind(kind)}</a> }
                        .into_any()
                }
                None => view! { <span class="note">"none: below every finding's threshold"</span> }
                    .into_any(),
            };
            view! {
                <tr>
                    <td><a href=format!("/tenants/{}", enc(&r.key))>{breakable(&r.name)}</a></td>
                    <td>{r.team}</td>
                    <td class="n">{r.waste_cost}</td>
                    <td class="n">{num(r.waste_gpu_hours)}</td>
                    <td class="n">{pct(r.effective)}</td>
                    <td>{finding}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="scroll"><table>
            <caption>"Allocated GPU-hours not used (allocated − effective) × price, over the analysed window; a tenant without a finding can still waste."</caption>
            <thead><tr><th scope="col">"Tenant"</th><th scope="col">"Team"</th><th scope="col" class="n key">"Waste"</th><th scope="col" class="n">"Waste GPU-h"</th><th scope="col" class="n">"Effective"</th><th scope="col">"Finding"</th></tr></thead>
            <tbody>{body}</tbody>
        </table></div>
        {table_note(here, "wasters")}
    }
    .into_any()
}

pub fn overview(frame: Frame, v: OverviewView) -> String {
    document(frame, Nav::Overview, move || {
        let here = v.here();
        let f = v.funnel.clone();
        let funnel = chart::bars(
            &format!("Funnel, {}", v.window),
            "GPU-h",
            &[
                ("Capacity".into(), f.capacity, "#64748b"),
                ("Allocated".into(), f.allocated, "#1f5fa8"),
                ("Active".into(), f.active, "#3f88c5"),
                ("Effective".into(), f.effective, "#2e7d32"),
                ("Waste".into(), f.waste, "#b5471b"),
            ],
        );
        let ranges = range_select(&v.ranges, &v.range);
        let findings = v
            .findings
            .iter()
            .map(|(k, n)| {
                view! { <li><a href=format!("/findings?kind={k}")>{format::kind(k)}</a>": "<b>{*n}</b></li> }
            })
            .collect_view();
        let trends = trend_rows(&v.trends);
        let limitations = v
            .limitations
            .iter()
            .map(|l| view! { <li>{l.clone()}</li> })
            .collect_view();
        let not_analysed = analysis_notice(v.loading, v.analysed);
        let wasters = if v.analysed {
            waster_table(v.top_wasters.clone(), &here).into_any()
        } else {
            view! { <p class="note">"After the first analysis."</p> }.into_any()
        };
        let heatmap = v.heatmap.as_ref().map(|h| raw(chart::heatmap(h)));
        view! {
            <h1>"Fleet overview"</h1>
            {not_analysed}
            <form class="filters" method="get" action="/">
                {ranges}
                <label for="from">"or from (UTC)"<input id="from" name="from" type="datetime-local" value=v.from.clone()/></label>
                <label for="to">"to (UTC, empty: now)"<input id="to" name="to" type="datetime-local" value=v.to.clone()/></label>
                <button type="submit">"Show"</button>
                <span class="note">{if v.analysed {
                    format!("The cards, funnel, \"What to do first\", waiting work, waste tables and findings come from the scheduled analysis of {}; the range moves the charts, the heatmap and the trend.", v.window)
                } else {
                    "The cards, funnel, steps, waste tables and findings come after the first analysis; the range moves the charts, the heatmap and the trend.".to_owned()
                }}</span>
            </form>
            <section class="cards" aria-label="Key numbers">
                <div class="card">"Effective use"<b>{pct(f.effective_ratio)}</b><span>"of allocated GPU-hours"</span></div>
                <div class="card">"Waste"<b>{if v.analysed { money(f.waste_cost, &f.currency) } else { "–".into() }}</b><span>{if v.analysed { format!("in the {}: {} GPU-h of {} allocated{}", v.window_length, num(f.waste), num(f.allocated), v.waste_per_month.clone().map(|m| format!("; {m} a month at this rate")).unwrap_or_default()) } else { "after the first analysis".into() }}</span></div>
                <div class="card">"Cost"<b>{if v.analysed { money(f.cost, &f.currency) } else { "–".into() }}</b><span>"allocated GPU-hours × price"</span></div>
                {f.energy.map(|e| view! {
                    <div class="card">"Energy"<b>{format!("{} kWh", num(e.kwh))}</b><span>{e.line()}</span></div>
                    <div class="card">"Energy on idle allocations"<b>{format!("{} kWh", num(e.idle_kwh))}</b><span>{e.idle_line()}</span></div>
                })}
                <div class="card">"GPUs freeable"<b>{if v.analysed { v.gpus_freeable.to_string() } else { "–".into() }}</b><span>{if v.analysed { view! { <a href="/recommendations">{v.plan_line.clone()}</a> }.into_any() } else { "after the first analysis".into_any() }}</span></div>
                <div class="card">"Fleet"<b>{format!("{} GPUs", v.gpus)}</b><span><a href="/nodes">{format!("{} nodes", v.nodes)}</a></span></div>
                <div class="card">"Alerts firing"<b>{v.firing_alerts}</b><span><a href="/alerts">"see alerts"</a></span></div>
            </section>
            {v.analysed.then(|| view! {
                <section aria-labelledby="h-do"><h2 id="h-do">"What to do first"</h2>{action_list(v.actions.clone(), v.plan_line.clone())}</section>
            })}
            {v.analysed.then(|| view! {
                <section aria-labelledby="h-wait"><h2 id="h-wait">"Waiting while idle"</h2>{demand_table(v.waiting.clone(), &here)}</section>
            })}
            {v.analysed.then(|| view! {
                <section aria-labelledby="h-capacity"><h2 id="h-capacity">"Capacity ahead"</h2>{capacity_table(v.capacity.clone(), v.horizon.clone(), &here)}</section>
            })}
            <div class="grid2">
                <section aria-labelledby="h-funnel"><h2 id="h-funnel">"Where the GPU-hours go"</h2>{if v.analysed { raw(funnel).into_any() } else { view! { <p class="note">"The funnel appears after the first analysis."</p> }.into_any() }}
                    {(!f.signal.is_empty()).then(|| view! { <p class="note">"Effective use rests on " {f.signal.clone()} "."</p> })}</section>
                <section aria-labelledby="h-trend"><h2 id="h-trend">"Trend against the previous period"</h2>
                    <div class="scroll"><table><thead><tr><th scope="col">"Fleet"</th><th scope="col" class="n">"This period"</th><th scope="col" class="n">"Previous"</th><th scope="col" class="n key">"Change"</th></tr></thead><tbody>{trends}</tbody></table></div>
                    {table_note(&here, "trend")}
                    <p class="note">"Change compares the same hours of both periods where both have data (at least a tenth of the period)."</p>
                    <h2>"Findings"</h2>{if !v.analysed {
                        view! { <p class="note">"After the first analysis."</p> }.into_any()
                    } else if v.findings.is_empty() {
                        view! { <p class="note">"None in the analysed window."</p> }.into_any()
                    } else {
                        view! { <ul>{findings}</ul> }.into_any()
                    }}
                </section>
            </div>
            <section aria-labelledby="h-waste"><h2 id="h-waste">"Top wasters by money"</h2>{wasters}</section>
            {v.analysed.then(|| view! {
                <section aria-labelledby="h-team-waste"><h2 id="h-team-waste">"Waste by team"</h2>{team_waste_table(v.team_waste.clone(), v.funnel.currency.clone(), &here)}</section>
            })}
            {heatmap}
            {raw(chart::svg(&v.chart))}
            <div class="grid2">
                <section aria-labelledby="h-idle"><h2 id="h-idle">"Top idle allocations"</h2>{tenant_table(v.top_idle.clone(), "Held a GPU with no kernel for hours", "Idle hours", (&here, "idle"))}</section>
                <section aria-labelledby="h-under"><h2 id="h-under">"Top underutilized tenants"</h2>{tenant_table(v.top_underutilized.clone(), "Use far less of the GPU they hold", "Effective", (&here, "underutilized"))}</section>
            </div>
            <ul class="note">{limitations}</ul>
        }
        .into_any()
    })
}

impl OverviewView {
    /// The page's path with the range it shows, for its tables' download links.
    fn here(&self) -> String {
        if !self.range.is_empty() {
            format!("/?range={}", enc(&self.range))
        } else if !self.from.is_empty() {
            format!("/?from={}&to={}", enc(&self.from), enc(&self.to))
        } else {
            "/".to_owned()
        }
    }
}

/// The overview's tables as CSV, named as their download links name them; the same rows and
/// columns as shown, figures as numbers, each tenant's and finding's key beside its name.
pub fn overview_tables(v: &OverviewView) -> Vec<TableCsv> {
    use crate::csv::{field, number};
    let tenant_rows = |rows: &[TenantLine]| -> Vec<Vec<String>> {
        rows.iter()
            .map(|r| {
                vec![
                    field(&r.name),
                    field(&r.value),
                    field(&r.team),
                    field(&r.node),
                    r.gpus.to_string(),
                    field(&r.key),
                    field(&r.finding_id),
                ]
            })
            .collect()
    };
    let waste_col = format!("Waste ({})", v.funnel.currency);
    vec![
        waiting_csv(&v.waiting),
        capacity_csv(&v.capacity),
        TableCsv::new(
            "teams",
            &[
                "Team",
                &waste_col,
                "Waste GPU-h",
                "Allocated GPU-h",
                "Effective",
            ],
            v.team_waste.iter().map(|r| {
                vec![
                    field(&r.team),
                    number(Some(r.waste_cost)),
                    number(Some(r.waste_gpu_hours)),
                    number(Some(r.allocated_gpu_hours)),
                    number(r.effective),
                ]
            }),
        ),
        TableCsv::new(
            "wasters",
            &[
                "Tenant",
                "Team",
                "Waste",
                "Waste GPU-h",
                "Effective",
                "Finding",
                "Tenant key",
                "Finding id",
            ],
            v.top_wasters.iter().map(|r| {
                vec![
                    field(&r.name),
                    field(&r.team),
                    field(&r.waste_cost),
                    number(Some(r.waste_gpu_hours)),
                    number(r.effective),
                    field(r.finding.as_ref().map_or("", |(_, k)| k.as_str())),
                    field(&r.key),
                    field(r.finding.as_ref().map_or("", |(id, _)| id.as_str())),
                ]
            }),
        ),
        TableCsv::new(
            "idle",
            &[
                "Tenant",
                "Idle hours",
                "Team",
                "Node",
                "GPUs",
                "Tenant key",
                "Finding id",
            ],
            tenant_rows(&v.top_idle),
        ),
        TableCsv::new(
            "underutilized",
            &[
                "Tenant",
                "Effective",
                "Team",
                "Node",
                "GPUs",
                "Tenant key",
                "Finding id",
            ],
            tenant_rows(&v.top_underutilized),
        ),
        trend_csv(&v.trends),
    ]
}

/// The waiting-work table as CSV.
fn waiting_csv(rows: &[DemandLine]) -> TableCsv {
    use crate::csv::{field, number};
    TableCsv::new(
        "waiting",
        &[
            "Team",
            "Pool",
            "Waited GPU-h",
            "Peak GPUs",
            "Idle held GPU-h",
            "Reclaimable GPU-h",
            "Worth",
            "Fragmented GPU-h",
            "Idle holders",
            "Finding",
        ],
        rows.iter().map(|r| {
            vec![
                field(&r.team),
                field(&r.pool),
                number(Some(r.waited_gpu_hours)),
                number(Some(r.peak_gpus)),
                number(Some(r.idle_held_gpu_hours)),
                number(Some(r.reclaimable_gpu_hours)),
                field(&r.reclaimable_cost),
                number(Some(r.fragmented_gpu_hours)),
                field(&r.holders.join("; ")),
                field(&r.finding_id),
            ]
        }),
    )
}

/// The capacity-ahead table as CSV.
fn capacity_csv(rows: &[OutlookLine]) -> TableCsv {
    use crate::csv::{field, number};
    TableCsv::new(
        "capacity",
        &[
            "Pool",
            "GPUs",
            "Held now",
            "Waiting now",
            "Held + waiting at the horizon",
            "Runs out",
            "Forecast error",
        ],
        rows.iter().map(|r| {
            vec![
                field(&r.pool),
                number(Some(r.gpus)),
                number(Some(r.held_now)),
                number(Some(r.waiting_now)),
                number(r.demand_ahead),
                field(&r.runs_out),
                field(&r.error),
            ]
        }),
    )
}

/// The trend table as CSV: each figure's values and hours, the change as a fraction.
fn trend_csv(trends: &[Trend]) -> TableCsv {
    use crate::csv::{field, number};
    TableCsv::new(
        "trend",
        &[
            "Fleet",
            "Unit",
            "This period",
            "Previous",
            "Previous hours with data",
            "Hours",
            "Change",
        ],
        trends.iter().map(|t| {
            vec![
                field(&t.name),
                field(&t.unit),
                number(t.now),
                number(t.before),
                t.before_hours.to_string(),
                t.hours.to_string(),
                number(t.change),
            ]
        }),
    )
}
