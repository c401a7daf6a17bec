//! `POST /api/v1/ingest`: authenticate, bound the body, decompress, decode, validate, bind the
//! node to the token, store, and only then answer 2xx. Every refusal is a 4xx with a JSON error
//! naming the problem, and stores nothing.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, header};
use model::wire::v1::{Batch, Format, Limits};
use serde::Serialize;
use serde_json::json;

use crate::fleet::LatestGpus;
use collector_shared::access::routes::{Need::*, Routes};
use collector_shared::error::ApiError;
use collector_shared::openapi::Op;
use collector_shared::shared::Shared;
use metrics::{Outcome, OutcomeLabels, RejectReason, RowKind, RowLabels};
use store::{IngestOutcome, StoreError};

pub mod metrics;
pub mod per_node;
pub mod settings;

pub use metrics::IngestMetrics;
pub use per_node::PerNode;
pub use settings::IngestConfig;

/// What the ingest handler needs.
#[derive(Debug, Clone)]
pub struct IngestState {
    pub shared: Shared,
    /// The `[ingest]` limits.
    pub ingest: Arc<IngestConfig>,
    /// Each node's batches in the handler.
    pub per_node: Arc<PerNode>,
    /// Each GPU's newest readings, updated as batches are stored.
    pub latest: Arc<LatestGpus>,
    pub metrics: IngestMetrics,
}

/// The ingest routes (merged in `router.rs`).
pub fn routes() -> Routes<IngestState> {
    Routes::new().post("/api/v1/ingest", Agent, operation(), ingest)
}

fn operation() -> Op {
    Op::new("Push one batch of samples (agents, simulators, anyone): JSON, or MessagePack with the same field names or with each object as an array of its fields in order (the compact layout the gpulens agent sends, docs/ingest.md), compressed with gzip, snappy (one block) or not at all")
        .param(json!({"name": "Content-Encoding", "in": "header", "schema": {"type": "string", "enum": ["gzip", "snappy", "identity"]}}))
        .body(json!({"required": true, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/Batch"},
            "example": {
                "version": 1, "cluster": "lab", "node": "ws-01", "agent_id": "curl-test", "seq": 1, "interval_ms": 1000,
                "inventory": [{"uuid": "GPU-0b7e1d2a", "index": 0, "model": "NVIDIA L40S", "memory_total_bytes": 48305799168u64}],
                "tenants": [{"key": "host/1001", "kind": "host_user", "user": "alice", "uid": 1001}],
                "snapshots": [{"ts": 1795219200000u64,
                    "gpus": [{"gpu_uuid": "GPU-0b7e1d2a", "gpu_util": 0.87, "mem_used_bytes": 21474836480u64, "power_w": 251.5, "temp_c": 61}],
                    "processes": [{"gpu_uuid": "GPU-0b7e1d2a", "pid": 4242, "start_time": 1795218600000u64, "tenant": "host/1001", "sm_util": 0.85, "mem_used_bytes": 20401094656u64}]}]
            }
        }, "application/msgpack": {
            "schema": {"$ref": "#/components/schemas/Batch"}
        }}}))
        .json(200, "Committed (status stored), or a retry of a stored batch (status duplicate)", json!({"$ref": "#/components/schemas/IngestResponse"}))
        .refusals(&[400, 401, 403, 413, 415])
        .response(429, json!({
            "description": "Too many wrong agent tokens from this address (or from everywhere at once; a right one always passes), or the node has `[ingest] max_in_flight_per_node` batches in flight already: send again after Retry-After seconds",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        }))
        .response(503, json!({
            "description": "Database unavailable; retry after the Retry-After header",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        }))
}

/// The JSON answer to a stored or duplicate batch.
#[derive(Debug, Serialize)]
pub struct IngestResponse {
    /// "stored" or "duplicate".
    pub status: &'static str,
    pub seq: u64,
    /// Rows written (0 for a duplicate).
    pub rows: u64,
    /// The highest sequence number stored for this agent id.
    pub last_seq: u64,
}

