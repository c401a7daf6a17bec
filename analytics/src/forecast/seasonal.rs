//! The forecast's model: a linear trend plus one level per hour of the season (of the week when
//! the history holds two weeks, else of the day) — the "trend and seasonal dummy variables"
//! regression of Hyndman & Athanasopoulos, *Forecasting: Principles and Practice* (3rd ed.,
//! §7.4), fitted by ordinary least squares. Chosen for GPU fleets because their demand repeats
//! by hour of day (inference follows people) and day of week (training and batch work start on
//! weekdays) in shapes no few harmonics draw (a busy Friday is one day in seven), and because
//! the fit is closed-form, exact and cheap: one pass over the history, nothing to tune.

use serde::{Deserialize, Serialize};

use model::rollup::HOUR_MS;

/// Hours in a week and in a day: the two seasons the model knows.
pub const WEEK_H: usize = 168;
pub const DAY_H: usize = 24;

/// A fitted model: `value(hour) = levels[slot(hour)] + slope × (hours since origin)`, never
/// below zero. The trend is carried no further ahead than the history it was fitted to is long
/// (a week's history, a week's trend; beyond, the level holds): a straight line drawn from a few
/// days says little about the month after — a damped trend in the sense of Gardner & McKenzie
/// (1985), cut rather than decayed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Seasonal {
    /// The hour the trend counts from (the first hour fitted).
    pub origin_ms: i64,
    /// Change per hour.
    pub slope: f64,
    /// The last hour the trend reaches (ms): the last hour fitted plus the history's span.
    pub trend_until_ms: i64,
    /// One level per hour of the season (24 or 168), the season starting at the epoch's hour
    /// (UTC).
    pub levels: Vec<f64>,
}

/// The season a history of `hours` observed hours (spanning `span_h`) can fit: a week's when
/// every hour of the week was seen twice, a day's when every hour of the day was, else none.
pub fn season_for(span_h: usize) -> Option<usize> {
    if span_h >= 2 * WEEK_H {
        Some(WEEK_H)
    } else if span_h >= 2 * DAY_H {
        Some(DAY_H)
    } else {
        None
    }
}

impl Seasonal {
    /// The least-squares fit of `points` (hour start, value) with a season of `period` hours.
    /// Within each slot, the trend is what moves the value from one season to the next; the
    /// slope pooled over the slots is the trend, and each slot's level its mean less the trend.
    /// `None` when no point was given.
    pub fn fit(points: &[(i64, f64)], period: usize) -> Option<Seasonal> {
        let origin_ms = points.iter().map(|p| p.0).min()?;
        let last_ms = points.iter().map(|p| p.0).max()?;
        let t = |ms: i64| ((ms - origin_ms) / HOUR_MS) as f64;
        let mut n = vec![0.0f64; period];
        let mut t_sum = vec![0.0f64; period];
        let mut y_sum = vec![0.0f64; period];
        for &(ms, y) in points {
            let s = slot(ms, period);
            n[s] += 1.0;
            t_sum[s] += t(ms);
            y_sum[s] += y;
        }
        let mean = |sum: &[f64], s: usize| if n[s] > 0.0 { sum[s] / n[s] } else { 0.0 };
        let (mut cross, mut square) = (0.0, 0.0);
        for &(ms, y) in points {
            let s = slot(ms, period);
            let dt = t(ms) - mean(&t_sum, s);
            cross += dt * (y - mean(&y_sum, s));
            square += dt * dt;
        }
        let slope = if square > 0.0 { cross / square } else { 0.0 };
        let seen: Vec<Option<f64>> = (0..period)
            .map(|s| (n[s] > 0.0).then(|| mean(&y_sum, s) - slope * mean(&t_sum, s)))
            .collect();
        Some(Seasonal {
            origin_ms,
            slope,
            trend_until_ms: last_ms + (last_ms - origin_ms + HOUR_MS),
            levels: fill_unseen(&seen),
        })
    }

    /// The forecast value of the hour starting at `hour_ms`.
    pub fn value(&self, hour_ms: i64) -> f64 {
        let t = ((hour_ms.min(self.trend_until_ms) - self.origin_ms) / HOUR_MS) as f64;
        (self.levels[slot(hour_ms, self.levels.len())] + self.slope * t).max(0.0)
    }

    /// The season's length in hours.
    pub fn period(&self) -> usize {
        self.levels.len()
    }
}

/// The slot of the season an hour falls in.
fn slot(hour_ms: i64, period: usize) -> usize {
    (hour_ms.div_euclid(HOUR_MS)).rem_euclid(period as i64) as usize
}

/// Slots never seen take the mean of the slots at the same hour of day, else of all slots.
fn fill_unseen(seen: &[Option<f64>]) -> Vec<f64> {
    let known: Vec<f64> = seen.iter().flatten().copied().collect();
    let overall = if known.is_empty() {
        0.0
    } else {
        known.iter().sum::<f64>() / known.len() as f64
    };
    (0..seen.len())
        .map(|s| {
            seen[s].unwrap_or_else(|| {
                let same_hour: Vec<f64> = (s % DAY_H..seen.len())
                    .step_by(DAY_H)
                    .filter_map(|o| seen[o])
                    .collect();
                if same_hour.is_empty() {
                    overall
                } else {
                    same_hour.iter().sum::<f64>() / same_hour.len() as f64
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_noiseless_trend_and_season_is_fitted_exactly() {
        let day = |h: usize| [1.0, 5.0, 2.0][h % 3] + (h % DAY_H) as f64 * 0.1;
        let points: Vec<(i64, f64)> = (0..3 * DAY_H)
            .map(|h| (h as i64 * HOUR_MS, day(h % DAY_H) + 0.02 * h as f64))
            .collect();
        let m = Seasonal::fit(&points, DAY_H).unwrap();
        assert!((m.slope - 0.02).abs() < 1e-9, "{}", m.slope);
        for h in 3 * DAY_H..6 * DAY_H {
            let want = day(h % DAY_H) + 0.02 * h as f64;
            assert!((m.value(h as i64 * HOUR_MS) - want).abs() < 1e-9);
        }
        // Three days fitted, three days of trend: after them, the level holds.
        let cut = day(0) + 0.02 * (6 * DAY_H - 1) as f64;
        assert!((m.value((9 * DAY_H) as i64 * HOUR_MS) - cut).abs() < 1e-9);
    }

    #[test]
    fn seasons_follow_the_history_and_never_go_below_zero() {
        assert_eq!(season_for(47), None);
        assert_eq!(season_for(48), Some(DAY_H));
        assert_eq!(season_for(2 * WEEK_H - 1), Some(DAY_H));
        assert_eq!(season_for(2 * WEEK_H), Some(WEEK_H));
        let falling: Vec<(i64, f64)> = (0..48).map(|h| (h * HOUR_MS, 48.0 - h as f64)).collect();
        let m = Seasonal::fit(&falling, DAY_H).unwrap();
        assert_eq!(m.value(200 * HOUR_MS), 0.0);
        assert!(Seasonal::fit(&[], DAY_H).is_none());
    }
}
