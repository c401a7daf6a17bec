//! Waiting demand end to end: pending pods in the Kubernetes stand-in are read by the demand
//! poll (paged, bounded, refusing what is outside the domain), stored as waiting episodes, and
//! the analysis sets them against the idle holdings of the same GPUs: the waiting_demand
//! finding with the GPU-hours waited, what reclaiming the idle holder would have let run, and
//! the holder named — on the overview and in the weekly report.

use collector::demand::{Poll, Settings};
use k8s_openapi::api::core::v1::Pod;
use kube_standin::StandIn;
use serde_json::json;
use simulator::{Fleet, Scenario};

use crate::analytics::load;
use crate::support;

const H: i64 = 3_600_000;

/// One node of four H100s: `idle-holder` holds GPU 0 and runs nothing, `trainer` uses GPUs 1
/// and 2; GPU 3 is free.
fn fleet() -> Fleet {
    Fleet::new(
        Scenario::from_toml(
            r#"
name = "waiting"
cluster = "prod"
seed = 5
interval = "60s"

[[nodes]]
name = "gpu-h100-01"
model = "H100-80GB"
gpus = 4
orchestrator = "kubernetes"

[[tenants]]
name = "idle-holder"
kind = "pod"
namespace = "cv"
node = "gpu-h100-01"
devices = ["0"]
pattern = "idle_holding_memory"
mem_gib = 10

[[tenants]]
name = "trainer"
kind = "pod"
namespace = "llm"
node = "gpu-h100-01"
devices = ["1", "2"]
pattern = "steady_training"
mem_gib = 60
"#,
        )
        .unwrap(),
    )
}

fn pending(name: &str, gpus: &str, created_ms: i64) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                     "creationTimestamp": model::time::rfc3339(created_ms)},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
                 "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}]}
    }))
    .unwrap()
}

