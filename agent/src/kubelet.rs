//! Which pod holds which device: the kubelet's PodResources API (`List` over its Unix socket,
//! default `/var/lib/kubelet/pod-resources/kubelet.sock`) says which container was given which
//! device ids — GPU UUIDs, MIG device UUIDs, and time-slicing replicas as `GPU-…::N`.
//! PodResources names pods but gives no pod UID, while cgroups give only the UID. The two are
//! joined by the devices a UID's processes run on and their `HOSTNAME` ([`join_by_devices`]),
//! or, when given (`--kubelet-pods-dir`), by the kubelet's pod directories
//! ([`crate::kubelet_pods`]); the API server's pods, where the agent reads them, name their
//! UIDs over both.
//!
//! Devices come from device plugins (`devices`: resource names `nvidia.com/…`, ids as GPU or MIG
//! UUIDs, `GPU-…::N` for NVIDIA time-slicing replicas and `GPU-…-N` for HAMi/vGPU splits) or
//! from Dynamic Resource Allocation (`dynamic_resources`: NVIDIA's DRA driver `gpu.nvidia.com`
//! names a whole GPU `gpu-<index>` and a MIG device
//! `gpu-<index>-mig-<profile id>-<placement start>-<placement size>`, which the agent resolves
//! against the node's inventory; several claims sharing one device split it like replicas).
//!
//! The agent needs read access to the socket.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

/// The messages of `k8s.io/kubelet/pkg/apis/podresources/v1` that `List` uses, written from
/// the API definition (field numbers as there; fields not needed here are left out, which
/// protobuf decoding skips).
pub mod v1 {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodResourcesRequest {}

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodResourcesResponse {
        #[prost(message, repeated, tag = "1")]
        pub pod_resources: Vec<PodResources>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodResources {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub namespace: String,
        #[prost(message, repeated, tag = "3")]
        pub containers: Vec<ContainerResources>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerResources {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, repeated, tag = "2")]
        pub devices: Vec<ContainerDevices>,
        #[prost(message, repeated, tag = "5")]
        pub dynamic_resources: Vec<DynamicResource>,
    }

    /// Devices given to a container through a DRA resource claim.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DynamicResource {
        #[prost(string, tag = "2")]
        pub claim_name: String,
        #[prost(string, tag = "3")]
        pub claim_namespace: String,
        #[prost(message, repeated, tag = "4")]
        pub claim_resources: Vec<ClaimResource>,
    }

    /// One allocated device: driver, pool and device name identify it.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ClaimResource {
        #[prost(string, tag = "2")]
        pub driver_name: String,
        #[prost(string, tag = "3")]
        pub pool_name: String,
        #[prost(string, tag = "4")]
        pub device_name: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerDevices {
        #[prost(string, tag = "1")]
        pub resource_name: String,
        #[prost(string, repeated, tag = "2")]
        pub device_ids: Vec<String>,
    }

    /// The gRPC method path.
    pub const LIST: &str = "/v1.PodResourcesLister/List";
}

/// Default locations on a node.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
pub const DEFAULT_PODS_DIR: &str = "/var/lib/kubelet/pods";

/// Asks the kubelet which containers hold which devices.
pub async fn list(socket: &Path) -> anyhow::Result<Vec<v1::PodResources>> {
    let path = socket.to_owned();
    let channel = tonic::transport::Endpoint::try_from("http://kubelet.invalid")?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))
            }
        }))
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot reach the kubelet's pod-resources socket {}: {e}",
                socket.display()
            )
        })?;
    let mut client = tonic::client::Grpc::new(channel);
    client
        .ready()
        .await
        .map_err(|e| anyhow::anyhow!("pod-resources socket not ready: {e}"))?;
    let codec = tonic_prost::ProstCodec::<v1::ListPodResourcesRequest, v1::ListPodResourcesResponse>::default();
    let resp = client
        .unary(
            tonic::Request::new(v1::ListPodResourcesRequest {}),
            tonic::codegen::http::uri::PathAndQuery::from_static(v1::LIST),
            codec,
        )
        .await
        .map_err(|s| {
            anyhow::anyhow!(
                "pod-resources List failed: {} ({:?})",
                s.message(),
                s.code()
            )
        })?;
    Ok(resp.into_inner().pod_resources)
}

