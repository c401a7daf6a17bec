//! One quantity's forecast: the model fitted to a series, its measured error, and the hourly
//! points with their band.

use serde::{Deserialize, Serialize};

use model::rollup::HOUR_MS;

use super::accuracy::Accuracy;
use super::seasonal::Seasonal;

/// The three quantities forecast, in GPU-equivalents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantity {
    Allocated,
    Used,
    Waiting,
}

impl Quantity {
    pub const ALL: [Quantity; 3] = [Quantity::Allocated, Quantity::Used, Quantity::Waiting];

    pub fn as_str(self) -> &'static str {
        match self {
            Quantity::Allocated => "allocated",
            Quantity::Used => "used",
            Quantity::Waiting => "waiting",
        }
    }
}

/// One quantity's forecast: the model fitted to the whole history and its measured error, or
/// why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    pub quantity: Quantity,
    /// The mean of the history's last day (GPU-equivalents).
    pub recent: f64,
    pub model: Option<Seasonal>,
    pub accuracy: Option<Accuracy>,
    /// Why there is no model or no accuracy, in words.
    pub note: Option<String>,
}

/// One forecast hour: the value, and the band the measured error puts around it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub hour_ms: i64,
    pub value: f64,
    pub low: Option<f64>,
    pub high: Option<f64>,
}

impl Projection {
    /// The forecast for `hours` hours from `from_ms` (an hour start); empty without a model.
    pub fn points(&self, from_ms: i64, hours: usize) -> Vec<Point> {
        let Some(m) = &self.model else {
            return Vec::new();
        };
        let band = self.accuracy.as_ref().map(|a| a.band);
        (0..hours as i64)
            .map(|i| {
                let hour_ms = from_ms + i * HOUR_MS;
                let value = m.value(hour_ms);
                Point {
                    hour_ms,
                    value,
                    low: band.map(|b| (value - b).max(0.0)),
                    high: band.map(|b| value + b),
                }
            })
            .collect()
    }
}
