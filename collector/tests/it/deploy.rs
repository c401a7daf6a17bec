//! The deployment files: every Kubernetes object parses into its k8s-openapi type (the
//! ServiceMonitor into the fields the Prometheus Operator reads), the pieces refer to each
//! other correctly, the collector's ConfigMap is a configuration the collector accepts, and
//! docker-compose.yml is well-formed with every file it mounts present (`docker compose config`
//! cannot run on the build machines: no Docker).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

#[test]
fn kubernetes_manifests_parse_and_fit_together() {
    let dir = root().join("deploy/kubernetes");
    let kustomization = &docs(&dir.join("kustomization.yaml"))[0];
    let listed: Vec<String> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    on_disk.sort();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(sorted, on_disk, "kustomization.yaml lists every manifest");

    let mut by_kind: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for f in &listed {
        for d in docs(&dir.join(f)) {
            let kind = d["kind"].as_str().unwrap().to_owned();
            match kind.as_str() {
                "Namespace" => drop(serde_json::from_value::<Namespace>(d.clone()).unwrap()),
                "Secret" => drop(serde_json::from_value::<Secret>(d.clone()).unwrap()),
                "ConfigMap" => drop(serde_json::from_value::<ConfigMap>(d.clone()).unwrap()),
                "Service" => drop(serde_json::from_value::<Service>(d.clone()).unwrap()),
                "ServiceAccount" => {
                    drop(serde_json::from_value::<ServiceAccount>(d.clone()).unwrap())
                }
                "Deployment" => drop(serde_json::from_value::<Deployment>(d.clone()).unwrap()),
                "DaemonSet" => drop(serde_json::from_value::<DaemonSet>(d.clone()).unwrap()),
                "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding" => {}
                "ServiceMonitor" => {
                    assert_eq!(d["apiVersion"], "monitoring.coreos.com/v1");
                    assert!(d["spec"]["selector"]["matchLabels"].is_object());
                    assert!(d["spec"]["endpoints"][0]["port"].is_string());
                }
                other => panic!("{f}: unexpected kind {other}"),
            }
            by_kind.entry(kind).or_default().push(d);
        }
    }
    let one = |k: &str| by_kind[k][0].clone();

    // The collector's configuration is one the collector accepts.
    let cm: ConfigMap = serde_json::from_value(one("ConfigMap")).unwrap();
    let toml = &cm.data.unwrap()["gpulens.toml"];
    let config = collector::config::Config::parse(toml).unwrap();
    assert_eq!(config.agents[0].cluster.as_deref(), Some("prod"));

    // The Deployment: its config and secret are the ones defined, its account has the RBAC.
    let dep: Deployment = serde_json::from_value(one("Deployment")).unwrap();
    let pod = dep.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("gpulens-collector")
    );
    let sa: ServiceAccount = serde_json::from_value(one("ServiceAccount")).unwrap();
    assert_eq!(sa.metadata.name.as_deref(), Some("gpulens-collector"));
    let secret: Secret = serde_json::from_value(one("Secret")).unwrap();
    let keys: Vec<String> = secret.string_data.unwrap().into_keys().collect();
    for k in ["database-url", "agent-token"] {
        assert!(keys.contains(&k.to_owned()), "{k}");
    }
    let c = &pod.containers[0];
    assert_eq!(c.args.as_ref().unwrap()[0], "serve");
    let probe = c
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(probe.path.as_deref(), Some("/readyz"));

    // The Service selects the collector's pods; the ServiceMonitor selects the Service.
    let svc: Service = serde_json::from_value(one("Service")).unwrap();
    let selector = svc.spec.as_ref().unwrap().selector.clone().unwrap();
    let labels = dep_labels(&one("Deployment"));
    for (k, v) in &selector {
        assert_eq!(labels.get(k), Some(v), "the Service selects the collector");
    }
    let sm = one("ServiceMonitor");
    let svc_labels = svc.metadata.labels.clone().unwrap();
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(svc_labels.get(k).map(String::as_str), v.as_str());
    }
    let port = sm["spec"]["endpoints"][0]["port"].as_str().unwrap();
    assert!(
        svc.spec
            .unwrap()
            .ports
            .unwrap()
            .iter()
            .any(|p| p.name.as_deref() == Some(port))
    );

    // The agent: GPU nodes only, GPU taints tolerated, host PID and /proc, the pod-resources
    // socket, the NVML library through the NVIDIA runtime, no API token, no GPU requested.
    let ds: DaemonSet = serde_json::from_value(one("DaemonSet")).unwrap();
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.host_pid, Some(true));
    assert_eq!(pod.runtime_class_name.as_deref(), Some("nvidia"));
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
        assert!(paths.contains(&p.to_owned()), "{p} from the host");
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
            .all(|k| !k.starts_with("nvidia.com/"))
    );
    let args = c.args.as_ref().unwrap();
    assert!(args.contains(&"--proc-root=/host/proc".to_owned()));
    assert!(
        args.iter()
            .any(|a| a.starts_with("--collector=http://gpulens-collector.gpulens.svc:8080"))
    );
    let env: Vec<&str> = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    for e in ["GPULENS_NODE", "GPULENS_TOKEN", "NVIDIA_VISIBLE_DEVICES"] {
        assert!(env.contains(&e), "{e}");
    }
    // Every flag the agent is given exists.
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
            "gpulens-agent has no --{flag}"
        );
    }
}

