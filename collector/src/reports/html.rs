//! The report as one self-contained HTML file: inline CSS and SVG, no script, no external
//! resource, laid out to print on A4.

use std::fmt::Write;

use analytics::FunnelRow;
use model::figures::count;
use model::time::rfc3339;
use web::chart::esc;
use web::format::{change, money, num, pct};

use super::content::{ReportData, TOP, WaitingRow};

const STYLE: &str = r#"
:root { --ink: #1b1f24; --muted: #57606a; --line: #d0d7de; --alloc: #3b6fb6; --active: #5a9bd5; --eff: #2e8b57; --waste: #c0504d; --cap: #8c959f; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink); margin: 2rem auto; max-width: 60rem; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid var(--line); padding-bottom: .2rem; }
.meta, .note { color: var(--muted); } .note { font-size: .9em; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; } td.n, th.n { text-align: right; } td.n, td.id { white-space: nowrap; }
.kpis { display: grid; grid-template-columns: repeat(4, 1fr); gap: .75rem; margin: 1rem 0; }
.kpi { border: 1px solid var(--line); border-radius: 6px; padding: .5rem .75rem; } .kpi b { display: block; font-size: 1.3rem; } .kpi span { color: var(--muted); font-size: .85em; }
svg text { font: 12px system-ui, sans-serif; fill: var(--ink); } svg .muted { fill: var(--muted); }
section { break-inside: avoid-page; }
@page { size: A4; margin: 14mm; }
@media screen and (max-width: 40rem) { body { margin: 1rem auto; font-size: 13px; } .kpis { grid-template-columns: repeat(2, 1fr); } table { display: block; overflow-x: auto; } th, td { padding: .2rem .35rem; } td:last-child:not(.n) { min-width: 14rem; } }
@media print { body { margin: 0; max-width: none; font-size: 11px; } h2 { break-after: avoid; } tr { break-inside: avoid; } }
"#;

/// Horizontal bars of the funnel, with last week's value as an outline for the trend.
fn funnel_chart(f: &FunnelRow, prev: Option<&FunnelRow>) -> String {
    let bars = [
        (
            "Capacity",
            f.capacity_gpu_hours.unwrap_or(0.0),
            prev.and_then(|p| p.capacity_gpu_hours),
            "var(--cap)",
        ),
        (
            "Allocated",
            f.allocated_gpu_hours,
            prev.map(|p| p.allocated_gpu_hours),
            "var(--alloc)",
        ),
        (
            "Active",
            f.active_gpu_hours,
            prev.map(|p| p.active_gpu_hours),
            "var(--active)",
        ),
        (
            "Effective",
            f.effective_gpu_hours,
            prev.map(|p| p.effective_gpu_hours),
            "var(--eff)",
        ),
        (
            "Waste",
            f.waste_gpu_hours,
            prev.map(|p| p.waste_gpu_hours),
            "var(--waste)",
        ),
    ];
    let max = bars
        .iter()
        .flat_map(|(_, v, p, _)| [*v, p.unwrap_or(0.0)])
        .fold(1.0_f64, f64::max);
    let (left, width, row) = (90.0, 420.0, 28.0);
    let h = row * bars.len() as f64 + 30.0;
    let mut s = format!(
        r#"<svg role="img" aria-labelledby="funnel-title" viewBox="0 0 640 {h}" width="100%" xmlns="http://www.w3.org/2000/svg"><title id="funnel-title">GPU-hours this week by funnel stage; outlines show the week before</title>"#
    );
    for (i, (name, v, p, color)) in bars.iter().enumerate() {
        let y = 10.0 + i as f64 * row;
        let w = v / max * width;
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{name}</text><rect x="{left}" y="{y}" width="{w:.1}" height="18" fill="{color}"><title>{name}: {} GPU-hours</title></rect><text x="{:.1}" y="{}">{} GPU-h</text>"#,
            left - 8.0,
            y + 13.0,
            num(*v),
            left + w + 6.0,
            y + 13.0,
            num(*v)
        );
        if let Some(p) = p {
            let pw = p / max * width;
            let _ = write!(
                s,
                r##"<rect x="{left}" y="{:.1}" width="{pw:.1}" height="20" fill="none" stroke="#1b1f24" stroke-dasharray="3 2"><title>{name}, week before: {} GPU-hours</title></rect>"##,
                y - 1.0,
                num(*p)
            );
        }
    }
    let _ = write!(
        s,
        r#"<text class="muted" x="{left}" y="{}">GPU-hours; dashed outline: the week before</text></svg>"#,
        h - 6.0
    );
    s
}

