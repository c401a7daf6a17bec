//! The dcgm-exporter fields gpulens reads and the domain of each value as dcgm-exporter exports
//! it (units as in DCGM's field list: percent for `DCGM_FI_DEV_*_UTIL`, MiB for frame-buffer
//! fields, W, °C, MHz, counts; ratios 0–1 for the profiling fields). One table for the agent's
//! dcgm-exporter scraper and the collector's remote-write receiver: a value outside its field's
//! domain is no reading, and is dropped and counted by whoever reads it — never its neighbours.

/// A field's accepted values, inclusive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Domain {
    pub min: f64,
    pub max: f64,
}

/// Profiling ratios may come out a hair above 1 from DCGM's float arithmetic; readers clamp
/// them to 1 after the check.
pub const RATIO_SLACK: f64 = 1.0001;

const fn d(min: f64, max: f64) -> Domain {
    Domain { min, max }
}

/// (field, domain) for every field gpulens reads.
pub const FIELDS: &[(&str, Domain)] = &[
    ("DCGM_FI_DEV_GPU_UTIL", d(0.0, 100.0)),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", d(0.0, 100.0)),
    // 16 TiB in MiB: far above any GPU's memory.
    ("DCGM_FI_DEV_FB_USED", d(0.0, 16_777_216.0)),
    ("DCGM_FI_DEV_FB_FREE", d(0.0, 16_777_216.0)),
    ("DCGM_FI_DEV_POWER_USAGE", d(0.0, 10_000.0)),
    ("DCGM_FI_DEV_GPU_TEMP", d(-50.0, 200.0)),
    ("DCGM_FI_DEV_SM_CLOCK", d(0.0, 100_000.0)),
    ("DCGM_FI_DEV_MEM_CLOCK", d(0.0, 100_000.0)),
    // Counters: exact in f64 up to 2^53.
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        d(0.0, 9_007_199_254_740_992.0),
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        d(0.0, 9_007_199_254_740_992.0),
    ),
    ("DCGM_FI_DEV_RETIRED_SBE", d(0.0, 65_535.0)),
    ("DCGM_FI_DEV_RETIRED_DBE", d(0.0, 65_535.0)),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", d(0.0, 1.0)),
    ("DCGM_FI_PROF_SM_ACTIVE", d(0.0, RATIO_SLACK)),
    ("DCGM_FI_PROF_SM_OCCUPANCY", d(0.0, RATIO_SLACK)),
    ("DCGM_FI_PROF_DRAM_ACTIVE", d(0.0, RATIO_SLACK)),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", d(0.0, RATIO_SLACK)),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", d(0.0, RATIO_SLACK)),
];

/// The domain of a field gpulens reads; None for any other field.
pub fn domain(field: &str) -> Option<Domain> {
    FIELDS.iter().find(|(n, _)| *n == field).map(|(_, d)| *d)
}

/// Whether `value` is a reading of `field`: a field gpulens reads, finite, inside its domain.
pub fn in_domain(field: &str, value: f64) -> bool {
    domain(field).is_some_and(|d| value.is_finite() && value >= d.min && value <= d.max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_outside_a_fields_domain_are_no_readings() {
        assert!(in_domain("DCGM_FI_DEV_GPU_UTIL", 57.0));
        assert!(!in_domain("DCGM_FI_DEV_GPU_UTIL", 500.0));
        assert!(!in_domain("DCGM_FI_DEV_GPU_UTIL", f64::NAN));
        assert!(in_domain("DCGM_FI_PROF_SM_ACTIVE", 1.00005));
        assert!(!in_domain("DCGM_FI_PROF_SM_ACTIVE", 7.0));
        assert!(!in_domain("DCGM_FI_DEV_SM_CLOCK", -1.0));
        assert!(!in_domain("DCGM_FI_DEV_POWER_USAGE", f64::INFINITY));
        assert!(!in_domain("DCGM_FI_SOMETHING_ELSE", 1.0));
    }
}
