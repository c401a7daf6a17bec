//! `/reports`: the stored weekly reports.

use super::page::*;

pub async fn reports(
    State(state): State<DashboardState>,
    caller: Caller,
    Query(q): Query<FormatQuery>,
) -> PageOrCsv {
    let rows = state
        .shared
        .store
        .reports(104)
        .await?
        .into_iter()
        .map(|r| pages::ReportRow {
            html: crate::reports::link(None, &r.week, &r.timezone, "html"),
            csv: crate::reports::link(None, &r.week, &r.timezone, "csv"),
            week: r.week,
            timezone: r.timezone,
            summary: r.summary,
        })
        .collect::<Vec<_>>();
    let f = frame(&state, &caller, "Reports");
    page_or_table(
        q.asked(),
        "reports",
        rows,
        |rows| pages::reports_tables(rows),
        |rows| pages::reports(f, rows),
    )
}
