//! The steps every batch goes through, whether it came as a request (`mod.rs`) or as a frame
//! on a stream (`stream.rs`): the credential, the node's place, the body read and decoded, the
//! batch bound, checked and stored, and the answer counted. Each refusal carries the reason it
//! is counted under.

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use model::wire::v1::{Batch, Format, Limits};
use serde::Serialize;

use super::metrics::{IngestMetrics, Outcome, OutcomeLabels, RejectReason, RowKind, RowLabels};
use super::per_node::{NodeSlot, PerNode};
use super::settings::IngestConfig;
use crate::fleet::LatestGpus;
use collector_shared::agent_auth::Agent as Credential;
use collector_shared::error::ApiError;
use collector_shared::shared::Shared;
use store::{IngestOutcome, StoreError};

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

/// A refusal and the reason it is counted under.
pub(super) type Refusal = (RejectReason, ApiError);

pub(super) fn because(reason: RejectReason) -> impl FnOnce(ApiError) -> Refusal {
    move |e| (reason, e)
}

/// The agent credential of a request's `Authorization` header.
pub(super) async fn authenticate(
    state: &IngestState,
    headers: &HeaderMap,
    peer: Option<std::net::IpAddr>,
) -> Result<Credential, Refusal> {
    state
        .shared
        .auth
        .check_headers(headers, peer)
        .await
        .map_err(because(RejectReason::Unauthenticated))
}

/// One of the node's `[ingest] max_in_flight_per_node` places, when the credential or the
/// client certificate names the node; a 429 when they are all taken.
pub(super) fn node_slot(
    state: &IngestState,
    cred: &Credential,
    client: Option<&collector_shared::tls::ClientIdentity>,
) -> Result<Option<NodeSlot>, Refusal> {
    let node = cred
        .only_node()
        .or_else(|| client.and_then(|c| c.only_name()));
    node.map(|node| {
        state.per_node.enter(node).ok_or_else(|| {
            (
                RejectReason::NodeBusy,
                ApiError::TooManyRequests(
                    format!(
                        "node {node:?} already has {} batches in flight; send the next when one \
                         is answered ([ingest] max_in_flight_per_node)",
                        state.per_node.limit()
                    ),
                    1,
                ),
            )
        })
    })
    .transpose()
}

/// A decoded batch checked and stored: whose data it is, its domain, then the store; the
/// answer once it is committed.
pub(super) async fn store_batch(
    state: &IngestState,
    cred: &Credential,
    client: Option<&collector_shared::tls::ClientIdentity>,
    batch: Batch,
) -> Result<IngestResponse, Refusal> {
    // Whose data it is comes first: a batch for a node the token is not bound to is a 403,
    // whatever else is wrong with it.
    collector_shared::agent_auth::Auth::authorize(cred, &batch.cluster, &batch.node)
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

/// The request's body, within `[ingest] max_body_bytes`.
pub(super) async fn read_body(state: &IngestState, body: Body) -> Result<Bytes, Refusal> {
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
    Ok(bytes)
}

/// A body as received (counted in `gpulens_ingest_batch_size_bytes`), its `Content-Encoding`
/// undone within the decoded-size limit, as a batch in `format`.
pub(super) fn decode_batch(
    state: &IngestState,
    format: Format,
    encoding: &str,
    bytes: &[u8],
) -> Result<Batch, Refusal> {
    state.metrics.batch_bytes.observe(bytes.len() as f64);
    let decoded =
        decode_body(encoding, bytes, state.ingest.max_decoded_bytes).map_err(|e| match e {
            ApiError::PayloadTooLarge(_) => (RejectReason::TooLarge, e),
            _ => (RejectReason::Compression, e),
        })?;
    intake::batch::decode(format, &decoded)
        .map_err(|e| (RejectReason::Decode, ApiError::BadRequest(e)))
}

/// The answer to a stored or duplicate batch, counted.
pub(super) fn answer(state: &IngestState, batch: &Batch, outcome: IngestOutcome) -> IngestResponse {
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
pub fn decode_body(encoding: &str, bytes: &[u8], max: usize) -> Result<Vec<u8>, ApiError> {
    use intake::body::BodyError;
    intake::body::decode(encoding, bytes, max).map_err(|e| match e {
        BodyError::TooLarge(m) => ApiError::PayloadTooLarge(m),
        BodyError::Malformed(m) => ApiError::BadRequest(m),
        BodyError::Unsupported(m) => ApiError::UnsupportedMediaType(m),
    })
}
