//! The dcgm-exporter fields gpulens reads and the domain of each value as dcgm-exporter exports
//! it (units as in DCGM's field list: percent for `DCGM_FI_DEV_*_UTIL`, MiB for frame-buffer
//! fields, W, °C, MHz, counts; ratios 0–1 for the profiling fields). One table for the agent's
//! dcgm-exporter scraper and the collector's remote-write receiver: a value outside its field's
//! domain is no reading, and is dropped and counted by whoever reads it — never its neighbours.

use crate::profiling::{PerRatio, RATIO_SLACK, Ratio};
use crate::wire::v1::{MAX_CLOCK_MHZ, MAX_POWER_W, MAX_TEMP_C, MIN_TEMP_C};
use crate::{GpuSample, MigSample};

/// A field's accepted values, inclusive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Domain {
    pub min: f64,
    pub max: f64,
}

const fn d(min: f64, max: f64) -> Domain {
    Domain { min, max }
}

/// A dcgm-exporter field gpulens reads. The one mapping from field names to gpulens readings,
/// with each field's domain and unit conversion; the agent's dcgm-exporter scraper and the
/// collector's remote-write receiver both go through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// A device reading (`DCGM_FI_DEV_*`).
    Device(Device),
    /// A profiling ratio (`DCGM_FI_PROF_*`), declared in [`crate::profiling`].
    Ratio(Ratio),
}

crate::closed_set! {
    /// The device fields gpulens reads, each under its dcgm-exporter series name.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
    pub enum Device {
        GpuUtil = "DCGM_FI_DEV_GPU_UTIL",
        MemCopyUtil = "DCGM_FI_DEV_MEM_COPY_UTIL",
        FbUsed = "DCGM_FI_DEV_FB_USED",
        FbFree = "DCGM_FI_DEV_FB_FREE",
        PowerUsage = "DCGM_FI_DEV_POWER_USAGE",
        GpuTemp = "DCGM_FI_DEV_GPU_TEMP",
        SmClock = "DCGM_FI_DEV_SM_CLOCK",
        MemClock = "DCGM_FI_DEV_MEM_CLOCK",
        EccSbeVolTotal = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        EccDbeVolTotal = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        RetiredSbe = "DCGM_FI_DEV_RETIRED_SBE",
        RetiredDbe = "DCGM_FI_DEV_RETIRED_DBE",
        RowRemapPending = "DCGM_FI_DEV_ROW_REMAP_PENDING",
    }
}

/// Counters: exact in f64 up to 2^53.
const COUNTER_MAX: f64 = 9_007_199_254_740_992.0;
/// 16 TiB in MiB: far above any GPU's memory.
const FB_MAX_MIB: f64 = 16_777_216.0;
const MIB: f64 = 1024.0 * 1024.0;

impl Device {
    /// The values dcgm-exporter exports for it (its own unit), inclusive.
    pub fn domain(self) -> Domain {
        match self {
            Device::GpuUtil | Device::MemCopyUtil => d(0.0, 100.0),
            Device::FbUsed | Device::FbFree => d(0.0, FB_MAX_MIB),
            Device::PowerUsage => d(0.0, MAX_POWER_W),
            Device::GpuTemp => d(MIN_TEMP_C, MAX_TEMP_C),
            Device::SmClock | Device::MemClock => d(0.0, MAX_CLOCK_MHZ),
            Device::EccSbeVolTotal | Device::EccDbeVolTotal => d(0.0, COUNTER_MAX),
            Device::RetiredSbe | Device::RetiredDbe => d(0.0, 65_535.0),
            Device::RowRemapPending => d(0.0, 1.0),
        }
    }
}

impl Field {
    /// Every field gpulens reads: the device fields in declaration order, then the profiling
    /// ratios.
    pub fn all() -> impl Iterator<Item = Field> {
        Device::ALL
            .into_iter()
            .map(Field::Device)
            .chain(Ratio::all().map(Field::Ratio))
    }

    /// The field a dcgm-exporter series name stands for; None for any other name.
    pub fn parse(name: &str) -> Option<Field> {
        Device::parse(name)
            .map(Field::Device)
            .or_else(|| Ratio::of_dcgm(name).map(Field::Ratio))
    }

