//! The NVML backend: the only module that calls NVML (through nvml-wrapper). Reads inventory
//! (GPUs, MIG devices with their GPU/compute instance ids), per-device readings, running
//! compute and MPS processes, per-process utilization (asked with the previous timestamp, so
//! each sample covers the last interval), and XID errors from an NVML event set on a thread
//! of its own.
//!
//! A reading the GPU does not support (NOT_SUPPORTED, NO_PERMISSION, or a function missing
//! from an older driver) is logged once and reported as absent — NULL, never 0 — and not asked
//! again. A GPU that falls off the bus is reported once as an event and then skipped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use model::inventory::Sharing;
use model::wire::v1::{MAX_MIG_ID, Snapshot, is_name, is_text};
use model::{GpuEvent, GpuInfo, GpuSample, MigInstanceInfo, MigSample, Tenant, UnixMillis};
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor,
};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use crate::driver_calls::DriverCalls;
use crate::driver_values::{inventory_bytes, ratio, wire_bytes, wire_count};
use crate::nvml_raw::{instance_ids, placements, remapped_rows};

use crate::attribution::ProcFs;
use crate::backend::GpuBackend;
use crate::kubelet::Assignments;
use crate::process_shares::DeviceUse;
use crate::shipper::now_ms;

mod counters;
mod energy;
mod processes;
use counters::{CounterRate, NVLINK_KIB, PCIE_BYTES};
use processes::{Attribution, OnGpu, ProcessReads, processes};

struct Mig {
    device: Device<'static>,
    info: MigInstanceInfo,
}

struct Gpu {
    device: Device<'static>,
    info: GpuInfo,
    migs: Vec<Mig>,
    lost: bool,
    /// What its processes' reads keep between cycles.
    procs: ProcessReads,
    /// The previous NVLink and PCIe byte counters, for their rates.
    nvlink_prev: CounterRate,
    pcie_prev: CounterRate,
    /// When its energy counter was last read, and whether that was costly.
    energy: energy::EnergyClock,
    /// Its `/dev/nvidiaN` minor number (how Slurm numbers GPUs); None where NVML cannot tell.
    minor: Option<u32>,
    /// The readings that change rarely, as last read ([`RARE_EVERY_MS`]).
    rare: Option<Rare>,
}

/// Readings that change rarely or cost most — ECC counters, retired pages, remapped rows,
/// NVLink traffic — read on a slower clock than the rest and repeated in between (NVLink traffic
/// as the rate over the slower interval). PCIe traffic is read on the same clock and reported
/// in that sample only, as the mean rate since the last read from the byte counters (else
/// NVML's 20-ms window, `nvmlDeviceGetPcieThroughput`). The energy counter has a clock of its
/// own (`nvml/energy.rs`).
#[derive(Debug, Clone, Copy, Default)]
struct Rare {
    at: UnixMillis,
    ecc_corrected: Option<i64>,
    ecc_uncorrected: Option<i64>,
    retired_pages: Option<i32>,
    remapped_rows: Option<i32>,
    nvlink: Option<(i64, i64)>,
}

/// How often the rare readings are read again, by default (`--rare-every`).
pub const RARE_EVERY_MS: i64 = 30_000;

/// How often the processes sharing a GPU have their utilization read, by default
/// (`--process-utilization-every`; `process_shares`).
pub const SHARE_EVERY_MS: i64 = 10_000;

pub struct NvmlBackend {
    cluster: String,
    node: String,
    gpus: Vec<Gpu>,
    calls: DriverCalls,
    events: Option<mpsc::Receiver<(String, u64, UnixMillis)>>,
    procfs: ProcFs,
    /// First sighting of processes whose start time /proc could not tell, while they run.
    first_seen: HashMap<u32, i64>,
    /// What `/proc` said of running processes' owners (`processes::Owned`).
    owners: HashMap<u32, processes::Owned>,
    /// The kubelet's device assignments, refreshed by the caller.
    assignments: Option<Assignments>,
    /// Replicas per time-sliced GPU, when configured (otherwise inferred from replica ids).
    replicas: Option<u32>,
    /// `HOSTNAME` of pod processes, read once per process (pid and start time), for the pod
    /// join; processes gone from the snapshot are forgotten.
    hostnames: HashMap<u32, (i64, Option<String>)>,
    /// Slurm's GPU holdings, read from the cgroup tree when one is given.
    slurm: Option<SlurmWatch>,
    /// How often the rare readings are read ([`Rare`]).
    rare_every_ms: i64,
    /// How often a GPU shared by processes has their utilization read (`process_shares`).
    share_every_ms: i64,
}

