//! `gpulens-agent run`: a sampling task takes one sample per slot of the [`Schedule`] and
//! writes every batch to the disk spool first; a sending task drains the spool in order,
//! retrying with a short jittered backoff (honouring Retry-After) until the collector
//! acknowledges, dropping only what the collector refuses outright. A small HTTP
//! server serves `/metrics` and `/healthz` from the last cycle.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ingest_client::{Client, SendError};
use tokio::sync::Notify;

use crate::backend::GpuBackend;
use crate::dcgm::Dcgm;
use crate::metrics::{AgentMetrics, DropReason, Sampler, SamplerLabels};
use crate::out_of_domain::OutOfDomain;
use crate::schedule::{Clock, Schedule, Slot, SystemClock, Wake};
use crate::shipper::{AgentState, build_batch, is_disk_full_error};
use crate::spool::{Limits, Spool};

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub collector: String,
    /// The agent's token; a file's is read again as the kubelet rotates it.
    pub token: ingest_client::Token,
    pub state_dir: PathBuf,
    pub interval_ms: u64,
    pub spool_max_bytes: u64,
    /// Share of the state directory's filesystem the spool leaves free (percent).
    pub spool_min_free_percent: u8,
    pub listen: Option<SocketAddr>,
    pub dcgm_url: Option<String>,
    /// A user account trusted to listen on a loopback `dcgm_url` besides the system accounts.
    pub dcgm_exporter_uid: Option<u32>,
    /// Sequence numbers reserved per write of the state file.
    pub seq_block: u64,
    pub pod_resources_socket: PathBuf,
    /// The kubelet's pod directories, when given (`--kubelet-pods-dir`).
    pub kubelet_pods_dir: Option<PathBuf>,
    /// What the node's sharing mechanisms granted, read from the API server (`--kube-api`).
    pub grants: Option<Arc<crate::kube_read::NodeGrants>>,
    /// Write the collector's advisory labels for this node into NFD's features.d here.
    pub nfd_dir: Option<PathBuf>,
    pub nfd_every: Duration,
    /// How the sender waits between failed deliveries.
    pub retry: Retry,
    /// HTTPS to the collector: a private CA, a client certificate.
    pub tls: ingest_client::Tls,
}

/// The kubelet's current assignments, or None on hosts without Kubernetes (no socket) or
/// when the kubelet does not answer (logged).
pub async fn kubelet_assignments(
    socket: &std::path::Path,
    pods_dir: Option<&std::path::Path>,
    grants: Option<&crate::kube_read::NodeGrants>,
) -> Option<crate::kubelet::Assignments> {
    if !socket.exists() {
        return None;
    }
    match crate::kubelet::list(socket).await {
        Ok(pods) => {
            let a = crate::kubelet::Assignments::new(&pods, pods_dir);
            let granted = match grants {
                Some(g) => g.refresh(&a).await,
                None => None,
            };
            Some(match granted {
                Some(g) => a.with_grants(g),
                None => a,
            })
        }
        Err(e) => {
            tracing::warn!(error = %e, "no device assignments from the kubelet this time");
            None
        }
    }
}

