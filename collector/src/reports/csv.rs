//! The report's numbers as CSV (RFC 4180): one row per funnel line, documented in
//! docs/reports.md.

use analytics::FunnelRow;

use super::content::ReportData;

/// The header, in column order.
pub const COLUMNS: [&str; 13] = [
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
];

/// A text cell. One that starts with `=`, `+`, `-`, `@`, a tab or a carriage return would run
/// as a formula in a spreadsheet (names come from namespaces, accounts and nodes that tenants
/// choose), so it gets a leading `'` — the OWASP advice for CSV injection. Numbers are
/// written by `opt` and never pass here.
fn field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_owned()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

fn opt(x: Option<f64>) -> String {
    x.map_or(String::new(), |v| format!("{v:.4}"))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_when_needed() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    /// Issue 15: formula cells through namespace, account or node names.
    #[test]
    fn cells_that_a_spreadsheet_would_run_are_neutralised() {
        assert_eq!(
            field("=HYPERLINK(\"http://x\",\"y\")"),
            "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\""
        );
        assert_eq!(field("@SUM(A1:A9)"), "'@SUM(A1:A9)");
        assert_eq!(field("+1"), "'+1");
        assert_eq!(field("-2"), "'-2");
        assert_eq!(field("\tx"), "'\tx");
        assert_eq!(field("team=a"), "team=a");
    }
}
