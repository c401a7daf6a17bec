//! Lists from the driver in one call each: per-process utilization, and the compute and MPS
//! process lists. nvml-wrapper asks NVML twice for each — how many entries, then the entries —
//! every cycle; these ask once, into a buffer kept from the previous cycle and grown when NVML
//! says it is too small (then a second call, as before).

use std::ffi::c_uint;

use nvml_wrapper::Device;
use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper_sys::bindings::{
    nvmlProcessInfo_t, nvmlProcessUtilizationSample_t,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT, nvmlReturn_t,
};

/// The most entries asked for at once: a GPU runs at most a few thousand processes.
const MOST: usize = 16_384;

/// Calls `call` (its buffer, and in: the buffer's length, out: the entries NVML has) into
/// `buf`, growing it while NVML says it is too small; the entries written.
fn into_buffer<T: Copy>(
    buf: &mut Vec<T>,
    empty: T,
    first: usize,
    mut call: impl FnMut(*mut T, &mut c_uint) -> nvmlReturn_t,
) -> Result<&[T], NvmlError> {
    if buf.is_empty() {
        *buf = vec![empty; first];
    }
    loop {
        let mut count = buf.len() as c_uint;
        let code = call(buf.as_mut_ptr(), &mut count);
        if code == INSUFFICIENT && buf.len() < MOST {
            // Room for a few more than NVML counted: processes start between calls.
            let want = (count as usize + 8).max(buf.len() * 2).min(MOST);
            buf.resize(want, empty);
            continue;
        }
        nvml_try(code)?;
        return Ok(&buf[..(count as usize).min(buf.len())]);
    }
}

const NO_SAMPLE: nvmlProcessUtilizationSample_t = nvmlProcessUtilizationSample_t {
    pid: 0,
    timeStamp: 0,
    smUtil: 0,
    memUtil: 0,
    encUtil: 0,
    decUtil: 0,
};

const NO_PROCESS: nvmlProcessInfo_t = nvmlProcessInfo_t {
    pid: 0,
    usedGpuMemory: 0,
    gpuInstanceId: 0,
    computeInstanceId: 0,
};

/// Which process list.
#[derive(Debug, Clone, Copy)]
pub(crate) enum List {
    Compute,
    Mps,
}

/// One GPU's buffers.
#[derive(Default)]
pub(crate) struct DriverLists {
    utilization: Vec<nvmlProcessUtilizationSample_t>,
    compute: Vec<nvmlProcessInfo_t>,
    mps: Vec<nvmlProcessInfo_t>,
}

impl DriverLists {
    /// The per-process utilization samples newer than `last_seen` (µs); none when NVML has
    /// none (`NOT_FOUND`).
    #[allow(unsafe_code)]
    pub(crate) fn utilization_since(
        &mut self,
        device: &Device<'static>,
        last_seen: u64,
    ) -> Result<&[nvmlProcessUtilizationSample_t], NvmlError> {
        let lib = device.nvml().lib();
        // SAFETY: the handle is a live device handle of this NVML instance; the buffer holds
        // `count` samples, and NVML writes at most `count` and sets `count`.
        let r = into_buffer(&mut self.utilization, NO_SAMPLE, 64, |buf, count| unsafe {
            lib.nvmlDeviceGetProcessUtilization(device.handle(), buf, count, last_seen)
        });
        match r {
            Err(NvmlError::NotFound) => Ok(&[]),
            r => r,
        }
    }

    /// The processes of `list` running on `device` now.
    #[allow(unsafe_code)]
    pub(crate) fn processes(
        &mut self,
        device: &Device<'static>,
        list: List,
    ) -> Result<Vec<ProcessInfo>, NvmlError> {
        let lib = device.nvml().lib();
        // SAFETY: as above: a live handle, a buffer of `count` entries.
        let h = unsafe { device.handle() };
        let entries = match list {
            List::Compute => into_buffer(&mut self.compute, NO_PROCESS, 32, |buf, count| unsafe {
                lib.nvmlDeviceGetComputeRunningProcesses_v3(h, count, buf)
            }),
            List::Mps => into_buffer(&mut self.mps, NO_PROCESS, 32, |buf, count| unsafe {
                lib.nvmlDeviceGetMPSComputeRunningProcesses_v3(h, count, buf)
            }),
        }?;
        Ok(entries.iter().copied().map(ProcessInfo::from).collect())
    }
}
