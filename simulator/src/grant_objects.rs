//! The Kubernetes objects that record what a scenario's pods were granted, as the
//! API server would serve them to the agent: ResourceClaims with their allocation's consumed
//! capacity and the node's ResourceSlice (DRA), pods annotated as HAMi's scheduler and KAI
//! leave them, and the Node as HAMi's device plugin registers its GPUs on it (`crate::grant`
//! says what each grant is).

/// The Kubernetes objects that record a node's grants, as the API server would serve them.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    /// The Node; where a pod has a HAMi grant, with HAMi's registration of the node's GPUs.
    pub node: serde_json::Value,
    pub pods: Vec<serde_json::Value>,
    pub slices: Vec<serde_json::Value>,
    pub claims: Vec<serde_json::Value>,
}

/// The objects recording what the pods of node `node` of `fleet` were granted at `t_ms`: one
/// ResourceSlice for the node's GPUs where a pod has a DRA grant, and per granted pod its pod
/// object (annotated for HAMi and KAI) and its ResourceClaims (DRA).
pub fn objects(fleet: &crate::Fleet, node: usize, t_ms: i64) -> Objects {
    use serde_json::json;
    let n = &fleet.nodes[node];
    let pool = n.spec.name.clone();
    let mut out = Objects::default();
    let mut dra = false;
    let mut hami = false;
    for &i in &n.tenants {
        let spec = &fleet.scenario.tenants[i];
        let Some(g) = &spec.grant else { continue };
        let t = fleet.tenant_record(i, t_ms);
        let (Some(ns), Some(pod), Some(uid), Some(container)) = (
            t.namespace.clone(),
            t.pod.clone(),
            t.pod_uid.clone(),
            t.container.clone(),
        ) else {
            continue;
        };
        let gpus: Vec<&model::inventory::GpuInfo> = spec
            .device_refs()
            .iter()
            .filter_map(|d| match d {
                crate::scenario::DeviceRef::Gpu(k) => n.gpus.get(*k as usize),
                _ => None,
            })
            .collect();
        let mib = (g.memory_gib.unwrap_or(0.0) * 1024.0).round() as u64;
        let mut annotations = serde_json::Map::new();
        let mut claims = Vec::new();
        match g.mechanism.as_str() {
            "hami" => {
                hami = true;
                let devices: Vec<String> = gpus
                    .iter()
                    .map(|gpu| format!("{},NVIDIA,{mib},{}", gpu.uuid, g.cores.unwrap_or(0)))
                    .collect();
                annotations.insert(
                    "hami.io/vgpu-devices-allocated".into(),
                    json!(format!("{}:;", devices.join(":"))),
                );
            }
            "kai_fractions" => match g.fraction {
                Some(f) => {
                    annotations.insert("gpu-fraction".into(), json!(f.to_string()));
                }
                None => {
                    annotations.insert("gpu-memory".into(), json!(mib.to_string()));
                }
            },
            _ => {
                dra = true;
                let claim = format!("{pod}-gpu");
                let results: Vec<serde_json::Value> = gpus
                    .iter()
                    .map(|gpu| {
                        json!({"request": "gpu", "driver": model::names::NVIDIA_DRA_DRIVER,
                               "pool": pool, "device": format!("gpu-{}", gpu.index),
                               "consumedCapacity": {"memory": format!("{mib}Mi")}})
                    })
                    .collect();
                out.claims.push(json!({
                    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": claim, "namespace": ns},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                        "deviceClassName": "gpu.nvidia.com", "count": 1,
                        "capacity": {"requests": {"memory": format!("{mib}Mi")}}}}]}},
                    "status": {"allocation": {"devices": {"results": results}}},
                }));
                claims.push(json!({"name": "gpu", "resourceClaimName": claim}));
            }
        }
        out.pods.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": ns, "uid": uid, "annotations": annotations},
            "spec": {"nodeName": n.spec.name, "resourceClaims": claims,
                     "containers": [{"name": container}]},
        }));
    }
    out.node = node_object(n, hami);
    if dra {
        out.slices.push(slice(n, &pool));
    }
    out
}

/// The Node; with HAMi's registration of its GPUs when `hami` (HAMi 2.4's format: per GPU its
/// UUID, count, memory in MiB, cores, type, NUMA node, health, index and mode).
fn node_object(n: &crate::fleet::SimNode, hami: bool) -> serde_json::Value {
    use serde_json::json;
    let mut annotations = serde_json::Map::new();
    if hami {
        let registered: String = n
            .gpus
            .iter()
            .map(|gpu| {
                format!(
                    "{},10,{},100,{},0,true,{},hami-core:",
                    gpu.uuid,
                    gpu.memory_total_bytes >> 20,
                    gpu.model.replace([',', ':'], "-"),
                    gpu.index
                )
            })
            .collect();
        annotations.insert(model::names::HAMI_NODE_REGISTER.into(), json!(registered));
    }
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": n.spec.name, "annotations": annotations}})
}

/// The node's ResourceSlice of NVIDIA's DRA driver: each GPU a device that allows several
/// allocations, its memory the capacity.
fn slice(n: &crate::fleet::SimNode, pool: &str) -> serde_json::Value {
    use serde_json::json;
    let devices: Vec<serde_json::Value> = n
        .gpus
        .iter()
        .map(|gpu| {
            json!({"name": format!("gpu-{}", gpu.index), "allowMultipleAllocations": true,
                   "attributes": {"uuid": {"string": gpu.uuid}},
                   "capacity": {"memory": {"value": gpu.memory_total_bytes.to_string()}}})
        })
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": format!("{}-gpu.nvidia.com", n.spec.name)},
        "spec": {"driver": model::names::NVIDIA_DRA_DRIVER, "nodeName": n.spec.name,
                 "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    })
}
