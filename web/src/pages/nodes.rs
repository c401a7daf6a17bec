//! Nodes: the fleet's nodes, and one node with its GPUs, MIG instances and occupants.

use super::*;

#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub cluster: String,
    pub node: String,
    pub status: String,
    pub gpus: i64,
    pub models: String,
    /// How its GPUs are shared, as people read it ("MIG, time slicing").
    pub sharing_words: String,
    pub util: Option<f64>,
    pub class: String,
    pub last_sample: String,
    /// kWh its GPUs drew in the analysed window, where known.
    pub energy_kwh: Option<f64>,
}

/// The nodes table: the node (its link) and its GPU utilization first, as on a phone they
/// are what shows without scrolling; `query` is the search as typed.
pub fn nodes(frame: Frame, rows: Vec<NodeRow>, query: String, sort: Sort) -> String {
    document(frame, Nav::Nodes, move || {
        let empty = rows.is_empty();
        let gpus: i64 = rows.iter().map(|n| n.gpus).sum();
        let energy = rows
            .iter()
            .filter_map(|n| n.energy_kwh)
            .reduce(|a, b| a + b);
        let shown = rows.len();
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
                        <td><a href=format!("/nodes/{}", enc(&n.node))>{n.node.clone()}</a></td>
                        <td class="n">{n.util.map_or("–".into(), |u| format!("{u:.0} %"))}</td>
                        <td class=class>{n.status}</td>
                        <td class="n">{n.gpus}</td>
                        <td>{n.class}</td>
                        <td>{n.models}</td>
                        <td>{n.sharing_words}</td>
                        <td>{n.cluster}</td>
                        <td class="n">{n.energy_kwh.map_or("–".into(), num)}</td>
                        <td class="t">{n.last_sample}</td>
                    </tr>
                }
            })
            .collect_view();
        let why = if query.is_empty() {
            "no agent has reported yet (docs/agent.md: install the agent, or run `gpulens demo`)"
        } else {
            "no node, cluster or GPU model matches the search"
        };
        view! {
            <h1>"Nodes"</h1>
            <form class="filters" method="get" action="/nodes">
                <label for="q">"Search node, cluster or GPU model"<input id="q" name="q" value=query.clone()/></label>
                <button type="submit">"Filter"</button>
            </form>
            <div class="scroll"><table>
                <caption>"Every node that reports, with its GPU utilization over the last 24 hours, and its utilization class and the energy its GPUs drew from the analysis."</caption>
                <thead><tr>
                    {th("Node", "node", &sort, false)}{th("GPU util (24\u{a0}h)", "util", &sort, true)}{th("Status", "status", &sort, false)}
                    {th("GPUs", "gpus", &sort, true)}{th("Class", "class", &sort, false)}<th scope="col">"Models"</th><th scope="col">"Sharing"</th>
                    {th("Cluster", "cluster", &sort, false)}<th scope="col" class="n">"Energy (kWh)"</th>{th("Last sample (UTC)", "last", &sort, false)}
                </tr></thead>
                <tbody>{if empty { none_row(10, why) } else { body.into_any() }}</tbody>
                {(!empty).then(|| view! {
                    <tfoot><tr><th scope="row">{format!("Total, {}", model::figures::count(shown as f64, "node", "nodes"))}</th><td></td><td></td><td class="n">{gpus}</td><td></td><td></td><td></td><td></td><td class="n">{energy.map_or("–".into(), num)}</td><td></td></tr></tfoot>
                })}
            </table></div>
            {csv_link("/nodes", &sort)}
        }
        .into_any()
    })
}

/// The nodes table as CSV: the columns the page shows, in its order.
pub fn nodes_csv(rows: &[NodeRow]) -> String {
    use crate::csv::{field, number, table};
    table(
        &[
            "Node",
            "GPU util 24h (%)",
            "Status",
            "GPUs",
            "Class",
            "Models",
            "Sharing",
            "Cluster",
            "Energy (kWh)",
            "Last sample (UTC)",
        ],
        rows.iter().map(|n| {
            vec![
                field(&n.node),
                number(n.util),
                field(&n.status),
                n.gpus.to_string(),
                field(&n.class),
                field(&n.models),
                field(&n.sharing_words),
                field(&n.cluster),
                number(n.energy_kwh),
                field(&n.last_sample),
            ]
        }),
    )
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
    /// How it is shared, as people read it ("MIG").
    pub sharing_words: String,
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
    /// Per-GPU sharing mechanisms in place: "HAMi (seen)", "… (configured)".
    pub mechanisms: Vec<String>,
}

