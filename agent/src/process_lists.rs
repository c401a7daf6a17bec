//! A GPU's compute and MPS process lists in one driver call each. nvml-wrapper asks NVML twice
//! for each list — how many processes, then the list — every cycle; this asks once, into a
//! buffer kept from the previous cycle and grown when NVML says it is too small (then a second
//! call, as before).

use std::ffi::c_uint;

use nvml_wrapper::Device;
use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper_sys::bindings::{
    nvmlProcessInfo_t, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT,
};

/// The most processes asked for at once.
const MOST: usize = 16_384;

const EMPTY: nvmlProcessInfo_t = nvmlProcessInfo_t {
    pid: 0,
    usedGpuMemory: 0,
    gpuInstanceId: 0,
    computeInstanceId: 0,
};

/// Which list.
#[derive(Debug, Clone, Copy)]
pub(crate) enum List {
    Compute,
    Mps,
}

/// One GPU's buffers for its process lists.
#[derive(Default)]
pub(crate) struct ProcessLists {
    compute: Vec<nvmlProcessInfo_t>,
    mps: Vec<nvmlProcessInfo_t>,
}

impl ProcessLists {
    /// The processes of `list` running on `device` now.
    #[allow(unsafe_code)]
    pub(crate) fn read(
        &mut self,
        device: &Device<'static>,
        list: List,
    ) -> Result<Vec<ProcessInfo>, NvmlError> {
        let buf = match list {
            List::Compute => &mut self.compute,
            List::Mps => &mut self.mps,
        };
        if buf.is_empty() {
            *buf = vec![EMPTY; 32];
        }
        let lib = device.nvml().lib();
        loop {
            let mut count = buf.len() as c_uint;
            // SAFETY: the handle is a live device handle of this NVML instance; the buffer
            // holds `count` entries, and NVML writes at most `count` and sets `count`.
            let code = unsafe {
                match list {
                    List::Compute => lib.nvmlDeviceGetComputeRunningProcesses_v3(
                        device.handle(),
                        &mut count,
                        buf.as_mut_ptr(),
                    ),
                    List::Mps => lib.nvmlDeviceGetMPSComputeRunningProcesses_v3(
                        device.handle(),
                        &mut count,
                        buf.as_mut_ptr(),
                    ),
                }
            };
            if code == INSUFFICIENT && buf.len() < MOST {
                // Room for a few more than NVML counted: processes start between calls.
                let want = (count as usize + 8).max(buf.len() * 2).min(MOST);
                buf.resize(want, EMPTY);
                continue;
            }
            nvml_try(code)?;
            return Ok(buf[..(count as usize).min(buf.len())]
                .iter()
                .copied()
                .map(ProcessInfo::from)
                .collect());
        }
    }
}
