//! **A stand-in for NVIDIA's `libnvidia-ml.so`, for tests only.** It exports the NVML C
//! functions the gpulens agent calls, with the exact versioned names and struct layouts
//! nvml-wrapper expects (taken from nvml-wrapper-sys's bindings), and serves devices from the
//! JSON fixture named by `GPULENS_FAKE_NVML_FIXTURE`. The agent loads it through
//! nvml-wrapper's library-path option, so the real NVML adapter code runs in CI, where there
//! is no GPU.
//!
//! Fixture semantics: a field that is absent answers `NVML_ERROR_NOT_SUPPORTED`; `lost_after`
//! makes a device answer `NVML_ERROR_GPU_IS_LOST` once it has been sampled that many times (a
//! GPU falling off the bus); `xid` queues XID events after a number of samples. A "sample" is
//! one `nvmlDeviceGetTemperature` call (made once per sampling cycle, not by inventory).
//! `GPULENS_FAKE_NVML_LATENCY` makes calls cost what a real driver's do (`latency.rs`).

// Every export is a C entry point whose pointer contract is NVML's own (out-pointers are
// checked for null here); no Rust code calls them.
#![allow(
    unsafe_code,
    non_snake_case,
    non_upper_case_globals,
    clippy::missing_safety_doc,
    clippy::not_unsafe_ptr_arg_deref
)]

use std::ffi::{c_char, c_uint, c_ulonglong};
use std::sync::Mutex;

use nvml_wrapper_sys::bindings::*;

mod fixture;
mod latency;

use fixture::{Device, Fixture, MigDevice, Process};

