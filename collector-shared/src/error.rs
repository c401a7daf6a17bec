//! The HTTP API's one error type, mapped to status codes in one place. Clients get a JSON body
//! `{"error": {"code": "...", "message": "..."}}`; internal details stay in the log.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    UriTooLong(String),
    /// The path speaks another protocol than the request asked for (the ingest stream).
    #[error("{0}")]
    UpgradeRequired(String),
    /// The request (headers to response, body included) ran past the server's limit.
    #[error("{0}")]
    Timeout(String),
    /// The database is down or overloaded: retry after the given seconds. The detail is
    /// logged; the answer says only that the database is unavailable.
    #[error("{0}")]
    Unavailable(String, u64),
    /// Not now for another reason (the collector is full, no analysis yet): retry after the
    /// given seconds; the message is the answer.
    #[error("{0}")]
    RetryLater(String, u64),
    /// Too many wrong credentials from this client (attempts.rs): retry after the seconds.
    #[error("{0}")]
    TooManyRequests(String, u64),
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::UriTooLong(_) => StatusCode::URI_TOO_LONG,
            ApiError::UpgradeRequired(_) => StatusCode::UPGRADE_REQUIRED,
            ApiError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Unavailable(..) | ApiError::RetryLater(..) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::TooManyRequests(..) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A short, stable code for the JSON body and for metric labels.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad_request",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::Conflict(_) => "conflict",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::UriTooLong(_) => "uri_too_long",
            ApiError::UpgradeRequired(_) => "upgrade_required",
            ApiError::Timeout(_) => "request_timeout",
            ApiError::Unavailable(..) | ApiError::RetryLater(..) => "unavailable",
            ApiError::TooManyRequests(..) => "too_many_requests",
            ApiError::Internal(_) => "internal",
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => ApiError::Unavailable(m, 5),
            StoreError::BadRequest(m) => ApiError::BadRequest(m),
            StoreError::Conflict(m) => ApiError::RetryLater(m, 1),
            StoreError::Internal(m) => ApiError::Internal(m),
        }
    }
}

impl ApiError {
    /// The JSON body a client gets: `{"error": {"code", "message"}}`, an internal detail or
    /// a database's logged and replaced by a line that gives nothing away.
    pub fn body(&self) -> serde_json::Value {
        let message = match self {
            ApiError::Internal(detail) => {
                tracing::error!(error = %detail, "request failed");
                "internal error; see the collector's log".to_owned()
            }
            ApiError::Unavailable(detail, _) => {
                tracing::warn!(error = %detail, "database unavailable");
                "the database is unavailable; retry later".to_owned()
            }
            other => other.to_string(),
        };
        json!({ "error": { "code": self.code(), "message": message } })
    }

    /// The seconds a client should wait before trying again, where the answer says.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Unavailable(_, secs)
            | ApiError::RetryLater(_, secs)
            | ApiError::TooManyRequests(_, secs) => Some(*secs),
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status(), axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after() {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}
