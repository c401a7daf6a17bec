//! Every answer from outside is bounded while it is read. Each client the collector
//! has — alert receivers, the Kubernetes API, slurmrestd, the OpenID provider — meets hostile
//! peers on loopback (an endless body, a trickle, a page that never advances, one enormous
//! answer, an `errors[]` of 60 MiB): each pass ends within its bounds with an error that says
//! what happened and is short, the process' peak memory stays under 512 MiB, and a collector
//! serving beside the hostile demand poll keeps answering ingest. (The report webhook's and the
//! agent's own clients are tested beside them: `reports::tests`, `agent::dcgm::tests`.)

use std::time::{Duration, Instant};

use collector::alerts::deliver::{Sender, Verdict};
use collector::alerts::settings::{Receiver, ReceiverKind};
use kube_standin::hostile::{Behaviour, Hostile};

const MAX_RSS_MIB: f64 = 512.0;

fn assert_bounded_memory(what: &str) {
    let peak = model::own_usage::peak_rss_mib().expect("VmHWM is read");
    assert!(
        peak < MAX_RSS_MIB,
        "{what}: the process peaked at {peak:.0} MiB"
    );
}

#[tokio::test]
async fn an_alert_receiver_answering_500_without_end_costs_a_few_hundred_bytes() {
    let peer = Hostile::start(Behaviour::Endless {
        status: 500,
        filler: "overload ",
    })
    .await;
    let r = Receiver {
        name: "hostile".into(),
        kind: ReceiverKind::Json,
        url: collector::config::Secret(format!("{}/hook", peer.url)),
        secret: None,
        timeout: Duration::from_secs(10),
        send_resolved: true,
        matchers: Default::default(),
    };
    let mut sender = Sender::new().unwrap();
    let started = Instant::now();
    for n in 0..3 {
        let (v, status, detail) = sender.post(&r, &r.url.0, "{}", n).await;
        assert_eq!(v, Verdict::Retry);
        assert_eq!(status, Some(500));
        assert!(detail.len() < 400, "{} bytes: {detail:.100}", detail.len());
        assert!(detail.starts_with("HTTP 500: overload"), "{detail:.100}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_bounded_memory("an endless alert answer");
}

/// The demand poll against an API server that answers empty pages with a `continue` token,
/// one page of 300 MB ignoring `limit`, or a trickle; and against slurmrestd answering an
/// `errors[]` of 60 MiB, an endless body, or a trickle. Each poll fails quickly, says why in
/// a few hundred bytes, and shows in `/healthz/tasks`; ingest on the same collector answers
/// throughout.
#[tokio::test]
async fn the_demand_poll_ends_every_hostile_pass_and_ingest_keeps_answering() {
    use collector::demand::{DemandMetrics, Poll, Settings};

    let t = crate::support::sqlite().await;
    let mut auth = collector_shared::agent_auth::Auth::default();
    auth.add("hostile-agent-token-1", vec!["*".into()], None);
    let state = collector::state::AppState::new(
        t.store.clone(),
        auth,
        Default::default(),
        Default::default(),
        Default::default(),
    );
    let serving = crate::support::serve(state).await;
    let base = serving.base.clone();
    let http = ingest_client::http().build().unwrap();

    let pod = r#"{"metadata":{"name":"p","namespace":"n","uid":"u"},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]},"status":{"phase":"Pending"}}"#;
    let slurm_error = format!(r#"{{"error":"{}","error_number":1}}"#, "x".repeat(1_000));
    let kube_peers = [
        (
            "empty pages with a continue token",
            Behaviour::Fixed {
                body: r#"{"kind":"PodList","apiVersion":"v1","metadata":{"continue":"again","resourceVersion":"1"},"items":[]}"#.into(),
            },
            "does not advance",
        ),
        (
            "one page of 300 MB",
            Behaviour::Huge {
                status: 200,
                prefix: r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":["#,
                item: pod.into(),
                suffix: "]}",
                bytes: 300 << 20,
            },
            "larger than",
        ),
        (
            "a trickle",
            Behaviour::Trickle {
                every: Duration::from_millis(200),
            },
            "deadline",
        ),
    ];
    let slurm_peers = [
        (
            "an errors[] of 60 MiB",
            Behaviour::Huge {
                status: 200,
                prefix: r#"{"jobs":[],"errors":["#,
                item: slurm_error,
                suffix: "]}",
                bytes: 60 << 20,
            },
            "error(s)",
        ),
        (
            "an endless body",
            Behaviour::Endless {
                status: 200,
                filler: "[",
            },
            "larger than",
        ),
        (
            "a trickle",
            Behaviour::Trickle {
                every: Duration::from_millis(200),
            },
            "deadline",
        ),
    ];
    let mut batch_seq = 0u64;
    let fleet = crate::support::fleet();
    let mut cases = Vec::new();
    for (what, b, expect) in kube_peers {
        cases.push(("kubernetes", what, b, expect));
    }
    for (what, b, expect) in slurm_peers {
        cases.push(("slurm", what, b, expect));
    }
    for (source, what, behaviour, expect) in cases {
        let peer = Hostile::start(behaviour).await;
        let mut settings = Settings {
            cluster: Some(fleet.scenario.cluster.clone()),
            kueue_workloads: false,
            deadline: Duration::from_secs(3),
            ..Settings::default()
        };
        if source == "kubernetes" {
            settings.pending_pods = true;
            settings.kube_url = Some(peer.url.clone());
        } else {
            settings.slurm = Some(
                toml::from_str(&format!(
                    r#"url = "{}"
                       token = "slurm-jwt-for-the-test"
                       user = "gpulens"
                       cluster = "hpc""#,
                    peer.url
                ))
                .unwrap(),
            );
        }
        let poll = Poll::connect(
            t.store.clone(),
            settings,
            Default::default(),
            DemandMetrics::default(),
        )
        .await
        .unwrap();
        let started = Instant::now();
        let polled = tokio::spawn(async move { poll.poll(collector::now_ms()).await });
        // Ingest answers while the poll fights its peer.
        batch_seq += 1;
        let minute = collector::now_ms() / 60_000 * 60_000 - 60_000 * batch_seq as i64;
        let b = fleet.batch(0, "hostile", batch_seq, &[minute], 60_000);
        let body = ingest_client::Client::encode_json(&b).unwrap();
        let asked = Instant::now();
        let resp = http
            .post(format!("{base}/api/v1/ingest"))
            .header("content-encoding", "gzip")
            .header("content-type", "application/json")
            .bearer_auth("hostile-agent-token-1")
            .body(body)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{source}, {what}: ingest did not answer: {e}"));
        assert!(
            resp.status().is_success(),
            "{source}, {what}: ingest answered {}",
            resp.status()
        );
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "{source}, {what}: ingest took {:?}",
            asked.elapsed()
        );
        let err = polled
            .await
            .unwrap()
            .expect_err(&format!("{source}, {what}: the poll succeeded"))
            .to_string();
        let took = started.elapsed();
        assert!(err.contains(expect), "{source}, {what}: {err:.300}");
        assert!(
            err.len() < 2_000,
            "{source}, {what}: {} bytes of error",
            err.len()
        );
        assert!(
            took < Duration::from_secs(10),
            "{source}, {what}: the poll took {took:?}"
        );
        if what.starts_with("empty pages") {
            assert!(peer.requests() <= 2, "{} requests", peer.requests());
        }
        assert_bounded_memory(&format!("{source}, {what}"));
    }
    serving.stop().await;
}

/// A failed pass shows in `/healthz/tasks` with its error clipped, and only to readers who
/// may see it: an unauthenticated probe of a sign-in collector learns that the task fails,
/// not the text (which can name clusters and what a server answered).
#[tokio::test]
async fn task_errors_are_clipped_and_shown_to_signed_in_readers_only() {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    let t = crate::support::sqlite().await;
    let access: collector_shared::access::Settings = toml::from_str(
        r#"
        mode = "sign-in"
        [[tokens]]
        name = "viewer"
        token = "viewer-token-for-the-test"
        "#,
    )
    .unwrap();
    let state = crate::support::default_state(t.store.clone())
        .with_access(access)
        .unwrap();
    let huge = "slurmrestd reports cluster-a-secret ".repeat(100_000);
    let task =
        collector_shared::tasks::Periodic::task("hostile_pass", Duration::from_secs(3600), {
            let huge = huge.clone();
            move || {
                let huge = huge.clone();
                Box::pin(async move { anyhow::bail!("{huge}") })
            }
        });
    let runner = collector_shared::tasks::Runner::start(&state.shared.tasks, vec![task]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while state.shared.tasks.failing().is_empty() {
        assert!(Instant::now() < deadline, "the pass never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let get = |token: Option<&str>| {
        let mut r = Request::get("/healthz/tasks");
        if let Some(t) = token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        let router = collector::router::router(state.clone());
        async move {
            let resp = router
                .oneshot(r.body(Body::empty()).unwrap())
                .await
                .unwrap();
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
                .await
                .unwrap();
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()
        }
    };
    let anonymous = get(None).await;
    let task = |v: &serde_json::Value| {
        v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "hostile_pass")
            .cloned()
            .unwrap()
    };
    assert_eq!(anonymous["healthy"], false);
    assert_eq!(task(&anonymous)["last_error"], "(sign in to see it)");
    let signed_in = get(Some("viewer-token-for-the-test")).await;
    let text = task(&signed_in)["last_error"].as_str().unwrap().to_owned();
    assert!(
        text.starts_with("slurmrestd reports cluster-a-secret"),
        "{text:.80}"
    );
    assert!(
        text.len() <= collector_shared::tasks::MAX_ERROR + 3,
        "{} bytes",
        text.len()
    );
    runner.stop().await;
}

/// The OpenID provider's discovery document answered without end, or as a trickle: a
/// sign-in start fails within the client's bounds and says so.
#[tokio::test]
async fn an_openid_provider_answering_without_end_fails_the_sign_in_quickly() {
    for behaviour in [
        Behaviour::Endless {
            status: 200,
            filler: "{",
        },
        Behaviour::Huge {
            status: 200,
            prefix: r#"{"issuer":"x","claims":["#,
            item: r#""claim""#.into(),
            suffix: "]}",
            bytes: 50 << 20,
        },
    ] {
        let peer = Hostile::start(behaviour).await;
        let settings: collector_shared::access::settings::Oidc = toml::from_str(&format!(
            r#"issuer = "{}"
               client_id = "gpulens"
               redirect_url = "http://127.0.0.1:1/auth/callback""#,
            peer.url
        ))
        .unwrap();
        let provider = collector_shared::access::oidc::Provider::new(settings);
        let started = Instant::now();
        let err = provider
            .start(&[7; 32], "/", collector::now_ms())
            .await
            .unwrap_err();
        assert!(err.contains("larger than"), "{err:.300}");
        assert!(err.len() < 1_000, "{} bytes", err.len());
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    assert_bounded_memory("an endless discovery document");
}
