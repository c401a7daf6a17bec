//! The JSON fixture the stand-in serves (`GPULENS_FAKE_NVML_FIXTURE`): devices with their
//! readings, MIG devices, processes and XID events. An absent reading answers
//! `NVML_ERROR_NOT_SUPPORTED`.

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Fixture {
    #[serde(default = "default_driver")]
    pub(crate) driver_version: String,
    pub(crate) devices: Vec<Device>,
}

fn default_driver() -> String {
    "590.48.01".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Device {
    pub(crate) uuid: String,
    pub(crate) name: String,
    pub(crate) pci_bus_id: String,
    /// Its `/dev/nvidiaN` minor number (default: its index).
    pub(crate) minor: Option<u32>,
    pub(crate) memory_total: u64,
    pub(crate) memory_used: u64,
    /// [gpu %, memory %]; absent = not supported (as under MIG).
    pub(crate) utilization: Option<[u32; 2]>,
    pub(crate) power_mw: Option<u32>,
    pub(crate) energy_mj: Option<u64>,
    pub(crate) temp_c: Option<u32>,
    pub(crate) sm_clock_mhz: Option<u32>,
    pub(crate) mem_clock_mhz: Option<u32>,
    pub(crate) throttle_reasons: Option<u64>,
    pub(crate) pcie_tx_kbs: Option<u32>,
    pub(crate) pcie_rx_kbs: Option<u32>,
    pub(crate) ecc_corrected: Option<u64>,
    pub(crate) ecc_uncorrected: Option<u64>,
    pub(crate) encoder_util: Option<u32>,
    pub(crate) decoder_util: Option<u32>,
    #[serde(default)]
    pub(crate) mig: Vec<MigDevice>,
    #[serde(default)]
    pub(crate) processes: Vec<Process>,
    pub(crate) lost_after: Option<u32>,
    #[serde(default)]
    pub(crate) xid: Vec<Xid>,
    /// Pages retired for [multiple single-bit, double-bit] ECC errors (pre-Ampere GPUs).
    pub(crate) retired_pages: Option<[u32; 2]>,
    /// Rows remapped [corrected, uncorrected] (Ampere and later).
    pub(crate) remapped_rows: Option<[u32; 2]>,
    /// NVLink data throughput [tx, rx] in KiB/s; the counters NVML reports grow at this rate.
    pub(crate) nvlink_kibs: Option<[u64; 2]>,
    /// Whether nvmlDeviceGetProcessUtilization is supported (default: yes, unless in MIG mode).
    #[serde(default = "yes")]
    pub(crate) process_utilization_supported: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MigDevice {
    pub(crate) uuid: String,
    /// e.g. "3g.40gb"; NVML names the device `<GPU name> MIG <profile>`.
    pub(crate) profile: String,
    pub(crate) gi_id: u32,
    pub(crate) ci_id: u32,
    pub(crate) memory_total: u64,
    pub(crate) memory_used: u64,
    /// [start, size] in memory slices.
    #[serde(default)]
    pub(crate) placement: Option<[u32; 2]>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Process {
    pub(crate) pid: u32,
    pub(crate) used_memory: u64,
    #[serde(default)]
    pub(crate) gi_id: Option<u32>,
    #[serde(default)]
    pub(crate) ci_id: Option<u32>,
    #[serde(default)]
    pub(crate) mps: bool,
    /// Per-process utilization (%), reported by nvmlDeviceGetProcessUtilization.
    pub(crate) sm: Option<u32>,
    #[serde(default)]
    pub(crate) mem: u32,
    #[serde(default)]
    pub(crate) enc: u32,
    #[serde(default)]
    pub(crate) dec: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Xid {
    pub(crate) code: u64,
    pub(crate) after_samples: u32,
}
