//! Reports: the weekly reports kept, newest first.

use super::*;

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
                    <thead><tr><th scope="col">"Week"</th><th scope="col" class="key">"Download"</th><th scope="col">"Summary"</th><th scope="col">"Time zone"</th></tr></thead>
                    <tbody>{body}</tbody>
                </table></div>
                {table_note("/reports", "reports")}
            })}
            {empty}
        }
        .into_any()
    })
}

/// The reports list as CSV: each week with its downloads' paths.
pub fn reports_tables(rows: &[ReportRow]) -> Vec<TableCsv> {
    use crate::csv::field;
    vec![TableCsv::new(
        "reports",
        &["Week", "HTML", "CSV", "Summary", "Time zone"],
        rows.iter().map(|r| {
            vec![
                field(&r.week),
                field(&r.html),
                field(&r.csv),
                field(&r.summary),
                field(&r.timezone),
            ]
        }),
    )]
}
