//! Background work inside the collector: partitions ahead of time, remote-written scrapes of
//! quiet hosts (and the journal after a start), rollups of minutes that received data, and
//! retention. Runs on an interval; never on the ingest path.

use std::sync::Arc;
use std::time::Duration;

use crate::state::AppState;
use crate::tasks::{Periodic, Task};

/// Minutes younger than this are not rolled up yet: late samples may still arrive for them.
pub const ROLLUP_GRACE_MS: i64 = 15_000;

/// One pass: partitions, remote-write settling, rollups, retention. Returns the rolled-up node-minutes.
pub async fn run_once(state: &AppState) -> anyhow::Result<usize> {
    let now = crate::now_ms();
    state.store.prepare_partitions(now).await?;
    crate::remote_write::settle(state).await?;
    let minutes = rollup(state, now).await?;
    retain(state, now).await?;
    Ok(minutes)
}

/// Rolls up the minutes older than the grace; returns how many node-minutes.
async fn rollup(state: &AppState, now: i64) -> anyhow::Result<usize> {
    let stats = state
        .store
        .rollup(now - ROLLUP_GRACE_MS)
        .await
        .inspect_err(|_| {
            state.metrics.rollup_failures.inc();
        })?;
    state.metrics.rollup_buckets.inc_by(stats.minutes as u64);
    state
        .metrics
        .rollup_undecodable_rows
        .inc_by(stats.undecodable_rows as u64);
    state
        .metrics
        .last_rollup_timestamp
        .set(crate::now_ms() as f64 / 1000.0);
    Ok(stats.minutes)
}

/// Drops what is older than each resolution's retention.
async fn retain(state: &AppState, now: i64) -> anyhow::Result<()> {
    let retention = state.store.apply_retention(now, &state.retention).await?;
    state
        .metrics
        .retention_dropped
        .inc_by(retention.dropped.len() as u64);
    if !retention.dropped.is_empty() {
        tracing::info!(dropped = ?retention.dropped, rows = retention.rows_deleted, "retention applied");
    }
    Ok(())
}

/// The storage tasks, each on its own schedule of `every`: partitions ahead of time,
/// remote-write settling, rollups and retention (`tasks::Runner` runs them; a failure or panic
/// in one never stops the others).
pub fn tasks(state: &AppState, every: Duration) -> Vec<Arc<dyn Task>> {
    let s = state.clone();
    let partitions = Periodic::task("partitions", every, move || {
        let s = s.clone();
        Box::pin(async move { Ok(s.store.prepare_partitions(crate::now_ms()).await?) })
    });
    let s = state.clone();
    let settle = Periodic::task("remote_write_settle", every, move || {
        let s = s.clone();
        Box::pin(async move { Ok(crate::remote_write::settle(&s).await?) })
    });
    let s = state.clone();
    let rollups = Periodic::task("rollups", every, move || {
        let s = s.clone();
        Box::pin(async move { rollup(&s, crate::now_ms()).await.map(|_| ()) })
    });
    let s = state.clone();
    let retention = Periodic::task("retention", every, move || {
        let s = s.clone();
        Box::pin(async move { retain(&s, crate::now_ms()).await })
    });
    vec![partitions, settle, rollups, retention]
}
