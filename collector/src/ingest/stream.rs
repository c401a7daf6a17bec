//! `GET /api/v1/ingest/stream`: batches framed one after another on one upgraded connection
//! (`model::wire::v1::stream`, docs/ingest.md "The stream"), each stored exactly as a `POST
//! /api/v1/ingest` of the same body would be and answered with what that request would have
//! got. What a stream saves is the HTTP exchange per batch, on both ends.
//!
//! Bounds, beside the request's own (the upgrade is an agent request like any other):
//! - the credential is checked once, when the stream opens; a stream is closed between two
//!   frames after [`MAX_AGE`], so a revoked token stops within it;
//! - one frame at a time: the next is read once the previous one is answered;
//! - each frame takes an agent's in-flight slot and its node's place, as a request would, or
//!   is answered 503 / 429 (and the stream goes on);
//! - a frame's body is at most `[ingest] max_body_bytes`, stated in its header and refused
//!   before a byte of it is read; its bytes are buffered as they come, never reserved ahead;
//! - a frame must arrive whole within [`FRAME_TIME`] of its first byte; a stream with no frame
//!   for [`IDLE`] is closed;
//! - a header the collector cannot read (a length over the limit, an unknown encoding) is
//!   answered, then the stream closed: nothing after it is known to be a frame's start.

use std::time::{Duration, Instant};

use axum::Extension;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use model::wire::v1::stream::{self, Encoding, HeaderError};
use serde::Serialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::metrics::RejectReason;
use super::pipeline::{self, IngestResponse, IngestState, Refusal};
use collector_shared::admission::AgentSlots;
use collector_shared::agent_auth::Agent as Credential;
use collector_shared::error::ApiError;
use collector_shared::listener::{Stopping, UpgradedIo, Upgrades};
use collector_shared::openapi::Op;
use collector_shared::tls::ClientIdentity;

/// How long a stream stays open; it closes between two frames after this.
pub const MAX_AGE: Duration = Duration::from_secs(600);
/// How long a stream may wait for its next frame.
pub const IDLE: Duration = Duration::from_secs(120);
/// How long a frame may take to arrive, from its first byte.
pub const FRAME_TIME: Duration = Duration::from_secs(60);

pub(super) fn operation() -> Op {
    Op::new("Open an ingest stream: after `101 Switching Protocols`, batches framed one after another on this connection, each answered in turn with what a POST to /api/v1/ingest of the same body would get (docs/ingest.md, \"The stream\"). The gpulens agent uses it where the collector offers it and POSTs otherwise")
        .param(json!({"name": "Upgrade", "in": "header", "required": true, "schema": {"type": "string", "enum": [stream::UPGRADE]}}))
        .param(json!({"name": "Connection", "in": "header", "required": true, "schema": {"type": "string", "enum": ["upgrade"]}}))
        .response(101, json!({
            "description": "Switching to the stream; `gpulens-stream-max-age` says in seconds how long it stays open",
            "headers": {stream::MAX_AGE_HEADER: {"schema": {"type": "integer"}}}
        }))
        .json(426, "The request does not ask for the stream (`Upgrade: gpulens-ingest.v1`)", json!({"$ref": "#/components/schemas/Error"}))
        .refusals(&[401])
        .response(429, json!({
            "description": "Too many wrong agent tokens from this address: send again after Retry-After seconds",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        }))
}

/// Answers the upgrade: the credential checked, the connection taken over for [`run`].
pub async fn open(
    State(state): State<IngestState>,
    client: Option<Extension<ClientIdentity>>,
    caller: collector_shared::access::Caller,
    upgrades: Option<Extension<Upgrades>>,
    slots: Option<Extension<AgentSlots>>,
    mut req: Request,
) -> Response {
    let asks = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|p| p.trim().eq_ignore_ascii_case(stream::UPGRADE))
        });
    if !asks {
        let mut resp = ApiError::UpgradeRequired(format!(
            "this path is the ingest stream: ask for it with `Connection: upgrade` and \
             `Upgrade: {}`, or POST each batch to /api/v1/ingest",
            stream::UPGRADE
        ))
        .into_response();
        resp.headers_mut()
            .insert(header::UPGRADE, HeaderValue::from_static(stream::UPGRADE));
        return resp;
    }
    let cred = match pipeline::authenticate(&state, req.headers(), caller.addr).await {
        Ok(cred) => cred,
        Err((reason, error)) => {
            state.metrics.reject(reason);
            return error.into_response();
        }
    };
    let (Some(Extension(upgrades)), Some(Extension(slots))) = (upgrades, slots) else {
        // Only the collector's own listener can hand a connection over (a router driven
        // directly, as in a test, cannot).
        return ApiError::Internal("the ingest stream needs the collector's listener".into())
            .into_response();
    };
    state.metrics.streams.inc();
    let stream = Stream {
        state,
        cred,
        client: client.map(|Extension(c)| c),
        slots,
    };
    upgrades.take_over(&mut req, move |io, stopping| stream.run(io, stopping));
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(stream::UPGRADE));
    h.insert(stream::MAX_AGE_HEADER, HeaderValue::from(MAX_AGE.as_secs()));
    resp
}