    /// Its dcgm-exporter series name.
    pub fn name(self) -> &'static str {
        match self {
            Field::Device(f) => f.as_str(),
            Field::Ratio(r) => r.spec().dcgm,
        }
    }

    /// The values dcgm-exporter exports for it (its own unit), inclusive.
    pub fn domain(self) -> Domain {
        match self {
            Field::Device(f) => f.domain(),
            Field::Ratio(_) => d(0.0, RATIO_SLACK),
        }
    }

    /// The profiling ratio it reports, if it is one (`DCGM_FI_PROF_*`).
    pub fn as_ratio(self) -> Option<Ratio> {
        match self {
            Field::Ratio(r) => Some(r),
            _ => None,
        }
    }

    /// Whether `raw` is a reading: finite and inside the domain.
    pub fn accepts(self, raw: f64) -> bool {
        let d = self.domain();
        raw.is_finite() && raw >= d.min && raw <= d.max
    }

    /// A profiling ratio as gpulens stores it (clamped to 1); None outside the domain or for a
    /// field that is no ratio.
    pub fn ratio(self, raw: f64) -> Option<f32> {
        (self.as_ratio().is_some() && self.accepts(raw)).then(|| (raw as f32).min(1.0))
    }

    /// Puts a whole GPU's reading into its sample, converted to gpulens units (percent to a
    /// ratio, MiB to bytes). False when `raw` is outside the domain. `DCGM_FI_DEV_FB_FREE` is
    /// kept in `mem_total_bytes` until the scrape is complete (the reader adds the used memory
    /// then: the two may come in either order); retired pages add up over both kinds.
    pub fn apply_gpu(self, g: &mut GpuSample, raw: f64) -> bool {
        if !self.accepts(raw) {
            return false;
        }
        let f = raw as f32;
        match self {
            Field::Device(Device::GpuUtil) => g.gpu_util = Some(f / 100.0),
            Field::Device(Device::MemCopyUtil) => g.mem_util = Some(f / 100.0),
            Field::Device(Device::FbUsed) => g.mem_used_bytes = Some((raw * MIB) as i64),
            Field::Device(Device::FbFree) => g.mem_total_bytes = Some((raw * MIB) as i64),
            Field::Device(Device::PowerUsage) => g.power_w = Some(f),
            Field::Device(Device::GpuTemp) => g.temp_c = Some(f),
            Field::Device(Device::SmClock) => g.sm_clock_mhz = Some(raw as i32),
            Field::Device(Device::MemClock) => g.mem_clock_mhz = Some(raw as i32),
            Field::Device(Device::EccSbeVolTotal) => g.ecc_corrected = Some(raw as i64),
            Field::Device(Device::EccDbeVolTotal) => g.ecc_uncorrected = Some(raw as i64),
            Field::Device(Device::RetiredSbe) | Field::Device(Device::RetiredDbe) => {
                g.retired_pages = Some(g.retired_pages.unwrap_or(0) + raw as i32)
            }
            Field::Device(Device::RowRemapPending) => {}
            Field::Ratio(r) => *(r.spec().gpu.set)(g) = Some(f.min(1.0)),
        }
        true
    }

    /// Puts a MIG instance's reading into its sample; false when `raw` is outside the domain
    /// or the field says nothing about an instance.
    pub fn apply_mig(self, m: &mut MigSample, raw: f64) -> bool {
        if !self.accepts(raw) {
            return false;
        }
        let ratio = (raw as f32).min(1.0);
        match self {
            Field::Ratio(r) => *(r.spec().mig.set)(m) = Some(ratio),
            Field::Device(Device::FbUsed) => m.mem_used_bytes = Some((raw * MIB) as i64),
            Field::Device(Device::FbFree) => {
                m.mem_total_bytes = Some((raw * MIB) as i64 + m.mem_used_bytes.unwrap_or(0))
            }
            _ => return false,
        }
        true
    }
}

/// The profiling ratios (0–1) of one GPU or one GPU instance, as the agent's dcgm-exporter
/// scraper gathers them.
pub type Profiling = PerRatio<Option<f32>>;

impl PerRatio<Option<f32>> {
    /// Takes a profiling field's reading; false for another field or a value outside the
    /// domain.
    pub fn set(&mut self, field: Field, raw: f64) -> bool {
        match (field.as_ratio(), field.ratio(raw)) {
            (Some(r), Some(v)) => {
                *self.get_mut(r) = Some(v);
                true
            }
            _ => false,
        }
    }
}

/// The domain of a field gpulens reads; None for any other field.
pub fn domain(field: &str) -> Option<Domain> {
    Field::parse(field).map(Field::domain)
}

/// Whether `value` is a reading of `field`: a field gpulens reads, finite, inside its domain.
pub fn in_domain(field: &str, value: f64) -> bool {
    Field::parse(field).is_some_and(|f| f.accepts(value))
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

    #[test]
    fn every_field_round_trips_and_converts_to_gpulens_units() {
        for f in Field::all() {
            assert_eq!(Field::parse(f.name()), Some(f));
        }
        let mut g = GpuSample::default();
        assert!(Field::Device(Device::GpuUtil).apply_gpu(&mut g, 57.0));
        assert!(!Field::Device(Device::GpuUtil).apply_gpu(&mut g, 500.0));
        assert_eq!(g.gpu_util, Some(0.57));
        assert!(Field::Device(Device::FbUsed).apply_gpu(&mut g, 1024.0));
        assert_eq!(g.mem_used_bytes, Some(1 << 30));
        assert!(Field::Ratio(Ratio::SmActive).apply_gpu(&mut g, 1.00005));
        assert_eq!(g.sm_active, Some(1.0));
        let mut m = MigSample::default();
        assert!(
            !Field::Device(Device::GpuTemp).apply_mig(&mut m, 50.0),
            "no instance reading"
        );
        let mut p = Profiling::default();
        assert!(p.set(Field::Ratio(Ratio::TensorActive), 0.25));
        assert!(!p.set(Field::Device(Device::GpuUtil), 50.0));
        assert!(!p.set(Field::Ratio(Ratio::SmActive), f64::NAN));
        assert_eq!(*p.get(Ratio::TensorActive), Some(0.25));
    }
}
