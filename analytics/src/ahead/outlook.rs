//! What the days ahead say of a step ([`super`] works it out): kept apart so that a
//! recommendation can carry it without importing the check.

use serde::{Deserialize, Serialize};

/// What the days ahead do to a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ahead {
    /// Days looked ahead.
    pub days: f64,
    /// When the first GPU or instance the step fills is outgrown; `None`: not within `days`.
    pub outgrown_in_days: Option<f64>,
    /// The tenants whose memory grows, with GiB a day (none: nothing grows).
    pub growing: Vec<(String, f64)>,
    /// GPU-hours the step frees over the look-ahead, until it is outgrown.
    pub worth_gpu_hours: f64,
    pub why: String,
}
