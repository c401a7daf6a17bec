//! Allocations from the kubelet's assignments: which pod holds which GPU, replica or MIG
//! instance, the names of pod processes, and each GPU's sharing mode as observed.

use std::collections::HashMap;

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
            None => format!("pod/{}/{}/{}", h.namespace, h.pod, h.container),
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
                g.sharing = "time_slicing".into();
                g.replicas = replicas.unwrap_or(m + 1).max(m + 1).max(2);
            } else if snap
                .processes
                .iter()
                .any(|p| p.gpu_uuid == g.uuid && p.kind == ProcessKind::Mps)
            {
                g.sharing = "mps".into();
            }
        }
        let mut claims: Vec<(&Holder, Option<u32>, Option<u32>, f32)> = Vec::new();
        for h in whole {
            let share = if h.replica.is_some() {
                1.0 / g.replicas as f32
            } else {
                1.0
            };
            claims.push((h, None, None, share));
        }
        for m in &g.mig_instances {
            let Some(mig_uuid) = &m.uuid else { continue };
            for h in held.get(mig_uuid).map(Vec::as_slice).unwrap_or_default() {
                let share = model::mig::slice_share(m.compute_slices);
                claims.push((h, Some(m.gi_id), Some(m.ci_id), share));
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
    // Cgroup-only pod tenants that no process refers to any more are dropped.
    let used: std::collections::HashSet<String> = snap
        .processes
        .iter()
        .filter_map(|p| p.tenant.clone())
        .chain(snap.allocations.iter().map(|a| a.tenant.clone()))
        .collect();
    tenants.retain(|k, _| used.contains(k));
}
