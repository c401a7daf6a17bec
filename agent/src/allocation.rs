//! Allocations from the kubelet's assignments: which pod holds which GPU, replica or MIG
//! instance, the names of pod processes, and each GPU's sharing mode as observed.

use std::collections::HashMap;

use model::inventory::Sharing;
use model::wire::v1::Snapshot;
use model::{GpuInfo, ProcessKind, Tenant};

use crate::kubelet::{Assignments, Holder};

/// Pod UIDs joined to pod names by the devices their processes run on
/// ([`crate::kubelet::join_by_devices`]), for UIDs the kubelet's directory did not name.
fn infer_pod_uids(
    snap: &Snapshot,
    tenants: &HashMap<String, Tenant>,
    gpus: &[GpuInfo],
    held: &HashMap<String, Vec<Holder>>,
    node: &str,
    hostname: &dyn Fn(u32) -> Option<String>,
) -> HashMap<String, (String, String)> {
    let evidence: Vec<crate::kubelet::ProcessEvidence> = snap
        .processes
        .iter()
        .filter_map(|p| {
            let uid = tenants.get(p.tenant.as_ref()?)?.pod_uid.as_deref()?;
            let mut devices = vec![p.gpu_uuid.as_str()];
            if let Some(gi) = p.gi_id
                && let Some(g) = gpus.iter().find(|g| g.uuid == p.gpu_uuid)
                && let Some(m) = g.mig_instances.iter().find(|m| m.gi_id == gi)
                && let Some(u) = &m.uuid
            {
                devices.push(u);
            }
            Some(crate::kubelet::ProcessEvidence {
                pod_uid: uid,
                devices,
                hostname: hostname(p.pid),
            })
        })
        .collect();
    crate::kubelet::join_by_devices(&evidence, held, node)
}

/// The tenant of a container the kubelet knows by name.
fn pod_tenant(h: &Holder, uid: Option<&String>) -> Tenant {
    Tenant {
        // Keyed by UID like the processes' cgroups; by name when the UID is unknown.
        key: match uid {
            Some(uid) => Tenant::pod_key(uid, &h.container),
            None => Tenant::pod_name_key(&h.namespace, &h.pod, &h.container),
        },
        kind: model::TenantKind::Pod,
        namespace: Some(h.namespace.clone()),
        pod: Some(h.pod.clone()),
        container: Some(h.container.clone()),
        pod_uid: uid.cloned(),
        job_id: None,
        user: None,
        account: None,
        uid: None,
    }
}

/// The share of device `uuid` (of `memory` bytes) a mechanism granted holder `h`: what its
/// DRA claim consumed, or what HAMi gave its container ([`crate::grants`]).
fn granted(
    grants: Option<&crate::grants::Grants>,
    h: &Holder,
    uuid: &str,
    memory: f64,
) -> Option<f32> {
    let grants = grants?;
    match &h.claim {
        Some(c) => grants.dra_share(c),
        None => grants.hami_share((&h.namespace, &h.pod, &h.container), uuid, memory),
    }
}

/// KAI fraction pods hold no device in the kubelet's answer: each one with processes on `g`
/// gets an allocation of its granted fraction there, and KAI's reservation pods holding `g`
/// then count nothing (the fractions are what is allocated). Only on a GPU a reservation pod
/// holds: KAI shares no other, and a `gpu-fraction` annotation elsewhere is the pod author's
/// word alone.
fn kai_fractions(
    snap: &mut Snapshot,
    tenants: &HashMap<String, Tenant>,
    g: &GpuInfo,
    grants: &crate::grants::Grants,
) {
    let reservation = |tenant: &str| {
        tenants.get(tenant).and_then(|t| t.namespace.as_deref())
            == Some(crate::grants::KAI_RESERVATION_NAMESPACE)
    };
    if !snap
        .allocations
        .iter()
        .any(|a| a.gpu_uuid == g.uuid && reservation(&a.tenant))
    {
        return;
    }
    let memory = g.memory_total_bytes as f64;
    let mut fractions: Vec<(String, f32)> = Vec::new();
    for p in snap.processes.iter().filter(|p| p.gpu_uuid == g.uuid) {
        let Some(key) = &p.tenant else { continue };
        let uid = tenants.get(key).and_then(|t| t.pod_uid.as_deref());
        if let Some(share) = uid.and_then(|u| grants.kai_share(u, memory))
            && !fractions.iter().any(|(k, _)| k == key)
        {
            fractions.push((key.clone(), share));
        }
    }
    if fractions.is_empty() {
        return;
    }
    snap.allocations
        .retain(|a| a.gpu_uuid != g.uuid || !reservation(&a.tenant));
    for (tenant, share) in fractions {
        if snap
            .allocations
            .iter()
            .any(|a| a.gpu_uuid == g.uuid && a.tenant == tenant)
        {
            continue;
        }
        snap.allocations.push(model::Allocation {
            gpu_uuid: g.uuid.clone(),
            tenant,
            gi_id: None,
            ci_id: None,
            replica: None,
            share,
        });
    }
}

