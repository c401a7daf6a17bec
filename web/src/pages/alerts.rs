//! Alerts: what fires now, and the notifications sent.

use super::*;

#[derive(Debug, Clone, PartialEq)]
pub struct AlertRow {
    pub name: String,
    pub state: String,
    pub severity: String,
    pub node: String,
    /// The GPU the alert is about (empty for a node's or the fleet's).
    pub gpu: String,
    pub description: String,
    pub since: String,
    /// The finding's page and the answering step's, when the alert is a finding's (paths the
    /// collector made: `/findings/…`, `/recommendations/…`).
    pub finding: Option<String>,
    pub step: Option<String>,
    /// When the finding's condition began (UTC), if earlier than the alert.
    pub began: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NotificationRow {
    pub id: i64,
    pub receiver: String,
    pub status: String,
    pub state: String,
    pub attempts: i64,
    pub created: String,
    pub error: String,
}

pub fn alerts(frame: Frame, rows: Vec<AlertRow>, notes: Vec<NotificationRow>) -> String {
    document(frame, Nav::Alerts, move || {
        let count = rows.len();
        let no_notes = notes.is_empty();
        let body = rows
            .into_iter()
            .map(|r| {
                let finding = r.finding.filter(|p| p.starts_with("/findings/"));
                // The alert's name leads to its finding, else to its node.
                let href = finding.clone().or_else(|| {
                    (!r.node.is_empty()).then(|| format!("/nodes/{}", enc(&r.node)))
                });
                let name = match href {
                    Some(h) => view! { <a href=h>{breakable(&r.name)}</a> }.into_any(),
                    None => breakable(&r.name).into_any(),
                };
                // Where it fired, under its name on a phone (`.phone`), where the Node and GPU
                // columns are off screen and four alerts of one rule on one node differ only by
                // GPU.
                let short_gpu: String = r.gpu.chars().take(12).collect();
                let place = [r.node.as_str(), short_gpu.as_str()]
                    .into_iter()
                    .filter(|p| !p.is_empty())
                    .collect::<Vec<_>>()
                    .join(" · ");
                view! {
                    <tr>
                        <td>{name}{(!place.is_empty()).then(|| view! { <span class="phone"><br/><small>{place}</small></span> })}</td>
                        <td class=sev_class(&r.severity)>{r.severity.clone()}</td>
                        <td>{r.state}</td>
                        <td>{node_link(&r.node)}</td>
                        <td>{if r.gpu.is_empty() { "–".into_any() } else {
                            view! { <a href=format!("/gpus/{}", enc(&r.gpu)) title=r.gpu.clone()><code>{short_gpu}</code></a> }.into_any()
                        }}</td>
                        <td class="long">{match finding {
                            Some(p) => view! { <a href=p>{r.description}</a> }.into_any(),
                            None => r.description.into_any(),
                        }}{r.step.filter(|p| p.starts_with("/recommendations/")).map(|p| view! { " · "<a href=p>"the step that answers it"</a> })}
                        {r.began.map(|b| view! { <br/><small>{format!("began {b}")}</small> })}</td>
                        <td class="t">{r.since}</td>
                    </tr>
                }
            })
            .collect_view();
        let notes = notes
            .into_iter()
            .map(|n| {
                view! {
                    <tr>
                        <td class="n">{n.id}</td><td>{n.receiver}</td><td>{n.status}</td><td>{n.state}</td>
                        <td class="n">{n.attempts}</td><td class="t">{n.created}</td><td>{n.error}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h1>"Alerts"</h1>
            <div class="scroll"><table>
                <caption>{format!("{}: firing, pending and resolved in the last day, the most severe first (docs/alerts.md)", model::figures::count(count as f64, "alert", "alerts"))}</caption>
                <thead><tr><th scope="col">"Alert"</th><th scope="col" class="key">"Severity"</th><th scope="col">"State"</th><th scope="col">"Node"</th><th scope="col">"GPU"</th><th scope="col" class="long">"What"</th><th scope="col">"Since (UTC)"</th></tr></thead>
                <tbody>{if count == 0 { none_row(7, "no rule fired, was pending or resolved in the last day") } else { body.into_any() }}</tbody>
            </table></div>
            {table_note("/alerts", "alerts")}
            <h2>"Notifications"</h2>
            <div class="scroll"><table>
                <thead><tr><th scope="col" class="n">"Id"</th><th scope="col">"Receiver"</th><th scope="col" class="key">"Status"</th><th scope="col">"Delivery"</th><th scope="col" class="n">"Attempts"</th><th scope="col">"Made (UTC)"</th><th scope="col">"Last error"</th></tr></thead>
                <tbody>{if no_notes { none_row(7, "nothing was sent: no alert changed state, or no receiver is configured (docs/alerts.md)") } else { notes.into_any() }}</tbody>
            </table></div>
            {table_note("/alerts", "notifications")}
        }
        .into_any()
    })
}

/// The alerts page's tables as CSV: the alerts (the columns the page shows, with the
/// finding's and step's paths) and the notifications.
pub fn alerts_tables(rows: &[AlertRow], notes: &[NotificationRow]) -> Vec<TableCsv> {
    use crate::csv::field;
    let alerts = TableCsv::new(
        "alerts",
        &[
            "Alert",
            "Severity",
            "State",
            "Node",
            "GPU",
            "What",
            "Since (UTC)",
            "Began (UTC)",
            "Finding",
            "Step",
        ],
        rows.iter().map(|r| {
            vec![
                field(&r.name),
                field(&r.severity),
                field(&r.state),
                field(&r.node),
                field(&r.gpu),
                field(&r.description),
                field(&r.since),
                field(r.began.as_deref().unwrap_or("")),
                field(r.finding.as_deref().unwrap_or("")),
                field(r.step.as_deref().unwrap_or("")),
            ]
        }),
    );
    let notifications = TableCsv::new(
        "notifications",
        &[
            "Id",
            "Receiver",
            "Status",
            "Delivery",
            "Attempts",
            "Made (UTC)",
            "Last error",
        ],
        notes.iter().map(|n| {
            vec![
                n.id.to_string(),
                field(&n.receiver),
                field(&n.status),
                field(&n.state),
                n.attempts.to_string(),
                field(&n.created),
                field(&n.error),
            ]
        }),
    );
    vec![alerts, notifications]
}
