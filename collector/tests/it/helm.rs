//! The Helm chart (deploy/helm/gpulens) as Helm renders it: tests/helm/render.py runs Helm's
//! own engine (PyPI helm-python-sdk) over a matrix of values, lints the chart strictly, checks
//! values.schema.json, and validates every built-in object against Kubernetes' schemas in
//! strict mode (kubernetes-validate). Here each rendering is then checked the way a cluster
//! takes it: objects in the namespaces they belong in, Services and monitors that select what
//! exists, every Secret, ConfigMap and claim a pod uses present, a collector configuration the
//! collector accepts with sign-in on, no placeholder secret, the agent at its narrowest
//! privileges, network policies, and RBAC exactly as wide as the collector's code needs. The
//! rule files the PrometheusRule carries are what `gpulens alert-rules` generates and pass
//! promtool, with the series as kube-prometheus-stack stores them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplateSpec, Service};
use serde_json::{Value, json};

mod checks;
mod rules;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart() -> PathBuf {
    root().join("deploy/helm/gpulens")
}

/// The Python with helm-python-sdk and kubernetes-validate (tests/run.sh makes it).
pub(crate) fn helm_python() -> Option<PathBuf> {
    let p = std::env::var_os("GPULENS_HELM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/helm-venv/bin/python"));
    p.exists().then_some(p)
}

fn no_helm() {
    assert!(
        std::env::var("GPULENS_REQUIRE_HELM").is_err(),
        "the Helm engine (target/helm-venv, made by tests/run.sh) is not installed"
    );
    eprintln!("skipping: no helm-python-sdk venv (run the suite with tests/run.sh)");
}

/// Renders every case in one Python run; each answer is a rendering or `{"error": …}`.
fn render_all(cases: &BTreeMap<&str, Value>) -> BTreeMap<String, Value> {
    let python = helm_python().expect("checked by the caller");
    let dir = crate::support::TempDir::new("helm");
    let input = dir.path().join("cases.json");
    let output = dir.path().join("out.json");
    let cases: BTreeMap<&str, Value> = cases
        .iter()
        .map(|(k, v)| (*k, json!({ "values": v })))
        .collect();
    std::fs::write(&input, serde_json::to_vec(&cases).unwrap()).unwrap();
    let out = Command::new(python)
        .arg(root().join("tests/helm/render.py"))
        .arg(chart())
        .arg(&input)
        .arg(&output)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "render.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap()
}

const NS: &str = "gpulens";
const AGENT_NS: &str = "gpulens-agent";
const GPU_OPERATOR: &str = "gpu-operator";

/// Secrets the docs tell the platform to create; a rendering may refer to them.
const PROVIDED_BY_THE_PLATFORM: [&str; 6] = [
    "gpulens-postgres",
    "gpulens-tls",
    "oidc-client",
    "gpulens-oidc",
    "platform-agent-token",
    "platform-access",
];

