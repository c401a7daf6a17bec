//! Samples: one reading of a GPU, a MIG instance or a process at one instant, plus the
//! allocations and events observed in the same sampling cycle.
//!
//! Every measurement is optional. A field the hardware or driver did not report is `None`
//! (NULL in storage), never 0: "not measured" and "measured zero" are different facts.
//! Utilizations are ratios from 0 to 1 (NVML's percentages are divided by 100).

use serde::{Deserialize, Serialize};

/// One reading of a physical GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSample {
    pub gpu_uuid: String,
    /// NVML utilization: the share of time any kernel ran (one busy SM reads 1.0). Absent
    /// under MIG, where NVML does not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_util: Option<f32>,
    /// NVML memory-controller utilization (share of time memory was read or written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_util: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_used_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_total_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f32>,
    /// Total energy since the driver loaded, in joules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_c: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_clock_mhz: Option<i32>,
    /// NVML clock-event (throttle) reason bitmask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_reasons: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_rx_bytes_per_s: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_tx_bytes_per_s: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_rx_bytes_per_s: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_tx_bytes_per_s: Option<i64>,
    /// Volatile corrected (single-bit) ECC errors since the driver loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_corrected: Option<i64>,
    /// Volatile uncorrected (double-bit) ECC errors since the driver loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_uncorrected: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_pages: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_rows: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enc_util: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dec_util: Option<f32>,
    /// DCGM (or NVML GPM) profiling: share of SMs with at least one warp resident, averaged
    /// over the interval. Only with DCGM or GPM. This and the ratios after it are declared in
    /// `crate::profiling`, which every reader of them goes through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_active: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_occupancy: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_active: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_active: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gr_engine_active: Option<f32>,
    /// The stand-in ratio of `crate::profiling` (feature `dummy-field`, tests only).
    #[cfg(feature = "dummy-field")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dummy_active: Option<f32>,
}

/// One reading of a MIG device. NVML reports no utilization per MIG instance; compute
/// activity is only known from DCGM profiling fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSample {
    pub gpu_uuid: String,
    pub gi_id: u32,
    pub ci_id: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_used_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_total_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_active: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_occupancy: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_active: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_active: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gr_engine_active: Option<f32>,
    /// The stand-in ratio of `crate::profiling` (feature `dummy-field`, tests only).
    #[cfg(feature = "dummy-field")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dummy_active: Option<f32>,
}

/// How a process uses the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ProcessKind {
    #[default]
    Compute,
    /// A client of an MPS server.
    Mps,
    Graphics,
}

impl ProcessKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessKind::Compute => "compute",
            ProcessKind::Mps => "mps",
            ProcessKind::Graphics => "graphics",
        }
    }

    pub fn parse(s: &str) -> Option<ProcessKind> {
        match s {
            "compute" => Some(ProcessKind::Compute),
            "mps" => Some(ProcessKind::Mps),
            "graphics" => Some(ProcessKind::Graphics),
            _ => None,
        }
    }
}

/// One reading of a process on a GPU. A process is identified by pid *and* start time, so a
/// reused pid is a different process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSample {
    pub gpu_uuid: String,
    pub pid: u32,
    /// When the process started (ms since the epoch), from `/proc/<pid>/stat`.
    pub start_time: crate::UnixMillis,
    #[serde(default)]
    pub kind: ProcessKind,
    /// GPU instance id when the process runs inside a MIG device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gi_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_id: Option<u32>,
    /// The tenant key (see [`crate::Tenant`]); absent when attribution found no owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// This process's share of SM time over the last interval (nvmlDeviceGetProcessUtilization).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_util: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_util: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enc_util: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dec_util: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_used_bytes: Option<i64>,
}

/// A tenant holding a device: a whole GPU, a MIG instance (gi/ci set) or a time-slicing/MPS
/// replica (`replica` set), as the kubelet, Slurm or configuration says.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allocation {
    pub gpu_uuid: String,
    pub tenant: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gi_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<u32>,
    /// The share of the physical GPU this allocation stands for: 1 for a whole GPU, the
    /// compute-slice fraction for a MIG instance, 1/replicas for a shared replica.
    pub share: f32,
}

/// Something that happened on a GPU: an XID error, for now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuEvent {
    pub gpu_uuid: String,
    pub ts: crate::UnixMillis,
    /// "xid" for now.
    pub kind: String,
    pub code: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
