//! The Kubernetes install as kustomize builds it: `kubectl kustomize` renders the base, the
//! GPU Operator composition (deploy/kubernetes) and the base with every component, and each
//! rendering is checked the way a cluster would take it. Every object parses into its
//! k8s-openapi type (monitors and rules into the fields the Prometheus Operator reads), objects
//! land in the namespace they name, Services select pods that exist and name ports those pods
//! have, monitors select what they mean to scrape, every Secret, ConfigMap and claim a pod uses
//! exists or is one the docs say the platform provides, the agent's DCGM address is the
//! component's node-local Service, RBAC grants exactly the verbs the collector's code uses,
//! and the PrometheusRule is what `gpulens alert-rules` generates today and passes promtool.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolumeClaim, PodTemplateSpec, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn deploy() -> PathBuf {
    root().join("deploy/kubernetes").canonicalize().unwrap()
}

/// Every component under deploy/kubernetes/components.
fn components() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(deploy().join("components"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// `kubectl kustomize DIR`, parsed.
fn render(dir: &Path) -> Vec<Value> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl is needed to render the kustomizations (tests/run.sh installs it)");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

/// `to` relative to the directory `from` (kustomize refuses absolute paths).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c);
    }
    out
}

/// The base with the given components, as an operator's own overlay would compose it.
fn overlay(dir: &crate::support::TempDir, components: &[&str]) -> Vec<Value> {
    let d = dir
        .path()
        .canonicalize()
        .unwrap()
        .join(components.join("+"));
    std::fs::create_dir_all(&d).unwrap();
    let mut k = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\n",
        relative(&d, &deploy().join("base")).display()
    );
    if !components.is_empty() {
        k.push_str("components:\n");
        for c in components {
            k.push_str(&format!(
                "  - {}\n",
                relative(&d, &deploy().join("components").join(c)).display()
            ));
        }
    }
    std::fs::write(d.join("kustomization.yaml"), k).unwrap();
    render(&d)
}

/// Secrets the docs tell the platform to create; a rendering may refer to them without
/// containing them.
const PROVIDED_BY_THE_PLATFORM: [&str; 2] = [
    "gpulens-postgres", // components/postgres: the database URL
    "gpulens-tls",      // components/ingress-tls: the certificate
];

/// The GPU Operator's dcgm-exporter pods carry this label (its DaemonSet's selector).
const OPERATOR_DCGM_EXPORTER: (&str, &str) = ("app", "nvidia-dcgm-exporter");

struct Rendered {
    objects: Vec<Value>,
}