fn key(v: &Value) -> (String, String, String) {
    (
        v["kind"].as_str().unwrap().to_owned(),
        v["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
        v["metadata"]["name"].as_str().unwrap().to_owned(),
    )
}

struct Rendered {
    what: String,
    objects: Vec<Value>,
    notes: String,
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

    /// The namespace the agents' DaemonSet runs in.
    fn agent_namespace(&self) -> String {
        self.of("DaemonSet")[0]["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    fn agent(&self) -> PodTemplateSpec {
        let (_, _, t) = self
            .pods()
            .into_iter()
            .find(|(_, name, _)| name == "gpulens-agent")
            .unwrap_or_else(|| panic!("{}: no agent DaemonSet", self.what));
        t
    }

    fn collector(&self) -> Deployment {
        serde_json::from_value(
            self.find("Deployment", NS, "gpulens-collector")
                .unwrap()
                .clone(),
        )
        .unwrap()
    }

    /// RBAC as scope:resource:verb.
    fn granted(&self) -> Vec<String> {
        let mut out = Vec::new();
        for o in self.of("ClusterRole").into_iter().chain(self.of("Role")) {
            let scope = match key(o).1.as_str() {
                "" => "cluster".to_owned(),
                ns => ns.to_owned(),
            };
            for r in o["rules"].as_array().unwrap() {
                let groups = r["apiGroups"].as_array().unwrap();
                assert_eq!(groups.len(), 1, "one API group per rule");
                let group = match groups[0].as_str().unwrap() {
                    "" => String::new(),
                    g => format!(".{g}"),
                };
                for res in r["resources"].as_array().unwrap() {
                    for verb in r["verbs"].as_array().unwrap() {
                        out.push(format!(
                            "{scope}:{}{group}:{}",
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

/// The Service (namespace, name) a URL http://NAME.NS.svc:PORT/… reaches in this rendering.
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

fn base64_decode(s: &str) -> String {
    use base64::Engine;
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .expect("base64"),
    )
    .unwrap()
}

/// The values example docs/deploy.md starts with (the YAML block after its
/// `<!-- helm-values: … -->` mark).
fn documented_values() -> Value {
    let doc = std::fs::read_to_string(root().join("docs/deploy.md")).unwrap();
    let at = doc
        .find("<!-- helm-values: gpu-operator-kube-prometheus-stack -->")
        .expect("docs/deploy.md's values example is marked");
    let block = doc[at..]
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("a yaml block after the mark");
    serde_yaml::from_str(block).unwrap()
}

/// The values matrix: each case is what a platform team would set for one kind of cluster.
fn cases() -> BTreeMap<&'static str, Value> {
    BTreeMap::from([
        ("default", json!({})),
        ("docs/deploy.md", documented_values()),
        (
            "postgres-replicas",
            json!({"database": {"type": "postgres", "existingSecret": "gpulens-postgres"},
                   "collector": {"replicas": 2}}),
        ),
        (
            "oidc-ingress-cert-manager",
            json!({"access": {"oidc": {"enabled": true, "issuer": "https://sso.example.com/realms/ops",
                       "clientId": "gpulens", "clientSecretName": "oidc-client",
                       "redirectUrl": "https://gpulens.example.com/auth/callback"},
                       "groups": [{"group": "gpu-platform", "role": "operator"},
                                  {"group": "team-ml", "role": "viewer", "teams": ["ml"]}]},
                   "ingress": {"enabled": true, "className": "nginx", "host": "gpulens.example.com",
                       "tls": {"certManager": {"issuer": "letsencrypt"}}},
                   "networkPolicy": {"dashboardFrom": [{"namespaceSelector": {"matchLabels":
                       {"kubernetes.io/metadata.name": "ingress-nginx"}}}]}}),
        ),
        (
            "proxy-ingress-existing-tls",
            json!({"access": {"proxy": {"enabled": true, "trusted": ["10.0.0.0/24"]},
                       "defaultRole": "viewer"},
                   "ingress": {"enabled": true, "className": "nginx", "host": "gpulens.example.com",
                       "tls": {"secretName": "gpulens-tls"}}}),
        ),
        (
            "kube-prometheus-stack",
            json!({"monitoring": {"enabled": true, "labels": {"release": "kube-prometheus-stack"}},
                   "grafanaDashboards": {"enabled": true},
                   "metrics": {"tenantSeries": true}}),
        ),
        (
            "monitoring-exported-labels",
            json!({"monitoring": {"enabled": true, "honorLabels": false},
                   "metrics": {"dcgmLabels": false}}),
        ),
        (
            "bottlerocket-volume-mounts",
            json!({"agent": {"nvml": {"mode": "volumeMounts"}, "dcgm": {"mode": "off"},
                   "hostUsers": true, "nfd": {"enabled": true}, "timeSlicingReplicas": 4,
                   "processUtilizationEvery": "20s"}}),
        ),
        (
            "demand-pending-pods",
            json!({"demand": {"pendingPods": true}}),
        ),
        (
            "agent-grants",
            json!({"agent": {"grants": {"enabled": true}}}),
        ),
        (
            "cdi-dcgm-url",
            json!({"agent": {"nvml": {"mode": "cdi", "runtimeClassName": ""},
                   "dcgm": {"mode": "url", "url": "http://dcgm-exporter.monitoring.svc:9400/metrics"}},
                   "image": {"digest": format!("sha256:{}", "ab".repeat(32))}}),
        ),
        (
            "apply-with-approval-custom-layouts",
            json!({"labels": {"mode": "apply-with-approval", "customLayouts": true},
                   "cluster": "gpu-east"}),
        ),
        (
            "reclaim-acting",
            json!({"reclaim": {"dryRun": false, "maxActionsPerHour": 5, "policies": [
                {"name": "notebooks", "namespaces": ["notebooks"], "action": "scale-to-zero",
                 "min_idle": "24h", "grace": "4h", "exempt": ["owner=oncall"]},
                {"name": "vision", "teams": ["vision"], "idle_share": 0.95}]}}),
        ),
        (
            "agents-in-the-release-namespace",
            json!({"agent": {"namespace": {"create": false}}}),
        ),
        (
            "labels-off-existing-secrets-no-policies",
            json!({"labels": {"mode": "off"}, "networkPolicy": {"enabled": false},
                   "agentIdentity": {"mode": "sharedToken"},
                   "agentToken": {"existingSecret": "platform-agent-token"},
                   "access": {"existingSecret": "platform-access"}}),
        ),
    ])
}

#[test]
fn the_chart_renders_every_values_case_validates_and_fits() {
    if helm_python().is_none() {
        return no_helm();
    }
    let mut all = cases();
    // Values the chart must refuse, and the words it refuses them with.
    let refused: [(&str, Value, &str); 7] = [
        (
            "refused: oidc without issuer",
            json!({"access": {"oidc": {"enabled": true, "clientId": "x",
                   "redirectUrl": "https://g.example.com/auth/callback"}}}),
            "access.oidc.issuer",
        ),
        (
            "refused: sqlite replicas",
            json!({"collector": {"replicas": 2}}),
            "needs database.type=postgres",
        ),
        (
            "refused: unknown key",
            json!({"collector": {"insecureOpen": true}}),
            "insecureOpen",
        ),
        (
            "refused: nvml mode",
            json!({"agent": {"nvml": {"mode": "privileged"}}}),
            "mode",
        ),
        (
            "refused: postgres without secret",
            json!({"database": {"type": "postgres"}}),
            "database.existingSecret",
        ),
        (
            "refused: a process-utilization clock the agent refuses",
            json!({"agent": {"processUtilizationEvery": "1m"}}),
            "processUtilizationEvery",
        ),
        (
            "refused: ingress without certificate",
            json!({"ingress": {"enabled": true, "host": "g.example.com"}}),
            "ingress.tls",
        ),
    ];
    for (name, values, _) in &refused {
        all.insert(name, values.clone());
    }
    let out = render_all(&all);
    for (name, _, words) in &refused {
        let err = out[*name]["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: the chart rendered it"));
        assert!(err.contains(words), "{name}: {err}");
    }
    let mut rendered = BTreeMap::new();
    for name in cases().keys() {
        let r = &out[*name];
        assert!(r.get("error").is_none(), "{name}: {}", r["error"]);
        assert_eq!(r["lint"], json!([]), "{name}: helm lint --strict");
        assert_eq!(
            r["invalid"],
            json!([]),
            "{name}: kubernetes-validate --strict"
        );
        let rendering = Rendered {
            what: name.to_string(),
            objects: r["objects"].as_array().unwrap().clone(),
            notes: r["notes"].as_str().unwrap_or_default().to_owned(),
        };
        rendering.check();
        rendered.insert(*name, rendering);
    }

    // The default: nothing reachable without credentials, the agents' namespace apart and
    // labelled, DCGM from the GPU Operator, policies on, RBAC only for the label writer and
    // the agents' token reviews.
    let d = &rendered["default"];
    assert!(d.of("Ingress").is_empty());
    assert_eq!(d.of("NetworkPolicy").len(), 2);
    assert!(d.find("Namespace", "", AGENT_NS).is_some());
    assert_eq!(
        d.granted(),
        [
            "cluster:nodes:get",
            "cluster:nodes:list",
            "cluster:nodes:patch",
            "cluster:nodes:watch",
            "cluster:pods:list",
            "cluster:tokenreviews.authentication.k8s.io:create",
        ]
    );
    let agent = d.agent().spec.unwrap();
    assert_eq!(agent.runtime_class_name.as_deref(), Some("nvidia"));
    assert!(agent.priority_class_name.is_none());
    assert!(d.notes.contains("port-forward") && d.notes.contains("viewer-token"));
    let csv: ConfigMap = serde_json::from_value(
        d.find("ConfigMap", GPU_OPERATOR, "gpulens-dcgm-metrics")
            .unwrap()
            .clone(),
    )
    .unwrap();
    let csv = &csv.data.unwrap()["dcgm-metrics.csv"];
    let listed: BTreeSet<&str> = csv
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split(',').next().unwrap().trim())
        .collect();
    for f in model::dcgm::Field::all() {
        assert!(listed.contains(f.name()), "{} is not collected", f.name());
    }

    // The documented install: monitored by kube-prometheus-stack, OIDC, TLS by cert-manager.
    let documented = &rendered["docs/deploy.md"];
    for kind in [
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "Certificate",
        "Ingress",
    ] {
        assert_eq!(documented.of(kind).len(), 1, "docs/deploy.md: {kind}");
    }
    assert!(documented.notes.contains("https://gpulens.example.com/"));

    // Each case shows what it sets.
    assert!(
        rendered["postgres-replicas"]
            .of("PersistentVolumeClaim")
            .is_empty()
    );
    let oidc = &rendered["oidc-ingress-cert-manager"];
    assert_eq!(oidc.of("Certificate").len(), 1);
    assert_eq!(oidc.of("Ingress")[0]["spec"]["ingressClassName"], "nginx");
    assert!(oidc.notes.contains("https://gpulens.example.com/"));
    let kps = &rendered["kube-prometheus-stack"];
    for kind in ["ServiceMonitor", "PodMonitor", "PrometheusRule"] {
        let o = kps.of(kind);
        assert_eq!(o.len(), 1, "{kind}");
        assert_eq!(
            o[0]["metadata"]["labels"]["release"], "kube-prometheus-stack",
            "{kind} is picked up by the stack's default selector"
        );
    }
    assert_eq!(
        kps.of("ServiceMonitor")[0]["spec"]["endpoints"][0]["honorLabels"],
        true
    );
    let groups: Vec<&str> = kps.of("PrometheusRule")[0]["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        groups,
        ["gpulens", "gpulens-dcgm-labels", "gpulens-tenants"]
    );
    // The rendered PrometheusRule's groups are a rule file promtool accepts.
    if crate::prometheus::have("promtool") {
        let dir = crate::support::TempDir::new("helm-rules");
        let file = dir.path().join("rendered.rules.yaml");
        std::fs::write(
            &file,
            serde_yaml::to_string(
                &json!({"groups": kps.of("PrometheusRule")[0]["spec"]["groups"]}),
            )
            .unwrap(),
        )
        .unwrap();
        let out = Command::new("promtool")
            .args(["check", "rules"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool check rules on the rendered PrometheusRule: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        crate::prometheus::required("promtool");
    }
    let dashboards: Vec<&Value> = kps
        .of("ConfigMap")
        .into_iter()
        .filter(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect();
    let on_disk = std::fs::read_dir(root().join("dashboards"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count();
    assert_eq!(dashboards.len(), on_disk, "one ConfigMap per dashboard");
    for c in dashboards {
        for v in c["data"].as_object().unwrap().values() {
            serde_json::from_str::<Value>(v.as_str().unwrap()).expect("dashboard JSON");
        }
    }
    let exported = &rendered["monitoring-exported-labels"];
    assert_eq!(
        exported.of("ServiceMonitor")[0]["spec"]["endpoints"][0]["honorLabels"],
        false
    );
    let pod = rendered["bottlerocket-volume-mounts"].agent().spec.unwrap();
    assert!(
        pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == "/var/run/nvidia-container-devices/all"),
        "volumeMounts: the NVIDIA runtime's device list as a mount"
    );
    assert!(
        !pod.containers[0]
            .env
            .iter()
            .flatten()
            .any(|e| e.name == "NVIDIA_VISIBLE_DEVICES"),
        "volumeMounts: no variable the runtime would ignore"
    );
    let cdi = rendered["cdi-dcgm-url"].agent();
    assert_eq!(
        cdi.metadata.unwrap().annotations.unwrap()["cdi.k8s.io/gpulens-agent"],
        "nvidia.com/gpu=all"
    );
    assert!(cdi.spec.as_ref().unwrap().runtime_class_name.is_none());
    assert!(
        rendered["cdi-dcgm-url"]
            .collector()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .containers[0]
            .image
            .as_deref()
            .unwrap()
            .contains("@sha256:")
    );
    let mut want: Vec<String> = d.granted();
    want.extend([
        "gpu-operator:configmaps:get".to_owned(),
        "gpu-operator:configmaps:patch".to_owned(),
    ]);
    want.sort();
    assert_eq!(
        rendered["apply-with-approval-custom-layouts"].granted(),
        want
    );
    // Granted shares: read-only rights for the agents, with an API token of their own.
    let mut want: Vec<String> = d.granted();
    want.extend([
        "cluster:nodes:get".to_owned(),
        "cluster:pods:list".to_owned(),
        "cluster:resourceclaims.resource.k8s.io:get".to_owned(),
        "cluster:resourceslices.resource.k8s.io:list".to_owned(),
    ]);
    want.sort();
    // Waiting demand: pending pods and Workloads, and what sharing mechanisms nodes have.
    let demand = rendered["demand-pending-pods"].granted();
    for want in [
        "cluster:pods:list",
        "cluster:workloads.kueue.x-k8s.io:list",
        "cluster:resourceslices.resource.k8s.io:list",
    ] {
        assert!(demand.contains(&want.to_owned()), "{want}: {demand:?}");
    }
    let grants = &rendered["agent-grants"];
    assert_eq!(grants.granted(), want);
    let args = grants.agent().spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(
        args.contains(&"--kube-api=in-cluster".to_owned()),
        "{args:?}"
    );
    let same = &rendered["agents-in-the-release-namespace"];
    assert!(same.of("Namespace").is_empty(), "no namespace created");
    assert_eq!(same.of("DaemonSet")[0]["metadata"]["namespace"], NS);
    assert_eq!(
        same.of("Secret").len(),
        1,
        "one access Secret; the agents present their ServiceAccount tokens"
    );
    let off = &rendered["labels-off-existing-secrets-no-policies"];
    assert!(
        off.granted().is_empty(),
        "labels off: no Kubernetes API rights"
    );
    assert!(
        off.of("Secret").is_empty(),
        "existing secrets: none generated"
    );
}
