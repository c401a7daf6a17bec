//! `gpulens-agent bench-recovery`: how fast a running agent drains its backlog once the
//! collector comes back. The real runner (`runner::run`, its own runtime on its own thread as
//! in production) ships to a [`Receiver`] stand-in on 127.0.0.1 that goes down for the outage
//! (listener closed, connections refused) and comes back on the same address. Drain time: from
//! the collector's return to the arrival of the newest batch sampled before it; delivery is in
//! order, so everything older has arrived by then. Ratio: outage ÷ drain time, i.e. how many
//! times faster than real time the outage's data is caught up.

use std::time::{Duration, Instant};

use super::standin::Receiver;
use crate::backend::GpuBackend;
use crate::runner::{RunConfig, run};
use crate::shipper::now_ms;

/// One outage and its drain.
#[derive(Debug, Clone)]
pub struct Round {
    pub outage: Duration,
    pub drain: Duration,
    /// Batches that arrived between the return and the end of the drain.
    pub backlog_batches: usize,
    /// Sequence numbers missing among everything that arrived (0 when nothing was lost).
    pub missing: u64,
}

impl Round {
    pub fn ratio(&self) -> f64 {
        self.outage.as_secs_f64() / self.drain.as_secs_f64().max(1e-3)
    }
}

pub async fn round(
    backend: Box<dyn GpuBackend>,
    outage: Duration,
    interval_ms: u64,
    retry: crate::runner::Retry,
) -> anyhow::Result<Round> {
    let mut receiver = Receiver::start(0).await?;
    let dir = crate::scratch::fresh_dir("agent-bench-recovery")?;
    let cfg = RunConfig {
        collector: receiver.url(),
        token: ingest_client::Token::fixed("bench"),
        state_dir: dir.clone(),
        interval_ms,
        spool_max_bytes: 256 * 1024 * 1024,
        spool_min_free_percent: crate::spool::Limits::DEFAULT_MIN_FREE_PERCENT,
        listen: None,
        dcgm_url: None,
        dcgm_exporter_uid: None,
        seq_block: crate::shipper::SEQ_BLOCK,
        pod_resources_socket: dir.join("no-kubelet.sock"),
        kubelet_pods_dir: None,
        grants: None,
        nfd_dir: None,
        nfd_every: Duration::from_secs(3600),
        retry,
        tls: ingest_client::Tls::default(),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let agent = std::thread::spawn(move || -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            tokio::select! {
                r = run(backend, cfg) => r,
                _ = stopped => Ok(()),
            }
        })
    });
    let result = async {
        wait_for(&receiver, Duration::from_secs(30), |a| a.len() >= 3).await?;
        receiver.go_down();
        tokio::time::sleep(outage).await;
        let back_ms = now_ms();
        let back = Instant::now();
        receiver.come_back().await?;
        // The newest slot sampled before the return (a slot sampled within its first 50 ms
        // may not have been sampled yet at the return).
        let slot = back_ms - back_ms.rem_euclid(interval_ms as i64);
        let target = if back_ms - slot > 50 {
            slot
        } else {
            slot - interval_ms as i64
        };
        let limit = outage + Duration::from_secs(120);
        wait_for(&receiver, limit, |a| {
            a.iter().any(|x| x.ts.iter().any(|&t| t >= target))
        })
        .await?;
        let arrivals = receiver.arrivals();
        let done = arrivals
            .iter()
            .find(|x| x.ts.iter().any(|&t| t >= target))
            .expect("waited for it");
        let mut seqs: Vec<u64> = arrivals.iter().map(|a| a.seq).collect();
        seqs.sort_unstable();
        seqs.dedup();
        let span = seqs.last().unwrap_or(&0) - seqs.first().unwrap_or(&0) + 1;
        Ok::<Round, anyhow::Error>(Round {
            outage,
            drain: done.at.saturating_duration_since(back),
            backlog_batches: arrivals
                .iter()
                .filter(|a| a.at >= back && a.at <= done.at)
                .count(),
            missing: span - seqs.len() as u64,
        })
    }
    .await;
    let _ = stop.send(());
    agent
        .join()
        .map_err(|_| anyhow::anyhow!("the agent thread panicked"))??;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn wait_for(
    receiver: &Receiver,
    limit: Duration,
    done: impl Fn(&[super::standin::Arrival]) -> bool,
) -> anyhow::Result<()> {
    let start = Instant::now();
    while !done(&receiver.arrivals()) {
        if start.elapsed() > limit {
            anyhow::bail!("the agent delivered nothing expected within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}