/// Where Slurm's job cgroups are, and the holdings last read from them.
struct SlurmWatch {
    cgroup_root: PathBuf,
    read_at: Option<UnixMillis>,
    held: Vec<crate::slurm::Holding>,
}

/// How often Slurm's holdings are read again (a job's allocation is fixed while it runs).
const SLURM_REREAD_MS: i64 = 10_000;

impl std::fmt::Debug for NvmlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NvmlBackend({} GPUs)", self.gpus.len())
    }
}

/// Where the NVIDIA driver's library is looked for when no path is given.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

impl NvmlBackend {
    /// Loads NVML from `library` (a path, or a name the dynamic loader finds) and reads the
    /// inventory. Fails with an explanation when no driver is there.
    pub fn open(
        library: &Path,
        cluster: &str,
        node: &str,
        procfs: ProcFs,
    ) -> anyhow::Result<NvmlBackend> {
        let nvml = Nvml::builder().lib_path(library.as_os_str()).init().map_err(|e| match e {
            NvmlError::LibloadingError(inner) => anyhow::anyhow!(
                "cannot load the NVIDIA management library {}: {inner}. Is the NVIDIA driver installed, and is the library visible to the agent (in a container: mount it from the host)?",
                library.display()
            ),
            NvmlError::DriverNotLoaded => anyhow::anyhow!("the NVIDIA driver is not loaded (NVML says DRIVER_NOT_LOADED)"),
            NvmlError::NoPermission => anyhow::anyhow!("no permission to use NVML; run the agent with access to /dev/nvidia*"),
            other => anyhow::anyhow!("NVML failed to start: {other}"),
        })?;
        // One NVML for the life of the process: devices and event sets borrow it.
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));
        let mut calls = DriverCalls::default();
        let count = nvml.device_count()?;
        let mut gpus = Vec::new();
        for index in 0..count {
            let device = nvml.device_by_index(index)?;
            gpus.push(inventory(device, index, &mut calls)?);
        }
        let events = spawn_event_thread(nvml, &gpus);
        Ok(NvmlBackend {
            cluster: cluster.to_owned(),
            node: node.to_owned(),
            gpus,
            calls,
            events,
            procfs,
            first_seen: HashMap::new(),
            owners: HashMap::new(),
            assignments: None,
            replicas: None,
            hostnames: HashMap::new(),
            slurm: None,
            rare_every_ms: RARE_EVERY_MS,
            share_every_ms: SHARE_EVERY_MS,
        })
    }

    /// Reads ECC counters, retired pages, remapped rows and NVLink traffic every `every`
    /// (at least every sample) instead of every [`RARE_EVERY_MS`].
    pub fn set_rare_every(&mut self, every: Duration) {
        self.rare_every_ms = every.as_millis().clamp(0, i64::MAX as u128) as i64;
    }

    /// Reads the per-process utilization of a GPU shared by processes every `every` (at
    /// least every sample) instead of every [`SHARE_EVERY_MS`].
    pub fn set_process_utilization_every(&mut self, every: Duration) {
        self.share_every_ms = every.as_millis().clamp(0, i64::MAX as u128) as i64;
    }

    /// Replicas per time-sliced GPU (the device plugin's setting), instead of inferring them.
    pub fn set_replicas(&mut self, replicas: Option<u32>) {
        self.replicas = replicas;
    }

    /// Reads Slurm's GPU holdings from the cgroup tree at `root` (usually `/sys/fs/cgroup`);
    /// None reads none.
    pub fn set_cgroup_root(&mut self, root: Option<PathBuf>) {
        self.slurm = root.map(|cgroup_root| SlurmWatch {
            cgroup_root,
            read_at: None,
            held: Vec::new(),
        });
    }

    /// Allocations for the GPUs Slurm jobs hold (read again every [`SLURM_REREAD_MS`]).
    fn slurm_allocations(&mut self, snap: &mut Snapshot, tenants: &mut HashMap<String, Tenant>) {
        let Some(w) = &mut self.slurm else { return };
        if w.read_at
            .is_none_or(|at| snap.ts - at >= SLURM_REREAD_MS || snap.ts < at)
        {
            w.held = crate::slurm::holdings(&w.cgroup_root, &self.procfs);
            w.read_at = Some(snap.ts);
        }
        let gpus: Vec<(u32, &GpuInfo)> = self
            .gpus
            .iter()
            .filter(|g| !g.lost)
            .filter_map(|g| Some((g.minor?, &g.info)))
            .collect();
        crate::slurm::allocate(snap, tenants, &w.held, &gpus);
    }
}

