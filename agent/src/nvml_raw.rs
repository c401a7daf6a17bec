//! The NVML calls nvml-wrapper does not wrap, made through its raw library: a MIG device's
//! instance ids, the placements of a GPU's GPU instances, and rows remapped (the one-call lists
//! are `driver_lists.rs`). Each `unsafe` block says what makes it sound.

use std::collections::HashMap;

use model::wire::v1::MAX_MIG_SLICES;
use nvml_wrapper::Device;
use nvml_wrapper::error::NvmlError;

use crate::driver_values::wire_count;

/// GPU- and compute-instance ids of a MIG device: not wrapped by nvml-wrapper, so through the
/// raw library.
#[allow(unsafe_code)]
pub(crate) fn instance_ids(mig: &Device<'static>) -> anyhow::Result<(u32, u32)> {
    let lib = mig.nvml().lib();
    let (mut gi, mut ci) = (0u32, 0u32);
    // SAFETY: the handle is a live MIG device handle from this NVML instance, and the out
    // pointers are valid for writes of one u32 each.
    let (r1, r2) = unsafe {
        let h = mig.handle();
        (
            lib.nvmlDeviceGetGpuInstanceId(h, &mut gi),
            lib.nvmlDeviceGetComputeInstanceId(h, &mut ci),
        )
    };
    if r1 != 0 || r2 != 0 {
        anyhow::bail!("NVML could not tell the instance ids of a MIG device (codes {r1}, {r2})");
    }
    Ok((gi, ci))
}

/// Placements (start, size in memory slices) of a GPU's GPU instances, by GPU-instance id:
/// enumerated profile by profile through the raw library (nvml-wrapper does not wrap it).
#[allow(unsafe_code)]
pub(crate) fn placements(device: &Device<'static>) -> HashMap<u32, (u32, u32)> {
    let lib = device.nvml().lib();
    let mut out = HashMap::new();
    let (Ok(list), Ok(info_of)) = (
        lib.nvmlDeviceGetGpuInstances.as_ref(),
        lib.nvmlGpuInstanceGetInfo.as_ref(),
    ) else {
        return out;
    };
    for profile in 0..nvml_wrapper_sys::bindings::NVML_GPU_INSTANCE_PROFILE_COUNT {
        let mut handles = [std::ptr::null_mut(); 8];
        let mut count = 0u32;
        // SAFETY: a live device handle; `handles` has room for 8 instances, more than any
        // profile allows (7), and `count` is a valid out-pointer.
        let r = unsafe { list(device.handle(), profile, handles.as_mut_ptr(), &mut count) };
        if r != 0 {
            continue;
        }
        for &gi in handles.iter().take(count.min(8) as usize) {
            // SAFETY: `gi` came from NVML just now; `info` is a valid out-pointer.
            let mut info: nvml_wrapper_sys::bindings::nvmlGpuInstanceInfo_t =
                unsafe { std::mem::zeroed() };
            if unsafe { info_of(gi, &mut info) } != 0 {
                continue;
            }
            // A placement the wire cannot hold (an answer of another structure version) is
            // left unknown rather than have the collector refuse the inventory's batch.
            let (start, size) = (info.placement.start, info.placement.size);
            if size >= 1 && u64::from(start) + u64::from(size) <= u64::from(MAX_MIG_SLICES) {
                out.insert(info.id, (start, size));
            }
        }
    }
    out
}

/// Rows remapped (corrected + uncorrected): not wrapped by nvml-wrapper, so through the raw
/// library.
#[allow(unsafe_code)]
pub(crate) fn remapped_rows(device: &Device<'static>) -> Result<i32, NvmlError> {
    let lib = device.nvml().lib();
    let f = lib
        .nvmlDeviceGetRemappedRows
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: a live device handle of this NVML, and four valid out-pointers.
    let r = unsafe {
        f(
            device.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failure,
        )
    };
    match r {
        0 => Ok(wire_count(u64::from(corr) + u64::from(unc))),
        3 => Err(NvmlError::NotSupported),
        4 => Err(NvmlError::NoPermission),
        15 => Err(NvmlError::GpuLost),
        other => Err(NvmlError::Unknown)
            .inspect_err(|_| tracing::debug!(code = other, "nvmlDeviceGetRemappedRows")),
    }
}
