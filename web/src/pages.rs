//! The pages: a view model each, and its rendering.

use leptos::prelude::*;

use crate::chart::{self, Chart};
use crate::format::{enc, money, num, pct};
use crate::{Frame, Nav, document};

/// Sorting of a table, carried in the URL (`sort`, `dir`) so links keep it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sort {
    /// The rest of the page's query string (filters, range), already encoded.
    pub base: String,
    pub key: String,
    pub desc: bool,
}

/// A column header that sorts by `key` when followed.
fn th(label: &'static str, key: &'static str, s: &Sort, numeric: bool) -> impl IntoView {
    let (dir, aria) = if s.key == key {
        if s.desc {
            ("asc", Some("descending"))
        } else {
            ("desc", Some("ascending"))
        }
    } else {
        ("desc", None)
    };
    let sep = if s.base.is_empty() { "" } else { "&" };
    let href = format!("?{}{sep}sort={key}&dir={dir}", s.base);
    let arrow = match aria {
        Some("descending") => " ▼",
        Some(_) => " ▲",
        None => "",
    };
    view! {
        <th scope="col" class=if numeric { "n" } else { "" } aria-sort=aria>
            <a href=href>{label}{arrow}</a>
        </th>
    }
}

/// The time-range selector of pages with charts.
fn range_select(ranges: &[String], current: &str) -> impl IntoView + use<> {
    let options = ranges
        .iter()
        .map(|r| {
            let selected = r == current;
            view! { <option value=r.clone() selected=selected>{r.clone()}</option> }
        })
        .collect_view();
    view! { <label for="range">"Time range"<select id="range" name="range">{options}</select></label> }
}

fn raw(html: String) -> impl IntoView {
    view! { <div inner_html=html></div> }
}

fn sev_class(s: &str) -> String {
    format!("sev-{s}")
}

/// What an empty table shows instead of bare headers: "None" and why, across its columns.
fn none_row(columns: usize, why: &str) -> AnyView {
    view! { <tr><td colspan=columns.to_string() class="note">{format!("None: {why}.")}</td></tr> }
        .into_any()
}

// ---------------------------------------------------------------- overview

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
}

/// A tenant in a top list.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantLine {
    pub key: String,
    pub name: String,
    pub team: String,
    pub node: String,
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

#[derive(Debug, Clone, PartialEq)]
pub struct OverviewView {
    /// The range the charts and trends cover (`24h`, `7d`, `30d`).
    pub range: String,
    pub ranges: Vec<String>,
    /// The analysed window of the funnel and findings.
    pub window: String,
    pub analysed: bool,
    pub funnel: FunnelView,
    pub gpus: i64,
    pub nodes: usize,
    /// GPUs the fleet plan frees (non-overlapping: every GPU counted by one step).
    pub gpus_freeable: usize,
    /// The plan in a line: "of 12 in use · 1 node(s) emptied · 4,380 USD/month · 5 steps".
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
    /// GPUs × time, coloured by effective use, with allocation shown.
    pub heatmap: Option<chart::Heatmap>,
    /// The plan's first steps (most GPUs freed first).
    pub actions: Vec<ActionLine>,
    /// The window's waste cost at the same rate over a month (730 hours).
    pub waste_per_month: Option<String>,
    /// How long the analysed window is, e.g. "7 days".
    pub window_length: String,
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
                    <b>{format!("Frees {:.0} GPU(s)", r.gpus_freed)}</b>
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

fn tenant_table(rows: Vec<TenantLine>, what: &'static str, label: &'static str) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="note">"None in this window."</p> }.into_any();
    }
    let body = rows
        .into_iter()
        .map(|r| {
            let href = format!("/findings/{}", enc(&r.finding_id));
            let tenant = format!("/tenants?q={}", enc(&r.key));
            view! {
                <tr>
                    <td><a href=tenant>{r.name}</a></td>
                    <td class="n"><a href=href>{r.value}</a></td>
                    <td>{r.team}</td>
                    <td><a href=format!("/nodes/{}", enc(&r.node))>{r.node.clone()}</a></td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="scroll"><table>
            <caption>{what}</caption>
            <thead><tr><th scope="col">"Tenant"</th><th scope="col" class="n">{label}</th><th scope="col">"Team"</th><th scope="col">"Node"</th></tr></thead>
            <tbody>{body}</tbody>
        </table></div>
    }
    .into_any()
}

/// The tenants whose allocations cost most without being used, with their finding if any.
fn waster_table(rows: Vec<WasterLine>) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="note">"No waste in the analysed window."</p> }.into_any();
    }
    let body = rows
        .into_iter()
        .map(|r| {
            let finding = match &r.finding {
                Some((id, kind)) => {
                    view! { <a href=format!("/findings/{}", enc(id))>{kind.replace('_', " ")}</a> }
                        .into_any()
                }
                None => view! { <span class="note">"none: below every finding's threshold"</span> }
                    .into_any(),
            };
            view! {
                <tr>
                    <td><a href=format!("/tenants?q={}", enc(&r.key))>{r.name}</a></td>
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
            <thead><tr><th scope="col">"Tenant"</th><th scope="col">"Team"</th><th scope="col" class="n">"Waste"</th><th scope="col" class="n">"Waste GPU-h"</th><th scope="col" class="n">"Effective"</th><th scope="col">"Finding"</th></tr></thead>
            <tbody>{body}</tbody>
        </table></div>
    }
    .into_any()
}

pub fn overview(frame: Frame, v: OverviewView) -> String {
    document(frame, Nav::Overview, move || {
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
                view! { <li><a href=format!("/findings?kind={k}")>{k.replace('_', " ")}</a>": "<b>{*n}</b></li> }
            })
            .collect_view();
        let trends = v
            .trends
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
            .collect_view();
        let limitations = v
            .limitations
            .iter()
            .map(|l| view! { <li>{l.clone()}</li> })
            .collect_view();
        let not_analysed = match v.loading {
            Some((done, total)) => Some(view! {
                <p class="notice" role="status"><b>"Loading history: "</b>{format!(
                    "{done} of {total} batches ({} %). The funnel, findings and plan appear when the history is in and analysed (about a minute); charts show what has arrived so far. This page reloads itself.",
                    done * 100 / total.max(1)
                )}</p>
            }.into_any()),
            None if !v.analysed => Some(view! { <p class="error">"No analysis yet: the first one runs shortly after the collector starts."</p> }.into_any()),
            None => None,
        };
        let wasters = if v.analysed {
            waster_table(v.top_wasters.clone()).into_any()
        } else {
            view! { <p class="note">"After the first analysis."</p> }.into_any()
        };
        let heatmap = v.heatmap.as_ref().map(|h| raw(chart::heatmap(h)));
        view! {
            <h1>"Fleet overview"</h1>
            {not_analysed}
            <form class="filters" method="get" action="/">
                {ranges}
                <button type="submit">"Show"</button>
                <span class="note">{if v.analysed {
                    format!("Funnel and findings: the scheduled analysis of {}; charts and trends: the selected range.", v.window)
                } else {
                    "Funnel and findings: after the first analysis; charts and trends: the selected range.".to_owned()
                }}</span>
            </form>
            <section class="cards" aria-label="Key numbers">
                <div class="card">"Effective use"<b>{pct(f.effective_ratio)}</b><span>"of allocated GPU-hours"</span></div>
                <div class="card">"Waste"<b>{if v.analysed { money(f.waste_cost, &f.currency) } else { "–".into() }}</b><span>{if v.analysed { format!("in the {} analysed: {} GPU-h of {} allocated{}", v.window_length, num(f.waste), num(f.allocated), v.waste_per_month.clone().map(|m| format!("; {m} a month at this rate")).unwrap_or_default()) } else { "after the first analysis".into() }}</span></div>
                <div class="card">"Cost"<b>{if v.analysed { money(f.cost, &f.currency) } else { "–".into() }}</b><span>"allocated GPU-hours × price"</span></div>
                <div class="card">"GPUs freeable"<b>{v.gpus_freeable}</b><span><a href="/recommendations">{v.plan_line.clone()}</a></span></div>
                <div class="card">"Fleet"<b>{format!("{} GPUs", v.gpus)}</b><span><a href="/nodes">{format!("{} nodes", v.nodes)}</a></span></div>
                <div class="card">"Alerts firing"<b>{v.firing_alerts}</b><span><a href="/alerts">"see alerts"</a></span></div>
            </section>
            {v.analysed.then(|| view! {
                <section aria-labelledby="h-do"><h2 id="h-do">"What to do first"</h2>{action_list(v.actions.clone(), v.plan_line.clone())}</section>
            })}
            <div class="grid2">
                <section aria-labelledby="h-funnel"><h2 id="h-funnel">"Where the GPU-hours go"</h2>{if v.analysed { raw(funnel).into_any() } else { view! { <p class="note">"The funnel appears after the first analysis."</p> }.into_any() }}
                    {(!f.signal.is_empty()).then(|| view! { <p class="note">"Effective use rests on " {f.signal.clone()} "."</p> })}</section>
                <section aria-labelledby="h-trend"><h2 id="h-trend">"Trend against the previous period"</h2>
                    <div class="scroll"><table><thead><tr><th scope="col">"Fleet"</th><th scope="col" class="n">"This period"</th><th scope="col" class="n">"Previous"</th><th scope="col" class="n">"Change"</th></tr></thead><tbody>{trends}</tbody></table></div>
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
            {heatmap}
            {raw(chart::svg(&v.chart))}
            <div class="grid2">
                <section aria-labelledby="h-idle"><h2 id="h-idle">"Top idle allocations"</h2>{tenant_table(v.top_idle.clone(), "Held a GPU with no kernel for hours", "Idle hours")}</section>
                <section aria-labelledby="h-under"><h2 id="h-under">"Top underutilized tenants"</h2>{tenant_table(v.top_underutilized.clone(), "Use far less of the GPU they hold", "Effective")}</section>
            </div>
            <ul class="note">{limitations}</ul>
        }
        .into_any()
    })
}