/// Allocated against effective GPU-hours per team (the teams wasting most).
fn team_chart(teams: &[FunnelRow]) -> String {
    let shown: Vec<&FunnelRow> = teams.iter().take(10).collect();
    if shown.is_empty() {
        return String::new();
    }
    let max = shown
        .iter()
        .map(|t| t.allocated_gpu_hours)
        .fold(1.0_f64, f64::max);
    let (left, width, row) = (150.0, 380.0, 34.0);
    let h = row * shown.len() as f64 + 36.0;
    let mut s = format!(
        r#"<svg role="img" aria-labelledby="teams-title" viewBox="0 0 640 {h}" width="100%" xmlns="http://www.w3.org/2000/svg"><title id="teams-title">Allocated and effective GPU-hours per team</title>"#
    );
    for (i, t) in shown.iter().enumerate() {
        let y = 8.0 + i as f64 * row;
        let wa = t.allocated_gpu_hours / max * width;
        let we = t.effective_gpu_hours / max * width;
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text><rect x="{left}" y="{y}" width="{wa:.1}" height="13" fill="var(--alloc)"><title>{}: {} GPU-hours allocated</title></rect><rect x="{left}" y="{}" width="{we:.1}" height="13" fill="var(--eff)"><title>{}: {} GPU-hours effective</title></rect><text x="{:.1}" y="{}">{} / {}</text>"#,
            left - 8.0,
            y + 18.0,
            esc(&t.key),
            esc(&t.key),
            num(t.allocated_gpu_hours),
            y + 14.0,
            esc(&t.key),
            num(t.effective_gpu_hours),
            left + wa.max(we) + 6.0,
            y + 18.0,
            num(t.allocated_gpu_hours),
            num(t.effective_gpu_hours)
        );
    }
    let _ = write!(
        s,
        r#"<rect x="{left}" y="{}" width="12" height="10" fill="var(--alloc)"/><text x="{}" y="{}">allocated</text><rect x="{}" y="{}" width="12" height="10" fill="var(--eff)"/><text x="{}" y="{}">effective (GPU-hours)</text></svg>"#,
        h - 18.0,
        left + 16.0,
        h - 9.0,
        left + 100.0,
        h - 18.0,
        left + 116.0,
        h - 9.0
    );
    s
}

/// A funnel table, one row per team, model or node; teams hold no capacity (`capacity` false:
/// no such column).
fn funnel_table(title: &str, rows: &[FunnelRow], currency: &str, capacity: bool) -> String {
    let mut s = String::new();
    let mut cols = vec![
        (title, Name),
        ("Capacity GPU-h", Num),
        ("Allocated GPU-h", Num),
        ("Effective GPU-h", Num),
        ("Effective", Num),
        ("Waste GPU-h", Num),
        // The cells carry the currency ("676 USD").
        ("Cost", Num),
        ("Waste cost", Num),
    ];
    if !capacity {
        cols.remove(1);
    }
    table_head(
        &mut s,
        Some(&count(rows.len() as f64, "row", "rows")),
        &cols,
    );
    for r in rows {
        let mut cells = vec![
            r.key.clone(),
            r.capacity_gpu_hours.map_or("–".into(), num),
            num(r.allocated_gpu_hours),
            num(r.effective_gpu_hours),
            pct(r.effective_ratio),
            num(r.waste_gpu_hours),
            money(r.cost, currency),
            money(r.waste_cost, currency),
        ];
        if !capacity {
            cells.remove(1);
        }
        table_row(&mut s, &cols, cells);
    }
    s.push_str("</tbody></table>");
    s
}

fn more(total: usize) -> String {
    if total > TOP {
        format!(
            "<p class=\"note\">Showing {TOP} of {total}; the full list is at /api/v1/findings and /api/v1/recommendations.</p>"
        )
    } else {
        String::new()
    }
}

/// Whether a column holds numbers (right-aligned), a short name kept on one line (a node, a
/// team, a GPU model, a kind: "gpu-h100-mig-01" broken at its hyphens reads as three words),
/// or text.
#[derive(Clone, Copy)]
enum Align {
    Text,
    Name,
    Num,
}

