//! The collector's HTTP listener: the workspace's one listener (crate `listener`) with the
//! collector's bounds (`[server]`), its admission and its answer at the connection cap, so
//! slow, idle or numerous clients cannot hold the collector.
//! - **Headers**: a client has `header_timeout` to send a request's headers, counted from the
//!   moment the connection opens and again from the end of each response, so an idle
//!   keep-alive connection or a trickled header is closed after it.
//! - **Requests**: `request_timeout` bounds a request from its headers to its response,
//!   reading the body included: a trickled body gets 408.
//! - **Connections**: at most `max_connections` are served at once; one more is answered 503
//!   with `Retry-After` and closed, never queued.
//! - **In flight**: at most `max_in_flight` requests run at once (health, readiness and
//!   `/metrics` excepted, so probes and scrapes still answer under load), shared out by class
//!   (agents, verified readers, anonymous; admission.rs) so one class cannot starve another;
//!   one more of a class that is full is answered 503 with `Retry-After` and counted.
//! - **Anonymous requests** (no credential that verifies) may send a body of at most
//!   `request_limits::ANONYMOUS_MAX_BODY` with a declared length, and have
//!   `admission::ANONYMOUS_TIMEOUT` for the whole request.
//! - **TLS** (`[server.tls]`, `tls.rs`): the handshake must finish within `header_timeout`;
//!   a connection over the limit is closed before it (a TLS client could not read a plain
//!   503, and a flood must not cost a handshake each).
//! - **Shutdown**: on the signal, the listener closes, connections finish the request they are
//!   serving, and whatever is still running after `shutdown_grace` is dropped.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Request, Response};
use axum::response::IntoResponse;
use listener::Incoming;
use serde::Deserialize;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::admission::{self, Class, Classifier, Refusals};
use crate::error::ApiError;
use crate::request_limits::MAX_URI_BYTES;

pub use listener::{Stopping, UpgradedIo, Upgrades};

/// Where agents open an ingest stream.
const STREAM: &str = model::wire::v1::stream::PATH;

/// `[server]` in the configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerLimits {
    #[serde(deserialize_with = "crate::settings::duration")]
    pub header_timeout: Duration,
    #[serde(deserialize_with = "crate::settings::duration")]
    pub request_timeout: Duration,
    pub max_connections: usize,
    pub max_in_flight: usize,
    #[serde(deserialize_with = "crate::settings::duration")]
    pub shutdown_grace: Duration,
    /// HTTPS instead of HTTP, optionally with client certificates for agents (`tls.rs`).
    pub tls: Option<crate::tls::TlsSettings>,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            max_connections: 4096,
            max_in_flight: 256,
            shutdown_grace: Duration::from_secs(10),
            tls: None,
        }
    }
}

/// Paths that skip the in-flight limit: probes and scrapes must answer when the API is busy.
fn exempt(path: &str) -> bool {
    matches!(path, "/healthz" | "/healthz/tasks" | "/readyz" | "/metrics")
}

/// How requests are admitted: their class, and where refusals are counted.
#[derive(Clone)]
pub struct Admission {
    pub classify: Classifier,
    pub refusals: Arc<Refusals>,
}

/// Each class's in-flight slots, with the classifier.
#[derive(Clone)]
struct Slots {
    admission: Admission,
    pools: Arc<[Arc<Semaphore>; 3]>,
}

/// What a connection over the limit is answered (plain HTTP): 503 with `Retry-After`, then
/// close.
fn over_the_limit() -> Arc<[u8]> {
    const BODY: &str = r#"{"error":{"code":"unavailable","message":"the collector is serving as many connections as it takes; retry shortly"}}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    Arc::from(answer.into_bytes())
}

/// Serves `app` on `listener` until `shutdown` completes, within `limits`; over TLS when
/// `tls` is given (the TLS handshake must finish within `header_timeout`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: ServerLimits,
    tls: Option<crate::tls::Tls>,
    admission: Admission,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let service = Api {
        app,
        slots: Slots {
            admission,
            pools: Arc::new(
                Class::ALL.map(|c| Arc::new(Semaphore::new(c.share(limits.max_in_flight)))),
            ),
        },
        agent_certificates_required: tls.as_ref().is_some_and(|t| t.agent_certificates_required),
    };
    let options = listener::Options {
        limits: listener::Limits {
            header_timeout: limits.header_timeout,
            request_timeout: limits.request_timeout,
            max_connections: limits.max_connections,
            shutdown_grace: limits.shutdown_grace,
        },
        at_capacity: listener::AtCapacity::Answer(over_the_limit()),
        tls: tls.map(|t| t.acceptor),
        name: "API listener",
    };
    listener::serve(listener, service, options, shutdown).await;
    Ok(())
}

