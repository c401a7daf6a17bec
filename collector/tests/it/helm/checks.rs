//! What a rendering must hold to be taken by a cluster: wiring, secrets, the agent, the
//! collector, network policies, monitors.

use super::*;

impl Rendered {
    /// What every rendering must satisfy.
    pub(super) fn check(&self) {
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
                        "DaemonSet" | "Secret" | "NetworkPolicy" | "PodMonitor" | "ServiceAccount"
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

    /// Each agent speaks for its own node (its projected token, reviewed for the agents'
    /// ServiceAccount, opens no API), or, with `agentIdentity.mode=sharedToken`, one token
    /// speaks for every node of the cluster.
    fn check_agent_identity(&self, config: &collector::config::Config) {
        let what = &self.what;
        let pod = self.agent().spec.unwrap();
        let token = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "token")
            .unwrap();
        match &config.token_review {
            Some(review) => {
                assert!(config.agents.is_empty(), "{what}: no shared token beside");
                let account = pod.service_account_name.as_deref().unwrap();
                assert_eq!(
                    review.service_account,
                    format!("{}/{account}", self.agent_namespace()),
                    "{what}: the collector reviews for the agents' own account"
                );
                let sa = self
                    .find("ServiceAccount", &self.agent_namespace(), account)
                    .unwrap_or_else(|| panic!("{what}: no ServiceAccount {account}"));
                assert_eq!(sa["automountServiceAccountToken"], false, "{what}");
                let projected = token.projected.as_ref().unwrap().sources.as_ref().unwrap();
                let sat = projected[0].service_account_token.as_ref().unwrap();
                assert_eq!(sat.audience.as_deref(), Some(review.audience.as_str()));
                assert!(
                    !sat.audience.as_deref().unwrap().contains("kubernetes"),
                    "{what}: the agents' token must not open the API server"
                );
                let reviewer = self
                    .of("ClusterRole")
                    .into_iter()
                    .find(|r| r["rules"][0]["resources"][0] == "tokenreviews")
                    .unwrap_or_else(|| panic!("{what}: no role to create TokenReviews"));
                assert_eq!(reviewer["rules"].as_array().unwrap().len(), 1, "{what}");
                assert_eq!(reviewer["rules"][0]["verbs"], serde_json::json!(["create"]));
                assert!(
                    !self
                        .of("Secret")
                        .iter()
                        .any(|s| s["data"].get("agent-token").is_some()),
                    "{what}: no shared agent token generated"
                );
            }
            None => {
                assert_eq!(config.agents.len(), 1, "{what}");
                assert!(token.secret.is_some(), "{what}: the shared token's Secret");
                assert_eq!(pod.service_account_name, None, "{what}");
            }
        }
    }

    /// Generated secrets are random and long enough for the collector, hex (so that no
    /// placeholder word the collector refuses can occur in one by chance: a random 48-letter
    /// token once held "todo"), and the same agent token sits in both namespaces.
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
                collector_shared::settings::check_token(k, &value)
                    .unwrap_or_else(|e| panic!("{what}: {:?}: {e}", key(s)));
                assert!(
                    value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()),
                    "{what}: {:?}: {k} is not 64 hex digits",
                    key(s)
                );
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
        collector_shared::agent_auth::Auth::from_config(
            &config.agents,
            config.token_review.as_ref(),
        )
        .unwrap_or_else(|e| panic!("{what}: agent credentials: {e:#}"));
        assert_eq!(
            config.access.mode(),
            collector_shared::access::settings::Mode::SignIn,
            "{what}: sign-in is on"
        );
        assert!(config.listen.ip().is_unspecified());
        self.check_agent_identity(&config);
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