impl Align {
    fn class(self) -> &'static str {
        match self {
            Align::Text => "",
            Align::Name => " class=\"id\"",
            Align::Num => " class=\"n\"",
        }
    }
}

use Align::{Name, Num, Text};

/// The longest name kept on one line (a GPU model such as "NVIDIA H100 80GB HBM3" is 21).
const LONG_NAME: usize = 32;

/// A table's opening, its caption when given, and its head row.
fn table_head(s: &mut String, caption: Option<&str>, cols: &[(&str, Align)]) {
    s.push_str("<table>");
    if let Some(c) = caption {
        let _ = write!(s, "<caption class=\"note\">{}</caption>", esc(c));
    }
    s.push_str("<thead><tr>");
    for (heading, align) in cols {
        let _ = write!(
            s,
            "<th{} scope=\"col\">{}</th>",
            align.class(),
            esc(heading)
        );
    }
    s.push_str("</tr></thead><tbody>");
}

/// One row of text cells (escaped here), each aligned as its column.
fn table_row(s: &mut String, cols: &[(&str, Align)], cells: Vec<String>) {
    table_row_html(s, cols, cells.iter().map(|c| esc(c)).collect());
}

/// One row of cells that are HTML already (their text escaped by the caller).
fn table_row_html(s: &mut String, cols: &[(&str, Align)], cells: Vec<String>) {
    debug_assert_eq!(cols.len(), cells.len(), "a cell for every column");
    s.push_str("<tr>");
    for ((_, align), cell) in cols.iter().zip(cells) {
        // A name past `LONG_NAME` characters may break: kept whole, it would push the table
        // past the page (node names may run to 253).
        let align = match align {
            Name if cell.chars().count() > LONG_NAME => Text,
            other => *other,
        };
        let _ = write!(s, "<td{}>{cell}</td>", align.class());
    }
    s.push_str("</tr>");
}

/// A day as the header shows it: `Monday 9 November 2026`.
const DAY: &str = "%A %-d %B %Y";
/// A moment to the minute: `2026-11-17 01:00`.
const MINUTE: &str = "%Y-%m-%d %H:%M";

/// A time in the report's own time zone (the week's days are that zone's days), written
/// `format`.
fn local(ms: i64, zone: &jiff::tz::TimeZone, format: &str) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.to_zoned(zone.clone()).strftime(format).to_string(),
        Err(_) => rfc3339(ms),
    }
}

/// The whole document.
pub fn render(d: &ReportData) -> String {
    // The report's zone, read once; UTC when the name is not one (never stored: reports are
    // made for a checked zone).
    let zone = super::week::zone(&d.timezone).unwrap_or(jiff::tz::TimeZone::UTC);
    let mut s = String::with_capacity(64 * 1024);
    let _ = write!(
        s,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>gpulens weekly report {w}</title><style>{STYLE}</style></head><body>\n<header><h1>GPU utilization, week {w}</h1><p class=\"meta\">{} to {} ({}) · generated {} by gpulens</p></header>\n",
        local(d.from_ms, &zone, DAY),
        local(d.to_ms - 1, &zone, DAY),
        esc(&d.timezone),
        local(d.generated_ms, &zone, MINUTE),
        w = esc(&d.week)
    );
    headline(&mut s, d);
    funnel(&mut s, d);
    // Teams.
    s.push_str("<section><h2>Teams, namespaces and accounts</h2>");
    s.push_str(&team_chart(&d.teams));
    s.push_str(&funnel_table("Team", &d.teams, &d.currency, false));
    s.push_str("</section>\n");
    idle(&mut s, d);
    waiting(&mut s, d);
    interference(&mut s, d);
    recommendations(&mut s, d);
    outcomes(&mut s, d);
    // Per model and per node.
    s.push_str("<section><h2>Per GPU model</h2>");
    s.push_str(&funnel_table("Model", &d.models, &d.currency, true));
    s.push_str("</section>\n<section><h2>Per node</h2>");
    s.push_str(&funnel_table("Node", &d.nodes, &d.currency, true));
    s.push_str("</section>\n");
    if !d.limitations.is_empty() {
        s.push_str("<section><h2>What could not be measured</h2><ul>");
        for l in &d.limitations {
            let _ = write!(s, "<li>{}</li>", esc(l));
        }
        s.push_str("</ul></section>\n");
    }
    s.push_str("<footer><p class=\"note\">GPU-hours: GPUs × hours (a MIG slice or time-sliced replica counts as its share). Allocated: held by a tenant; Active: a kernel ran; Effective: SM-weighted use; Waste: allocated minus effective. Definitions: docs/analytics.md.</p></footer>\n</body></html>\n");
    s
}

