//! A simulated fleet built from a scenario: stable GPU UUIDs, MIG placements, tenants, and
//! the snapshots and batches their agents would send at any instant.
//!
//! Contention is modelled as processor sharing: tenants on one time-sliced or MPS GPU whose
//! combined demand exceeds the device each get a proportional share, so a victim's achieved
//! rate drops exactly while its aggressor is busy. MIG instances are isolated from each other.

use std::collections::BTreeMap;

use model::inventory::Sharing;
use model::profiling::{PerRatio, Ratio};
use model::wire::v1::{Batch, Snapshot, VERSION};
use model::{
    Allocation, GpuEvent, GpuInfo, GpuSample, MigInstanceInfo, MigSample, ProcessKind,
    ProcessSample, Tenant, TenantKind, UnixMillis,
};

use crate::catalogue::{GpuModel, gib};
use crate::noise::{hash_str, mix, uniform};
use crate::scenario::{DeviceRef, NodeSpec, Scenario, TenantSpec};
use crate::workload::Demand;

/// A scenario made concrete.
#[derive(Debug, Clone)]
pub struct Fleet {
    pub scenario: Scenario,
    pub nodes: Vec<SimNode>,
}

/// One simulated node.
#[derive(Debug, Clone)]
pub struct SimNode {
    pub spec: NodeSpec,
    pub model: &'static GpuModel,
    pub gpus: Vec<GpuInfo>,
    /// Indexes into `scenario.tenants` of the tenants on this node.
    pub tenants: Vec<usize>,
}

/// The driver's own memory use on a GPU with at least one context.
const CONTEXT_OVERHEAD: i64 = 512 * 1024 * 1024;

