//! Traffic rates from NVML's cumulative counters (`nvmlDeviceGetFieldValues`): each read gives
//! the mean rate since the one before, over however long that was — exact where a window
//! sample (`nvmlDeviceGetPcieThroughput` watches 20 ms) is a glimpse — and costs one call:
//! 0.31 ms of CPU for both PCIe counters on an H200 against 1 ms of CPU and 21 ms of wall time
//! for each window (docs/gpu-checks/2026-12-04-h200-580.159.04.md).

use nvml_wrapper::Device;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;

/// A pair of cumulative counters, transmitted then received, and the unit they count in bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Counters {
    fields: [u32; 2],
    unit_bytes: f64,
}

/// NVLink data transmitted and received, in KiB (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX).
pub(super) const NVLINK_KIB: Counters = Counters {
    fields: [138, 139],
    unit_bytes: 1024.0,
};

/// PCIe bytes transmitted and received (NVML_FI_DEV_PCIE_COUNT_TX_BYTES/RX_BYTES; Hopper and
/// newer on recent drivers, NOT_SUPPORTED elsewhere).
pub(super) const PCIE_BYTES: Counters = Counters {
    fields: [197, 198],
    unit_bytes: 1.0,
};

/// The previous read of one GPU's pair of counters: (NVML's timestamp µs, tx, rx).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CounterRate(Option<(i64, u64, u64)>);

impl CounterRate {
    /// Reads `c` and gives the (tx, rx) rate in bytes/s since the previous read; None at the
    /// first read, or when no time passed between the two.
    pub(super) fn read(
        &mut self,
        device: &Device<'static>,
        c: Counters,
    ) -> Result<Option<(i64, i64)>, NvmlError> {
        let values = device.field_values_for(&[FieldId(c.fields[0]), FieldId(c.fields[1])])?;
        let read = |i: usize| -> Result<(i64, u64), NvmlError> {
            let s = values
                .get(i)
                .ok_or(NvmlError::NotSupported)?
                .as_ref()
                .map_err(|e| match e {
                    NvmlError::NotSupported => NvmlError::NotSupported,
                    _ => NvmlError::Unknown,
                })?;
            match s.value.as_ref().map_err(|_| NvmlError::NotSupported)? {
                SampleValue::U64(v) => Ok((s.timestamp, *v)),
                SampleValue::U32(v) => Ok((s.timestamp, u64::from(*v))),
                _ => Err(NvmlError::NotSupported),
            }
        };
        let (ts, tx) = read(0)?;
        let (_, rx) = read(1)?;
        let rate = self.0.and_then(|(pts, ptx, prx)| {
            let dt = (ts - pts) as f64 / 1e6;
            let per_s =
                |now: u64, then: u64| (now.saturating_sub(then) as f64 * c.unit_bytes / dt) as i64;
            (dt > 0.0).then(|| (per_s(tx, ptx), per_s(rx, prx)))
        });
        self.0 = Some((ts, tx, rx));
        Ok(rate)
    }
}