fn inventory(device: Device<'static>, index: u32, calls: &mut DriverCalls) -> anyhow::Result<Gpu> {
    let uuid = device.uuid()?;
    let mut lost = false;
    // The inventory has no absent readings: a name or size the wire would refuse (the whole
    // batch with it) reads as unknown (0 bytes) instead.
    let model = calls
        .read(&uuid, "name", &mut lost, || device.name())
        .filter(|n| is_text(n))
        .unwrap_or_else(|| "unknown".into());
    let memory_total_bytes = calls
        .read(&uuid, "memory", &mut lost, || device.memory_info())
        .map_or(0, |m| inventory_bytes(m.total));
    let pci_bus_id = calls
        .read(&uuid, "pci_info", &mut lost, || device.pci_info())
        .map(|p| p.bus_id)
        .filter(|b| is_name(b));
    let mig_enabled = calls
        .read(&uuid, "mig_mode", &mut lost, || device.mig_mode())
        .is_some_and(|m| m.current == 1);
    let mut migs = Vec::new();
    let placed = if mig_enabled {
        placements(&device)
    } else {
        HashMap::new()
    };
    if mig_enabled {
        let slots = calls
            .read(&uuid, "mig_device_count", &mut lost, || {
                device.mig_device_count()
            })
            .unwrap_or(0);
        for slot in 0..slots {
            let mig = match device.mig_device_by_index(slot) {
                Ok(m) => m,
                Err(NvmlError::NotFound | NvmlError::InvalidArg) => continue,
                Err(e) => return Err(e.into()),
            };
            let (gi_id, ci_id) = instance_ids(&mig)?;
            if gi_id > MAX_MIG_ID || ci_id > MAX_MIG_ID {
                tracing::warn!(gpu_uuid = %uuid, gi_id, ci_id, "a MIG device's ids are past what the wire holds; it is left out of the inventory");
                continue;
            }
            let name = mig.name().ok().filter(|n| is_text(n)).unwrap_or_default();
            // NVML names MIG devices "<GPU name> MIG <profile>", e.g. "… MIG 3g.40gb".
            let profile = name
                .rsplit(" MIG ")
                .next()
                .filter(|p| p.contains('g'))
                .unwrap_or("unknown")
                .to_owned();
            let compute_slices = model::mig::compute_slices(&profile);
            migs.push(Mig {
                info: MigInstanceInfo {
                    gi_id,
                    ci_id,
                    memory_total_bytes: mig.memory_info().map_or(0, |m| inventory_bytes(m.total)),
                    profile,
                    placement_start: placed.get(&gi_id).map(|p| p.0),
                    placement_size: placed.get(&gi_id).map(|p| p.1),
                    compute_slices,
                    uuid: mig.uuid().ok().filter(|u| is_name(u)),
                },
                device: mig,
            });
        }
    }
    let minor = calls.read(&uuid, "minor_number", &mut lost, || device.minor_number());
    Ok(Gpu {
        info: GpuInfo {
            uuid,
            index,
            model,
            memory_total_bytes,
            pci_bus_id,
            mig_enabled,
            sharing: if mig_enabled {
                Sharing::Mig
            } else {
                Sharing::Exclusive
            },
            replicas: 1,
            mig_instances: migs.iter().map(|m| m.info.clone()).collect(),
        },
        device,
        migs,
        lost,
        procs: ProcessReads::default(),
        nvlink_prev: CounterRate::default(),
        pcie_prev: CounterRate::default(),
        energy: energy::EnergyClock::default(),
        minor,
        rare: None,
    })
}

