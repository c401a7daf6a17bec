//! Prometheus: the collector's /metrics passes `promtool check metrics` (a golden scrape, as
//! node_exporter does it); a real Prometheus scrapes a running `gpulens demo`; and every panel
//! of the Grafana dashboards in dashboards/ runs against that Prometheus without error and with
//! data. tests/run.sh installs Prometheus (Debian's `prometheus`, which brings promtool).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use serde_json::Value;
use tower::ServiceExt;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn have(bin: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

pub(crate) fn required(what: &str) {
    assert!(
        std::env::var("GPULENS_REQUIRE_PROMETHEUS").is_err(),
        "{what} is not installed"
    );
    eprintln!("skipping: no {what} (run the suite with tests/run.sh)");
}

use test_support::promtool;

#[tokio::test]
async fn the_collectors_metrics_pass_promtool() {
    if !have("promtool") {
        return required("promtool");
    }
    let t = crate::support::sqlite().await;
    let fleet = crate::support::fleet();
    let now = collector::now_ms();
    let state = collector::state::AppState::new(
        t.store.clone(),
        {
            let mut a = collector_shared::agent_auth::Auth::default();
            a.add("metrics-token", vec!["*".into()], None);
            a
        },
        Default::default(),
        Default::default(),
        Default::default(),
    )
    .with_fleet_metrics(&collector::fleet::MetricsSettings {
        tenant_series: true,
        ..Default::default()
    });
    // Batches through the real ingest endpoint, so the fleet gauges fill as they do live.
    let instants: Vec<i64> = (0..60).map(|i| now - 3_600_000 + i * 60_000).collect();
    for node in 0..fleet.nodes.len() {
        let b = fleet.batch(node, "metrics", 1, &instants, 60_000);
        let resp = collector::router::router(state.clone())
            .oneshot(
                Request::post("/api/v1/ingest")
                    .header("authorization", "Bearer metrics-token")
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&b).unwrap()))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
    }
    t.store.rollup(now).await.unwrap();
    collector::analysis::scheduled(&t.store, &Default::default(), &Default::default())
        .await
        .unwrap()
        .unwrap();
    let (ct, text) = scrape(&state, None).await;
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    promtool::check_metrics(&text)
        .unwrap_or_else(|e| panic!("promtool check metrics:\n{e}\n{text}"));
    promtool::check_vocabulary(&text).unwrap_or_else(|e| panic!("label vocabulary:\n{e}"));
    assert!(text.contains("gpulens_finding_headline{"), "{text}");
    for family in [
        "gpulens_ingest_batches_total{outcome=\"stored\"}",
        "gpulens_fleet_gpu_utilization_ratio{",
        "gpulens_fleet_gpu_memory_used_bytes{",
        "gpulens_funnel_gpu_seconds{stage=\"allocated\"}",
        "gpulens_findings{",
        "gpulens_recommendations_gpus_freed{",
        "gpulens_alerts{",
    ] {
        assert!(text.contains(family), "{family} missing from the scrape");
    }
    // One series per GPU of the fleet (utilization is absent under MIG, allocation never).
    let gpus = text
        .lines()
        .filter(|l| l.starts_with("gpulens_fleet_gpu_allocated_ratio{"))
        .count();
    assert_eq!(gpus, fleet.gpu_count());
    // Opted in, one series per tenant holding a GPU in the newest snapshot: never more than the
    // allocations the fleet sent, and Kubernetes tenants carry namespace, pod and container.
    let holders = text
        .lines()
        .filter(|l| l.starts_with("gpulens_tenant_gpu_allocated_ratio{"))
        .collect::<Vec<_>>();
    let allocations: usize = (0..fleet.nodes.len())
        .map(|n| {
            fleet
                .snapshot(n, *instants.last().unwrap())
                .0
                .allocations
                .len()
        })
        .sum();
    assert!(
        !holders.is_empty() && holders.len() <= allocations,
        "{holders:#?}"
    );
    assert!(
        holders
            .iter()
            .filter(|l| l.contains("tenant_kind=\"pod\""))
            .all(|l| l.contains("namespace=") && l.contains("pod=") && l.contains("container=")),
        "{holders:#?}"
    );
    // OpenMetrics when asked for it.
    let (ct, om) = scrape(&state, Some("application/openmetrics-text;version=1.0.0")).await;
    assert!(ct.starts_with("application/openmetrics-text"));
    assert!(om.ends_with("# EOF\n"));
    assert_eq!(om.matches("# EOF").count(), 1);
}

