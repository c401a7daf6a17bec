//! `/alerts`: alerts and the notifications sent for them.

use super::page::*;

pub async fn alerts(
    State(state): State<DashboardState>,
    caller: Caller,
    Query(q): Query<FormatQuery>,
) -> PageOrCsv {
    use crate::alerts::AlertState as S;
    let mut list = crate::alerts::load(&state.shared.store).await?;
    // Firing before pending before resolved; in each, the most severe first (an unknown
    // severity last), then the newest.
    let rank = |a: &crate::alerts::Alert| {
        std::cmp::Reverse(
            a.labels
                .get("severity")
                .and_then(|s| analytics::Severity::parse(s)),
        )
    };
    list.sort_by_key(|a| {
        (
            match a.state {
                S::Firing => 0,
                S::Pending => 1,
                S::Resolved => 2,
            },
            rank(a),
            -a.active_ms,
            a.rule.clone(),
            a.labels.get("node").cloned(),
        )
    });
    let rows = list
        .into_iter()
        .map(|a| pages::AlertRow {
            name: a.rule.clone(),
            state: a.state.as_str().into(),
            severity: a.labels.get("severity").cloned().unwrap_or_default(),
            node: a.labels.get("node").cloned().unwrap_or_default(),
            gpu: a.labels.get("gpu_uuid").cloned().unwrap_or_default(),
            description: a
                .annotations
                .get("description")
                .or_else(|| a.annotations.get("summary"))
                .cloned()
                .unwrap_or_default(),
            since: time(a.ends_ms.or(a.starts_ms).unwrap_or(a.active_ms)),
            finding: a.annotations.get("finding").cloned(),
            step: a.annotations.get("step").cloned(),
            began: a
                .annotations
                .get("began")
                .map(|b| b.replace('T', " ").chars().take(16).collect()),
        })
        .collect::<Vec<_>>();
    let notes = state
        .shared
        .store
        .notifications(None, 50)
        .await?
        .into_iter()
        .map(|n| pages::NotificationRow {
            id: n.id,
            receiver: n.receiver,
            status: n.status,
            state: n.state,
            attempts: n.attempts,
            created: time(n.created_ms),
            error: n.last_error.unwrap_or_default(),
        })
        .collect::<Vec<_>>();
    let mut f = frame(&state, &caller, "Alerts");
    f.refresh_s = Some(30);
    page_or_table(
        q.asked(),
        "alerts",
        (rows, notes),
        |(rows, notes)| pages::alerts_tables(rows, notes),
        |(rows, notes)| pages::alerts(f, rows, notes),
    )
}