/// XID errors arrive on NVML's event set; a thread waits for them and hands them over.
fn spawn_event_thread(
    nvml: &'static Nvml,
    gpus: &[Gpu],
) -> Option<mpsc::Receiver<(String, u64, UnixMillis)>> {
    use nvml_wrapper::bitmasks::event::EventTypes;
    let mut set = nvml.create_event_set().ok()?;
    // (index, UUID) of every GPU registered, for an event whose device no longer answers.
    let mut registered = Vec::new();
    for g in gpus.iter().filter(|g| !g.info.mig_enabled) {
        let supported = g
            .device
            .supported_event_types()
            .is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
        if !supported {
            tracing::info!(gpu_uuid = %g.info.uuid, "XID events not available on this GPU");
            continue;
        }
        match g
            .device
            .register_events(EventTypes::CRITICAL_XID_ERROR, set)
        {
            Ok(s) => {
                set = s;
                registered.push((g.info.index, g.info.uuid.clone()));
            }
            Err(e) => {
                // NVML released the set: XID collection is off for this run.
                tracing::warn!(gpu_uuid = %g.info.uuid, error = %e.error, "cannot register for XID events; XID errors will not be reported");
                return None;
            }
        }
    }
    if registered.is_empty() {
        return None;
    }
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("nvml-events".into())
        .spawn(move || {
            loop {
                match set.wait(1000) {
                    Ok(ev) => {
                        let code = match ev.event_data {
                            Some(nvml_wrapper::enums::event::XidError::Value(v)) => v,
                            _ => 0,
                        };
                        let Some(uuid) =
                            event_gpu(ev.device.uuid().ok(), ev.device.index().ok(), &registered)
                        else {
                            tracing::warn!(xid = code, "an XID event names a GPU that answers neither its UUID nor its index; dropped");
                            continue;
                        };
                        if tx.send((uuid, code, now_ms())).is_err() {
                            return;
                        }
                    }
                    Err(NvmlError::Timeout) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "NVML event wait failed; XID events stop");
                        return;
                    }
                }
            }
        })
        .ok()?;
    Some(rx)
}

/// The UUID of the GPU an XID event is about. A GPU that has fallen off the bus (XID 79) may
/// no longer answer its UUID: then its index, or the one GPU registered, names it; an event
/// sent with an empty UUID would have the whole batch refused.
fn event_gpu(
    uuid: Option<String>,
    index: Option<u32>,
    registered: &[(u32, String)],
) -> Option<String> {
    if let Some(u) = uuid.filter(|u| !u.is_empty()) {
        return Some(u);
    }
    let by_index = index.and_then(|i| registered.iter().find(|(j, _)| *j == i));
    match (by_index, registered) {
        (Some((_, u)), _) | (None, [(_, u)]) => Some(u.clone()),
        _ => None,
    }
}

/// Pages retired for ECC errors (GPUs before Ampere; later ones remap rows instead).
fn retired_pages(device: &Device<'static>) -> Result<i32, NvmlError> {
    use nvml_wrapper::enum_wrappers::device::RetirementCause;
    let single = device
        .retired_pages(RetirementCause::MultipleSingleBitEccErrors)?
        .len();
    let double = device
        .retired_pages(RetirementCause::DoubleBitEccError)?
        .len();
    Ok(wire_count((single + double) as u64))
}

impl GpuBackend for NvmlBackend {
    fn identity(&self) -> (&str, &str) {
        (&self.cluster, &self.node)
    }

    fn call_costs(&self) -> Vec<(&'static str, crate::CallTime)> {
        self.calls.costs()
    }

    fn time_calls_on_cpu(&mut self, on: bool) {
        self.calls.time_cpu(on);
    }

    fn inventory(&self) -> Vec<GpuInfo> {
        self.gpus
            .iter()
            .filter(|g| !g.lost)
            .map(|g| g.info.clone())
            .collect()
    }

    fn set_assignments(&mut self, a: Assignments) {
        self.assignments = Some(a);
    }

