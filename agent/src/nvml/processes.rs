//! One GPU's processes in a cycle: NVML's compute and MPS lists, each process's share of the
//! GPU (read or derived as `process_shares` decides), and its tenant from `/proc`.

use std::collections::{BTreeSet, HashMap};

use model::wire::v1::Snapshot;
use model::{ProcessKind, ProcessSample, Tenant};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

use nvml_wrapper::Device;

use crate::attribution::{Owner, ProcFs};
use crate::driver_calls::DriverCalls;
use crate::driver_lists::{DriverLists, List};
use crate::driver_values::{ratio, wire_bytes};
use crate::process_shares::{DeviceUse, Plan, Share, ShareClock};
use crate::shipper::now_ms;

/// What attributes a process to a tenant: `/proc`, the first sighting of processes whose start
/// time cannot be read, what `/proc` said of each process's owner, and the tenants found so far
/// this cycle.
pub(super) struct Attribution<'a> {
    pub procfs: &'a ProcFs,
    pub first_seen: &'a mut HashMap<u32, i64>,
    pub owners: &'a mut HashMap<u32, Owned>,
    pub tenants: &'a mut HashMap<String, Tenant>,
}

/// What `/proc` said of one process's owner — its cgroup's owner and its real uid — and when,
/// for the process that started at `start` (a pid used again is another process).
#[derive(Debug, Clone)]
pub(super) struct Owned {
    start: i64,
    read_at: i64,
    owner: Owner,
    uid: Option<u32>,
}

/// How long what `/proc` said of a process's owner is taken as still true: a process's cgroup
/// and uid are set as it starts, and reading both every cycle was two of the three files a
/// process costs the agent each second.
const OWNER_REREAD_MS: i64 = 60_000;

impl Attribution<'_> {
    /// The tenant of process `pid`, which started at `start` (where `/proc` tells), at `ts`.
    fn tenant(&mut self, pid: u32, start: Option<i64>, ts: i64) -> Option<Tenant> {
        let fresh = |o: &&Owned| {
            Some(o.start) == start && ts >= o.read_at && ts - o.read_at < OWNER_REREAD_MS
        };
        let (owner, uid) = match self.owners.get(&pid).filter(fresh) {
            Some(o) => (o.owner.clone(), o.uid),
            None => {
                let owner = self.procfs.owner(pid)?;
                let uid = self.procfs.uid(pid);
                if let Some(start) = start {
                    let owned = Owned {
                        start,
                        read_at: ts,
                        owner: owner.clone(),
                        uid,
                    };
                    self.owners.insert(pid, owned);
                }
                (owner, uid)
            }
        };
        self.procfs.tenant_of(pid, owner, uid)
    }
}

/// One GPU as its processes are read: its device handle, UUID and whether it is in MIG mode.
pub(super) struct OnGpu<'a> {
    pub device: &'a Device<'static>,
    pub uuid: &'a str,
    pub mig: bool,
}

/// What one GPU keeps between cycles for its processes: the buffers NVML's lists are read into,
/// when its per-process utilization was last read and what it said, and the timestamp (µs) of
/// the newest per-process sample seen.
#[derive(Default)]
pub(super) struct ProcessReads {
    lists: DriverLists,
    shares: ShareClock,
    last_util_ts: u64,
}

