//! Which pod holds which device: the kubelet's PodResources API (`List` over its Unix socket,
//! default `/var/lib/kubelet/pod-resources/kubelet.sock`) says which container was given which
//! device ids — GPU UUIDs, MIG device UUIDs, and time-slicing replicas as `GPU-…::N`.
//! PodResources names pods but gives no pod UID, while cgroups give only the UID; the kubelet's
//! pod directory (`/var/lib/kubelet/pods/<uid>/`) joins the two: its `etc-hosts` names the pod
//! and the projected service-account volume holds the namespace.
//!
//! The agent needs read access to the socket and (read-only) to the pods directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
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
}

/// Devices to holders, and pods to UIDs.
#[derive(Debug, Clone, Default)]
pub struct Assignments {
    /// Keyed by GPU UUID or MIG device UUID (replica suffix removed).
    pub by_device: HashMap<String, Vec<Holder>>,
    pub uid_by_pod: HashMap<(String, String), String>,
    pub pod_by_uid: HashMap<String, (String, String)>,
}

/// Splits a device id into the device UUID and the replica: `GPU-x::3` → (`GPU-x`, 3).
pub fn split_replica(id: &str) -> (&str, Option<u32>) {
    match id.rsplit_once("::") {
        Some((dev, n)) => match n.parse() {
            Ok(n) => (dev, Some(n)),
            Err(_) => (id, None),
        },
        None => (id, None),
    }
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
                            });
                    }
                }
            }
        }
        if let Some(dir) = pods_dir {
            for (uid, name, namespace) in pod_directory(dir) {
                let namespace = namespace.or_else(|| {
                    // Without the namespace file, a pod name that is unique on the node will do.
                    let mut matches = pods.iter().filter(|p| p.name == name);
                    let first = matches.next()?;
                    matches.next().is_none().then(|| first.namespace.clone())
                });
                if let Some(ns) = namespace {
                    out.uid_by_pod
                        .insert((ns.clone(), name.clone()), uid.clone());
                    out.pod_by_uid.insert(uid, (ns, name));
                }
            }
        }
        out
    }
}

/// (uid, pod name, namespace) for every pod directory the kubelet keeps.
fn pod_directory(dir: &Path) -> Vec<(String, String, Option<String>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let uid = e.file_name().to_string_lossy().into_owned();
        let base: PathBuf = e.path();
        let Some(name) = std::fs::read_to_string(base.join("etc-hosts"))
            .ok()
            .and_then(|t| pod_name_from_hosts(&t))
        else {
            continue;
        };
        let namespace = std::fs::read_dir(base.join("volumes/kubernetes.io~projected"))
            .ok()
            .and_then(|vols| {
                vols.flatten()
                    .find_map(|v| std::fs::read_to_string(v.path().join("namespace")).ok())
            })
            .map(|ns| ns.trim().to_owned())
            .filter(|ns| !ns.is_empty());
        out.push((uid, name, namespace));
    }
    out
}

/// The pod's own entry is the last line of a kubelet-managed hosts file: `<ip> <hostname…>`.
fn pod_name_from_hosts(text: &str) -> Option<String> {
    if !text.starts_with("# Kubernetes-managed hosts file") {
        return None;
    }
    let line = text.lines().rev().find(|l| {
        let l = l.trim();
        !l.is_empty() && !l.starts_with('#') && !l.contains("localhost") && !l.contains("ip6-")
    })?;
    // With a subdomain the line reads "<ip> <fqdn> <hostname>"; the last word is the name.
    line.split_whitespace().last().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_split_off() {
        assert_eq!(split_replica("GPU-abc::3"), ("GPU-abc", Some(3)));
        assert_eq!(split_replica("GPU-abc"), ("GPU-abc", None));
        assert_eq!(split_replica("MIG-1234"), ("MIG-1234", None));
        assert_eq!(split_replica("odd::x"), ("odd::x", None));
    }

    #[test]
    fn hosts_files_name_the_pod() {
        let hosts = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n10.244.1.7\ttrainer-0.trainers.ml.svc.cluster.local\ttrainer-0\n";
        assert_eq!(pod_name_from_hosts(hosts).as_deref(), Some("trainer-0"));
        assert_eq!(
            pod_name_from_hosts("127.0.0.1 localhost\n"),
            None,
            "host network pods use the node's file"
        );
    }
}
