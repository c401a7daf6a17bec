//! What a per-GPU sharing mechanism grants each container, read from the Kubernetes objects
//! that record it, so an allocation's share is what was granted rather than an
//! equal split of the device:
//!
//! - **DRA consumable capacity** (`resource.k8s.io/v1`): a ResourceClaim's
//!   `status.allocation.devices.results[]` names the device by (driver, pool, device) and, for a
//!   device that allows several allocations, the capacity the claim consumed
//!   (`consumedCapacity: {memory: 20Gi}`); the node's ResourceSlices give each device's
//!   attributes (NVIDIA's driver: `uuid`) and capacity (`memory`). Share = consumed memory ÷
//!   the device's memory. The slices also resolve the kubelet's (pool, device) to the GPU's
//!   UUID for device names the agent cannot read itself.
//! - **HAMi**: the pod annotation `hami.io/vgpu-devices-allocated`, written by HAMi's
//!   scheduler: per container (separated by `;`, in the pod's container order) each device
//!   (separated by `:`) as `<GPU UUID>,<type>,<memory MiB>,<cores %>`. Share = the larger of
//!   memory ÷ the GPU's memory and cores ÷ 100 (cores 0: no compute limit, memory decides).
//! - **KAI Scheduler** (and Run:ai): the pod annotations `gpu-fraction` (`"0.25"`) or
//!   `gpu-memory` (MiB). The fraction pod holds no device in the kubelet's answer; its share
//!   counts on the GPU its processes run on, and KAI's reservation pods (namespace
//!   [`KAI_RESERVATION_NAMESPACE`]) holding that GPU count nothing there.
//!
//! Every value is bounded: a share outside (0, 1] or a quantity that does not parse is
//! ignored (the device's equal split stands), never trusted.
//!
//! Pod annotations are the pod author's to write, so an annotation alone grants nothing:
//!
//! - a HAMi grant counts only on a GPU HAMi's device plugin registered on the node (the Node's
//!   [`HAMI_NODE_REGISTER`] annotation names it; tenants cannot write Node objects), so on a node
//!   without HAMi a container cannot shrink its whole GPU to a sliver by annotating its pod;
//! - a KAI fraction counts only on a GPU one of KAI's reservation pods holds
//!   (`crate::allocation`);
//! - HAMi and KAI write a pod's grant before it starts and never change it, so the first read
//!   that lists a pod fixes its HAMi and KAI grants for its life ([`Grants::keeping_first`]):
//!   an annotation edited or added later changes nothing.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

pub use model::names::{HAMI_NODE_REGISTER, NVIDIA_DRA_DRIVER};

/// HAMi's record of the devices it gave a pod's containers.
pub const HAMI_ALLOCATED: &str = "hami.io/vgpu-devices-allocated";
/// KAI's fraction of a GPU a pod asked for.
pub const KAI_FRACTION: &str = "gpu-fraction";
/// KAI's GPU memory a pod asked for, in MiB.
pub const KAI_MEMORY: &str = "gpu-memory";
/// Where KAI's binder runs the pods that reserve a GPU for its fraction pods.
pub const KAI_RESERVATION_NAMESPACE: &str = "kai-resource-reservation";

const MIB: f64 = 1024.0 * 1024.0;

/// A device of a ResourceSlice: the UUID it stands for and its memory capacity (bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct SliceDevice {
    pub uuid: String,
    pub memory: Option<f64>,
}

/// One device a DRA claim was allocated: the claim and the device.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimDevice {
    pub namespace: String,
    pub claim: String,
    pub pool: String,
    pub device: String,
}

/// A KAI fraction pod's grant: a fraction of a GPU, or memory in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KaiGrant {
    Fraction(f64),
    Memory(f64),
}

/// One device HAMi gave a container: (GPU UUID, memory bytes, cores %).
pub type HamiDevice = (String, f64, f64);

