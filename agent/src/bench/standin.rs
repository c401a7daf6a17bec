//! A stand-in for the collector's ingest endpoint, for `gpulens-agent bench-recovery` and the
//! delivery tests: it decodes each batch as the collector does (snappy MessagePack or gzip JSON, wire v1),
//! checks it as the collector does (refusing with 400 what a collector would), records what
//! arrived, acknowledges it, and can be made slow or taken down and brought back on the
//! same address. It stores nothing and checks no token; it measures the agent, not the
//! collector (whose ingest rate is measured by `gpulens bench ingest`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::IntoResponse;

/// One batch as it arrived.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub agent_id: String,
    pub seq: u64,
    /// Its snapshots' timestamps.
    pub ts: Vec<i64>,
    pub at: Instant,
}

#[derive(Debug, Default)]
struct Shared {
    delay_ms: AtomicU64,
    down: AtomicBool,
    arrivals: Mutex<Vec<Arrival>>,
}

/// A running receiver on 127.0.0.1.
#[derive(Debug)]
pub struct Receiver {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl Receiver {
    /// Starts on `port` (0: any free port).
    pub async fn start(port: u16) -> anyhow::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let server = Some(tokio::spawn(serve(listener, shared.clone())));
        Ok(Receiver {
            addr,
            shared,
            server,
        })
    }

    /// The base URL to give the agent as `--collector`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers every request only after `d`.
    pub fn set_delay(&self, d: Duration) {
        self.shared
            .delay_ms
            .store(d.as_millis() as u64, Ordering::SeqCst);
    }

    /// Goes down: stops listening (new connections are refused) and answers requests on
    /// connections already open with 503 and `Connection: close`.
    pub fn go_down(&mut self) {
        self.shared.down.store(true, Ordering::SeqCst);
        if let Some(s) = self.server.take() {
            s.abort();
        }
    }

    /// Comes back on the same address.
    pub async fn come_back(&mut self) -> anyhow::Result<()> {
        let listener = tokio::net::TcpListener::bind(self.addr).await?;
        self.shared.down.store(false, Ordering::SeqCst);
        self.server = Some(tokio::spawn(serve(listener, self.shared.clone())));
        Ok(())
    }

    /// Everything acknowledged so far, in arrival order.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.shared.arrivals.lock().expect("arrivals").clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.abort();
        }
    }
}

async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    let app = axum::Router::new()
        .route(
            "/api/v1/ingest",
            axum::routing::post(move |body: Bytes| ingest(shared.clone(), body)),
        )
        .layer(axum::extract::DefaultBodyLimit::max(64 * 1024 * 1024));
    let _ = axum::serve(listener, app).await;
}

async fn ingest(shared: Arc<Shared>, body: Bytes) -> axum::response::Response {
    let delay = shared.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if shared.down.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [("connection", "close")],
            "down",
        )
            .into_response();
    }
    let batch = match ingest_client::decode(&body) {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, e).into_response(),
    };
    // The collector's own checks, under its default limits: a batch it would refuse is
    // refused here too, so the agent's tests see what a collector would.
    let limits = model::wire::v1::Limits::default();
    if let Err(e) = batch.validate(&limits, crate::shipper::now_ms()) {
        return (StatusCode::BAD_REQUEST, e.0).into_response();
    }
    let rows = batch.snapshots.iter().map(|s| s.gpus.len()).sum::<usize>();
    shared.arrivals.lock().expect("arrivals").push(Arrival {
        agent_id: batch.agent_id,
        seq: batch.seq,
        ts: batch.snapshots.iter().map(|s| s.ts).collect(),
        at: Instant::now(),
    });
    (
        [("content-type", "application/json")],
        format!("{{\"status\":\"stored\",\"rows\":{rows}}}"),
    )
        .into_response()
}
