//! Findings: the filtered list, and one finding with its evidence.

use super::*;

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
    /// What the waste it names cost (the row's findings summed), where it names waste.
    pub waste_cost: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct FindingFilters {
    pub kind: String,
    pub severity: String,
    pub team: String,
    pub node: String,
    /// The search as typed (part of a summary, node, tenant or team).
    pub query: String,
    /// The range the findings' windows must meet (empty: every finding of the analysis), the
    /// ones offered, and a custom from/to as typed.
    pub range: String,
    pub ranges: Vec<String>,
    pub from: String,
    pub to: String,
    pub kinds: Vec<String>,
    pub teams: Vec<String>,
    pub nodes: Vec<String>,
    /// The currency of the waste-cost column.
    pub currency: String,
}

pub fn findings(frame: Frame, f: FindingFilters, rows: Vec<FindingRow>, sort: Sort) -> String {
    document(frame, Nav::Findings, move || {
        let count: usize = rows.iter().map(|r| 1 + r.also.len()).sum();
        let grouped = rows.iter().filter(|r| !r.also.is_empty()).count();
        let currency = f.currency.clone();
        let total_cost: Option<f64> = rows
            .iter()
            .filter_map(|r| r.waste_cost)
            .reduce(|a, b| a + b);
        let body = rows
            .into_iter()
            .map(|r| {
                let also = (!r.also.is_empty()).then(|| {
                    let links = r
                        .also
                        .iter()
                        .map(|(id, gpu)| view! { " " <a href=format!("/findings/{}", enc(id))><code>{gpu.clone()}</code></a> })
                        .collect_view();
                    view! { <br/><small>{format!("The same on {} more of this node:", model::figures::count(r.also.len() as f64, "GPU", "GPUs"))}{links}</small> }
                });
                view! {
                    <tr>
                        <td><a href=format!("/findings/{}", enc(&r.id))>{r.summary}</a>{also}</td>
                        <td class="n">{r.waste_cost.map(|c| money(c, &currency))}</td>
                        <td class=sev_class(&r.severity)>{r.severity.clone()}</td>
                        <td>{format::kind(&r.kind)}</td>
                        <td>{node_link(&r.node)}</td>
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
                {select("kind", "Kind", &f.kind, &f.kinds, format::kind)}
                {select("severity", "At least", &f.severity, &severities, str::to_owned)}
                {select("team", "Team", &f.team, &f.teams, str::to_owned)}
                {select("node", "Node", &f.node, &f.nodes, str::to_owned)}
                <label for="q">"Search"<input id="q" name="q" value=f.query.clone()/></label>
                {range_or_window(&f.ranges, &f.range)}
                <label for="from">"From (UTC)"<input id="from" name="from" type="datetime-local" value=f.from.clone()/></label>
                <label for="to">"To (UTC, empty: now)"<input id="to" name="to" type="datetime-local" value=f.to.clone()/></label>
                <button type="submit">"Filter"</button>
            </form>
            <div class="scroll"><table>
                <caption>{if grouped == 0 {
                    format!("{} of the newest analysis", model::figures::count(count as f64, "finding", "findings"))
                } else {
                    format!("{count} findings of the newest analysis; a tenant's same finding on several GPUs of a node is one row")
                }}</caption>
                <thead><tr>
                    <th scope="col">"What"</th>{th("Waste cost", "cost", &sort, true)}{th("Severity", "severity", &sort, false)}{th("Kind", "kind", &sort, false)}
                    {th("Node", "node", &sort, false)}<th scope="col">"Tenant"</th>{th("Team", "team", &sort, false)}
                </tr></thead>
                <tbody>{if count == 0 { none_row(7, "no finding of the newest analysis matches these filters") } else { body.into_any() }}</tbody>
                {total_cost.map(|c| view! {
                    <tfoot><tr><th scope="row">"Total of the rows shown"</th><td class="n">{money(c, &f.currency)}</td><td></td><td></td><td></td><td></td><td></td></tr></tfoot>
                })}
            </table></div>
            {csv_link("/findings", &sort)}
        }
        .into_any()
    })
}

/// The findings table as CSV: the columns the page shows (the finding's id beside its
/// summary, and the other GPUs of a grouped row).
pub fn findings_csv(rows: &[FindingRow], currency: &str) -> String {
    use crate::csv::{field, number, table};
    let cost = format!("Waste cost ({currency})");
    table(
        &[
            "What", "Finding", &cost, "Severity", "Kind", "Node", "Tenant", "Team", "Also on",
        ],
        rows.iter().map(|r| {
            let also: Vec<&str> = r.also.iter().map(|(_, gpu)| gpu.as_str()).collect();
            vec![
                field(&r.summary),
                field(&r.id),
                number(r.waste_cost),
                field(&r.severity),
                field(&format::kind(&r.kind)),
                field(&r.node),
                field(&r.tenant),
                field(&r.team),
                field(&also.join(" ")),
            ]
        }),
    )
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

impl EvidenceTable {
    /// Whether column `j` holds figures: not the first (it names the row), and every row's
    /// cell there starts with a digit.
    pub fn numeric(&self, j: usize) -> bool {
        j > 0
            && !self.rows.is_empty()
            && self.rows.iter().all(|r| {
                r.get(j)
                    .and_then(|c| c.chars().next())
                    .is_some_and(|c| c.is_ascii_digit())
            })
    }
}

pub fn finding(frame: Frame, v: FindingView) -> String {
    document(frame, Nav::Findings, move || {
        let here = format!("/findings/{}", enc(&v.id));
        let metrics = super::figures_table(&v.metrics);
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
            .enumerate()
            .map(|(i, t)| {
                // Columns of figures align right, as every other table's numbers do.
                let numeric: Vec<bool> = (0..t.headers.len()).map(|j| t.numeric(j)).collect();
                // Columns of sentences get a wide column on a phone, not a word a line.
                let long: Vec<bool> = (0..t.headers.len())
                    .map(|j| t.rows.iter().any(|r| r.get(j).is_some_and(|c| c.chars().count() > 40)))
                    .collect();
                let class = move |j: usize| {
                    if numeric.get(j).copied().unwrap_or(false) {
                        Some("n")
                    } else {
                        long.get(j).copied().unwrap_or(false).then_some("long")
                    }
                };
                // Its first column of figures is its key: on a phone it comes after the first.
                let key = (1..t.headers.len()).find(|&j| t.numeric(j));
                let head = t
                    .headers
                    .iter()
                    .enumerate()
                    .map(|(j, h)| {
                        let class = if Some(j) == key { Some("n key") } else { class(j) };
                        view! { <th scope="col" class=class>{h.clone()}</th> }
                    })
                    .collect_view();
                let rows = t
                    .rows
                    .iter()
                    .map(|r| {
                        let cells = r
                            .iter()
                            .enumerate()
                            .map(|(j, c)| view! { <td class=class(j)>{c.clone()}</td> })
                            .collect_view();
                        view! { <tr>{cells}</tr> }
                    })
                    .collect_view();
                view! {
                    <div class="scroll"><table><caption>{t.caption.clone()}</caption><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>
                    {table_note(&here, &format!("evidence-{}", i + 1))}
                }
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
            <h1>{format::kind_heading(&v.kind, "finding")}</h1>
            <p class="meta"><span class=sev_class(&v.severity)>{v.severity.clone()}</span>{if v.node.is_empty() { " · " } else { " · node " }}{node_link(&v.node)}{gpu}" · "{v.window.clone()}</p>
            <p>{v.summary.clone()}</p>
            <ul>{tenants}</ul>
            {action}
            <h2>"Evidence"</h2>
            <p class="note">"Signal: "{format::signal(&v.signal)}</p>
            {charts}
            {tables}
            <h2>"Numbers"</h2>
            {metrics}
            {table_note(&here, "numbers")}
            <h2>"Recommendations that answer it"</h2>
            {recs}
        }
        .into_any()
    })
}

/// A finding's page's tables as CSV: each evidence table (`evidence-1`, …) and its numbers.
pub fn finding_tables(v: &FindingView) -> Vec<TableCsv> {
    use crate::csv::field;
    let mut out: Vec<TableCsv> = v
        .tables
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let header: Vec<&str> = t.headers.iter().map(String::as_str).collect();
            TableCsv::new(
                format!("evidence-{}", i + 1),
                &header,
                t.rows.iter().map(|r| r.iter().map(|c| field(c)).collect()),
            )
        })
        .collect();
    out.push(super::figures_csv("numbers", &v.metrics));
    out
}
