//! The few CUDA driver API calls the load needs, resolved from `libcuda.so.1` at run time
//! (dlopen/dlsym), so the program builds and starts on machines without CUDA.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};

/// The kernel: every thread spins until `%clock64` has advanced by the cycles asked for.
/// PTX ISA 7.0 for sm_70 is JIT-compiled by every driver since CUDA 11 for any newer GPU.
const SPIN_PTX: &str = "\
.version 7.0
.target sm_70
.address_size 64

.visible .entry gpulens_spin(
\t.param .u64 gpulens_spin_cycles
)
{
\t.reg .pred \t%p<2>;
\t.reg .b64 \t%rd<5>;

\tld.param.u64 \t%rd1, [gpulens_spin_cycles];
\tmov.u64 \t%rd2, %clock64;
$L_spin:
\tmov.u64 \t%rd3, %clock64;
\tsub.s64 \t%rd4, %rd3, %rd2;
\tsetp.lt.u64 \t%p1, %rd4, %rd1;
\t@%p1 bra \t$L_spin;
\tret;
}
\0";

const CU_DEVICE_ATTRIBUTE_CLOCK_RATE: c_int = 13;
const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;

#[derive(Debug)]
pub enum Error {
    /// libcuda.so.1 cannot be loaded, or cuInit says there is no device or driver.
    NoDriver(String),
    /// A driver call failed: which, and CUDA's name for the error.
    Call(&'static str, c_int, String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoDriver(why) => write!(f, "no NVIDIA driver: {why}"),
            Error::Call(call, code, name) => write!(f, "{call} failed: CUDA error {code} ({name})"),
        }
    }
}

type Ctx = *mut c_void;
type Module = *mut c_void;
type Function = *mut c_void;

/// The driver's entry points, as C function pointers.
struct Api {
    init: unsafe extern "C" fn(c_uint) -> c_int,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> c_int,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int,
    primary_ctx_retain: unsafe extern "C" fn(*mut Ctx, c_int) -> c_int,
    primary_ctx_release: unsafe extern "C" fn(c_int) -> c_int,
    ctx_set_current: unsafe extern "C" fn(Ctx) -> c_int,
    ctx_synchronize: unsafe extern "C" fn() -> c_int,
    module_load_data: unsafe extern "C" fn(*mut Module, *const c_void) -> c_int,
    module_get_function: unsafe extern "C" fn(*mut Function, Module, *const c_char) -> c_int,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> c_int,
    mem_free: unsafe extern "C" fn(u64) -> c_int,
    memset_d8: unsafe extern "C" fn(u64, u8, usize) -> c_int,
    #[allow(clippy::type_complexity)]
    launch_kernel: unsafe extern "C" fn(
        Function,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> c_int,
    get_error_name: unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int,
}

fn open_library() -> Result<*mut c_void, Error> {
    let mut why = Vec::new();
    for name in [c"libcuda.so.1", c"libcuda.so"] {
        // SAFETY: dlopen with a valid C string; the handle is kept for the process's life.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if !h.is_null() {
            return Ok(h);
        }
        // SAFETY: dlerror returns a C string owned by libdl, or null.
        let e = unsafe { libc::dlerror() };
        if !e.is_null() {
            why.push(unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned());
        }
    }
    Err(Error::NoDriver(why.join("; ")))
}

macro_rules! symbol {
    ($lib:expr, $name:literal) => {{
        // SAFETY: the name is a C string; a non-null result is the driver's function of
        // that name, whose C signature the field's type spells out (cuda.h).
        let p = unsafe { libc::dlsym($lib, concat!($name, "\0").as_ptr().cast()) };
        if p.is_null() {
            return Err(Error::NoDriver(format!(
                "libcuda.so.1 lacks {} (a driver too old?)",
                $name
            )));
        }
        // SAFETY: as above. The target type is the struct field's, written out there.
        #[allow(clippy::missing_transmute_annotations)]
        let f = unsafe { std::mem::transmute::<*mut c_void, _>(p) };
        f
    }};
}

impl Api {
    fn load() -> Result<Api, Error> {
        let lib = open_library()?;
        Ok(Api {
            init: symbol!(lib, "cuInit"),
            device_get: symbol!(lib, "cuDeviceGet"),
            device_get_name: symbol!(lib, "cuDeviceGetName"),
            device_get_attribute: symbol!(lib, "cuDeviceGetAttribute"),
            primary_ctx_retain: symbol!(lib, "cuDevicePrimaryCtxRetain"),
            primary_ctx_release: symbol!(lib, "cuDevicePrimaryCtxRelease_v2"),
            ctx_set_current: symbol!(lib, "cuCtxSetCurrent"),
            ctx_synchronize: symbol!(lib, "cuCtxSynchronize"),
            module_load_data: symbol!(lib, "cuModuleLoadData"),
            module_get_function: symbol!(lib, "cuModuleGetFunction"),
            mem_alloc: symbol!(lib, "cuMemAlloc_v2"),
            mem_free: symbol!(lib, "cuMemFree_v2"),
            memset_d8: symbol!(lib, "cuMemsetD8_v2"),
            launch_kernel: symbol!(lib, "cuLaunchKernel"),
            get_error_name: symbol!(lib, "cuGetErrorName"),
        })
    }

