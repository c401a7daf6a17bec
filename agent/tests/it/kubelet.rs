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
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(StandInKubelet(answer))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );

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
        .arg(&socket)
        .args(if pods_dir {
            vec![
                "--kubelet-pods-dir".into(),
                root.join("agent/tests/fixtures/kubelet-pods"),
            ]
        } else {
            vec![]
        })
        .env(
            "GPULENS_FAKE_NVML_FIXTURE",
            root.join("fake-nvml/fixtures/k8s-node.json"),
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
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
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