pub async fn ingest(
    State(state): State<IngestState>,
    client: Option<axum::Extension<collector_shared::tls::ClientIdentity>>,
    caller: collector_shared::access::Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<IngestResponse>, ApiError> {
    let client = client.map(|axum::Extension(c)| c);
    match handle(&state, client.as_ref(), caller.addr, &headers, body).await {
        Ok(r) => Ok(Json(r)),
        Err((reason, error)) => {
            state.metrics.reject(reason);
            Err(error)
        }
    }
}

/// A refusal and the reason it is counted under.
type Refusal = (RejectReason, ApiError);

fn because(reason: RejectReason) -> impl FnOnce(ApiError) -> Refusal {
    move |e| (reason, e)
}

async fn handle(
    state: &IngestState,
    client: Option<&collector_shared::tls::ClientIdentity>,
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
    body: Body,
) -> Result<IngestResponse, Refusal> {
    let cred = state
        .shared
        .auth
        .check_headers(headers, peer)
        .await
        .map_err(because(RejectReason::Unauthenticated))?;
    // A node bound by its credential or certificate gets its share before its body is read.
    let node = cred
        .only_node()
        .or_else(|| client.and_then(|c| c.only_name()));
    let _slot = node
        .map(|node| {
            state.per_node.enter(node).ok_or_else(|| {
                (
                    RejectReason::NodeBusy,
                    ApiError::TooManyRequests(
                        format!(
                            "node {node:?} already has {} batches in flight; send the next when \
                             one is answered ([ingest] max_in_flight_per_node)",
                            state.per_node.limit()
                        ),
                        1,
                    ),
                )
            })
        })
        .transpose()?;
    let batch = read_batch(state, headers, body).await?;
    // Whose data it is comes first: a batch for a node the token is not bound to is a 403,
    // whatever else is wrong with it.
    collector_shared::agent_auth::Auth::authorize(&cred, &batch.cluster, &batch.node)
        .map_err(because(RejectReason::Forbidden))?;
    // Over mutual TLS the client certificate binds the node as well.
    if let Some(c) = client
        && !c.allows(&batch.node)
    {
        return Err((
            RejectReason::Forbidden,
            ApiError::Forbidden(format!(
                "the client certificate is for {}, not node {:?}",
                c.names.join(", "),
                batch.node
            )),
        ));
    }
    let now = model::time::now_ms();
    let limits = Limits {
        max_rows: state.ingest.max_rows,
        max_age_ms: state.shared.retention.raw.as_millis() as i64,
        ..Limits::default()
    };
    batch
        .validate(&limits, now)
        .map_err(|e| (RejectReason::Invalid, ApiError::BadRequest(e.0)))?;

    let started = Instant::now();
    let teams = state.shared.teams.clone();
    let team_of = move |t: &model::Tenant| teams.team_of(t);
    let outcome = state
        .shared
        .store
        .ingest(&batch, now, &team_of)
        .await
        .map_err(|e| {
            let reason = match e {
                StoreError::Unavailable(_) | StoreError::Conflict(_) => RejectReason::Unavailable,
                StoreError::BadRequest(_) => RejectReason::Invalid,
                StoreError::Internal(_) => RejectReason::Internal,
            };
            (reason, ApiError::from(e))
        })?;
    state
        .metrics
        .storage_write
        .observe(started.elapsed().as_secs_f64());
    Ok(answer(state, &batch, outcome))
}

/// The request's body as a batch: JSON or MessagePack by its `Content-Type`, within the body
/// and decoded-size limits.
async fn read_batch(
    state: &IngestState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Batch, Refusal> {
    let format = batch_format(headers).map_err(|e| (RejectReason::Decode, e))?;
    let max_body = state.ingest.max_body_bytes;
    let bytes = axum::body::to_bytes(body, max_body).await.map_err(|e| {
        let refusal = collector_shared::request_limits::body_refusal(&e, || {
            format!("request body exceeds {max_body} bytes")
        });
        match refusal {
            ApiError::PayloadTooLarge(_) => (RejectReason::TooLarge, refusal),
            _ => (RejectReason::Incomplete, refusal),
        }
    })?;
    state.metrics.batch_bytes.observe(bytes.len() as f64);
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity");
    let decoded =
        decode_body(encoding, bytes, state.ingest.max_decoded_bytes).map_err(|e| match e {
            ApiError::PayloadTooLarge(_) => (RejectReason::TooLarge, e),
            _ => (RejectReason::Compression, e),
        })?;
    intake::batch::decode(format, &decoded)
        .map_err(|e| (RejectReason::Decode, ApiError::BadRequest(e)))
}

/// The batch's encoding by its `Content-Type`; a 415 naming the accepted ones otherwise.
fn batch_format(headers: &HeaderMap) -> Result<Format, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("(not text)"));
    ct.and_then(Format::from_content_type).ok_or_else(|| {
        let accepted = Format::ALL.map(Format::content_type).join(" or ");
        ApiError::UnsupportedMediaType(match ct {
            Some(ct) => format!("Content-Type must be {accepted}, got {ct:?}"),
            None => format!("Content-Type must be {accepted}; the request has none"),
        })
    })
}