pub async fn run(backend: Box<dyn GpuBackend>, cfg: RunConfig) -> anyhow::Result<()> {
    let state = AgentState::load_with_block(Some(&cfg.state_dir), cfg.seq_block)?;
    let spool = Arc::new(Mutex::new(Spool::open_with(
        &cfg.state_dir.join("spool"),
        Limits {
            max_bytes: cfg.spool_max_bytes,
            min_free_percent: cfg.spool_min_free_percent,
        },
    )?));
    let metrics = Arc::new(AgentMetrics::new());
    metrics.record_spool(&spool.lock().expect("spool"));
    let wake = Arc::new(Notify::new());
    let client = Client::with_token(&cfg.collector, cfg.token.clone(), &cfg.tls)?;
    let (cluster, node) = {
        let (c, n) = backend.identity();
        (c.to_owned(), n.to_owned())
    };
    tracing::info!(%cluster, %node, agent_id = %state.agent_id, next_seq = state.next_seq, interval_ms = cfg.interval_ms, spool_cap_bytes = spool.lock().expect("spool").cap_bytes(), "agent running");
    tokio::spawn(send_loop(
        client,
        spool.clone(),
        metrics.clone(),
        wake.clone(),
        cfg.retry,
    ));
    if let Some(dir) = &cfg.nfd_dir {
        tokio::spawn(crate::nfd::refresh_forever(crate::nfd::Refresh {
            collector: cfg.collector.clone(),
            token: cfg.token.clone(),
            cluster: cluster.clone(),
            node: node.clone(),
            dir: dir.clone(),
            every: cfg.nfd_every,
            tls: cfg.tls.clone(),
        }));
    }
    if let Some(addr) = cfg.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
        tokio::spawn(serve_metrics(listener, metrics.clone()));
    }
    let dcgm = match &cfg.dcgm_url {
        Some(url) => Some(
            Dcgm::new(
                url,
                Duration::from_millis(cfg.interval_ms * 5).max(Duration::from_secs(5)),
            )?
            .trusting(cfg.dcgm_exporter_uid),
        ),
        None => None,
    };
    // Device assignments change when pods come and go: refreshed every 10 s beside sampling,
    // so a slow kubelet never delays a cycle.
    let assignments: Arc<Mutex<Option<crate::kubelet::Assignments>>> = Arc::default();
    if cfg.pod_resources_socket.exists() {
        let (slot, socket, dir, grants) = (
            assignments.clone(),
            cfg.pod_resources_socket.clone(),
            cfg.kubelet_pods_dir.clone(),
            cfg.grants.clone(),
        );
        tokio::spawn(async move {
            loop {
                if let Some(a) =
                    kubelet_assignments(&socket, dir.as_deref(), grants.as_deref()).await
                {
                    *slot.lock().expect("assignments") = Some(a);
                }
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
        });
    } else {
        tracing::info!(socket = %cfg.pod_resources_socket.display(), "no kubelet pod-resources socket; pods are attributed from cgroups only");
    }
    let mut sampling = Sampling {
        backend,
        state,
        spool,
        metrics,
        wake,
        dcgm,
        out_of_domain: OutOfDomain::default(),
        assignments,
        cluster,
        node,
        interval_ms: cfg.interval_ms,
    };
    sampling.run(&SystemClock, None).await
}

/// The sampling side of a running agent: one sample per slot of the [`Schedule`], each turned
/// into a batch and appended to the spool.
pub struct Sampling {
    pub backend: Box<dyn GpuBackend>,
    pub state: AgentState,
    pub spool: Arc<Mutex<Spool>>,
    pub metrics: Arc<AgentMetrics>,
    pub wake: Arc<Notify>,
    pub dcgm: Option<Dcgm>,
    /// What no batch may hold (readings outside their domains, impossible rows), taken out of
    /// each snapshot and logged once per GPU and reading or list.
    pub out_of_domain: OutOfDomain,
    pub assignments: Arc<Mutex<Option<crate::kubelet::Assignments>>>,
    pub cluster: String,
    pub node: String,
    pub interval_ms: u64,
}

impl Sampling {
    /// Samples every slot of `clock` until the slot `until_ts` (never, when None).
    pub async fn run(&mut self, clock: &dyn Clock, until_ts: Option<i64>) -> anyhow::Result<()> {
        let resumed = (self.state.last_ts > 0).then_some(self.state.last_ts);
        let mut schedule = Schedule::new(self.interval_ms, resumed);
        let mut misses = MissLog::default();
        loop {
            let now = clock.now_ms();
            let slot = match schedule.wake(now) {
                Wake::Wait(d) => {
                    clock.sleep(d).await;
                    continue;
                }
                Wake::Sample(slot) => slot,
            };
            if until_ts.is_some_and(|u| slot.ts >= u) {
                return Ok(());
            }
            if let Some(last) = resumed.filter(|_| misses.first) {
                let gap = (slot.ts - last) / schedule.interval_ms() - 1;
                if gap > 0 {
                    tracing::info!(
                        slots = gap,
                        "resuming: slots that passed while the agent was stopped have no samples"
                    );
                }
            }
            misses.note(&self.metrics, slot, schedule.interval_ms(), now);
            self.cycle(slot.ts).await;
            clock.sleep(schedule.until_next(clock.now_ms())).await;
        }
    }