/// One container's claim on a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The time-slicing replica (`::N`), if the device id had one.
    pub replica: Option<u32>,
    /// The DRA claim it holds the device through, if any: what the claim consumed of the
    /// device is its share ([`crate::grants`]).
    pub claim: Option<crate::grants::ClaimDevice>,
}

/// Devices to holders, and pods to UIDs.
#[derive(Debug, Clone, Default)]
pub struct Assignments {
    /// Keyed by GPU UUID or MIG device UUID (replica suffix removed).
    pub by_device: HashMap<String, Vec<Holder>>,
    /// Devices of NVIDIA's DRA driver by (pool, device name); resolved by
    /// [`Assignments::resolved`].
    pub by_dra: HashMap<(String, String), Vec<Holder>>,
    /// What the node's sharing mechanisms granted, when the agent reads the API server.
    pub grants: Option<crate::grants::Grants>,
    pub uid_by_pod: HashMap<(String, String), String>,
    pub pod_by_uid: HashMap<String, (String, String)>,
}

pub use crate::grants::NVIDIA_DRA_DRIVER;

/// A device of NVIDIA's DRA driver, as its name gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DraDevice {
    /// `gpu-<index>`: the whole GPU of that NVML index.
    Gpu { index: u32 },
    /// `gpu-<index>-mig-<profile id>-<start>-<size>`: the MIG device at that placement.
    Mig { parent: u32, start: u32, size: u32 },
}

impl DraDevice {
    /// Parses a device name of the NVIDIA DRA driver; other names are not GPUs it knows.
    pub fn parse(name: &str) -> Option<DraDevice> {
        let rest = name.strip_prefix("gpu-")?;
        let num = |s: &str| -> Option<u32> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        };
        match rest.split_once("-mig-") {
            None => Some(DraDevice::Gpu { index: num(rest)? }),
            Some((parent, mig)) => {
                let mut parts = mig.split('-');
                let (_profile, start, size) = (
                    num(parts.next()?)?,
                    num(parts.next()?)?,
                    num(parts.next()?)?,
                );
                if parts.next().is_some() {
                    return None;
                }
                Some(DraDevice::Mig {
                    parent: num(parent)?,
                    start,
                    size,
                })
            }
        }
    }

    /// The GPU or MIG device UUID it stands for on a node with these GPUs.
    pub fn resolve<'a>(&self, gpus: &'a [model::GpuInfo]) -> Option<&'a str> {
        match *self {
            DraDevice::Gpu { index } => gpus
                .iter()
                .find(|g| g.index == index)
                .map(|g| g.uuid.as_str()),
            DraDevice::Mig {
                parent,
                start,
                size,
            } => gpus
                .iter()
                .find(|g| g.index == parent)?
                .mig_instances
                .iter()
                .find(|m| m.placement_start == Some(start) && m.placement_size == Some(size))?
                .uuid
                .as_deref(),
        }
    }
}

/// Length of an NVML GPU or MIG UUID: `GPU-` or `MIG-` and 36 characters.
const UUID_LEN: usize = 40;

/// Splits a device id into the device UUID and the replica: `GPU-x::3` → (`GPU-x`, 3) for
/// NVIDIA's time-slicing, and a full UUID followed by `-3` → (the UUID, 3) for HAMi and vGPU
/// device plugins, which split a GPU into numbered virtual devices.
pub fn split_replica(id: &str) -> (&str, Option<u32>) {
    if let Some((dev, n)) = id.rsplit_once("::") {
        return match n.parse() {
            Ok(n) => (dev, Some(n)),
            Err(_) => (id, None),
        };
    }
    if id.len() > UUID_LEN + 1
        && (id.starts_with("GPU-") || id.starts_with("MIG-"))
        && id.as_bytes()[UUID_LEN] == b'-'
        && id[..UUID_LEN]
            .bytes()
            .skip(4)
            .all(|b| b.is_ascii_hexdigit() || b == b'-')
        && let Ok(n) = id[UUID_LEN + 1..].parse()
    {
        return (&id[..UUID_LEN], Some(n));
    }
    (id, None)
}

