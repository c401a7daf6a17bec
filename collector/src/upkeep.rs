//! Storage upkeep inside the collector: partitions ahead of time, rollups of minutes that
//! received data, sealing raw rows past the hot window into blocks, and retention. Each runs
//! as its own task on an interval; never on the ingest
//! path.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Unit;
use serde::Deserialize;
use store::Retention;

use collector_shared::metrics::FGauge;
use collector_shared::shared::Shared;
use collector_shared::tasks::{Periodic, Task};

/// Minutes younger than this are not rolled up yet: late samples may still arrive for them.
pub const ROLLUP_GRACE_MS: i64 = 15_000;

/// Raw samples younger than this stay rows; older ones are sealed into ten-minute blocks (a
/// tenth of the bytes; see docs/storage.md). Past the rollup grace, so that the minutes a
/// rollup pass reads are usually still rows.
pub const HOT_WINDOW_MS: i64 = 120_000;

/// The `[retention]` section: how long each resolution is kept.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub raw: Duration,
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub minute: Duration,
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub hour: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        let Retention { raw, minute, hour } = Retention::default();
        RetentionConfig { raw, minute, hour }
    }
}

impl From<&RetentionConfig> for Retention {
    fn from(r: &RetentionConfig) -> Self {
        Retention {
            raw: r.raw,
            minute: r.minute,
            hour: r.hour,
        }
    }
}

model::metric_set! {
    /// What storage upkeep counts.
    pub struct StorageMetrics {
        rollup_buckets: Counter => "rollup_buckets",
            "Node-minute buckets rolled up";
        sealed_samples: Counter => "sealed_samples",
            "Raw samples moved from rows into sealed ten-minute blocks";
        rollup_failures: Counter => "rollup_failures",
            "Rollup passes that failed";
        rollup_undecodable_rows: Counter => "rollup_undecodable_rows",
            "Stored raw rows the rollup could not decode; skipped (not rolled up) so the pass goes on";
        retention_dropped: Counter => "retention_dropped_partitions",
            "Partitions dropped or tables pruned for retention";
        last_rollup_timestamp: FGauge => "last_rollup_timestamp" in Unit::Seconds,
            "When the last rollup pass finished (Unix time)";
        connections_open: Gauge => "store_connections_open",
            "PostgreSQL connections the collector's pool holds open, at most 12 (0 on the embedded SQLite store); read at each scrape";
        connections_in_use: Gauge => "store_connections_in_use",
            "Of those, lent out at the scrape: to ingest's committers (each keeps one while batches keep coming, and gives it back after 1 s without), queries and upkeep. At 12 for long, requests wait for a connection";
    }
}

/// The store and what upkeep counts.
#[derive(Debug, Clone)]
pub struct Upkeep {
    pub shared: Shared,
    pub metrics: StorageMetrics,
    /// The block start up to which this upkeep's last seal pass sealed.
    pub sealed_to: Arc<AtomicI64>,
}

impl Upkeep {
    /// Creates the partitions the next writes need.
    pub async fn partitions(&self, now: i64) -> anyhow::Result<()> {
        Ok(self.shared.store.prepare_partitions(now).await?)
    }

    /// Rolls up the minutes older than the grace; returns how many node-minutes.
    pub async fn rollup(&self, now: i64) -> anyhow::Result<usize> {
        let m = &self.metrics;
        let stats = self
            .shared
            .store
            .rollup(now - ROLLUP_GRACE_MS)
            .await
            .inspect_err(|_| {
                m.rollup_failures.inc();
            })?;
        m.rollup_buckets.inc_by(stats.minutes as u64);
        m.rollup_undecodable_rows
            .inc_by(stats.undecodable_rows as u64);
        m.last_rollup_timestamp
            .set(model::time::now_ms() as f64 / 1000.0);
        Ok(stats.minutes)
    }

    /// Seals raw rows older than the hot window into blocks; returns how many samples. The
    /// cutoff moves once per block span, so a pass runs only when it has: between, there is
    /// nothing but late rows, which the next span's pass takes.
    pub async fn seal(&self, now: i64) -> anyhow::Result<u64> {
        let cutoff = store::block_of(now - HOT_WINDOW_MS);
        if self.sealed_to.load(Ordering::Relaxed) >= cutoff {
            return Ok(0);
        }
        let n = self.shared.store.seal(cutoff).await?;
        self.sealed_to.store(cutoff, Ordering::Relaxed);
        self.metrics.sealed_samples.inc_by(n);
        Ok(n)
    }

    /// Drops what is older than each resolution's retention.
    pub async fn retain(&self, now: i64) -> anyhow::Result<()> {
        let s = &self.shared;
        let retention = s.store.apply_retention(now, &s.retention).await?;
        self.metrics
            .retention_dropped
            .inc_by(retention.dropped.len() as u64);
        if !retention.dropped.is_empty() {
            tracing::info!(dropped = ?retention.dropped, rows = retention.rows_deleted, "retention applied");
        }
        Ok(())
    }

    /// The upkeep tasks, each on its own schedule of `every` (`tasks::Runner` runs them; a
    /// failure or panic in one never stops the others).
    pub fn tasks(&self, every: Duration) -> Vec<Arc<dyn Task>> {
        let u = self.clone();
        let partitions = Periodic::task("partitions", every, move || {
            let u = u.clone();
            Box::pin(async move { u.partitions(model::time::now_ms()).await })
        });
        let u = self.clone();
        let rollups = Periodic::task("rollups", every, move || {
            let u = u.clone();
            // Sealing follows the rollups in the same task: a pass reads rows, not blocks,
            // when it keeps up.
            Box::pin(async move {
                let now = model::time::now_ms();
                u.rollup(now).await?;
                u.seal(now).await.map(|_| ())
            })
        });
        let u = self.clone();
        let retention = Periodic::task("retention", every, move || {
            let u = u.clone();
            Box::pin(async move { u.retain(model::time::now_ms()).await })
        });
        vec![partitions, rollups, retention]
    }
}
