//! `gpulens-agent run`: a sampling task writes every batch to the disk spool first; a sending
//! task drains the spool in order, retrying with backoff (honouring Retry-After) until the
//! collector acknowledges, dropping only what the collector refuses outright. A small HTTP
//! server serves `/metrics` and `/healthz` from the last cycle.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ingest_client::{Client, SendError};
use tokio::sync::Notify;

use crate::backend::GpuBackend;
use crate::dcgm::Dcgm;
use crate::metrics::{AgentMetrics, DropLabels, DropReason, Sampler, SamplerLabels};
use crate::shipper::{AgentState, build_batch, now_ms};
use crate::spool::Spool;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub collector: String,
    pub token: String,
    pub state_dir: PathBuf,
    pub interval_ms: u64,
    pub spool_max_bytes: u64,
    pub listen: Option<SocketAddr>,
    pub dcgm_url: Option<String>,
    /// Sequence numbers reserved per write of the state file.
    pub seq_block: u64,
    pub pod_resources_socket: PathBuf,
    pub kubelet_pods_dir: PathBuf,
    /// Write the collector's advisory labels for this node into NFD's features.d here.
    pub nfd_dir: Option<PathBuf>,
    pub nfd_every: Duration,
}

/// The kubelet's current assignments, or None on hosts without Kubernetes (no socket) or
/// when the kubelet does not answer (logged).
pub async fn kubelet_assignments(
    socket: &std::path::Path,
    pods_dir: &std::path::Path,
) -> Option<crate::kubelet::Assignments> {
    if !socket.exists() {
        return None;
    }
    match crate::kubelet::list(socket).await {
        Ok(pods) => Some(crate::kubelet::Assignments::new(&pods, Some(pods_dir))),
        Err(e) => {
            tracing::warn!(error = %e, "no device assignments from the kubelet this time");
            None
        }
    }
}

pub async fn run(mut backend: Box<dyn GpuBackend>, cfg: RunConfig) -> anyhow::Result<()> {
    let mut state = AgentState::load_with_block(Some(&cfg.state_dir), cfg.seq_block)?;
    let spool = Arc::new(Mutex::new(Spool::open(
        &cfg.state_dir.join("spool"),
        cfg.spool_max_bytes,
    )?));
    let metrics = Arc::new(AgentMetrics::new());
    let wake = Arc::new(Notify::new());
    let client = Client::new(&cfg.collector, &cfg.token)?;
    let (cluster, node) = {
        let (c, n) = backend.identity();
        (c.to_owned(), n.to_owned())
    };
    tracing::info!(%cluster, %node, agent_id = %state.agent_id, next_seq = state.next_seq, interval_ms = cfg.interval_ms, "agent running");
    tokio::spawn(send_loop(
        client,
        spool.clone(),
        metrics.clone(),
        wake.clone(),
    ));
    if let Some(dir) = &cfg.nfd_dir {
        tokio::spawn(crate::nfd::refresh_forever(crate::nfd::Refresh {
            collector: cfg.collector.clone(),
            token: cfg.token.clone(),
            cluster: cluster.clone(),
            node: node.clone(),
            dir: dir.clone(),
            every: cfg.nfd_every,
        }));
    }
    if let Some(addr) = cfg.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
        tokio::spawn(serve_metrics(listener, metrics.clone()));
    }
    let mut dcgm = match &cfg.dcgm_url {
        Some(url) => Some(Dcgm::new(
            url,
            Duration::from_millis(cfg.interval_ms * 5).max(Duration::from_secs(5)),
        )?),
        None => None,
    };
    // Device assignments change when pods come and go: refreshed every 10 s beside sampling,
    // so a slow kubelet never delays a cycle.
    let assignments: Arc<Mutex<Option<crate::kubelet::Assignments>>> = Arc::default();
    if cfg.pod_resources_socket.exists() {
        let (slot, socket, dir) = (
            assignments.clone(),
            cfg.pod_resources_socket.clone(),
            cfg.kubelet_pods_dir.clone(),
        );
        tokio::spawn(async move {
            loop {
                if let Some(a) = kubelet_assignments(&socket, &dir).await {
                    *slot.lock().expect("assignments") = Some(a);
                }
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
        });
    } else {
        tracing::info!(socket = %cfg.pod_resources_socket.display(), "no kubelet pod-resources socket; pods are attributed from cgroups only");
    }
    let mut tick = tokio::time::interval(Duration::from_millis(cfg.interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        // Instants sit on a grid (the interval, at most a second) so nodes line up; an instant
        // already sampled (by this run or before a restart) is never sampled again.
        let now = now_ms();
        let ts = now - now.rem_euclid((cfg.interval_ms as i64).min(1000));
        if ts <= state.last_ts {
            continue;
        }
        if let Some(a) = assignments.lock().expect("assignments").take() {
            backend.set_assignments(a);
        }
        let started = Instant::now();
        let cycle = backend.sample(ts);
        observe(&metrics, Sampler::Gpu, started, cycle.is_ok());
        let (mut snapshot, tenants) = match cycle {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "sampling failed; trying again next interval");
                continue;
            }
        };
        if let Some(d) = dcgm.as_mut() {
            let started = Instant::now();
            let ok = d.refresh().await;
            observe(&metrics, Sampler::Dcgm, started, ok);
            if let Some(readings) = d.current() {
                crate::dcgm::apply(&mut snapshot, readings);
            }
        }
        let inventory = backend.inventory();
        metrics.record(&node, &inventory, &snapshot);
        let batch = build_batch(
            &cluster,
            &node,
            &mut state,
            cfg.interval_ms as u32,
            inventory,
            vec![(snapshot, tenants)],
        )?;
        let body = Client::encode(&batch)?;
        {
            let mut s = spool.lock().expect("spool");
            let before = s.dropped_records;
            s.append(batch.seq, &body)?;
            metrics
                .dropped
                .get_or_create(&DropLabels {
                    reason: DropReason::SpoolFull,
                })
                .inc_by(s.dropped_records - before);
            metrics.record_spool(&s);
        }
        wake.notify_one();
    }
}

