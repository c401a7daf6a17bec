//! `/api/v1/forecast`: the newest analysis' demand forecast per pool and team — allocated,
//! used and waiting GPU-equivalents hour by hour for the weeks ahead, each with its measured
//! error, and when each pool runs out of GPUs.

use axum::Json;
use axum::extract::{Query, State, rejection::QueryRejection};
use serde::{Deserialize, Serialize};
use serde_json::json;

use analytics::forecast::{Forecast, Point, Projection, Scope};
use model::time::rfc3339;

use crate::analysis::AnalysisState;
use collector_shared::error::ApiError;
use collector_shared::openapi::Op;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForecastQuery {
    /// `cluster/model` of one pool.
    pub pool: Option<String>,
    pub team: Option<String>,
    /// Weeks of hourly points (1–4, at most what the analysis forecast).
    pub weeks: Option<usize>,
}

pub fn op() -> Op {
    Op::new("The demand forecast of the newest analysis (docs/analytics.md, \"Demand forecast\"): per pool (cluster and GPU model) and per team, the allocated, used and waiting GPU-equivalents forecast hour by hour for the next 1–4 weeks by a trend and seasonal model, each with its backtest error (the same model fitted a week — or, on a short history, a day — earlier against what followed) or why it has none, and when each pool runs out of GPUs at the forecast and at the edges of its error band. Hourly points come with a `pool` or `team` filter; unfiltered, each series is summarised. Team-scoped callers see their teams' series only.")
        .params([
            json!({"name": "pool", "in": "query", "schema": {"type": "string"}, "description": "One pool, as cluster/model (e.g. prod/NVIDIA H100 80GB HBM3)."}),
            json!({"name": "team", "in": "query", "schema": {"type": "string"}, "description": "One team."}),
            json!({"name": "weeks", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 4}, "description": "Weeks of hourly points (default: all the analysis forecast)."}),
        ])
        .json(200, "generated, history_from, history_to, horizon_hours, note, count, forecasts[] {scope {kind: pool|team, cluster, model | team}, label, capacity, run_out {at, earliest, latest, sentence} | null, quantities[] {quantity: allocated|used|waiting, recent, season_hours, slope_per_day, accuracy {ahead_hours, fitted_until, mae, bias, wape, band, sentence} | null, note, points[] {hour, value, low, high}}}", json!({
            "type": "object", "required": ["count", "forecasts"], "properties": {
                "count": {"type": "integer"}, "note": {"type": ["string", "null"]},
                "forecasts": {"type": "array", "items": {"type": "object", "required": ["scope", "quantities"], "properties": {
                    "scope": {"type": "object"}, "label": {"type": "string"}, "capacity": {"type": ["number", "null"]},
                    "run_out": {"type": ["object", "null"]},
                    "quantities": {"type": "array", "items": {"type": "object", "required": ["quantity"], "properties": {
                        "quantity": {"type": "string", "enum": ["allocated", "used", "waiting"]},
                        "points": {"type": "array"}}}}}}}}}))
        .refusals(&[400, 404, 503])
}

#[derive(Debug, Serialize)]
pub struct ForecastResponse {
    pub generated: String,
    pub history_from: Option<String>,
    pub history_to: Option<String>,
    pub horizon_hours: usize,
    /// Why there is no forecast, when there is none.
    pub note: Option<String>,
    pub count: usize,
    pub forecasts: Vec<ForecastView>,
}

#[derive(Debug, Serialize)]
pub struct ForecastView {
    pub scope: Scope,
    pub label: String,
    pub capacity: Option<f64>,
    pub run_out: Option<serde_json::Value>,
    pub quantities: Vec<serde_json::Value>,
}