fn key(v: &Value) -> (String, String, String) {
    (
        v["kind"].as_str().unwrap().to_owned(),
        v["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
        v["metadata"]["name"].as_str().unwrap().to_owned(),
    )
}

impl Rendered {
    fn of(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| o["kind"] == kind).collect()
    }

    fn find(&self, kind: &str, ns: &str, name: &str) -> Option<&Value> {
        self.objects
            .iter()
            .find(|o| key(o) == (kind.to_owned(), ns.to_owned(), name.to_owned()))
    }

    /// Pod templates with their namespace and workload name.
    fn pods(&self) -> Vec<(String, String, PodTemplateSpec)> {
        let mut out = Vec::new();
        for o in self.of("Deployment") {
            let d: Deployment = serde_json::from_value(o.clone()).unwrap();
            out.push((key(o).1, key(o).2, d.spec.unwrap().template));
        }
        for o in self.of("DaemonSet") {
            let d: DaemonSet = serde_json::from_value(o.clone()).unwrap();
            out.push((key(o).1, key(o).2, d.spec.unwrap().template));
        }
        out
    }

    fn secret_exists(&self, ns: &str, name: &str) -> bool {
        self.find("Secret", ns, name).is_some() || PROVIDED_BY_THE_PLATFORM.contains(&name)
    }

    /// Checks every rendering must pass; `what` names it in failures.
    fn check(&self, what: &str) {
        // Each object parses into its type and appears once.
        let mut seen = BTreeSet::new();
        for o in &self.objects {
            assert!(seen.insert(key(o)), "{what}: {:?} twice", key(o));
            let (kind, ns, name) = key(o);
            let parsed = match kind.as_str() {
                "Namespace" => serde_json::from_value::<Namespace>(o.clone()).map(drop),
                "Secret" => serde_json::from_value::<Secret>(o.clone()).map(drop),
                "ConfigMap" => serde_json::from_value::<ConfigMap>(o.clone()).map(drop),
                "Service" => serde_json::from_value::<Service>(o.clone()).map(drop),
                "ServiceAccount" => serde_json::from_value::<ServiceAccount>(o.clone()).map(drop),
                "PersistentVolumeClaim" => {
                    serde_json::from_value::<PersistentVolumeClaim>(o.clone()).map(drop)
                }
                "Deployment" => serde_json::from_value::<Deployment>(o.clone()).map(drop),
                "DaemonSet" => serde_json::from_value::<DaemonSet>(o.clone()).map(drop),
                "Ingress" => serde_json::from_value::<Ingress>(o.clone()).map(drop),
                "ClusterRole" => serde_json::from_value::<ClusterRole>(o.clone()).map(drop),
                "ClusterRoleBinding" => {
                    serde_json::from_value::<ClusterRoleBinding>(o.clone()).map(drop)
                }
                "Role" => serde_json::from_value::<Role>(o.clone()).map(drop),
                "RoleBinding" => serde_json::from_value::<RoleBinding>(o.clone()).map(drop),
                "ServiceMonitor" | "PodMonitor" | "PrometheusRule" => {
                    assert_eq!(
                        o["apiVersion"], "monitoring.coreos.com/v1",
                        "{what}: {name}"
                    );
                    Ok(())
                }
                other => panic!("{what}: unexpected kind {other}"),
            };
            parsed.unwrap_or_else(|e| panic!("{what}: {kind} {name}: {e}"));
            // Namespaced objects say where they go: gpulens, or the GPU Operator's namespace
            // for what must sit next to the operator.
            let cluster_scoped = matches!(
                kind.as_str(),
                "Namespace" | "ClusterRole" | "ClusterRoleBinding"
            );
            if cluster_scoped {
                assert_eq!(ns, "", "{what}: {kind} {name} is cluster-scoped");
            } else if ns == "gpu-operator" {
                assert!(
                    (kind == "Service" && name == "gpulens-dcgm-exporter")
                        || (kind == "ConfigMap" && name == "gpulens-dcgm-metrics")
                        || kind == "Role"
                        || kind == "RoleBinding",
                    "{what}: {kind} {name} in gpu-operator"
                );
            } else {
                assert_eq!(ns, "gpulens", "{what}: {kind} {name}");
            }
        }

        let pods = self.pods();
        // Services select pods in their namespace and name ports those pods have; the DCGM
        // Service selects the operator's exporter pods instead.
        for o in self.of("Service") {
            let (_, ns, name) = key(o);
            let svc: Service = serde_json::from_value(o.clone()).unwrap();
            let spec = svc.spec.unwrap();
            let selector = spec.selector.unwrap();
            if name == "gpulens-dcgm-exporter" {
                assert_eq!(
                    selector,
                    BTreeMap::from([(
                        OPERATOR_DCGM_EXPORTER.0.to_owned(),
                        OPERATOR_DCGM_EXPORTER.1.to_owned()
                    )])
                );
                assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Local"));
                continue;
            }
            let selected: Vec<&PodTemplateSpec> = pods
                .iter()
                .filter(|(pns, _, t)| {
                    pns == &ns && {
                        let labels = t.metadata.as_ref().unwrap().labels.clone().unwrap();
                        selector.iter().all(|(k, v)| labels.get(k) == Some(v))
                    }
                })
                .map(|(_, _, t)| t)
                .collect();
            assert!(
                !selected.is_empty(),
                "{what}: Service {name} selects no pod"
            );
            for p in spec.ports.unwrap() {
                if let Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(
                    port,
                )) = &p.target_port
                {
                    assert!(
                        selected.iter().all(|t| pod_has_port(t, port)),
                        "{what}: Service {name} targets port {port} its pods lack"
                    );
                }
            }
        }
        // The ServiceMonitor selects a Service by its labels and names one of its ports; the
        // PodMonitor selects pods and names one of their container ports.
        for m in self.of("ServiceMonitor") {
            let ns = key(m).1;
            let want = m["spec"]["selector"]["matchLabels"].as_object().unwrap();
            let port = m["spec"]["endpoints"][0]["port"].as_str().unwrap();
            let hit = self.of("Service").into_iter().any(|s| {
                key(s).1 == ns
                    && want.iter().all(|(k, v)| &s["metadata"]["labels"][k] == v)
                    && s["spec"]["ports"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|p| p["name"] == port)
            });
            assert!(
                hit,
                "{what}: ServiceMonitor selects no Service with port {port}"
            );
        }
        for m in self.of("PodMonitor") {
            let ns = key(m).1;
            let want = m["spec"]["selector"]["matchLabels"].as_object().unwrap();
            let port = m["spec"]["podMetricsEndpoints"][0]["port"]
                .as_str()
                .unwrap();
            let hit = pods.iter().any(|(pns, _, t)| {
                let labels = t.metadata.as_ref().unwrap().labels.clone().unwrap();
                pns == &ns
                    && want
                        .iter()
                        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
                    && pod_has_port(t, port)
            });
            assert!(hit, "{what}: PodMonitor selects no pod with port {port}");
        }
        // Ingress backends are Services of this rendering with that port.
        for o in self.of("Ingress") {
            let ing: Ingress = serde_json::from_value(o.clone()).unwrap();
            let spec = ing.spec.unwrap();
            for tls in spec.tls.unwrap_or_default() {
                let s = tls.secret_name.unwrap();
                assert!(self.secret_exists("gpulens", &s), "{what}: TLS secret {s}");
            }
            for rule in spec.rules.unwrap() {
                for p in rule.http.unwrap().paths {
                    let b = p.backend.service.unwrap();
                    let svc = self
                        .find("Service", "gpulens", &b.name)
                        .unwrap_or_else(|| panic!("{what}: Ingress backend {}", b.name));
                    let port = b.port.unwrap().name.unwrap();
                    assert!(
                        svc["spec"]["ports"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|p| p["name"] == port.as_str()),
                        "{what}: Ingress port {port}"
                    );
                }
            }
        }
        // What pods use exists: their ConfigMaps, Secrets, claims and service accounts.
        for (ns, name, t) in &pods {
            let spec = t.spec.as_ref().unwrap();
            for v in spec.volumes.iter().flatten() {
                if let Some(c) = &v.config_map {
                    assert!(
                        self.find("ConfigMap", ns, &c.name).is_some(),
                        "{what}: {name} mounts ConfigMap {}",
                        c.name
                    );
                }
                if let Some(s) = &v.secret {
                    let s = s.secret_name.as_deref().unwrap();
                    assert!(
                        self.secret_exists(ns, s),
                        "{what}: {name} mounts Secret {s}"
                    );
                }
                if let Some(c) = &v.persistent_volume_claim {
                    assert!(
                        self.find("PersistentVolumeClaim", ns, &c.claim_name)
                            .is_some(),
                        "{what}: {name} claims {}",
                        c.claim_name
                    );
                }
            }
            for c in &spec.containers {
                for e in c.env.iter().flatten() {
                    if let Some(r) = e
                        .value_from
                        .as_ref()
                        .and_then(|v| v.secret_key_ref.as_ref())
                    {
                        assert!(
                            self.secret_exists(ns, &r.name),
                            "{what}: {name} reads Secret {}",
                            r.name
                        );
                        if let Some(s) = self.find("Secret", ns, &r.name) {
                            assert!(
                                s["stringData"].get(&r.key).is_some(),
                                "{what}: Secret {} has no key {}",
                                r.name,
                                r.key
                            );
                        }
                    }
                }
            }
            if let Some(sa) = &spec.service_account_name {
                assert!(
                    self.find("ServiceAccount", ns, sa).is_some(),
                    "{what}: {sa}"
                );
            }
        }
        // Bindings bind roles and accounts that exist.
        for b in self
            .of("ClusterRoleBinding")
            .into_iter()
            .chain(self.of("RoleBinding"))
        {
            let role_kind = b["roleRef"]["kind"].as_str().unwrap();
            let role_ns = if role_kind == "Role" {
                key(b).1
            } else {
                String::new()
            };
            assert!(
                self.find(role_kind, &role_ns, b["roleRef"]["name"].as_str().unwrap())
                    .is_some(),
                "{what}: {:?} binds a missing role",
                key(b)
            );
            for s in b["subjects"].as_array().unwrap() {
                assert!(
                    self.find(
                        "ServiceAccount",
                        s["namespace"].as_str().unwrap(),
                        s["name"].as_str().unwrap()
                    )
                    .is_some(),
                    "{what}: binding to a missing account {s}"
                );
            }
        }
        self.check_agent(what);
        self.check_collector(what);
    }

    fn agent(&self) -> PodTemplateSpec {
        let o = self.find("DaemonSet", "gpulens", "gpulens-agent").unwrap();
        let d: DaemonSet = serde_json::from_value(o.clone()).unwrap();
        d.spec.unwrap().template
    }

    /// The agent: GPU nodes only, GPU taints tolerated, host PID and /proc, the pod-resources
    /// socket, no API token, no GPU requested, only flags the agent has, and a DCGM address
    /// (when given) that is this rendering's node-local Service.
    fn check_agent(&self, what: &str) {
        let pod = self.agent().spec.unwrap();
        assert_eq!(pod.host_pid, Some(true));
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(
            pod.node_selector
                .as_ref()
                .unwrap()
                .get("nvidia.com/gpu.present")
                .map(String::as_str),
            Some("true")
        );
        assert!(
            pod.tolerations
                .as_ref()
                .unwrap()
                .iter()
                .any(|t| t.key.as_deref() == Some("nvidia.com/gpu"))
        );
        let paths: Vec<String> = pod
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .filter_map(|v| v.host_path.as_ref().map(|h| h.path.clone()))
            .collect();
        for p in [
            "/proc",
            "/var/lib/kubelet/pod-resources",
            "/var/lib/kubelet/pods",
        ] {
            assert!(paths.contains(&p.to_owned()), "{what}: {p} from the host");
        }
        let c = &pod.containers[0];
        assert!(
            c.resources
                .as_ref()
                .unwrap()
                .limits
                .as_ref()
                .unwrap()
                .keys()
                .all(|k| !k.starts_with("nvidia.com/")),
            "{what}: the agent requests no GPU"
        );
        let env: Vec<&str> = c
            .env
            .as_ref()
            .unwrap()
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        for e in ["GPULENS_NODE", "GPULENS_TOKEN", "NVIDIA_VISIBLE_DEVICES"] {
            assert!(env.contains(&e), "{what}: {e}");
        }
        let args = c.args.as_ref().unwrap();
        assert!(args.contains(&"--proc-root=/host/proc".to_owned()));
        let collector = args
            .iter()
            .find_map(|a| a.strip_prefix("--collector="))
            .unwrap();
        assert_eq!(
            service_at(self, collector),
            Some(("gpulens".into(), "gpulens-collector".into())),
            "{what}: --collector is the collector's Service"
        );
        let agent_main = std::fs::read_to_string(root().join("agent/src/main.rs")).unwrap();
        for a in args.iter().filter(|a| a.starts_with("--")) {
            let flag = a
                .trim_start_matches("--")
                .split('=')
                .next()
                .unwrap()
                .replace('-', "_");
            assert!(
                agent_main.contains(&format!("{flag}:")),
                "{what}: gpulens-agent has no --{flag}"
            );
        }
        let dcgm = args.iter().find_map(|a| a.strip_prefix("--dcgm-url="));
        let dcgm_service = self.find("Service", "gpu-operator", "gpulens-dcgm-exporter");
        assert_eq!(
            dcgm.is_some(),
            dcgm_service.is_some(),
            "{what}: a DCGM address exactly when the DCGM Service is there"
        );
        if let Some(url) = dcgm {
            assert_eq!(
                service_at(self, url),
                Some(("gpu-operator".into(), "gpulens-dcgm-exporter".into())),
                "{what}: --dcgm-url={url} is not the node-local DCGM Service and its port"
            );
            assert!(url.ends_with("/metrics"));
        }
    }

    /// The collector: its configuration is one it accepts, and its storage is either the
    /// embedded database on a claim (one replica, Recreate) or a server URL from a Secret.
    fn check_collector(&self, what: &str) {
        let cm: ConfigMap = serde_json::from_value(
            self.find("ConfigMap", "gpulens", "gpulens-collector")
                .unwrap()
                .clone(),
        )
        .unwrap();
        let config = collector::config::Config::parse(&cm.data.unwrap()["gpulens.toml"]).unwrap();
        assert_eq!(config.agents[0].cluster.as_deref(), Some("prod"));
        let dep: Deployment = serde_json::from_value(
            self.find("Deployment", "gpulens", "gpulens-collector")
                .unwrap()
                .clone(),
        )
        .unwrap();
        let spec = dep.spec.unwrap();
        let pod = spec.template.spec.unwrap();
        let c = &pod.containers[0];
        assert_eq!(c.args.as_ref().unwrap()[0], "serve");
        // It listens on the pod's address without sign-in for people: said explicitly.
        assert!(
            config.listen.ip().is_unspecified()
                == c.args
                    .as_ref()
                    .unwrap()
                    .contains(&"--insecure-open".to_owned()),
            "{what}: --insecure-open exactly when listening beyond loopback"
        );
        let probe = c
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(probe.path.as_deref(), Some("/readyz"));
        let db_url = c
            .env
            .iter()
            .flatten()
            .any(|e| e.name == "GPULENS_DATABASE_URL");
        let claim = pod
            .volumes
            .iter()
            .flatten()
            .any(|v| v.persistent_volume_claim.is_some());
        assert!(
            db_url != claim,
            "{what}: one database: a server URL or a claim"
        );
        if claim {
            assert_eq!(
                spec.replicas,
                Some(1),
                "{what}: one process per SQLite file"
            );
            assert_eq!(
                spec.strategy.unwrap().type_.as_deref(),
                Some("Recreate"),
                "{what}: never two collectors on the claim"
            );
        }
    }

    /// RBAC as (scope, resource, verb).
    fn granted(&self) -> Vec<String> {
        let mut out = Vec::new();
        for o in self.of("ClusterRole").into_iter().chain(self.of("Role")) {
            let scope = match key(o).1.as_str() {
                "" => "cluster".to_owned(),
                ns => ns.to_owned(),
            };
            for r in o["rules"].as_array().unwrap() {
                assert_eq!(r["apiGroups"], serde_json::json!([""]), "core group only");
                for res in r["resources"].as_array().unwrap() {
                    for verb in r["verbs"].as_array().unwrap() {
                        out.push(format!(
                            "{scope}:{}:{}",
                            res.as_str().unwrap(),
                            verb.as_str().unwrap()
                        ));
                    }
                }
            }
        }
        out.sort();
        out
    }
}