/// One GPU's compute and MPS processes, with their shares and tenants. `calls`: the driver's
/// calls and whether the GPU was lost; `device`: the device's own use this cycle and how often
/// a shared GPU's per-process utilization is read (ms).
pub(super) fn processes(
    g: OnGpu,
    st: &mut ProcessReads,
    (m, lost): (&mut DriverCalls, &mut bool),
    (device, every_ms): (DeviceUse, i64),
    who: &mut Attribution,
    snap: &mut Snapshot,
) {
    let uuid = g.uuid.to_owned();
    let ts = snap.ts;
    let lists = {
        let (d, l) = (g.device, &mut st.lists);
        [
            (
                ProcessKind::Compute,
                m.read(&uuid, "compute_processes", lost, || {
                    l.processes(d, List::Compute)
                }),
            ),
            (
                ProcessKind::Mps,
                m.read(&uuid, "mps_processes", lost, || l.processes(d, List::Mps)),
            ),
        ]
    };
    let pids: BTreeSet<u32> = lists
        .iter()
        .flat_map(|(_, l)| l.iter().flatten().map(|p| p.pid))
        .collect();
    // None: unknown (MIG, no such call, a failed read). Known, a process without a share ran
    // no kernel: a measured 0.
    let shares = shares((g, st), (m, lost), &pids, device, every_ms, ts);
    let known = shares.is_some();
    let shares = shares.unwrap_or_default();
    for (kind, list) in lists {
        for p in list.unwrap_or_default() {
            let started = who.procfs.start_time_ms(p.pid);
            let tenant = who.tenant(p.pid, started, ts);
            let start_time = started.unwrap_or_else(|| *who.first_seen.entry(p.pid).or_insert(ts));
            let share = shares.get(&p.pid).copied();
            snap.processes.push(ProcessSample {
                gpu_uuid: uuid.clone(),
                pid: p.pid,
                start_time,
                kind,
                gi_id: p.gpu_instance_id,
                ci_id: p.compute_instance_id,
                tenant: tenant.as_ref().map(|t| t.key.clone()),
                // Under MIG NVML has no per-process utilization: absent, not 0.
                sm_util: known.then(|| share.map_or(0.0, |s| s.sm)),
                mem_util: known.then(|| share.map_or(0.0, |s| s.mem)),
                enc_util: share.and_then(|s| s.enc),
                dec_util: share.and_then(|s| s.dec),
                mem_used_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(wire_bytes(b)),
                    UsedGpuMemory::Unavailable => None,
                },
            });
            if let Some(t) = tenant {
                who.tenants.entry(t.key.clone()).or_insert(t);
            }
        }
    }
}

/// The shares of the `pids` on `g` this cycle at `ts`, by pid: read from NVML (its samples
/// since the newest one seen) or derived, as the GPU's [`crate::process_shares::ShareClock`]
/// plans; None where they are unknown.
fn shares(
    (g, st): (OnGpu, &mut ProcessReads),
    (m, lost): (&mut DriverCalls, &mut bool),
    pids: &BTreeSet<u32>,
    device: DeviceUse,
    every_ms: i64,
    ts: i64,
) -> Option<HashMap<u32, Share>> {
    if g.mig {
        return None;
    }
    match st.shares.plan(ts, pids, device, every_ms) {
        Plan::Unknown => return None,
        Plan::Derive => return Some(st.shares.derive(pids, device)),
        Plan::Read => {}
    }
    // The mean since the newest sample seen, but over at most `every` (at least a second): a
    // GPU that had one process for an hour is not averaged over that hour when a second comes.
    // NVML stamps samples with the wall clock now, not the cycle's slot.
    let window_start_us = u64::try_from(now_ms() - every_ms.max(1_000)).unwrap_or(0) * 1_000;
    let since = st.last_util_ts.max(window_start_us);
    let started = m.start();
    let stats = st.lists.utilization_since(g.device, since);
    m.count("process_utilization", started);
    match stats {
        Ok(samples) => {
            let mut by_pid = HashMap::new();
            for s in samples {
                st.last_util_ts = st.last_util_ts.max(s.timeStamp);
                let share = Share {
                    sm: ratio(s.smUtil),
                    mem: ratio(s.memUtil),
                    enc: Some(ratio(s.encUtil)),
                    dec: Some(ratio(s.decUtil)),
                };
                by_pid.insert(s.pid, share);
            }
            Some(st.shares.answer(ts, pids, device, by_pid))
        }
        Err(e) => {
            if matches!(e, NvmlError::NotSupported | NvmlError::FunctionNotFound) {
                st.shares.unsupported();
            }
            m.settle::<()>(g.uuid, "process_utilization", lost, Err(e));
            None
        }
    }
}
