//! Tenants and teams: allocated, effective, borrowed and wasted GPU-hours.

use super::*;

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
    /// What the waste cost: the money column the list sorts by.
    pub waste_cost: f64,
    pub findings: usize,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct UseView {
    pub teams: bool,
    /// The range the figures cover, said in words.
    pub window: String,
    /// The range picked (`24h`, `7d`, `30d`; empty: the analysed window), the ones offered, and
    /// a custom from/to as typed.
    pub range: String,
    pub ranges: Vec<String>,
    pub from: String,
    pub to: String,
    pub currency: String,
    pub query: String,
    pub rows: Vec<UseRow>,
}

/// What the borrowed column means.
const BORROWED_NOTE: &str = "Borrowed: use beyond the allocation. On a time-sliced or MPS GPU a replica is a nominal share, and a tenant may use the time its idle neighbours leave; that use is not counted as effective (which never exceeds what was allocated), so allocated = effective + waste on every line.";

/// The table as CSV: the rows and columns the page shows (Borrowed only where the page shows
/// it), numbers unrounded to four decimals.
pub fn usage_csv(teams: bool, currency: &str, rows: &[UseRow]) -> String {
    use crate::csv::{field, number, table};
    let borrowed = rows.iter().any(|r| r.borrowed >= 0.05);
    let cost = format!("Cost ({currency})");
    let waste_cost = format!("Waste cost ({currency})");
    let mut header = vec![
        if teams { "Team" } else { "Tenant" },
        "Allocated GPU-h",
        "Effective GPU-h",
        "Effective",
        "Waste GPU-h",
    ];
    if borrowed {
        header.push("Borrowed GPU-h");
    }
    header.extend([cost.as_str(), waste_cost.as_str(), "Findings"]);
    if !teams {
        header.extend(["Team", "Kind"]);
    }
    table(
        &header,
        rows.iter().map(|r| {
            let mut cells = vec![
                field(&r.name),
                number(Some(r.allocated)),
                number(Some(r.effective)),
                number(r.ratio),
                number(Some(r.waste)),
            ];
            if borrowed {
                cells.push(number(Some(r.borrowed)));
            }
            cells.extend([
                number(Some(r.cost)),
                number(Some(r.waste_cost)),
                r.findings.to_string(),
            ]);
            if !teams {
                cells.extend([field(&r.team), field(&r.kind)]);
            }
            cells
        }),
    )
}

pub fn usage(frame: Frame, v: UseView, sort: Sort) -> String {
    let nav = if v.teams { Nav::Teams } else { Nav::Tenants };
    document(frame, nav, move || {
        // Shown where it matters: some line used more than it was allocated.
        let borrowed = v.rows.iter().any(|r| r.borrowed >= 0.05);
        let empty = v.rows.is_empty();
        let columns = if v.teams { 8 } else { 10 };
        let currency = v.currency.clone();
        let total = |f: fn(&UseRow) -> f64| v.rows.iter().map(f).sum::<f64>();
        let (allocated, effective, waste) = (
            total(|r| r.allocated),
            total(|r| r.effective),
            total(|r| r.waste),
        );
        let (borrowed_h, cost, waste_cost, findings_n) = (
            total(|r| r.borrowed),
            total(|r| r.cost),
            total(|r| r.waste_cost),
            total(|r| r.findings as f64),
        );
        let shown = v.rows.len();
        let body = v
            .rows
            .into_iter()
            .map(|r| {
                let findings = if v.teams {
                    format!("/findings?team={}", enc(&r.key))
                } else {
                    format!("/findings?tenant={}", enc(&r.key))
                };
                let page = if v.teams {
                    format!("/teams/{}", enc(&r.key))
                } else {
                    format!("/tenants/{}", enc(&r.key))
                };
                view! {
                    <tr>
                        <td><a href=page>{breakable(&r.name)}</a></td>
                        <td class="n">{num(r.allocated)}</td>
                        <td class="n">{num(r.effective)}</td>
                        <td class="n">{pct(r.ratio)}</td>
                        <td class="n">{num(r.waste)}</td>
                        {borrowed.then(|| view! { <td class="n">{num(r.borrowed)}</td> })}
                        <td class="n">{money(r.cost, &currency)}</td>
                        <td class="n">{money(r.waste_cost, &currency)}</td>
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
                {range_or_window(&v.ranges, &v.range)}
                <label for="from">"From (UTC)"<input id="from" name="from" type="datetime-local" value=v.from.clone()/></label>
                <label for="to">"To (UTC, empty: now)"<input id="to" name="to" type="datetime-local" value=v.to.clone()/></label>
                <button type="submit">"Filter"</button>
            </form>
            <div class="scroll"><table>
                <caption>{format!("Allocation against use over {}: allocated = effective + waste; cost in {}.", v.window, v.currency)}</caption>
                <thead><tr>
                    {th(if v.teams { "Team" } else { "Tenant" }, "name", &sort, false)}
                    {th("Allocated GPU-h", "allocated", &sort, true)}{th("Effective GPU-h", "effective", &sort, true)}
                    {th("Effective", "ratio", &sort, true)}{th("Waste GPU-h", "waste", &sort, true)}
                    {borrowed.then(|| th("Borrowed GPU-h", "borrowed", &sort, true))}
                    {th("Cost", "cost", &sort, true)}{th("Waste cost", "waste_cost", &sort, true)}
                    {th("Findings", "findings", &sort, true)}
                    {(!v.teams).then(|| view! { {th("Team", "team", &sort, false)}<th scope="col">"Kind"</th> })}
                </tr></thead>
                <tbody>{if empty { none_row(columns, "no line matches the search, or the newest analysis saw no allocation") } else { body.into_any() }}</tbody>
                {(!empty).then(|| view! {
                    <tfoot><tr>
                        <th scope="row">{format!("Total of {shown} shown")}</th>
                        <td class="n">{num(allocated)}</td>
                        <td class="n">{num(effective)}</td>
                        <td class="n">{pct((allocated > 0.0).then(|| effective / allocated))}</td>
                        <td class="n">{num(waste)}</td>
                        {borrowed.then(|| view! { <td class="n">{num(borrowed_h)}</td> })}
                        <td class="n">{money(cost, &v.currency)}</td>
                        <td class="n">{money(waste_cost, &v.currency)}</td>
                        <td class="n">{findings_n}</td>
                        {(!v.teams).then(|| view! { <td></td><td></td> })}
                    </tr></tfoot>
                })}
            </table></div>
            {csv_link(action, &sort)}
            {borrowed.then(|| view! { <p class="note">{BORROWED_NOTE}</p> })}
        }
        .into_any()
    })
}