impl Fleet {
    pub fn new(scenario: Scenario) -> Fleet {
        let nodes = scenario
            .nodes
            .iter()
            .map(|spec| {
                let model = spec.gpu_model();
                let gpus = (0..spec.gpus)
                    .map(|i| gpu_info(&scenario, spec, model, i))
                    .collect();
                let tenants = scenario
                    .tenants
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.node == spec.name)
                    .map(|(i, _)| i)
                    .collect();
                SimNode {
                    spec: spec.clone(),
                    model,
                    gpus,
                    tenants,
                }
            })
            .collect();
        Fleet { scenario, nodes }
    }

    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.spec.name == name)
    }

    pub fn gpu_count(&self) -> usize {
        self.nodes.iter().map(|n| n.gpus.len()).sum()
    }

    /// The tenant key a scenario tenant has at time `t` (Slurm tenants change job ids).
    pub fn tenant_record(&self, tenant: usize, t_ms: UnixMillis) -> Tenant {
        let spec = &self.scenario.tenants[tenant];
        let seed = self.scenario.seed;
        let stream = hash_str(&spec.name);
        match spec.kind.as_str() {
            "pod" => {
                let generation = spec
                    .replaced_hours
                    .map_or(0, |h| t_ms.div_euclid(((h * 3_600_000.0) as i64).max(1)));
                let uid = fake_uuid(seed, stream, generation);
                let container = spec.container.clone().unwrap_or_else(|| "main".into());
                Tenant {
                    key: Tenant::pod_key(&uid, &container),
                    kind: TenantKind::Pod,
                    namespace: spec.namespace.clone(),
                    pod: Some(spec.name.clone()),
                    container: Some(container),
                    pod_uid: Some(uid),
                    job_id: None,
                    user: None,
                    account: None,
                    uid: None,
                }
            }
            "slurm_job" => {
                let job_len = (spec.job_hours * 3_600_000.0) as i64;
                let job_no = t_ms.div_euclid(job_len.max(1));
                let job_id =
                    (100_000 + (mix(stream) % 800_000) as i64 + job_no % 100_000).to_string();
                Tenant {
                    key: Tenant::slurm_key(&job_id),
                    kind: TenantKind::SlurmJob,
                    namespace: None,
                    pod: None,
                    container: None,
                    pod_uid: None,
                    job_id: Some(job_id),
                    user: Some(spec.name.clone()),
                    account: spec.account.clone(),
                    uid: Some(spec.uid.unwrap_or(2000 + (stream % 1000) as u32)),
                }
            }
            _ => {
                let uid = spec.uid.unwrap_or(1000 + (stream % 1000) as u32);
                Tenant::host_user(uid, Some(spec.name.clone()))
            }
        }
    }

    fn demand(&self, tenant: usize, t_ms: UnixMillis) -> Demand {
        let spec = &self.scenario.tenants[tenant];
        spec.pattern.demand(
            self.scenario.seed,
            hash_str(&spec.name),
            t_ms.div_euclid(1000) + (spec.shift_hours * 3600.0) as i64,
            spec.intensity,
            gib(spec.mem_gib),
        )
    }

    /// Everything node `node`'s agent would see in one sampling cycle at `ts`, plus the
    /// tenants the snapshot refers to.
    pub fn snapshot(&self, node: usize, ts: UnixMillis) -> (Snapshot, Vec<Tenant>) {
        let sim = &self.nodes[node];
        let mut snap = Snapshot {
            ts,
            ..Snapshot::default()
        };
        let mut tenants: BTreeMap<String, Tenant> = BTreeMap::new();
        let per_gpu = self.occupants(sim, ts);
        for (info, occupants) in sim.gpus.iter().zip(&per_gpu) {
            let gstream = hash_str(&info.uuid);
            let total_demand: f64 = occupants
                .iter()
                .filter(|o| o.demand.running)
                .map(|o| o.demand.compute)
                .sum();
            // Processor sharing on time-sliced and MPS GPUs; MIG instances are isolated.
            let scale = if sim.spec.sharing != Sharing::Mig && total_demand > 1.0 {
                1.0 / total_demand
            } else {
                1.0
            };
            let mut load = GpuLoad::default();
            for o in occupants {
                let tenant = self.tenant_record(o.tenant, ts);
                let (allocation, process) =
                    self.occupy(sim, info, o, &tenant, scale, ts, &mut load);
                if allocation.is_some() || process.is_some() {
                    tenants.entry(tenant.key.clone()).or_insert(tenant);
                }
                snap.allocations.extend(allocation);
                snap.processes.extend(process);
            }
            let jitter = |k: i64| uniform(self.scenario.seed, gstream, ts / 1000 * 13 + k);
            snap.gpus.push(gpu_sample(sim, info, &load, ts, jitter));
            snap.mig.extend(mig_samples(sim.spec.dcgm, info, &load));
            snap.events.extend(self.xid_event(sim, info, gstream, ts));
        }
        (snap, tenants.into_values().collect())
    }

    /// Who is on which GPU of `sim`, and what they want at `ts`.
    fn occupants<'a>(&'a self, sim: &SimNode, ts: UnixMillis) -> Vec<Vec<Occupant<'a>>> {
        let mut per_gpu: Vec<Vec<Occupant>> = (0..sim.gpus.len()).map(|_| Vec::new()).collect();
        for &t in &sim.tenants {
            let tspec = &self.scenario.tenants[t];
            let demand = self.demand(t, ts);
            for device in tspec.device_refs() {
                let gpu = match device {
                    DeviceRef::Gpu(g)
                    | DeviceRef::Mig { gpu: g, .. }
                    | DeviceRef::Replica { gpu: g, .. } => g,
                };
                per_gpu[gpu as usize].push(Occupant {
                    tenant: t,
                    spec: tspec,
                    device,
                    demand,
                });
            }
        }
        per_gpu
    }

    /// One occupant of a GPU: its allocation (when it holds one), its process (when it runs),
    /// and its share of the GPU's load added to `load`.
    #[allow(clippy::too_many_arguments)]
    fn occupy(
        &self,
        sim: &SimNode,
        info: &GpuInfo,
        o: &Occupant,
        tenant: &Tenant,
        scale: f64,
        ts: UnixMillis,
        load: &mut GpuLoad,
    ) -> (Option<Allocation>, Option<ProcessSample>) {
        let spec = &sim.spec;
        let d = o.demand;
        let (gi_id, ci_id, slice_share) = match o.device {
            DeviceRef::Mig { instance, .. } => {
                let mi = &info.mig_instances[instance as usize];
                (
                    Some(mi.gi_id),
                    Some(mi.ci_id),
                    f64::from(mi.compute_slices.unwrap_or(1)) / 7.0,
                )
            }
            _ => (None, None, 1.0),
        };
        let allocation = (d.allocated && o.spec.kind != "host_user").then(|| {
            let share = match o.device {
                // A per-GPU mechanism's grant: the share the agent reads from its objects.
                DeviceRef::Gpu(_) => o
                    .spec
                    .grant
                    .as_ref()
                    .map_or(1.0, |g| g.share(sim.model.memory_gib)),
                DeviceRef::Mig { .. } => slice_share,
                DeviceRef::Replica { .. } => 1.0 / f64::from(spec.replicas),
            };
            Allocation {
                gpu_uuid: info.uuid.clone(),
                tenant: tenant.key.clone(),
                gi_id,
                ci_id,
                replica: match o.device {
                    DeviceRef::Replica { replica, .. } => Some(replica),
                    _ => None,
                },
                share: share as f32,
            }
        });
        if !d.running {
            return (allocation, None);
        }
        let achieved = d.compute * scale;
        load.any_context = true;
        load.mem_used += d.mem_bytes;
        if let Some(gi) = gi_id {
            let e = load.mig.entry(gi).or_insert((0.0, 0.0, 0));
            e.0 += achieved * d.sm_efficiency;
            e.1 += achieved * d.sm_efficiency * d.tensor_share;
            e.2 += d.mem_bytes;
            load.sm += achieved * d.sm_efficiency * slice_share;
            load.tensor += achieved * d.sm_efficiency * d.tensor_share * slice_share;
            load.busy = load.busy.max(achieved);
        } else {
            load.busy += achieved;
            load.sm += achieved * d.sm_efficiency;
            load.tensor += achieved * d.sm_efficiency * d.tensor_share;
        }
        let pid_hash = mix(hash_str(&o.spec.name) ^ mix(d.session as u64) ^ u64::from(info.index));
        // NVML reports no per-process utilization under MIG.
        let whole = gi_id.is_none();
        let process = ProcessSample {
            gpu_uuid: info.uuid.clone(),
            pid: 1000 + (pid_hash % 4_000_000) as u32,
            start_time: if d.session_start > 0 {
                d.session_start * 1000
            } else {
                ts.min(self.epoch_start(o.tenant))
            },
            kind: if spec.sharing == Sharing::Mps {
                ProcessKind::Mps
            } else {
                ProcessKind::Compute
            },
            gi_id,
            ci_id,
            tenant: Some(tenant.key.clone()),
            sm_util: whole.then(|| round3(achieved.min(1.0))),
            mem_util: whole.then(|| round3((achieved * 0.4).min(1.0))),
            enc_util: whole.then_some(0.0),
            dec_util: whole.then_some(0.0),
            mem_used_bytes: Some(d.mem_bytes),
        };
        (allocation, Some(process))
    }

    /// XID errors: a Poisson-ish draw per GPU per minute.
    fn xid_event(
        &self,
        sim: &SimNode,
        info: &GpuInfo,
        gstream: u64,
        ts: UnixMillis,
    ) -> Option<GpuEvent> {
        let per_day = sim.spec.xid_per_day;
        if per_day <= 0.0 {
            return None;
        }
        let minute = ts.div_euclid(60_000);
        let first_sample_of_minute =
            ts.rem_euclid(60_000) < i64::from(self.scenario.interval_ms().max(1));
        (first_sample_of_minute
            && uniform(self.scenario.seed, gstream ^ 0x71d, minute) < per_day / 1440.0)
            .then(|| GpuEvent {
                gpu_uuid: info.uuid.clone(),
                ts,
                kind: "xid".into(),
                code: 79,
                message: Some("GPU has fallen off the bus".into()),
            })
    }

    /// A process without sessions started a week before the epoch of its scenario.
    fn epoch_start(&self, tenant: usize) -> UnixMillis {
        let stream = hash_str(&self.scenario.tenants[tenant].name);
        1_700_000_000_000 + (stream % 86_400_000) as i64
    }

    /// A wire batch for `node` covering the given instants.
    pub fn batch(
        &self,
        node: usize,
        agent_id: &str,
        seq: u64,
        instants: &[UnixMillis],
        interval_ms: u32,
    ) -> Batch {
        let sim = &self.nodes[node];
        let mut tenants: BTreeMap<String, Tenant> = BTreeMap::new();
        let snapshots = instants
            .iter()
            .map(|&ts| {
                let (snap, ts_tenants) = self.snapshot(node, ts);
                for t in ts_tenants {
                    tenants.entry(t.key.clone()).or_insert(t);
                }
                snap
            })
            .collect();
        Batch {
            version: VERSION,
            cluster: self.scenario.cluster.clone(),
            node: sim.spec.name.clone(),
            agent_id: agent_id.to_owned(),
            seq,
            agent_version: Some(format!("gpulens-simulator/{}", env!("CARGO_PKG_VERSION"))),
            interval_ms,
            inventory: Some(sim.gpus.clone()),
            tenants: tenants.into_values().collect(),
            snapshots,
        }
    }
}

