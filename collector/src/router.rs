//! The HTTP surface in one place: every feature's routes merged, the OpenAPI document, and
//! the JSON answers for paths and methods nobody serves. `router(state)` is the seam tests
//! drive with `oneshot`.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::error::ApiError;
use crate::state::AppState;

/// Every route the collector serves: each feature's own routes, merged.
pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(crate::dashboard::routes().with_state(state.dashboard_state()))
        .merge(crate::health::routes().with_state(state.health_state()))
        .merge(crate::ingest::routes().with_state(state.ingest_state()))
        .merge(crate::remote_write::routes().with_state(state.remote_write_state()))
        .merge(crate::fleet::routes().with_state(state.shared.clone()))
        .merge(crate::analysis::routes().with_state(state.analysis_state()))
        .merge(crate::alerts::routes().with_state(state.shared.clone()))
        .merge(crate::reports::routes().with_state(state.reports_state()))
        .merge(crate::labels::routes().with_state(state.labels_state()))
        .route("/api/v1/openapi.json", get(openapi))
        // After every route, before the fallbacks: each matched route passes the access
        // table (access/routes.rs) before its handler runs.
        .route_layer(axum::middleware::from_fn_with_state(
            state.access.clone(),
            crate::access::enforce,
        ))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
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

/// Every path the router serves, for that test.
pub const ROUTES: &[&str] = &[
    "/",
    "/healthz",
    "/readyz",
    "/healthz/tasks",
    "/metrics",
    "/api/v1/ingest",
    "/api/v1/write",
    "/api/v1/nodes",
    "/api/v1/gpus",
    "/api/v1/tenants",
    "/api/v1/series",
    "/api/v1/funnel",
    "/api/v1/findings",
    "/api/v1/recommendations",
    "/api/v1/plan",
    "/api/v1/outcomes",
    "/api/v1/alerts",
    "/api/v1/reports",
    "/api/v1/reports/{week}",
    "/api/v1/label-actions",
    "/api/v1/label-actions/{id}/approve",
    "/api/v1/nodes/{node}/labels",
    "/api/v1/openapi.json",
];

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_covers_every_route_and_its_example_decodes() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
        let paths = doc["paths"].as_object().unwrap();
        for r in ROUTES {
            assert!(paths.contains_key(*r), "{r} is not in openapi.json");
        }
        assert_eq!(
            paths.len(),
            ROUTES.len(),
            "openapi.json documents a route the router does not serve"
        );
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
