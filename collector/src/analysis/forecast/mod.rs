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
    gpus: Vec<GpuRef>,
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
        gpus,
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

/// The forecast as `gpulens analyze` prints it: each pool's demand now and at the horizon,
/// when it runs out and how sure that is; each team's held demand ahead.
pub fn table(a: &Analysis) -> String {
    use analytics::forecast::{Quantity, Scope};
    use std::fmt::Write;
    let Some(f) = &a.forecast else {
        return String::new();
    };
    let mut s = format!(
        "\nDemand forecast, {} weeks ahead (docs/analytics.md, \"Demand forecast\"):\n",
        f.horizon_h / 168
    );
    for series in &f.series {
        let Some(p) = series.projection(Quantity::Allocated) else {
            continue;
        };
        let at_horizon = f.at_horizon(p).map_or_else(
            || "no forecast".to_owned(),
            |x| format!("{x:.1} at the horizon"),
        );
        let error = p
            .accuracy
            .as_ref()
            .map(|x| x.sentence())
            .or_else(|| p.note.clone())
            .unwrap_or_default();
        let what = match &series.scope {
            Scope::Pool { .. } => "pool",
            Scope::Team { .. } => "team",
        };
        let _ = writeln!(
            s,
            "  {what} {}: holds {:.1} GPUs now, {at_horizon}; {error}",
            series.scope.label(),
            p.recent
        );
        if let Some(r) = &series.run_out {
            let _ = writeln!(s, "    {}", r.sentence());
        }
    }
    s
}
