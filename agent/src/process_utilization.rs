//! Per-process utilization in one driver call. nvml-wrapper asks NVML twice each time — how
//! many samples, then the samples — for what is, on a real driver, the costliest call of a
//! cycle; this asks once, into a buffer kept from the previous call and grown when NVML says
//! it is too small (then a second call, as before).

use std::ffi::c_uint;

use nvml_wrapper::Device;
use nvml_wrapper::error::{NvmlError, nvml_try};
use nvml_wrapper_sys::bindings::{
    nvmlProcessUtilizationSample_t, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT,
    nvmlReturn_enum_NVML_ERROR_NOT_FOUND as NOT_FOUND,
};

/// The most samples asked for at once: NVML keeps a sample per process per interval, and a
/// GPU runs at most a few thousand processes.
const MOST: usize = 16_384;

const EMPTY: nvmlProcessUtilizationSample_t = nvmlProcessUtilizationSample_t {
    pid: 0,
    timeStamp: 0,
    smUtil: 0,
    memUtil: 0,
    encUtil: 0,
    decUtil: 0,
};

/// One GPU's buffer for per-process utilization samples.
#[derive(Default)]
pub(crate) struct ProcessUtilization {
    buf: Vec<nvmlProcessUtilizationSample_t>,
}

impl ProcessUtilization {
    /// The samples newer than `last_seen` (µs); none when NVML has none (`NOT_FOUND`).
    #[allow(unsafe_code)]
    pub(crate) fn since(
        &mut self,
        device: &Device<'static>,
        last_seen: u64,
    ) -> Result<&[nvmlProcessUtilizationSample_t], NvmlError> {
        if self.buf.is_empty() {
            self.buf = vec![EMPTY; 64];
        }
        let lib = device.nvml().lib();
        loop {
            let mut count = self.buf.len() as c_uint;
            // SAFETY: the handle is a live device handle of this NVML instance; the buffer
            // holds `count` samples, and NVML writes at most `count` and sets `count`.
            let code = unsafe {
                lib.nvmlDeviceGetProcessUtilization(
                    device.handle(),
                    self.buf.as_mut_ptr(),
                    &mut count,
                    last_seen,
                )
            };
            match code {
                NOT_FOUND => return Ok(&[]),
                INSUFFICIENT if self.buf.len() < MOST => {
                    let want = (count as usize).max(self.buf.len() * 2).min(MOST);
                    self.buf.resize(want, EMPTY);
                }
                code => {
                    nvml_try(code)?;
                    return Ok(&self.buf[..(count as usize).min(self.buf.len())]);
                }
            }
        }
    }
}
