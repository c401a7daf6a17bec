//! The agent's `/metrics` and `/healthz` listener, defended like the collector's: the agent
//! listens on every address of the node in Kubernetes (`0.0.0.0:9402`), so anything on the
//! network can open sockets to it, and a port scan must never cost a batch.
//! - **Headers**: a client has `HEADER_TIMEOUT` to send a request's headers, counted from the
//!   moment the connection opens and again after each response: idle and trickling sockets
//!   are closed.
//! - **Requests**: each answer is bounded by `REQUEST_TIMEOUT`; no route takes a body.
//! - **Connections**: at most `MAX_CONNECTIONS` at once. One more takes the place of the
//!   connection that has waited longest for a request (an idle or trickling socket); when all
//!   are in the middle of an answer, it is closed at once and counted. A flood of idle sockets
//!   cannot shut out the kubelet's probe or Prometheus's scrape.
//! - **File descriptors**: the soft `RLIMIT_NOFILE` is raised to the hard one at start, and the
//!   cap leaves `FD_RESERVE` descriptors for the spool, the NVML library, the kubelet socket
//!   and the connection to the collector, so sockets from outside can never exhaust them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
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
    let cap = connection_cap(raise_fd_limit());
    let table = Arc::new(Table::default());
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(true);
    let mut accept_errors = 0u64;
    let mut next_id = 0u64;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                accept_errors += 1;
                if accept_errors.is_power_of_two() {
                    tracing::warn!(error = %e, count = accept_errors, "metrics listener cannot accept a connection");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if !table.make_room(cap) {
            refused.inc();
            drop(stream);
            continue;
        }
        next_id += 1;
        let id = next_id;
        let busy = Arc::new(AtomicBool::new(false));
        let (app, builder, table2, busy2) =
            (app.clone(), builder.clone(), table.clone(), busy.clone());
        let task = tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (app, busy) = (app.clone(), busy2.clone());
                async move {
                    busy.store(true, Ordering::Release);
                    let answer = tokio::time::timeout(REQUEST_TIMEOUT, app.oneshot(req)).await;
                    busy.store(false, Ordering::Release);
                    match answer {
                        Ok(r) => r,
                        Err(_) => Ok(axum::response::IntoResponse::into_response((
                            axum::http::StatusCode::REQUEST_TIMEOUT,
                            "request timed out\n",
                        ))),
                    }
                }
            });
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
            table2.remove(id);
        });
        table.insert(id, busy, task.abort_handle());
    }
}

/// The connections being served. At the cap, a new connection takes the place of the one
/// that has waited longest for a request (idle, or still sending its headers): a flood of
/// idle sockets can delay a probe by one round trip, never shut it out. Connections in the
/// middle of an answer are never closed.
#[derive(Default)]
struct Table {
    open: Mutex<BTreeMap<u64, (Arc<AtomicBool>, tokio::task::AbortHandle)>>,
}

impl Table {
    /// Whether a new connection may be served, closing the oldest waiting one if needed.
    fn make_room(&self, cap: usize) -> bool {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() < cap {
            return true;
        }
        // Ids grow with time: the first waiting one has waited longest.
        let oldest = open
            .iter()
            .find(|(_, (busy, _))| !busy.load(Ordering::Acquire))
            .map(|(id, _)| *id);
        match oldest.and_then(|id| open.remove(&id)) {
            Some((_, task)) => {
                task.abort();
                true
            }
            None => false,
        }
    }

    fn insert(&self, id: u64, busy: Arc<AtomicBool>, task: tokio::task::AbortHandle) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        // A connection that already finished removed nothing: do not keep it.
        if !task.is_finished() {
            open.insert(id, (busy, task));
        }
    }

    fn remove(&self, id: u64) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
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