fn gpu_info(scenario: &Scenario, spec: &NodeSpec, model: &'static GpuModel, index: u32) -> GpuInfo {
    let stream = hash_str(&spec.name);
    let uuid = format!(
        "GPU-{}",
        fake_uuid(
            scenario.seed ^ hash_str(&scenario.cluster),
            stream,
            i64::from(index) + 1
        )
    );
    let mut mig_instances = Vec::new();
    if spec.sharing == Sharing::Mig {
        // Place instances largest first at the lowest legal memory-slice start, as
        // nvidia-smi does; gi ids follow NVML's habit of numbering by profile.
        let mut order: Vec<usize> = (0..spec.mig_layout.len()).collect();
        order.sort_by_key(|&i| {
            std::cmp::Reverse(
                model
                    .profile(&spec.mig_layout[i])
                    .map_or(0, |p| p.memory_slices),
            )
        });
        let mut used = [false; 8];
        let mut placed = vec![(0u32, 0u32); spec.mig_layout.len()];
        for i in order {
            let p = model.profile(&spec.mig_layout[i]).expect("validated");
            let size = p.memory_slices.max(1) as usize;
            let start = (0..=8 - size)
                .step_by(size)
                .find(|&s| used[s..s + size].iter().all(|u| !u))
                .unwrap_or(0);
            used[start..start + size].iter_mut().for_each(|u| *u = true);
            placed[i] = (start as u32, size as u32);
        }
        for (i, name) in spec.mig_layout.iter().enumerate() {
            let p = model.profile(name).expect("validated");
            let gi_id = match p.compute_slices {
                7 => 0,
                4 => 5,
                3 => 1 + placed[i].0 / 4,
                2 => 3 + placed[i].0 / 2,
                _ => 7 + placed[i].0,
            };
            mig_instances.push(MigInstanceInfo {
                gi_id,
                ci_id: 0,
                profile: p.name.to_owned(),
                placement_start: Some(placed[i].0),
                placement_size: Some(placed[i].1),
                memory_total_bytes: gib(p.memory_gib),
                compute_slices: Some(p.compute_slices),
                uuid: Some(format!(
                    "MIG-{}",
                    fake_uuid(scenario.seed, stream ^ u64::from(index), i as i64 + 100)
                )),
            });
        }
    }
    GpuInfo {
        uuid,
        index,
        model: model.product.to_owned(),
        memory_total_bytes: model.memory_bytes(),
        pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + index * 0x10)),
        mig_enabled: spec.sharing == Sharing::Mig,
        sharing: spec.sharing,
        replicas: if spec.sharing.by_time() {
            spec.replicas
        } else {
            1
        },
        mig_instances,
    }
}