fn pod_has_port(t: &PodTemplateSpec, port: &str) -> bool {
    t.spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .any(|p| p.name.as_deref() == Some(port))
}

/// The Service (namespace, name) a URL of the form http://NAME.NS.svc:PORT/... reaches, when
/// the rendering has that Service with that port.
fn service_at(r: &Rendered, url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("http://")?;
    let authority = rest.split('/').next()?;
    let (host, port) = authority.split_once(':')?;
    let mut parts = host.split('.');
    let (name, ns, svc) = (parts.next()?, parts.next()?, parts.next()?);
    if svc != "svc" || parts.next().is_some() {
        return None;
    }
    let o = r.find("Service", ns, name)?;
    let port: i64 = port.parse().ok()?;
    o["spec"]["ports"]
        .as_array()?
        .iter()
        .any(|p| p["port"] == port)
        .then(|| (ns.to_owned(), name.to_owned()))
}

#[test]
fn the_base_every_component_and_the_gpu_operator_install_render_and_fit() {
    let dir = crate::support::TempDir::new("kustomize");
    assert_eq!(
        components(),
        [
            "custom-layouts",
            "dcgm",
            "ingress-tls",
            "monitoring",
            "nvml-runtimeclass",
            "postgres"
        ],
        "a new component needs its checks here and its section in docs/deploy.md"
    );
    let base = Rendered {
        objects: overlay(&dir, &[]),
    };
    base.check("base");
    assert!(base.agent().spec.unwrap().runtime_class_name.is_none());

    // The collector's code uses exactly these verbs (labels::kube); the gpu-operator Role only
    // comes with custom layouts and stays in the operator's namespace.
    let core = [
        "cluster:nodes:get",
        "cluster:nodes:list",
        "cluster:nodes:patch",
        "cluster:nodes:watch",
        "cluster:pods:list",
    ];
    assert_eq!(base.granted(), core);

    for c in components() {
        let r = Rendered {
            objects: overlay(&dir, &[c.as_str()]),
        };
        r.check(&c);
        match c.as_str() {
            "custom-layouts" => {
                let mut want: Vec<String> = core.iter().map(|s| s.to_string()).collect();
                want.extend([
                    "gpu-operator:configmaps:get".to_owned(),
                    "gpu-operator:configmaps:patch".to_owned(),
                ]);
                want.sort();
                assert_eq!(r.granted(), want);
            }
            "nvml-runtimeclass" => assert_eq!(
                r.agent().spec.unwrap().runtime_class_name.as_deref(),
                Some("nvidia")
            ),
            "postgres" => {
                assert!(r.of("PersistentVolumeClaim").is_empty());
            }
            "monitoring" => {
                assert_eq!(r.of("ServiceMonitor").len(), 1);
                assert_eq!(r.of("PodMonitor").len(), 1);
                assert_eq!(r.of("PrometheusRule").len(), 1);
            }
            "ingress-tls" => assert_eq!(r.of("Ingress").len(), 1),
            "dcgm" => {
                // The address is the Service (check_agent); the exporter's counters file
                // collects every DCGM field gpulens reads, SM activity first of all.
                let cm: ConfigMap = serde_json::from_value(
                    r.find("ConfigMap", "gpu-operator", "gpulens-dcgm-metrics")
                        .unwrap()
                        .clone(),
                )
                .unwrap();
                let csv = &cm.data.unwrap()["dcgm-metrics.csv"];
                let listed: BTreeSet<&str> = csv
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(|l| l.split(',').next().unwrap().trim())
                    .collect();
                for f in model::dcgm::Field::all() {
                    assert!(listed.contains(f.name()), "{} is not collected", f.name());
                }
                for l in csv.lines().filter(|l| !l.trim().starts_with('#')) {
                    if l.trim().is_empty() {
                        continue;
                    }
                    let cols: Vec<&str> = l.split(',').map(str::trim).collect();
                    assert!(
                        cols.len() >= 3 && ["gauge", "counter", "label"].contains(&cols[1]),
                        "dcgm-exporter reads field, type, help: {l}"
                    );
                }
            }
            other => panic!("{other}"),
        }
    }

    // Everything at once, and the GPU Operator composition users apply.
    let all: Vec<String> = components();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    Rendered {
        objects: overlay(&dir, &all),
    }
    .check("every component");
    let install = Rendered {
        objects: render(&deploy()),
    };
    install.check("deploy/kubernetes");
    let pod = install.agent().spec.unwrap();
    assert_eq!(pod.runtime_class_name.as_deref(), Some("nvidia"));
    assert!(
        pod.containers[0]
            .args
            .as_ref()
            .unwrap()
            .iter()
            .any(|a| a.starts_with("--dcgm-url=")),
        "the GPU Operator install reads DCGM"
    );
    assert_eq!(install.of("PrometheusRule").len(), 1);
}

