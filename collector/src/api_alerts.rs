//! `/api/v1/alerts`: every alert (pending, firing, recently resolved) and the notifications
//! built for each receiver with every delivery attempt (docs/alerts.md).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};

use crate::alerts::state::{Alert, State as AlertState};
use crate::api::rfc3339;
use crate::error::ApiError;
use crate::server::AppState;
use crate::store::alerts::NotificationRecord;

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
    pub notifications: Vec<NotificationRecord>,
}

pub async fn list(
    State(state): State<AppState>,
    q: Result<Query<AlertQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<AlertList>, ApiError> {
    let Query(q) = q.map_err(crate::api::bad_query)?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be between 1 and 1000, got {limit}"
        )));
    }
    let wanted = match q.state.as_deref() {
        None => None,
        Some(s) => Some(AlertState::parse(s).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "unknown state {s:?}; one of: pending, firing, resolved"
            ))
        })?),
    };
    let mut alerts: Vec<Alert> = state
        .store
        .load_alerts()
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
        notifications,
    }))
}