    fn check(&self, call: &'static str, code: c_int) -> Result<(), Error> {
        if code == 0 {
            return Ok(());
        }
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string, or leaves it null.
        let name = if unsafe { (self.get_error_name)(code, &mut name) } == 0 && !name.is_null() {
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        } else {
            "unknown".into()
        };
        Err(Error::Call(call, code, name))
    }
}

/// One device with its primary context current on this thread.
pub struct Gpu {
    api: Api,
    device: c_int,
    name: String,
    clock_khz: i32,
    sms: u32,
}

impl Gpu {
    pub fn open(ordinal: i32) -> Result<Gpu, Error> {
        let api = Api::load()?;
        // SAFETY (every call below): the driver's documented signatures, with pointers to
        // live locals.
        let code = unsafe { (api.init)(0) };
        // 100: CUDA_ERROR_NO_DEVICE; 35: CUDA_ERROR_INSUFFICIENT_DRIVER.
        if code == 100 || code == 35 {
            return Err(Error::NoDriver(format!(
                "cuInit answered CUDA error {code}"
            )));
        }
        api.check("cuInit", code)?;
        let mut device = 0;
        api.check("cuDeviceGet", unsafe {
            (api.device_get)(&mut device, ordinal)
        })?;
        let mut buf = [0 as c_char; 256];
        api.check("cuDeviceGetName", unsafe {
            (api.device_get_name)(buf.as_mut_ptr(), buf.len() as c_int, device)
        })?;
        let name = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let attribute = |attr| -> Result<i32, Error> {
            let mut v = 0;
            api.check("cuDeviceGetAttribute", unsafe {
                (api.device_get_attribute)(&mut v, attr, device)
            })?;
            Ok(v)
        };
        let clock_khz = attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?;
        let sms = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as u32;
        let mut ctx: Ctx = std::ptr::null_mut();
        api.check("cuDevicePrimaryCtxRetain", unsafe {
            (api.primary_ctx_retain)(&mut ctx, device)
        })?;
        api.check("cuCtxSetCurrent", unsafe { (api.ctx_set_current)(ctx) })?;
        Ok(Gpu {
            api,
            device,
            name,
            clock_khz,
            sms,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The SM clock the device reports (kHz).
    pub fn clock_khz(&self) -> i32 {
        self.clock_khz
    }

    /// `bytes` of device memory, allocated and written once so it is resident.
    pub fn hold_memory(&self, bytes: usize) -> Result<Memory<'_>, Error> {
        let mut ptr = 0u64;
        if bytes > 0 {
            self.api.check("cuMemAlloc", unsafe {
                (self.api.mem_alloc)(&mut ptr, bytes)
            })?;
            self.api.check("cuMemsetD8", unsafe {
                (self.api.memset_d8)(ptr, 0x5a, bytes)
            })?;
            self.api
                .check("cuCtxSynchronize", unsafe { (self.api.ctx_synchronize)() })?;
        }
        Ok(Memory {
            gpu: self,
            ptr,
            bytes,
        })
    }

    /// The spin kernel, JIT-compiled from PTX for this device.
    pub fn spin_kernel(&self) -> Result<Spin<'_>, Error> {
        let mut module: Module = std::ptr::null_mut();
        self.api
            .check("cuModuleLoadData (JIT of the PTX)", unsafe {
                (self.api.module_load_data)(&mut module, SPIN_PTX.as_ptr().cast())
            })?;
        let name = CString::new("gpulens_spin").expect("no NUL");
        let mut function: Function = std::ptr::null_mut();
        self.api.check("cuModuleGetFunction", unsafe {
            (self.api.module_get_function)(&mut function, module, name.as_ptr())
        })?;
        Ok(Spin {
            gpu: self,
            function,
        })
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: releases the primary context retained in `open`.
        unsafe { (self.api.primary_ctx_release)(self.device) };
    }
}

/// Device memory held until dropped.
pub struct Memory<'a> {
    gpu: &'a Gpu,
    ptr: u64,
    bytes: usize,
}

impl Memory<'_> {
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Memory<'_> {
    fn drop(&mut self) {
        if self.bytes > 0 {
            // SAFETY: frees what `hold_memory` allocated, once.
            unsafe { (self.gpu.api.mem_free)(self.ptr) };
        }
    }
}

pub struct Spin<'a> {
    gpu: &'a Gpu,
    function: Function,
}

impl Spin<'_> {
    /// Runs the kernel on every SM (four blocks of 128 threads each) for `cycles` SM clock
    /// cycles, and waits for it.
    pub fn run(&self, cycles: u64) -> Result<(), Error> {
        let api = &self.gpu.api;
        let mut cycles = cycles;
        let mut params = [(&raw mut cycles).cast::<c_void>()];
        api.check("cuLaunchKernel", unsafe {
            (api.launch_kernel)(
                self.function,
                self.gpu.sms * 4,
                1,
                1,
                128,
                1,
                1,
                0,
                std::ptr::null_mut(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })?;
        api.check("cuCtxSynchronize", unsafe { (api.ctx_synchronize)() })
    }
}
