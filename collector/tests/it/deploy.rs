//! docker-compose.yml is well-formed with every file it mounts present, publishes nothing beyond
//! the host's loopback, takes its token from the environment, and scrapes only what runs
//! (`docker compose config` cannot run on the build machines: no Docker). The Dockerfile
//! caches the workspace's dependencies in a layer of their own. The Kubernetes install is the
//! Helm chart, checked as Helm renders it in helm.rs.

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
        "dcgm-exporter",
        "alertmanager",
        "prometheus",
        "grafana",
    ] {
        assert!(services.contains_key(s), "service {s}");
    }
    let profiles = |s: &str| services[s]["profiles"].clone();
    assert_eq!(profiles("agent"), serde_json::json!(["gpu"]));
    assert_eq!(profiles("simulator"), serde_json::json!(["cpu"]));
    assert_eq!(profiles("dcgm-exporter"), serde_json::json!(["dcgm"]));
    assert_eq!(profiles("alertmanager"), serde_json::json!(["alerts"]));
    // Published on the host's loopback only.
    for (name, s) in services {
        for p in s["ports"].as_array().into_iter().flatten() {
            assert!(
                p.as_str().unwrap().starts_with("127.0.0.1:"),
                "{name} publishes {p} beyond loopback"
            );
        }
    }
    // The token is Compose's secret from the environment, never a value in a file.
    assert_eq!(
        compose["secrets"]["agent_token"]["environment"],
        "GPULENS_AGENT_TOKEN"
    );
    for s in ["collector", "agent", "simulator", "prometheus"] {
        assert_eq!(
            services[s]["secrets"],
            serde_json::json!(["agent_token"]),
            "{s}"
        );
    }
    let text = std::fs::read_to_string(root().join("docker-compose.yml")).unwrap();
    assert!(
        !text.contains("GPULENS_TOKEN:"),
        "no token in the Compose file"
    );
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
    // The collector's configuration is accepted, and reads the secret's file that the agent,
    // the simulator and Prometheus' remote write read.
    let dir = crate::support::TempDir::new("compose-config");
    std::fs::write(dir.path().join("agent_token"), "0123456789abcdef0123\n").unwrap();
    let config = collector::config::Config::parse(
        &std::fs::read_to_string(root().join("deploy/compose/gpulens.toml"))
            .unwrap()
            .replace("/run/secrets/", &format!("{}/", dir.path().display())),
    )
    .unwrap();
    assert!(config.agents[0].token.is_some());
    for s in ["agent", "simulator"] {
        assert!(
            services[s]["command"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a == "--token-file=/run/secrets/agent_token"),
            "{s} reads the secret"
        );
    }
    // The simulator's scenario is in the image (the Dockerfile copies scenarios/).
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    // Its dependency layer has every workspace member's manifest (cargo fetch --locked reads
    // them all), and a stub source for each.
    let manifest: toml::Table = std::fs::read_to_string(root().join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let crates = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("RUN crates=\""))
        .and_then(|l| l.split('"').next())
        .expect("the Dockerfile's list of crates");
    for m in manifest["workspace"]["members"].as_array().unwrap() {
        let m = m.as_str().unwrap();
        assert!(
            dockerfile.contains(&format!("COPY {m}/Cargo.toml {m}/")),
            "the Dockerfile copies {m}/Cargo.toml"
        );
        assert!(
            crates.split(' ').any(|c| c == m),
            "{m} is in the Dockerfile's crates"
        );
    }
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
    let jobs = p["scrape_configs"].as_array().unwrap();
    // A job of a profile's service finds it by DNS, so it has no target when the profile is off.
    for (job, service) in [
        ("gpulens-agent", "agent"),
        ("dcgm-exporter", "dcgm-exporter"),
    ] {
        let j = jobs.iter().find(|j| j["job_name"] == job).unwrap();
        assert_eq!(j["dns_sd_configs"][0]["names"][0], service, "{job}");
    }
    assert_eq!(
        p["remote_write"][0]["authorization"]["credentials_file"],
        "/run/secrets/agent_token"
    );
    // The Dockerfile: dependencies fetched in a layer of their own from every workspace
    // member's manifest, before the sources are copied.
    let workspace: Value =
        toml::from_str(&std::fs::read_to_string(root().join("Cargo.toml")).unwrap()).unwrap();
    let fetch = dockerfile
        .find("cargo fetch --locked")
        .expect("a fetch layer");
    let sources = dockerfile.find("COPY . .").unwrap();
    assert!(fetch < sources);
    for m in workspace["workspace"]["members"].as_array().unwrap() {
        let m = m.as_str().unwrap();
        assert!(
            dockerfile[..fetch].contains(&format!("COPY {m}/Cargo.toml {m}/")),
            "the Dockerfile's dependency layer lacks {m}/Cargo.toml"
        );
    }
    assert!(dockerfile.contains("USER 65532:65532"));
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