/// Headline numbers with the trend against the week before.
fn headline(s: &mut String, d: &ReportData) {
    let f = &d.fleet;
    let p = d.previous.as_ref();
    let trend = |now: f64, before: Option<f64>| {
        before.map_or(String::new(), |b| {
            format!("<span>{} vs. week before</span>", change(now, b))
        })
    };
    let _ = write!(
        s,
        "<section aria-label=\"Headline\"><div class=\"kpis\"><div class=\"kpi\">Allocated<b>{} GPU-h</b>{}</div><div class=\"kpi\">Effective<b>{} GPU-h</b><span>{} of allocated</span></div><div class=\"kpi\">Waste<b>{}</b>{}</div><div class=\"kpi\">GPUs freeable<b>{:.0}</b><span>by {}</span></div></div></section>",
        num(f.allocated_gpu_hours),
        trend(f.allocated_gpu_hours, p.map(|x| x.allocated_gpu_hours)),
        num(f.effective_gpu_hours),
        pct(f.effective_ratio),
        esc(&money(f.waste_cost, &d.currency)),
        trend(f.waste_gpu_hours, p.map(|x| x.waste_gpu_hours)),
        d.gpus_freed(),
        count(
            d.recommendations.len() as f64,
            "open recommendation",
            "open recommendations"
        )
    );
}

/// The fleet funnel, its chart and its trend.
fn funnel(s: &mut String, d: &ReportData) {
    let f = &d.fleet;
    let p = d.previous.as_ref();
    s.push_str("<section><h2>The fleet funnel</h2>");
    s.push_str(&funnel_chart(f, p));
    let cols = [
        ("Stage", Text),
        ("This week (GPU-h)", Num),
        ("Week before", Num),
        ("Change", Num),
    ];
    table_head(s, None, &cols);
    let stages = [
        (
            "Capacity",
            f.capacity_gpu_hours.unwrap_or(0.0),
            p.and_then(|x| x.capacity_gpu_hours),
        ),
        (
            "Allocated",
            f.allocated_gpu_hours,
            p.map(|x| x.allocated_gpu_hours),
        ),
        ("Active", f.active_gpu_hours, p.map(|x| x.active_gpu_hours)),
        (
            "Effective",
            f.effective_gpu_hours,
            p.map(|x| x.effective_gpu_hours),
        ),
        ("Waste", f.waste_gpu_hours, p.map(|x| x.waste_gpu_hours)),
    ];
    for (name, now, before) in stages {
        let cells = vec![
            name.into(),
            num(now),
            before.map_or("–".into(), num),
            before.map_or("–".into(), |b| change(now, b)),
        ];
        table_row(s, &cols, cells);
    }
    let _ = write!(
        s,
        "</tbody></table><p class=\"note\">Cost of allocations {}, of which waste {}.{} Effective use is {}.</p></section>",
        esc(&money(f.cost, &d.currency)),
        esc(&money(f.waste_cost, &d.currency)),
        esc(&super::content::energy_sentence(f)),
        match f.effective_signal.as_str() {
            "sm_active" => "SM activity from DCGM",
            "gpu_util" => "NVML GPU utilization (an upper bound; no DCGM)",
            "mixed" => "SM activity where DCGM reports it, NVML utilization elsewhere",
            _ => "not measurable (MIG without DCGM)",
        },
    );
}

/// A section: its heading, a note (HTML, its text escaped by the caller) and, when there are
/// rows, a table of the first [`TOP`] of them (cells HTML, escaped by the caller) and how many
/// more there are.
fn table_section(
    s: &mut String,
    heading: &str,
    note: &str,
    cols: &[(&str, Align)],
    rows: Vec<Vec<String>>,
) {
    let _ = write!(
        s,
        "<section><h2>{}</h2><p class=\"note\">{note}</p>",
        esc(heading)
    );
    if !rows.is_empty() {
        table_head(s, None, cols);
        let total = rows.len();
        for cells in rows.into_iter().take(TOP) {
            table_row_html(s, cols, cells);
        }
        s.push_str("</tbody></table>");
        s.push_str(&more(total));
    }
    s.push_str("</section>\n");
}

