//! Pod attribution with a stand-in kubelet: an in-process gRPC server on a Unix socket that
//! answers PodResources `List` with the real message shapes, a fixture pods directory, the
//! fake NVML and a fixture proc tree. Not a kubelet: a faithful stand-in for its socket.

use std::path::PathBuf;
use std::task::{Context, Poll};

use agent::kubelet::v1;
use serde_json::Value;

/// Answers `/v1.PodResourcesLister/List` with a fixed response.
#[derive(Clone)]
struct StandInKubelet(v1::ListPodResourcesResponse);

#[derive(Clone)]
struct List(v1::ListPodResourcesResponse);

impl tonic::server::UnaryService<v1::ListPodResourcesRequest> for List {
    type Response = v1::ListPodResourcesResponse;
    type Future = std::future::Ready<Result<tonic::Response<Self::Response>, tonic::Status>>;
    fn call(&mut self, _: tonic::Request<v1::ListPodResourcesRequest>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(self.0.clone())))
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for StandInKubelet {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let answer = self.0.clone();
        Box::pin(async move {
            if req.uri().path() == v1::LIST {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                Ok(grpc.unary(List(answer), req).await)
            } else {
                Ok(tonic::Status::unimplemented("only List").into_http())
            }
        })
    }
}

impl tonic::server::NamedService for StandInKubelet {
    const NAME: &'static str = "v1.PodResourcesLister";
}

fn container(name: &str, resource: &str, ids: &[&str]) -> v1::ContainerResources {
    v1::ContainerResources {
        name: name.into(),
        devices: vec![v1::ContainerDevices {
            resource_name: resource.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
        }],
        dynamic_resources: vec![],
    }
}

/// A container given a device by NVIDIA's DRA driver through a resource claim.
fn dra_container(name: &str, device: &str) -> v1::ContainerResources {
    v1::ContainerResources {
        name: name.into(),
        devices: vec![],
        dynamic_resources: vec![v1::DynamicResource {
            claim_name: format!("{name}-gpu"),
            claim_namespace: "ml".into(),
            claim_resources: vec![v1::ClaimResource {
                driver_name: "gpu.nvidia.com".into(),
                pool_name: "k8s-node-1".into(),
                device_name: device.into(),
            }],
        }],
    }
}

fn pod(ns: &str, name: &str, containers: Vec<v1::ContainerResources>) -> v1::PodResources {
    v1::PodResources {
        name: name.into(),
        namespace: ns.into(),
        containers,
    }
}

/// Serves `answer` as the kubelet's PodResources `List` on a Unix socket at `socket`.
fn serve_kubelet(socket: &std::path::Path, answer: v1::ListPodResourcesResponse) {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(StandInKubelet(answer))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
}

/// `gpulens-agent sample --once --format json` on the fake NVML's k8s-node fixture and the
/// fixture proc tree, with the kubelet at `socket` and `more` arguments; its JSON.
async fn sample_once(socket: &std::path::Path, more: &[std::ffi::OsString]) -> Value {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let exe = std::env::current_exe().unwrap();
    let fake = exe
        .parent()
        .and_then(|p| p.parent())
        .unwrap()
        .join("libfake_nvml.so");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpulens-agent"))
        .args([
            "sample",
            "--once",
            "--format",
            "json",
            "--node",
            "k8s-node-1",
        ])
        .arg("--nvml-lib")
        .arg(&fake)
        .arg("--proc-root")
        .arg(root.join("agent/tests/fixtures/proc"))
        .arg("--pod-resources-socket")
        .arg(socket)
        .args(more)
        .env(
            "GPULENS_FAKE_NVML_FIXTURE",
            root.join("testing/fake-nvml/fixtures/k8s-node.json"),
        )
        .env("GPULENS_LOG", "warn")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

const TS_GPU: &str = "GPU-a1b2c3d4-0000-4000-8000-00000000a100";
const IDLE_GPU: &str = "GPU-a1b2c3d4-0000-4000-8000-00000000a101";
const MIG_GPU: &str = "GPU-5b3f0c2e-8a1d-4f6b-9e27-3c1d0a9b7e41";

/// With the kubelet's pod directories (`--kubelet-pods-dir`): tenants keyed by pod UID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_get_their_devices_names_and_processes() {
    attribution(true).await;
}