impl Assignments {
    /// Builds the map from a List answer (NVIDIA resources only) and the pods directory.
    pub fn new(pods: &[v1::PodResources], pods_dir: Option<&Path>) -> Assignments {
        let mut out = Assignments::default();
        for p in pods {
            for c in &p.containers {
                for d in c
                    .devices
                    .iter()
                    .filter(|d| d.resource_name.starts_with("nvidia.com/"))
                {
                    for id in &d.device_ids {
                        let (dev, replica) = split_replica(id);
                        out.by_device
                            .entry(dev.to_owned())
                            .or_default()
                            .push(Holder {
                                namespace: p.namespace.clone(),
                                pod: p.name.clone(),
                                container: c.name.clone(),
                                replica,
                                claim: None,
                            });
                    }
                }
                for (d, r) in c.dynamic_resources.iter().flat_map(|d| {
                    d.claim_resources
                        .iter()
                        .filter(|r| r.driver_name == NVIDIA_DRA_DRIVER)
                        .map(move |r| (d, r))
                }) {
                    let key = (r.pool_name.clone(), r.device_name.clone());
                    let holders = out.by_dra.entry(key).or_default();
                    let holder = Holder {
                        namespace: p.namespace.clone(),
                        pod: p.name.clone(),
                        container: c.name.clone(),
                        replica: None,
                        claim: Some(crate::grants::ClaimDevice {
                            namespace: d.claim_namespace.clone(),
                            claim: d.claim_name.clone(),
                            pool: r.pool_name.clone(),
                            device: r.device_name.clone(),
                        }),
                    };
                    // One container may list a device once per claim; it holds it once.
                    let same = |h: &Holder| {
                        (&h.namespace, &h.pod, &h.container)
                            == (&holder.namespace, &holder.pod, &holder.container)
                    };
                    if !holders.iter().any(same) {
                        holders.push(holder);
                    }
                }
            }
        }
        if let Some(dir) = pods_dir {
            let unique_namespace = |name: &str| {
                let mut matches = pods.iter().filter(|p| p.name == name);
                let first = matches.next()?;
                matches.next().is_none().then(|| first.namespace.clone())
            };
            for (uid, pod) in crate::kubelet_pods::named_pods(dir, unique_namespace) {
                out.uid_by_pod.insert(pod.clone(), uid.clone());
                out.pod_by_uid.insert(uid, pod);
            }
        }
        out
    }
}

impl Assignments {
    /// These assignments with what the node's mechanisms granted. The API server's pods name
    /// their UIDs over what the kubelet's directories say: a pod's own record, where a
    /// directory's `etc-hosts` is its container's to rewrite.
    pub fn with_grants(mut self, grants: crate::grants::Grants) -> Assignments {
        for (uid, pod) in &grants.pods {
            if let Some(was) = self.pod_by_uid.insert(uid.clone(), pod.clone())
                && &was != pod
                && self.uid_by_pod.get(&was) == Some(uid)
            {
                self.uid_by_pod.remove(&was);
            }
            if let Some(other) = self.uid_by_pod.insert(pod.clone(), uid.clone())
                && &other != uid
                && self.pod_by_uid.get(&other) == Some(pod)
            {
                self.pod_by_uid.remove(&other);
            }
        }
        self.grants = Some(grants);
        self
    }

