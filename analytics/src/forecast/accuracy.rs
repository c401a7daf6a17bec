//! How wrong the forecast has been: the same model fitted to the history less its last week
//! (its last day when the history is shorter than three weeks), asked about that week, and
//! compared with what happened. Its errors give the forecast's band.

use serde::{Deserialize, Serialize};

use model::rollup::HOUR_MS;

use super::seasonal::{DAY_H, Seasonal, WEEK_H, season_for};

/// A backtest's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Hours held out and forecast (168 or 24).
    pub ahead_h: usize,
    /// The backtest model saw the history before this hour.
    pub fitted_until_ms: i64,
    /// Mean absolute error (GPU-equivalents).
    pub mae: f64,
    /// Mean error, forecast less actual: above zero the model forecast too much.
    pub bias: f64,
    /// Absolute errors summed over actuals summed (weighted absolute percentage error); `None`
    /// when nothing happened in the held-out hours.
    pub wape: Option<f64>,
    /// The 90th percentile of the absolute errors: the band drawn around the forecast.
    pub band: f64,
}

impl Accuracy {
    /// The error in words: "2.1 GPUs mean error (8 %) forecasting 7 days ahead".
    pub fn sentence(&self) -> String {
        let ahead = if self.ahead_h >= WEEK_H {
            "7 days"
        } else {
            "1 day"
        };
        let share = self
            .wape
            .map(|w| format!(" ({:.0} %)", w * 100.0))
            .unwrap_or_default();
        format!(
            "{:.2} GPUs mean error{share} forecasting {ahead} ahead; 9 hours in 10 within ±{:.2}",
            self.mae, self.band
        )
    }
}

/// Backtests `points` (hour start, value; in time order) spanning `span_h` hours.
pub fn backtest(points: &[(i64, f64)], span_h: usize) -> Result<Accuracy, String> {
    let ahead_h = if span_h >= 3 * WEEK_H {
        WEEK_H
    } else if span_h >= 3 * DAY_H {
        DAY_H
    } else {
        return Err(format!(
            "no backtest: {span_h} hours of history, one needs three days"
        ));
    };
    let last = points.last().map_or(0, |p| p.0);
    let fitted_until_ms = last + HOUR_MS - ahead_h as i64 * HOUR_MS;
    let split = points.partition_point(|p| p.0 < fitted_until_ms);
    let (fitted, held) = points.split_at(split);
    let fitted_span = span_h - ahead_h;
    let model = season_for(fitted_span)
        .and_then(|period| Seasonal::fit(fitted, period))
        .ok_or_else(|| "no backtest: the history before the held-out part is empty".to_owned())?;
    if held.is_empty() {
        return Err("no backtest: no observed hour in the held-out part".into());
    }
    let errors: Vec<f64> = held.iter().map(|&(t, y)| model.value(t) - y).collect();
    let n = errors.len() as f64;
    let abs_sum: f64 = errors.iter().map(|e| e.abs()).sum();
    let actual_sum: f64 = held.iter().map(|p| p.1.abs()).sum();
    let mut abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    abs.sort_by(f64::total_cmp);
    let p90 = abs[((abs.len() as f64 * 0.9).ceil() as usize).clamp(1, abs.len()) - 1];
    Ok(Accuracy {
        ahead_h,
        fitted_until_ms,
        mae: abs_sum / n,
        bias: errors.iter().sum::<f64>() / n,
        wape: (actual_sum > 1e-9).then(|| abs_sum / actual_sum),
        band: p90,
    })
}