/// Without them, as the Helm chart runs the agent (the directories hold every pod's secrets):
/// the UIDs of the processes' cgroups are joined to the pods by device and HOSTNAME, and the
/// tenants are keyed by pod name, allocation and processes alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_get_their_processes_without_the_kubelets_pod_directories() {
    attribution(false).await;
}

async fn attribution(pods_dir: bool) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = agent::scratch::fresh_dir(if pods_dir {
        "kubelet"
    } else {
        "kubelet-no-pods-dir"
    })
    .unwrap();
    let socket = dir.join("kubelet.sock");
    let answer = v1::ListPodResourcesResponse {
        pod_resources: vec![
            pod(
                "ml",
                "trainer-0",
                vec![container(
                    "trainer",
                    "nvidia.com/gpu",
                    &[&format!("{TS_GPU}::0")],
                )],
            ),
            pod(
                "web",
                "api-7f9c4",
                vec![container(
                    "server",
                    "nvidia.com/gpu",
                    &[&format!("{TS_GPU}::1")],
                )],
            ),
            pod(
                "ml",
                "finetune-0",
                vec![container(
                    "main",
                    "nvidia.com/mig-3g.40gb",
                    &["MIG-00000000-0000-0000-0000-000000000000"],
                )],
            ),
            pod(
                "sales",
                "reserved-demo",
                vec![container("main", "nvidia.com/gpu", &[IDLE_GPU])],
            ),
            // A MIG device through DRA: the H100 (index 0) instance placed at slice 2, size 1.
            pod(
                "ml",
                "dra-notebook",
                vec![dra_container("main", "gpu-0-mig-19-2-1")],
            ),
            // Not a GPU: ignored.
            pod(
                "kube-system",
                "dns",
                vec![container("coredns", "example.com/foo", &["x"])],
            ),
        ],
    };
    serve_kubelet(&socket, answer);
    let more: Vec<std::ffi::OsString> = if pods_dir {
        vec![
            "--kubelet-pods-dir".into(),
            root.join("agent/tests/fixtures/kubelet-pods").into(),
        ]
    } else {
        vec![]
    };
    let v = sample_once(&socket, &more).await;
    let procs = v["snapshot"]["processes"].as_array().unwrap();
    let tenant_of = |pid: u64| {
        procs.iter().find(|p| p["pid"] == pid).unwrap()["tenant"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let key = |uid: &str, name: &str| {
        if pods_dir {
            format!("pod/{uid}")
        } else {
            format!("pod/{name}")
        }
    };
    assert_eq!(
        tenant_of(4101),
        key(
            "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f/trainer",
            "ml/trainer-0/trainer"
        )
    );
    assert_eq!(
        tenant_of(4104),
        key(
            "b0b0b0b0-1111-4222-8333-444455556666/server",
            "web/api-7f9c4/server"
        ),
        "the other replica of the same GPU: told apart by HOSTNAME without the directories"
    );
    assert_eq!(
        tenant_of(4103),
        key(
            "c0c0c0c0-1111-4222-8333-444455556666/main",
            "ml/finetune-0/main"
        ),
        "the MIG instance's holder"
    );
    let tenants = v["tenants"].as_array().unwrap();
    let t = tenants.iter().find(|t| t["pod"] == "trainer-0").unwrap();
    assert_eq!(
        (t["namespace"].as_str(), t["container"].as_str()),
        (Some("ml"), Some("trainer"))
    );
    assert_eq!(
        t["pod_uid"], "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f",
        "the joined UID is recorded either way"
    );
    // Every allocation's tenant is one of the batch's tenants, and a process's pod tenant is
    // its allocation's.
    let keys: std::collections::BTreeSet<&str> =
        tenants.iter().filter_map(|t| t["key"].as_str()).collect();
    for a in v["snapshot"]["allocations"].as_array().unwrap() {
        assert!(keys.contains(a["tenant"].as_str().unwrap()), "{a}");
    }

    let allocs = v["snapshot"]["allocations"].as_array().unwrap();
    let on = |gpu: &str| {
        allocs
            .iter()
            .filter(|a| a["gpu_uuid"] == gpu)
            .collect::<Vec<_>>()
    };
    let shared = on(TS_GPU);
    assert_eq!(shared.len(), 2);
    assert!(
        shared
            .iter()
            .all(|a| a["share"] == 0.5 && a["replica"].is_u64()),
        "{shared:?}"
    );
    let idle = on(IDLE_GPU);
    assert_eq!(
        (idle[0]["share"].as_f64(), idle[0]["tenant"].as_str()),
        (
            Some(1.0),
            Some(
                key(
                    "d0d0d0d0-1111-4222-8333-444455556666/main",
                    "sales/reserved-demo/main"
                )
                .as_str()
            )
        )
    );
    let mig = on(MIG_GPU);
    assert_eq!(
        (mig[0]["gi_id"].as_u64(), mig[0]["ci_id"].as_u64()),
        (Some(2), Some(0))
    );
    assert!((mig[0]["share"].as_f64().unwrap() - 3.0 / 7.0).abs() < 1e-6);
    let dra = mig
        .iter()
        .find(|a| a["tenant"] == "pod/ml/dra-notebook/main")
        .expect("the DRA claim's MIG device is allocated to its pod");
    assert_eq!(dra["gi_id"].as_u64(), Some(9));
    assert!((dra["share"].as_f64().unwrap() - 1.0 / 7.0).abs() < 1e-6);
    let inv = v["inventory"].as_array().unwrap();
    let ts = inv.iter().find(|g| g["uuid"] == TS_GPU).unwrap();
    assert_eq!(
        (ts["sharing"].as_str(), ts["replicas"].as_u64()),
        (Some("time_slicing"), Some(2))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What per-GPU sharing mechanisms granted, read from a stand-in API server: two
/// DRA claims consuming 20 GiB and 40 GiB of one 80 GiB A100 through consumable capacity, and
/// a HAMi container granted 20 GiB and 25 % of the cores of the other. Each allocation's share
/// is what was granted — 0.25, 0.5, 0.25 — not the equal split the device alone would give;
/// HAMi's only once the Node says HAMi serves that GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granted_shares_are_what_each_mechanism_granted() {
    let dir = agent::scratch::fresh_dir("kubelet-grants").unwrap();
    let socket = dir.join("kubelet.sock");
    let dra = |ns: &str, claim: &str, container: &str| v1::ContainerResources {
        name: container.into(),
        devices: vec![],
        dynamic_resources: vec![v1::DynamicResource {
            claim_name: claim.into(),
            claim_namespace: ns.into(),
            claim_resources: vec![v1::ClaimResource {
                driver_name: "gpu.nvidia.com".into(),
                pool_name: "k8s-node-1".into(),
                device_name: "gpu-1".into(),
            }],
        }],
    };
    let answer = v1::ListPodResourcesResponse {
        pod_resources: vec![
            pod("ml", "trainer-0", vec![dra("ml", "trainer-gpu", "trainer")]),
            pod("web", "api-7f9c4", vec![dra("web", "api-gpu", "server")]),
            // HAMi's device plugin hands out numbered virtual devices of a GPU.
            pod(
                "sales",
                "reserved-demo",
                vec![container(
                    "main",
                    "nvidia.com/gpu",
                    &[&format!("{IDLE_GPU}-0")],
                )],
            ),
        ],
    };
    serve_kubelet(&socket, answer);
    let api = kube_standin::StandIn::start().await;
    api.add_resource_slice(serde_json::json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "k8s-node-1-gpu.nvidia.com-0"},
        "spec": {
            "driver": "gpu.nvidia.com", "nodeName": "k8s-node-1",
            "pool": {"name": "k8s-node-1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{
                "name": "gpu-1", "allowMultipleAllocations": true,
                "attributes": {"uuid": {"string": TS_GPU}, "index": {"int": 1}},
                "capacity": {"memory": {"value": "80Gi"}}
            }]
        }
    }));
    for (ns, claim, consumed) in [("ml", "trainer-gpu", "20Gi"), ("web", "api-gpu", "40Gi")] {
        api.add_object(serde_json::json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": ns, "name": claim},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "capacity": {"requests": {"memory": consumed}}}}]}},
            "status": {"allocation": {"devices": {"results": [{
                "request": "gpu", "driver": "gpu.nvidia.com", "pool": "k8s-node-1",
                "device": "gpu-1", "consumedCapacity": {"memory": consumed}
            }]}}}
        }));
    }
    api.add_pod(
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "sales", "name": "reserved-demo",
                "uid": "d0d0d0d0-1111-4222-8333-444455556666",
                "annotations": {"hami.io/vgpu-devices-allocated":
                    format!("{IDLE_GPU},NVIDIA,20480,25:;")}},
            "spec": {"nodeName": "k8s-node-1", "containers": [{"name": "main", "image": "x"}]}
        }))
        .unwrap(),
    );
    let hami_tenant = "pod/d0d0d0d0-1111-4222-8333-444455556666/main";
    let share_in = |v: &Value, tenant: &str| {
        v["snapshot"]["allocations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["tenant"] == tenant)
            .unwrap_or_else(|| panic!("no allocation of {tenant}: {v}"))["share"]
            .as_f64()
            .unwrap()
    };
    // Until the Node says HAMi serves the GPU, the pod's annotation is its author's word alone:
    // the container holds what the kubelet's device gives it, an equal split of the GPU's two
    // numbered devices.
    let v = sample_once(&socket, &["--kube-api".into(), api.url().into()]).await;
    assert_eq!(share_in(&v, hami_tenant), 0.5, "no HAMi on the node");
    api.add_node(
        serde_json::from_value(serde_json::json!({"metadata": {"name": "k8s-node-1",
            "annotations": {"hami.io/node-nvidia-register":
                format!("{IDLE_GPU},10,81920,100,NVIDIA-A100-SXM4-80GB,0,true,0,hami-core:")}}}))
        .unwrap(),
    );
    let v = sample_once(&socket, &["--kube-api".into(), api.url().into()]).await;
    assert_eq!(
        api.node_metadata_reads(),
        2,
        "the Node's metadata alone, once a sample"
    );
    let share = |tenant: &str| share_in(&v, tenant);
    assert_eq!(
        share("pod/ml/trainer-0/trainer"),
        0.25,
        "a DRA claim of 20 GiB of 80"
    );
    assert_eq!(
        share("pod/web/api-7f9c4/server"),
        0.5,
        "a DRA claim of 40 GiB of 80"
    );
    // The API server gave the pod's UID: its tenant is keyed by it, as with the pods directory.
    assert_eq!(share(hami_tenant), 0.25, "HAMi's 20 GiB and 25 %");
    // The funnel's allocated GPU-hours are the rollup's: a minute of each sample counts its
    // granted quarter (0.25 GPU-minutes), not a half of a GPU shared by two.
    let snap: model::wire::v1::Snapshot = serde_json::from_value(v["snapshot"].clone()).unwrap();
    let mut rows = model::rollup::RawRows::default();
    rows.push(&snap, 60_000);
    let rolled = rows.aggregate(3_600_000);
    let allocated = |tenant: &str| -> f64 {
        rolled
            .tenants
            .iter()
            .filter(|(k, _)| format!("{k:?}").contains(tenant))
            .map(|(_, t)| t.allocated_gpu_hours())
            .sum()
    };
    assert!((allocated("pod/ml/trainer-0/trainer") - 0.25 / 60.0).abs() < 1e-9);
    assert!((allocated("pod/web/api-7f9c4/server") - 0.5 / 60.0).abs() < 1e-9);
    std::fs::remove_dir_all(&dir).unwrap();
}
