//! The HTTP surface in one place: every feature's routes (each with its access rule) merged,
//! the OpenAPI document, and the answers for paths and methods nobody serves (JSON, or a page
//! for a browser's mistyped dashboard path). `router(state)` is the seam tests drive with `oneshot`.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;

use serde_json::json;
use std::sync::{Arc, OnceLock};

use crate::state::AppState;
use collector_shared::access::routes::{Need, Routes, Rule};
use collector_shared::error::ApiError;
use collector_shared::openapi::Op;

/// Every route the collector serves, each with its access rule and description: each
/// feature's own routes, merged, with the state each is served with, and the OpenAPI document
/// made from them.
pub fn routes(state: &AppState) -> Routes {
    let document = Arc::new(OnceLock::new());
    let routes = Routes::new()
        .merge(crate::dashboard::routes().with_state(state.dashboard_state()))
        .merge(crate::health::routes().with_state(state.health_state()))
        .merge(crate::ingest::routes().with_state(state.ingest_state()))
        .merge(crate::remote_write::routes().with_state(state.remote_write_state()))
        .merge(crate::fleet::routes().with_state(state.shared.clone()))
        .merge(crate::demand::routes().with_state(state.shared.clone()))
        .merge(crate::analysis::routes().with_state(state.analysis_state()))
        .merge(crate::alerts::routes().with_state(state.shared.clone()))
        .merge(crate::reports::routes().with_state(state.reports_state()))
        .merge(crate::labels::routes().with_state(state.labels_state()))
        .merge(crate::reclaim::routes().with_state(state.reclaim_state()))
        .merge(Routes::new().get(
            "/api/v1/openapi.json",
            Need::Public,
            Op::new("This document").response(200, json!({"description": "OpenAPI 3.1"})),
            {
                let document = document.clone();
                move || async move { openapi(&document) }
            },
        ));
    document
        .set(collector_shared::openapi::document(routes.operations()).to_string())
        .expect("the document is made once");
    routes
}

/// The router: every route, each behind its access rule, and the fallbacks.
pub fn router(state: AppState) -> Router {
    router_and_table(state).0
}

/// The router and the route table it enforces, built once (the server's admission classifier
/// reads the same table).
pub fn router_and_table(state: AppState) -> (Router, std::sync::Arc<[Rule]>) {
    let (router, table) = routes(&state).into_parts();
    let table: std::sync::Arc<[Rule]> = table.into();
    let guard = collector_shared::access::Guard {
        access: state.access.clone(),
        table: table.clone(),
    };
    let router = router
        // After every route, before the fallbacks: each matched route passes its access rule
        // before its handler runs.
        .route_layer(axum::middleware::from_fn_with_state(
            guard,
            collector_shared::access::enforce,
        ))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::map_response(framing_refused));
    (router, table)
}

/// No page of the collector may be framed by another site (an approval form under a
/// transparent frame is a click away from an approval), and no answer sniffed as another
/// type: on every answer, pages and API alike.
async fn framing_refused(mut resp: axum::response::Response) -> axum::response::Response {
    use axum::http::HeaderValue;
    let h = resp.headers_mut();
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static("frame-ancestors 'none'"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    resp
}

/// 404: a page for a browser asking for a dashboard path (it accepts HTML), the API's JSON
/// error for everything else.
async fn not_found(
    headers: axum::http::HeaderMap,
    uri: axum::http::Uri,
) -> axum::response::Response {
    let browser = !uri.path().starts_with("/api/")
        && headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/html"));
    if browser {
        crate::dashboard::no_page(uri.path())
    } else {
        ApiError::NotFound(format!("no route for {}", uri.path())).into_response()
    }
}

/// 405 with the API's JSON error, like every other refusal.
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not served at {}", uri.path()))
}

fn openapi(document: &OnceLock<String>) -> impl IntoResponse + use<> {
    let body = document.get().expect("made with the routes").clone();
    ([(header::CONTENT_TYPE, "application/json")], body)
}