    /// Samples the slot `ts` and spools the batch. Nothing here stops the agent: a failed
    /// sample or a spool that cannot take the batch is logged and counted, and the next slot
    /// comes as usual.
    async fn cycle(&mut self, ts: i64) {
        self.state.mark_sampled(ts);
        if let Some(a) = self.assignments.lock().expect("assignments").take() {
            self.backend.set_assignments(a);
        }
        let started = Instant::now();
        let cycle = self.backend.sample(ts);
        observe(&self.metrics, Sampler::Gpu, started, cycle.is_ok());
        let (mut snapshot, mut tenants) = match cycle {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "sampling failed; trying again next interval");
                return;
            }
        };
        if let Some(d) = self.dcgm.as_mut() {
            let started = Instant::now();
            let ok = d.refresh().await;
            observe(&self.metrics, Sampler::Dcgm, started, ok);
            if let Some(readings) = d.current() {
                crate::dcgm::apply(&mut snapshot, readings);
            }
        }
        let taken = self.out_of_domain.take_out(&mut snapshot, &mut tenants);
        self.metrics.count_taken_out(&taken);
        let inventory = self.backend.inventory();
        self.metrics
            .record(&self.cluster, &self.node, &inventory, &snapshot);
        let batch = match build_batch(
            &self.cluster,
            &self.node,
            &mut self.state,
            self.interval_ms as u32,
            inventory,
            vec![(snapshot, tenants)],
        ) {
            Ok(b) => b,
            Err(e) => {
                let reason = if is_disk_full_error(&e) {
                    DropReason::DiskFull
                } else {
                    DropReason::SpoolError
                };
                tracing::error!(error = %e, "cannot number the batch; this sample is lost");
                self.metrics.count_drop(reason, 1);
                return;
            }
        };
        let body = match Client::encode(&batch) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode the batch; this sample is lost");
                self.metrics.count_drop(DropReason::SpoolError, 1);
                return;
            }
        };
        {
            let mut s = self.spool.lock().expect("spool");
            if let Err(e) = s.append(batch.seq, &body) {
                tracing::error!(error = %e, seq = batch.seq, "cannot spool the batch; it is lost");
                self.metrics.count_drop(DropReason::SpoolError, 1);
            }
            self.metrics.record_spool(&s);
        }
        self.wake.notify_one();
    }
}

/// Counts late samples and missed slots; logs missed slots at most once a minute, with how
/// many since the last line.
#[derive(Debug)]
struct MissLog {
    first: bool,
    unlogged: u64,
    logged_at: Option<i64>,
}

impl Default for MissLog {
    fn default() -> Self {
        MissLog {
            first: true,
            unlogged: 0,
            logged_at: None,
        }
    }
}

impl MissLog {
    fn note(&mut self, metrics: &AgentMetrics, slot: Slot, interval_ms: i64, now: i64) {
        self.first = false;
        if slot.is_late(interval_ms) {
            metrics.samples_late.inc();
            tracing::debug!(
                ts = slot.ts,
                late_ms = slot.late_ms,
                "sample taken late in its slot"
            );
        }
        metrics.samples_missed.inc_by(slot.missed);
        self.unlogged += slot.missed;
        if self.unlogged > 0 && self.logged_at.is_none_or(|t| now - t >= 60_000) {
            tracing::warn!(
                missed = self.unlogged,
                ts = slot.ts,
                late_ms = slot.late_ms,
                "sampling slots passed without a sample (a cycle took longer than the interval, the process stalled, or the clock jumped); counted in gpulens_agent_samples_missed_total"
            );
            self.unlogged = 0;
            self.logged_at = Some(now);
        }
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

/// How the sender waits after a failed delivery.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub initial: Duration,
    /// The longest wait between attempts (before jitter). Kept short so that a collector that
    /// comes back is noticed within seconds; an attempt against a collector that is down costs
    /// a refused connection, no body.
    pub max: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(2),
        }
    }
}

