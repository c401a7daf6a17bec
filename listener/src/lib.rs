//! gpulens' one HTTP listener, for the agent's `/metrics` and the collector's API alike:
//! HTTP/1.1 connections served by hyper with a bound on everything a client controls, so slow,
//! idle or numerous clients cannot hold the program.
//! - **Headers**: a client has `header_timeout` to send a request's headers, counted from the
//!   moment the connection opens and again from the end of each response, so an idle
//!   keep-alive connection or a trickled header is closed after it.
//! - **Requests**: `request_timeout` bounds a request from its headers to its answer, reading
//!   the body included; past it the service's [`Service::timed_out`] answer is sent.
//! - **Connections**: at most `max_connections` are served at once. What one more gets is the
//!   program's policy ([`AtCapacity`]): the agent closes the connection that has waited
//!   longest for a request (a flood of idle sockets cannot shut out a probe), the collector
//!   answers 503 with `Retry-After` and closes (never queued). Either way the turned-away
//!   connection is reported to [`Service::refused`].
//! - **TLS** (optional): the handshake must finish within `header_timeout`; a connection over
//!   the cap is closed before it (a TLS client could not read a plain answer, and a flood must
//!   not cost a handshake each).
//! - **Shutdown**: when `shutdown` completes the listener closes, connections finish the
//!   request they are serving, and whatever still runs after `shutdown_grace` is dropped.
//! - **Accept errors** (out of file descriptors and the like) wait 50 ms instead of spinning,
//!   logged at each power of two.
//!
//! What a request is allowed (admission, body limits, who is asking) is the program's: it
//! sees each connection once ([`Service::connect`]) and each request ([`Service::call`]).

mod connections;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response};
pub use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
pub use tokio_rustls::TlsAcceptor;
pub use tokio_rustls::rustls::pki_types::CertificateDer;

use connections::Connections;

/// The bounds a listener keeps.
#[derive(Debug, Clone)]
pub struct Limits {
    pub header_timeout: Duration,
    pub request_timeout: Duration,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
}

/// What a connection beyond `max_connections` gets.
#[derive(Debug, Clone)]
pub enum AtCapacity {
    /// The served connection that has waited longest for a request (idle, or still sending
    /// its headers) is closed to make room; when every one is in the middle of an answer, the
    /// new one is closed at once. Connections in the middle of an answer are never closed.
    CloseLongestWaiting,
    /// The new connection is sent these bytes (a whole HTTP response, e.g. a 503 with
    /// `Retry-After` and `connection: close`) and closed; over TLS it is closed unanswered.
    Answer(Arc<[u8]>),
}

/// What the listener serves: a program's routes with its own rules for each request.
pub trait Service: Send + Sync + 'static {
    /// What a connection carries to each of its requests (its peer, a client identity).
    type Connection: Send + Sync + 'static;

    /// A new connection from `peer`, with the first certificate the client presented over
    /// TLS, if any.
    fn connect(
        &self,
        peer: SocketAddr,
        certificate: Option<&CertificateDer<'_>>,
    ) -> Self::Connection;

    /// The answer to one request on `connection`.
    fn call(
        &self,
        connection: &Self::Connection,
        request: Request<Incoming>,
    ) -> impl Future<Output = Response<Body>> + Send + 'static;

    /// The answer to a request that took longer than `limit`.
    fn timed_out(&self, limit: Duration) -> Response<Body>;

    /// A connection turned away at the cap.
    fn refused(&self) {}
}

/// Everything `serve` needs beside the socket and the service.
#[derive(Clone)]
pub struct Options {
    pub limits: Limits,
    pub at_capacity: AtCapacity,
    /// HTTPS instead of HTTP.
    pub tls: Option<TlsAcceptor>,
    /// How logs name this listener ("metrics listener", "API listener").
    pub name: &'static str,
}

/// Serves `service` on `listener` within `options` until `shutdown` completes (for ever when
/// it never does), then lets open connections finish as the module says.
pub async fn serve<S: Service>(
    listener: tokio::net::TcpListener,
    service: S,
    options: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let Options {
        limits,
        at_capacity,
        tls,
        name,
    } = options;
    let service = Arc::new(service);
    let connections = Arc::new(Connections::default());
    let (stop, stopped) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let cap = limits.max_connections.max(1);
    let evict = matches!(at_capacity, AtCapacity::CloseLongestWaiting);
    tokio::pin!(shutdown);
    let mut accept_errors = 0u64;
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_errors += 1;
                    if accept_errors.is_power_of_two() {
                        tracing::warn!(error = %e, count = accept_errors, "{name} cannot accept a connection");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        while tasks.try_join_next().is_some() {}
        let Some(slot) = connections.make_room(cap, evict) else {
            service.refused();
            if let (AtCapacity::Answer(answer), None) = (&at_capacity, &tls) {
                tasks.spawn(refuse(stream, answer.clone()));
            }
            continue;
        };
        let conn = Conn {
            service: service.clone(),
            request_timeout: limits.request_timeout,
            builder: builder.clone(),
            stopped: stopped.clone(),
            peer,
        };
        let id = slot.id();
        let task = match &tls {
            None => tasks.spawn(conn.serve(stream, None, slot)),
            Some(acceptor) => {
                let (acceptor, limit) = (acceptor.clone(), limits.header_timeout);
                tasks.spawn(async move {
                    let stream = match tokio::time::timeout(limit, acceptor.accept(stream)).await {
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
                    let certificate = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .cloned();
                    conn.serve(stream, certificate, slot).await;
                })
            }
        };
        connections.started(id, task);
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
            "{name} shutting down: connections still busy after the grace period were dropped"
        );
        tasks.abort_all();
    }
}

