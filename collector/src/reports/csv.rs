//! The report's numbers as CSV (RFC 4180): one row per funnel line, documented in
//! docs/reports.md.

use analytics::FunnelRow;

use super::content::ReportData;

/// The header, in column order.
pub const COLUMNS: [&str; 16] = [
    "week",
    "section",
    "key",
    "capacity_gpu_hours",
    "allocated_gpu_hours",
    "active_gpu_hours",
    "effective_gpu_hours",
    "effective_ratio",
    "waste_gpu_hours",
    "cost",
    "waste_cost",
    "currency",
    "effective_signal",
    "energy_kwh",
    "idle_energy_kwh",
    "co2e_kg",
];

use web::csv::{field, number as opt};

fn row(out: &mut String, d: &ReportData, section: &str, r: &FunnelRow) {
    let cells = [
        field(&d.week),
        section.to_owned(),
        field(&r.key),
        opt(r.capacity_gpu_hours),
        format!("{:.4}", r.allocated_gpu_hours),
        format!("{:.4}", r.active_gpu_hours),
        format!("{:.4}", r.effective_gpu_hours),
        opt(r.effective_ratio),
        format!("{:.4}", r.waste_gpu_hours),
        format!("{:.4}", r.cost),
        format!("{:.4}", r.waste_cost),
        field(&d.currency),
        field(&r.effective_signal),
        opt(r.energy.map(|e| e.kwh)),
        opt(r.energy.map(|e| e.idle_kwh)),
        opt(r.energy.and_then(|e| e.co2e_kg)),
    ];
    out.push_str(&cells.join(","));
    out.push_str("\r\n");
}

/// The CSV text: the fleet, the previous week's fleet, then teams, models and nodes.
pub fn render(d: &ReportData) -> String {
    let mut out = COLUMNS.join(",");
    out.push_str("\r\n");
    row(&mut out, d, "fleet", &d.fleet);
    if let Some(p) = &d.previous {
        row(&mut out, d, "fleet_previous_week", p);
    }
    for (section, rows) in [("team", &d.teams), ("model", &d.models), ("node", &d.nodes)] {
        for r in rows {
            row(&mut out, d, section, r);
        }
    }
    out
}