fn dep_labels(d: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(d["spec"]["template"]["metadata"]["labels"].clone()).unwrap()
}

#[test]
fn docker_compose_is_well_formed_and_its_files_exist() {
    let compose: Value = docs(&root().join("docker-compose.yml")).remove(0);
    let services = compose["services"].as_object().unwrap();
    for s in [
        "postgres",
        "collector",
        "agent",
        "simulator",
        "prometheus",
        "grafana",
    ] {
        assert!(services.contains_key(s), "service {s}");
    }
    let profiles = |s: &str| services[s]["profiles"].clone();
    assert_eq!(profiles("agent"), serde_json::json!(["gpu"]));
    assert_eq!(profiles("simulator"), serde_json::json!(["cpu"]));
    assert_eq!(services["agent"]["runtime"], "nvidia");
    assert_eq!(services["agent"]["pid"], "host");
    // Every file mounted from the repository is there.
    for (name, s) in services {
        for v in s["volumes"].as_array().into_iter().flatten() {
            let v = v.as_str().unwrap();
            if let Some(rel) = v.strip_prefix("./") {
                let host = rel.split(':').next().unwrap();
                assert!(root().join(host).exists(), "{name}: {host} is missing");
            }
        }
    }
    // The collector's configuration is accepted, and takes the agent's and simulator's token.
    let config = collector::config::Config::parse(
        &std::fs::read_to_string(root().join("deploy/compose/gpulens.toml")).unwrap(),
    )
    .unwrap();
    let token = services["agent"]["environment"]["GPULENS_TOKEN"]
        .as_str()
        .unwrap();
    assert_eq!(services["simulator"]["environment"]["GPULENS_TOKEN"], token);
    assert_eq!(config.agents[0].token.as_ref().unwrap().0, token);
    // The simulator's scenario is in the image (the Dockerfile copies scenarios/).
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    assert!(dockerfile.contains("COPY scenarios /usr/share/gpulens/scenarios"));
    let scenario = services["simulator"]["command"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|a| {
            a.as_str()
                .unwrap()
                .strip_prefix("--scenario=/usr/share/gpulens/")
        })
        .unwrap()
        .to_owned();
    assert!(root().join(&scenario).exists(), "{scenario}");
    // Prometheus' and Grafana's provisioning parse; promtool checks the former when installed.
    let prom = root().join("deploy/compose/prometheus.yml");
    let p = docs(&prom).remove(0);
    assert!(p["scrape_configs"].as_array().unwrap().len() >= 2);
    if let Ok(out) = std::process::Command::new("promtool")
        .args(["check", "config", "--syntax-only"])
        .arg(&prom)
        .output()
    {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for f in ["datasources/gpulens.yml", "dashboards/gpulens.yml"] {
        let d = docs(&root().join("deploy/compose/grafana/provisioning").join(f)).remove(0);
        assert_eq!(d["apiVersion"], 1, "{f}");
    }
    // `docker compose config` where a Compose client exists (the Docker CLI alone is not one).
    let compose = std::process::Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if compose {
        let out = std::process::Command::new("docker")
            .args(["compose", "-f"])
            .arg(root().join("docker-compose.yml"))
            .args(["config", "-q"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "docker compose config: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        eprintln!("no Compose client here: `docker compose config` not run");
    }
}