    fn sample(&mut self, ts: UnixMillis) -> anyhow::Result<(Snapshot, Vec<Tenant>)> {
        let mut snap = Snapshot {
            ts,
            ..Snapshot::default()
        };
        let mut tenants: HashMap<String, Tenant> = HashMap::new();
        let mut who = Attribution {
            procfs: &self.procfs,
            first_seen: &mut self.first_seen,
            owners: &mut self.owners,
            tenants: &mut tenants,
        };
        for g in self.gpus.iter_mut().filter(|g| !g.lost) {
            let uuid = g.info.uuid.clone();
            let mut lost = false;
            let mut sample = readings(g, &mut self.calls, &mut lost);
            rare_readings(
                g,
                &mut self.calls,
                &mut lost,
                ts,
                self.rare_every_ms,
                &mut sample,
            );
            energy_reading(g, &mut self.calls, &mut lost, ts, &mut sample);
            if lost {
                tracing::error!(gpu_uuid = %uuid, "GPU has fallen off the bus; no longer sampled");
                g.lost = true;
                snap.events.push(GpuEvent {
                    gpu_uuid: uuid,
                    ts,
                    kind: "gpu_lost".into(),
                    code: 0,
                    message: Some("GPU is lost (NVML_ERROR_GPU_IS_LOST)".into()),
                });
                continue;
            }
            let device = DeviceUse::of(&sample);
            let calls = (&mut self.calls, &mut lost);
            let on = OnGpu {
                device: &g.device,
                uuid: &g.info.uuid,
                mig: g.info.mig_enabled,
            };
            let every = self.share_every_ms;
            processes(
                on,
                &mut g.procs,
                calls,
                (device, every),
                &mut who,
                &mut snap,
            );
            snap.mig.extend(mig_samples(g));
            snap.gpus.push(sample);
        }
        forget_gone(&mut self.first_seen, &snap);
        forget_gone(&mut self.owners, &snap);
        if let Some(a) = &self.assignments {
            refresh_hostnames(&mut self.hostnames, &self.procfs, &snap, &tenants);
            let names = &self.hostnames;
            let hostname = |pid: u32| names.get(&pid).and_then(|(_, n)| n.clone());
            let mut live: Vec<&mut GpuInfo> = self
                .gpus
                .iter_mut()
                .filter(|g| !g.lost)
                .map(|g| &mut g.info)
                .collect();
            crate::allocation::assign(
                &mut snap,
                &mut tenants,
                &mut live,
                (a, &self.node),
                self.replicas,
                &hostname,
            );
        }
        self.slurm_allocations(&mut snap, &mut tenants);
        if let Some(rx) = &self.events {
            while let Ok((gpu_uuid, code, at)) = rx.try_recv() {
                snap.events.push(GpuEvent {
                    gpu_uuid,
                    ts: at,
                    kind: "xid".into(),
                    code: wire_count(code),
                    message: None,
                });
            }
        }
        Ok((snap, tenants.into_values().collect()))
    }
}

/// One GPU's device readings; `lost` is set when the GPU fell off the bus.
fn readings(g: &mut Gpu, m: &mut DriverCalls, lost: &mut bool) -> GpuSample {
    let uuid = g.info.uuid.clone();
    let d = &g.device;
    let mem = m.read(&uuid, "memory", lost, || d.memory_info());
    let util = if g.info.mig_enabled {
        None
    } else {
        m.read(&uuid, "utilization", lost, || d.utilization_rates())
    };
    GpuSample {
        gpu_uuid: uuid.clone(),
        gpu_util: util.as_ref().map(|u| ratio(u.gpu)),
        mem_util: util.as_ref().map(|u| ratio(u.memory)),
        mem_used_bytes: mem.as_ref().map(|m| wire_bytes(m.used)),
        mem_total_bytes: mem.as_ref().map(|m| wire_bytes(m.total)),
        power_w: m
            .read(&uuid, "power", lost, || d.power_usage())
            .map(|mw| mw as f32 / 1000.0),
        temp_c: m
            .read(&uuid, "temperature", lost, || {
                d.temperature(TemperatureSensor::Gpu)
            })
            .map(|t| t as f32),
        sm_clock_mhz: m
            .read(&uuid, "sm_clock", lost, || d.clock_info(Clock::SM))
            .map(wire_count),
        mem_clock_mhz: m
            .read(&uuid, "mem_clock", lost, || d.clock_info(Clock::Memory))
            .map(wire_count),
        throttle_reasons: m
            .read(&uuid, "throttle_reasons", lost, || {
                d.current_throttle_reasons()
            })
            .map(|r| wire_count(r.bits())),
        enc_util: if g.info.mig_enabled {
            None
        } else {
            m.read(&uuid, "encoder", lost, || d.encoder_utilization())
                .map(|u| ratio(u.utilization))
        },
        dec_util: if g.info.mig_enabled {
            None
        } else {
            m.read(&uuid, "decoder", lost, || d.decoder_utilization())
                .map(|u| ratio(u.utilization))
        },
        ..GpuSample::default()
    }
}

