//! One tenant's or one team's page: what it held, used, wasted and cost over the
//! analysed window, its findings, the plan's steps that move or interrupt it, waiting demand,
//! and — for a tenant — its allocation against its use drawn; for a team, its tenants.

use super::*;

/// A tenant or a team, as its page shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HolderView {
    pub name: String,
    /// "team" or the tenant's kind (pod, slurm job, host user).
    pub what: String,
    /// A tenant's team, linking to the team's page.
    pub team: Option<String>,
    pub window: String,
    /// (label, value) in the order shown: allocated, effective, share, waste, cost, …
    pub numbers: Vec<(String, String)>,
    /// A tenant's allocation against its effective use over the window.
    pub chart: Option<Chart>,
    /// (finding id, summary)
    pub findings: Vec<(String, String)>,
    /// (step id, how it touches this holder, summary)
    pub steps: Vec<(String, String, String)>,
    /// Pods waiting, in words.
    pub waiting: Vec<String>,
    /// A team's tenants: (key, name, waste GPU-h, cost).
    pub members: Vec<(String, String, f64, String)>,
    /// Its reclaim cases, newest first, in words.
    pub reclaim: Vec<String>,
    /// The page's own path (`/tenants/…`, `/teams/…`) with its range, which its tables'
    /// downloads extend.
    pub path: String,
    /// Whether `window` is a range the reader picked (else the scheduled analysis' window),
    /// and the range as picked: `24h`, `7d`, `30d`, or a custom from/to as typed.
    pub picked: bool,
    pub range: String,
    pub ranges: Vec<String>,
    pub from: String,
    pub to: String,
}

pub fn holder(frame: Frame, v: HolderView) -> String {
    let nav = if v.what == "team" {
        Nav::Teams
    } else {
        Nav::Tenants
    };
    document(frame, nav, move || {
        let numbers = super::figures_table(&v.numbers);
        let team = v.team.clone().map(|t| {
            view! { " · team "<a href=format!("/teams/{}", enc(&t))>{t.clone()}</a> }
        });
        let findings = if v.findings.is_empty() {
            view! { <p class="note">"No finding names it in this analysis."</p> }.into_any()
        } else {
            let items = v
                .findings
                .iter()
                .map(|(id, s)| view! { <li><a href=format!("/findings/{}", enc(id))>{s.clone()}</a></li> })
                .collect_view();
            view! { <ul>{items}</ul> }.into_any()
        };
        let steps = if v.steps.is_empty() {
            view! { <p class="note">"No step of the plan moves or interrupts it."</p> }.into_any()
        } else {
            let items = v
                .steps
                .iter()
                .map(|(id, how, s)| view! { <li><b>{how.clone()}</b>": "<a href=format!("/recommendations/{}", enc(id))>{s.clone()}</a></li> })
                .collect_view();
            view! { <ul>{items}</ul> }.into_any()
        };
        let waiting = (!v.waiting.is_empty()).then(|| {
            let items = v
                .waiting
                .iter()
                .map(|w| view! { <li>{w.clone()}</li> })
                .collect_view();
            view! { <h2>"Waiting for GPUs"</h2><ul>{items}</ul> }
        });
        let reclaim = (!v.reclaim.is_empty()).then(|| {
            let items = v.reclaim.iter().map(|c| view! { <li>{c.clone()}</li> }).collect_view();
            view! { <h2>"Reclaim cases"</h2><ul>{items}</ul><p class="note"><a href="/reclaim">"The reclaim loop's cases"</a></p> }
        });
        let members = (v.what == "team").then(|| {
            let rows = v
                .members
                .iter()
                .map(|(key, name, waste, cost)| {
                    view! {
                        <tr>
                            <td><a href=format!("/tenants/{}", enc(key))>{name.clone()}</a></td>
                            <td class="n">{num(*waste)}</td>
                            <td class="n">{cost.clone()}</td>
                        </tr>
                    }
                })
                .collect_view();
            view! {
                <h2>"Its tenants"</h2>
                <div class="scroll"><table>
                    <thead><tr><th scope="col">"Tenant"</th><th scope="col" class="n key">"Waste GPU-h"</th><th scope="col" class="n">"Cost"</th></tr></thead>
                    <tbody>{rows}</tbody>
                </table></div>
                {table_note(&v.path, "tenants")}
            }
        });
        view! {
            <h1>{v.name.clone()}</h1>
            <p class="meta">{v.what.clone()}{team}{format!(" · over {}", v.window)}</p>
            <form class="filters" method="get" action=v.path.split('?').next().unwrap_or_default().to_owned()>
                {range_or_window(&v.ranges, &v.range)}
                <label for="from">"From (UTC)"<input id="from" name="from" type="datetime-local" value=v.from.clone()/></label>
                <label for="to">"To (UTC, empty: now)"<input id="to" name="to" type="datetime-local" value=v.to.clone()/></label>
                <button type="submit">"Show"</button>
                <span class="note">{if v.picked {
                    "The numbers, the chart and its tenants' waste cover the selected range; findings and steps are the scheduled analysis'."
                } else {
                    "Everything here comes from the scheduled analysis' window; pick a range for the numbers and the chart over other days."
                }}</span>
            </form>
            {numbers}
            {table_note(&v.path, "numbers")}
            {v.chart.as_ref().map(|c| raw(chart::svg(c)))}
            {members}
            <h2>"Findings"</h2>
            {findings}
            <h2>"Steps of the plan that touch it"</h2>
            {steps}
            {waiting}
            {reclaim}
        }
        .into_any()
    })
}

/// A tenant's or team's page's tables as CSV: its numbers and, for a team, its tenants.
pub fn holder_tables(v: &HolderView) -> Vec<TableCsv> {
    use crate::csv::{field, number};
    let mut out = vec![super::figures_csv("numbers", &v.numbers)];
    if v.what == "team" {
        out.push(TableCsv::new(
            "tenants",
            &["Tenant", "Waste GPU-h", "Cost", "Tenant key"],
            v.members.iter().map(|(key, name, waste, cost)| {
                vec![field(name), number(Some(*waste)), field(cost), field(key)]
            }),
        ));
    }
    out
}
