//! docker-compose.yml is well-formed with every file it mounts present (`docker compose config`
//! cannot run on the build machines: no Docker). The Kubernetes install is checked as kustomize
//! renders it, in kustomize.rs.

use std::path::{Path, PathBuf};

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