fn gpulens(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gpulens"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gpulens {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `promtool check rules` on a rule file, then `promtool test rules` on its test file.
fn promtool_rules(rules: &Path, tests: &Path) {
    for (verb, file) in [("check", rules), ("test", tests)] {
        let out = Command::new("promtool")
            .args([verb, "rules"])
            .arg(file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {verb} rules: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The PrometheusRule in components/monitoring is what the collector's rule definitions
/// generate today, its rules pass `promtool check rules`, and `promtool test rules` shows them
/// firing (and not firing) on sample series as the collector's own rules would.
#[test]
fn the_prometheus_rules_are_generated_from_the_collectors_rules_and_pass_promtool() {
    let file = deploy().join("components/monitoring/prometheusrule.yaml");
    let on_disk = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        on_disk,
        gpulens(&["alert-rules"]),
        "{} is stale: regenerate it with `gpulens alert-rules --out {}`",
        file.display(),
        file.display()
    );
    if !crate::prometheus::have("promtool") {
        return crate::prometheus::required("promtool");
    }
    let dir = crate::support::TempDir::new("promtool-rules");
    // The operator's object holds exactly the rule file's groups.
    let rule_file = gpulens(&["alert-rules", "--format", "rule-file"]);
    let object: Value = serde_yaml::from_str(&on_disk).unwrap();
    assert_eq!(
        object["spec"],
        serde_yaml::from_str::<Value>(&rule_file).unwrap()
    );
    std::fs::write(dir.path().join("gpulens.rules.yml"), rule_file).unwrap();
    std::fs::copy(
        root().join("tests/fixtures/alert-rules.test.yml"),
        dir.path().join("alert-rules.test.yml"),
    )
    .unwrap();
    promtool_rules(
        &dir.path().join("gpulens.rules.yml"),
        &dir.path().join("alert-rules.test.yml"),
    );
}

/// With `[metrics] tenant_series`, the generated rules add recording rules that sum the
/// per-tenant GPU shares by namespace and join each pod's with kube-state-metrics' pod labels;
/// promtool checks and tests them on sample series.
#[test]
fn the_tenant_recording_rules_join_kube_state_metrics_pod_labels() {
    if !crate::prometheus::have("promtool") {
        return crate::prometheus::required("promtool");
    }
    let dir = crate::support::TempDir::new("promtool-tenant-rules");
    let config = dir.path().join("gpulens.toml");
    std::fs::write(
        &config,
        "[metrics]\ntenant_series = true\npod_labels = [\"label_team\"]\n",
    )
    .unwrap();
    let rules = gpulens(&[
        "alert-rules",
        "--format",
        "rule-file",
        "--config",
        config.to_str().unwrap(),
    ]);
    assert!(rules.contains("name: gpulens-tenants"), "{rules}");
    std::fs::write(dir.path().join("tenant.rules.yml"), rules).unwrap();
    std::fs::copy(
        root().join("tests/fixtures/tenant-rules.test.yml"),
        dir.path().join("tenant-rules.test.yml"),
    )
    .unwrap();
    promtool_rules(
        &dir.path().join("tenant.rules.yml"),
        &dir.path().join("tenant-rules.test.yml"),
    );
}

/// A rule name Prometheus would refuse is named, not written.
#[test]
fn alert_rules_refuses_a_name_prometheus_would_reject() {
    let dir = crate::support::TempDir::new("alert-rules-bad");
    let config = dir.path().join("gpulens.toml");
    std::fs::write(
        &config,
        "[[alerts.rules]]\nname = \"team-idle\"\nkind = \"idle_allocation\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpulens"))
        .args(["alert-rules", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"team-idle\"") && err.contains("Prometheus"),
        "{err}"
    );
}
