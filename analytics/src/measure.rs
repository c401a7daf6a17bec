//! The numbers behind a finding ([`crate::Finding::metrics`]), each named once: the finding
//! rules write them, the headline, the cost roll-up, the dashboard, reports and reclaim read
//! them, and the API and the stored analysis carry them under these names.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

model::closed_set! {
    /// A number behind a finding (docs/analytics.md says which kinds carry which).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum Measure {
        Action = "action",
        AllocatedGpuHours = "allocated_gpu_hours",
        AloneHours = "alone_hours",
        ContendedHours = "contended_hours",
        ContentionHoursMeasured = "contention_hours_measured",
        ContentionHoursPredicted = "contention_hours_predicted",
        EccUncorrected = "ecc_uncorrected",
        EffectiveGpuHours = "effective_gpu_hours",
        EffectiveP95Gpu = "effective_p95_gpu",
        EffectiveRatio = "effective_ratio",
        FragmentedGpuHours = "fragmented_gpu_hours",
        GpusFreedMeasured = "gpus_freed_measured",
        GpusFreedPredicted = "gpus_freed_predicted",
        Hours = "hours",
        HoursAboveThreshold = "hours_above_threshold",
        HoursAfter = "hours_after",
        HoursThrottled = "hours_throttled",
        IdleHeldGpuHours = "idle_held_gpu_hours",
        IdleHoldings = "idle_holdings",
        IdleHoursInRuns = "idle_hours_in_runs",
        IdleRuns = "idle_runs",
        IdleShareOfAllocation = "idle_share_of_allocation",
        LargestRequestGpus = "largest_request_gpus",
        LastIdleRunHours = "last_idle_run_hours",
        LongestIdleHours = "longest_idle_hours",
        MemoryGib = "memory_gib",
        MemoryHeldGibP99 = "memory_held_gib_p99",
        MemoryOverflowHours = "memory_overflow_hours",
        MemoryP99Gib = "memory_p99_gib",
        PeakGib = "peak_gib",
        Pid = "pid",
        PowerMaxW = "power_max_w",
        RateDrop = "rate_drop",
        ReclaimableCost = "reclaimable_cost",
        ReclaimableGpuHours = "reclaimable_gpu_hours",
        RemappedRows = "remapped_rows",
        RetiredPages = "retired_pages",
        Score = "score",
        SilentMinutes = "silent_minutes",
        TempMaxC = "temp_max_c",
        TotalGib = "total_gib",
        VictimRateAlone = "victim_rate_alone",
        VictimRateContended = "victim_rate_contended",
        WaitingGpuHours = "waiting_gpu_hours",
        WaitingGpusPeak = "waiting_gpus_peak",
        WaitingItems = "waiting_items",
        WastedCost = "wasted_cost",
        WastedGpuHours = "wasted_gpu_hours",
        XidErrors = "xid_errors",
    }
}

/// Measures sort by name, as the API and the stored analysis list them.
impl Ord for Measure {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for Measure {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A finding's numbers, by measure.
pub type Measures = BTreeMap<Measure, f64>;

/// Reads a finding's numbers as stored: a name this gpulens does not know (one an older
/// version wrote and no reader asks for) is left out rather than failing the whole analysis.
pub fn known<'de, D: Deserializer<'de>>(d: D) -> Result<Measures, D::Error> {
    let named = BTreeMap::<String, f64>::deserialize(d)?;
    Ok(named
        .into_iter()
        .filter_map(|(k, v)| Some((Measure::parse(&k)?, v)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_serialize_by_name_in_name_order_and_unknown_names_are_left_out() {
        let m = Measures::from([
            (Measure::WastedGpuHours, 2.0),
            (Measure::AllocatedGpuHours, 4.0),
        ]);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(
            json,
            r#"{"allocated_gpu_hours":4.0,"wasted_gpu_hours":2.0}"#
        );
        let mut d = serde_json::Deserializer::from_str(r#"{"wasted_gpu_hours":2.0,"gone":1.0}"#);
        assert_eq!(
            known(&mut d).unwrap(),
            Measures::from([(Measure::WastedGpuHours, 2.0)])
        );
        let mut sorted = Measure::ALL.to_vec();
        sorted.sort();
        assert!(sorted.windows(2).all(|w| w[0].as_str() < w[1].as_str()));
    }
}
