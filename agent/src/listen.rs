//! The agent's `/metrics` and `/healthz` listener: the workspace's one listener (crate
//! `listener`) with the agent's bounds and policy. The agent listens on every address of the
//! node in Kubernetes (`0.0.0.0:9402`), so anything on the network can open sockets to it,
//! and a port scan must never cost a batch.
//! - **Headers**: a client has `HEADER_TIMEOUT` to send a request's headers, counted from the
//!   moment the connection opens and again after each response: idle and trickling sockets
//!   are closed.
//! - **Requests**: each answer is bounded by `REQUEST_TIMEOUT`; no route takes a body.
//! - **Connections**: at most `MAX_CONNECTIONS` at once. One more takes the place of the
//!   connection that has waited longest for a request (an idle or trickling socket:
//!   `listener::AtCapacity::CloseLongestWaiting`); when all are in the middle of an answer, it
//!   is closed at once and counted. A flood of idle sockets cannot shut out the kubelet's
//!   probe or Prometheus's scrape.
//! - **File descriptors**: the soft `RLIMIT_NOFILE` is raised to the hard one at start, and the
//!   cap leaves `FD_RESERVE` descriptors for the spool, the NVML library, the kubelet socket
//!   and the connection to the collector, so sockets from outside can never exhaust them.

use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use axum::response::IntoResponse;
use listener::Incoming;
use prometheus_client::metrics::counter::Counter;
use tower::ServiceExt;

pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_CONNECTIONS: usize = 256;
/// Descriptors kept for the agent's own work whatever the listener does.
pub const FD_RESERVE: u64 = 256;

/// Raises the soft open-files limit to the hard one; returns the soft limit in force.
pub fn raise_fd_limit() -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let lim = getrlimit(Resource::Nofile);
    // `None` is RLIM_INFINITY.
    let current = lim.current.unwrap_or(u64::MAX);
    let max = lim.maximum.unwrap_or(u64::MAX);
    if current >= max {
        return current;
    }
    let raised = Rlimit {
        current: lim.maximum,
        maximum: lim.maximum,
    };
    if setrlimit(Resource::Nofile, raised).is_ok() {
        max
    } else {
        current
    }
}

/// How many connections the listener serves at once with `fd_limit` descriptors.
pub fn connection_cap(fd_limit: u64) -> usize {
    (fd_limit.saturating_sub(FD_RESERVE) as usize).clamp(1, MAX_CONNECTIONS)
}

/// Serves `app` on `listener` within the bounds above, for as long as the agent runs.
/// `refused` counts connections closed at the cap.
pub async fn serve(listener: tokio::net::TcpListener, app: axum::Router, refused: Counter) {
    let options = listener::Options {
        limits: listener::Limits {
            header_timeout: HEADER_TIMEOUT,
            request_timeout: REQUEST_TIMEOUT,
            max_connections: connection_cap(raise_fd_limit()),
            shutdown_grace: Duration::ZERO,
        },
        at_capacity: listener::AtCapacity::CloseLongestWaiting,
        tls: None,
        name: "metrics listener",
    };
    listener::serve(
        listener,
        Metrics { app, refused },
        options,
        std::future::pending(),
    )
    .await;
}

/// The agent's routes behind the listener.
struct Metrics {
    app: axum::Router,
    refused: Counter,
}

impl listener::Service for Metrics {
    type Connection = ();

    fn connect(&self, _: std::net::SocketAddr, _: Option<&listener::CertificateDer<'_>>) {}

    fn call(
        &self,
        (): &(),
        request: Request<Incoming>,
    ) -> impl Future<Output = Response<Body>> + Send + 'static {
        let app = self.app.clone();
        async move {
            match app.oneshot(request).await {
                Ok(r) => r,
                Err(never) => match never {},
            }
        }
    }

    fn timed_out(&self, _: Duration) -> Response<Body> {
        (StatusCode::REQUEST_TIMEOUT, "request timed out\n").into_response()
    }

    fn refused(&self) {
        self.refused.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_descriptors_for_the_agent() {
        assert_eq!(connection_cap(65_536), MAX_CONNECTIONS);
        assert_eq!(connection_cap(300), 44);
        assert_eq!(connection_cap(100), 1, "always at least one");
    }
}
