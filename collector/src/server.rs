//! The HTTP surface: `router(state)` is the seam tests drive with `oneshot`; `serve` binds it
//! to a socket with graceful shutdown.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::auth::Auth;
use crate::config::{IngestConfig, TeamsConfig};
use crate::error::ApiError;
use crate::metrics::Metrics;
use store::{Retention, Store};

/// Everything handlers share. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Inner>);

#[derive(Debug)]
pub struct Inner {
    pub store: Store,
    pub metrics: Metrics,
    pub auth: Auth,
    pub ingest: IngestConfig,
    pub retention: Retention,
    pub teams: Arc<TeamsConfig>,
    pub analytics: crate::analysis::Settings,
    pub labels: crate::labels::settings::Settings,
    pub reports: crate::reports::Settings,
    /// The newest stored analysis, parsed once and shared (dashboard, /metrics, agents'
    /// labels, alerting).
    pub newest: Arc<crate::analysis::Newest>,
    /// Each GPU's newest readings, for the fleet metrics on /metrics.
    pub latest: crate::fleet_metrics::LatestGpus,
    /// Remote-written dcgm-exporter samples waiting for their scrape to complete.
    pub remote_write: crate::remote_write::Receiver,
    /// The background tasks' state (`tasks::Runner`), for `/healthz/tasks` and `/readyz`.
    pub tasks: crate::tasks::TaskHealth,
    /// Revoked dashboard sessions and sign-in attempts per address.
    pub sessions: crate::ui::session::Sessions,
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    pub fn new(
        store: Store,
        auth: Auth,
        ingest: IngestConfig,
        retention: Retention,
        teams: TeamsConfig,
    ) -> AppState {
        AppState::with_analytics(store, auth, ingest, retention, teams, Default::default())
    }

    pub fn with_analytics(
        store: Store,
        auth: Auth,
        ingest: IngestConfig,
        retention: Retention,
        teams: TeamsConfig,
        analytics: crate::analysis::Settings,
    ) -> AppState {
        AppState(Arc::new(Inner {
            store,
            metrics: Metrics::new(),
            auth,
            ingest,
            retention,
            teams: Arc::new(teams),
            analytics,
            labels: Default::default(),
            reports: Default::default(),
            newest: Default::default(),
            latest: Default::default(),
            remote_write: Default::default(),
            tasks: Default::default(),
            sessions: Default::default(),
        }))
    }

    /// The same state with report settings (the time zone the API defaults to).
    pub fn with_reports(self, reports: crate::reports::Settings) -> AppState {
        let mut inner =
            Arc::try_unwrap(self.0).expect("with_reports is called before the state is shared");
        inner.reports = reports;
        AppState(Arc::new(inner))
    }

    /// The same state with label settings (mode, operators who may approve).
    pub fn with_labels(self, labels: crate::labels::settings::Settings) -> AppState {
        let mut inner =
            Arc::try_unwrap(self.0).expect("with_labels is called before the state is shared");
        inner.labels = labels;
        AppState(Arc::new(inner))
    }
}

/// Every route the collector serves.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(crate::ui::overview))
        .route("/nodes", get(crate::ui::nodes))
        .route("/nodes/{node}", get(crate::ui::node))
        .route("/gpus/{uuid}", get(crate::ui::gpu))
        .route("/tenants", get(crate::ui::tenants))
        .route("/teams", get(crate::ui::teams))
        .route("/findings", get(crate::ui::findings))
        .route("/findings/{id}", get(crate::ui::finding))
        .route("/recommendations", get(crate::ui::recommendations))
        .route("/recommendations/{id}", get(crate::ui::recommendation))
        .route(
            "/recommendations/{id}/approve",
            axum::routing::post(crate::ui::approve),
        )
        .route("/reports", get(crate::ui::reports))
        .route("/alerts", get(crate::ui::alerts))
        .route("/login", get(crate::ui::login_page).post(crate::ui::login))
        .route("/logout", axum::routing::post(crate::ui::logout))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/healthz/tasks", get(task_health))
        .route("/metrics", get(metrics))
        .route("/api/v1/ingest", post(crate::ingest::ingest))
        .route("/api/v1/write", post(crate::remote_write::write))
        .route("/api/v1/nodes", get(crate::api::nodes))
        .route("/api/v1/gpus", get(crate::api::gpus))
        .route("/api/v1/tenants", get(crate::api::tenants))
        .route("/api/v1/series", get(crate::api::series))
        .route("/api/v1/funnel", get(crate::api_analytics::funnel))
        .route("/api/v1/findings", get(crate::api_analytics::findings))
        .route(
            "/api/v1/recommendations",
            get(crate::api_analytics::recommendations),
        )
        .route("/api/v1/alerts", get(crate::api_alerts::list))
        .route("/api/v1/reports", get(crate::api_reports::list))
        .route("/api/v1/reports/{week}", get(crate::api_reports::get))
        .route("/api/v1/label-actions", get(crate::api_labels::list))
        .route(
            "/api/v1/nodes/{node}/labels",
            get(crate::api_labels::node_labels),
        )
        .route(
            "/api/v1/label-actions/{id}/approve",
            post(crate::api_labels::approve),
        )
        .route("/api/v1/openapi.json", get(openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
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

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready when the database answers: readiness decides whether the collector gets traffic,
/// and ingest needs only the database. Background tasks whose last pass failed are named in
/// the body (and answered by `/healthz/tasks` with a 503), not made a reason to stop ingest.
async fn readyz(State(state): State<AppState>) -> Response {
    match state.store.ping().await {
        Ok(()) => {
            let failing = state.tasks.failing();
            let body = if failing.is_empty() {
                "ready\n".to_owned()
            } else {
                format!(
                    "ready\nfailing background tasks: {} (see /healthz/tasks)\n",
                    failing.join(", ")
                )
            };
            (StatusCode::OK, body).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable\n").into_response()
        }
    }
}

/// The background tasks: 200 when every task's last pass succeeded (or none ran yet), 503
/// naming those whose last pass failed; the body lists every task with its runs, failures and
/// last error.
async fn task_health(State(state): State<AppState>) -> Response {
    let tasks = state.tasks.snapshot();
    let healthy = tasks.iter().all(|t| t.healthy);
    let status = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        axum::Json(serde_json::json!({ "healthy": healthy, "tasks": tasks })),
    )
        .into_response()
}

async fn metrics(State(state): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    let own = state.metrics.encode();
    let analysis = state.newest.get(&state.store).await.ok().flatten();
    let alerts = crate::alerts::state::load(&state.store)
        .await
        .unwrap_or_default();
    let fleet =
        crate::fleet_metrics::encode(&state.latest, analysis.as_deref(), &alerts, crate::now_ms());
    let body = format!(
        "{}{}{fleet}# EOF\n",
        own.trim_end_matches("# EOF\n"),
        state.remote_write.exposition()
    );
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    if openmetrics {
        (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            crate::metrics::to_prometheus_text(&body),
        )
            .into_response()
    }
}

/// Serves `router` on `listener` until `shutdown` resolves.
/// Serves the router with the default listener limits (`listener::ServerLimits`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(
        listener,
        state,
        crate::listener::ServerLimits::default(),
        shutdown,
    )
    .await
}

/// Serves the router within `limits` (timeouts, connection and in-flight caps).
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: AppState,
    limits: crate::listener::ServerLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::listener::serve(listener, router(state), limits, shutdown).await
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
}
