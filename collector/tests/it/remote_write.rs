//! Zero-agent start: a real Prometheus scrapes a dcgm-exporter-format endpoint — the real
//! dcgm-exporter sample (A100 with a MIG instance, `Hostname`) plus generated series for a
//! second host (`hostname`, whole GPUs held by pods) — and remote-writes it to the collector,
//! which stores it as gpulens samples; the analysis then sees both nodes. Also the receiver's
//! answers: 401 without a token, 403 for a host the token is not bound to, 400 for a body
//! that is not snappy protobuf (the remote-write spec's "do not retry"), 204 otherwise.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::routing::get;
use collector::{router::router, state::AppState};
use collector_shared::agent_auth::Auth;
use store::{Agg, Entity, Metric, Retention, SeriesQuery};

const SAMPLE: &str = include_str!("../../../agent/tests/fixtures/dcgm/a100-mig-sample.prom");

/// The second host's series: two H100s held by two pods, busier on every scrape.
fn generated(n: u64) -> String {
    let mut s = String::new();
    for gpu in 0..2 {
        let uuid = format!("GPU-00000000-0000-0000-0000-00000000000{gpu}");
        let labels = format!(
            "gpu=\"{gpu}\",UUID=\"{uuid}\",device=\"nvidia{gpu}\",modelName=\"NVIDIA H100 80GB HBM3\",hostname=\"gen-h100-01\",container=\"main\",namespace=\"ml\",pod=\"trainer-{gpu}\""
        );
        let util = 40 + (n * 7 + gpu * 13) % 50;
        s.push_str(&format!("DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util}\n"));
        s.push_str(&format!(
            "DCGM_FI_DEV_FB_USED{{{labels}}} {}\n",
            20_000 + gpu * 1000
        ));
        s.push_str(&format!("DCGM_FI_DEV_FB_FREE{{{labels}}} 61000\n"));
        s.push_str(&format!("DCGM_FI_DEV_POWER_USAGE{{{labels}}} 350.5\n"));
        s.push_str(&format!("DCGM_FI_DEV_GPU_TEMP{{{labels}}} 55\n"));
        s.push_str(&format!(
            "DCGM_FI_PROF_SM_ACTIVE{{{labels}}} {}\n",
            util as f64 / 120.0
        ));
    }
    s
}