/// A UUID-shaped identifier derived from the seed, so runs are reproducible.
fn fake_uuid(seed: u64, stream: u64, n: i64) -> String {
    let a = mix(seed ^ mix(stream) ^ n as u64);
    let b = mix(a ^ 0xdead_beef);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// How often the agent reads PCIe throughput (its `--rare-every`, 30 s by default).
const PCIE_EVERY_MS: i64 = 30_000;

/// A throughput in bytes per second at NVML's resolution: it reports KB/s.
fn kb_per_s(bytes_per_s: f64) -> i64 {
    (bytes_per_s / 1024.0) as i64 * 1024
}

fn round3(v: f64) -> f32 {
    ((v * 1000.0).round() / 1000.0) as f32
}

fn round1(v: f64) -> f32 {
    ((v * 10.0).round() / 10.0) as f32
}

/// A tenant on one GPU: which device it holds there and what it wants.
struct Occupant<'a> {
    tenant: usize,
    spec: &'a TenantSpec,
    device: DeviceRef,
    demand: Demand,
}

/// What a GPU's running occupants add up to in one sample.
#[derive(Default)]
struct GpuLoad {
    busy: f64,
    sm: f64,
    tensor: f64,
    mem_used: i64,
    any_context: bool,
    /// Per GPU instance: SM, tensor and memory.
    mig: BTreeMap<u32, (f64, f64, i64)>,
}

