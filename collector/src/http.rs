//! What handlers of every feature share about reading a request: query-string mistakes as
//! 400s, and times and steps of the query domain (`intake::query`).

use axum::extract::rejection::QueryRejection;

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
