//! `/api/v1/findings` and `/api/v1/recommendations`: the newest stored analysis (or one
//! computed for the requested range), filtered by team, node, kind and severity.

use axum::Json;
use axum::extract::{Query, State, rejection::QueryRejection};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{parse_time, rfc3339};
use crate::error::ApiError;
use crate::server::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filters {
    pub team: Option<String>,
    pub node: Option<String>,
    pub kind: Option<String>,
    /// The least severity to return (info < warning < critical); findings only.
    pub severity: Option<String>,
    /// A range other than the scheduled one is analysed on demand.
    pub from: Option<String>,
    pub to: Option<String>,
}

/// The analysis the request asks for, as JSON, and whether it was computed for it.
async fn analysis(state: &AppState, f: &Filters) -> Result<(Value, &'static str), ApiError> {
    let now = crate::now_ms();
    if f.from.is_some() || f.to.is_some() {
        let to =
            f.to.as_deref()
                .map(|t| parse_time(t, now))
                .transpose()?
                .unwrap_or(now);
        let from = match f.from.as_deref() {
            Some(s) => parse_time(s, now)?,
            None => to - state.analytics.window.as_millis() as i64,
        };
        if from >= to {
            return Err(ApiError::BadRequest("`from` must be before `to`".into()));
        }
        if to - from > 93 * 86_400_000 {
            return Err(ApiError::BadRequest(
                "ranges longer than 93 days are not analysed on demand".into(),
            ));
        }
        let input = crate::analysis::load(&state.store, &state.analytics.thresholds, from, to, now)
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        let cfg = state.analytics.thresholds.clone();
        let a = tokio::task::spawn_blocking(move || analytics::analyze(&input, &cfg))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        return Ok((
            serde_json::to_value(a).map_err(|e| ApiError::Internal(e.to_string()))?,
            "computed",
        ));
    }
    if let Some(body) = state.store.latest_analysis().await? {
        let v = serde_json::from_str(&body)
            .map_err(|e| ApiError::Internal(format!("stored analysis: {e}")))?;
        return Ok((v, "stored"));
    }
    let a = crate::analysis::scheduled(&state.store, &state.analytics)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    match a {
        Some(a) => Ok((
            serde_json::to_value(a).map_err(|e| ApiError::Internal(e.to_string()))?,
            "computed",
        )),
        None => Err(ApiError::RetryLater(
            "the first analysis is running on another collector; retry shortly".into(),
            10,
        )),
    }
}

fn check_kind(kind: &Option<String>, valid: &[&str]) -> Result<(), ApiError> {
    match kind {
        Some(k) if !valid.contains(&k.as_str()) => Err(ApiError::BadRequest(format!(
            "unknown kind {k:?}; one of: {}",
            valid.join(", ")
        ))),
        _ => Ok(()),
    }
}

fn matches(item: &Value, f: &Filters, min_severity: Option<analytics::Severity>) -> bool {
    let s = |k: &str| item.get(k).and_then(Value::as_str);
    f.team.as_deref().is_none_or(|t| s("team") == Some(t))
        && f.node.as_deref().is_none_or(|n| s("node") == Some(n))
        && f.kind.as_deref().is_none_or(|k| s("kind") == Some(k))
        && min_severity.is_none_or(|m| {
            s("severity")
                .and_then(analytics::Severity::parse)
                .is_some_and(|sev| sev >= m)
        })
}

fn envelope(v: &Value, source: &str) -> serde_json::Map<String, Value> {
    let ms = |k: &str| v.get(k).and_then(Value::as_i64).unwrap_or(0);
    let mut m = serde_json::Map::new();
    m.insert("generated".into(), json!(rfc3339(ms("generated_ms"))));
    m.insert("from".into(), json!(rfc3339(ms("from_ms"))));
    m.insert("to".into(), json!(rfc3339(ms("to_ms"))));
    m.insert("source".into(), json!(source));
    m.insert(
        "limitations".into(),
        v.get("limitations").cloned().unwrap_or(json!([])),
    );
    m
}

pub async fn findings(
    State(state): State<AppState>,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(f) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let kinds: Vec<&str> = analytics::FindingKind::ALL
        .iter()
        .map(|k| k.as_str())
        .collect();
    check_kind(&f.kind, &kinds)?;
    let min = match f.severity.as_deref() {
        Some(s) => Some(analytics::Severity::parse(s).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "unknown severity {s:?}; one of: info, warning, critical"
            ))
        })?),
        None => None,
    };
    let (v, source) = analysis(&state, &f).await?;
    let list: Vec<Value> = v["findings"]
        .as_array()
        .map(|a| a.iter().filter(|x| matches(x, &f, min)).cloned().collect())
        .unwrap_or_default();
    let mut m = envelope(&v, source);
    m.insert("count".into(), json!(list.len()));
    m.insert("findings".into(), Value::Array(list));
    Ok(Json(Value::Object(m)))
}

pub async fn recommendations(
    State(state): State<AppState>,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(f) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let kinds: Vec<&str> = analytics::RecKind::ALL.iter().map(|k| k.as_str()).collect();
    check_kind(&f.kind, &kinds)?;
    if f.severity.is_some() {
        return Err(ApiError::BadRequest(
            "recommendations have no severity; filter by kind, team or node".into(),
        ));
    }
    let (v, source) = analysis(&state, &f).await?;
    let pick = |k: &str| -> Vec<Value> {
        v[k].as_array()
            .map(|a| a.iter().filter(|x| matches(x, &f, None)).cloned().collect())
            .unwrap_or_default()
    };
    let (list, rejected) = (pick("recommendations"), pick("rejected"));
    let mut m = envelope(&v, source);
    m.insert("count".into(), json!(list.len()));
    m.insert(
        "gpus_freed".into(),
        json!(
            list.iter()
                .filter_map(|r| r["replay"]["gpus_freed"].as_f64())
                .sum::<f64>()
        ),
    );
    m.insert("recommendations".into(), Value::Array(list));
    m.insert("rejected".into(), Value::Array(rejected));
    Ok(Json(Value::Object(m)))
}

/// `/api/v1/funnel`: the funnel of the newest (or requested) analysis.
pub async fn funnel(
    State(state): State<AppState>,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(f) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    if f.kind.is_some() || f.severity.is_some() || f.node.is_some() || f.team.is_some() {
        return Err(ApiError::BadRequest(
            "the funnel takes only `from` and `to`; it is grouped by team and node already".into(),
        ));
    }
    let (v, source) = analysis(&state, &f).await?;
    let mut m = envelope(&v, source);
    m.insert("funnel".into(), v["funnel"].clone());
    Ok(Json(Value::Object(m)))
}
