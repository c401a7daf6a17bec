//! The bounds the listener puts on every request before a handler sees it, apart from the
//! listener and admission code that enforce them so that the OpenAPI document can name them too.

use crate::error::ApiError;

/// The longest request target (path and query) served; a longer one is a JSON 414. (One past
/// hyper's read buffer, about 400 KiB of request head, is answered by hyper itself with a bare
/// 431 or 414 and the connection closed.)
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// The largest body an anonymous request may send (a sign-in form is a few hundred bytes).
pub const ANONYMOUS_MAX_BODY: u64 = 16 * 1024;

/// The answer to a body `axum::body::to_bytes` could not read: a 413 saying `too_large` when
/// it passed its limit, else a 400 — the client stopped sending (a closed connection, the
/// request timeout), which is no fault of the body's size.
pub fn body_refusal(e: &axum::Error, too_large: impl FnOnce() -> String) -> ApiError {
    if body_over_limit(e) {
        ApiError::PayloadTooLarge(too_large())
    } else {
        ApiError::BadRequest(format!("the request body stopped before its end: {e}"))
    }
}

/// Whether reading a body failed on its size limit.
fn body_over_limit(e: &axum::Error) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
}

#[cfg(test)]
mod tests {
    use axum::body::Body;

    /// A body past the limit is told from one that ends in an error.
    #[tokio::test]
    async fn a_body_over_its_limit_is_told_from_one_cut_short() {
        let big = axum::body::to_bytes(Body::from(vec![0u8; 100]), 10)
            .await
            .unwrap_err();
        assert!(super::body_over_limit(&big));
        let cut = Body::from_stream(futures_util::stream::iter([
            Ok(axum::body::Bytes::from_static(b"{")),
            Err(std::io::Error::other("connection reset")),
        ]));
        let cut = axum::body::to_bytes(cut, 10).await.unwrap_err();
        assert!(!super::body_over_limit(&cut));
    }
}