/// Delivers spooled batches in order, one at a time.
async fn send_loop(
    client: Client,
    spool: Arc<Mutex<Spool>>,
    metrics: Arc<AgentMetrics>,
    wake: Arc<Notify>,
    retry: Retry,
) {
    // Agents that lost the collector together do not retry in lockstep: the jitter is seeded
    // by the process.
    let mut delays = ingest_client::backoff::Delays::new(
        retry.initial,
        retry.max,
        u64::from(std::process::id()),
    );
    loop {
        let next = {
            let mut s = spool.lock().expect("spool");
            let next = s.peek();
            metrics.record_spool(&s);
            next
        };
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
                delays.reset();
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
                {
                    let mut s = spool.lock().expect("spool");
                    s.release();
                    metrics.record_spool(&s);
                }
                // A short, jittered backoff; never shorter than the collector asks.
                let wait = delays.next(retry_after);
                tracing::warn!(seq = record.seq, error = %message, ?wait, "collector unavailable; batch stays in the spool");
                tokio::time::sleep(wait).await;
            }
            Err(e) => {
                // Refused outright (4xx other than 408/429): sending it again cannot help.
                tracing::error!(seq = record.seq, error = %e, "collector refused a batch; dropped");
                metrics.count_drop(DropReason::Rejected, 1);
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
    let refused = metrics.listener_refused.clone();
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
    crate::listen::serve(listener, app, refused).await;
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;
    use crate::backend::SimulatedBackend;

    /// A wall clock whose sleeps end `early_ms` before the requested time plus up to 5 ms of
    /// jitter — the tick phase pinned at .997 s that lost seconds before — and that takes no real
    /// time, so ten minutes run in a moment.
    struct PinnedClock {
        now: AtomicI64,
        early_ms: i64,
        rng: Mutex<u64>,
    }

    impl Clock for PinnedClock {
        fn now_ms(&self) -> i64 {
            self.now.load(Ordering::SeqCst)
        }

        fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            let mut r = self.rng.lock().unwrap();
            *r ^= *r << 13;
            *r ^= *r >> 7;
            *r ^= *r << 17;
            let jitter = (*r % 6) as i64;
            let ms = d.as_millis() as i64;
            // The phase error is a property of long sleeps; a sleep of a few ms only jitters.
            let advance = if ms >= 50 {
                ms - self.early_ms + jitter
            } else {
                ms + jitter % 3
            };
            self.now.fetch_add(advance.max(0), Ordering::SeqCst);
            Box::pin(async {})
        }
    }

    fn spooled_timestamps(spool: &mut Spool) -> Vec<i64> {
        let mut out = Vec::new();
        while let Some(r) = spool.peek().unwrap() {
            let batch = ingest_client::decode(&r.body).unwrap();
            out.extend(batch.snapshots.iter().map(|s| s.ts));
            spool.commit(r.next).unwrap();
        }
        out
    }

    #[tokio::test]
    async fn ten_minutes_at_a_pinned_tick_phase_of_997_ms_miss_no_slot() {
        let dir = crate::scratch::fresh_dir("pinned").unwrap();
        let scenario = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/k8s-mixed.toml"),
        )
        .unwrap();
        let backend = SimulatedBackend::new(
            simulator::Scenario::from_toml(&scenario).unwrap(),
            "gpu-h100-01",
        )
        .unwrap();
        let start = 1_800_000_000_000i64;
        let clock = PinnedClock {
            now: AtomicI64::new(start + 2),
            early_ms: 3,
            rng: Mutex::new(0x9E37_79B9_7F4A_7C15),
        };
        let spool = Arc::new(Mutex::new(
            // The host's free disk space is not this test's subject.
            Spool::open_with(
                &dir.join("spool"),
                crate::spool::Limits {
                    max_bytes: 1 << 30,
                    min_free_percent: 0,
                },
            )
            .unwrap(),
        ));
        let metrics = Arc::new(AgentMetrics::new());
        let mut sampling = Sampling {
            backend: Box::new(backend),
            state: AgentState::load(Some(&dir)).unwrap(),
            spool: spool.clone(),
            metrics: metrics.clone(),
            wake: Arc::default(),
            dcgm: None,
            out_of_domain: OutOfDomain::default(),
            assignments: Arc::default(),
            cluster: "test".into(),
            node: "gpu-h100-01".into(),
            interval_ms: 1000,
        };
        sampling.run(&clock, Some(start + 600_000)).await.unwrap();
        let ts = spooled_timestamps(&mut spool.lock().unwrap());
        let expected: Vec<i64> = (0..600).map(|k| start + k * 1000).collect();
        assert_eq!(
            ts, expected,
            "one sample per second, none skipped, none twice"
        );
        assert_eq!(metrics.samples_missed.get(), 0);
        assert_eq!(metrics.samples_late.get(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
