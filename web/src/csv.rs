//! Tables as CSV (RFC 4180), safe to open in a spreadsheet: the weekly report's CSV and every
//! dashboard table's download write their cells through [`field`].

/// A text cell. One that starts with `=`, `+`, `-`, `@`, a tab or a carriage return would run
/// as a formula in a spreadsheet (names come from namespaces, accounts and nodes that tenants
/// choose), so it gets a leading `'` — the OWASP advice for CSV injection. Numbers are
/// written by [`number`] and never pass here.
pub fn field(s: &str) -> String {
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

/// A number cell: four decimals, empty where there is none.
pub fn number(x: Option<f64>) -> String {
    x.filter(|v| v.is_finite())
        .map_or(String::new(), |v| format!("{v:.4}"))
}

/// One CSV line of cells already written by [`field`] or [`number`], with its CRLF.
pub fn line(cells: &[String]) -> String {
    let mut out = cells.join(",");
    out.push_str("\r\n");
    out
}

/// A table: its header (column names, written as fields) and its rows.
pub fn table(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut out = line(&header.iter().map(|h| field(h)).collect::<Vec<_>>());
    for r in rows {
        out.push_str(&line(&r));
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
        assert_eq!(number(Some(1.0 / 3.0)), "0.3333");
        assert_eq!(number(None), "");
        assert_eq!(number(Some(f64::NAN)), "");
    }

    /// Formula cells through namespace, account or node names.
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
        assert_eq!(
            table(&["a", "b"], [vec![field("-x"), number(Some(2.0))]]),
            "a,b\r\n'-x,2.0000\r\n"
        );
    }
}
