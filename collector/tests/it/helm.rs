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

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart() -> PathBuf {
    root().join("deploy/helm/gpulens")
}

/// The Python with helm-python-sdk and kubernetes-validate (tests/run.sh makes it).
fn helm_python() -> Option<PathBuf> {
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
                assert_eq!(r["apiGroups"], json!([""]), "core group only");
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

    /// What every rendering must satisfy.
    fn check(&self) {
        let what = &self.what;
        let mut seen = BTreeSet::new();
        for o in &self.objects {
            assert!(seen.insert(key(o)), "{what}: {:?} twice", key(o));
            let (kind, ns, name) = key(o);
            assert_eq!(
                o["metadata"]["labels"]["app.kubernetes.io/part-of"], "gpulens",
                "{what}: {kind} {name} carries the chart's labels"
            );
            let cluster_scoped = matches!(
                kind.as_str(),
                "Namespace" | "ClusterRole" | "ClusterRoleBinding"
            );
            if cluster_scoped {
                assert_eq!(ns, "", "{what}: {kind} {name} is cluster-scoped");
            } else if ns == GPU_OPERATOR {
                assert!(
                    matches!(
                        (kind.as_str(), name.as_str()),
                        ("Service", "gpulens-dcgm-exporter")
                            | ("ConfigMap", "gpulens-dcgm-metrics")
                            | ("Role", _)
                            | ("RoleBinding", _)
                    ),
                    "{what}: {kind} {name} in the GPU Operator's namespace"
                );
            } else if ns == AGENT_NS {
                assert!(
                    matches!(
                        kind.as_str(),
                        "DaemonSet" | "Secret" | "NetworkPolicy" | "PodMonitor"
                    ),
                    "{what}: {kind} {name} in the agents' namespace"
                );
            } else {
                assert_eq!(ns, NS, "{what}: {kind} {name}");
            }
        }
        self.check_wiring();
        self.check_secrets();
        self.check_agent();
        self.check_collector();
        self.check_network_policies();
        self.check_monitors();
    }

    /// Services select pods that exist and name their ports; monitors, Ingresses, volumes,
    /// environment references and bindings point at objects of this rendering.
    fn check_wiring(&self) {
        let what = &self.what;
        let pods = self.pods();
        for o in self.of("Service") {
            let (_, ns, name) = key(o);
            let svc: Service = serde_json::from_value(o.clone()).unwrap();
            let spec = svc.spec.unwrap();
            let selector = spec.selector.unwrap();
            if name == "gpulens-dcgm-exporter" {
                assert_eq!(
                    selector,
                    BTreeMap::from([("app".to_owned(), "nvidia-dcgm-exporter".to_owned())])
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
        for o in self.of("Ingress") {
            for tls in o["spec"]["tls"].as_array().into_iter().flatten() {
                let s = tls["secretName"].as_str().unwrap();
                let issued = self
                    .of("Certificate")
                    .iter()
                    .any(|c| c["spec"]["secretName"] == s);
                assert!(
                    issued || self.secret_exists(NS, s),
                    "{what}: the Ingress' TLS Secret {s} is neither issued nor provided"
                );
            }
            for rule in o["spec"]["rules"].as_array().unwrap() {
                for p in rule["http"]["paths"].as_array().unwrap() {
                    let b = &p["backend"]["service"];
                    let svc = self
                        .find("Service", NS, b["name"].as_str().unwrap())
                        .unwrap_or_else(|| panic!("{what}: Ingress backend {b}"));
                    assert!(
                        svc["spec"]["ports"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|p| p["name"] == b["port"]["name"]),
                        "{what}: Ingress port {b}"
                    );
                }
            }
        }
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
    }

    /// Generated secrets are random and long enough for the collector, and the same agent
    /// token sits in both namespaces.
    fn check_secrets(&self) {
        let what = &self.what;
        let mut agent_tokens = BTreeSet::new();
        for s in self.of("Secret") {
            assert!(
                s.get("stringData").is_none(),
                "{what}: {:?} holds plain text",
                key(s)
            );
            for (k, v) in s["data"].as_object().unwrap() {
                let value = base64_decode(v.as_str().unwrap());
                collector::settings::check_token(k, &value)
                    .unwrap_or_else(|e| panic!("{what}: {:?}: {e}", key(s)));
                if k == "agent-token" {
                    agent_tokens.insert(value);
                }
            }
        }
        assert!(
            agent_tokens.len() <= 1,
            "{what}: the collector and the agents hold different agent tokens"
        );
    }

    /// The agent: host PID and /proc, the pod-resources socket, nothing of other pods, no API
    /// token, no GPU, the narrowest security context that works, probes, requests and
    /// limits, no priority class of the chart's choosing, and flags the agent has.
    fn check_agent(&self) {
        let what = &self.what;
        let ns = self.agent_namespace();
        if let Some(n) = self.find("Namespace", "", &ns) {
            assert_eq!(
                n["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "privileged",
                "{what}: the agents' namespace admits what they need, said by its label"
            );
        }
        let pod = self.agent().spec.unwrap();
        assert_eq!(pod.host_pid, Some(true));
        assert_eq!(pod.host_network, None, "{what}: no host network");
        assert_eq!(pod.automount_service_account_token, Some(false));
        let host_paths: Vec<String> = pod
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.host_path.as_ref().map(|h| h.path.clone()))
            .collect();
        for p in ["/proc", "/var/lib/kubelet/pod-resources"] {
            assert!(host_paths.contains(&p.to_owned()), "{what}: {p}");
        }
        for p in &host_paths {
            assert!(
                [
                    "/proc",
                    "/var/lib/kubelet/pod-resources",
                    "/var/lib/gpulens-agent",
                    "/etc/passwd",
                    "/dev/null",
                    "/etc/kubernetes/node-feature-discovery/features.d",
                ]
                .contains(&p.as_str()),
                "{what}: the agent mounts {p} from the host (every pod's secrets live under \
                 /var/lib/kubelet/pods)"
            );
        }
        let sc = pod.security_context.as_ref().unwrap();
        assert_eq!(
            sc.seccomp_profile.as_ref().unwrap().type_,
            "RuntimeDefault",
            "{what}"
        );
        let c = &pod.containers[0];
        let csc = c.security_context.as_ref().unwrap();
        assert_eq!(csc.allow_privilege_escalation, Some(false), "{what}");
        assert_eq!(csc.read_only_root_filesystem, Some(true), "{what}");
        assert_ne!(csc.privileged, Some(true), "{what}");
        let caps = csc.capabilities.as_ref().unwrap();
        assert_eq!(caps.drop, Some(vec!["ALL".to_owned()]), "{what}");
        assert_eq!(
            caps.add,
            Some(vec!["SYS_PTRACE".to_owned(), "DAC_READ_SEARCH".to_owned()]),
            "{what}: exactly the capabilities docs/security.md explains"
        );
        for probe in [&c.liveness_probe, &c.readiness_probe] {
            let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
            assert_eq!(get.path.as_deref(), Some("/healthz"), "{what}");
        }
        let res = c.resources.as_ref().unwrap();
        assert!(res.requests.is_some() && res.limits.is_some(), "{what}");
        assert!(
            res.limits
                .as_ref()
                .unwrap()
                .keys()
                .all(|k| !k.starts_with("nvidia.com/")),
            "{what}: the agent requests no GPU"
        );
        let args = c.args.as_ref().unwrap();
        let collector = args
            .iter()
            .find_map(|a| a.strip_prefix("--collector="))
            .unwrap();
        assert_eq!(
            service_at(self, collector),
            Some((NS.into(), "gpulens-collector".into())),
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
        let dcgm_service = self.find("Service", GPU_OPERATOR, "gpulens-dcgm-exporter");
        if dcgm_service.is_some() {
            assert_eq!(
                dcgm.and_then(|u| service_at(self, u)),
                Some((GPU_OPERATOR.into(), "gpulens-dcgm-exporter".into())),
                "{what}: --dcgm-url is the node-local DCGM Service"
            );
        }
        // The token reaches the agent as a file from the Secret its namespace holds.
        let token_file = args
            .iter()
            .find_map(|a| a.strip_prefix("--token-file="))
            .unwrap_or_else(|| panic!("{what}: the agent reads its token from a file"));
        assert!(
            c.volume_mounts
                .iter()
                .flatten()
                .any(|m| token_file.starts_with(&m.mount_path)),
            "{what}: {token_file} is mounted"
        );
    }

    /// The collector: the restricted Pod Security level, sign-in on (never --insecure-open),
    /// a configuration it accepts, one database.
    fn check_collector(&self) {
        let what = &self.what;
        let dep = self.collector();
        let spec = dep.spec.unwrap();
        let pod = spec.template.spec.unwrap();
        let psc = pod.security_context.as_ref().unwrap();
        assert_eq!(psc.run_as_non_root, Some(true), "{what}");
        assert_eq!(
            psc.seccomp_profile.as_ref().unwrap().type_,
            "RuntimeDefault"
        );
        let c = &pod.containers[0];
        let csc = c.security_context.as_ref().unwrap();
        assert_eq!(csc.allow_privilege_escalation, Some(false));
        assert_eq!(
            csc.capabilities.as_ref().unwrap().drop,
            Some(vec!["ALL".to_owned()])
        );
        assert!(
            pod.host_pid.is_none() && pod.volumes.iter().flatten().all(|v| v.host_path.is_none())
        );
        let args = c.args.as_ref().unwrap();
        assert_eq!(args[0], "serve");
        assert!(
            !args.iter().any(|a| a == "--insecure-open"),
            "{what}: the chart never runs the collector open"
        );
        // The configuration, with its secret files where the pod would mount them.
        let cm: ConfigMap = serde_json::from_value(
            self.find("ConfigMap", NS, "gpulens-collector")
                .unwrap()
                .clone(),
        )
        .unwrap();
        let text = &cm.data.unwrap()["gpulens.toml"];
        let dir = crate::support::TempDir::new("helm-config");
        let secrets = dir.path().join("etc");
        for m in c.volume_mounts.iter().flatten() {
            if m.mount_path.starts_with("/etc/gpulens/") && m.name != "config" {
                let d = secrets.join(m.mount_path.trim_start_matches("/etc/gpulens/"));
                std::fs::create_dir_all(&d).unwrap();
                for k in [
                    "agent-token",
                    "viewer-token",
                    "scrape-token",
                    "client-secret",
                    "platform-key",
                ] {
                    std::fs::write(d.join(k), "0123456789abcdef0123456789abcdef\n").unwrap();
                }
            }
        }
        let text = text.replace("\"/etc/gpulens/", &format!("\"{}/", secrets.display()));
        let config = collector::config::Config::parse(&text)
            .unwrap_or_else(|e| panic!("{what}: the collector refuses its config: {e:#}\n{text}"));
        collector::auth::Auth::from_config(&config.agents)
            .unwrap_or_else(|e| panic!("{what}: agent credentials: {e:#}"));
        assert_eq!(
            config.access.mode(),
            collector::access::settings::Mode::SignIn,
            "{what}: sign-in is on"
        );
        assert!(config.listen.ip().is_unspecified());
        assert_eq!(config.agents.len(), 1);
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

    /// With network policies on: the collector admits the agents, the monitoring namespace and
    /// the configured dashboard peers on its port, nothing else; the agents admit only the
    /// monitoring namespace.
    fn check_network_policies(&self) {
        let what = &self.what;
        let policies = self.of("NetworkPolicy");
        if policies.is_empty() {
            return;
        }
        let collector = self
            .find("NetworkPolicy", NS, "gpulens-collector")
            .unwrap_or_else(|| panic!("{what}: no collector policy"));
        let agent_ns = self.agent_namespace();
        let from = collector["spec"]["ingress"][0]["from"].as_array().unwrap();
        assert!(
            from.iter().any(
                |p| p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                    == agent_ns.as_str()
                    && p["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "gpulens-agent"
            ),
            "{what}: the agents reach ingest"
        );
        assert!(
            from.iter().all(|p| p.get("ipBlock").is_none()
                && (p.get("namespaceSelector").is_some() || p.get("podSelector").is_some())),
            "{what}: no open peer"
        );
        let agent = self
            .find("NetworkPolicy", &agent_ns, "gpulens-agent")
            .unwrap_or_else(|| panic!("{what}: no agent policy"));
        assert_eq!(agent["spec"]["ingress"].as_array().unwrap().len(), 1);
        assert_eq!(
            agent["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "monitoring"
        );
    }

    /// Monitors select what they mean to scrape; the collector's is authenticated.
    fn check_monitors(&self) {
        let what = &self.what;
        for m in self.of("ServiceMonitor") {
            let ns = key(m).1;
            let want = m["spec"]["selector"]["matchLabels"].as_object().unwrap();
            let ep = &m["spec"]["endpoints"][0];
            let port = ep["port"].as_str().unwrap();
            assert!(
                self.of("Service").into_iter().any(|s| {
                    key(s).1 == ns
                        && want.iter().all(|(k, v)| &s["metadata"]["labels"][k] == v)
                        && s["spec"]["ports"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|p| p["name"] == port)
                }),
                "{what}: ServiceMonitor selects no Service with port {port}"
            );
            let cred = &ep["authorization"]["credentials"];
            assert!(
                self.secret_exists(&ns, cred["name"].as_str().unwrap())
                    && cred["key"] == "scrape-token",
                "{what}: the scrape carries the scrape token"
            );
        }
        for m in self.of("PodMonitor") {
            let ns = key(m).1;
            let want = m["spec"]["selector"]["matchLabels"].as_object().unwrap();
            let port = m["spec"]["podMetricsEndpoints"][0]["port"]
                .as_str()
                .unwrap();
            assert!(
                self.pods().iter().any(|(pns, _, t)| {
                    let labels = t.metadata.as_ref().unwrap().labels.clone().unwrap();
                    pns == &ns
                        && want
                            .iter()
                            .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
                        && pod_has_port(t, port)
                }),
                "{what}: PodMonitor selects no pod with port {port}"
            );
        }
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
                   "hostUsers": true, "nfd": {"enabled": true}, "timeSlicingReplicas": 4}}),
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
    let refused: [(&str, Value, &str); 6] = [
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
    // labelled, DCGM from the GPU Operator, policies on, RBAC only for the label writer.
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
            "cluster:pods:list"
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
    let same = &rendered["agents-in-the-release-namespace"];
    assert!(same.of("Namespace").is_empty(), "no namespace created");
    assert_eq!(same.of("DaemonSet")[0]["metadata"]["namespace"], NS);
    assert_eq!(
        same.of("Secret").len(),
        2,
        "one agent token Secret and one access Secret"
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

/// The chart's rule files are what the collector's rule definitions generate today, and each
/// passes promtool: the alert rules fire (and not) on sample series as the collector's own
/// would; the tenant rules sum by the tenant's namespace whether the ServiceMonitor honoured
/// its labels or Prometheus renamed them `exported_*`; the dcgm-labels rules join
/// dcgm-exporter's series on `UUID` and `Hostname` as docs/prometheus.md shows.
#[test]
fn the_charts_rule_files_are_generated_and_pass_promtool_with_kube_prometheus_stack_series() {
    let files = chart().join("files");
    for (file, group) in [
        ("alert.rules.yaml", "alerts"),
        ("tenant.rules.yaml", "tenants"),
        ("dcgm-labels.rules.yaml", "dcgm-labels"),
    ] {
        let path = files.join(file);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            gpulens(&["alert-rules", "--format", "rule-file", "--groups", group]),
            "{} is stale: regenerate it with `gpulens alert-rules --format rule-file --groups {group} --out {}`",
            path.display(),
            path.display()
        );
    }
    if !crate::prometheus::have("promtool") {
        return crate::prometheus::required("promtool");
    }
    let dir = crate::support::TempDir::new("promtool-rules");
    for (rules, test) in [
        ("alert.rules.yaml", "alert-rules.test.yml"),
        ("tenant.rules.yaml", "tenant-rules.test.yml"),
        ("dcgm-labels.rules.yaml", "dcgm-labels.test.yml"),
    ] {
        std::fs::copy(files.join(rules), dir.path().join(rules)).unwrap();
        std::fs::copy(
            root().join("tests/fixtures").join(test),
            dir.path().join(test),
        )
        .unwrap();
        promtool_rules(&dir.path().join(rules), &dir.path().join(test));
    }
}

/// With `[metrics] tenant_series` and other pod labels, `gpulens alert-rules` joins those;
/// promtool checks the result.
#[test]
fn the_tenant_recording_rules_join_the_configured_pod_labels() {
    if !crate::prometheus::have("promtool") {
        return crate::prometheus::required("promtool");
    }
    let dir = crate::support::TempDir::new("promtool-tenant-rules");
    let config = dir.path().join("gpulens.toml");
    std::fs::write(
        &config,
        "[metrics]\ntenant_series = true\npod_labels = [\"label_team\", \"label_app\"]\n",
    )
    .unwrap();
    let rules = gpulens(&[
        "alert-rules",
        "--format",
        "rule-file",
        "--config",
        config.to_str().unwrap(),
    ]);
    for group in [
        "name: gpulens\n",
        "name: gpulens-tenants",
        "name: gpulens-dcgm-labels",
    ] {
        assert!(rules.contains(group), "{group}: {rules}");
    }
    assert!(
        rules.contains("group_left(label_team, label_app)"),
        "{rules}"
    );
    std::fs::write(dir.path().join("all.rules.yml"), rules).unwrap();
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(dir.path().join("all.rules.yml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
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
