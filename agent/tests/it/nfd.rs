//! Node Feature Discovery end to end with real processes: `gpulens serve` (SQLite, labels in
//! `advise` mode without the Kubernetes API) analyses what `gpulens-agent run` ships, and the
//! agent writes the node's advisory labels into its features.d file.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::delivery::{Proc, collector, free_port, root, wait_until};

#[test]
fn the_agent_writes_the_collectors_advisory_labels_for_nfd() {
    let work = agent::scratch::fresh_dir("nfd-e2e").unwrap();
    let features = work.join("features.d");
    std::fs::create_dir_all(&features).unwrap();
    let config = work.join("collector.toml");
    // The token as a platform hands it over: a mounted secret file, read by both sides.
    let token_file = work.join("agent-token");
    std::fs::write(&token_file, "nfd-token-1234567\n").unwrap();
    std::fs::write(
        &config,
        format!(
            r#"rollup_every = "1s"

[[agents]]
token = {{ file = {:?} }}
nodes = ["gpu-h100-01"]

[analytics]
every = "2s"

[labels]
mode = "advise"
api = false
"#,
            token_file.display().to_string()
        ),
    )
    .unwrap();
    let db = format!("sqlite://{}", work.join("gpulens.db").display());
    let port = free_port();
    let _c = collector(&db, &config, port);
    let _a = Proc(
        Command::new(env!("CARGO_BIN_EXE_gpulens-agent"))
            .args(["run", "--backend", "simulated", "--node", "gpu-h100-01"])
            .args(["--spool-min-free-percent", "0"])
            .arg("--scenario")
            .arg(root().join("scenarios/k8s-mixed.toml"))
            .arg("--token-file")
            .arg(&token_file)
            .args(["--listen", "off"])
            .args(["--collector", &format!("http://127.0.0.1:{port}")])
            .args(["--interval", "200ms", "--nfd-every", "500ms"])
            .arg("--state-dir")
            .arg(work.join("agent"))
            .arg("--nfd-dir")
            .arg(&features)
            .env("GPULENS_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let file = features.join("gpulens");
    let read = || std::fs::read_to_string(&file).unwrap_or_default();
    // The node enters the analysis once its first minute is rolled up (a minute and a bit).
    wait_until(
        "the NFD file with the node's labels",
        Duration::from_secs(240),
        || read().contains("gpulens.io/utilization-class="),
    );
    let text = read();
    let mut labels = Vec::new();
    let mut expiry = None;
    for line in text.lines() {
        if let Some(e) = line.strip_prefix("# +expiry-time=") {
            expiry = Some(e.to_owned());
        } else if !line.starts_with('#') {
            let (k, v) = line.split_once('=').expect("key=value");
            assert!(k.starts_with("gpulens.io/"), "{line}");
            labels.push((k.to_owned(), v.to_owned()));
        }
    }
    let keys: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
    assert!(keys.contains(&"gpulens.io/analyzed-at"), "{text}");
    assert!(keys.contains(&"gpulens.io/recommended-sharing"), "{text}");
    // Expiry in the future, at least the hour the agent promises.
    let expiry = model::time::parse_rfc3339(&expiry.expect("an expiry directive")).unwrap();
    let ahead = expiry - model::time::now_ms();
    assert!(ahead > 3_500_000, "expiry {ahead} ms ahead");
    // Only the finished file, no temporary left behind.
    let names: Vec<String> = std::fs::read_dir(&features)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["gpulens"]);
    let _ = std::fs::remove_dir_all(&work);
}
