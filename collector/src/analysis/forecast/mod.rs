//! The demand forecast an analysis carries: the pools' and teams' hours of use and the waiting
//! work over the forecast history (longer than the window) read once for the fleet, summed
//! per pool, team and hour, and forecast off the async runtime ([`analytics::forecast`]).

pub mod api;

use std::time::{Duration, Instant};

use analytics::Analysis;
use analytics::forecast::History;
use analytics::input::GpuRef;
use model::rollup::{HOUR_MS, bucket_of};
use store::Store;

/// Adds the forecast of the history ending at `to` (ms) to `analysis`; a history of 0 in
/// `cfg` leaves it without one. Returns how long it took and the pool-team-hours it read.
pub async fn add(
    store: &Store,
    cfg: &analytics::Config,
    gpus: &[GpuRef],
    to: i64,
    analysis: &mut Analysis,
) -> anyhow::Result<(Duration, usize)> {
    let history_ms = cfg.forecast_history.as_millis() as i64;
    if history_ms <= 0 {
        return Ok((Duration::ZERO, 0));
    }
    let started = Instant::now();
    let to = bucket_of(to, HOUR_MS);
    let from = to - history_ms;
    let hours = store.use_hours(from, to).await?;
    let rows = hours.len();
    let waiting = store
        .waiting(from, to)
        .await?
        .into_iter()
        .map(waiting_of)
        .collect();
    let history = History {
        from_ms: from,
        to_ms: to,
        hours,
        waiting,
        gpus: gpus.to_vec(),
    };
    let weeks = cfg.forecast_weeks;
    let forecasts =
        tokio::task::spawn_blocking(move || analytics::forecast::forecast(&history, weeks)).await?;
    analysis.forecast = Some(forecasts);
    Ok((started.elapsed(), rows))
}

/// A stored waiting episode as the analysis reads it.
pub fn waiting_of(w: store::waiting::WaitingRecord) -> analytics::input::Waiting {
    analytics::input::Waiting {
        name: format!("{}/{}", w.scope, w.name),
        cluster: w.cluster,
        source: w.source,
        team: w.team,
        resource: w.resource,
        count: w.count,
        product: w.product,
        reason: w.reason,
        message: w.message,
        from_ms: w.since_ms,
        to_ms: w.last_seen_ms,
    }
}