/// The answer to a stored or duplicate batch, counted.
fn answer(state: &IngestState, batch: &Batch, outcome: IngestOutcome) -> IngestResponse {
    match outcome {
        IngestOutcome::Stored { rows } => {
            state.latest.record(batch);
            let m = &state.metrics;
            m.batches
                .get_or_create(&OutcomeLabels {
                    outcome: Outcome::Stored,
                })
                .inc();
            m.batch_rows.observe(rows as f64);
            for (kind, n) in [
                (
                    RowKind::Gpu,
                    batch.snapshots.iter().map(|s| s.gpus.len()).sum::<usize>(),
                ),
                (
                    RowKind::Mig,
                    batch.snapshots.iter().map(|s| s.mig.len()).sum(),
                ),
                (
                    RowKind::Process,
                    batch.snapshots.iter().map(|s| s.processes.len()).sum(),
                ),
                (
                    RowKind::Allocation,
                    batch.snapshots.iter().map(|s| s.allocations.len()).sum(),
                ),
                (
                    RowKind::Event,
                    batch.snapshots.iter().map(|s| s.events.len()).sum(),
                ),
            ] {
                m.rows.get_or_create(&RowLabels { kind }).inc_by(n as u64);
            }
            if let Some((_, newest)) = batch.time_range() {
                m.ingest_lag
                    .observe(((model::time::now_ms() - newest).max(0)) as f64 / 1000.0);
            }
            IngestResponse {
                status: "stored",
                seq: batch.seq,
                rows,
                last_seq: batch.seq,
            }
        }
        IngestOutcome::Duplicate { last_seq } => {
            state
                .metrics
                .batches
                .get_or_create(&OutcomeLabels {
                    outcome: Outcome::Duplicate,
                })
                .inc();
            IngestResponse {
                status: "duplicate",
                seq: batch.seq,
                rows: 0,
                last_seq,
            }
        }
    }
}

/// Undoes `Content-Encoding` within `max` decoded bytes (`intake::body`), as the API's errors.
pub fn decode_body(encoding: &str, bytes: Bytes, max: usize) -> Result<Vec<u8>, ApiError> {
    use intake::body::BodyError;
    intake::body::decode(encoding, &bytes, max).map_err(|e| match e {
        BodyError::TooLarge(m) => ApiError::PayloadTooLarge(m),
        BodyError::Malformed(m) => ApiError::BadRequest(m),
        BodyError::Unsupported(m) => ApiError::UnsupportedMediaType(m),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_documented_example_is_a_valid_batch() {
        let op = super::operation().to_json();
        let example = &op["requestBody"]["content"]["application/json"]["example"];
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
