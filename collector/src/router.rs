//! The HTTP surface in one place: every feature's routes (each with its access rule) merged,
//! the OpenAPI document, and the JSON answers for paths and methods nobody serves.
//! `router(state)` is the seam tests drive with `oneshot`.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;

use crate::access::routes::{Need, Routes, Rule};
use crate::error::ApiError;
use crate::state::AppState;

/// Every route the collector serves, each with its access rule: each feature's own routes,
/// merged, with the state each is served with.
pub fn routes(state: &AppState) -> Routes {
    Routes::new()
        .merge(crate::dashboard::routes().with_state(state.dashboard_state()))
        .merge(crate::health::routes().with_state(state.health_state()))
        .merge(crate::ingest::routes().with_state(state.ingest_state()))
        .merge(crate::remote_write::routes().with_state(state.remote_write_state()))
        .merge(crate::fleet::routes().with_state(state.shared.clone()))
        .merge(crate::analysis::routes().with_state(state.analysis_state()))
        .merge(crate::alerts::routes().with_state(state.shared.clone()))
        .merge(crate::reports::routes().with_state(state.reports_state()))
        .merge(crate::labels::routes().with_state(state.labels_state()))
        .merge(Routes::new().get("/api/v1/openapi.json", Need::Public, openapi))
}

/// The router: every route, each behind its access rule, and the JSON fallbacks.
pub fn router(state: AppState) -> Router {
    router_and_table(state).0
}

/// The router and the route table it enforces, built once (the server's admission classifier
/// reads the same table).
pub fn router_and_table(state: AppState) -> (Router, std::sync::Arc<[Rule]>) {
    let (router, table) = routes(&state).into_parts();
    let table: std::sync::Arc<[Rule]> = table.into();
    let guard = crate::access::Guard {
        access: state.access.clone(),
        table: table.clone(),
    };
    let router = router
        // After every route, before the fallbacks: each matched route passes its access rule
        // before its handler runs.
        .route_layer(axum::middleware::from_fn_with_state(
            guard,
            crate::access::enforce,
        ))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    (router, table)
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {}", uri.path()))
}

/// 405 with the API's JSON error, like every other refusal.
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not served at {}", uri.path()))
}

/// The OpenAPI description of this API (collector/src/openapi.json; a test keeps it in step
/// with the routes and the wire types).
pub const OPENAPI: &str = include_str!("openapi.json");

/// Whether a route belongs in the OpenAPI document: the API, the probes, `/metrics`, and the
/// dashboard's front page (the one page a program may look for); other pages are for people.
pub fn documented(path: &str) -> bool {
    path == "/"
        || path.starts_with("/api/")
        || path.starts_with("/healthz")
        || matches!(path, "/readyz" | "/metrics")
}

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_ingest_example_is_a_valid_batch() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
        let example = &doc["paths"]["/api/v1/ingest"]["post"]["requestBody"]["content"]["application/json"]
            ["example"];
        let batch: model::wire::v1::Batch =
            serde_json::from_value(example.clone()).expect("the example is a v1 batch");
        let limits = model::wire::v1::Limits {
            max_age_ms: i64::MAX / 4,
            ..Default::default()
        };
        batch
            .validate(&limits, batch.snapshots[0].ts)
            .expect("the example is valid");
    }

    /// The finding kinds the API documents are the ones the analysis declares.
    #[test]
    fn the_openapi_finding_kinds_are_the_declared_ones() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).unwrap();
        let params = doc["paths"]["/api/v1/findings"]["get"]["parameters"]
            .as_array()
            .unwrap();
        let kind = params.iter().find(|p| p["name"] == "kind").unwrap();
        let documented: Vec<&str> = kind["schema"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let declared: Vec<&str> = analytics::FindingKind::ALL
            .iter()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            documented, declared,
            "openapi.json's finding kinds differ from analytics::FindingKind::ALL"
        );
    }
}