/// The allocations held idle longest.
fn idle(s: &mut String, d: &ReportData) {
    let rows = d
        .idle
        .iter()
        .map(|r| {
            vec![
                esc(&r.tenant),
                esc(r.team.as_deref().unwrap_or("–")),
                esc(&r.node),
                num(r.hours),
                esc(&r.summary),
            ]
        })
        .collect();
    table_section(
        s,
        "Top idle allocations",
        &format!(
            "{} allocations held a GPU without using it for hours.",
            d.idle.len()
        ),
        &[
            ("Tenant", Text),
            ("Team", Name),
            ("Node", Name),
            ("Idle hours", Num),
            ("What", Text),
        ],
        rows,
    );
}

/// Work that waited for GPUs while GPUs of its pool were held idle (waiting_demand).
fn waiting(s: &mut String, d: &ReportData) {
    if d.waiting.is_empty() {
        return;
    }
    let sum = |f: fn(&WaitingRow) -> f64| d.waiting.iter().map(f).sum::<f64>();
    let note = format!(
        "Work waited {} GPU-hours for GPUs; up to {} GPU-hours of it could have run on GPUs of its pool that were held idle meanwhile (up to {}). Teams waiting for one pool are each set against the same idle GPUs.",
        num(sum(|r| r.waited_gpu_hours)),
        num(sum(|r| r.reclaimable_gpu_hours)),
        esc(&money(sum(|r| r.reclaimable_cost), &d.currency)),
    );
    let rows = d
        .waiting
        .iter()
        .map(|r| {
            let holders = if r.holders.is_empty() {
                "none idle".to_owned()
            } else {
                r.holders.join(", ")
            };
            vec![
                esc(&r.team),
                esc(&r.pool),
                num(r.waited_gpu_hours),
                num(r.idle_held_gpu_hours),
                num(r.reclaimable_gpu_hours),
                num(r.fragmented_gpu_hours),
                esc(&holders),
            ]
        })
        .collect();
    table_section(
        s,
        "Work that waited while GPUs were held idle",
        &note,
        &[
            ("Team", Name),
            ("Pool", Text),
            ("Waited GPU-h", Num),
            ("Idle held GPU-h", Num),
            ("Reclaimable GPU-h", Num),
            ("Fragmented GPU-h", Num),
            ("Idle holders", Text),
        ],
        rows,
    );
}

/// The interference incidents.
fn interference(s: &mut String, d: &ReportData) {
    let rows = d
        .interference
        .iter()
        .map(|r| {
            vec![
                esc(&r.victim),
                esc(&r.aggressor),
                esc(&r.node),
                num(r.hours),
                pct(r.rate_drop),
            ]
        })
        .collect();
    table_section(
        s,
        "Interference incidents",
        &format!(
            "{} in which a tenant sharing a GPU slowed another down.",
            count(d.interference.len() as f64, "incident", "incidents")
        ),
        &[
            ("Slowed down", Text),
            ("By", Text),
            ("Node", Name),
            ("Contended hours", Num),
            ("Rate drop", Num),
        ],
        rows,
    );
}