fn observe(metrics: &AgentMetrics, sampler: Sampler, started: Instant, ok: bool) {
    let l = SamplerLabels { sampler };
    metrics
        .sampler_duration
        .get_or_create(&l)
        .observe(started.elapsed().as_secs_f64());
    metrics.sampler_success.get_or_create(&l).set(i64::from(ok));
}

/// Delivers spooled batches in order, one at a time.
async fn send_loop(
    client: Client,
    spool: Arc<Mutex<Spool>>,
    metrics: Arc<AgentMetrics>,
    wake: Arc<Notify>,
) {
    let initial = Duration::from_millis(200);
    let mut delay = initial;
    loop {
        let next = spool.lock().expect("spool").peek();
        let record = match next {
            Ok(Some(r)) => r,
            Ok(None) => {
                let _ = tokio::time::timeout(Duration::from_secs(1), wake.notified()).await;
                continue;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot read the spool; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        match client.send_encoded(record.body).await {
            Ok(_) => {
                delay = initial;
                metrics.batches_sent.inc();
                let mut s = spool.lock().expect("spool");
                if let Err(e) = s.commit(record.next) {
                    tracing::error!(error = %e, "cannot advance the spool cursor");
                }
                metrics.record_spool(&s);
            }
            Err(SendError::Retryable {
                message,
                retry_after,
            }) => {
                metrics.send_failures.inc();
                let wait = retry_after.map_or(delay, |r| r.max(delay));
                tracing::warn!(seq = record.seq, error = %message, ?wait, "collector unavailable; batch stays in the spool");
                tokio::time::sleep(wait).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
            Err(e) => {
                // Refused outright (4xx other than 408/429): sending it again cannot help.
                tracing::error!(seq = record.seq, error = %e, "collector refused a batch; dropped");
                metrics
                    .dropped
                    .get_or_create(&DropLabels {
                        reason: DropReason::Rejected,
                    })
                    .inc();
                let mut s = spool.lock().expect("spool");
                if let Err(e) = s.commit(record.next) {
                    tracing::error!(error = %e, "cannot advance the spool cursor");
                }
                metrics.record_spool(&s);
            }
        }
    }
}

async fn serve_metrics(listener: tokio::net::TcpListener, metrics: Arc<AgentMetrics>) {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move |headers: axum::http::HeaderMap| {
                let m = metrics.clone();
                async move {
                    // OpenMetrics when asked for; the Prometheus text format otherwise.
                    let om = headers
                        .get("accept")
                        .and_then(|v| v.to_str().ok())
                        .is_some_and(|a| a.contains("application/openmetrics-text"));
                    if om {
                        (
                            [(
                                "content-type",
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            m.encode(),
                        )
                    } else {
                        (
                            [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
                            model::exposition::to_prometheus_text(&m.encode()),
                        )
                    }
                }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }));
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "metrics server stopped");
    }
}