struct State {
    fixture: Fixture,
    started: std::time::Instant,
    samples: Vec<u32>,
    events: Vec<(usize, u64)>,
    fired: Vec<Vec<bool>>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

const SUCCESS: nvmlReturn_t = nvmlReturn_enum_NVML_SUCCESS;
const INVALID: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
const NOT_SUPPORTED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
const NOT_FOUND: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
const INSUFFICIENT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
const LOST: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
const UNINITIALIZED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
const TIMEOUT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_TIMEOUT;
const DRIVER_NOT_LOADED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;

/// Handles encode (device, MIG slot): physical devices are `(d + 1) << 8`, MIG devices add
/// `slot + 1` in the low byte. Never dereferenced, never null.
fn handle(dev: usize, mig: Option<usize>) -> nvmlDevice_t {
    (((dev + 1) << 8) | mig.map_or(0, |m| m + 1)) as nvmlDevice_t
}

fn decode(h: nvmlDevice_t) -> Option<(usize, Option<usize>)> {
    let v = h as usize;
    let dev = (v >> 8).checked_sub(1)?;
    let mig = (v & 0xff).checked_sub(1);
    Some((dev, mig))
}

/// Runs `f` on the device behind `h`, after the init and lost-GPU checks.
fn with_device(
    h: nvmlDevice_t,
    f: impl FnOnce(&Device, Option<&MigDevice>) -> nvmlReturn_t,
) -> nvmlReturn_t {
    let guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(state) = guard.as_ref() else {
        return UNINITIALIZED;
    };
    let Some((d, m)) = decode(h) else {
        return INVALID;
    };
    let Some(dev) = state.fixture.devices.get(d) else {
        return INVALID;
    };
    if dev.lost_after.is_some_and(|n| state.samples[d] > n) {
        return LOST;
    }
    let mig = match m {
        Some(i) => match dev.mig.get(i) {
            Some(mi) => Some(mi),
            None => return INVALID,
        },
        None => None,
    };
    f(dev, mig)
}

fn opt<T: Copy>(v: Option<T>, out: *mut T) -> nvmlReturn_t {
    match v {
        Some(v) if !out.is_null() => {
            unsafe { *out = v };
            SUCCESS
        }
        Some(_) => INVALID,
        None => NOT_SUPPORTED,
    }
}

fn write_str(s: &str, buf: *mut c_char, len: c_uint) -> nvmlReturn_t {
    if buf.is_null() || (len as usize) < s.len() + 1 {
        return INSUFFICIENT;
    }
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), buf, s.len());
        *buf.add(s.len()) = 0;
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    latency::spend("nvmlInit_v2");
    nvmlInitWithFlags(0)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    latency::spend("nvmlInitWithFlags");
    let Ok(path) = std::env::var("GPULENS_FAKE_NVML_FIXTURE") else {
        return DRIVER_NOT_LOADED;
    };
    let Ok(text) = std::fs::read_to_string(&path) else {
        return DRIVER_NOT_LOADED;
    };
    let fixture: Fixture = match serde_json::from_str(&text) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("fake NVML: fixture {path}: {e}");
            return DRIVER_NOT_LOADED;
        }
    };
    let n = fixture.devices.len();
    let fired = fixture
        .devices
        .iter()
        .map(|d| vec![false; d.xid.len()])
        .collect();
    *STATE.lock().unwrap_or_else(|e| e.into_inner()) = Some(State {
        fixture,
        started: std::time::Instant::now(),
        samples: vec![0; n],
        events: Vec::new(),
        fired,
    });
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    latency::spend("nvmlShutdown");
    *STATE.lock().unwrap_or_else(|e| e.into_inner()) = None;
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetDriverVersion(buf: *mut c_char, len: c_uint) -> nvmlReturn_t {
    latency::spend("nvmlSystemGetDriverVersion");
    let guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
    match guard.as_ref() {
        Some(s) => write_str(&s.fixture.driver_version, buf, len),
        None => UNINITIALIZED,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetCount_v2");
    let guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
    match guard.as_ref() {
        Some(s) => opt(Some(s.fixture.devices.len() as c_uint), count),
        None => UNINITIALIZED,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    out: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetHandleByIndex_v2");
    let guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
    match guard.as_ref() {
        Some(s) if (index as usize) < s.fixture.devices.len() => {
            opt(Some(handle(index as usize, None)), out)
        }
        Some(_) => INVALID,
        None => UNINITIALIZED,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetUUID(
    h: nvmlDevice_t,
    buf: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetUUID");
    with_device(h, |d, m| {
        write_str(m.map_or(&d.uuid, |m| &m.uuid), buf, len)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetName(
    h: nvmlDevice_t,
    buf: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetName");
    with_device(h, |d, m| match m {
        Some(m) => write_str(&format!("{} MIG {}", d.name, m.profile), buf, len),
        None => write_str(&d.name, buf, len),
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetIndex(h: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetIndex");
    let idx = decode(h).map(|(d, _)| d as c_uint);
    with_device(h, |_, _| opt(idx, out))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMinorNumber(h: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetMinorNumber");
    let idx = decode(h).map(|(d, _)| d as c_uint);
    with_device(h, |d, _| opt(d.minor.or(idx), out))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPciInfo_v3(
    h: nvmlDevice_t,
    out: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetPciInfo_v3");
    with_device(h, |d, _| {
        if out.is_null() {
            return INVALID;
        }
        let mut info: nvmlPciInfo_t = unsafe { std::mem::zeroed() };
        for (i, b) in d.pci_bus_id.bytes().take(31).enumerate() {
            info.busId[i] = b as c_char;
        }
        for (i, b) in d.pci_bus_id.bytes().skip(4).take(15).enumerate() {
            info.busIdLegacy[i] = b as c_char;
        }
        unsafe { *out = info };
        SUCCESS
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    h: nvmlDevice_t,
    out: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetMemoryInfo_v2");
    with_device(h, |d, m| {
        let (total, used) = m.map_or((d.memory_total, d.memory_used), |m| {
            (m.memory_total, m.memory_used)
        });
        opt(
            Some(nvmlMemory_v2_t {
                version: 0x0200_0028,
                total,
                reserved: 0,
                free: total.saturating_sub(used),
                used,
            }),
            out,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetUtilizationRates(
    h: nvmlDevice_t,
    out: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetUtilizationRates");
    with_device(h, |d, m| match (m, d.utilization) {
        (None, Some([gpu, memory])) => opt(Some(nvmlUtilization_t { gpu, memory }), out),
        _ => NOT_SUPPORTED,
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerUsage(h: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetPowerUsage");
    with_device(h, |d, _| opt(d.power_mw, out))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    h: nvmlDevice_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetTotalEnergyConsumption");
    // A real counter rises by what the GPU draws: the fixture's reading at load, plus its power
    // reading over the time since (so an agent's deltas are the fixture's power × time).
    let elapsed_ms = STATE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map_or(0, |s| s.started.elapsed().as_millis() as u64);
    with_device(h, |d, _| {
        let drawn_mj = u64::from(d.power_mw.unwrap_or(0)) * elapsed_ms / 1000;
        opt(d.energy_mj.map(|e| e.saturating_add(drawn_mj)), out)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTemperature(
    h: nvmlDevice_t,
    _sensor: nvmlTemperatureSensors_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetTemperature");
    // A sample of a physical device: count it (for lost_after and xid) before answering.
    if let Some((d, None)) = decode(h) {
        let mut guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = guard.as_mut()
            && d < s.samples.len()
        {
            s.samples[d] += 1;
            let n = s.samples[d];
            for (i, x) in s.fixture.devices[d].xid.iter().enumerate() {
                if !s.fired[d][i] && n >= x.after_samples {
                    s.fired[d][i] = true;
                    s.events.push((d, x.code));
                }
            }
        }
    }
    with_device(h, |d, _| opt(d.temp_c, out))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetClockInfo(
    h: nvmlDevice_t,
    clock: nvmlClockType_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetClockInfo");
    with_device(h, |d, _| match clock {
        nvmlClockType_enum_NVML_CLOCK_SM | nvmlClockType_enum_NVML_CLOCK_GRAPHICS => {
            opt(d.sm_clock_mhz, out)
        }
        nvmlClockType_enum_NVML_CLOCK_MEM => opt(d.mem_clock_mhz, out),
        _ => NOT_SUPPORTED,
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    h: nvmlDevice_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetCurrentClocksThrottleReasons");
    with_device(h, |d, _| opt(d.throttle_reasons, out))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPcieThroughput(
    h: nvmlDevice_t,
    counter: nvmlPcieUtilCounter_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetPcieThroughput");
    with_device(h, |d, _| match counter {
        nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_TX_BYTES => opt(d.pcie_tx_kbs, out),
        nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_RX_BYTES => opt(d.pcie_rx_kbs, out),
        _ => INVALID,
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTotalEccErrors(
    h: nvmlDevice_t,
    error_type: nvmlMemoryErrorType_t,
    _counter: nvmlEccCounterType_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetTotalEccErrors");
    with_device(h, |d, _| match error_type {
        nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED => opt(d.ecc_corrected, out),
        _ => opt(d.ecc_uncorrected, out),
    })
}

/// Encoder or decoder utilization, with NVML's sampling period (1 s here).
fn codec_utilization(
    h: nvmlDevice_t,
    pick: fn(&Device) -> Option<u32>,
    util: *mut c_uint,
    period: *mut c_uint,
) -> nvmlReturn_t {
    with_device(h, |d, _| {
        let r = opt(pick(d), util);
        if r == SUCCESS && !period.is_null() {
            unsafe { *period = 1_000_000 };
        }
        r
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetEncoderUtilization(
    h: nvmlDevice_t,
    util: *mut c_uint,
    period: *mut c_uint,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetEncoderUtilization");
    codec_utilization(h, |d| d.encoder_util, util, period)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetDecoderUtilization(
    h: nvmlDevice_t,
    util: *mut c_uint,
    period: *mut c_uint,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetDecoderUtilization");
    codec_utilization(h, |d| d.decoder_util, util, period)
}

/// The "NULL buffer → INSUFFICIENT_SIZE + count" protocol of NVML's list calls.
fn list_processes(
    h: nvmlDevice_t,
    mps: bool,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    with_device(h, |d, m| {
        if count.is_null() {
            return INVALID;
        }
        let procs: Vec<&Process> = d
            .processes
            .iter()
            .filter(|p| p.mps == mps)
            .filter(|p| {
                m.is_none_or(|m| p.gi_id == Some(m.gi_id) && p.ci_id.unwrap_or(0) == m.ci_id)
            })
            .collect();
        let room = unsafe { *count } as usize;
        unsafe { *count = procs.len() as c_uint };
        if procs.is_empty() {
            return SUCCESS;
        }
        if infos.is_null() || room < procs.len() {
            return INSUFFICIENT;
        }
        for (i, p) in procs.iter().enumerate() {
            unsafe {
                *infos.add(i) = nvmlProcessInfo_t {
                    pid: p.pid,
                    usedGpuMemory: p.used_memory,
                    gpuInstanceId: p.gi_id.unwrap_or(u32::MAX),
                    computeInstanceId: p.ci_id.unwrap_or(u32::MAX),
                };
            }
        }
        SUCCESS
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    h: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetComputeRunningProcesses_v3");
    list_processes(h, false, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    h: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetMPSComputeRunningProcesses_v3");
    list_processes(h, true, count, infos)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetProcessUtilization(
    h: nvmlDevice_t,
    samples: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetProcessUtilization");
    with_device(h, |d, m| {
        if m.is_some() || !d.mig.is_empty() || !d.process_utilization_supported {
            // Per-process utilization is not available under MIG.
            return NOT_SUPPORTED;
        }
        if count.is_null() {
            return INVALID;
        }
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_micros() as u64);
        let procs: Vec<&Process> = d.processes.iter().filter(|p| p.sm.is_some()).collect();
        // Samples are only newer than the caller's last timestamp; an up-to-date caller
        // gets none until time moves on.
        let procs: Vec<&Process> = if last_seen >= now_us {
            Vec::new()
        } else {
            procs
        };
        let room = unsafe { *count } as usize;
        unsafe { *count = procs.len() as c_uint };
        if procs.is_empty() {
            return nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
        }
        if samples.is_null() || room < procs.len() {
            return INSUFFICIENT;
        }
        for (i, p) in procs.iter().enumerate() {
            unsafe {
                *samples.add(i) = nvmlProcessUtilizationSample_t {
                    pid: p.pid,
                    timeStamp: now_us,
                    smUtil: p.sm.unwrap_or(0),
                    memUtil: p.mem,
                    encUtil: p.enc,
                    decUtil: p.dec,
                };
            }
        }
        SUCCESS
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMigMode(
    h: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetMigMode");
    with_device(h, |d, m| {
        if m.is_some() {
            return NOT_SUPPORTED;
        }
        let mode = c_uint::from(!d.mig.is_empty());
        let r = opt(Some(mode), current);
        if r == SUCCESS && !pending.is_null() {
            unsafe { *pending = mode };
        }
        r
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    h: nvmlDevice_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetMaxMigDeviceCount");
    with_device(h, |d, _| {
        if d.mig.is_empty() {
            NOT_SUPPORTED
        } else {
            opt(Some(7), out)
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    h: nvmlDevice_t,
    index: c_uint,
    out: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetMigDeviceHandleByIndex");
    let dev = decode(h).map(|(d, _)| d);
    with_device(h, |d, m| {
        if m.is_some() {
            return INVALID;
        }
        if (index as usize) < d.mig.len() {
            opt(dev.map(|dv| handle(dv, Some(index as usize))), out)
        } else {
            NOT_FOUND
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceIsMigDeviceHandle(h: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
    latency::spend("nvmlDeviceIsMigDeviceHandle");
    with_device(h, |_, m| opt(Some(c_uint::from(m.is_some())), out))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGpuInstanceId(h: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetGpuInstanceId");
    with_device(h, |_, m| m.map_or(INVALID, |m| opt(Some(m.gi_id), out)))
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeInstanceId(
    h: nvmlDevice_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetComputeInstanceId");
    with_device(h, |_, m| m.map_or(INVALID, |m| opt(Some(m.ci_id), out)))
}

// Events: one global queue; sets are tokens.

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetCreate(out: *mut nvmlEventSet_t) -> nvmlReturn_t {
    latency::spend("nvmlEventSetCreate");
    opt(Some(1usize as nvmlEventSet_t), out)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetFree(_set: nvmlEventSet_t) -> nvmlReturn_t {
    latency::spend("nvmlEventSetFree");
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetSupportedEventTypes(
    h: nvmlDevice_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetSupportedEventTypes");
    with_device(h, |_, _| {
        opt(Some(c_ulonglong::from(nvmlEventTypeXidCriticalError)), out)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceRegisterEvents(
    h: nvmlDevice_t,
    _types: c_ulonglong,
    _set: nvmlEventSet_t,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceRegisterEvents");
    with_device(h, |_, _| SUCCESS)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetWait_v2(
    _set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeout_ms: c_uint,
) -> nvmlReturn_t {
    latency::spend("nvmlEventSetWait_v2");
    let next = {
        let mut guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            Some(s) if !s.events.is_empty() => Some(s.events.remove(0)),
            Some(_) => None,
            None => return UNINITIALIZED,
        }
    };
    match next {
        Some((d, code)) => opt(
            Some(nvmlEventData_t {
                device: handle(d, None),
                eventType: c_ulonglong::from(nvmlEventTypeXidCriticalError),
                eventData: code,
                gpuInstanceId: u32::MAX,
                computeInstanceId: u32::MAX,
            }),
            data,
        ),
        None => {
            std::thread::sleep(std::time::Duration::from_millis(u64::from(
                timeout_ms.min(20),
            )));
            TIMEOUT
        }
    }
}

/// Retired pages for a cause ([multiple single-bit, double-bit]), with NVML's protocol: the
/// count goes back in `count`, INSUFFICIENT_SIZE when the arrays are too short; `timestamps`
/// may be null (the v1 call has none).
fn retired_pages(
    h: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> nvmlReturn_t {
    with_device(h, |d, _| {
        let Some(pages) = d.retired_pages else {
            return NOT_SUPPORTED;
        };
        if count.is_null() {
            return INVALID;
        }
        let n = pages[(cause != 0) as usize];
        let room = unsafe { *count };
        unsafe { *count = n };
        if room < n {
            return INSUFFICIENT;
        }
        if n > 0 && addresses.is_null() {
            return INVALID;
        }
        for i in 0..n as usize {
            unsafe {
                *addresses.add(i) = 0x1000 * (i as u64 + 1);
                if !timestamps.is_null() {
                    *timestamps.add(i) = 1_790_000_000;
                }
            }
        }
        SUCCESS
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetRetiredPages(
    h: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetRetiredPages");
    retired_pages(h, cause, count, addresses, std::ptr::null_mut())
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetRetiredPages_v2(
    h: nvmlDevice_t,
    cause: nvmlPageRetirementCause_t,
    count: *mut c_uint,
    addresses: *mut c_ulonglong,
    timestamps: *mut c_ulonglong,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetRetiredPages_v2");
    retired_pages(h, cause, count, addresses, timestamps)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetRemappedRows(
    h: nvmlDevice_t,
    corr: *mut c_uint,
    unc: *mut c_uint,
    pending: *mut c_uint,
    failure: *mut c_uint,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetRemappedRows");
    with_device(h, |d, _| {
        let Some([c, u]) = d.remapped_rows else {
            return NOT_SUPPORTED;
        };
        if corr.is_null() || unc.is_null() || pending.is_null() || failure.is_null() {
            return INVALID;
        }
        unsafe {
            *corr = c;
            *unc = u;
            *pending = 0;
            *failure = 0;
        }
        SUCCESS
    })
}

/// Field values: NVLink data throughput counters (fields 138 tx, 139 rx, in KiB).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetFieldValues(
    h: nvmlDevice_t,
    count: std::ffi::c_int,
    values: *mut nvmlFieldValue_t,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetFieldValues");
    let elapsed = {
        let guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
        guard
            .as_ref()
            .map_or(0.0, |s| s.started.elapsed().as_secs_f64())
    };
    with_device(h, |d, _| {
        if values.is_null() || count < 0 {
            return INVALID;
        }
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_micros() as i64);
        for i in 0..count as usize {
            let v = unsafe { &mut *values.add(i) };
            v.timestamp = now_us;
            v.latencyUsec = 0;
            // Counters rising at the fixture's rate since loading: NVLink in KiB, PCIe in bytes.
            let per_s = match (v.fieldId, d.nvlink_kibs) {
                (138 | 139, Some(kibs)) => Some(kibs[(v.fieldId - 138) as usize] as f64),
                (197, _) => d.pcie_tx_kbs.map(|k| f64::from(k) * 1024.0),
                (198, _) => d.pcie_rx_kbs.map(|k| f64::from(k) * 1024.0),
                _ => None,
            };
            match per_s {
                Some(r) => {
                    v.valueType = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
                    v.nvmlReturn = SUCCESS;
                    v.value = nvmlValue_t {
                        ullVal: (r * elapsed) as u64,
                    };
                }
                None => v.nvmlReturn = NOT_SUPPORTED,
            }
        }
        SUCCESS
    })
}

/// NVML's GPU-instance profile id for a profile name's compute slices (1g → 0, 2g → 1,
/// 3g → 2, 4g → 3, 7g → 4).
fn profile_id(profile: &str) -> Option<u32> {
    match profile.split('g').next()? {
        "1" => Some(0),
        "2" => Some(1),
        "3" => Some(2),
        "4" => Some(3),
        "7" => Some(4),
        _ => None,
    }
}

/// GPU-instance handles encode (device, MIG slot) like device handles, in their own range.
fn gi_handle(dev: usize, slot: usize) -> nvmlGpuInstance_t {
    ((0x10_0000 + ((dev + 1) << 8)) | (slot + 1)) as nvmlGpuInstance_t
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGpuInstances(
    h: nvmlDevice_t,
    profile: c_uint,
    instances: *mut nvmlGpuInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    latency::spend("nvmlDeviceGetGpuInstances");
    let dev = decode(h).map(|(d, _)| d);
    with_device(h, |d, m| {
        if m.is_some() || d.mig.is_empty() {
            return NOT_SUPPORTED;
        }
        if count.is_null() || instances.is_null() {
            return INVALID;
        }
        let mut n = 0;
        for (slot, mi) in d.mig.iter().enumerate() {
            if profile_id(&mi.profile) == Some(profile) {
                unsafe { *instances.add(n) = gi_handle(dev.unwrap_or(0), slot) };
                n += 1;
            }
        }
        unsafe { *count = n as c_uint };
        SUCCESS
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlGpuInstanceGetInfo(
    gi: nvmlGpuInstance_t,
    info: *mut nvmlGpuInstanceInfo_t,
) -> nvmlReturn_t {
    latency::spend("nvmlGpuInstanceGetInfo");
    let v = (gi as usize).wrapping_sub(0x10_0000);
    let (Some(dev), Some(slot)) = ((v >> 8).checked_sub(1), (v & 0xff).checked_sub(1)) else {
        return INVALID;
    };
    with_device(handle(dev, None), |d, _| {
        let Some(mi) = d.mig.get(slot) else {
            return INVALID;
        };
        if info.is_null() {
            return INVALID;
        }
        let [start, size] = mi.placement.unwrap_or([0, 0]);
        unsafe {
            *info = nvmlGpuInstanceInfo_t {
                device: handle(dev, None),
                id: mi.gi_id,
                profileId: profile_id(&mi.profile).unwrap_or(0),
                placement: nvmlGpuInstancePlacement_t { start, size },
            };
        }
        SUCCESS
    })
}