/// What the node's mechanisms granted, as read from the API server.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// NVIDIA DRA devices by (pool, device name).
    pub devices: HashMap<(String, String), SliceDevice>,
    /// Memory (bytes) each claim consumed of each device it was allocated.
    pub consumed: HashMap<ClaimDevice, f64>,
    /// HAMi: (namespace, pod, container) → what it was given on each GPU.
    pub hami: HashMap<(String, String, String), Vec<HamiDevice>>,
    /// The GPUs (UUIDs) HAMi's device plugin registered on the node: HAMi grants count only there.
    pub hami_gpus: HashSet<String>,
    /// KAI: pod UID → (namespace, pod, grant).
    pub kai: HashMap<String, (String, String, KaiGrant)>,
    /// Every pod of the node: UID → (namespace, name). The API server's word joins a
    /// process's cgroup UID to its pod before any inference from devices does.
    pub pods: HashMap<String, (String, String)>,
}

/// A share that means something: in (0, 1].
fn bounded(x: f64) -> Option<f32> {
    (x.is_finite() && x > 0.0).then(|| x.min(1.0) as f32)
}

impl Grants {
    /// Reads the node (None: not readable), its pods, ResourceSlices and the ResourceClaims its
    /// pods hold.
    pub fn from_objects(
        node: Option<&Value>,
        pods: &[Value],
        slices: &[Value],
        claims: &[Value],
    ) -> Grants {
        let mut g = Grants::default();
        if let Some(text) =
            node.and_then(|n| n["metadata"]["annotations"][HAMI_NODE_REGISTER].as_str())
        {
            g.hami_gpus = gpu_uuids(text).map(str::to_owned).collect();
        }
        for s in slices
            .iter()
            .filter(|s| s["spec"]["driver"] == NVIDIA_DRA_DRIVER)
        {
            let Some(pool) = s["spec"]["pool"]["name"].as_str() else {
                continue;
            };
            for d in s["spec"]["devices"].as_array().into_iter().flatten() {
                let (Some(name), Some(uuid)) = (
                    d["name"].as_str(),
                    d["attributes"]["uuid"]["string"].as_str(),
                ) else {
                    continue;
                };
                let memory = d["capacity"]["memory"]["value"].as_str().and_then(quantity);
                g.devices.insert(
                    (pool.to_owned(), name.to_owned()),
                    SliceDevice {
                        uuid: uuid.to_owned(),
                        memory,
                    },
                );
            }
        }
        for c in claims {
            let (Some(ns), Some(name)) = (
                c["metadata"]["namespace"].as_str(),
                c["metadata"]["name"].as_str(),
            ) else {
                continue;
            };
            let results = c["status"]["allocation"]["devices"]["results"].as_array();
            for r in results
                .into_iter()
                .flatten()
                .filter(|r| r["driver"] == NVIDIA_DRA_DRIVER)
            {
                let (Some(pool), Some(device)) = (r["pool"].as_str(), r["device"].as_str()) else {
                    continue;
                };
                if let Some(m) = r["consumedCapacity"]["memory"].as_str().and_then(quantity) {
                    let key = ClaimDevice {
                        namespace: ns.into(),
                        claim: name.into(),
                        pool: pool.into(),
                        device: device.into(),
                    };
                    *g.consumed.entry(key).or_default() += m;
                }
            }
        }
        for p in pods {
            g.read_pod(p);
        }
        g
    }

    fn read_pod(&mut self, p: &Value) {
        let meta = &p["metadata"];
        let (Some(ns), Some(pod)) = (meta["namespace"].as_str(), meta["name"].as_str()) else {
            return;
        };
        if let Some(uid) = meta["uid"].as_str() {
            self.pods.insert(uid.into(), (ns.into(), pod.into()));
        }
        let notes = &meta["annotations"];
        if let Some(text) = notes[HAMI_ALLOCATED].as_str() {
            let containers = p["spec"]["containers"].as_array();
            let names = containers.into_iter().flatten().map(|c| c["name"].as_str());
            for (devices, name) in text.split(';').zip(names) {
                let Some(name) = name else { continue };
                let got: Vec<HamiDevice> = devices
                    .split(':')
                    .filter_map(|d| {
                        let mut f = d.split(',');
                        let uuid = f.next()?.trim();
                        let _kind = f.next()?;
                        let mem: f64 = f.next()?.trim().parse().ok()?;
                        let cores: f64 = f.next()?.trim().parse().ok()?;
                        (uuid.starts_with("GPU-") && mem >= 0.0 && (0.0..=100.0).contains(&cores))
                            .then(|| (uuid.to_owned(), mem * MIB, cores))
                    })
                    .collect();
                if !got.is_empty() {
                    self.hami.insert((ns.into(), pod.into(), name.into()), got);
                }
            }
        }
        let kai = match (notes[KAI_FRACTION].as_str(), notes[KAI_MEMORY].as_str()) {
            (Some(f), _) => f.trim().parse().ok().map(KaiGrant::Fraction),
            (None, Some(m)) => m
                .trim()
                .parse::<f64>()
                .ok()
                .map(|m| KaiGrant::Memory(m * MIB)),
            _ => None,
        };
        if let (Some(k), Some(uid)) = (kai, meta["uid"].as_str()) {
            self.kai.insert(uid.into(), (ns.into(), pod.into(), k));
        }
    }

