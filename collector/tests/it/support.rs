//! Test support: the store's (temporary directories, stores on both backends, PostgreSQL
//! servers and clusters, a small fleet; in the `test-support` crate, `testing/support`) and what only the
//! collector's tests need (other servers' APIs, Prometheus).

use std::process::Command;

pub use test_support::stores::*;

/// The collector's state over `store` with every setting at its default: reads open, no
/// agent tokens, default ingest limits, retention and teams.
pub fn default_state(store: store::Store) -> collector::state::AppState {
    collector::state::AppState::new(
        store,
        Default::default(),
        Default::default(),
        Default::default(),
        Default::default(),
    )
}

/// GETs `url` and parses the answer as JSON (a test's view of another server's API).
pub async fn get_json(http: &reqwest::Client, url: &str) -> serde_json::Value {
    let body = http.get(url).send().await.unwrap().bytes().await.unwrap();
    serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{url}: not JSON: {e}"))
}

/// A child process killed (and reaped) when the test ends, however it ends.
pub struct Killed(pub std::process::Child);

/// Starts a Prometheus server with `config` (YAML), its data under `dir`; the process and its
/// base URL.
pub fn prometheus(dir: &TempDir, config: &str) -> (Killed, String) {
    let file = dir.path().join("prometheus.yml");
    std::fs::write(&file, config).unwrap();
    let port = free_port();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    (Killed(child), format!("http://127.0.0.1:{port}"))
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The small fleet's last 20 seconds, stored with teams from the default mapping (namespaces,
/// accounts, users): tenants of teams ml, nb, physics and bob.
pub async fn ingest_small_fleet(store: &store::Store, teams: &collector::config::TeamsConfig) {
    let fleet = fleet();
    let now = model::time::now_ms();
    let instants: Vec<i64> = (0..20).map(|i| now - 60_000 + i * 1000).collect();
    for b in batches(&fleet, "test", &instants, 10, 1000) {
        store.ingest(&b, now, &|x| teams.team_of(x)).await.unwrap();
    }
}

/// A stored analysis of the last hour with one time-slicing step `id` on `node` (cluster
/// `c`), four ways, and nothing else; its label action planned when `plan` is set.
pub async fn store_time_slicing_step(
    store: &store::Store,
    id: &str,
    node: &str,
    plan: bool,
) -> analytics::Analysis {
    use analytics::recommend::{Proposal, RecKind, Recommendation};
    let now = model::time::now_ms();
    let rec = Recommendation {
        id: id.into(),
        kind: RecKind::TimeSlicing,
        cluster: "c".into(),
        node: node.into(),
        gpus: vec!["GPU-1".into()],
        tenants: vec!["pod/a".into(), "pod/b".into()],
        team: None,
        summary: format!("share {node}'s GPUs four ways"),
        confidence: 0.8,
        findings: vec![],
        proposal: Proposal::Sharing {
            mode: model::inventory::Sharing::TimeSlicing,
            replicas: 4,
            device_plugin_yaml: analytics::recommend::device_plugin_config(
                model::inventory::Sharing::TimeSlicing,
                4,
            ),
            moves: vec![],
        },
        replay: analytics::Replay {
            gpus_freed: 1.0,
            ..Default::default()
        },
        evidence: vec![],
        requires: vec![],
        serves: vec![],
        interrupts: vec![],
        held_out: None,
        ahead: None,
    };
    // The plan's one step: it frees that GPU.
    let fleet_plan = analytics::FleetPlan {
        gpus_in_use: 2,
        gpus_after: 1,
        gpus_freed: 1,
        currency: "USD".into(),
        steps: vec![id.into()],
        ..Default::default()
    };
    let mut a: serde_json::Value = serde_json::json!({
        "from_ms": now - 3_600_000, "to_ms": now, "generated_ms": now,
        "funnel": {"from_ms": 0, "to_ms": 0, "currency": "USD",
            "total": {"key": "all", "capacity_gpu_hours": 1.0, "allocated_gpu_hours": 1.0, "active_gpu_hours": 1.0,
                      "effective_gpu_hours": 0.1, "waste_gpu_hours": 0.9, "cost": 1.0, "waste_cost": 0.9,
                      "effective_ratio": 0.1, "effective_signal": "gpu_util"},
            "by_cluster": [], "by_model": [], "by_node": [], "by_team": [], "by_tenant": []},
        "findings": [], "rejected": [], "limitations": []
    });
    a["recommendations"] = serde_json::json!([rec]);
    a["plan"] = serde_json::to_value(&fleet_plan).unwrap();
    let analysis: analytics::Analysis = serde_json::from_value(a).unwrap();
    collector::analysis::save(store, &analysis, now, 5)
        .await
        .unwrap();
    if plan {
        let plans = collector::labels::workflow::plans(&analysis, "c", None);
        collector::labels::actions::record_plans(store, &plans, "gpulens-analysis", now)
            .await
            .unwrap();
    }
    analysis
}

/// The default analysis of what `store` holds between `from` and `to`, as a scheduled pass
/// loads and computes it.
pub async fn analyse(store: &store::Store, from: i64, to: i64) -> analytics::Analysis {
    let cfg = analytics::Config::default();
    let input = collector::analysis::load(store, &cfg, collector::analysis::Span::closed(from, to))
        .await
        .unwrap();
    tokio::task::spawn_blocking(move || analytics::analyze(&input, &cfg))
        .await
        .unwrap()
        .unwrap()
}

/// `req` answered through the router: its status, content type ("" when none) and body.
pub async fn answer(
    state: &collector::state::AppState,
    req: axum::http::Request<axum::body::Body>,
) -> (axum::http::StatusCode, String, String) {
    let resp = tower::ServiceExt::oneshot(collector::router::router(state.clone()), req)
        .await
        .unwrap();
    let status = resp.status();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let b = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, ct, String::from_utf8(b.to_vec()).unwrap())
}

/// `GET uri` answered through the router: its status, content type and body.
pub async fn get(
    state: &collector::state::AppState,
    uri: &str,
) -> (axum::http::StatusCode, String, String) {
    let req = axum::http::Request::get(uri)
        .body(axum::body::Body::empty())
        .unwrap();
    answer(state, req).await
}

/// A dashboard page's HTML, read through the router (answered 200).
pub async fn page(state: &collector::state::AppState, uri: &str) -> String {
    let (status, _, html) = get(state, uri).await;
    assert_eq!(status, axum::http::StatusCode::OK, "{uri}");
    html
}

/// A collector serving a state on a loopback port (`gpulens serve`'s own server), until
/// [`Serving::stop`].
pub struct Serving {
    pub base: String,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Serves `state` on a free loopback port.
pub async fn serve(state: collector::state::AppState) -> Serving {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(collector::server::serve(listener, state, async {
        let _ = stopped.await;
    }));
    Serving { base, stop, server }
}

impl Serving {
    /// Shuts the server down and waits for it.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
    }
}