/// Allocations from the kubelet's assignments, names for pod processes, and each GPU's
/// sharing mode as observed.
pub fn assign(
    snap: &mut Snapshot,
    tenants: &mut HashMap<String, Tenant>,
    gpus: &mut [&mut GpuInfo],
    (a, node): (&Assignments, &str),
    replicas: Option<u32>,
    hostname: &dyn Fn(u32) -> Option<String>,
) {
    let infos: Vec<GpuInfo> = gpus.iter().map(|g| (**g).clone()).collect();
    let held = a.resolved(&infos);
    let inferred = infer_pod_uids(snap, tenants, &infos, &held, node, hostname);
    for g in gpus.iter_mut() {
        let whole = held.get(&g.uuid).map(Vec::as_slice).unwrap_or_default();
        let max_replica = whole.iter().filter_map(|h| h.replica).max();
        if !g.mig_enabled {
            if let Some(m) = max_replica {
                g.sharing = Sharing::TimeSlicing;
                g.replicas = replicas.unwrap_or(m + 1).max(m + 1).max(2);
            } else if snap
                .processes
                .iter()
                .any(|p| p.gpu_uuid == g.uuid && p.kind == ProcessKind::Mps)
            {
                g.sharing = Sharing::Mps;
            }
        }
        let grants = a.grants.as_ref();
        let memory = g.memory_total_bytes as f64;
        let mut claims: Vec<(&Holder, Option<u32>, Option<u32>, f32)> = Vec::new();
        for h in whole {
            let split = if h.replica.is_some() {
                1.0 / g.replicas as f32
            } else {
                1.0
            };
            let share = granted(grants, h, &g.uuid, memory).unwrap_or(split);
            claims.push((h, None, None, share));
        }
        for m in &g.mig_instances {
            let Some(mig_uuid) = &m.uuid else { continue };
            for h in held.get(mig_uuid).map(Vec::as_slice).unwrap_or_default() {
                let slice = model::mig::slice_share(m.compute_slices);
                // A share of a MIG device is that share of the instance's slices.
                let of_instance = granted(grants, h, mig_uuid, m.memory_total_bytes as f64);
                claims.push((
                    h,
                    Some(m.gi_id),
                    Some(m.ci_id),
                    slice * of_instance.unwrap_or(1.0),
                ));
            }
        }
        for (h, gi, ci, share) in claims {
            let t = pod_tenant(h, a.uid_by_pod.get(&(h.namespace.clone(), h.pod.clone())));
            snap.allocations.push(model::Allocation {
                gpu_uuid: g.uuid.clone(),
                tenant: t.key.clone(),
                gi_id: gi,
                ci_id: ci,
                replica: h.replica,
                share,
            });
            tenants.entry(t.key.clone()).or_insert(t);
        }
        // Name the pod processes on this GPU: the container of their pod that holds a device
        // here (the whole GPU, a replica of it, or their MIG instance).
        for p in snap.processes.iter_mut().filter(|p| p.gpu_uuid == g.uuid) {
            let Some(cgroup_tenant) = p.tenant.as_ref().and_then(|k| tenants.get(k)) else {
                continue;
            };
            let Some(uid) = cgroup_tenant.pod_uid.clone() else {
                continue;
            };
            let Some((ns, pod)) = a.pod_by_uid.get(&uid).or_else(|| inferred.get(&uid)) else {
                continue;
            };
            let mut devices: Vec<&str> = vec![g.uuid.as_str()];
            if let Some(gi) = p.gi_id
                && let Some(m) = g.mig_instances.iter().find(|m| m.gi_id == gi)
                && let Some(u) = &m.uuid
            {
                devices.push(u);
            }
            let mut containers: Vec<&Holder> = devices
                .iter()
                .flat_map(|d| held.get(*d).map(Vec::as_slice).unwrap_or_default())
                .filter(|h| &h.namespace == ns && &h.pod == pod)
                .collect();
            containers.dedup_by(|x, y| x.container == y.container);
            if let [h] = containers.as_slice() {
                // The key the pod's allocation has: by UID when the kubelet's directory gave
                // it, by name otherwise (a joined UID is still recorded).
                let mut t = pod_tenant(h, a.uid_by_pod.get(&(ns.clone(), pod.clone())));
                t.pod_uid = Some(uid.clone());
                p.tenant = Some(t.key.clone());
                // The allocation may have named the tenant first, without its UID.
                tenants
                    .entry(t.key.clone())
                    .or_insert(t)
                    .pod_uid
                    .get_or_insert_with(|| uid.clone());
            }
        }
    }
    if let Some(grants) = a.grants.as_ref() {
        for g in gpus.iter() {
            kai_fractions(snap, tenants, g, grants);
        }
    }
    // Cgroup-only pod tenants that no process refers to any more are dropped.
    let used: std::collections::HashSet<String> = snap
        .processes
        .iter()
        .filter_map(|p| p.tenant.clone())
        .chain(snap.allocations.iter().map(|a| a.tenant.clone()))
        .collect();
    tenants.retain(|k, _| used.contains(k));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::{Grants, KAI_FRACTION, KAI_RESERVATION_NAMESPACE};
    use crate::kubelet::v1;
    use serde_json::json;

    const GPU: &str = "GPU-a1b2c3d4-0000-4000-8000-00000000a100";

    /// KAI: the fraction pod holds no device; KAI's reservation pod holds the GPU. The pod's
    /// process on the GPU gets the granted quarter, and the reservation pod counts nothing.
    #[test]
    fn a_kai_fraction_pod_counts_its_fraction_where_it_runs() {
        let key = Tenant::pod_key("u-lab", "main");
        assert_eq!(kai_allocations(true), [(key, 0.25)]);
    }

    /// Without a reservation pod on the GPU, KAI shares nothing there: a `gpu-fraction`
    /// annotation is its author's word alone, and gives no allocation.
    #[test]
    fn a_fraction_on_a_gpu_kai_does_not_reserve_counts_nothing() {
        assert_eq!(kai_allocations(false), []);
    }

    /// The allocations on a GPU where pod `nb/lab-0`, annotated for a quarter of a GPU, runs a
    /// process, with or without KAI's reservation pod holding the GPU.
    fn kai_allocations(reserved: bool) -> Vec<(String, f32)> {
        let mut gpu: GpuInfo = serde_json::from_value(json!({
            "uuid": GPU, "index": 1, "model": "NVIDIA A100-SXM4-80GB",
            "memory_total_bytes": 85_899_345_920_i64
        }))
        .unwrap();
        let reservation = v1::PodResources {
            name: "gpu-reservation-node-1-x7k2p".into(),
            namespace: KAI_RESERVATION_NAMESPACE.into(),
            containers: vec![v1::ContainerResources {
                name: "main".into(),
                devices: vec![v1::ContainerDevices {
                    resource_name: "nvidia.com/gpu".into(),
                    device_ids: vec![GPU.into()],
                }],
                dynamic_resources: vec![],
            }],
        };
        let held = if reserved { vec![reservation] } else { vec![] };
        let a = crate::kubelet::Assignments::new(&held, None);
        let pod = json!({
            "metadata": {"namespace": "nb", "name": "lab-0", "uid": "u-lab",
                "annotations": {KAI_FRACTION: "0.25"}},
            "spec": {"containers": [{"name": "main"}]}
        });
        let a = a.with_grants(Grants::from_objects(None, &[pod], &[], &[]));
        let key = Tenant::pod_key("u-lab", "main");
        let mut tenants = HashMap::from([(
            key.clone(),
            Tenant {
                key: key.clone(),
                kind: model::TenantKind::Pod,
                namespace: None,
                pod: None,
                container: None,
                pod_uid: Some("u-lab".into()),
                job_id: None,
                user: None,
                account: None,
                uid: None,
            },
        )]);
        let mut snap = Snapshot {
            processes: vec![model::ProcessSample {
                gpu_uuid: GPU.into(),
                pid: 4242,
                tenant: Some(key.clone()),
                ..Default::default()
            }],
            ..Default::default()
        };
        assign(
            &mut snap,
            &mut tenants,
            &mut [&mut gpu],
            (&a, "node-1"),
            None,
            &|_| None,
        );
        snap.allocations
            .iter()
            .map(|x| (x.tenant.clone(), x.share))
            .collect()
    }
}
