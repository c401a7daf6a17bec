//! `/api/v1/alerts`: every alert (pending, firing, recently resolved) and the notifications
//! built for each receiver with every delivery attempt (docs/alerts.md).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};

use super::state::{Alert, State as AlertState};
use collector_shared::access::routes::{Need::*, Routes, Teams::*};
use collector_shared::error::ApiError;
use collector_shared::openapi::Op;
use collector_shared::shared::Shared;
use model::time::rfc3339;
use serde_json::json;
use store::alerts::NotificationRecord;

/// The alerts routes (merged in `router.rs`).
pub fn routes() -> Routes<Shared> {
    Routes::new().get("/api/v1/alerts", Read(AllTeams), operation(), list)
}

fn operation() -> Op {
    Op::new("Alerts (docs/alerts.md): every pending, firing and recently resolved alert with its labels, annotations and times; and the notifications built for each receiver, newest first, with every delivery attempt (time, outcome, HTTP status, detail).")
        .query_enum("state", ["pending", "firing", "resolved"], None)
        .param(json!({"name": "fingerprint", "in": "query", "schema": {"type": "string"}}))
        .param(json!({"name": "receiver", "in": "query", "schema": {"type": "string"}, "description": "Only notifications of this receiver."}))
        .param(json!({"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}, "description": "Notifications, newest first, default 100."}))
        .json(200, "alerts[] (fingerprint, rule, state, labels, annotations, value, active_since, starts_at, ends_at), notifications[] (id, receiver, group_key, status, firing, resolved, created_at, state queued|delivered|failed|superseded, attempts, delivered_at, last_error, tries[{at, outcome, http_status, detail, duration_ms}])",
            json!({"type": "object", "properties": {"alerts": {"type": "array"}, "notifications": {"type": "array"}}}))
        .refusals(&[400, 503])
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertQuery {
    /// Only alerts in this state: pending, firing or resolved.
    pub state: Option<String>,
    /// Only this alert.
    pub fingerprint: Option<String>,
    /// Only notifications of this receiver.
    pub receiver: Option<String>,
    /// At most this many notifications, newest first (default 100, at most 1000).
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize)]
pub struct AlertView {
    pub fingerprint: String,
    pub rule: String,
    pub state: &'static str,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub value: f64,
    pub active_since: String,
    pub starts_at: Option<String>,
    pub ends_at: Option<String>,
}

impl From<Alert> for AlertView {
    fn from(a: Alert) -> Self {
        AlertView {
            state: a.state.as_str(),
            active_since: rfc3339(a.active_ms),
            starts_at: a.starts_ms.map(rfc3339),
            ends_at: a.ends_ms.map(rfc3339),
            fingerprint: a.fingerprint,
            rule: a.rule,
            labels: a.labels,
            annotations: a.annotations,
            value: a.value,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct AlertList {
    pub alerts: Vec<AlertView>,
    pub notifications: Vec<NotificationView>,
}

/// A notification in the outbox and how its delivery went.
#[derive(Debug, Serialize)]
pub struct NotificationView {
    pub id: i64,
    pub receiver: String,
    pub group_key: String,
    /// firing | resolved
    pub status: String,
    pub firing: i64,
    pub resolved: i64,
    pub created_at: String,
    /// queued | delivered | failed | superseded
    pub state: String,
    pub attempts: i64,
    pub delivered_at: Option<String>,
    pub last_error: Option<String>,
    pub tries: Vec<AttemptView>,
}

/// One delivery attempt.
#[derive(Debug, Serialize)]
pub struct AttemptView {
    pub at: String,
    /// delivered | retry | failed
    pub outcome: String,
    pub http_status: Option<i32>,
    pub detail: String,
    pub duration_ms: i64,
}

impl From<NotificationRecord> for NotificationView {
    fn from(n: NotificationRecord) -> Self {
        NotificationView {
            id: n.id,
            receiver: n.receiver,
            group_key: n.group_key,
            status: n.status,
            firing: n.firing,
            resolved: n.resolved,
            created_at: rfc3339(n.created_ms),
            state: n.state,
            attempts: n.attempts,
            delivered_at: n.delivered_ms.map(rfc3339),
            last_error: n.last_error,
            tries: n
                .tries
                .into_iter()
                .map(|t| AttemptView {
                    at: rfc3339(t.ts_ms),
                    outcome: t.outcome,
                    http_status: t.http_status,
                    detail: t.detail,
                    duration_ms: t.duration_ms,
                })
                .collect(),
        }
    }
}

pub async fn list(
    State(state): State<Shared>,
    q: Result<Query<AlertQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<AlertList>, ApiError> {
    let Query(q) = q.map_err(collector_shared::http::bad_query)?;
    let limit = collector_shared::http::list_limit(q.limit)?;
    let wanted = match q.state.as_deref() {
        None => None,
        Some(s) => Some(AlertState::parse(s).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "unknown state {s:?}; one of: pending, firing, resolved"
            ))
        })?),
    };
    let mut alerts: Vec<Alert> = super::state::load(&state.store)
        .await?
        .into_iter()
        .filter(|a| wanted.is_none_or(|w| a.state == w))
        .filter(|a| q.fingerprint.as_deref().is_none_or(|f| a.fingerprint == f))
        .collect();
    // Firing first, then pending, then resolved; newest first within each.
    alerts.sort_by_key(|a| {
        (
            match a.state {
                AlertState::Firing => 0,
                AlertState::Pending => 1,
                AlertState::Resolved => 2,
            },
            -a.active_ms,
        )
    });
    let notifications = state
        .store
        .notifications(q.receiver.as_deref(), limit)
        .await?;
    Ok(Json(AlertList {
        alerts: alerts.into_iter().map(AlertView::from).collect(),
        notifications: notifications
            .into_iter()
            .map(NotificationView::from)
            .collect(),
    }))
}