/// The GPU's own readings under `load`.
fn gpu_sample(
    sim: &SimNode,
    info: &GpuInfo,
    load: &GpuLoad,
    ts: i64,
    jitter: impl Fn(i64) -> f64,
) -> GpuSample {
    let pcie_read = ts.rem_euclid(PCIE_EVERY_MS) < 1000;
    let model = sim.model;
    let dcgm = sim.spec.dcgm;
    let overhead = if load.any_context {
        CONTEXT_OVERHEAD
    } else {
        0
    };
    let busy = load.busy.min(1.0);
    let sm = load.sm.min(1.0);
    let tensor = load.tensor;
    let mem_total = info.memory_total_bytes;
    let mem_used = (load.mem_used + overhead).min(mem_total);
    let util = 0.35 * busy + 0.65 * sm;
    let power = model.idle_power_w
        + (model.max_power_w - model.idle_power_w) * util * (0.95 + 0.05 * jitter(1));
    let power_capped = power > model.max_power_w * 0.97;
    let mig = sim.spec.sharing == Sharing::Mig;
    let mut g = GpuSample {
        gpu_uuid: info.uuid.clone(),
        gpu_util: (!mig).then(|| round3(busy)),
        mem_util: (!mig).then(|| round3(busy * 0.45)),
        mem_used_bytes: Some(mem_used),
        mem_total_bytes: Some(mem_total),
        power_w: Some(round1(power)),
        // No energy counter: a snapshot is a function of its instant, and a counter is the
        // integral of every power reading before it. The collector integrates power instead
        // (docs/cost.md, "Energy").
        energy_j: None,
        temp_c: Some(round1(28.0 + 45.0 * util + 2.0 * jitter(2))),
        sm_clock_mhz: Some(if busy > 0.0 {
            model.max_sm_clock_mhz - if power_capped { 200 } else { 0 }
        } else {
            model.idle_sm_clock_mhz
        }),
        mem_clock_mhz: Some(model.mem_clock_mhz),
        throttle_reasons: Some(if power_capped {
            0x4
        } else if busy == 0.0 {
            0x1
        } else {
            0
        }),
        // As the agent reports it: read on its slower clock (every 30 s; NVML watches the
        // link for 20 ms per call) and only in the sample that read it, in NVML's KB/s.
        pcie_rx_bytes_per_s: pcie_read.then(|| kb_per_s(busy * 2.0e9 * jitter(3))),
        pcie_tx_bytes_per_s: pcie_read.then(|| kb_per_s(busy * 0.5e9 * jitter(4))),
        nvlink_rx_bytes_per_s: None,
        nvlink_tx_bytes_per_s: None,
        ecc_corrected: Some(0),
        ecc_uncorrected: Some(0),
        retired_pages: None,
        remapped_rows: Some(0),
        enc_util: (!mig).then_some(0.0),
        dec_util: (!mig).then_some(0.0),
        ..GpuSample::default()
    };
    ratios(dcgm, sm, tensor, busy).fill_gpu(&mut g);
    g
}

/// What a dcgm-exporter would report of the profiling ratios gpulens knows, given the SM,
/// tensor and engine activity simulated; nothing without one (and nothing for a ratio this
/// simulator does not model: absent, as from an exporter that does not export it).
fn ratios(dcgm: bool, sm: f64, tensor: f64, busy: f64) -> PerRatio<Option<f32>> {
    let mut r = PerRatio::default();
    if dcgm {
        for (ratio, v) in [
            (Ratio::SmActive, sm),
            (Ratio::SmOccupancy, sm * 0.55),
            (Ratio::DramActive, sm * 0.5),
            (Ratio::TensorActive, tensor),
            (Ratio::GrEngineActive, busy),
        ] {
            *r.get_mut(ratio) = Some(round3(v));
        }
    }
    r
}

