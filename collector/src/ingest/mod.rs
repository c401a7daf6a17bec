//! `POST /api/v1/ingest`: authenticate, bound the body, decompress, decode, validate, bind the
//! node to the token, store, and only then answer 2xx. Every refusal is a 4xx with a JSON error
//! naming the problem, and stores nothing.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use model::wire::v1::Format;
use serde_json::json;

use collector_shared::access::routes::{Need::*, Routes};
use collector_shared::error::ApiError;
use collector_shared::openapi::Op;
use metrics::RejectReason;
use pipeline::{Refusal, authenticate, decode_batch, node_slot, read_body, store_batch};

pub mod metrics;
pub mod per_node;
mod pipeline;
pub mod settings;
pub mod stream;

pub use metrics::IngestMetrics;
pub use per_node::PerNode;
pub use pipeline::{IngestResponse, IngestState, decode_body};
pub use settings::IngestConfig;

/// The ingest routes (merged in `router.rs`).
pub fn routes() -> Routes<IngestState> {
    Routes::new()
        .post("/api/v1/ingest", Agent, operation(), ingest)
        .get(
            model::wire::v1::stream::PATH,
            Agent,
            stream::operation(),
            stream::open,
        )
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

async fn handle(
    state: &IngestState,
    client: Option<&collector_shared::tls::ClientIdentity>,
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
    body: Body,
) -> Result<IngestResponse, Refusal> {
    let cred = authenticate(state, headers, peer).await?;
    // A node bound by its credential or certificate gets its share before its body is read.
    let _slot = node_slot(state, &cred, client)?;
    let format = batch_format(headers).map_err(|e| (RejectReason::Decode, e))?;
    let bytes = read_body(state, body).await?;
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity");
    let batch = decode_batch(state, format, encoding, &bytes)?;
    store_batch(state, &cred, client, batch).await
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
