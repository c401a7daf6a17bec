//! The analysis a request asks for: the newest stored one, one computed for a requested range,
//! or — before the first scheduled pass — one computed now. The analysis answers share it.

use std::sync::Arc;

use analytics::Analysis;
use serde::Deserialize;

use super::AnalysisState;
use collector_shared::error::ApiError;
use collector_shared::http::parse_time;
use collector_shared::newest::NewestError;

#[derive(Debug, Default, Deserialize)]
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

/// The analysis the request asks for, and whether it was `stored` or `computed` for it.
pub async fn analysis(
    state: &AnalysisState,
    f: &Filters,
) -> Result<(Arc<Analysis>, &'static str), ApiError> {
    let now = model::time::now_ms();
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
        let a = super::analyze_by_cluster(
            &state.shared.store,
            &state.analytics.thresholds,
            super::Span { from, to, now },
            &mut super::LoadStats::default(),
        )
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
        return Ok((Arc::new(a), "computed"));
    }
    match state.newest.get(&state.shared.store).await {
        Ok(Some(a)) => return Ok((a, "stored")),
        Ok(None) => {}
        Err(NewestError::Store(e)) => return Err(e.into()),
        Err(NewestError::Corrupt(e)) => {
            return Err(ApiError::Internal(format!("stored analysis: {e}")));
        }
    }
    let a = super::scheduled(&state.shared.store, &state.analytics, &state.metrics)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    match a {
        Some(a) => Ok((Arc::new(a), "computed")),
        None => Err(ApiError::RetryLater(
            "the first analysis is running on another collector; retry shortly".into(),
            10,
        )),
    }
}