/// Each MIG instance's readings under `load`.
fn mig_samples<'a>(
    dcgm: bool,
    info: &'a GpuInfo,
    load: &'a GpuLoad,
) -> impl Iterator<Item = MigSample> + 'a {
    info.mig_instances.iter().map(move |mi| {
        let (sm_i, tensor_i, mem_i) = load.mig.get(&mi.gi_id).copied().unwrap_or_default();
        let sm_i = sm_i.min(1.0);
        let mem = if mem_i > 0 {
            mem_i + CONTEXT_OVERHEAD / 4
        } else {
            0
        };
        let mut m = MigSample {
            gpu_uuid: info.uuid.clone(),
            gi_id: mi.gi_id,
            ci_id: mi.ci_id,
            mem_used_bytes: Some(mem.min(mi.memory_total_bytes)),
            mem_total_bytes: Some(mi.memory_total_bytes),
            ..MigSample::default()
        };
        let engine = if sm_i > 0.0 { 1.0 } else { 0.0 };
        ratios(dcgm, sm_i, tensor_i.min(1.0), engine).fill_mig(&mut m);
        m
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::wire::v1::Limits;

    const SCENARIO: &str = r#"
name = "unit"
cluster = "test"
seed = 3
[[nodes]]
name = "mig-node"
model = "H100-80GB"
gpus = 1
sharing = "mig"
mig_layout = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
dcgm = true
[[nodes]]
name = "ts-node"
model = "A100-80GB"
gpus = 1
sharing = "time_slicing"
replicas = 4
[[tenants]]
name = "trainer"
kind = "pod"
namespace = "ml"
node = "mig-node"
devices = ["0/mig/0"]
pattern = "steady_training"
mem_gib = 30
[[tenants]]
name = "victim"
kind = "pod"
namespace = "web"
node = "ts-node"
devices = ["0::0"]
pattern = "steady_training"
mem_gib = 10
truth = { victim_of = "aggressor" }
[[tenants]]
name = "aggressor"
kind = "pod"
namespace = "batch"
node = "ts-node"
devices = ["0::1"]
pattern = "bursty_batch"
mem_gib = 20
"#;

    fn fleet() -> Fleet {
        Fleet::new(Scenario::from_toml(SCENARIO).unwrap())
    }

    #[test]
    fn batches_are_valid_wire_batches() {
        let f = fleet();
        let now = 1_800_000_000_000;
        for node in 0..f.nodes.len() {
            let b = f.batch(node, "sim", 1, &[now - 2000, now - 1000, now], 1000);
            b.validate(&Limits::default(), now).unwrap();
            assert_eq!(b.snapshots.len(), 3);
        }
    }

    #[test]
    fn mig_gpus_report_no_nvml_utilization_but_instances_and_dcgm() {
        let f = fleet();
        let (snap, _) = f.snapshot(0, 1_800_000_000_000);
        assert_eq!(snap.gpus[0].gpu_util, None);
        assert!(snap.gpus[0].sm_active.is_some());
        assert_eq!(snap.mig.len(), 4);
        let p = &snap.processes[0];
        assert!(p.gi_id.is_some());
        assert_eq!(p.sm_util, None);
        // Placements are legal: no overlaps within 8 memory slices.
        let mut used = [false; 8];
        for mi in &f.nodes[0].gpus[0].mig_instances {
            let (s, n) = (
                mi.placement_start.unwrap() as usize,
                mi.placement_size.unwrap() as usize,
            );
            for u in &mut used[s..s + n] {
                assert!(!*u, "overlapping placement");
                *u = true;
            }
        }
    }

    #[test]
    fn the_victim_slows_down_while_the_aggressor_runs() {
        let f = fleet();
        let mut alone = Vec::new();
        let mut shared = Vec::new();
        for i in 0..2000 {
            let ts = 1_800_000_000_000 + i * 60_000;
            let (snap, tenants) = f.snapshot(1, ts);
            let victim_key = &tenants
                .iter()
                .find(|t| t.pod.as_deref() == Some("victim"))
                .unwrap()
                .key;
            let rate = snap
                .processes
                .iter()
                .find(|p| p.tenant.as_ref() == Some(victim_key))
                .and_then(|p| p.sm_util)
                .unwrap();
            if snap.processes.len() > 1 {
                shared.push(rate)
            } else {
                alone.push(rate)
            }
        }
        let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
        assert!(!alone.is_empty() && !shared.is_empty());
        assert!(
            mean(&alone) > 0.9 && mean(&shared) < 0.6,
            "alone {} shared {}",
            mean(&alone),
            mean(&shared)
        );
    }

    #[test]
    fn the_same_instant_gives_the_same_snapshot() {
        let f = fleet();
        assert_eq!(
            f.snapshot(1, 1_800_000_123_000),
            f.snapshot(1, 1_800_000_123_000)
        );
    }
}