/// The collector's routes behind the listener, with its admission.
struct Api {
    app: axum::Router,
    slots: Slots,
    agent_certificates_required: bool,
}

/// Who is on the other end of a connection.
struct Peer {
    addr: std::net::SocketAddr,
    /// The client certificate's identity, over mutual TLS.
    identity: Option<crate::tls::ClientIdentity>,
}

impl listener::Service for Api {
    type Connection = Peer;

    fn connect(
        &self,
        addr: std::net::SocketAddr,
        certificate: Option<&listener::CertificateDer<'_>>,
    ) -> Peer {
        Peer {
            addr,
            identity: certificate.and_then(crate::tls::identity_of),
        }
    }

    /// Each request carries the peer address (for the sign-in attempt limit) and, over mutual
    /// TLS, the client certificate's identity.
    fn call(
        &self,
        peer: &Peer,
        mut req: Request<Incoming>,
    ) -> impl std::future::Future<Output = Response<axum::body::Body>> + Send + 'static {
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(peer.addr));
        if let Some(id) = &peer.identity {
            req.extensions_mut().insert(id.clone());
        }
        let refused = self.agent_certificates_required
            && peer.identity.is_none()
            && matches!(req.uri().path(), "/api/v1/ingest" | STREAM);
        let (app, slots, addr) = (self.app.clone(), self.slots.clone(), peer.addr);
        async move {
            if refused {
                return ApiError::Unauthorized(
                    "this collector takes agents' batches only over mutual TLS: present a \
                     client certificate signed by its client CA (gpulens-agent \
                     --client-cert/--client-key)"
                        .into(),
                )
                .into_response();
            }
            handle(app, slots, addr, req).await
        }
    }

    fn timed_out(&self, limit: Duration) -> Response<axum::body::Body> {
        timed_out(limit)
    }
}

/// The answer to a request that took longer than `limit`.
fn timed_out(limit: Duration) -> Response<axum::body::Body> {
    ApiError::Timeout(format!(
        "the request took longer than {} s (a slow body counts too)",
        limit.as_secs_f64()
    ))
    .into_response()
}

/// Admits and answers one request (the listener bounds it by `request_timeout`; an anonymous
/// one gets `admission::ANONYMOUS_TIMEOUT` at most).
async fn handle(
    app: axum::Router,
    slots: Slots,
    peer: std::net::SocketAddr,
    mut req: Request<Incoming>,
) -> Response<axum::body::Body> {
    // An ingest stream takes an agent's slot for each batch it carries, as a request would.
    if req.uri().path() == STREAM {
        req.extensions_mut().insert(admission::AgentSlots {
            slots: slots.pools[Class::Agent as usize].clone(),
            refusals: slots.admission.refusals.clone(),
        });
    }
    let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if target > MAX_URI_BYTES {
        return ApiError::UriTooLong(format!(
            "the request target is {target} bytes; the limit is {MAX_URI_BYTES}"
        ))
        .into_response();
    }
    let mut limit = None;
    let permit = if exempt(req.uri().path()) {
        None
    } else {
        let class = (slots.admission.classify)(req.method(), req.uri(), req.headers(), Some(peer));
        if class == Class::Anonymous {
            if let Some(refusal) = admission::anonymous_body_refusal(req.headers()) {
                return refusal.into_response();
            }
            limit = Some(admission::ANONYMOUS_TIMEOUT);
        }
        match slots.pools[class as usize].clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                slots
                    .admission
                    .refusals
                    .record(class, model::time::now_ms());
                return ApiError::RetryLater(
                    format!(
                        "the collector is serving as many {} requests as it takes; retry shortly",
                        class.as_str()
                    ),
                    1,
                )
                .into_response();
            }
        }
    };
    let answer = app.oneshot(req);
    let answer = match limit {
        None => answer.await,
        Some(limit) => match tokio::time::timeout(limit, answer).await {
            Ok(r) => r,
            Err(_) => return timed_out(limit),
        },
    };
    drop(permit);
    match answer {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}