/// The stream's read buffer, and the most reserved for a body before its bytes come.
const READ_BUFFER: usize = 64 * 1024;
/// The write buffer: an answer is a few hundred bytes.
const WRITE_BUFFER: usize = 1024;

/// One open stream: whose it is, and what each of its frames is stored with.
struct Stream {
    state: IngestState,
    cred: Credential,
    client: Option<ClientIdentity>,
    slots: AgentSlots,
}

/// A frame's answer, and whether the stream must close after it.
struct Answered {
    json: Vec<u8>,
    close: bool,
}

#[derive(Serialize)]
struct Stored<'a> {
    code: u16,
    #[serde(flatten)]
    answer: &'a IngestResponse,
}

impl Stream {
    async fn run(self, io: UpgradedIo, mut stopping: Stopping) {
        // Read in large chunks (a frame's header and body usually come in one), written in one.
        let mut io = tokio::io::BufStream::with_capacity(READ_BUFFER, WRITE_BUFFER, io);
        let opened = Instant::now();
        let max_body = self.state.ingest.max_body_bytes;
        while !*stopping.borrow() && opened.elapsed() < MAX_AGE {
            let mut header = [0u8; stream::BATCH_HEADER];
            let first = tokio::select! {
                r = tokio::time::timeout(IDLE, io.read_exact(&mut header[..1])) => r,
                _ = stopping.changed() => break,
            };
            if !matches!(first, Ok(Ok(_))) {
                break; // closed, broken, or idle too long
            }
            let frame = tokio::time::timeout(FRAME_TIME, async {
                io.read_exact(&mut header[1..]).await?;
                let (encoding, len) = match stream::batch_header(header, max_body) {
                    Ok(h) => h,
                    Err(e) => return Ok(Err(e)),
                };
                // Room for a usual body; a longer one grows as its bytes come.
                let mut body = Vec::with_capacity(len.min(READ_BUFFER));
                (&mut io).take(len as u64).read_to_end(&mut body).await?;
                if body.len() < len {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                Ok::<_, std::io::Error>(Ok((encoding, body)))
            })
            .await;
            let answered = match frame {
                Ok(Ok(Ok((encoding, body)))) => self.frame(encoding, &body).await,
                Ok(Ok(Err(bad))) => self.bad_header(&bad),
                Ok(Err(_)) => break, // closed in the middle of a frame
                // Where the next frame would start is not known: answered, then closed.
                Err(_) => Answered {
                    close: true,
                    ..self.refused((
                        RejectReason::Incomplete,
                        ApiError::Timeout(format!(
                            "the frame did not arrive whole within {} s of its first byte",
                            FRAME_TIME.as_secs()
                        )),
                    ))
                },
            };
            let sent = io
                .write_all(&stream::answer_frame(&answered.json))
                .await
                .and(io.flush().await);
            if sent.is_err() || answered.close {
                break;
            }
        }
        let _ = io.shutdown().await;
    }

    /// One batch frame stored as its request would be.
    async fn frame(&self, encoding: Encoding, body: &[u8]) -> Answered {
        let state = &self.state;
        let Some(_permit) = self.slots.take() else {
            // Counted as the listener counts a request it turns away, not as a bad batch.
            return answer_of(&ApiError::RetryLater(
                "the collector is serving as many agent requests as it takes; retry shortly".into(),
                1,
            ));
        };
        let stored = async {
            let client = self.client.as_ref();
            let _slot = pipeline::node_slot(state, &self.cred, client)?;
            let batch = pipeline::decode_batch(
                state,
                encoding.format(),
                encoding.content_encoding(),
                body,
            )?;
            pipeline::store_batch(state, &self.cred, client, batch).await
        };
        match stored.await {
            Ok(answer) => Answered {
                json: serde_json::to_vec(&Stored {
                    code: 200,
                    answer: &answer,
                })
                .expect("an answer serializes"),
                close: false,
            },
            Err(refusal) => self.refused(refusal),
        }
    }

    /// A header that cannot be read: answered, and the stream closes.
    fn bad_header(&self, bad: &HeaderError) -> Answered {
        let refusal = match bad {
            HeaderError::TooLong { .. } => (
                RejectReason::TooLarge,
                ApiError::PayloadTooLarge(bad.to_string()),
            ),
            HeaderError::UnknownEncoding(_) => (
                RejectReason::Compression,
                ApiError::UnsupportedMediaType(bad.to_string()),
            ),
        };
        Answered {
            close: true,
            ..self.refused(refusal)
        }
    }

    /// A refusal counted, as the JSON of its request's answer with the status in `code`.
    fn refused(&self, (reason, error): Refusal) -> Answered {
        self.state.metrics.reject(reason);
        answer_of(&error)
    }
}

/// The JSON of a refused request's answer, its status in `code` and its `Retry-After` in
/// `retry_after`.
fn answer_of(error: &ApiError) -> Answered {
    let mut answer = error.body();
    answer["code"] = error.status().as_u16().into();
    if let Some(secs) = error.retry_after() {
        answer["retry_after"] = secs.into();
    }
    Answered {
        json: serde_json::to_vec(&answer).expect("an answer serializes"),
        close: false,
    }
}