fn occupants(
    rows: Vec<Occupant>,
    caption: &'static str,
    (here, name): (&str, String),
) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="note">{caption}": nobody."</p> }.into_any();
    }
    let body = rows
        .into_iter()
        .map(|o| {
            view! {
                <tr>
                    <td><a href=format!("/tenants/{}", enc(&o.key))>{o.name}</a></td>
                    <td class="n">{num(o.allocated_hours)}</td>
                    <td class="n">{num(o.effective_hours)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div>
            <div class="scroll"><table><caption>{caption}</caption>
                <thead><tr><th scope="col">"Tenant"</th><th scope="col" class="n key">"Allocated GPU-h"</th><th scope="col" class="n">"Effective GPU-h"</th></tr></thead>
                <tbody>{body}</tbody>
            </table></div>
            {table_note(here, &name)}
        </div>
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
        let here = format!("{action}?range={}", enc(&v.range));
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
                                    .map(|(k, n)| view! { <a href=format!("/tenants/{}", enc(k))>{n.clone()}</a>" " })
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
                            <thead><tr><th scope="col">"Held by (last 24 h)"</th><th scope="col" class="key">"Profile"</th><th scope="col" class="n">"Memory GiB"</th><th scope="col" class="n">"GI"</th><th scope="col" class="n">"CI"</th><th scope="col">"Placement"</th></tr></thead>
                            <tbody>{rows}</tbody>
                        </table></div>
                        {table_note(&here, &format!("mig-{}", g.index))}
                    }
                });
                let charts = g.charts.iter().map(|c| raw(chart::svg(c))).collect_view();
                let title = format!("GPU {} · {} · {} · {:.0} GiB", g.index, g.model, g.sharing_words, g.memory_gib);
                view! {
                    <section class="gpu" aria-label=title.clone()>
                        <h2><a href=format!("/gpus/{}", enc(&g.uuid))>{title.clone()}</a></h2>
                        <p class="meta"><code>{g.uuid.clone()}</code></p>
                        {mig}
                        <div class="grid2">
                            {occupants(g.now, "On the device now (newest hour)", (&here, format!("now-{}", g.index)))}
                            {occupants(g.range, "Over the range", (&here, format!("range-{}", g.index)))}
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
            {(!v.mechanisms.is_empty()).then(|| view! { <p class="meta">{format!("Per-GPU sharing in place: {}", v.mechanisms.join(", "))}</p> })}
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

/// A node's (or a GPU's) page's tables as CSV, per GPU by its index: its MIG instances
/// (`mig-N`), who holds it now (`now-N`) and over the range (`range-N`).
pub fn node_tables(v: &NodeView) -> Vec<TableCsv> {
    use crate::csv::{field, number};
    let occupants = |name: String, rows: &[Occupant]| {
        TableCsv::new(
            name,
            &["Tenant", "Allocated GPU-h", "Effective GPU-h", "Tenant key"],
            rows.iter().map(|o| {
                vec![
                    field(&o.name),
                    number(Some(o.allocated_hours)),
                    number(Some(o.effective_hours)),
                    field(&o.key),
                ]
            }),
        )
    };
    let mut out = Vec::new();
    for g in &v.gpus {
        out.push(TableCsv::new(
            format!("mig-{}", g.index),
            &[
                "Held by (last 24 h)",
                "Profile",
                "Memory GiB",
                "GI",
                "CI",
                "Placement",
            ],
            g.mig.iter().map(|m| {
                let holders: Vec<&str> = m.holders.iter().map(|(_, n)| n.as_str()).collect();
                vec![
                    field(&holders.join("; ")),
                    field(&m.profile),
                    number(Some(m.memory_gib)),
                    m.gi.to_string(),
                    m.ci.to_string(),
                    field(&m.placement),
                ]
            }),
        ));
        out.push(occupants(format!("now-{}", g.index), &g.now));
        out.push(occupants(format!("range-{}", g.index), &g.range));
    }
    out
}