fn have_prometheus() -> bool {
    std::process::Command::new("prometheus")
        .arg("--version")
        .output()
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_prometheus_remote_writes_dcgm_exporter_series_into_gpulens() {
    if !have_prometheus() {
        assert!(
            std::env::var("GPULENS_REQUIRE_PROMETHEUS").is_err(),
            "prometheus is not installed"
        );
        eprintln!("skipping: no Prometheus (run the suite with tests/run.sh)");
        return;
    }
    let t = crate::support::sqlite().await;
    let mut auth = Auth::default();
    auth.add("rw-token-123", vec!["*".into()], Some("prod".into()));
    auth.add("rw-narrow-1", vec!["other-node".into()], None);
    let state = AppState::new(
        t.store.clone(),
        auth,
        Default::default(),
        Default::default(),
        Default::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(axum::serve(listener, router(state.clone())).into_future());

    // The receiver's answers.
    let http = ingest_client::http().build().unwrap();
    let post = |token: Option<&'static str>, body: Vec<u8>| {
        let mut r = http
            .post(format!("{collector}/api/v1/write"))
            .header("content-encoding", "snappy")
            .header("content-type", "application/x-protobuf")
            .body(body);
        if let Some(tok) = token {
            r = r.bearer_auth(tok);
        }
        async move { r.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(post(None, vec![1, 2, 3]).await, 401);
    assert_eq!(post(Some("rw-token-123"), b"garbage".to_vec()).await, 400);
    let one = collector::remote_write::WriteRequest {
        timeseries: vec![collector::remote_write::TimeSeries {
            labels: vec![
                collector::remote_write::Label {
                    name: "__name__".into(),
                    value: "DCGM_FI_DEV_GPU_TEMP".into(),
                },
                collector::remote_write::Label {
                    name: "Hostname".into(),
                    value: "gen-h100-01".into(),
                },
                collector::remote_write::Label {
                    name: "UUID".into(),
                    value: "GPU-x".into(),
                },
            ],
            samples: vec![collector::remote_write::Sample {
                value: 40.0,
                timestamp: 1,
            }],
        }],
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&prost::Message::encode_to_vec(&one))
        .unwrap();
    assert_eq!(post(Some("rw-narrow-1"), body.clone()).await, 403);
    assert_eq!(
        post(
            Some("rw-token-123"),
            snap::raw::Encoder::new()
                .compress_vec(&prost::Message::encode_to_vec(
                    &collector::remote_write::WriteRequest::default()
                ))
                .unwrap()
        )
        .await,
        204
    );

    // A dcgm-exporter-format endpoint.
    let scrapes = Arc::new(AtomicU64::new(0));
    let counter = scrapes.clone();
    let exporter = axum::Router::new().route(
        "/metrics",
        get(move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move { format!("{SAMPLE}\n{}", generated(n)) }
        }),
    );
    let el = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let exporter_addr = el.local_addr().unwrap();
    tokio::spawn(axum::serve(el, exporter).into_future());

    let dir = crate::support::TempDir::new("remote-write");
    let (_prom, _) = crate::support::prometheus(
        &dir,
        &format!(
            "global:\n  scrape_interval: 1s\n  external_labels:\n    cluster: prod\nscrape_configs:\n  - job_name: dcgm-exporter\n    honor_labels: true\n    static_configs:\n      - targets: ['{exporter_addr}']\nremote_write:\n  - url: {collector}/api/v1/write\n    authorization:\n      credentials: rw-token-123\n    queue_config:\n      batch_send_deadline: 1s\n      min_backoff: 100ms\n"
        ),
    );
    // Scrapes settle once a newer one is 30 s ahead: both hosts appear after about that.
    let deadline = Instant::now() + Duration::from_secs(150);
    let nodes = loop {
        let nodes = t.store.nodes().await.unwrap();
        let counts = t.store.counts().await.unwrap();
        if nodes.len() == 2 && counts.gpu_samples >= 10 {
            break nodes;
        }
        assert!(
            Instant::now() < deadline,
            "remote-written samples did not arrive: {nodes:?} {counts:?}, {} scrapes",
            scrapes.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let mut names: Vec<&str> = nodes.iter().map(|n| n.node.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["gen-h100-01", "ub20-a100-k8s"],
        "both Hostname spellings"
    );
    assert!(nodes.iter().all(|n| n.cluster == "prod"));
    // The real sample's A100 with its MIG instance; the generated H100s.
    let gpus = t.store.gpus(None).await.unwrap();
    let a100 = gpus
        .iter()
        .find(|g| g.uuid == "GPU-34319582-d595-d1c7-d1d2-179bcfa61660")
        .expect("the real sample's GPU");
    assert!(
        a100.mig_instances
            .iter()
            .any(|m| m.gi_id == 13 && m.profile == "1g.5gb"),
        "{a100:?}"
    );
    assert_eq!(gpus.iter().filter(|g| g.node == "gen-h100-01").count(), 2);
    assert!(gpus.iter().any(|g| g.model == "NVIDIA H100 80GB HBM3"));
    // Pods as tenants, from the pod labels.
    let tenants = t.store.tenants().await.unwrap();
    assert!(
        tenants
            .iter()
            .any(|x| x.key() == "pod/ml/trainer-0/main"
                && x.tenant.namespace.as_deref() == Some("ml"))
    );
    // Values as gpulens units: utilization 0–1 from DCGM's percent, SM activity as is (read
    // from the minute rollups, as the API does for this range).
    let now = collector::now_ms();
    t.store.rollup(now + 120_000).await.unwrap();
    // The last ten minutes of one GPU's metric, as one value (None: nothing stored).
    let last_ten_minutes = async |metric, gpu: &str, agg| {
        let series = t
            .store
            .series(
                &SeriesQuery {
                    metric,
                    entity: Entity::Gpu(gpu.into()),
                    from_ms: now - 600_000,
                    to_ms: now,
                    step_ms: 600_000,
                    agg,
                },
                now,
                &Retention::default(),
            )
            .await
            .unwrap();
        series
            .points
            .iter()
            .filter_map(|(_, v)| *v)
            .reduce(f64::max)
    };
    let util = last_ten_minutes(
        Metric::GpuUtil,
        "GPU-00000000-0000-0000-0000-000000000000",
        Agg::Max,
    )
    .await;
    assert!(
        util.is_some_and(|u| u > 0.4 && u <= 0.9),
        "utilization as a ratio: {util:?}"
    );
    let sm = last_ten_minutes(
        Metric::Ratio(model::profiling::Ratio::SmActive),
        "GPU-00000000-0000-0000-0000-000000000001",
        Agg::Mean,
    )
    .await;
    assert!(sm.is_some(), "DCGM SM activity stored");
    // dcgm-exporter's default counters leave out SM activity; tensor activity still counts
    // (the real sample's A100: 0.929260 at the GPU level, the same in every scrape).
    let tensor = last_ten_minutes(
        Metric::Ratio(model::profiling::Ratio::TensorActive),
        "GPU-34319582-d595-d1c7-d1d2-179bcfa61660",
        Agg::Mean,
    )
    .await;
    assert!(
        tensor.is_some_and(|v| (v - 0.929_26).abs() < 1e-3),
        "tensor activity without SM activity: {tensor:?}"
    );
    // Stored exactly once: one row per GPU and scrape.
    let counts = t.store.counts().await.unwrap();
    assert!(
        counts.gpu_samples as u64 <= 3 * scrapes.load(Ordering::SeqCst),
        "{counts:?}"
    );
}

/// A 2xx means taken for good: when the collector restarts while a scrape waits to settle,
/// the restarted one replays the journaled request and stores the scrape, and its background
/// pass stores a quiet host's journaled scrape without any request.
#[tokio::test]
async fn a_restart_loses_no_remote_written_sample() {
    use axum::body::Body;
    use axum::http::Request;
    use collector::remote_write::{Label, Sample, TimeSeries, WriteRequest};
    use prost::Message;
    use tower::ServiceExt;

    let t = crate::support::sqlite().await;
    let collector = || {
        let mut auth = Auth::default();
        auth.add("rw-token", vec!["*".into()], Some("prod".into()));
        AppState::new(
            t.store.clone(),
            auth,
            Default::default(),
            Retention::default(),
            Default::default(),
        )
    };
    let on = |host: &str, uuid: &str, ts: i64, util: f64| TimeSeries {
        labels: [
            ("__name__", "DCGM_FI_DEV_GPU_UTIL"),
            ("Hostname", host),
            ("UUID", uuid),
            ("gpu", "0"),
            ("modelName", "NVIDIA H100 80GB HBM3"),
        ]
        .into_iter()
        .map(|(name, value)| Label {
            name: name.into(),
            value: value.into(),
        })
        .collect(),
        samples: vec![Sample {
            timestamp: ts,
            value: util,
        }],
    };
    let scrape =
        |ts: i64, util: f64| on("n1", "GPU-5e0f0000-0000-0000-0000-000000000001", ts, util);
    let post = async |state: &AppState, series: Vec<TimeSeries>| {
        let body = snap::raw::Encoder::new()
            .compress_vec(&WriteRequest { timeseries: series }.encode_to_vec())
            .unwrap();
        let req = Request::post("/api/v1/write")
            .header("authorization", "Bearer rw-token")
            .header("content-encoding", "snappy")
            .header("content-type", "application/x-protobuf")
            .body(Body::from(body))
            .unwrap();
        router(state.clone()).oneshot(req).await.unwrap().status()
    };
    let t0 = collector::now_ms() - 300_000;
    let first = collector();
    assert_eq!(
        post(&first, vec![scrape(t0, 40.0), scrape(t0 + 15_000, 60.0)]).await,
        204
    );
    assert_eq!(
        t.store.counts().await.unwrap().gpu_samples,
        0,
        "still waiting"
    );
    assert_eq!(t.store.remote_write_journal().await.unwrap().len(), 1);
    drop(first);

    // Restarted: a scrape 45 s later settles the two journaled ones.
    let second = collector();
    assert_eq!(post(&second, vec![scrape(t0 + 60_000, 80.0)]).await, 204);
    assert_eq!(t.store.counts().await.unwrap().gpu_samples, 2);
    let journal = t.store.remote_write_journal().await.unwrap();
    assert_eq!(
        journal.len(),
        1,
        "only the waiting scrape's request is kept"
    );
    let kept = collector::remote_write::decode(&journal[0].1, 1 << 20).unwrap();
    assert_eq!(kept.timeseries[0].samples[0].timestamp, t0 + 60_000);
    assert!(
        kept.timeseries[0]
            .labels
            .iter()
            .any(|l| l.name == "cluster" && l.value == "prod"),
        "the token's cluster is kept with the series"
    );
    drop(second);

    // A collector that stopped for good left a journaled scrape of a host that went quiet
    // two minutes ago; the next one's background pass stores it without any request.
    let mut quiet = on(
        "n2",
        "GPU-5e0f0000-0000-0000-0000-000000000002",
        t0 + 100_000,
        10.0,
    );
    quiet.labels.push(Label {
        name: "cluster".into(),
        value: "prod".into(),
    });
    let quiet = WriteRequest {
        timeseries: vec![quiet],
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&quiet.encode_to_vec())
        .unwrap();
    t.store
        .journal_remote_write(collector::now_ms() - 120_000, t0 + 100_000, &body)
        .await
        .unwrap();
    let third = collector();
    third.upkeep_once().await.unwrap();
    assert_eq!(
        t.store.counts().await.unwrap().gpu_samples,
        3,
        "n2's scrape"
    );
    // n1's newest scrape came seconds ago and still waits for the next; n2's row stays too,
    // since rows go by sample time: only once nothing older than their samples waits.
    let journal = t.store.remote_write_journal().await.unwrap();
    assert_eq!(journal.len(), 2);
    let kept = collector::remote_write::decode(&journal[0].1, 1 << 20).unwrap();
    assert_eq!(kept.timeseries[0].samples[0].timestamp, t0 + 60_000);
    drop(third);

    // Much later, a collector finds n1's row again next to a sample of a scrape stored long
    // ago (t0 + 15 s) and n2's stored row: it stores n1's waiting scrape and nothing twice,
    // though both n1 scrapes would otherwise settle in one batch.
    let mut again = kept;
    let mut stored_before = scrape(t0 + 15_000, 60.0);
    stored_before.labels.push(Label {
        name: "cluster".into(),
        value: "prod".into(),
    });
    again.timeseries.push(stored_before);
    t.store.prune_remote_write_journal(None).await.unwrap();
    let long_ago = collector::now_ms() - 120_000;
    for (newest, body) in [
        (t0 + 60_000, again.encode_to_vec()),
        (t0 + 100_000, quiet.encode_to_vec()),
    ] {
        let body = snap::raw::Encoder::new().compress_vec(&body).unwrap();
        t.store
            .journal_remote_write(long_ago, newest, &body)
            .await
            .unwrap();
    }
    let fourth = collector();
    fourth.upkeep_once().await.unwrap();
    assert_eq!(
        t.store.counts().await.unwrap().gpu_samples,
        4,
        "only n1's t0 + 60 s"
    );
    assert!(t.store.remote_write_journal().await.unwrap().is_empty());
    assert_eq!(
        fourth
            .remote_write
            .metrics
            .dropped(collector::remote_write::DropReason::Late),
        0
    );
}
