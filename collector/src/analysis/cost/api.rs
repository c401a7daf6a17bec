//! `GET /api/v1/cost/focus`: the cost of a range as FOCUS 1.2 CSV — one row per tenant, GPU
//! and UTC day, allocation-based cost in FOCUS' cost columns, usage-based and idle cost, energy
//! and emissions in extension columns (docs/cost.md, "FOCUS export").

use axum::extract::{Query, State, rejection::QueryRejection};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::{Only, Refused};
use crate::analysis::AnalysisState;
use collector_shared::error::ApiError;
use collector_shared::openapi::Op;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FocusQuery {
    pub from: Option<String>,
    pub to: Option<String>,
    pub cluster: Option<String>,
    pub team: Option<String>,
}

pub fn op() -> Op {
    Op::new("The cost of a range in the FinOps Foundation's FOCUS 1.2 format, as CSV: one row per tenant, GPU and UTC day (docs/cost.md). BilledCost, EffectiveCost, ListCost and ContractedCost are the allocation-based cost (allocated GPU-hours × the price of the GPU's model, cluster and sharing mode); x_UsageBasedCost is effective use × the price, x_IdleCost the difference; x_EnergyKWh, x_IdleEnergyKWh and x_EmissionsKgCO2e the energy charged to the tenant and its emissions. SubAccount is the team, Resource the GPU, Tags the cluster, node, GPU model, sharing mode, team and tenant. Ranges of at most 31 days; team-scoped callers get their teams' rows only.")
        .params([
            json!({"name": "from", "in": "query", "schema": {"type": "string", "minLength": 1}, "description": "Start: RFC 3339, Unix ms or now-7d (default: 7 days before `to`)."}),
            json!({"name": "to", "in": "query", "schema": {"type": "string", "minLength": 1}, "description": "End, exclusive (default: the start of the current UTC day)."}),
            json!({"name": "cluster", "in": "query", "schema": {"type": "string", "minLength": 1, "maxLength": 253}, "description": "Only this cluster's GPUs."}),
            json!({"name": "team", "in": "query", "schema": {"type": "string", "minLength": 1, "maxLength": 253}, "description": "Only this team's rows."}),
        ])
        .response(200, json!({"description": "FOCUS 1.2 rows as CSV", "content": {"text/csv": {}}}))
        .refusals(&[400, 503])
}

/// A name a filter compares against: 1 to 253 characters, none of them a control character.
fn name(what: &str, v: Option<String>) -> Result<Option<String>, ApiError> {
    match v {
        Some(s) if s.is_empty() || s.len() > 253 || s.chars().any(char::is_control) => Err(
            ApiError::BadRequest(format!("{what} must be 1 to 253 printable characters")),
        ),
        v => Ok(v),
    }
}

pub async fn focus(
    State(state): State<AnalysisState>,
    caller: collector_shared::access::Caller,
    q: Result<Query<FocusQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(collector_shared::http::bad_query)?;
    let (from, to) = super::range(q.from.as_deref(), q.to.as_deref(), model::time::now_ms())
        .map_err(|(_, why)| ApiError::BadRequest(why))?;
    let only = Only {
        cluster: name("cluster", q.cluster)?,
        team: name("team", q.team)?,
        teams: caller.scope().cloned(),
    };
    let cfg = &state.analytics.thresholds;
    let rows = super::charges(&state.shared.store, cfg, from, to, &only)
        .await
        .map_err(|e| match e {
            Refused::Bounds(why) => ApiError::BadRequest(why),
            Refused::Failed(e) => ApiError::Internal(e.to_string()),
        })?;
    let file = format!(
        "gpulens-focus-{}-{}.csv",
        &model::time::rfc3339(from)[..10],
        &model::time::rfc3339(to)[..10]
    );
    Ok((
        [
            (
                header::CONTENT_TYPE,
                "text/csv; charset=utf-8; header=present".to_owned(),
            ),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}\""),
            ),
        ],
        super::csv(&rows, &cfg.currency),
    )
        .into_response())
}