/// Fills the rare readings of `sample` ([`Rare`]): read again when `every_ms` has passed since
/// they were (or the clock went back), else as last read.
fn rare_readings(
    g: &mut Gpu,
    m: &mut DriverCalls,
    lost: &mut bool,
    ts: UnixMillis,
    every_ms: i64,
    sample: &mut GpuSample,
) {
    let due = g.rare.is_none_or(|r| ts - r.at >= every_ms || ts < r.at);
    if due {
        let uuid = g.info.uuid.clone();
        let d = &g.device;
        let ecc = |m: &mut DriverCalls, lost: &mut bool, kind| {
            m.read(&uuid, "ecc", lost, || {
                d.total_ecc_errors(kind, EccCounter::Volatile)
            })
            .map(wire_count)
        };
        let rare = Rare {
            at: ts,
            ecc_corrected: ecc(m, lost, MemoryError::Corrected),
            ecc_uncorrected: ecc(m, lost, MemoryError::Uncorrected),
            retired_pages: m.read(&uuid, "retired_pages", lost, || retired_pages(d)),
            remapped_rows: m.read(&uuid, "remapped_rows", lost, || remapped_rows(d)),
            nvlink: m
                .read(&uuid, "nvlink", lost, || g.nvlink_prev.read(d, NVLINK_KIB))
                .flatten(),
        };
        g.rare = Some(rare);
        // PCIe traffic: the mean rate since the last read from the byte counters where the
        // driver keeps them; else (and at the first read, with no rate yet) NVML's 20-ms window.
        let counted = m
            .read(&uuid, "pcie_bytes", lost, || {
                g.pcie_prev.read(d, PCIE_BYTES)
            })
            .flatten();
        let window = |m: &mut DriverCalls, lost: &mut bool, field, counter| {
            m.read(&uuid, field, lost, || d.pcie_throughput(counter))
                .map(|kb| i64::from(kb) * 1024)
        };
        (sample.pcie_tx_bytes_per_s, sample.pcie_rx_bytes_per_s) = match counted {
            Some((tx, rx)) => (Some(tx), Some(rx)),
            None => (
                window(m, lost, "pcie_tx", PcieUtilCounter::Send),
                window(m, lost, "pcie_rx", PcieUtilCounter::Receive),
            ),
        };
    }
    let Some(r) = g.rare else { return };
    sample.ecc_corrected = r.ecc_corrected;
    sample.ecc_uncorrected = r.ecc_uncorrected;
    sample.retired_pages = r.retired_pages;
    sample.remapped_rows = r.remapped_rows;
    if let Some((tx, rx)) = r.nvlink {
        sample.nvlink_tx_bytes_per_s = Some(tx);
        sample.nvlink_rx_bytes_per_s = Some(rx);
    }
}

/// Reads the energy counter into `sample` when its clock (`nvml/energy.rs`) says so.
fn energy_reading(
    g: &mut Gpu,
    m: &mut DriverCalls,
    lost: &mut bool,
    ts: UnixMillis,
    sample: &mut GpuSample,
) {
    if g.energy.due(ts, sample.power_w.is_some()) {
        let d = &g.device;
        let (mj, took) = m.read_timed(&g.info.uuid, "energy", lost, || {
            d.total_energy_consumption()
        });
        g.energy.read(ts, took);
        sample.energy_j = mj.map(|mj| mj as f64 / 1000.0);
    }
}