/// `GET /metrics` through the router, with `accept` when given: the content type and body.
async fn scrape(
    state: &collector::state::AppState,
    accept: Option<&'static str>,
) -> (String, String) {
    let mut r = Request::get("/metrics");
    if let Some(a) = accept {
        r = r.header("accept", a);
    }
    let (_, ct, text) = crate::support::answer(state, r.body(Body::empty()).unwrap()).await;
    (ct, text)
}

/// The store's pool on /metrics (PostgreSQL): connections open and lent out, read at each
/// scrape. While batches come, ingest's committers hold connections; once ingest is quiet
/// they give them back, and the scrape shows none in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_pool_shows_on_metrics_and_empties_when_ingest_is_quiet() {
    let Some(t) = crate::support::postgres().await else {
        return;
    };
    let state = crate::support::default_state(t.store.clone());
    crate::support::ingest_small_fleet(&t.store, &Default::default()).await;
    let gauge = |text: &str, name: &str| -> i64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} is not on /metrics:\n{text}"));
        line[name.len() + 1..].trim().parse().unwrap()
    };
    let (_, text) = scrape(&state, None).await;
    let open = gauge(&text, "gpulens_store_connections_open");
    let in_use = gauge(&text, "gpulens_store_connections_in_use");
    assert!((1..=12).contains(&open), "{open} open");
    assert!((0..=open).contains(&in_use), "{in_use} of {open} in use");
    let quiet = Instant::now();
    loop {
        let (_, text) = scrape(&state, None).await;
        if gauge(&text, "gpulens_store_connections_in_use") == 0 {
            break;
        }
        assert!(
            quiet.elapsed() < Duration::from_secs(10),
            "connections still in use 10 s after the last batch:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn query(http: &reqwest::Client, prom: &str, expr: &str) -> Result<Vec<Value>, String> {
    let resp = http
        .get(format!(
            "{prom}/api/v1/query?query={}",
            web::format::enc(expr)
        ))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_slice(&resp.bytes().await.map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    if v["status"] != "success" {
        return Err(format!("{}: {}", v["errorType"], v["error"]));
    }
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// The dashboards' form without a Prometheus: described panels with units, a templated data
/// source, and pickers that list MIG-only GPUs and nodes too.
#[test]
fn dashboards_are_well_formed_and_their_pickers_list_every_gpu() {
    assert!(panel_queries().len() > 10);
}

/// Every panel query of every dashboard, with its template variables set to "all".
fn panel_queries() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root().join("dashboards")).unwrap() {
        let path = entry.unwrap().path();
        let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let vars: Vec<String> = d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap().to_owned())
            .collect();
        assert!(
            vars.contains(&"datasource".to_owned()),
            "{name}: templated datasource"
        );
        // Pickers list every GPU and node: their series must exist on MIG GPUs and without
        // DCGM too (docs/metrics.md says which are absent where).
        let metrics_doc = std::fs::read_to_string(root().join("docs/metrics.md")).unwrap();
        for v in d["templating"]["list"].as_array().unwrap() {
            let Some(q) = v["definition"].as_str() else {
                continue;
            };
            if let Some(rest) = q.strip_prefix("label_values(") {
                let metric = rest.split(['{', ',']).next().unwrap().trim();
                let row = metrics_doc
                    .lines()
                    .find(|l| l.starts_with(&format!("| `{metric}`")))
                    .unwrap_or_else(|| panic!("{name}: picker series {metric} is not documented"));
                assert!(
                    !row.contains("absent"),
                    "{name}: the picker reads {metric}, which some GPUs lack: {row}"
                );
            }
        }
        for p in d["panels"].as_array().unwrap() {
            let title = p["title"].as_str().unwrap().to_owned();
            assert!(
                !p["description"].as_str().unwrap_or("").is_empty(),
                "{name}/{title}: no description"
            );
            assert!(
                p["fieldConfig"]["defaults"]["unit"].is_string(),
                "{name}/{title}: no unit"
            );
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{name}/{title}");
            for t in p["targets"].as_array().unwrap() {
                let mut expr = t["expr"].as_str().unwrap().to_owned();
                for v in &vars {
                    expr = expr.replace(&format!("${v}"), ".+");
                }
                assert!(
                    !expr.contains('$'),
                    "{name}/{title}: unknown variable in {expr}"
                );
                out.push((name.clone(), title.clone(), expr));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_prometheus_scrapes_the_demo_and_every_dashboard_panel_has_data() {
    if !have("prometheus") {
        return required("prometheus");
    }
    let dir = crate::support::TempDir::new("prometheus");
    let demo_port = crate::support::free_port();
    let _demo = crate::support::Killed(
        Command::new(env!("CARGO_BIN_EXE_gpulens"))
            .args(["demo", "--history", "6h", "--listen"])
            .arg(format!("127.0.0.1:{demo_port}"))
            .arg("--data-dir")
            .arg(dir.path().join("demo"))
            .env("GPULENS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // A real agent on the fake NVML stand-in, shipping to the demo with the token the demo
    // writes to its env file, its own /metrics scraped too.
    let bin_dir = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_owned();
    let (agent_bin, fake_nvml) = (
        bin_dir.join("gpulens-agent"),
        bin_dir.join("libfake_nvml.so"),
    );
    assert!(
        agent_bin.exists() && fake_nvml.exists(),
        "build the workspace first (cargo build --workspace): {} {}",
        agent_bin.display(),
        fake_nvml.display()
    );
    let env_file = dir.path().join("demo/env");
    let deadline = Instant::now() + Duration::from_secs(120);
    let token = loop {
        if let Some(t) = std::fs::read_to_string(&env_file).ok().and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("export GPULENS_TOKEN='"))
                .map(|v| v.trim_end_matches('\'').to_owned())
        }) {
            break t;
        }
        assert!(Instant::now() < deadline, "the demo wrote no env file");
        std::thread::sleep(Duration::from_millis(200));
    };
    let agent_port = crate::support::free_port();
    let _agent = crate::support::Killed(
        Command::new(&agent_bin)
            .args(["run", "--cluster", "prod-k8s", "--node", "k8s-node-1"])
            .args(["--spool-min-free-percent", "0"])
            .arg("--nvml-lib")
            .arg(&fake_nvml)
            .arg("--proc-root")
            .arg(root().join("agent/tests/fixtures/proc"))
            .args(["--collector", &format!("http://127.0.0.1:{demo_port}")])
            .args([
                "--interval",
                "1s",
                "--listen",
                &format!("127.0.0.1:{agent_port}"),
            ])
            .arg("--state-dir")
            .arg(dir.path().join("agent"))
            .env("GPULENS_TOKEN", &token)
            .env(
                "GPULENS_FAKE_NVML_FIXTURE",
                root().join("testing/fake-nvml/fixtures/k8s-node.json"),
            )
            .env("GPULENS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // The alert rules as `gpulens alert-rules` generates them for Prometheus.
    let rules = dir.path().join("gpulens.rules.yml");
    let status = Command::new(env!("CARGO_BIN_EXE_gpulens"))
        .args(["alert-rules", "--format", "rule-file", "--out"])
        .arg(&rules)
        .status()
        .unwrap();
    assert!(status.success());
    let (_prom, prom) = crate::support::prometheus(
        &dir,
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: gpulens\n    static_configs:\n      - targets: ['127.0.0.1:{demo_port}']\n  - job_name: gpulens-agent\n    static_configs:\n      - targets: ['127.0.0.1:{agent_port}']\n",
            rules.display()
        ),
    );
    let http = ingest_client::http().build().unwrap();
    // The demo backfills, analyses, then streams; Prometheus scrapes it every second.
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let gpus = query(&http, &prom, "count(gpulens_fleet_gpu_allocated_ratio)").await;
        let funnel = query(&http, &prom, "gpulens_funnel_gpu_seconds").await;
        let ingest = query(&http, &prom, "rate(gpulens_ingest_rows_total[5m])").await;
        if let (Ok(g), Ok(f), Ok(i)) = (&gpus, &funnel, &ingest)
            // The demo's 20 GPUs and the agent's three.
            && g.first().and_then(|x| x["value"][1].as_str()) == Some("23")
            && !f.is_empty()
            && !i.is_empty()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus did not get the demo's metrics: {gpus:?} {funnel:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Both scrape targets are healthy.
    let v = crate::support::get_json(&http, &format!("{prom}/api/v1/targets")).await;
    let targets = v["data"]["activeTargets"].as_array().unwrap();
    assert_eq!(targets.len(), 2, "{v}");
    assert!(targets.iter().all(|t| t["health"] == "up"), "{v}");
    // One label vocabulary: the agent's GPU series join the collector's on cluster, node and
    // GPU UUID, for the GPUs the agent sent.
    let join = "gpulens_gpu_memory_total_bytes * on (cluster, node, gpu_uuid) group_left() gpulens_fleet_gpu_memory_total_bytes";
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match query(&http, &prom, join).await {
            Ok(r) if r.len() == 3 => break,
            other => assert!(
                Instant::now() < deadline,
                "the agent's and the collector's series do not join: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Every panel of every dashboard.
    let queries = panel_queries();
    assert!(queries.len() >= 20);
    let mut failures = Vec::new();
    for (dash, title, expr) in &queries {
        match query(&http, &prom, expr).await {
            Ok(r) if r.is_empty() => failures.push(format!("{dash}/{title}: no data for {expr}")),
            Ok(_) => {}
            Err(e) => failures.push(format!("{dash}/{title}: {e} in {expr}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Prometheus, running the generated rules on the scraped series, fires the same finding
    // alerts (by rule, node and GPU) as the collector's own rules, idle allocations included.
    let finding_alerts =
        |alerts: &[Value]| -> std::collections::BTreeSet<(String, String, String)> {
            alerts
                .iter()
                .filter(|a| {
                    a["state"] == "firing"
                        && a["labels"]["alertname"]
                            .as_str()
                            .is_some_and(|n| n.starts_with("Gpu"))
                })
                .map(|a| {
                    let l = |k: &str| a["labels"][k].as_str().unwrap_or("").to_owned();
                    (l("alertname"), l("node"), l("gpu_uuid"))
                })
                .collect()
        };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let p = crate::support::get_json(&http, &format!("{prom}/api/v1/alerts")).await;
        let c = crate::support::get_json(
            &http,
            &format!("http://127.0.0.1:{demo_port}/api/v1/alerts"),
        )
        .await;
        let from_prometheus = finding_alerts(p["data"]["alerts"].as_array().unwrap());
        let from_collector = finding_alerts(c["alerts"].as_array().unwrap());
        if !from_prometheus.is_empty()
            && from_prometheus == from_collector
            && from_prometheus.iter().any(|a| a.0 == "GpuIdleAllocation")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus' alerts differ from the collector's:\n{from_prometheus:#?}\n{from_collector:#?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