// ---------------------------------------------------------------- nodes

#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub cluster: String,
    pub node: String,
    pub status: String,
    pub gpus: i64,
    pub models: String,
    pub sharing: String,
    pub util: Option<f64>,
    pub class: String,
    pub last_sample: String,
}

pub fn nodes(frame: Frame, rows: Vec<NodeRow>, sort: Sort) -> String {
    document(frame, Nav::Nodes, move || {
        let empty = rows.is_empty();
        let body = rows
            .into_iter()
            .map(|n| {
                let class = if n.status == "reporting" {
                    "ok"
                } else {
                    "warn"
                };
                view! {
                    <tr>
                        <td>{n.cluster}</td>
                        <td><a href=format!("/nodes/{}", enc(&n.node))>{n.node.clone()}</a></td>
                        <td class=class>{n.status}</td>
                        <td class="n">{n.gpus}</td>
                        <td>{n.models}</td>
                        <td>{n.sharing}</td>
                        <td class="n">{n.util.map_or("–".into(), |u| format!("{u:.0} %"))}</td>
                        <td>{n.class}</td>
                        <td>{n.last_sample}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h1>"Nodes"</h1>
            <div class="scroll"><table>
                <caption>"Every node that reports, with its GPU utilization over the last 24 hours and its utilization class from the analysis."</caption>
                <thead><tr>
                    {th("Cluster", "cluster", &sort, false)}{th("Node", "node", &sort, false)}{th("Status", "status", &sort, false)}
                    {th("GPUs", "gpus", &sort, true)}<th scope="col">"Models"</th><th scope="col">"Sharing"</th>
                    {th("GPU util (24 h)", "util", &sort, true)}{th("Class", "class", &sort, false)}{th("Last sample (UTC)", "last", &sort, false)}
                </tr></thead>
                <tbody>{if empty { none_row(9, "no agent has reported yet (docs/agent.md: install the agent, or run `gpulens demo`)") } else { body.into_any() }}</tbody>
            </table></div>
        }
        .into_any()
    })
}

/// A tenant on a device.
#[derive(Debug, Clone, PartialEq)]
pub struct Occupant {
    pub key: String,
    pub name: String,
    pub allocated_hours: f64,
    pub effective_hours: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MigRow {
    pub profile: String,
    pub gi: i64,
    pub ci: i64,
    pub memory_gib: f64,
    pub placement: String,
    /// Tenants that held the instance in the last 24 hours: (key, name).
    pub holders: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GpuPanel {
    pub uuid: String,
    pub index: i64,
    pub model: String,
    pub sharing: String,
    pub memory_gib: f64,
    pub mig: Vec<MigRow>,
    /// Tenants holding the device in the newest hour.
    pub now: Vec<Occupant>,
    /// Tenants over the range, by allocated GPU-hours.
    pub range: Vec<Occupant>,
    pub charts: Vec<Chart>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    pub cluster: String,
    pub node: String,
    pub status: String,
    pub range: String,
    pub ranges: Vec<String>,
    /// Set on the single-GPU page.
    pub gpu: Option<String>,
    pub gpus: Vec<GpuPanel>,
    pub labels: Vec<(String, String)>,
    /// The newest analysis' findings on the node (or the GPU): id, severity, summary.
    pub findings: Vec<(String, String, String)>,
}

fn occupants(rows: Vec<Occupant>, caption: &'static str) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="note">{caption}": nobody."</p> }.into_any();
    }
    let body = rows
        .into_iter()
        .map(|o| {
            view! {
                <tr>
                    <td><a href=format!("/tenants?q={}", enc(&o.key))>{o.name}</a></td>
                    <td class="n">{num(o.allocated_hours)}</td>
                    <td class="n">{num(o.effective_hours)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="scroll"><table><caption>{caption}</caption>
            <thead><tr><th scope="col">"Tenant"</th><th scope="col" class="n">"Allocated GPU-h"</th><th scope="col" class="n">"Effective GPU-h"</th></tr></thead>
            <tbody>{body}</tbody>
        </table></div>
    }
    .into_any()
}

pub fn node(frame: Frame, v: NodeView) -> String {
    document(frame, Nav::Nodes, move || {
        let action = match &v.gpu {
            Some(u) => format!("/gpus/{}", enc(u)),
            None => format!("/nodes/{}", enc(&v.node)),
        };
        let ranges = range_select(&v.ranges, &v.range);
        let labels = v
            .labels
            .iter()
            .map(|(k, val)| view! { <li><code>{format!("{k}={val}")}</code></li> })
            .collect_view();
        let panels = v
            .gpus
            .clone()
            .into_iter()
            .map(|g| {
                let mig = (!g.mig.is_empty()).then(|| {
                    let rows = g
                        .mig
                        .iter()
                        .map(|m| {
                            let holders = if m.holders.is_empty() {
                                view! { <span class="note">"free"</span> }.into_any()
                            } else {
                                m.holders
                                    .iter()
                                    .map(|(k, n)| view! { <a href=format!("/tenants?q={}", enc(k))>{n.clone()}</a>" " })
                                    .collect_view()
                                    .into_any()
                            };
                            view! {
                                <tr><td>{holders}</td><td>{m.profile.clone()}</td><td class="n">{format!("{:.1}", m.memory_gib)}</td><td class="n">{m.gi}</td><td class="n">{m.ci}</td><td>{m.placement.clone()}</td></tr>
                            }
                        })
                        .collect_view();
                    view! {
                        <div class="scroll"><table><caption>"MIG instances"</caption>
                            <thead><tr><th scope="col">"Held by (last 24 h)"</th><th scope="col">"Profile"</th><th scope="col" class="n">"Memory GiB"</th><th scope="col" class="n">"GI"</th><th scope="col" class="n">"CI"</th><th scope="col">"Placement"</th></tr></thead>
                            <tbody>{rows}</tbody>
                        </table></div>
                    }
                });
                let charts = g.charts.iter().map(|c| raw(chart::svg(c))).collect_view();
                let title = format!("GPU {} · {} · {} · {:.0} GiB", g.index, g.model, g.sharing, g.memory_gib);
                view! {
                    <section class="gpu" aria-label=title.clone()>
                        <h2><a href=format!("/gpus/{}", enc(&g.uuid))>{title.clone()}</a></h2>
                        <p class="meta"><code>{g.uuid.clone()}</code></p>
                        {mig}
                        <div class="grid2">
                            {occupants(g.now, "On the device now (newest hour)")}
                            {occupants(g.range, "Over the range")}
                        </div>
                        <div class="grid2">{charts}</div>
                    </section>
                }
            })
            .collect_view();
        let heading = match (&v.gpu, v.gpus.first()) {
            (Some(_), Some(g)) => format!("GPU {} on node {}", g.index, v.node),
            _ => format!("Node {}", v.node),
        };
        let back = v.gpu.is_some().then(|| {
            view! { " · "<a href=format!("/nodes/{}", enc(&v.node))>{format!("all GPUs of {}", v.node)}</a> }
        });
        let findings = if v.findings.is_empty() {
            view! { <p class="note">"No finding in the newest analysis."</p> }.into_any()
        } else {
            let items = v
                .findings
                .iter()
                .map(|(id, sev, summary)| {
                    view! { <li><span class=sev_class(sev)>{sev.clone()}</span>" "<a href=format!("/findings/{}", enc(id))>{summary.clone()}</a></li> }
                })
                .collect_view();
            view! { <ul>{items}</ul> }.into_any()
        };
        view! {
            <h1>{heading}</h1>
            <p class="meta">{format!("cluster {} · {}", v.cluster, v.status)}{back}</p>
            <form class="filters" method="get" action=action>
                {ranges}
                <button type="submit">"Show"</button>
            </form>
            <h2>"Findings"</h2>
            {findings}
            <h2>"Advisory labels"</h2>
            {if v.labels.is_empty() {
                view! { <p class="note">"None: the newest analysis proposes no gpulens.io label for this node yet."</p> }.into_any()
            } else {
                view! { <ul>{labels}</ul> }.into_any()
            }}
            {panels}
        }
        .into_any()
    })
}

// ---------------------------------------------------------------- tenants and teams

#[derive(Debug, Clone, PartialEq)]
pub struct UseRow {
    pub key: String,
    pub name: String,
    pub team: String,
    pub kind: String,
    pub allocated: f64,
    pub effective: f64,
    pub ratio: Option<f64>,
    pub waste: f64,
    /// Use beyond the allocation (time-sliced or MPS replicas).
    pub borrowed: f64,
    pub cost: f64,
    pub findings: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UseView {
    pub teams: bool,
    pub window: String,
    pub currency: String,
    pub query: String,
    pub rows: Vec<UseRow>,
}

/// What the borrowed column means.
const BORROWED_NOTE: &str = "Borrowed: use beyond the allocation. On a time-sliced or MPS GPU a replica is a nominal share, and a tenant may use the time its idle neighbours leave; that use is not counted as effective (which never exceeds what was allocated), so allocated = effective + waste on every line.";

pub fn usage(frame: Frame, v: UseView, sort: Sort) -> String {
    let nav = if v.teams { Nav::Teams } else { Nav::Tenants };
    document(frame, nav, move || {
        // Shown where it matters: some line used more than it was allocated.
        let borrowed = v.rows.iter().any(|r| r.borrowed >= 0.05);
        let empty = v.rows.is_empty();
        let columns = if v.teams { 7 } else { 9 };
        let currency = v.currency.clone();
        let body = v
            .rows
            .into_iter()
            .map(|r| {
                let findings = if v.teams {
                    format!("/findings?team={}", enc(&r.key))
                } else {
                    format!("/findings?tenant={}", enc(&r.key))
                };
                view! {
                    <tr>
                        <td><a href=findings.clone()>{r.name}</a></td>
                        <td class="n">{num(r.allocated)}</td>
                        <td class="n">{num(r.effective)}</td>
                        <td class="n">{pct(r.ratio)}</td>
                        <td class="n">{num(r.waste)}</td>
                        {borrowed.then(|| view! { <td class="n">{num(r.borrowed)}</td> })}
                        <td class="n">{money(r.cost, &currency)}</td>
                        <td class="n"><a href=findings>{r.findings}</a></td>
                        {(!v.teams).then(|| view! { <td>{r.team.clone()}</td><td>{r.kind.clone()}</td> })}
                    </tr>
                }
            })
            .collect_view();
        let title = if v.teams { "Teams" } else { "Tenants" };
        let action = if v.teams { "/teams" } else { "/tenants" };
        view! {
            <h1>{title}</h1>
            <form class="filters" method="get" action=action>
                <label for="q">"Search"<input id="q" name="q" value=v.query.clone()/></label>
                <button type="submit">"Filter"</button>
            </form>
            <div class="scroll"><table>
                <caption>{format!("Allocation against use over {}: allocated = effective + waste; cost in {}.", v.window, v.currency)}</caption>
                <thead><tr>
                    {th(if v.teams { "Team" } else { "Tenant" }, "name", &sort, false)}
                    {th("Allocated GPU-h", "allocated", &sort, true)}{th("Effective GPU-h", "effective", &sort, true)}
                    {th("Effective", "ratio", &sort, true)}{th("Waste GPU-h", "waste", &sort, true)}
                    {borrowed.then(|| th("Borrowed GPU-h", "borrowed", &sort, true))}
                    {th("Cost", "cost", &sort, true)}
                    {th("Findings", "findings", &sort, true)}
                    {(!v.teams).then(|| view! { {th("Team", "team", &sort, false)}<th scope="col">"Kind"</th> })}
                </tr></thead>
                <tbody>{if empty { none_row(columns, "no line matches the search, or the newest analysis saw no allocation") } else { body.into_any() }}</tbody>
            </table></div>
            {borrowed.then(|| view! { <p class="note">{BORROWED_NOTE}</p> })}
        }
        .into_any()
    })
}

// ---------------------------------------------------------------- findings

#[derive(Debug, Clone, PartialEq)]
pub struct FindingRow {
    pub id: String,
    pub kind: String,
    pub severity: String,
    pub node: String,
    pub tenant: String,
    pub team: String,
    pub summary: String,
    /// The same finding of the same tenant on the node's other GPUs (a job's eight GPUs
    /// read as one row): their ids and GPUs.
    pub also: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FindingFilters {
    pub kind: String,
    pub severity: String,
    pub team: String,
    pub node: String,
    pub kinds: Vec<String>,
    pub teams: Vec<String>,
    pub nodes: Vec<String>,
}

fn select(id: &'static str, label: &'static str, value: &str, options: &[String]) -> impl IntoView {
    let opts = std::iter::once(String::new())
        .chain(options.iter().cloned())
        .map(|o| {
            let selected = o == value;
            let shown = if o.is_empty() {
                "any".to_owned()
            } else {
                o.clone()
            };
            view! { <option value=o selected=selected>{shown}</option> }
        })
        .collect_view();
    view! { <label for=id>{label}<select id=id name=id>{opts}</select></label> }
}

pub fn findings(frame: Frame, f: FindingFilters, rows: Vec<FindingRow>, sort: Sort) -> String {
    document(frame, Nav::Findings, move || {
        let count: usize = rows.iter().map(|r| 1 + r.also.len()).sum();
        let grouped = rows.iter().filter(|r| !r.also.is_empty()).count();
        let body = rows
            .into_iter()
            .map(|r| {
                let also = (!r.also.is_empty()).then(|| {
                    let links = r
                        .also
                        .iter()
                        .map(|(id, gpu)| view! { " " <a href=format!("/findings/{}", enc(id))><code>{gpu.clone()}</code></a> })
                        .collect_view();
                    view! { <br/><small>{format!("The same on {} more GPU(s) of this node:", r.also.len())}{links}</small> }
                });
                view! {
                    <tr>
                        <td><a href=format!("/findings/{}", enc(&r.id))>{r.summary}</a>{also}</td>
                        <td class=sev_class(&r.severity)>{r.severity.clone()}</td>
                        <td>{r.kind.replace('_', " ")}</td>
                        <td><a href=format!("/nodes/{}", enc(&r.node))>{r.node.clone()}</a></td>
                        <td>{r.tenant}</td>
                        <td>{r.team}</td>
                    </tr>
                }
            })
            .collect_view();
        let severities = ["info", "warning", "critical"].map(String::from);
        view! {
            <h1>"Findings"</h1>
            <form class="filters" method="get" action="/findings">
                {select("kind", "Kind", &f.kind, &f.kinds)}
                {select("severity", "At least", &f.severity, &severities)}
                {select("team", "Team", &f.team, &f.teams)}
                {select("node", "Node", &f.node, &f.nodes)}
                <button type="submit">"Filter"</button>
            </form>
            <div class="scroll"><table>
                <caption>{if grouped == 0 {
                    format!("{count} findings of the newest analysis")
                } else {
                    format!("{count} findings of the newest analysis; a tenant's same finding on several GPUs of a node is one row")
                }}</caption>
                <thead><tr>
                    <th scope="col">"What"</th>{th("Severity", "severity", &sort, false)}{th("Kind", "kind", &sort, false)}
                    {th("Node", "node", &sort, false)}<th scope="col">"Tenant"</th>{th("Team", "team", &sort, false)}
                </tr></thead>
                <tbody>{if count == 0 { none_row(6, "no finding of the newest analysis matches these filters") } else { body.into_any() }}</tbody>
            </table></div>
        }
        .into_any()
    })
}

#[derive(Debug, Clone, PartialEq)]
pub struct FindingView {
    pub id: String,
    pub kind: String,
    pub severity: String,
    pub node: String,
    pub gpu: Option<String>,
    pub tenants: Vec<(String, String)>,
    pub window: String,
    pub signal: String,
    pub summary: String,
    pub metrics: Vec<(String, String)>,
    pub charts: Vec<Chart>,
    /// Tables that belong to the evidence (distributions, events).
    pub tables: Vec<EvidenceTable>,
    /// What to do about it, in one sentence.
    pub action: Option<String>,
    pub recommendations: Vec<(String, String)>,
}

/// A table of a finding's evidence.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvidenceTable {
    pub caption: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

pub fn finding(frame: Frame, v: FindingView) -> String {
    document(frame, Nav::Findings, move || {
        let metrics = v
            .metrics
            .iter()
            .map(|(k, val)| view! { <tr><th scope="row">{k.clone()}</th><td class="n">{val.clone()}</td></tr> })
            .collect_view();
        let tenants = v
            .tenants
            .iter()
            .map(|(role, name)| view! { <li>{role.clone()}": "<b>{name.clone()}</b></li> })
            .collect_view();
        let recs = if v.recommendations.is_empty() {
            view! { <p class="note">"No step of the fleet plan answers it: act on it with the tenant or the node's owner, as \"What to do\" above says."</p> }.into_any()
        } else {
            let items = v
                .recommendations
                .iter()
                .map(|(id, s)| view! { <li><a href=format!("/recommendations/{}", enc(id))>{s.clone()}</a></li> })
                .collect_view();
            view! { <ul>{items}</ul> }.into_any()
        };
        let charts = v.charts.iter().map(|c| raw(chart::svg(c))).collect_view();
        let tables = v
            .tables
            .iter()
            .map(|t| {
                let head = t
                    .headers
                    .iter()
                    .map(|h| view! { <th scope="col">{h.clone()}</th> })
                    .collect_view();
                let rows = t
                    .rows
                    .iter()
                    .map(|r| {
                        let cells = r.iter().map(|c| view! { <td>{c.clone()}</td> }).collect_view();
                        view! { <tr>{cells}</tr> }
                    })
                    .collect_view();
                view! { <div class="scroll"><table><caption>{t.caption.clone()}</caption><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div> }
            })
            .collect_view();
        let action = v
            .action
            .clone()
            .map(|a| view! { <p class="notice"><b>"What to do: "</b>{a}</p> });
        let gpu = v.gpu.clone().map(|g| {
            view! { " · GPU "<a href=format!("/gpus/{}", enc(&g))><code>{g.clone()}</code></a> }
        });
        view! {
            <h1>{format!("{} finding", v.kind.replace('_', " "))}</h1>
            <p class="meta"><span class=sev_class(&v.severity)>{v.severity.clone()}</span>" · node "<a href=format!("/nodes/{}", enc(&v.node))>{v.node.clone()}</a>{gpu}" · "{v.window.clone()}</p>
            <p>{v.summary.clone()}</p>
            <ul>{tenants}</ul>
            {action}
            <h2>"Evidence"</h2>
            <p class="note">"Signal: "{v.signal.clone()}</p>
            {charts}
            {tables}
            <h2>"Numbers"</h2>
            <table><tbody>{metrics}</tbody></table>
            <h2>"Recommendations that answer it"</h2>
            {recs}
        }
        .into_any()
    })
}

// ---------------------------------------------------------------- recommendations

#[derive(Debug, Clone, PartialEq)]
pub struct RecRow {
    pub id: String,
    pub kind: String,
    pub node: String,
    pub team: String,
    pub gpus_freed: f64,
    pub confidence: f64,
    pub summary: String,
}

/// The fleet plan's totals and its pools, for the recommendations page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanView {
    pub gpus_in_use: usize,
    pub gpus_freed: usize,
    pub nodes_in_use: usize,
    pub nodes_freed: usize,
    pub bound: usize,
    pub efficiency: Option<f64>,
    pub money: f64,
    pub currency: String,
    pub steps: usize,
    pub pools: Vec<PlanPoolRow>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanPoolRow {
    pub pool: String,
    pub gpus_in_use: usize,
    pub bound: usize,
    pub gpus_after: usize,
    pub gpus_freed: usize,
    pub nodes: String,
    pub efficiency: Option<f64>,
    pub money: f64,
}

fn plan_section(p: PlanView) -> impl IntoView {
    let headline = format!(
        "Frees {} of {} GPUs in use ({} of {} nodes): {} a month.",
        p.gpus_freed,
        p.gpus_in_use,
        p.nodes_freed,
        p.nodes_in_use,
        money(p.money, &p.currency)
    );
    let bound = match p.efficiency {
        Some(e) => format!(
            "The recorded demand needs at least {} GPUs under the same headroom rules, so at most {} could be freed: this plan frees {} of that.",
            p.bound,
            p.gpus_in_use - p.bound.min(p.gpus_in_use),
            pct(Some(e))
        ),
        None => format!(
            "The recorded demand needs all {} GPUs in use under the same headroom rules: nothing more can be freed.",
            p.gpus_in_use
        ),
    };
    let currency = p.currency.clone();
    let rows = p
        .pools
        .into_iter()
        .map(|r| {
            view! {
                <tr>
                    <td>{r.pool}</td>
                    <td class="n">{r.gpus_in_use}</td>
                    <td class="n">{r.bound}</td>
                    <td class="n">{r.gpus_after}</td>
                    <td class="n">{r.gpus_freed}</td>
                    <td class="n">{r.nodes}</td>
                    <td class="n">{pct(r.efficiency)}</td>
                    <td class="n">{money(r.money, &currency)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <section aria-labelledby="h-plan">
            <h2 id="h-plan">"Fleet plan"</h2>
            <p><b>{headline}</b>" "{format!("{} steps below, each approvable on its own; every freed GPU is counted by one step.", p.steps)}</p>
            <p class="note">{bound}</p>
            <div class="scroll"><table>
                <caption>"By pool (one GPU model in one cluster)"</caption>
                <thead><tr>
                    <th scope="col">"Pool"</th><th scope="col" class="n">"GPUs in use"</th><th scope="col" class="n">"Bound"</th>
                    <th scope="col" class="n">"After"</th><th scope="col" class="n">"Freed"</th><th scope="col" class="n">"Nodes freed"</th>
                    <th scope="col" class="n">"Of the possible"</th><th scope="col" class="n">"Per month"</th>
                </tr></thead>
                <tbody>{rows}</tbody>
            </table></div>
        </section>
    }
}

/// A proposal the replay turned down, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct RejectedRow {
    pub kind: String,
    pub node: String,
    pub tenants: String,
    pub reason: String,
}

pub fn recommendations(
    frame: Frame,
    plan: Option<PlanView>,
    outcomes: Vec<OutcomeView>,
    rows: Vec<RecRow>,
    rejected_rows: Vec<RejectedRow>,
    sort: Sort,
) -> String {
    document(frame, Nav::Recommendations, move || {
        let count = rows.len();
        let rejected = rejected_rows.len();
        // The plan counts every step that frees GPUs; separating interfering tenants frees none.
        let separate = rows.iter().filter(|r| r.kind == "separate").count();
        let what = match (count - separate, separate) {
            (0, 0) => "No recommendations".to_owned(),
            (steps, 0) => format!("{steps} recommendations, the plan's steps"),
            (0, s) => format!("{s} recommendations to separate interfering tenants"),
            (steps, s) => format!(
                "{count} recommendations: the plan's {steps} steps, and {s} to separate interfering tenants (they free no GPU)"
            ),
        };
        let turned_down = (!rejected_rows.is_empty()).then(|| {
            let body = rejected_rows
                .iter()
                .map(|r| {
                    view! {
                        <tr>
                            <td>{r.kind.replace('_', " ")}</td>
                            <td><a href=format!("/nodes/{}", enc(&r.node))>{r.node.clone()}</a></td>
                            <td>{r.tenants.clone()}</td>
                            <td>{r.reason.clone()}</td>
                        </tr>
                    }
                })
                .collect_view();
            view! {
                <h2>"Turned down by the replay"</h2>
                <div class="scroll"><table>
                    <caption>"Proposals that were considered and not made: replayed hour by hour against the recorded demand, they would have hurt a tenant."</caption>
                    <thead><tr><th scope="col">"Kind"</th><th scope="col">"Node"</th><th scope="col">"Tenants"</th><th scope="col">"Why not"</th></tr></thead>
                    <tbody>{body}</tbody>
                </table></div>
            }
        });
        let body = rows
            .into_iter()
            .map(|r| {
                view! {
                    <tr>
                        <td><a href=format!("/recommendations/{}", enc(&r.id))>{r.summary}</a></td>
                        <td class="n">{format!("{:.0}", r.gpus_freed)}</td>
                        <td>{r.kind.replace('_', " ")}</td>
                        <td><a href=format!("/nodes/{}", enc(&r.node))>{r.node.clone()}</a></td>
                        <td>{r.team}</td>
                        <td class="n">{format!("{:.0} %", r.confidence * 100.0)}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h1>"Recommendations"</h1>
            {plan.map(plan_section)}
            {(!outcomes.is_empty()).then(|| outcomes_section(outcomes))}
            <div class="scroll"><table>
                <caption>{format!("{what}, each replayed against the recorded demand; {rejected} proposal(s) turned down by the replay.")}</caption>
                <thead><tr>
                    <th scope="col">"What"</th>{th("GPUs freed", "freed", &sort, true)}
                    {th("Kind", "kind", &sort, false)}{th("Node", "node", &sort, false)}{th("Team", "team", &sort, false)}
                    {th("Confidence", "confidence", &sort, true)}
                </tr></thead>
                <tbody>{if count == 0 { none_row(6, "the newest analysis has no step: nothing to reclaim, share or consolidate that its replay accepts") } else { body.into_any() }}</tbody>
            </table></div>
            {turned_down}
        }
        .into_any()
    })
}

/// An applied step's outcome check, for the recommendations pages and the step's own page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutcomeView {
    pub action: i64,
    pub recommendation: String,
    pub kind: String,
    pub node: String,
    pub summary: String,
    pub applied: String,
    pub hours_after: usize,
    /// pending | as_predicted | better | worse, and in words.
    pub verdict: String,
    pub verdict_words: String,
    pub reasons: Vec<String>,
    /// (predicted, measured)
    pub gpus_freed: (f64, f64),
    pub contention_hours: (f64, f64),
    pub overflow_hours: f64,
    pub tenants: Vec<OutcomeTenantRow>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutcomeTenantRow {
    pub workload: String,
    pub effective: (String, String),
    pub memory: (String, String),
    pub contended: String,
}

fn verdict_class(v: &str) -> &'static str {
    match v {
        "worse" => "sev-critical",
        "pending" => "sev-info",
        _ => "",
    }
}

/// The applied steps' verdicts, one row each.
fn outcomes_section(rows: Vec<OutcomeView>) -> impl IntoView {
    let count = rows.len();
    let worse = rows.iter().filter(|o| o.verdict == "worse").count();
    let body = rows
        .into_iter()
        .map(|o| {
            view! {
                <tr>
                    <td><a href=format!("/nodes/{}", enc(&o.node))>{o.node.clone()}</a></td>
                    <td><a href=format!("/recommendations/{}", enc(&o.recommendation))>{o.kind.replace('_', " ")}</a></td>
                    <td>{o.applied.clone()}</td>
                    <td class=verdict_class(&o.verdict)>{o.verdict_words.clone()}</td>
                    <td class="n">{format!("{:.0} / {:.0}", o.gpus_freed.1, o.gpus_freed.0)}</td>
                    <td class="n">{format!("{:.0} / {:.0}", o.contention_hours.1, o.contention_hours.0)}</td>
                    <td class="n">{o.hours_after}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <section aria-labelledby="h-outcomes">
            <h2 id="h-outcomes">"Applied steps: measured against the prediction"</h2>
            <p class="note">{format!("{count} step(s) applied through label actions in the analysed window; {worse} turned out worse than replay predicted.")}</p>
            <div class="scroll"><table>
                <thead><tr>
                    <th scope="col">"Node"</th><th scope="col">"Step"</th><th scope="col">"Applied"</th><th scope="col">"Verdict"</th>
                    <th scope="col" class="n">"GPUs freed (measured / predicted)"</th><th scope="col" class="n">"Contended tenant-h (measured / predicted)"</th>
                    <th scope="col" class="n">"Hours since"</th>
                </tr></thead>
                <tbody>{body}</tbody>
            </table></div>
        </section>
    }
}

/// One applied step's check in full: verdict and why, totals, each moved workload.
fn outcome_detail(o: OutcomeView) -> impl IntoView {
    let reasons = o
        .reasons
        .iter()
        .map(|r| view! { <li>{r.clone()}</li> })
        .collect_view();
    let tenants = o
        .tenants
        .into_iter()
        .map(|t| {
            view! {
                <tr>
                    <td>{t.workload}</td>
                    <td class="n">{t.effective.0}</td><td class="n">{t.effective.1}</td>
                    <td class="n">{t.memory.0}</td><td class="n">{t.memory.1}</td>
                    <td class="n">{t.contended}</td>
                </tr>
            }
        })
        .collect_view();
    let rollback = (o.verdict == "worse").then(|| {
        view! {
            <p>"The collector offers the way back as a planned label action (the label's previous value), for an operator to approve: "
                <a href=format!("/api/v1/label-actions?node={}&state=planned", enc(&o.node))>"planned actions on "{o.node.clone()}</a>"."</p>
        }
    });
    let pending = (o.verdict == "pending").then(|| {
        view! { <p class="note">{format!("{} hour(s) recorded since the change; a verdict needs 6.", o.hours_after)}</p> }
    });
    view! {
        <section aria-labelledby="h-outcome">
            <h2 id="h-outcome">"Outcome since it was applied"</h2>
            <p class="meta">{format!("label action {} · applied {} · ", o.action, o.applied)}<b class=verdict_class(&o.verdict)>{o.verdict_words.clone()}</b></p>
            {pending}
            <ul>{reasons}</ul>
            {rollback}
            <div class="scroll"><table>
                <thead><tr><th scope="col"></th><th scope="col" class="n">"Predicted"</th><th scope="col" class="n">"Measured"</th></tr></thead>
                <tbody>
                    <tr><th scope="row">"GPUs freed"</th><td class="n">{format!("{:.0}", o.gpus_freed.0)}</td><td class="n">{format!("{:.0}", o.gpus_freed.1)}</td></tr>
                    <tr><th scope="row">"Contended tenant-hours"</th><td class="n">{format!("{:.0}", o.contention_hours.0)}</td><td class="n">{format!("{:.0}", o.contention_hours.1)}</td></tr>
                    <tr><th scope="row">"Tenant-hours memory did not fit"</th><td class="n">"0"</td><td class="n">{format!("{:.0}", o.overflow_hours)}</td></tr>
                </tbody>
            </table></div>
            <div class="scroll"><table>
                <caption>"Each moved workload, followed across pod re-creation"</caption>
                <thead><tr>
                    <th scope="col">"Workload"</th><th scope="col" class="n">"Effective before"</th><th scope="col" class="n">"after"</th>
                    <th scope="col" class="n">"Peak memory before"</th><th scope="col" class="n">"after"</th><th scope="col" class="n">"Contended hours after"</th>
                </tr></thead>
                <tbody>{tenants}</tbody>
            </table></div>
        </section>
    }
}

/// The page of a step that was applied and is no longer proposed: what it was and its outcome.
pub fn applied_step(frame: Frame, o: OutcomeView) -> String {
    document(frame, Nav::Recommendations, move || {
        view! {
            <h1>{format!("{} step (applied)", o.kind.replace('_', " "))}</h1>
            <p class="meta">"node "<a href=format!("/nodes/{}", enc(&o.node))>{o.node.clone()}</a></p>
            <p>{o.summary.clone()}</p>
            {outcome_detail(o)}
        }
        .into_any()
    })
}

/// The label change a recommendation would make, and whether this user may approve it.
#[derive(Debug, Clone, PartialEq)]
pub struct Actuation {
    pub mode: String,
    pub label: Option<String>,
    pub value: Option<String>,
    /// The planned action waiting for approval, if any.
    pub action_id: Option<i64>,
    pub action_state: Option<String>,
    /// Set when the signed-in operator may approve: the form's CSRF token.
    pub csrf: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RecView {
    pub id: String,
    pub kind: String,
    pub node: String,
    pub summary: String,
    pub confidence: f64,
    /// How the confidence is made, with this step's numbers.
    pub confidence_note: String,
    /// What the GPUs it frees cost a month, e.g. "≈ 1,095 USD a month".
    pub money_per_month: Option<String>,
    pub tenants: Vec<String>,
    pub replay: Vec<(String, String)>,
    pub configs: Vec<(String, String)>,
    pub findings: Vec<(String, String)>,
    /// Steps to carry out first, in order: (id, summary).
    pub requires: Vec<(String, String)>,
    pub actuation: Actuation,
    /// Set once the step was applied and checked.
    pub outcome: Option<OutcomeView>,
}

pub fn recommendation(frame: Frame, v: RecView) -> String {
    document(frame, Nav::Recommendations, move || {
        let replay = v
            .replay
            .iter()
            .map(|(k, val)| view! { <tr><th scope="row">{k.clone()}</th><td class="n">{val.clone()}</td></tr> })
            .collect_view();
        let configs = v
            .configs
            .iter()
            .map(|(name, text)| view! { <h3>{name.clone()}</h3><pre>{text.clone()}</pre> })
            .collect_view();
        let findings = v
            .findings
            .iter()
            .map(|(id, s)| view! { <li><a href=format!("/findings/{}", enc(id))>{s.clone()}</a></li> })
            .collect_view();
        let tenants = v
            .tenants
            .iter()
            .map(|t| view! { <li>{t.clone()}</li> })
            .collect_view();
        let requires = (!v.requires.is_empty()).then(|| {
            let steps = v
                .requires
                .iter()
                .map(|(id, s)| view! { <li><a href=format!("/recommendations/{}", enc(id))>{s.clone()}</a></li> })
                .collect_view();
            view! {
                <h2>"Carry out first"</h2>
                <p class="note">"This step moves tenants onto GPUs that these steps empty. Approving it approves their planned label changes with it, and they run first; a reclaim or a move has to be done by people before this step can be approved."</p>
                <ol>{steps}</ol>
            }
        });
        let a = v.actuation.clone();
        let act = match (&a.label, &a.value) {
            (Some(label), Some(value)) => {
                let what = format!("{label}={value} on {}", v.node);
                let control = match (a.action_id, a.csrf.clone()) {
                    (Some(id), Some(csrf)) if a.action_state.as_deref() == Some("planned") => view! {
                        <form method="post" action=format!("/recommendations/{}/approve", enc(&v.id))>
                            <input type="hidden" name="csrf" value=csrf/>
                            <input type="hidden" name="action" value=id.to_string()/>
                            <label><input type="checkbox" name="override_pods" value="true"/>" go ahead although GPU pods remain after the drain wait"</label>
                            <p><button type="submit">"Approve and apply"</button></p>
                        </form>
                    }
                    .into_any(),
                    (Some(id), _) => view! {
                        <p>{format!("Label action {id}: {}.", a.action_state.clone().unwrap_or_default())}
                            " "{(a.csrf.is_none() && a.action_state.as_deref() == Some("planned")).then(|| view! { <a href="/login">"Sign in as an operator to approve it."</a> })}
                            " "<a href=format!("/api/v1/label-actions?node={}", enc(&v.node))>"Audit trail"</a></p>
                    }
                    .into_any(),
                    (None, _) => view! { <p class="note">{format!("Label mode is {}: changes are planned only in apply-with-approval.", a.mode)}</p> }.into_any(),
                };
                view! { <p>"Applying it sets "<code>{what}</code>" through the guarded workflow (cordon, wait for GPU pods, label, watch, uncordon)."</p>{control} }.into_any()
            }
            _ => view! { <p class="note">"This recommendation changes no node label; act on it with the tenants."</p> }.into_any(),
        };
        view! {
            <h1>{format!("{} recommendation", v.kind.replace('_', " "))}</h1>
            <p class="meta">"node "<a href=format!("/nodes/{}", enc(&v.node))>{v.node.clone()}</a>{format!(" · confidence {:.0} %", v.confidence * 100.0)}{v.money_per_month.clone().map(|m| format!(" · saves {m}"))}</p>
            <p>{v.summary.clone()}</p>
            <p class="note">{v.confidence_note.clone()}</p>
            <h2>"Tenants"</h2><ul>{tenants}</ul>
            {requires}
            <h2>"Replay against the recorded demand"</h2>
            <table><tbody>{replay}</tbody></table>
            <h2 id="apply">"Apply"</h2>
            {act}
            {v.outcome.clone().map(outcome_detail)}
            <h2>"Generated configuration"</h2>
            {configs}
            <h2>"Findings it answers"</h2><ul>{findings}</ul>
        }
        .into_any()
    })
}

// ---------------------------------------------------------------- reports, alerts, sign-in

#[derive(Debug, Clone, PartialEq)]
pub struct ReportRow {
    pub week: String,
    pub timezone: String,
    pub summary: String,
    pub html: String,
    pub csv: String,
}

pub fn reports(frame: Frame, rows: Vec<ReportRow>) -> String {
    document(frame, Nav::Reports, move || {
        let empty = rows.is_empty().then(|| {
            view! { <p class="note">"No reports yet: one is made when a week is over, or run "<code>"gpulens report"</code>" (the newest complete week with data; "<code>"--week YYYY-Www"</code>" for another)."</p> }
        });
        let body = rows
            .into_iter()
            .map(|r| {
                view! {
                    <tr>
                        <td><a href=r.html.clone()>{r.week}</a></td>
                        <td><a href=r.html>"HTML"</a>" · "<a href=r.csv>"CSV"</a></td>
                        <td>{r.summary}</td><td>{r.timezone}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h1>"Weekly reports"</h1>
            {empty.is_none().then(|| view! {
                <div class="scroll"><table>
                    <thead><tr><th scope="col">"Week"</th><th scope="col">"Download"</th><th scope="col">"Summary"</th><th scope="col">"Time zone"</th></tr></thead>
                    <tbody>{body}</tbody>
                </table></div>
            })}
            {empty}
        }
        .into_any()
    })
}

#[derive(Debug, Clone, PartialEq)]
pub struct AlertRow {
    pub name: String,
    pub state: String,
    pub severity: String,
    pub node: String,
    /// The GPU the alert is about (empty for a node's or the fleet's).
    pub gpu: String,
    pub description: String,
    pub since: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NotificationRow {
    pub id: i64,
    pub receiver: String,
    pub status: String,
    pub state: String,
    pub attempts: i64,
    pub created: String,
    pub error: String,
}

pub fn alerts(frame: Frame, rows: Vec<AlertRow>, notes: Vec<NotificationRow>) -> String {
    document(frame, Nav::Alerts, move || {
        let count = rows.len();
        let no_notes = notes.is_empty();
        let body = rows
            .into_iter()
            .map(|r| {
                view! {
                    <tr>
                        <td>{r.name}</td><td><a href=format!("/nodes/{}", enc(&r.node))>{r.node.clone()}</a></td>
                        <td>{if r.gpu.is_empty() { "–".into_any() } else {
                            let short: String = r.gpu.chars().take(12).collect();
                            view! { <a href=format!("/gpus/{}", enc(&r.gpu)) title=r.gpu.clone()><code>{short}</code></a> }.into_any()
                        }}</td>
                        <td>{r.state}</td><td class=sev_class(&r.severity)>{r.severity.clone()}</td><td>{r.description}</td><td>{r.since}</td>
                    </tr>
                }
            })
            .collect_view();
        let notes = notes
            .into_iter()
            .map(|n| {
                view! {
                    <tr>
                        <td class="n">{n.id}</td><td>{n.receiver}</td><td>{n.status}</td><td>{n.state}</td>
                        <td class="n">{n.attempts}</td><td>{n.created}</td><td>{n.error}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h1>"Alerts"</h1>
            <div class="scroll"><table>
                <caption>{format!("{count} alerts: firing, pending and resolved in the last day (docs/alerts.md)")}</caption>
                <thead><tr><th scope="col">"Alert"</th><th scope="col">"Node"</th><th scope="col">"GPU"</th><th scope="col">"State"</th><th scope="col">"Severity"</th><th scope="col">"What"</th><th scope="col">"Since (UTC)"</th></tr></thead>
                <tbody>{if count == 0 { none_row(7, "no rule fired, was pending or resolved in the last day") } else { body.into_any() }}</tbody>
            </table></div>
            <h2>"Notifications"</h2>
            <div class="scroll"><table>
                <thead><tr><th scope="col" class="n">"Id"</th><th scope="col">"Receiver"</th><th scope="col">"Status"</th><th scope="col">"Delivery"</th><th scope="col" class="n">"Attempts"</th><th scope="col">"Made (UTC)"</th><th scope="col">"Last error"</th></tr></thead>
                <tbody>{if no_notes { none_row(7, "nothing was sent: no alert changed state, or no receiver is configured (docs/alerts.md)") } else { notes.into_any() }}</tbody>
            </table></div>
        }
        .into_any()
    })
}

/// What the sign-in page offers.
#[derive(Debug, Clone, Default)]
pub struct LoginView {
    pub error: Option<String>,
    /// Where to go once signed in.
    pub next: String,
    /// The single sign-on button's label, when OpenID Connect is configured.
    pub sso: Option<String>,
    /// Tokens (an operator's or a program's) can be typed in.
    pub tokens: bool,
    /// Reading needs no sign-in here.
    pub open: bool,
}

pub fn login(frame: Frame, v: LoginView) -> String {
    document(frame, Nav::None, move || {
        let error = v
            .error
            .map(|e| view! { <p class="error" role="alert">{e}</p> });
        let has_sso = v.sso.is_some();
        let sso = v.sso.map(|label| {
            let href = format!("/auth/oidc?next={}", crate::format::enc(&v.next));
            view! { <p><a class="button" href=href>{format!("Sign in with {label}")}</a></p> }
        });
        let open = v.open.then(|| view! {
            <p>"Reading needs no sign-in on this collector. Sign in to approve GPU Operator changes."</p>
        });
        let next = v.next.clone();
        let via_proxy = (!has_sso && !v.tokens).then(|| view! {
            <p>"No way to sign in here is configured: reach gpulens through your organisation's sign-in proxy, or ask its administrators for single sign-on or a token (docs/security.md)."</p>
        });
        let form = v.tokens.then(|| view! {
            <form method="post" action="/login" class="filters">
                <input type="hidden" name="next" value=next/>
                <label for="token">"Token"<input id="token" name="token" type="password" autocomplete="current-password" required=true/></label>
                <button type="submit">"Sign in"</button>
            </form>
            <p class="hint">"An operator's token ([[labels.operators]]) or a token from [[access.tokens]] in the collector's configuration."</p>
        });
        view! {
            <h1>"Sign in"</h1>
            {open}
            {error}
            {sso}
            {form}
            {via_proxy}
        }
        .into_any()
    })
}

/// The page after single sign-on: on to where the person was going.
pub fn signed_in(next: &str) -> String {
    let next_attr = crate::chart::esc(next);
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={next_attr}\"><title>Signed in · gpulens</title></head><body><p>Signed in. <a href=\"{next_attr}\">Continue</a>.</p></body></html>"
    )
}

/// A page for a missing thing or a bad request.
pub fn problem(frame: Frame, message: String) -> String {
    document(frame, Nav::None, move || {
        view! { <h1>"Not here"</h1><p class="error" role="alert">{message}</p><p><a href="/">"Back to the overview"</a></p> }.into_any()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_tables_say_none_and_why() {
        let html = alerts(Frame::default(), Vec::new(), Vec::new());
        assert!(html.contains("None: no rule fired"), "{html}");
        assert!(html.contains("None: nothing was sent"), "{html}");
        assert!(html.contains("colspan=\"7\""), "{html}");
        let sort = Sort {
            base: String::new(),
            key: "severity".into(),
            desc: false,
        };
        let filters = FindingFilters {
            kind: "interference".into(),
            severity: String::new(),
            team: String::new(),
            node: String::new(),
            kinds: Vec::new(),
            teams: Vec::new(),
            nodes: Vec::new(),
        };
        let html = findings(Frame::default(), filters, Vec::new(), sort);
        assert!(
            html.contains("None: no finding of the newest analysis matches"),
            "{html}"
        );
        let html = reports(Frame::default(), Vec::new());
        assert!(!html.contains("<table"), "no bare headers: {html}");
    }

    #[test]
    fn use_beyond_the_allocation_is_a_column_where_some_line_has_it() {
        // Effective never exceeds allocated; what a replica used beyond it is borrowed.
        let row = |name: &str, used: f64| UseRow {
            key: name.into(),
            name: name.into(),
            team: "ml".into(),
            kind: "pod".into(),
            allocated: 10.0,
            effective: used.min(10.0),
            ratio: Some(used.min(10.0) / 10.0),
            waste: 10.0 - used.min(10.0),
            borrowed: (used - 10.0).max(0.0),
            cost: 0.0,
            findings: 0,
        };
        let page = |rows| {
            usage(
                Frame::default(),
                UseView {
                    teams: false,
                    window: "7 days".into(),
                    currency: "USD".into(),
                    query: String::new(),
                    rows,
                },
                Sort {
                    base: String::new(),
                    key: "name".into(),
                    desc: false,
                },
            )
        };
        let html = page(vec![row("bursty", 22.7), row("steady", 5.0)]);
        assert!(html.contains("Borrowed GPU-h"), "{html}");
        assert!(html.contains("On a time-sliced or MPS GPU"), "{html}");
        assert!(html.contains("<td class=\"n\">12.7</td>"), "{html}");
        assert!(html.contains("<td class=\"n\">100 %</td>"), "{html}");
        assert!(!html.contains("227"), "{html}");
        let html = page(vec![row("steady", 5.0)]);
        assert!(!html.contains("Borrowed") && !html.contains("time-sliced"));
    }
}
