//! Drives a collector with a simulated fleet over the real wire protocol: a bulk backfill of
//! history (many snapshots per batch), then live streaming at the scenario's interval. Each
//! node is one simulated agent with its own agent id and sequence numbers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use ingest_client::{Backoff, Client, Delivered};
use simulator::Fleet;
use tokio::task::JoinSet;

/// One simulated agent per node, sharing a client.
#[derive(Debug, Clone)]
pub struct Driver {
    fleet: Arc<Fleet>,
    client: Client,
    agent_id: String,
    seqs: Arc<Vec<AtomicU64>>,
}

/// What a backfill sent.
#[derive(Debug, Default, Clone, Copy)]
pub struct BackfillStats {
    pub batches: usize,
    pub rows: u64,
}

impl Driver {
    pub fn new(fleet: Fleet, client: Client) -> Driver {
        let seqs = (0..fleet.nodes.len()).map(|_| AtomicU64::new(0)).collect();
        Driver {
            fleet: Arc::new(fleet),
            client,
            // A fresh agent id per run, so sequence numbers can start at 1 again.
            agent_id: format!("sim-{:x}", model::time::now_ms()),
            seqs: Arc::new(seqs),
        }
    }

    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    fn next_seq(&self, node: usize) -> u64 {
        self.seqs[node].fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Sends history for every node from `from_ms` (per node: `start_of(node)`) up to `to_ms`
    /// at `step_ms`, `per_batch` snapshots per batch. `progress` hears (done, total) batches.
    pub async fn backfill(
        &self,
        start_of: impl Fn(usize) -> i64,
        to_ms: i64,
        step_ms: i64,
        per_batch: usize,
        progress: impl Fn(usize, usize) + Send + Sync + 'static,
    ) -> anyhow::Result<BackfillStats> {
        let mut plans = Vec::new();
        for node in 0..self.fleet.nodes.len() {
            let start = start_of(node);
            let first = start + (step_ms - start.rem_euclid(step_ms)) % step_ms;
            let instants: Vec<i64> = (0..)
                .map(|i| first + i * step_ms)
                .take_while(|&t| t < to_ms)
                .collect();
            plans.push((node, instants));
        }
        let total: usize = plans.iter().map(|(_, i)| i.len().div_ceil(per_batch)).sum();
        let done = Arc::new(AtomicUsize::new(0));
        let rows = Arc::new(AtomicU64::new(0));
        let progress = Arc::new(progress);
        let mut tasks = JoinSet::new();
        for (node, instants) in plans {
            let me = self.clone();
            let (done, rows, progress) = (done.clone(), rows.clone(), progress.clone());
            tasks.spawn(async move {
                for chunk in instants.chunks(per_batch) {
                    let seq = me.next_seq(node);
                    let fleet = me.fleet.clone();
                    let agent_id = me.agent_id.clone();
                    let chunk = chunk.to_vec();
                    let batch = tokio::task::spawn_blocking(move || fleet.batch(node, &agent_id, seq, &chunk, step_ms as u32)).await?;
                    match me.client.send_with_retry(&batch, Backoff::default(), |e, wait| {
                        tracing::warn!(node = %batch.node, error = %e, ?wait, "backfill batch not delivered; retrying");
                    }).await? {
                        Delivered::Stored { rows: n } => {
                            rows.fetch_add(n, Ordering::Relaxed);
                        }
                        Delivered::Duplicate => {}
                    }
                    let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                    progress(d, total);
                }
                anyhow::Ok(())
            });
        }
        while let Some(r) = tasks.join_next().await {
            r??;
        }
        Ok(BackfillStats {
            batches: done.load(Ordering::Relaxed),
            rows: rows.load(Ordering::Relaxed),
        })
    }

    /// Streams one snapshot per node per interval, aligned to the interval, until `stop`
    /// resolves or `duration` has passed.
    pub async fn stream(
        &self,
        interval: Duration,
        duration: Option<Duration>,
    ) -> anyhow::Result<()> {
        let mut tasks = JoinSet::new();
        let ends = duration.map(|d| tokio::time::Instant::now() + d);
        for node in 0..self.fleet.nodes.len() {
            let me = self.clone();
            tasks.spawn(async move {
                let mut tick = tokio::time::interval(interval);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let step = interval.as_millis() as i64;
                let mut last_ts = i64::MIN;
                loop {
                    tick.tick().await;
                    if ends.is_some_and(|e| tokio::time::Instant::now() >= e) {
                        return anyhow::Ok(());
                    }
                    let now = model::time::now_ms();
                    let Some(ts) = next_slot(now, step, last_ts) else {
                        continue;
                    };
                    last_ts = ts;
                    let batch =
                        me.fleet
                            .batch(node, &me.agent_id, me.next_seq(node), &[ts], step as u32);
                    // A live sample that cannot be delivered within a minute is dropped
                    // with a warning; the real agent spools instead.
                    let policy = Backoff {
                        give_up_after: Some(Duration::from_secs(60)),
                        ..Backoff::default()
                    };
                    if let Err(e) = me.client.send_with_retry(&batch, policy, |_, _| {}).await {
                        tracing::warn!(node = %batch.node, error = %e, "live batch dropped");
                    }
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r??;
        }
        Ok(())
    }
}

/// The slot a live tick samples: the one `now_ms` is in, unless that slot was sampled already.
/// A tick that fires late and the next one on time can fall in the same wall-clock slot (a
/// loaded machine); sampling it twice would send two snapshots of one moment, against the
/// wire contract (docs/ingest.md, "One snapshot per moment"). The agent keeps the same rule
/// (`agent::schedule`).
fn next_slot(now_ms: i64, step_ms: i64, last_ts: i64) -> Option<i64> {
    let ts = now_ms - now_ms.rem_euclid(step_ms);
    (ts > last_ts).then_some(ts)
}

/// Loads a scenario file, or the built-in default.
pub fn load_scenario(path: Option<&std::path::Path>) -> anyhow::Result<simulator::Scenario> {
    match path {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("cannot read scenario {}: {e}", p.display()))?;
            simulator::Scenario::from_toml(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
        }
        None => Ok(simulator::Scenario::from_toml(DEFAULT_SCENARIO)
            .expect("the built-in scenario is valid")),
    }
}

/// The demo's default scenario (scenarios/k8s-mixed.toml).
pub const DEFAULT_SCENARIO: &str = include_str!("../../scenarios/k8s-mixed.toml");

#[cfg(test)]
mod tests {
    use super::next_slot;

    /// Ticks at 23.001 s and 23.999 s (one late, or the next early) fall in one second-long
    /// slot: the second is skipped, never sent as a second snapshot of 23 s.
    #[test]
    fn a_slot_is_sampled_once_however_the_ticks_fall() {
        let mut last = i64::MIN;
        let mut sent = Vec::new();
        for now in [22_998, 23_001, 23_999, 24_002, 26_500, 26_900] {
            if let Some(ts) = next_slot(now, 1000, last) {
                last = ts;
                sent.push(ts);
            }
        }
        assert_eq!(sent, [22_000, 23_000, 24_000, 26_000]);
    }
}