    /// The UUID a DRA (pool, device) stands for, as the node's ResourceSlices say.
    pub fn resolve(&self, pool: &str, device: &str) -> Option<&str> {
        self.devices
            .get(&(pool.to_owned(), device.to_owned()))
            .map(|d| d.uuid.as_str())
    }

    /// The share of its device a claim consumed: consumed memory ÷ the device's memory.
    pub fn dra_share(&self, c: &ClaimDevice) -> Option<f32> {
        let consumed = self.consumed.get(c)?;
        let total = self
            .devices
            .get(&(c.pool.clone(), c.device.clone()))?
            .memory?;
        bounded(consumed / total)
    }

    /// HAMi's and KAI's grants of every pod `earlier` already listed (the same UID) as
    /// `earlier` read them, present or absent: both write a pod's grant before it starts, so a
    /// later difference is an edit of the annotation, not a grant. New pods keep this read's.
    pub fn keeping_first(mut self, earlier: &Grants) -> Grants {
        // The pods both reads list under one UID, and their (namespace, name).
        let known: Vec<(&String, &(String, String))> = self
            .pods
            .iter()
            .filter(|(uid, named)| earlier.pods.get(*uid) == Some(*named))
            .collect();
        let named: HashSet<(&str, &str)> = known
            .iter()
            .map(|(_, (ns, pod))| (ns.as_str(), pod.as_str()))
            .collect();
        let is_known = |(ns, pod, _): &(String, String, String)| named.contains(&(ns, pod));
        self.hami.retain(|k, _| !is_known(k));
        self.hami.extend(
            earlier
                .hami
                .iter()
                .filter(|(k, _)| is_known(k))
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        for (uid, _) in known {
            match earlier.kai.get(uid) {
                Some(k) => self.kai.insert(uid.clone(), k.clone()),
                None => self.kai.remove(uid),
            };
        }
        self
    }

    /// The share of GPU `uuid` (of `memory_total` bytes) HAMi gave a container; none on a GPU
    /// HAMi did not register on the node.
    pub fn hami_share(
        &self,
        holder: (&str, &str, &str),
        uuid: &str,
        memory_total: f64,
    ) -> Option<f32> {
        if !self.hami_gpus.contains(uuid) {
            return None;
        }
        let key = (
            holder.0.to_owned(),
            holder.1.to_owned(),
            holder.2.to_owned(),
        );
        let (_, mem, cores) = self.hami.get(&key)?.iter().find(|d| d.0 == uuid)?;
        bounded((mem / memory_total).max(cores / 100.0))
    }

    /// The share of a GPU of `memory_total` bytes a KAI pod (by UID) was granted.
    pub fn kai_share(&self, pod_uid: &str, memory_total: f64) -> Option<f32> {
        match self.kai.get(pod_uid)?.2 {
            KaiGrant::Fraction(f) => bounded(f),
            KaiGrant::Memory(m) => bounded(m / memory_total),
        }
    }
}

/// A Kubernetes quantity in base units: `20Gi`, `512Mi`, `1.5G`, `85899345920`, `8e9`.
pub fn quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    if s.is_empty() || s.len() > 64 {
        return None;
    }
    const SUFFIXES: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("Pi", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("Ei", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let (number, factor) = SUFFIXES
        .iter()
        .find_map(|(suffix, f)| s.strip_suffix(suffix).map(|n| (n, *f)))
        .unwrap_or((s, 1.0));
    let well_formed = number
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'+' | b'-' | b'e' | b'E'));
    let x: f64 = number.parse().ok().filter(|_| well_formed)?;
    let base = x * factor;
    (base.is_finite() && x >= 0.0).then_some(base)
}