/// One GPU's MIG instances' memory.
fn mig_samples(g: &Gpu) -> Vec<MigSample> {
    let uuid = &g.info.uuid;
    let mut out = Vec::new();
    for mig in &g.migs {
        let mem = mig.device.memory_info().ok();
        out.push(MigSample {
            gpu_uuid: uuid.clone(),
            gi_id: mig.info.gi_id,
            ci_id: mig.info.ci_id,
            mem_used_bytes: mem.as_ref().map(|m| wire_bytes(m.used)),
            mem_total_bytes: mem.as_ref().map(|m| wire_bytes(m.total)),
            ..MigSample::default()
        });
    }
    out
}

/// Forgets what was kept of processes no GPU lists any more (first sightings, owners): a pid the
/// kernel hands to a new process is a new process, and an agent that cannot read /proc (not in
/// the host PID namespace) would otherwise keep every pid it ever saw.
fn forget_gone<T>(by_pid: &mut HashMap<u32, T>, snap: &Snapshot) {
    if by_pid.is_empty() {
        return;
    }
    let live: std::collections::HashSet<u32> = snap.processes.iter().map(|p| p.pid).collect();
    by_pid.retain(|pid, _| live.contains(pid));
}

/// Reads each pod process's `HOSTNAME` once per process life (pid and start time), not once
/// per cycle, and forgets processes that are gone.
fn refresh_hostnames(
    hostnames: &mut HashMap<u32, (i64, Option<String>)>,
    procfs: &ProcFs,
    snap: &Snapshot,
    tenants: &HashMap<String, Tenant>,
) {
    // One read of /proc/<pid>/environ per pod process's life, not one per cycle.
    let mut seen = std::collections::HashSet::new();
    for p in &snap.processes {
        let in_pod = p
            .tenant
            .as_ref()
            .and_then(|k| tenants.get(k))
            .is_some_and(|t| t.pod_uid.is_some());
        if !in_pod || !seen.insert(p.pid) {
            continue;
        }
        let known = hostnames.get(&p.pid);
        if known.is_none_or(|(start, _)| *start != p.start_time) {
            let name = procfs
                .environ(p.pid, "HOSTNAME")
                .map(crate::kubelet::kept_hostname);
            hostnames.insert(p.pid, (p.start_time, name));
        }
    }
    hostnames.retain(|pid, _| seen.contains(pid));
}

#[cfg(test)]
mod tests {
    use super::event_gpu;

    /// A process first seen at 10 s that exits, and a new one given its pid at 20 s: the new
    /// one is first seen at 20 s, and a gone pid is not kept.
    #[test]
    fn first_sightings_last_while_their_process_runs() {
        use super::{HashMap, Snapshot, forget_gone};
        let running = |pids: &[u32]| Snapshot {
            processes: pids
                .iter()
                .map(|&pid| model::ProcessSample {
                    pid,
                    ..Default::default()
                })
                .collect(),
            ..Snapshot::default()
        };
        let mut first_seen = HashMap::from([(7, 10_000), (8, 10_000)]);
        forget_gone(&mut first_seen, &running(&[8]));
        assert_eq!(first_seen, HashMap::from([(8, 10_000)]));
        forget_gone(&mut first_seen, &running(&[]));
        assert!(first_seen.is_empty());
        // The sampler's own step for a pid /proc cannot date.
        assert_eq!(*first_seen.entry(8).or_insert(20_000), 20_000);
    }

    #[test]
    fn an_xid_event_of_a_lost_gpu_still_names_it() {
        let two = [(0, "GPU-a".to_owned()), (3, "GPU-d".to_owned())];
        assert_eq!(
            event_gpu(Some("GPU-x".into()), None, &two).as_deref(),
            Some("GPU-x")
        );
        // Fallen off the bus: no UUID, but its index.
        assert_eq!(event_gpu(None, Some(3), &two).as_deref(), Some("GPU-d"));
        assert_eq!(
            event_gpu(Some(String::new()), Some(0), &two).as_deref(),
            Some("GPU-a")
        );
        // Neither, with two GPUs registered: no guess.
        assert_eq!(event_gpu(None, None, &two), None);
        assert_eq!(event_gpu(None, Some(7), &two), None);
        // Neither, with one GPU registered: it is that one.
        assert_eq!(event_gpu(None, None, &two[..1]).as_deref(), Some("GPU-a"));
    }
}