    /// Every holder by GPU or MIG device UUID, with the DRA devices resolved — through the
    /// node's ResourceSlices when the agent reads them, else by the NVIDIA driver's device
    /// names — against the node's GPUs. A DRA device held by several containers (a shared
    /// claim, or claims sharing it) is split among them as numbered replicas, as time-slicing
    /// would, unless what each claim consumed says otherwise ([`crate::allocation`]).
    pub fn resolved(&self, gpus: &[model::GpuInfo]) -> HashMap<String, Vec<Holder>> {
        let mut out = self.by_device.clone();
        let known = |uuid: &str| {
            gpus.iter().any(|g| {
                g.uuid == uuid
                    || g.mig_instances
                        .iter()
                        .any(|m| m.uuid.as_deref() == Some(uuid))
            })
        };
        for ((pool, name), holders) in &self.by_dra {
            let by_slice = self.grants.as_ref().and_then(|g| g.resolve(pool, name));
            let uuid = by_slice
                .filter(|u| known(u))
                .or_else(|| DraDevice::parse(name)?.resolve(gpus));
            let Some(uuid) = uuid else {
                continue;
            };
            let shared = holders.len() > 1;
            let entry = out.entry(uuid.to_owned()).or_default();
            for (i, h) in holders.iter().enumerate() {
                let mut h = h.clone();
                if shared {
                    h.replica = Some(i as u32);
                }
                entry.push(h);
            }
        }
        out
    }
}

/// One process's evidence for the pod-UID join: its pod UID (from its cgroup), the devices it
/// runs on (its GPU, and its MIG device) and its `HOSTNAME` variable, when readable.
#[derive(Debug, Clone)]
pub struct ProcessEvidence<'a> {
    pub pod_uid: &'a str,
    pub devices: Vec<&'a str>,
    pub hostname: Option<String>,
}

/// A process's `HOSTNAME` as the join keeps it: at most 254 bytes. Its process may set it to
/// 128 KiB; no pod name (63 characters as a host name) nor node name (253) is longer, so the
/// cut one still names neither, and a node's processes cost the agent no more than that each.
pub fn kept_hostname(mut name: String) -> String {
    name.truncate(model::names::head(&name, 254).len());
    name
}

