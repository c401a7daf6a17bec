//! The NVML backend's calls: each timed (what it cost, by the reading it serves, for
//! `gpulens-agent bench`), and their errors settled — a reading the GPU cannot give is absent,
//! logged once per GPU and reading; a lost GPU is said so.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use nvml_wrapper::error::NvmlError;

/// Readings that are unavailable on a GPU (each logged once), and what each NVML call has
/// cost so far, by reading.
#[derive(Default)]
pub(crate) struct DriverCalls {
    absent: HashSet<(String, &'static str)>,
    costs: BTreeMap<&'static str, CallTime>,
    /// Whether calls are also timed on the thread's CPU clock (two system calls each: for
    /// `gpulens-agent bench`, not for a running agent).
    cpu_clock: bool,
}

/// What the calls of one reading have cost so far: how many, the wall time in them, and the
/// CPU time of the calling thread in them (a driver that waits — for a 20-ms PCIe window, an
/// RPC to the GPU's firmware — spends less CPU than wall time).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CallTime {
    pub calls: u64,
    pub wall: Duration,
    pub cpu: Duration,
}

/// The start of one call: the wall clock and, where measured, the calling thread's CPU clock.
pub(crate) struct Stopwatch {
    wall: Instant,
    cpu: Option<Duration>,
}

/// The calling thread's CPU time so far.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

impl DriverCalls {
    /// Makes the NVML call `call` for `field` of GPU `gpu`, timed; its value, or None where
    /// the GPU cannot give it.
    pub(crate) fn read<T>(
        &mut self,
        gpu: &str,
        field: &'static str,
        lost: &mut bool,
        call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        self.read_timed(gpu, field, lost, call).0
    }

    /// [`DriverCalls::read`], with the call's wall time.
    pub(crate) fn read_timed<T>(
        &mut self,
        gpu: &str,
        field: &'static str,
        lost: &mut bool,
        call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> (Option<T>, Duration) {
        let started = self.start();
        let r = call();
        let took = self.count(field, started);
        (self.settle(gpu, field, lost, r), took)
    }

    /// What the calls have cost so far, by reading.
    pub(crate) fn costs(&self) -> Vec<(&'static str, CallTime)> {
        self.costs.iter().map(|(field, t)| (*field, *t)).collect()
    }

    /// Whether calls are timed on the thread's CPU clock too, from now on.
    pub(crate) fn time_cpu(&mut self, on: bool) {
        self.cpu_clock = on;
    }

    /// The start of a call, on the clocks these calls are timed on.
    pub(crate) fn start(&self) -> Stopwatch {
        Stopwatch {
            wall: Instant::now(),
            cpu: self.cpu_clock.then(thread_cpu),
        }
    }

    /// Counts one call for `field` that began at `started`; its wall time.
    pub(crate) fn count(&mut self, field: &'static str, started: Stopwatch) -> Duration {
        let wall = started.wall.elapsed();
        let cost = self.costs.entry(field).or_default();
        cost.calls += 1;
        cost.wall += wall;
        if let Some(cpu) = started.cpu {
            cost.cpu += thread_cpu().saturating_sub(cpu);
        }
        wall
    }

    /// A call's result: its value, or None (logged once per GPU and field; `lost` set when the
    /// GPU fell off the bus).
    pub(crate) fn settle<T>(
        &mut self,
        gpu: &str,
        field: &'static str,
        lost: &mut bool,
        r: Result<T, NvmlError>,
    ) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(
                NvmlError::NotSupported
                | NvmlError::NoPermission
                | NvmlError::FailedToLoadSymbol(_)
                | NvmlError::FunctionNotFound,
            ) => {
                if self.absent.insert((gpu.to_owned(), field)) {
                    tracing::info!(
                        gpu_uuid = gpu,
                        field,
                        "not available on this GPU; reported as absent"
                    );
                }
                None
            }
            Err(NvmlError::GpuLost) => {
                *lost = true;
                None
            }
            Err(e) => {
                if self.absent.insert((gpu.to_owned(), field)) {
                    tracing::warn!(gpu_uuid = gpu, field, error = %e, "reading failed; reported as absent");
                }
                None
            }
        }
    }
}

/// The NVML function behind each reading the cycle takes, so that what a driver charged per
/// reading can be charged again by the fake NVML (`GPULENS_FAKE_NVML_LATENCY`, keyed by
/// function): each reading makes one call of its function. `retired_pages` makes one call
/// where the GPU has no page retirement (every GPU from Ampere on, which remaps rows instead);
/// an older GPU answers it with four calls of two functions, so its cost per call is then
/// overstated fourfold. Held to what the fake NVML sees by
/// `agent::it every_readings_cost_is_charged_to_its_nvml_function`.
pub const NVML_FUNCTIONS: &[(&str, &str)] = &[
    ("memory", "nvmlDeviceGetMemoryInfo_v2"),
    ("utilization", "nvmlDeviceGetUtilizationRates"),
    ("power", "nvmlDeviceGetPowerUsage"),
    ("energy", "nvmlDeviceGetTotalEnergyConsumption"),
    ("temperature", "nvmlDeviceGetTemperature"),
    ("sm_clock", "nvmlDeviceGetClockInfo"),
    ("mem_clock", "nvmlDeviceGetClockInfo"),
    (
        "throttle_reasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ),
    ("encoder", "nvmlDeviceGetEncoderUtilization"),
    ("decoder", "nvmlDeviceGetDecoderUtilization"),
    (
        "compute_processes",
        "nvmlDeviceGetComputeRunningProcesses_v3",
    ),
    (
        "mps_processes",
        "nvmlDeviceGetMPSComputeRunningProcesses_v3",
    ),
    ("process_utilization", "nvmlDeviceGetProcessUtilization"),
    ("ecc", "nvmlDeviceGetTotalEccErrors"),
    ("retired_pages", "nvmlDeviceGetRetiredPages"),
    ("remapped_rows", "nvmlDeviceGetRemappedRows"),
    ("nvlink", "nvmlDeviceGetFieldValues"),
    ("pcie_bytes", "nvmlDeviceGetFieldValues"),
    ("pcie_rx", "nvmlDeviceGetPcieThroughput"),
    ("pcie_tx", "nvmlDeviceGetPcieThroughput"),
];

/// The NVML function a reading calls (None for one the table does not know).
pub fn nvml_function(reading: &str) -> Option<&'static str> {
    NVML_FUNCTIONS
        .iter()
        .find(|(r, _)| *r == reading)
        .map(|(_, f)| *f)
}
