//! GPU models the simulator knows: product name, memory, power envelope, clocks and the MIG
//! profiles each supports (from `model::mig`, the catalogue the analytics plans with).

/// One MIG profile of a GPU model (`model::mig`, the one catalogue).
pub use model::mig::Profile as MigProfile;
use model::mig::{A100_40GB, A100_H100_80GB, H200_141GB};

/// A GPU model's static facts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuModel {
    /// The short name scenario files use.
    pub key: &'static str,
    /// The product name NVML reports.
    pub product: &'static str,
    pub memory_gib: f64,
    pub idle_power_w: f64,
    pub max_power_w: f64,
    pub max_sm_clock_mhz: i32,
    pub idle_sm_clock_mhz: i32,
    pub mem_clock_mhz: i32,
    pub mig_profiles: &'static [MigProfile],
}

/// Every model the simulator can place in a scenario.
pub const MODELS: &[GpuModel] = &[
    GpuModel {
        key: "H100-80GB",
        product: "NVIDIA H100 80GB HBM3",
        memory_gib: 79.65,
        idle_power_w: 70.0,
        max_power_w: 700.0,
        max_sm_clock_mhz: 1980,
        idle_sm_clock_mhz: 345,
        mem_clock_mhz: 2619,
        mig_profiles: A100_H100_80GB.profiles,
    },
    GpuModel {
        key: "H200",
        product: "NVIDIA H200",
        memory_gib: 140.4,
        idle_power_w: 76.0,
        max_power_w: 700.0,
        max_sm_clock_mhz: 1980,
        idle_sm_clock_mhz: 345,
        mem_clock_mhz: 3201,
        mig_profiles: H200_141GB.profiles,
    },
    GpuModel {
        key: "A100-80GB",
        product: "NVIDIA A100-SXM4-80GB",
        memory_gib: 80.0,
        idle_power_w: 60.0,
        max_power_w: 400.0,
        max_sm_clock_mhz: 1410,
        idle_sm_clock_mhz: 210,
        mem_clock_mhz: 1593,
        mig_profiles: A100_H100_80GB.profiles,
    },
    GpuModel {
        key: "A100-40GB",
        product: "NVIDIA A100-SXM4-40GB",
        memory_gib: 40.0,
        idle_power_w: 55.0,
        max_power_w: 400.0,
        max_sm_clock_mhz: 1410,
        idle_sm_clock_mhz: 210,
        mem_clock_mhz: 1215,
        mig_profiles: A100_40GB.profiles,
    },
    GpuModel {
        key: "L40S",
        product: "NVIDIA L40S",
        memory_gib: 44.99,
        idle_power_w: 35.0,
        max_power_w: 350.0,
        max_sm_clock_mhz: 2520,
        idle_sm_clock_mhz: 210,
        mem_clock_mhz: 9001,
        mig_profiles: &[],
    },
    GpuModel {
        key: "A10G",
        product: "NVIDIA A10G",
        memory_gib: 22.49,
        idle_power_w: 25.0,
        max_power_w: 300.0,
        max_sm_clock_mhz: 1710,
        idle_sm_clock_mhz: 210,
        mem_clock_mhz: 6251,
        mig_profiles: &[],
    },
];

/// Looks a model up by its scenario key (case-insensitive).
pub fn model(key: &str) -> Option<&'static GpuModel> {
    MODELS.iter().find(|m| m.key.eq_ignore_ascii_case(key))
}

impl GpuModel {
    pub fn profile(&self, name: &str) -> Option<&'static MigProfile> {
        self.mig_profiles.iter().find(|p| p.name == name)
    }

    pub fn memory_bytes(&self) -> i64 {
        gib(self.memory_gib)
    }
}

/// GiB to bytes.
pub fn gib(v: f64) -> i64 {
    (v * 1024.0 * 1024.0 * 1024.0) as i64
}
