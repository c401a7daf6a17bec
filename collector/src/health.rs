//! The collector's own health: liveness, readiness, background-task health and `/metrics`.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use std::sync::Arc;

use crate::fleet::LatestGpus;
use collector_shared::access::Caller;
use collector_shared::access::routes::{Need::*, Routes};
use collector_shared::newest::Newest;
use collector_shared::openapi::Op;
use collector_shared::shared::Shared;
use serde_json::json;

/// What the health endpoints and `/metrics` read.
#[derive(Debug, Clone)]
pub struct HealthState {
    pub shared: Shared,
    pub newest: Arc<Newest>,
    pub latest: Arc<LatestGpus>,
    pub refusals: Arc<collector_shared::admission::Refusals>,
    /// Whether readers must sign in (error texts are theirs).
    pub access: Arc<collector_shared::access::Access>,
    /// Where the store's pool is shown (read at each scrape).
    pub storage: crate::upkeep::StorageMetrics,
}

pub fn routes() -> Routes<HealthState> {
    Routes::new()
        .get(
            "/healthz",
            Public,
            plain("The process is alive", "ok"),
            healthz,
        )
        .get("/readyz", Public, readyz_op(), readyz)
        .get("/healthz/tasks", Public, task_health_op(), task_health)
        .get(
            "/metrics",
            Scrape,
            plain(
                "The collector's own metrics (Prometheus text)",
                "OpenMetrics text",
            ),
            metrics,
        )
}

/// An operation that always answers 200 with `what`.
fn plain(summary: &str, what: &str) -> Op {
    Op::new(summary).response(200, json!({ "description": what }))
}

fn readyz_op() -> Op {
    plain("The database answers", "ready")
        .response(503, json!({"description": "database unavailable"}))
}

fn task_health_op() -> Op {
    let health = json!({"$ref": "#/components/schemas/TaskHealth"});
    Op::new("The background tasks (partitions, remote-write settling, rollups, retention, analysis, alerts, reports, label actions): runs, failures, last success and last error of each (an error's text, at most 1,000 bytes, is shown to signed-in callers or where reading is open; others read \"(sign in to see it)\")")
        .json(200, "every task's last pass succeeded (or none ran yet)", health.clone())
        .json(503, "at least one task's last pass failed", health)
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready when the database answers: readiness decides whether the collector gets traffic,
/// and ingest needs only the database. Background tasks whose last pass failed are named in
/// the body (and answered by `/healthz/tasks` with a 503), not made a reason to stop ingest;
/// so are the request classes refused in-flight slots in the last minute (admission.rs).
async fn readyz(State(state): State<HealthState>) -> Response {
    match state.shared.store.ping().await {
        Ok(()) => {
            let failing = state.shared.tasks.failing();
            let mut body = "ready\n".to_owned();
            if !failing.is_empty() {
                body.push_str(&format!(
                    "failing background tasks: {} (see /healthz/tasks)\n",
                    failing.join(", ")
                ));
            }
            let refused = state.refusals.recent(model::time::now_ms());
            if !refused.is_empty() {
                body.push_str(&format!(
                    "requests refused for want of a free slot in the last minute: {} \
                     (gpulens_http_refused_total)\n",
                    refused.join(", ")
                ));
            }
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
///
/// The route is public (probes read it), but an error's text can name clusters, nodes and
/// what a server outside answered: it is shown to signed-in callers, or to anyone where the
/// collector is open to readers; otherwise it reads "sign in to see it".
async fn task_health(State(state): State<HealthState>, caller: Caller) -> Response {
    /// A task as `/healthz/tasks` shows it: its record and whether it is healthy.
    #[derive(serde::Serialize)]
    struct TaskView {
        #[serde(flatten)]
        status: collector_shared::tasks::TaskStatus,
        healthy: bool,
    }
    let shows_errors =
        caller.principal.is_some() || state.access.mode() == collector_shared::access::Mode::Open;
    let tasks: Vec<TaskView> = state
        .shared
        .tasks
        .snapshot()
        .into_iter()
        .map(|mut status| {
            if !shows_errors && status.last_error.is_some() {
                status.last_error = Some("(sign in to see it)".into());
            }
            TaskView {
                healthy: status.healthy(),
                status,
            }
        })
        .collect();
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

async fn metrics(
    State(state): State<HealthState>,
    caller: collector_shared::access::Caller,
    headers: axum::http::HeaderMap,
) -> Response {
    if let Some((open, in_use)) = state.shared.store.pool_connections() {
        state.storage.connections_open.set(i64::from(open));
        state.storage.connections_in_use.set(i64::from(in_use));
    }
    let own = collector_shared::metrics::encode(&state.shared.registry);
    let analysis = state.newest.get(&state.shared.store).await.ok().flatten();
    let alerts = crate::alerts::load(&state.shared.store)
        .await
        .unwrap_or_default();
    let fleet = crate::fleet::encode_metrics(
        &state.latest,
        analysis.as_deref(),
        &alerts,
        model::time::now_ms(),
        caller.scope(),
    );
    let body = format!("{}{fleet}# EOF\n", own.trim_end_matches("# EOF\n"));
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
            collector_shared::metrics::to_prometheus_text(&body),
        )
            .into_response()
    }
}
