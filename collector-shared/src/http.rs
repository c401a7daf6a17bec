//! What handlers of every feature share: about reading a request, query-string mistakes as
//! 400s, and times and steps of the query domain (`intake::query`); about answering, the one
//! view of a recorded workflow step (label actions and reclaim cases keep the same trail).

use axum::extract::rejection::QueryRejection;

use model::time::rfc3339;
use serde::Serialize;

use crate::error::ApiError;

/// Query-string mistakes become the API's JSON error.
pub fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::BadRequest(e.body_text())
}

/// A time of the query domain (`intake::query::parse_time`); a mistake is a 400 naming it.
pub fn parse_time(s: &str, now: i64) -> Result<i64, ApiError> {
    intake::query::parse_time(s, now).map_err(ApiError::BadRequest)
}

/// A step of the query domain (`intake::query::parse_step`); a mistake is a 400 naming it.
pub fn parse_step(s: &str) -> Result<i64, ApiError> {
    intake::query::parse_step(s).map_err(ApiError::BadRequest)
}

/// A list's `limit`: 100 unless given, 1 to 1,000.
pub fn list_limit(limit: Option<i64>) -> Result<i64, ApiError> {
    let limit = limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be between 1 and 1000, got {limit}"
        )));
    }
    Ok(limit)
}

/// One step of a recorded workflow (a label action's run, a reclaim case): when, who, what,
/// and the result.
#[derive(Debug, Serialize)]
pub struct StepView {
    pub at: String,
    pub actor: String,
    pub step: String,
    pub result: String,
    pub detail: String,
}

impl From<store::audit::Step> for StepView {
    fn from(s: store::audit::Step) -> Self {
        StepView {
            at: rfc3339(s.ts_ms),
            actor: s.actor,
            step: s.step,
            result: s.result,
            detail: s.detail,
        }
    }
}
