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
    state
        .metrics
        .rollup_undecodable_rows
        .inc_by(stats.undecodable_rows as u64);
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
///
/// Each pass runs as a task of its own, so a pass that panics (a bug, or data no check
/// foresaw) is logged and counted like one that fails, and the next pass comes as usual: one
/// bad pass never ends rollups, retention and remote-write settling for good.
pub async fn run_forever(state: AppState, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let pass = tokio::spawn({
            let state = state.clone();
            async move { run_once(&state).await }
        });
        let failed = match pass.await {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(format!("{e:#}")),
            Err(e) => Some(format!("the pass panicked: {e}")),
        };
        if let Some(e) = failed {
            state.metrics.background_pass_failures.inc();
            tracing::warn!(error = %e, "background pass failed; will retry");
        }
    }
}