/// Joins pod UIDs (from processes' cgroups) to the pods the kubelet names, without the
/// kubelet's pod directories: a UID belongs to a pod that holds every device its processes
/// run on. Where one pod is left it is that pod, unless the process says another HOSTNAME; where
/// several are left (time-slicing replicas of one GPU), the one whose name is the HOSTNAME
/// decides. A pod is given to one UID at most: two UIDs that point at the same pod are both
/// left unjoined, so a process that bypasses the device plugin is never charged to the pod
/// that holds the GPU. A HOSTNAME equal to the node's name (host network) says nothing.
pub fn join_by_devices(
    evidence: &[ProcessEvidence],
    held: &HashMap<String, Vec<Holder>>,
    node: &str,
) -> HashMap<String, (String, String)> {
    use std::collections::{BTreeMap, BTreeSet};
    // Per UID: the pods holding all its devices, and the host names its processes report.
    let mut candidates: BTreeMap<&str, Option<BTreeSet<(&str, &str)>>> = BTreeMap::new();
    let mut names: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in evidence {
        let holders: BTreeSet<(&str, &str)> = e
            .devices
            .iter()
            .flat_map(|d| held.get(*d).map(Vec::as_slice).unwrap_or_default())
            .map(|h| (h.namespace.as_str(), h.pod.as_str()))
            .collect();
        let c = candidates.entry(e.pod_uid).or_default();
        *c = Some(match c.take() {
            None => holders,
            Some(before) => before.intersection(&holders).copied().collect(),
        });
        if let Some(h) = e
            .hostname
            .as_deref()
            .filter(|h| !h.is_empty() && *h != node)
        {
            names.entry(e.pod_uid).or_default().insert(h);
        }
    }
    // A pod's name as its HOSTNAME shows it: the kubelet cuts host names at 63 characters.
    let named = |pod: &str, hostnames: &BTreeSet<&str>| {
        let cut = pod.get(..63).unwrap_or(pod).trim_end_matches(['-', '.']);
        hostnames.len() == 1 && hostnames.contains(cut)
    };
    let mut chosen: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    for (uid, c) in &candidates {
        let c = c.as_ref().expect("set above");
        let empty = BTreeSet::new();
        let hostnames = names.get(uid).unwrap_or(&empty);
        let pick = if c.len() == 1 {
            let only = *c.iter().next().expect("one");
            (hostnames.is_empty() || named(only.1, hostnames)).then_some(only)
        } else {
            let mut by_name = c.iter().filter(|(_, pod)| named(pod, hostnames));
            match (by_name.next(), by_name.next()) {
                (Some(one), None) => Some(*one),
                _ => None,
            }
        };
        if let Some(p) = pick {
            chosen.insert(uid, p);
        }
    }
    let mut claims: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for p in chosen.values() {
        *claims.entry(*p).or_default() += 1;
    }
    chosen
        .into_iter()
        .filter(|(_, p)| claims[p] == 1)
        .map(|(uid, (ns, pod))| (uid.to_owned(), (ns.to_owned(), pod.to_owned())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (message, field) → (number, repeated, type) of every field in `text`: the `v1` module's
    /// prost attributes when `rust`, the kubelet's proto3 declarations otherwise.
    fn fields(
        text: &str,
        rust: bool,
    ) -> std::collections::BTreeMap<(String, String), (u32, bool, String)> {
        let mut out = std::collections::BTreeMap::new();
        let mut message = String::new();
        let mut pending: Option<(u32, bool, String)> = None;
        for line in text.lines().map(str::trim) {
            if line.starts_with("//") {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["pub", "struct", name, ..] if rust => message = name.to_string(),
                ["message", name, ..] if !rust => message = name.to_string(),
                _ if rust && line.starts_with("#[prost(") => {
                    let inner = &line["#[prost(".len()..line.len() - 2];
                    let parts: Vec<&str> = inner.split(", ").collect();
                    let tag = parts
                        .iter()
                        .find_map(|p| p.strip_prefix("tag = \""))
                        .map(|t| t.trim_end_matches('"').parse().unwrap())
                        .unwrap();
                    pending = Some((tag, parts.contains(&"repeated"), parts[0].to_owned()));
                }
                ["pub", name, ty, ..] if rust && pending.is_some() => {
                    let (tag, repeated, kind) = pending.take().unwrap();
                    let name = name.trim_end_matches(':').to_owned();
                    // A message field names its type; a scalar its proto scalar.
                    let ty = if kind == "message" {
                        ty.trim_start_matches("Vec<")
                            .trim_end_matches(">,")
                            .to_owned()
                    } else {
                        kind
                    };
                    out.insert((message.clone(), name), (tag, repeated, ty));
                }
                [.., "=", number] if !rust && !message.is_empty() => {
                    let number: u32 = number.trim_end_matches(';').parse().unwrap();
                    let (repeated, ty, name) = match words[0] {
                        "repeated" => (true, words[1], words[2]),
                        "optional" => (false, words[1], words[2]),
                        ty => (false, ty, words[1]),
                    };
                    out.insert(
                        (message.clone(), name.to_owned()),
                        (number, repeated, ty.to_owned()),
                    );
                }
                _ => {}
            }
        }
        out
    }

    /// The messages `v1` declares by hand agree with the kubelet's own definition
    /// (agent/proto/podresources-v1.proto): every declared field has its number, cardinality
    /// and type there.
    #[test]
    fn the_declared_messages_match_the_kubelets_definition() {
        let source = include_str!("kubelet.rs");
        let module = &source[source.find("pub mod v1 {").unwrap()..];
        let module = &module[..module.find("\n}\n").unwrap()];
        let ours = fields(module, true);
        let theirs = fields(include_str!("../proto/podresources-v1.proto"), false);
        assert!(ours.len() >= 12, "the module's fields were read: {ours:?}");
        for (key, field) in &ours {
            assert_eq!(theirs.get(key), Some(field), "{key:?}");
        }
    }

    #[test]
    fn replicas_are_split_off() {
        assert_eq!(split_replica("GPU-abc::3"), ("GPU-abc", Some(3)));
        assert_eq!(split_replica("GPU-abc"), ("GPU-abc", None));
        assert_eq!(split_replica("MIG-1234"), ("MIG-1234", None));
        assert_eq!(split_replica("odd::x"), ("odd::x", None));
        // HAMi / vGPU device plugins: the UUID, a dash, the split number.
        let uuid = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec";
        assert_eq!(split_replica(&format!("{uuid}-7")), (uuid, Some(7)));
        assert_eq!(
            split_replica(uuid),
            (uuid, None),
            "a plain UUID is not split"
        );
        assert_eq!(
            split_replica(&format!("{uuid}-x")),
            (format!("{uuid}-x").as_str(), None)
        );
    }

    #[test]
    fn nvidia_dra_device_names_parse_and_resolve_against_the_inventory() {
        assert_eq!(DraDevice::parse("gpu-3"), Some(DraDevice::Gpu { index: 3 }));
        assert_eq!(
            DraDevice::parse("gpu-0-mig-9-4-4"),
            Some(DraDevice::Mig {
                parent: 0,
                start: 4,
                size: 4
            })
        );
        for bad in [
            "gpu-",
            "gpu-x",
            "gpu-1-mig-9-4",
            "gpu-1-mig-9-4-4-1",
            "nic-0",
            "gpu--1",
        ] {
            assert_eq!(DraDevice::parse(bad), None, "{bad}");
        }
        let gpus: Vec<model::GpuInfo> = serde_json::from_value(serde_json::json!([
            {"uuid": "GPU-a", "index": 0, "model": "A100", "memory_total_bytes": 1, "mig_enabled": true,
             "mig_instances": [
                {"gi_id": 1, "ci_id": 0, "profile": "3g.40gb", "placement_start": 4, "placement_size": 4,
                 "memory_total_bytes": 1, "uuid": "MIG-b"}]},
            {"uuid": "GPU-c", "index": 1, "model": "A100", "memory_total_bytes": 1}
        ]))
        .unwrap();
        let holder = |pod: &str, device: &str| Holder {
            namespace: "ml".into(),
            pod: pod.into(),
            container: "main".into(),
            replica: None,
            claim: Some(crate::grants::ClaimDevice {
                namespace: "ml".into(),
                claim: "gpu".into(),
                pool: "node-1".into(),
                device: device.into(),
            }),
        };
        let claim = |devices: &[&str]| v1::ContainerResources {
            name: "main".into(),
            devices: vec![],
            dynamic_resources: vec![v1::DynamicResource {
                claim_name: "gpu".into(),
                claim_namespace: "ml".into(),
                claim_resources: devices
                    .iter()
                    .map(|d| v1::ClaimResource {
                        driver_name: NVIDIA_DRA_DRIVER.into(),
                        pool_name: "node-1".into(),
                        device_name: d.to_string(),
                    })
                    .collect(),
            }],
        };
        let pod = |name: &str, devices: &[&str]| v1::PodResources {
            name: name.into(),
            namespace: "ml".into(),
            containers: vec![claim(devices)],
        };
        let a = Assignments::new(
            &[
                pod("mig-user", &["gpu-0-mig-9-4-4"]),
                pod("left", &["gpu-1"]),
                pod("right", &["gpu-1"]),
                pod("gone", &["gpu-7"]),
            ],
            None,
        );
        let r = a.resolved(&gpus);
        assert_eq!(r["MIG-b"], [holder("mig-user", "gpu-0-mig-9-4-4")]);
        let shared: Vec<Option<u32>> = r["GPU-c"].iter().map(|h| h.replica).collect();
        assert_eq!(shared.len(), 2);
        assert!(
            shared.contains(&Some(0)) && shared.contains(&Some(1)),
            "{shared:?}"
        );
        assert_eq!(r.len(), 2, "a device the node does not have is nobody's");
    }

    /// A DRA device whose name says nothing the agent can read resolves through the node's
    /// ResourceSlices (the device's `uuid` attribute) — but only to a GPU the node has.
    #[test]
    fn dra_devices_resolve_through_the_nodes_resource_slices() {
        let gpus: Vec<model::GpuInfo> = serde_json::from_value(serde_json::json!([
            {"uuid": "GPU-c", "index": 1, "model": "A100", "memory_total_bytes": 1}
        ]))
        .unwrap();
        let pod = |name: &str, device: &str| v1::PodResources {
            name: name.into(),
            namespace: "ml".into(),
            containers: vec![v1::ContainerResources {
                name: "main".into(),
                devices: vec![],
                dynamic_resources: vec![v1::DynamicResource {
                    claim_name: name.into(),
                    claim_namespace: "ml".into(),
                    claim_resources: vec![v1::ClaimResource {
                        driver_name: NVIDIA_DRA_DRIVER.into(),
                        pool_name: "node-1".into(),
                        device_name: device.into(),
                    }],
                }],
            }],
        };
        let slice = serde_json::json!({"spec": {"driver": NVIDIA_DRA_DRIVER,
        "pool": {"name": "node-1"},
        "devices": [
            {"name": "a100-shared", "attributes": {"uuid": {"string": "GPU-c"}}},
            {"name": "elsewhere", "attributes": {"uuid": {"string": "GPU-zz"}}}
        ]}});
        let a =
            Assignments::new(&[pod("p", "a100-shared"), pod("q", "elsewhere")], None).with_grants(
                crate::grants::Grants::from_objects(None, &[], &[slice], &[]),
            );
        let r = a.resolved(&gpus);
        let holders: Vec<&str> = r["GPU-c"].iter().map(|h| h.pod.as_str()).collect();
        assert_eq!(holders, ["p"]);
        assert_eq!(
            r.len(),
            1,
            "a slice naming a GPU the node lacks resolves nothing"
        );
    }

    #[test]
    fn pod_uids_join_by_device_and_hostname_and_never_to_a_pod_twice() {
        let h = |ns: &str, pod: &str| Holder {
            namespace: ns.into(),
            pod: pod.into(),
            container: "main".into(),
            replica: None,
            claim: None,
        };
        let held: HashMap<String, Vec<Holder>> = HashMap::from([
            ("GPU-whole".to_owned(), vec![h("ml", "trainer-0")]),
            ("GPU-shared".to_owned(), vec![h("ml", "a"), h("web", "b")]),
            ("MIG-1".to_owned(), vec![h("ml", "finetune-0")]),
            ("GPU-taken".to_owned(), vec![h("ml", "owner")]),
            (
                "GPU-long".to_owned(),
                vec![h("ml", &format!("{}-x", "n".repeat(62)))],
            ),
        ]);
        let e = |uid: &'static str, devices: &[&'static str], host: Option<&str>| ProcessEvidence {
            pod_uid: uid,
            devices: devices.to_vec(),
            hostname: host.map(str::to_owned),
        };
        let joined = join_by_devices(
            &[
                // The one holder of a whole GPU, with or without a readable HOSTNAME.
                e("u-trainer", &["GPU-whole"], None),
                // Two replicas of one GPU: HOSTNAME tells them apart.
                e("u-a", &["GPU-shared"], Some("a")),
                e("u-b", &["GPU-shared"], Some("b")),
                // A MIG instance: its MIG device's holder.
                e("u-ft", &["GPU-mig-parent", "MIG-1"], Some("finetune-0")),
                // A pod bypassing the device plugin on a GPU another pod holds, and the
                // holder itself: neither is charged to the other.
                e("u-sneaky", &["GPU-taken"], Some("sneaky")),
                e("u-owner", &["GPU-taken"], None),
                // Host network: the node's name says nothing.
                e("u-long", &["GPU-long"], Some("node-1")),
                // Nobody holds this device.
                e("u-none", &["GPU-free"], Some("x")),
            ],
            &held,
            "node-1",
        );
        let get = |u: &str| joined.get(u).map(|(ns, p)| format!("{ns}/{p}"));
        assert_eq!(get("u-trainer").as_deref(), Some("ml/trainer-0"));
        assert_eq!(get("u-a").as_deref(), Some("ml/a"));
        assert_eq!(get("u-b").as_deref(), Some("web/b"));
        assert_eq!(get("u-ft").as_deref(), Some("ml/finetune-0"));
        assert_eq!(get("u-sneaky"), None, "its HOSTNAME is not the holder's");
        assert_eq!(get("u-owner").as_deref(), Some("ml/owner"));
        // Two UIDs that both point at one pod: neither.
        let two = join_by_devices(
            &[
                e("u-1", &["GPU-taken"], None),
                e("u-2", &["GPU-taken"], None),
            ],
            &held,
            "node-1",
        );
        assert!(two.is_empty(), "{two:?}");
        assert!(get("u-long").is_some());
        assert_eq!(get("u-none"), None);
        // Two replicas without HOSTNAME: ambiguous, left alone.
        let joined = join_by_devices(
            &[
                e("u-a", &["GPU-shared"], None),
                e("u-b", &["GPU-shared"], None),
            ],
            &held,
            "node-1",
        );
        assert!(joined.is_empty(), "{joined:?}");
        // A name cut at 63 characters by the kubelet, trailing dash trimmed.
        let long_host = "n".repeat(62);
        let joined = join_by_devices(
            &[e("u-l", &["GPU-long"], Some(&long_host))],
            &held,
            "node-1",
        );
        assert!(joined.contains_key("u-l"));
    }

    /// The API server's pods name their UIDs over what the pod directories say (an
    /// `etc-hosts` is its container's to rewrite).
    #[test]
    fn the_api_servers_pods_name_their_uids_over_the_pod_directories() {
        use crate::kubelet_pods::tests::{hosts, write_pod};
        let dir = crate::scratch::fresh_dir("pods-dir-api").unwrap();
        write_pod(&dir, "u-liar", &hosts("api-0"), "web");
        write_pod(&dir, "u-api", &hosts("api-1"), "web");
        let a = Assignments::new(&[], Some(&dir));
        let api0 = ("web".to_owned(), "api-0".to_owned());
        assert_eq!(a.pod_by_uid.get("u-liar"), Some(&api0));
        let pod = |uid: &str, name: &str| {
            serde_json::json!({"metadata": {"uid": uid, "namespace": "web", "name": name},
                "spec": {"containers": [{"name": "main"}]}})
        };
        let a = a.with_grants(crate::grants::Grants::from_objects(
            None,
            &[pod("u-liar", "batch-7"), pod("u-api", "api-0")],
            &[],
            &[],
        ));
        assert_eq!(
            a.pod_by_uid.get("u-liar"),
            Some(&("web".to_owned(), "batch-7".to_owned()))
        );
        assert_eq!(a.pod_by_uid.get("u-api"), Some(&api0));
        assert_eq!(a.uid_by_pod.get(&api0).map(String::as_str), Some("u-api"));
        let api1 = ("web".to_owned(), "api-1".to_owned());
        assert_eq!(a.uid_by_pod.get(&api1), None, "api-1 was u-api's word only");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A HOSTNAME longer than any pod's or node's name is kept cut, and still names neither:
    /// the lone holder of the GPU is refused as for any other name.
    #[test]
    fn an_overlong_hostname_is_kept_cut_and_names_no_pod() {
        let long = format!("{}é{}", "n".repeat(253), "x".repeat(100_000));
        let kept = kept_hostname(long.clone());
        assert_eq!(kept.len(), 253, "cut before the two-byte character");
        assert!(long.starts_with(&kept));
        let node = "n".repeat(253);
        let held = HashMap::from([(
            "GPU-1".to_owned(),
            vec![Holder {
                namespace: "ml".into(),
                pod: "trainer-0".into(),
                container: "main".into(),
                replica: None,
                claim: None,
            }],
        )]);
        let evidence = |hostname: &str| ProcessEvidence {
            pod_uid: "u-1",
            devices: vec!["GPU-1"],
            hostname: Some(kept_hostname(hostname.to_owned())),
        };
        let other = format!("{}{}", "n".repeat(253), "x");
        assert!(join_by_devices(&[evidence(&other)], &held, &node).is_empty());
        assert!(join_by_devices(&[evidence(&node)], &held, &node).contains_key("u-1"));
    }
}