/// One accepted connection and what serving it needs.
struct Conn<S> {
    service: Arc<S>,
    request_timeout: Duration,
    builder: hyper::server::conn::http1::Builder,
    stopped: watch::Receiver<bool>,
    peer: SocketAddr,
}

impl<S: Service> Conn<S> {
    /// Serves the connection's requests until it closes or the listener shuts down; `slot`
    /// is its place among the open connections, marked busy while a request is answered.
    async fn serve<IO>(
        mut self,
        io: IO,
        certificate: Option<CertificateDer<'static>>,
        slot: connections::Slot,
    ) where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let connection = Arc::new(self.service.connect(self.peer, certificate.as_ref()));
        let (service, limit, slot) = (self.service, self.request_timeout, Arc::new(slot));
        let upgrades = Upgrades {
            then: Arc::default(),
            stopping: self.stopped.clone(),
        };
        let answer = hyper::service::service_fn({
            let upgrades = upgrades.clone();
            move |mut req: Request<Incoming>| {
                let (service, connection, slot) =
                    (service.clone(), connection.clone(), slot.clone());
                req.extensions_mut().insert(upgrades.clone());
                async move {
                    let _busy = slot.busy();
                    let call = service.call(&connection, req);
                    let response = match tokio::time::timeout(limit, call).await {
                        Ok(r) => r,
                        Err(_) => service.timed_out(limit),
                    };
                    Ok::<_, std::convert::Infallible>(response)
                }
            }
        });
        {
            let conn = self
                .builder
                .serve_connection(TokioIo::new(io), answer)
                .with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = self.stopped.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        }
        // A request the service took over (`Upgrades::take_over`) keeps the connection, in
        // this task: it counts against the cap and shutdown waits for it as for a request.
        let then = upgrades.then.lock().expect("upgrades").take();
        if let Some(then) = then {
            then.await;
        }
    }
}

/// The connection under an answered upgrade: its bytes both ways, whatever was buffered
/// included.
pub type UpgradedIo = TokioIo<hyper::upgrade::Upgraded>;

/// In every request's extensions: how a service takes its connection over once it has
/// answered `101 Switching Protocols` (a protocol of its own on the same socket, TLS kept).
/// What it runs there stays in the connection's task, so the listener's cap, its eviction
/// and its shutdown grace cover it like any request; it is told when the listener shuts
/// down ([`Stopping`]) and should finish what it is doing and return.
#[derive(Clone)]
pub struct Upgrades {
    then: Arc<std::sync::Mutex<Option<Then>>>,
    stopping: watch::Receiver<bool>,
}

impl std::fmt::Debug for Upgrades {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upgrades").finish_non_exhaustive()
    }
}

/// What runs on a connection taken over.
type Then = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Becomes true when the listener shuts down.
pub type Stopping = watch::Receiver<bool>;

impl Upgrades {
    /// Runs `then` with the connection once the service's `101` answer to `request` is sent.
    /// The answer must be a 101 with the `Upgrade` header the client asked for; any other
    /// answer leaves the connection to HTTP and `then` never runs. The last call on a
    /// connection wins.
    pub fn take_over<B, F, Fut>(&self, request: &mut Request<B>, then: F)
    where
        F: FnOnce(UpgradedIo, Stopping) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let on = hyper::upgrade::on(request);
        let stopping = self.stopping.clone();
        let run = async move {
            match on.await {
                Ok(upgraded) => then(TokioIo::new(upgraded), stopping).await,
                Err(e) => tracing::debug!(error = %e, "an answered upgrade did not happen"),
            }
        };
        *self.then.lock().expect("upgrades") = Some(Box::pin(run));
    }
}

/// Sends a turned-away connection `answer`, then closes it.
async fn refuse(mut stream: tokio::net::TcpStream, answer: Arc<[u8]>) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(&answer).await;
        let _ = stream.shutdown().await;
        // Read what the client sent until it closes (bounded by the timeout): closing a
        // socket with unread input sends a reset, which can destroy the answer before the
        // client reads it.
        let mut sink = [0u8; 4096];
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

#[cfg(test)]
mod tests;