/// The open recommendations.
fn recommendations(s: &mut String, d: &ReportData) {
    let rows = d
        .recommendations
        .iter()
        .map(|r| {
            let config = r.config.as_ref().map_or(String::new(), |c| {
                format!(" (config <code>{}</code>)", esc(c))
            });
            vec![
                esc(&web::format::kind(&r.kind)),
                esc(&r.node),
                format!("{:.0}", r.gpus_freed),
                format!("{:.0} %", r.confidence * 100.0),
                format!("{}{config}", esc(&r.summary)),
            ]
        })
        .collect();
    table_section(
        s,
        "Open recommendations",
        &format!(
            "{}, replayed against the recorded demand, would free {}.",
            count(
                d.recommendations.len() as f64,
                "recommendation",
                "recommendations"
            ),
            count(d.gpus_freed(), "GPU", "GPUs")
        ),
        &[
            ("Kind", Name),
            ("Node", Name),
            ("GPUs freed", Num),
            ("Confidence", Num),
            ("What", Text),
        ],
        rows,
    );
    if let Some(h) = &d.held_out {
        let _ = write!(s, "<p class=\"note\">{}</p>", esc(h));
    }
    if !d.capacity.is_empty() {
        let _ = write!(
            s,
            "<p class=\"note\">Capacity ahead, at the demand forecast: {}.</p>",
            d.capacity
                .iter()
                .map(|x| esc(x))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    if !d.per_gpu.is_empty() {
        let _ = write!(
            s,
            "<p class=\"note\">Per-GPU sharing, where the cluster enabled it, would free more: {}.</p>",
            d.per_gpu
                .iter()
                .map(|x| esc(x))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
}

/// Steps applied through label actions, measured against replay's prediction.
fn outcomes(s: &mut String, d: &ReportData) {
    let worse = d
        .outcomes
        .iter()
        .filter(|o| o.verdict == model::step_outcome::Verdict::Worse)
        .count();
    let _ = write!(
        s,
        "<section><h2>Applied steps, checked</h2><p class=\"note\">{}</p>",
        if d.outcomes.is_empty() {
            "No step was applied through a label action in the analysed window.".to_owned()
        } else {
            format!(
                "{} applied through label actions, measured against replay's prediction; {worse} turned out worse (in mode apply-with-approval its rollback is planned for approval).",
                model::figures::count(d.outcomes.len() as f64, "step", "steps")
            )
        }
    );
    if !d.outcomes.is_empty() {
        let cols = [
            ("Node", Name),
            ("Step", Text),
            ("Applied (UTC)", Text),
            ("Verdict", Text),
            ("GPUs freed", Num),
            ("Contended tenant-h", Num),
        ];
        table_head(s, None, &cols);
        for o in &d.outcomes {
            let when = model::time::rfc3339(o.applied_ms);
            let cells = vec![
                o.node.clone(),
                format!("{} (action {})", web::format::kind(&o.kind), o.action),
                when[..16].replace('T', " "),
                o.verdict.words().to_owned(),
                format!(
                    "{:.0} of {:.0}",
                    o.gpus_freed_measured, o.gpus_freed_predicted
                ),
                format!(
                    "{:.0}, {:.0} predicted",
                    o.contention_hours_measured, o.contention_hours_predicted
                ),
            ];
            table_row(s, &cols, cells);
            if !o.reasons.is_empty() {
                let _ = write!(
                    s,
                    "<tr><td></td><td colspan=\"5\" class=\"note\">{}</td></tr>",
                    esc(&o.reasons.join("; "))
                );
            }
        }
        s.push_str("</tbody></table>");
    }
    s.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "<script>alert(1)</script>&\"'";

    fn row(key: &str) -> serde_json::Value {
        serde_json::json!({
            "key": key, "capacity_gpu_hours": 168.0, "allocated_gpu_hours": 100.0,
            "active_gpu_hours": 80.0, "effective_gpu_hours": 40.0, "waste_gpu_hours": 60.0,
            "cost": 250.0, "waste_cost": 150.0, "effective_ratio": 0.4,
            "effective_signal": "mixed"
        })
    }

    /// Every section with rows, every text field hostile: nothing reaches the page as markup,
    /// and every row has a cell under each heading.
    fn hostile_report() -> ReportData {
        let h = HOSTILE;
        serde_json::from_value(serde_json::json!({
            "week": "2026-W46", "timezone": h, "from_ms": 0, "to_ms": 604_800_000,
            "generated_ms": 608_400_000, "currency": h,
            "fleet": row("all"), "previous": row("all"),
            "teams": [row(h)], "models": [row(h)], "nodes": [row(h)],
            "idle": [{"tenant": h, "team": h, "node": h, "gpu": null, "hours": 168.0,
                      "summary": h}],
            "waiting": [{"team": h, "pool": h, "waited_gpu_hours": 3.0,
                         "idle_held_gpu_hours": 2.0, "reclaimable_gpu_hours": 1.0,
                         "reclaimable_cost": 5.0, "fragmented_gpu_hours": 0.5,
                         "holders": [h], "summary": h}],
            "interference": [{"victim": h, "aggressor": h, "node": h, "gpu": null,
                              "hours": 4.0, "rate_drop": 0.3, "summary": h}],
            "recommendations": [{"kind": h, "node": h, "team": h, "gpus_freed": 1.0,
                                 "confidence": 0.8, "summary": h, "config": h}],
            "outcomes": [{"action": 7, "kind": h, "node": h, "applied_ms": 86_400_000,
                          "verdict": "worse", "gpus_freed_predicted": 2.0,
                          "gpus_freed_measured": 1.0, "contention_hours_predicted": 0.0,
                          "contention_hours_measured": 3.0, "reasons": [h]}],
            "limitations": [h], "per_gpu": [h], "held_out": h, "capacity": [h]
        }))
        .unwrap()
    }

    #[test]
    fn hostile_names_and_currency_never_become_markup() {
        let html = render(&hostile_report());
        assert!(!html.contains("<script"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        // The currency in a money cell is escaped like every other text.
        assert!(!html.contains("150 <"), "{html}");
        // The one markup a cell carries on purpose: the config name, escaped inside <code>.
        assert!(html.contains("(config <code>&lt;script&gt;"));
    }

    #[test]
    fn the_week_is_dated_in_its_own_time_zone() {
        let mut d = hostile_report();
        d.timezone = "Europe/Berlin".into();
        // 2026-W46 in Berlin: Sunday 8 November 23:00 UTC to Sunday 15 November 23:00 UTC.
        d.from_ms = 1_794_178_800_000;
        d.to_ms = d.from_ms + 7 * 86_400_000;
        d.generated_ms = d.to_ms + 3_600_000;
        let html = render(&d);
        assert!(
            html.contains("Monday 9 November 2026 to Sunday 15 November 2026 (Europe/Berlin) · generated 2026-11-16 01:00 by gpulens"),
            "{}",
            &html[html.find("class=\"meta\"").unwrap()..][..200]
        );
        // A zone that is not one (never stored: reports are made for a checked zone) is UTC.
        d.timezone = "Mars/Olympus".into();
        assert!(render(&d).contains("Sunday 8 November 2026 to Sunday 15 November 2026"));
    }

    #[test]
    fn every_table_row_has_a_cell_under_each_heading() {
        let html = render(&hostile_report());
        let mut tables = 0;
        for table in html.split("<table>").skip(1) {
            let table = &table[..table.find("</table>").unwrap()];
            let headings = table.matches("</th>").count();
            let body = &table[table.find("<tbody>").unwrap()..];
            for tr in body.split("<tr>").skip(1) {
                // The outcomes' reason row spans the five columns after the first.
                let cells =
                    tr.matches("<td").count() + if tr.contains("colspan=\"5\"") { 4 } else { 0 };
                assert_eq!(cells, headings, "{table}");
            }
            tables += 1;
        }
        // Funnel, teams, idle, waiting, interference, recommendations, outcomes, models, nodes.
        assert_eq!(tables, 9);
    }

    /// A node, team or model name stays on one line ("gpu-h100-mig-01" broken at its hyphens
    /// reads as three words); one too long to fit beside the numbers may break.
    #[test]
    fn short_names_stay_whole_and_long_ones_may_break() {
        let cols = [("Node", Name), ("GPU-h", Num)];
        let mut s = String::new();
        table_row(&mut s, &cols, vec!["gpu-h100-mig-01".into(), "1".into()]);
        assert_eq!(
            s,
            "<tr><td class=\"id\">gpu-h100-mig-01</td><td class=\"n\">1</td></tr>"
        );
        let long = format!("gpu-{}", "a".repeat(249));
        let mut s = String::new();
        table_row(&mut s, &cols, vec![long.clone(), "1".into()]);
        assert!(s.starts_with(&format!("<tr><td>{long}</td>")), "{s}");
    }

    /// One of each reads in the singular, in the summary (the report list, webhooks) and the
    /// headline; two, in the plural.
    #[test]
    fn counts_read_as_english() {
        let mut d = hostile_report();
        let summary = d.summary();
        assert!(
            summary.contains(
                " 1 idle allocation, 1 interference incident, 1 open recommendation freeing 1 GPU."
            ),
            "{summary}"
        );
        let html = render(&d);
        assert!(html.contains("<span>by 1 open recommendation</span>"));
        assert!(html.contains(
            ">1 recommendation, replayed against the recorded demand, would free 1 GPU.<"
        ));
        // Steps free whole GPUs: the headline and the table count them as the dashboard does.
        assert!(html.contains("GPUs freeable<b>1</b>"), "{html}");
        assert!(html.contains(">1 row</caption>"), "{html}");
        assert!(html.contains(">1 incident in which a tenant sharing a GPU slowed another down."));
        d.idle.push(d.idle[0].clone());
        d.recommendations.push(d.recommendations[0].clone());
        assert!(d.summary().contains(
            " 2 idle allocations, 1 interference incident, 2 open recommendations freeing 2 GPUs."
        ));
        assert!(render(&d).contains("<span>by 2 open recommendations</span>"));
    }
}
