//! The collector's HTTP listener: HTTP/1.1 connections served by hyper with bounds on
//! everything a client controls, so slow or idle clients cannot hold the collector.
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
//!   `admission::ANONYMOUS_MAX_BODY` with a declared length, and have
//!   `admission::ANONYMOUS_TIMEOUT` for the whole request.
//! - **TLS** (`[server.tls]`, `tls.rs`): the handshake must finish within `header_timeout`;
//!   a connection over the limit is closed before it (a TLS client could not read a plain
//!   503, and a flood must not cost a handshake each).
//! - **Shutdown**: on the signal, the listener closes, connections finish the request they are
//!   serving, and whatever is still running after `shutdown_grace` is dropped.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Request, Response};
use axum::response::IntoResponse;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

use crate::admission::{self, Class, Classifier, Refusals};
use crate::error::ApiError;

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
    let connections = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let in_flight = Slots {
        admission,
        pools: Arc::new(
            Class::ALL.map(|c| Arc::new(Semaphore::new(c.share(limits.max_in_flight)))),
        ),
    };
    let (stop, stopped) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    let mut accept_errors = 0u64;
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment instead of spinning.
                    accept_errors += 1;
                    if accept_errors.is_power_of_two() {
                        tracing::warn!(error = %e, count = accept_errors, "cannot accept a connection");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (stream, peer) = stream;
        while tasks.try_join_next().is_some() {}
        let permit = connections.clone().try_acquire_owned().ok();
        let conn = Conn {
            app: app.clone(),
            in_flight: in_flight.clone(),
            limit: limits.request_timeout,
            builder: builder.clone(),
            stopped: stopped.clone(),
            peer,
        };
        match &tls {
            None => match permit {
                Some(permit) => {
                    tasks.spawn(conn.serve(stream, None, false, permit));
                }
                None => {
                    tasks.spawn(refuse(stream));
                }
            },
            Some(tls) => {
                // Over the limit, a TLS connection is closed before the handshake: a TLS
                // client could not read a plain 503, and a flood must not cost a handshake
                // each.
                let Some(permit) = permit else {
                    drop(stream);
                    continue;
                };
                let (acceptor, required) = (tls.acceptor.clone(), tls.agent_certificates_required);
                let handshake_limit = limits.header_timeout;
                tasks.spawn(async move {
                    let stream = match tokio::time::timeout(
                        handshake_limit,
                        acceptor.accept(stream),
                    )
                    .await
                    {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "tls handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "tls handshake timed out");
                            return;
                        }
                    };
                    let identity = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(crate::tls::identity_of);
                    conn.serve(stream, identity, required, permit).await;
                });
            }
        }
    }
    drop(listener);
    let _ = stop.send(true);
    let open = tasks.len();
    let drained = tokio::time::timeout(limits.shutdown_grace, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open,
            left = tasks.len(),
            grace = ?limits.shutdown_grace,
            "shutting down: connections still busy after the grace period were dropped"
        );
        tasks.abort_all();
    }
    Ok(())
}

/// One accepted connection and what serving it needs.
struct Conn {
    app: axum::Router,
    in_flight: Slots,
    limit: Duration,
    builder: hyper::server::conn::http1::Builder,
    stopped: watch::Receiver<bool>,
    peer: std::net::SocketAddr,
}

impl Conn {
    /// Serves the connection's requests until it closes or the listener shuts down. Each
    /// request carries the peer address and, over mutual TLS, the client certificate's
    /// identity.
    async fn serve<S>(
        mut self,
        io: S,
        identity: Option<crate::tls::ClientIdentity>,
        agent_certificates_required: bool,
        _permit: tokio::sync::OwnedSemaphorePermit,
    ) where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (app, in_flight, limit, peer) = (self.app, self.in_flight, self.limit, self.peer);
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            // Who is asking, for the sign-in attempt limit.
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            if let Some(id) = &identity {
                req.extensions_mut().insert(id.clone());
            }
            let refused = agent_certificates_required
                && identity.is_none()
                && req.uri().path() == "/api/v1/ingest";
            let (app, in_flight) = (app.clone(), in_flight.clone());
            async move {
                if refused {
                    return Ok(ApiError::Unauthorized(
                        "this collector takes agents' batches only over mutual TLS: present a \
                         client certificate signed by its client CA (gpulens-agent \
                         --client-cert/--client-key)"
                            .into(),
                    )
                    .into_response());
                }
                handle(app, in_flight, limit, peer, req).await
            }
        });
        let conn = self.builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(conn);
        tokio::select! {
            _ = conn.as_mut() => {}
            _ = self.stopped.changed() => {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            }
        }
    }
}

/// The longest request target (path and query) served; a longer one is a JSON 414. (One past
/// hyper's read buffer, about 400 KiB of request head, is answered by hyper itself with a bare
/// 431 or 414 and the connection closed.)
pub const MAX_URI_BYTES: usize = 8 * 1024;

async fn handle(
    app: axum::Router,
    slots: Slots,
    limit: Duration,
    peer: std::net::SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<axum::body::Body>, Infallible> {
    let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if target > MAX_URI_BYTES {
        return Ok(ApiError::UriTooLong(format!(
            "the request target is {target} bytes; the limit is {MAX_URI_BYTES}"
        ))
        .into_response());
    }
    let mut limit = limit;
    let permit = if exempt(req.uri().path()) {
        None
    } else {
        let class = (slots.admission.classify)(req.method(), req.uri(), req.headers(), Some(peer));
        if class == Class::Anonymous {
            if let Some(refusal) = admission::anonymous_body_refusal(req.headers()) {
                return Ok(refusal.into_response());
            }
            limit = limit.min(admission::ANONYMOUS_TIMEOUT);
        }
        match slots.pools[class as usize].clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                slots
                    .admission
                    .refusals
                    .record(class, model::time::now_ms());
                return Ok(ApiError::RetryLater(
                    format!(
                        "the collector is serving as many {} requests as it takes; retry shortly",
                        class.as_str()
                    ),
                    1,
                )
                .into_response());
            }
        }
    };
    let answer = tokio::time::timeout(limit, app.oneshot(req)).await;
    drop(permit);
    Ok(match answer {
        Ok(Ok(resp)) => resp,
        Ok(Err(never)) => match never {},
        Err(_) => ApiError::Timeout(format!(
            "the request took longer than {} s (a slow body counts too)",
            limit.as_secs_f64()
        ))
        .into_response(),
    })
}

/// The answer to a connection over the limit: 503 with Retry-After, then close.
async fn refuse(mut stream: tokio::net::TcpStream) {
    const BODY: &str = r#"{"error":{"code":"unavailable","message":"the collector is serving as many connections as it takes; retry shortly"}}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.shutdown().await;
        // Read what the client sent until it closes (bounded by the timeout): closing a
        // socket with unread input sends a reset, which can destroy the answer before the
        // client reads it.
        let mut sink = [0u8; 4096];
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}