#[tokio::test]
async fn pending_pods_beside_an_idle_holder_make_a_waiting_demand_finding() {
    let t = support::sqlite().await;
    let now = model::time::now_ms() / H * H;
    load(&t.store, &fleet(), "a", now - 12 * H, now).await;

    let kube = StandIn::start().await;
    // Waits for two GPUs since six hours ago.
    kube.add_pod(pending("train-big", "2", now - 6 * H));
    // Scheduled: bound to a node, not waiting for a GPU.
    let mut bound = pending("bound", "1", now - 6 * H);
    bound.spec.as_mut().unwrap().node_name = Some("gpu-h100-01".into());
    bound.status.as_mut().unwrap().phase = Some("Running".into());
    kube.add_pod(bound);
    // Outside the domain: refused, counted, nothing stored.
    kube.add_pod(pending("greedy", "1e9", now - 6 * H));
    // No GPU asked for.
    let mut cpu = pending("cpu-only", "1", now - 6 * H);
    cpu.spec.as_mut().unwrap().containers[0].resources = None;
    kube.add_pod(cpu);

    let metrics = collector::demand::DemandMetrics::default();
    let settings = Settings {
        pending_pods: true,
        kube_url: Some(kube.url().to_owned()),
        ..Settings::default()
    };
    let poll = Poll::connect(
        t.store.clone(),
        settings,
        Default::default(),
        metrics.clone(),
    )
    .await
    .unwrap();
    let report = poll.poll(now).await.unwrap();
    assert_eq!(
        (
            report.pods_read,
            report.waiting_pods,
            report.refused,
            report.truncated
        ),
        (3, 1, 1, false),
        "{report:?}"
    );
    assert_eq!(metrics.pods.get(), 1);
    let stored = t.store.waiting(0, now + 1).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(
        (
            stored[0].cluster.as_str(),
            stored[0].team.as_str(),
            stored[0].since_ms
        ),
        ("prod", "ml", now - 6 * H)
    );

    let cfg = analytics::Config::default();
    let (a, _) =
        collector::analysis::run(&t.store, &cfg, std::time::Duration::from_secs(86_400), now)
            .await
            .unwrap();
    let f: Vec<_> = a
        .findings
        .iter()
        .filter(|f| f.kind == analytics::FindingKind::WaitingDemand)
        .collect();
    assert_eq!(f.len(), 1, "{:#?}", a.findings);
    let f = f[0];
    let m = |k: &str| f.metrics[&analytics::Measure::parse(k).expect("a measure")];
    assert!(
        (m("waiting_gpu_hours") - 12.0).abs() < 1e-9,
        "{:?}",
        f.metrics
    );
    // One GPU held idle all the while: half of the waiting work could have run on it.
    assert!(
        (m("idle_held_gpu_hours") - 6.0).abs() < 0.1,
        "{:?}",
        f.metrics
    );
    assert!(
        (m("reclaimable_gpu_hours") - 6.0).abs() < 0.1,
        "{:?}",
        f.metrics
    );
    assert_eq!(m("fragmented_gpu_hours"), 0.0, "one node: no fragmentation");
    assert_eq!(f.team.as_deref(), Some("ml"));
    assert_eq!(f.tenants.len(), 1);
    assert_eq!(a.tenant_names[&f.tenants[0]], "cv/idle-holder/main");
    assert!(f.summary.contains("idle-holder"), "{}", f.summary);
    assert_eq!(
        f.pool.as_deref(),
        Some("NVIDIA H100 80GB HBM3 (whole GPUs)")
    );

    // The overview's panel and the weekly report say it with the holder named.
    collector::analysis::save(&t.store, &a, now, 10)
        .await
        .unwrap();
    let state = support::default_state(t.store.clone());
    let html = support::page(&state, "/").await;
    let panel = &html[html.find("Waiting while idle").expect("the panel")..];
    assert!(panel.contains("Work waited 12.0 GPU-hours"), "{panel:.600}");
    assert!(panel.contains("cv/idle-holder/main"), "{panel:.2000}");
    // The findings list's Tenant cell names the holder as the idle holder, not as the tenant
    // that waited.
    let list = support::page(&state, "/findings?kind=waiting_demand").await;
    assert!(
        list.contains("<td>idle holder cv/idle-holder/main</td>"),
        "{list}"
    );
    // Hour by hour, what waited and what was held idle add up to the finding's figures; its
    // page charts both and says what to do.
    let waited: f64 = f.demand_hours.iter().map(|h| h.waiting_gpus).sum();
    let idle: f64 = f.demand_hours.iter().map(|h| h.idle_gpus).sum();
    assert!(
        (waited - 12.0).abs() < 1e-9 && (idle - 6.0).abs() < 0.1,
        "{:?}",
        f.demand_hours
    );
    let page = support::page(&state, &format!("/findings/{}", f.id)).await;
    assert!(
        page.contains("What ml&#39;s work waited for, and what of NVIDIA H100 80GB HBM3 (whole GPUs) was held idle")
            || page.contains("What ml's work waited for"),
        "{page:.3000}"
    );
    assert!(page.contains("GPUs waited for") && page.contains("GPUs of the pool held idle"));
    assert!(
        page.contains("What to do: ") && page.contains("reclaim cv/idle-holder/main"),
        "{page:.4000}"
    );
    // Its alert names the cluster and the team that waited, not the holder as its tenant.
    let rules = collector::alerts::settings::Settings::default().effective_rules();
    let facts = collector::alerts::rules::Facts {
        analysis: Some(&a),
        now_ms: now,
        keep_ms: 86_400_000,
        ..Default::default()
    };
    let alert = collector::alerts::rules::evaluate(&rules, &facts)
        .into_iter()
        .find(|c| c.labels["alertname"] == "GpuWorkWaitingWhileIdle")
        .expect("the waiting alert");
    assert_eq!(
        (alert.labels.get("team"), alert.labels.get("tenant")),
        (Some(&"ml".to_owned()), None),
        "{alert:?}"
    );
    let report = collector::reports::content::ReportData::build(
        "2026-W48".into(),
        "UTC".into(),
        &a,
        None,
        now,
    );
    let body = collector::reports::html::render(&report);
    let section = &body[body
        .find("Work that waited while GPUs were held idle")
        .expect("the report's section")..];
    assert!(
        section.contains("cv/idle-holder/main") && section.contains("<td class=\"id\">ml</td>"),
        "{section:.2000}"
    );

    // Kueue gets installed and queues a Job (suspended, no pods yet): its Workload waits.
    kube.add_workload(json!({
        "metadata": {"name": "job-sweep-1", "namespace": "ml", "uid": "wl-1",
                     "creationTimestamp": model::time::rfc3339(now - 2 * H)},
        "spec": {"queueName": "ml", "podSets": [{"name": "main", "count": 4, "template": {"spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
            "message": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor default, 3 more needed",
            "lastTransitionTime": model::time::rfc3339(now - 2 * H)}]}
    }));
    let report = poll.poll(now).await.unwrap();
    assert_eq!(
        (report.waiting_pods, report.waiting_workloads),
        (1, 1),
        "{report:?}"
    );
    let wl: Vec<_> = t
        .store
        .waiting(0, now + 1)
        .await
        .unwrap()
        .into_iter()
        .filter(|w| w.source == "kueue_workload")
        .collect();
    assert_eq!((wl.len(), wl[0].count, wl[0].since_ms), (1, 4, now - 2 * H));

    // The API's series: per team, resource and source, the unit-hours and hourly means.
    let uri = format!("/api/v1/waiting?from={}&to={}&step=1h", now - 12 * H, now);
    let req = axum::http::Request::get(uri)
        .body(axum::body::Body::empty())
        .unwrap();
    let state = support::default_state(t.store.clone());
    let resp = tower::ServiceExt::oneshot(collector::router::router(state), req)
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = serde_json::from_slice(
        &axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap(),
    )
    .unwrap();
    let series = body["series"].as_array().unwrap();
    let by_source = |s: &str| series.iter().find(|x| x["source"] == s).unwrap();
    assert_eq!(by_source("pod")["unit_hours"], 12.0, "{body}");
    assert_eq!(by_source("pod")["points"].as_array().unwrap().len(), 6);
    assert_eq!(by_source("pod")["points"][0], json!([now - 6 * H, 2.0]));
    assert_eq!(by_source("kueue_workload")["unit_hours"], 8.0, "{body}");

    // The pod gets scheduled: the next poll no longer sees it, its episode ends where it was
    // last seen, and a later poll lists nothing.
    kube.remove_pod("ml", "train-big");
    let report = poll.poll(now + H).await.unwrap();
    assert_eq!(report.waiting_pods, 0);
    assert_eq!(
        t.store.waiting(0, now + 2 * H).await.unwrap()[0].last_seen_ms,
        now
    );
}

#[tokio::test]
async fn the_poll_reads_pages_and_stops_at_max_pods() {
    let t = support::sqlite().await;
    let now = model::time::now_ms();
    load(&t.store, &fleet(), "a", now - H, now).await;
    let kube = StandIn::start().await;
    for i in 0..1_203 {
        kube.add_pod(pending(&format!("p{i}"), "1", now - H));
    }
    let settings = Settings {
        pending_pods: true,
        kube_url: Some(kube.url().to_owned()),
        max_pods: 1_100,
        ..Settings::default()
    };
    let metrics = collector::demand::DemandMetrics::default();
    let poll = Poll::connect(
        t.store.clone(),
        settings,
        Default::default(),
        metrics.clone(),
    )
    .await
    .unwrap();
    let report = poll.poll(now).await.unwrap();
    assert_eq!((report.pods_read, report.truncated), (1_100, true));
    assert_eq!(t.store.waiting(0, now + 1).await.unwrap().len(), 1_100);
    assert_eq!(metrics.left_out.get(), 1);
    // With room for all, all are read (three pages of at most 500).
    let settings = Settings {
        pending_pods: true,
        kube_url: Some(kube.url().to_owned()),
        ..Settings::default()
    };
    let poll = Poll::connect(t.store.clone(), settings, Default::default(), metrics)
        .await
        .unwrap();
    assert_eq!(poll.poll(now).await.unwrap().pods_read, 1_203);
}

/// slurmrestd on a loopback port, answering `/slurm/{version}/jobs` with `body` to the token
/// `jwt-for-gpulens` of user `gpulens`, 401 otherwise (as slurmrestd's JWT auth does).
async fn slurmrestd(
    body: std::sync::Arc<std::sync::Mutex<String>>,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use axum::http::{HeaderMap, StatusCode};
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    let app = axum::Router::new().route(
        "/slurm/{version}/jobs",
        axum::routing::get(
            move |axum::extract::Path(version): axum::extract::Path<String>, headers: HeaderMap| {
                let (body, seen) = (body.clone(), seen.clone());
                async move {
                    seen.lock().unwrap().push(version);
                    let h = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
                    if h("x-slurm-user-name") != "gpulens"
                        || h("x-slurm-user-token") != "jwt-for-gpulens"
                    {
                        return (
                            StatusCode::UNAUTHORIZED,
                            "Authentication failure".to_owned(),
                        );
                    }
                    (StatusCode::OK, body.lock().unwrap().clone())
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, asked)
}

fn recorded(file: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/slurm")
            .join(file),
    )
    .unwrap()
}

/// Slurm's pending jobs, read from slurmrestd as recorded on a real cluster
/// (tests/data/slurm/README.md): held jobs wait for a person, not for GPUs, and are counted
/// apart; a pending GPU job is stored as waiting work of its account's team.
#[tokio::test]
async fn slurm_pending_jobs_and_holds_are_read_from_recorded_slurmrestd_answers() {
    let t = support::sqlite().await;
    let now = model::time::now_ms();
    let body = std::sync::Arc::new(std::sync::Mutex::new(recorded("squeue-23.02.4.json")));
    let (url, asked) = slurmrestd(body.clone()).await;
    let slurm = |version: &str, token: &str| Settings {
        slurm: Some(collector::demand::settings::SlurmSettings {
            url: url.clone(),
            api_version: version.into(),
            token: collector::config::Secret(token.into()),
            user: "gpulens".into(),
            cluster: "hpc".into(),
        }),
        ..Settings::default()
    };
    let teams = collector::config::TeamsConfig {
        accounts: [("rvs".to_owned(), "verification".to_owned())].into(),
        ..Default::default()
    };
    let metrics = collector::demand::DemandMetrics::default();
    let poll = |s: Settings| {
        let (store, teams, metrics) = (t.store.clone(), teams.clone(), metrics.clone());
        async move { Poll::connect(store, s, teams, metrics).await.unwrap() }
    };

    // As recorded: two pending array tasks, held; one completed; none asks for a GPU.
    let p = poll(slurm("v0.0.39", "jwt-for-gpulens")).await;
    let r = p.poll(now).await.unwrap();
    assert_eq!((r.waiting_jobs, r.held_jobs, r.refused), (0, 0, 0), "{r:?}");
    assert_eq!(asked.lock().unwrap().as_slice(), ["v0.0.39"]);

    // The one change (README): each job asks for one GPU, in Slurm's spelling.
    let with_gpu = recorded("squeue-23.02.4.json").replace(
        "\"tres_req_str\": \"cpu=1,mem=4G,node=1,billing=1\"",
        "\"tres_req_str\": \"cpu=1,mem=4G,node=1,billing=1,gres/gpu=1\"",
    );
    *body.lock().unwrap() = with_gpu.clone();
    let r = p.poll(now).await.unwrap();
    assert_eq!(
        (r.waiting_jobs, r.held_jobs),
        (0, 2),
        "held jobs wait for a person: {r:?}"
    );
    assert_eq!(metrics.held_jobs.get(), 2);
    assert!(t.store.waiting(0, now + 1).await.unwrap().is_empty());

    // Released (`scontrol release`): the job waits for resources and is stored.
    *body.lock().unwrap() = with_gpu
        .replacen("\"hold\": true", "\"hold\": false", 1)
        .replacen(
            "\"state_reason\": \"JobHeldUser\"",
            "\"state_reason\": \"Resources\"",
            1,
        )
        .replacen(
            "\"state_description\": \"launch failed requeued held\"",
            "\"state_description\": \"\"",
            1,
        );
    let r = p.poll(now).await.unwrap();
    assert_eq!((r.waiting_jobs, r.held_jobs), (1, 1), "{r:?}");
    let stored = t.store.waiting(0, now + 1).await.unwrap();
    assert_eq!(stored.len(), 1);
    let w = &stored[0];
    assert_eq!(
        (
            w.cluster.as_str(),
            w.source.as_str(),
            w.uid.as_str(),
            w.scope.as_str(),
            w.team.as_str()
        ),
        ("hpc", "slurm_job", "52175550", "rvs", "verification")
    );
    assert_eq!((w.resource.as_str(), w.count), ("nvidia.com/gpu", 1));
    assert_eq!(w.name, "id_3508:dtu_rng_regress:sim");
    assert_eq!(w.reason, "Resources");
    assert_eq!(w.since_ms, 1_694_675_236_000, "since the job's submit time");

    // Slurm 21.08's slurmrestd (v0.0.37: plain numbers, a state string): a running job.
    *body.lock().unwrap() = recorded("slurmrestd-v0.0.37-21.08.5.json");
    let r = poll(slurm("v0.0.37", "jwt-for-gpulens"))
        .await
        .poll(now)
        .await
        .unwrap();
    assert_eq!((r.waiting_jobs, r.held_jobs, r.refused), (0, 0, 0), "{r:?}");

    // A wrong token: slurmrestd's refusal is the poll's error, nothing is recorded.
    let e = poll(slurm("v0.0.39", "stale"))
        .await
        .poll(now)
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("401"), "{e:#}");
}

/// What each node has in place: the poll reads the ResourceSlices of NVIDIA's DRA
/// driver and HAMi's node annotation, stores them, and the analysis' plan says the pool has
/// them, seen on its node.
#[tokio::test]
async fn the_poll_sees_which_sharing_mechanisms_a_node_has() {
    let t = support::sqlite().await;
    let now = model::time::now_ms();
    load(&t.store, &fleet(), "a", now - 12 * H, now).await;
    let kube = StandIn::start().await;
    kube.add_resource_slice(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "gpu-h100-01-gpu.nvidia.com-0"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-h100-01",
            "pool": {"name": "gpu-h100-01", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "allowMultipleAllocations": true,
                "attributes": {"uuid": {"string": "GPU-x"}},
                "capacity": {"memory": {"value": "80Gi"}}}]}
    }));
    kube.add_node(
        serde_json::from_value(json!({"metadata": {"name": "gpu-h100-01", "annotations": {
            "hami.io/node-nvidia-register": "GPU-x,10,81920,100,NVIDIA-H100,0,true:"}}}))
        .unwrap(),
    );
    pending_poll(&t.store, kube.url())
        .await
        .poll(now)
        .await
        .unwrap();
    let stored: Vec<String> = t
        .store
        .node_mechanisms()
        .await
        .unwrap()
        .into_iter()
        .map(|m| format!("{}/{}", m.node, m.mechanism))
        .collect();
    assert_eq!(
        stored,
        [
            "gpu-h100-01/dra_consumable_capacity",
            "gpu-h100-01/dra_consumable_scheduled",
            "gpu-h100-01/dra_shared_claim",
            "gpu-h100-01/hami",
        ]
    );
    let cfg = analytics::Config::default();
    let span = collector::analysis::Span::closed(now - 12 * H, now);
    let input = collector::analysis::load(&t.store, &cfg, span)
        .await
        .unwrap();
    let a = tokio::task::spawn_blocking(move || analytics::analyze(&input, &cfg))
        .await
        .unwrap()
        .unwrap();
    let pool = &a.plan.pools[0];
    use analytics::mechanism::Mechanism;
    assert!(pool.has.contains(&Mechanism::Hami), "{:?}", pool.has);
    assert!(
        pool.seen.contains(&(Mechanism::DraConsumableCapacity, 1)),
        "{:?}",
        pool.seen
    );
    for w in pool
        .worth
        .iter()
        .filter(|w| pool.has.contains(&w.mechanism))
    {
        assert_eq!(w.pools_with, 1, "{:?}", w.mechanism);
    }
    // A poll that sees none any more forgets them.
    let bare = StandIn::start().await;
    pending_poll(&t.store, bare.url())
        .await
        .poll(now)
        .await
        .unwrap();
    assert!(t.store.node_mechanisms().await.unwrap().is_empty());
}

/// A demand poll of pending pods (and node mechanisms) at the API server `url`, defaults else.
async fn pending_poll(store: &store::Store, url: &str) -> Poll {
    let settings = Settings {
        pending_pods: true,
        kube_url: Some(url.to_owned()),
        ..Settings::default()
    };
    Poll::connect(
        store.clone(),
        settings,
        Default::default(),
        Default::default(),
    )
    .await
    .unwrap()
}
