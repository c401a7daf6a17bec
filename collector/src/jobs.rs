//! Background work inside the collector: partitions ahead of time, remote-written scrapes of
//! quiet hosts (and the journal after a start), rollups of minutes that received data, and
//! retention. Runs on an interval; never on the ingest path.

use std::time::Duration;

use crate::server::AppState;

/// Minutes younger than this are not rolled up yet: late samples may still arrive for them.
pub const ROLLUP_GRACE_MS: i64 = 15_000;

/// One pass: partitions, remote-write settling, rollups, retention. Returns the rolled-up node-minutes.
pub async fn run_once(state: &AppState) -> anyhow::Result<usize> {
    let now = crate::now_ms();
    state.store.prepare_partitions(now).await?;
    crate::remote_write::settle(state).await?;
    let stats = state
        .store
        .rollup(now - ROLLUP_GRACE_MS)
        .await
        .inspect_err(|_| {
            state.metrics.rollup_failures.inc();
        })?;
    state.metrics.rollup_buckets.inc_by(stats.minutes as u64);
    let retention = state.store.apply_retention(now, &state.retention).await?;
    state
        .metrics
        .retention_dropped
        .inc_by(retention.dropped.len() as u64);
    if !retention.dropped.is_empty() {
        tracing::info!(dropped = ?retention.dropped, rows = retention.rows_deleted, "retention applied");
    }
    state
        .metrics
        .last_rollup_timestamp
        .set(crate::now_ms() as f64 / 1000.0);
    Ok(stats.minutes)
}

/// Runs [`run_once`] every `every` until the task is dropped.
pub async fn run_forever(state: AppState, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = run_once(&state).await {
            tracing::warn!(error = %e, "background pass failed; will retry");
        }
    }
}
