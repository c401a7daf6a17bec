//! When a pool runs out of GPUs at the forecast: the first hour ahead in which what its teams
//! hold and wait for (allocated + waiting GPU-equivalents) leaves less than half a GPU free,
//! at the forecast and at either edge of the band its measured error draws.

use serde::{Deserialize, Serialize};

use model::rollup::HOUR_MS;

use super::projection::{Projection, Quantity};

/// A pool is out of GPUs when fewer than this many GPU-equivalents are free.
pub const FREE_MIN: f64 = 0.5;

/// When a pool runs out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOut {
    /// The pool's GPUs.
    pub capacity: f64,
    /// The first hour out at the forecast; `None`: not within the horizon.
    pub at_ms: Option<i64>,
    /// The first hour out at the band's upper edge (demand higher by the error seen).
    pub earliest_ms: Option<i64>,
    /// The first hour out at the band's lower edge; `None`: the pool may not run out.
    pub latest_ms: Option<i64>,
    /// Whether the band is measured (else the edges are the forecast itself).
    pub measured: bool,
    /// The forecast's first hour and the hours it looks ahead.
    pub from_ms: i64,
    pub horizon_h: usize,
}

/// When `projections`' allocated plus waiting demand reaches `capacity` within `horizon_h`
/// hours from `from_ms`; `None` when it does not, even at the band's upper edge, or when
/// there is no model.
pub fn run_out(
    projections: &[Projection],
    capacity: f64,
    from_ms: i64,
    horizon_h: usize,
) -> Option<RunOut> {
    let of = |q| projections.iter().find(|p| p.quantity == q);
    let (alloc, wait) = (of(Quantity::Allocated)?, of(Quantity::Waiting)?);
    let alloc_points = alloc.points(from_ms, horizon_h);
    if alloc_points.is_empty() {
        return None;
    }
    let wait_points = wait.points(from_ms, horizon_h);
    let demand: Vec<(i64, f64, f64, f64)> = alloc_points
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let w = wait_points.get(i);
            let value = a.value + w.map_or(0.0, |w| w.value);
            let low = a.low.unwrap_or(a.value) + w.map_or(0.0, |w| w.low.unwrap_or(w.value));
            let high = a.high.unwrap_or(a.value) + w.map_or(0.0, |w| w.high.unwrap_or(w.value));
            (a.hour_ms, value, low, high)
        })
        .collect();
    let first = |pick: fn(&(i64, f64, f64, f64)) -> f64| {
        demand
            .iter()
            .find(|d| capacity - pick(d) < FREE_MIN)
            .map(|d| d.0)
    };
    let earliest_ms = first(|d| d.3)?;
    Some(RunOut {
        capacity,
        at_ms: first(|d| d.1),
        earliest_ms: Some(earliest_ms),
        latest_ms: first(|d| d.2),
        measured: alloc.accuracy.is_some(),
        from_ms,
        horizon_h,
    })
}

impl RunOut {
    /// The run-out in words, for the overview and the pool's figures.
    pub fn sentence(&self) -> String {
        let when = |ms: i64| {
            let h = (ms - self.from_ms) / HOUR_MS;
            if h <= 0 {
                "now".to_owned()
            } else if h < 48 {
                format!("in {}", model::figures::count(h as f64, "hour", "hours"))
            } else {
                format!("in {} days", h / 24)
            }
        };
        let horizon = format!("the next {} days", self.horizon_h / 24);
        let central = match self.at_ms {
            Some(t) if t <= self.from_ms => format!(
                "has none of its {:.0} GPUs free now: what its teams hold and wait for fills them",
                self.capacity
            ),
            Some(t) => format!(
                "runs out of its {:.0} GPUs {} at the forecast",
                self.capacity,
                when(t)
            ),
            None => format!(
                "keeps GPUs free over {horizon} at the forecast, but may run out of its {:.0}",
                self.capacity
            ),
        };
        let band = match (self.earliest_ms, self.latest_ms, self.measured) {
            (_, _, false) => " (no measured error yet: how sure is unknown)".to_owned(),
            (Some(e), Some(l), true) if e == l => {
                " (sure: the measured error does not move it)".to_owned()
            }
            (Some(e), Some(l), true) => {
                format!(
                    " (at the measured error: as early as {}, as late as {})",
                    when(e),
                    when(l)
                )
            }
            (Some(e), None, true) => format!(
                " (at the measured error: as early as {}, or not in {horizon})",
                when(e)
            ),
            (None, _, true) => String::new(),
        };
        format!("{central}{band}")
    }
}