pub async fn forecast(
    State(state): State<AnalysisState>,
    caller: collector_shared::access::Caller,
    q: Result<Query<ForecastQuery>, QueryRejection>,
) -> Result<Json<ForecastResponse>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    if let Some(w) = q.weeks
        && !(1..=analytics::forecast::MAX_WEEKS).contains(&w)
    {
        return Err(ApiError::BadRequest(format!(
            "weeks must be 1 to {}, not {w}",
            analytics::forecast::MAX_WEEKS
        )));
    }
    let pool = q
        .pool
        .as_deref()
        .map(|p| {
            p.split_once('/')
                .filter(|(c, m)| !c.is_empty() && !m.is_empty())
                .map(|(cluster, model)| Scope::Pool {
                    cluster: cluster.to_owned(),
                    model: model.to_owned(),
                })
                .ok_or_else(|| {
                    ApiError::BadRequest(format!("pool must be cluster/model, not {p:?}"))
                })
        })
        .transpose()?;
    let filters = crate::analysis::requested::Filters::default();
    let (a, _) = crate::analysis::requested::analysis(&state, &filters).await?;
    let Some(f) = &a.forecast else {
        return Ok(Json(ForecastResponse {
            generated: rfc3339(a.generated_ms),
            history_from: None,
            history_to: None,
            horizon_hours: 0,
            note: Some("this analysis has no forecast ([analytics] forecast_history is 0, or it was made before forecasts)".into()),
            count: 0,
            forecasts: Vec::new(),
        }));
    };
    let hours = q.weeks.map_or(f.horizon_h, |w| (w * 168).min(f.horizon_h));
    let detailed = pool.is_some() || q.team.is_some();
    let forecasts: Vec<ForecastView> = f
        .series
        .iter()
        .filter(|s| match &s.scope {
            Scope::Pool { .. } => caller.scope().is_none() && q.team.is_none(),
            Scope::Team { team } => caller.sees_team(Some(team)) && pool.is_none(),
        })
        .filter(|s| pool.as_ref().is_none_or(|p| &s.scope == p))
        .filter(|s| match (&q.team, &s.scope) {
            (Some(t), Scope::Team { team }) => t == team,
            _ => true,
        })
        .map(|s| view(s, f.to_ms, if detailed { hours } else { 0 }))
        .collect();
    if detailed && forecasts.is_empty() {
        let what = q.pool.as_deref().or(q.team.as_deref()).unwrap_or_default();
        return Err(ApiError::NotFound(format!(
            "no forecast for {what:?} (a pool is cluster/model; GET /api/v1/forecast lists them)"
        )));
    }
    Ok(Json(ForecastResponse {
        generated: rfc3339(a.generated_ms),
        history_from: Some(rfc3339(f.from_ms)),
        history_to: Some(rfc3339(f.to_ms)),
        horizon_hours: hours,
        note: None,
        count: forecasts.len(),
        forecasts,
    }))
}

/// One series as the API gives it, with `hours` hourly points.
fn view(s: &Forecast, from_ms: i64, hours: usize) -> ForecastView {
    ForecastView {
        scope: s.scope.clone(),
        label: s.scope.label(),
        capacity: s.capacity,
        run_out: s.run_out.as_ref().map(|r| {
            json!({
                "at": r.at_ms.map(rfc3339), "earliest": r.earliest_ms.map(rfc3339),
                "latest": r.latest_ms.map(rfc3339), "sentence": r.sentence(),
            })
        }),
        quantities: s
            .projections
            .iter()
            .map(|p| quantity(p, from_ms, hours))
            .collect(),
    }
}

fn quantity(p: &Projection, from_ms: i64, hours: usize) -> serde_json::Value {
    let points: Vec<serde_json::Value> = p
        .points(from_ms, hours)
        .iter()
        .map(|&Point { hour_ms, value, low, high }| {
            json!({"hour": rfc3339(hour_ms), "value": round(value), "low": low.map(round), "high": high.map(round)})
        })
        .collect();
    json!({
        "quantity": p.quantity.as_str(),
        "recent": round(p.recent),
        "season_hours": p.model.as_ref().map(|m| m.period()),
        "slope_per_day": p.model.as_ref().map(|m| round(m.slope * 24.0)),
        "accuracy": p.accuracy.as_ref().map(|a| json!({
            "ahead_hours": a.ahead_h, "fitted_until": rfc3339(a.fitted_until_ms),
            "mae": round(a.mae), "bias": round(a.bias), "wape": a.wape.map(round),
            "band": round(a.band), "sentence": a.sentence(),
        })),
        "note": p.note,
        "points": points,
    })
}

/// GPU-equivalents to the thousandth.
fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