/// The GPU UUIDs (`GPU-…`) a text names, in whatever format around them: HAMi's registration
/// has been `,`- and `:`-separated fields and JSON.
fn gpu_uuids(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|t| t.len() > 4 && t.starts_with("GPU-"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GPU: &str = "GPU-a1b2c3d4-0000-4000-8000-00000000a100";
    const OTHER_GPU: &str = "GPU-a1b2c3d4-0000-4000-8000-00000000a101";
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

    /// The Node as HAMi's device plugin leaves it when it serves [`GPU`] (HAMi 2.4's format).
    fn hami_node() -> Value {
        registered(&format!(
            "{GPU},10,81920,100,NVIDIA-A100-SXM4-80GB,0,true,0,hami-core:"
        ))
    }

    fn registered(text: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1",
               "annotations": {HAMI_NODE_REGISTER: text}}})
    }

    /// A HAMi grant counts only on a GPU HAMi registered on the node: an annotation a pod's
    /// author wrote on a node without HAMi (or naming a GPU HAMi does not serve) leaves the
    /// holding whole. Both of HAMi's registration formats name the GPU.
    #[test]
    fn an_annotation_alone_grants_nothing() {
        let pod = json!({"metadata": {"namespace": "web", "name": "api", "uid": "u",
            "annotations": {HAMI_ALLOCATED: format!("{GPU},NVIDIA,20480,25:;")}},
            "spec": {"containers": [{"name": "server"}]}});
        let share =
            |node: Option<Value>| {
                Grants::from_objects(node.as_ref(), std::slice::from_ref(&pod), &[], &[])
                    .hami_share(("web", "api", "server"), GPU, 80.0 * GIB)
            };
        assert_eq!(share(None), None, "no Node read");
        assert_eq!(
            share(Some(json!({"metadata": {"name": "node-1"}}))),
            None,
            "a node without HAMi"
        );
        assert_eq!(
            share(Some(registered(&format!(
                "{OTHER_GPU},10,81920,100,NVIDIA-A100-SXM4-80GB,0,true:"
            )))),
            None,
            "HAMi serves another GPU"
        );
        assert_eq!(
            share(Some(registered(&format!("x{GPU}")))),
            None,
            "part of a longer name"
        );
        assert_eq!(share(Some(hami_node())), Some(0.25), "HAMi 2.4's format");
        let json_format = format!(
            r#"[{{"id":"{GPU}","count":10,"devmem":81920,"devcore":100,"type":"NVIDIA-A100-SXM4-80GB","numa":0,"health":true}}]"#
        );
        assert_eq!(share(Some(registered(&json_format))), Some(0.25), "JSON");
    }

    /// HAMi and KAI write a pod's grant before it starts: an annotation edited or added after
    /// the first read that listed the pod changes nothing, while a new pod (a new UID, even under
    /// an old name) is read as it is.
    #[test]
    fn a_grant_edited_after_the_first_read_changes_nothing() {
        let pod = |name: &str, uid: &str, notes: Value| {
            json!({"metadata": {"namespace": "a", "name": name, "uid": uid, "annotations": notes},
                   "spec": {"containers": [{"name": "c"}]}})
        };
        let hami = |mib: u32| json!({HAMI_ALLOCATED: format!("{GPU},NVIDIA,{mib},0:;")});
        let node = hami_node();
        let first = Grants::from_objects(
            Some(&node),
            &[
                pod("h", "u-h", hami(20480)),
                pod("k", "u-k", json!({KAI_FRACTION: "0.25"})),
                pod("plain", "u-p", json!({})),
                pod("sts-0", "u-old", hami(20480)),
            ],
            &[],
            &[],
        );
        let later = Grants::from_objects(
            Some(&node),
            &[
                pod("h", "u-h", hami(820)),
                pod("k", "u-k", json!({KAI_FRACTION: "0.01"})),
                pod("plain", "u-p", json!({KAI_FRACTION: "0.01"})),
                pod("sts-0", "u-new", hami(40960)),
                pod("fresh", "u-f", hami(10240)),
            ],
            &[],
            &[],
        )
        .keeping_first(&first);
        let hami_share = |pod: &str| later.hami_share(("a", pod, "c"), GPU, 80.0 * GIB);
        assert_eq!(hami_share("h"), Some(0.25), "edited HAMi grant");
        assert_eq!(later.kai_share("u-k", 80.0 * GIB), Some(0.25), "edited KAI");
        assert_eq!(later.kai_share("u-p", 80.0 * GIB), None, "added KAI");
        assert_eq!(hami_share("sts-0"), Some(0.5), "recreated under its name");
        assert_eq!(hami_share("fresh"), Some(0.125), "a new pod");
    }

    #[test]
    fn quantities_read_as_the_api_server_writes_them() {
        assert_eq!(quantity("20Gi"), Some(20.0 * GIB));
        assert_eq!(quantity("512Mi"), Some(512.0 * MIB));
        assert_eq!(quantity("1.5G"), Some(1.5e9));
        assert_eq!(quantity("85899345920"), Some(85_899_345_920.0));
        assert_eq!(quantity("8e9"), Some(8e9));
        for bad in [
            "", "Gi", "-1Gi", "1..2", "NaN", "inf", "20 Gi", "0x10", "1e300Ei",
        ] {
            assert_eq!(quantity(bad), None, "{bad}");
        }
    }

    /// A GPU a quarter of which each mechanism grants: 20 GiB of 80 GiB, 25 % of its cores,
    /// a 0.25 fraction. Object shapes as the projects document them.
    #[test]
    fn a_quarter_gpu_is_a_quarter_under_each_mechanism() {
        let slice = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "node-1-gpu.nvidia.com-x"},
            "spec": {
                "driver": "gpu.nvidia.com", "nodeName": "node-1",
                "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{
                    "name": "gpu-1",
                    "allowMultipleAllocations": true,
                    "attributes": {"uuid": {"string": GPU}, "index": {"int": 1}},
                    "capacity": {"memory": {"value": "80Gi"}}
                }]
            }
        });
        let claim = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": "ml", "name": "trainer-gpu"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "capacity": {"requests": {"memory": "20Gi"}}}}]}},
            "status": {"allocation": {"devices": {"results": [{
                "request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-1",
                "device": "gpu-1", "shareID": "7f1c0a52-8d34-4b8e-9c11-2b7e5d3f9a01",
                "consumedCapacity": {"memory": "20Gi"}
            }]}}}
        });
        let hami = json!({
            "metadata": {"namespace": "web", "name": "api", "uid": "u-hami",
                "annotations": {HAMI_ALLOCATED: format!("{GPU},NVIDIA,20480,25:;")}},
            "spec": {"containers": [{"name": "server"}]}
        });
        let kai = json!({
            "metadata": {"namespace": "nb", "name": "lab", "uid": "u-kai",
                "annotations": {KAI_FRACTION: "0.25"}},
            "spec": {"containers": [{"name": "main"}]}
        });
        let kai_memory = json!({
            "metadata": {"namespace": "nb", "name": "lab-2", "uid": "u-kai-2",
                "annotations": {KAI_MEMORY: "20480"}},
            "spec": {"containers": [{"name": "main"}]}
        });
        let g = Grants::from_objects(
            Some(&hami_node()),
            &[hami, kai, kai_memory],
            &[slice],
            &[claim],
        );
        let c = ClaimDevice {
            namespace: "ml".into(),
            claim: "trainer-gpu".into(),
            pool: "node-1".into(),
            device: "gpu-1".into(),
        };
        assert_eq!(g.resolve("node-1", "gpu-1"), Some(GPU));
        assert_eq!(g.dra_share(&c), Some(0.25));
        assert_eq!(
            g.hami_share(("web", "api", "server"), GPU, 80.0 * GIB),
            Some(0.25)
        );
        assert_eq!(g.kai_share("u-kai", 80.0 * GIB), Some(0.25));
        assert_eq!(g.kai_share("u-kai-2", 80.0 * GIB), Some(0.25));
    }

    /// Hostile objects: the documented shapes with values replaced at random by strings,
    /// numbers, nulls, arrays and deep nesting. Reading never panics, and every share it
    /// yields is in (0, 1].
    #[test]
    fn random_objects_never_yield_a_share_outside_a_gpu() {
        let mut state = 0x5EED_u64;
        let mut next = move || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let atoms = [
            json!("20Gi"),
            json!("-1"),
            json!("1e308Gi"),
            json!("0"),
            json!("NaN"),
            json!(""),
            json!("GPU-x,NVIDIA,1e9,100:;;::,,"),
            json!(0.25),
            json!(-7),
            json!(null),
            json!([1, 2]),
            json!({"value": "1Ei"}),
            json!("9".repeat(70)),
            json!(GPU),
            json!(format!("{GPU},NVIDIA,20480,25:{GPU},NVIDIA,x,1:;")),
        ];
        let base = [
            json!({"metadata": {"namespace": "a", "name": "p", "uid": "u", "annotations": {
                HAMI_ALLOCATED: format!("{GPU},NVIDIA,20480,25:;"), KAI_FRACTION: "0.25",
                KAI_MEMORY: "20480"}}, "spec": {"containers": [{"name": "c"}, {"name": "d"}]}}),
            json!({"spec": {"driver": NVIDIA_DRA_DRIVER, "pool": {"name": "n"}, "devices": [
                {"name": "gpu-1", "attributes": {"uuid": {"string": GPU}},
                 "capacity": {"memory": {"value": "80Gi"}}}]}}),
            json!({"metadata": {"namespace": "a", "name": "c"}, "status": {"allocation":
                {"devices": {"results": [{"driver": NVIDIA_DRA_DRIVER, "pool": "n",
                 "device": "gpu-1", "consumedCapacity": {"memory": "20Gi"}}]}}}}),
        ];
        fn mutate(v: &mut Value, next: &mut dyn FnMut() -> u64, atoms: &[Value]) {
            match v {
                Value::Object(m) => {
                    for (_, x) in m.iter_mut() {
                        mutate(x, next, atoms);
                    }
                }
                Value::Array(a) => {
                    for x in a.iter_mut() {
                        mutate(x, next, atoms);
                    }
                }
                _ => {
                    if next().is_multiple_of(3) {
                        *v = atoms[(next() % atoms.len() as u64) as usize].clone();
                    }
                }
            }
        }
        for _ in 0..2000 {
            let mut objs = base.clone();
            for o in &mut objs {
                mutate(o, &mut next, &atoms);
            }
            let [pod, slice, claim] = objs;
            let g = Grants::from_objects(Some(&hami_node()), &[pod], &[slice], &[claim]);
            let c = ClaimDevice {
                namespace: "a".into(),
                claim: "c".into(),
                pool: "n".into(),
                device: "gpu-1".into(),
            };
            let shares = [
                g.dra_share(&c),
                g.hami_share(("a", "p", "c"), GPU, 80.0 * GIB),
                g.hami_share(("a", "p", "d"), GPU, 80.0 * GIB),
                g.kai_share("u", 80.0 * GIB),
                g.kai_share("u", 0.0),
            ];
            for s in shares.into_iter().flatten() {
                assert!(s > 0.0 && s <= 1.0, "{s} from {g:?}");
            }
        }
    }

    #[test]
    fn hostile_values_are_ignored_not_trusted() {
        let pod = |notes: Value| {
            json!({"metadata": {"namespace": "a", "name": "p", "uid": "u", "annotations": notes},
                   "spec": {"containers": [{"name": "c"}]}})
        };
        for notes in [
            json!({HAMI_ALLOCATED: format!("{GPU},NVIDIA,-5,25:;")}),
            json!({HAMI_ALLOCATED: format!("{GPU},NVIDIA,100,250:;")}),
            json!({HAMI_ALLOCATED: "not-a-gpu,NVIDIA,100,25:;"}),
            json!({KAI_FRACTION: "-0.5"}),
            json!({KAI_FRACTION: "NaN"}),
            json!({KAI_MEMORY: "lots"}),
        ] {
            let g = Grants::from_objects(Some(&hami_node()), &[pod(notes.clone())], &[], &[]);
            assert_eq!(
                g.hami_share(("a", "p", "c"), GPU, 80.0 * GIB),
                None,
                "{notes}"
            );
            assert_eq!(g.kai_share("u", 80.0 * GIB), None, "{notes}");
        }
        // More than a GPU is capped at the GPU.
        let g = Grants::from_objects(None, &[pod(json!({KAI_FRACTION: "3"}))], &[], &[]);
        assert_eq!(g.kai_share("u", 80.0 * GIB), Some(1.0));
    }
}
