//! The reclaim loop end to end, against the Kubernetes stand-in: idle notebooks a policy
//! governs get a case and a notice (the alert, routed to their team's receiver); use during
//! the grace cancels one; an exempt pod and a bare pod are refused; a pod no policy names gets
//! nothing; after the grace an operator approves through the API and the Deployment is scaled
//! to zero (with its undo); a policy that approves itself deactivates a Kueue Workload; the
//! outcome check measures the GPU freed; every step is audited; dry run and no policy change
//! nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use collector::reclaim::settings::{Action, Policy, Settings};
use collector::reclaim::target::Cluster;
use collector::reclaim::{Reclaim, ReclaimMetrics};
use kube_standin::StandIn;
use serde_json::{Value, json};
use simulator::{Fleet, Scenario};
use store::Store;
use store::reclaim_cases::{CaseFilter, CaseRecord};
use tower::ServiceExt;

use crate::analytics::load;
use crate::support;

const H: i64 = 3_600_000;

/// One node of eight H100s, each GPU held by one pod; `trainer` works, the rest hold their GPU
/// idle (`bob` gets to work later, in `bob_works`).
fn scenario(bob: &str) -> String {
    let mut s = String::from(
        r#"
name = "reclaim"
cluster = "prod"
seed = 11
interval = "60s"

[[nodes]]
name = "gpu-h100-01"
model = "H100-80GB"
gpus = 8
orchestrator = "kubernetes"
"#,
    );
    for (i, (name, ns, pattern)) in [
        ("nb-alice", "notebooks", "idle_holding_memory"),
        ("nb-bob", "notebooks", bob),
        ("nb-carol", "notebooks", "idle_holding_memory"),
        ("nb-dave", "notebooks", "idle_holding_memory"),
        ("sweep-eve", "batch", "idle_holding_memory"),
        ("sim-frank", "research", "idle_holding_memory"),
        ("trainer", "llm", "steady_training"),
    ]
    .iter()
    .enumerate()
    {
        s.push_str(&format!(
            "\n[[tenants]]\nname = \"{name}\"\nkind = \"pod\"\nnamespace = \"{ns}\"\nnode = \"gpu-h100-01\"\ndevices = [\"{i}\"]\npattern = \"{pattern}\"\nmem_gib = 8\n"
        ));
    }
    s
}

fn fleet(bob: &str) -> Fleet {
    Fleet::new(Scenario::from_toml(&scenario(bob)).unwrap())
}

/// The pod of a tenant the store knows, as the API server holds it, owned by `owner`
/// (kind, name) and carrying `annotations`.
async fn pod_of(
    store: &Store,
    name: &str,
    owner: Option<(&str, &str)>,
    annotations: Value,
) -> k8s_openapi::api::core::v1::Pod {
    let t = store
        .tenants()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.tenant)
        .find(|t| t.pod.as_deref() == Some(name))
        .unwrap();
    let mut meta = json!({"name": name, "namespace": t.namespace, "uid": t.pod_uid,
                          "annotations": annotations});
    if let Some((kind, owner)) = owner {
        meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind, "name": owner,
                                          "uid": format!("uid-{owner}"), "controller": true}]);
    }
    serde_json::from_value(json!({
        "metadata": meta,
        "spec": {"nodeName": "gpu-h100-01", "containers": [{"name": "main"}]},
        "status": {"phase": "Running"}
    }))
    .unwrap()
}

/// A Deployment with its ReplicaSet, as the controllers would have made them.
fn deployment(kube: &StandIn, ns: &str, name: &str) {
    kube.add_object(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "main"}]}}}}));
    kube.add_object(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": format!("{name}-7c9f"), "namespace": ns, "uid": format!("uid-{name}-7c9f"),
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                                          "uid": format!("uid-{name}"), "controller": true}]},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}}}));
}

fn policies() -> Vec<Policy> {
    vec![
        policy("notebooks", Action::ScaleToZero, true),
        policy("batch", Action::Suspend, false),
    ]
}

/// A policy for the namespace of its name: 90 % idle over 12 h, an hour's grace.
fn policy(namespace: &str, action: Action, approval: bool) -> Policy {
    Policy {
        name: namespace.into(),
        namespaces: vec![namespace.into()],
        teams: vec![],
        idle_share: 0.9,
        min_idle: Duration::from_secs(12 * 3600),
        grace: Duration::from_secs(3600),
        action,
        approval,
        use_threshold: 0.05,
        exempt: vec![],
    }
}

/// The cluster of the scenario: each pod with its controller.
async fn cluster(store: &Store) -> StandIn {
    let kube = StandIn::start().await;
    kube.install_kueue();
    for name in ["nb-alice", "nb-bob", "nb-carol"] {
        deployment(&kube, "notebooks", name);
        let exempt = if name == "nb-carol" {
            json!({"gpulens.io/reclaim": "exempt"})
        } else {
            json!({})
        };
        let rs = format!("{name}-7c9f");
        kube.add_pod(pod_of(store, name, Some(("ReplicaSet", &rs)), exempt).await);
    }
    // A bare pod: nothing to scale.
    kube.add_pod(pod_of(store, "nb-dave", None, json!({})).await);
    // A Job Kueue manages, and its Workload.
    kube.add_object(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "sweep-eve", "namespace": "batch", "uid": "uid-sweep-eve",
                     "labels": {"kueue.x-k8s.io/queue-name": "batch"}},
        "spec": {"suspend": false, "template": {"spec": {"containers": [{"name": "main"}], "restartPolicy": "Never"}}}}));
    kube.add_workload(
        json!({"metadata": {"name": "job-sweep-eve-3f2a1", "namespace": "batch",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "sweep-eve",
                                 "uid": "uid-sweep-eve", "controller": true}]},
        "spec": {"active": true, "queueName": "batch", "podSets": []}}),
    );
    kube.add_pod(pod_of(store, "sweep-eve", Some(("Job", "sweep-eve")), json!({})).await);
    kube.add_pod(pod_of(store, "sim-frank", None, json!({})).await);
    kube
}

fn reclaim(store: &Store, kube: &StandIn, settings: Settings) -> Reclaim {
    let client = kube::Client::try_from(kube::Config::new(kube.url().parse().unwrap())).unwrap();
    Reclaim {
        store: store.clone(),
        cluster: Cluster { client },
        settings: Arc::new(settings),
        newest: Default::default(),
        retention: Default::default(),
        receivers: vec![
            (
                "notebooks-team".into(),
                BTreeMap::from([("team".into(), "notebooks".into())]),
            ),
            (
                "batch-team".into(),
                BTreeMap::from([("team".into(), "batch".into())]),
            ),
        ],
        metrics: ReclaimMetrics::default(),
    }
}

async fn cases(store: &Store) -> BTreeMap<String, CaseRecord> {
    store
        .reclaim_cases(&CaseFilter::newest(100))
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.case.pod.clone(), c))
        .collect()
}

/// Loads 30 idle hours before `now` and stores the analysis of the last day.
async fn analysed(store: &Store, now: i64) {
    load(store, &fleet("idle_holding_memory"), "a", now - 30 * H, now).await;
    let (a, _) = collector::analysis::run(
        store,
        &analytics::Config::default(),
        Duration::from_secs(86_400),
        now,
    )
    .await
    .unwrap();
    collector::analysis::save(store, &a, now, 10).await.unwrap();
}

fn steps(c: &CaseRecord) -> Vec<&str> {
    c.steps.iter().map(|s| s.step.as_str()).collect()
}

#[tokio::test]
async fn idle_notebooks_are_noticed_given_grace_and_reclaimed_on_approval() {
    let t = support::sqlite().await;
    let now = model::time::now_ms() / H * H;
    analysed(&t.store, now).await;
    let kube = cluster(&t.store).await;
    let settings = Settings {
        dry_run: false,
        policies: policies(),
        ..Settings::default()
    };
    let r = reclaim(&t.store, &kube, settings.clone());

    // Pass 1: cases open for the governed idle pods; the exempt and the bare pod are refused;
    // research has no policy and the trainer is busy: no case.
    let report = r.pass_at(now).await.unwrap().unwrap();
    assert_eq!((report.opened, report.refused), (3, 2), "{report:?}");
    let c = cases(&t.store).await;
    assert_eq!(
        c.keys().map(String::as_str).collect::<Vec<_>>(),
        ["nb-alice", "nb-bob", "nb-carol", "nb-dave", "sweep-eve"]
    );
    assert_eq!(c["nb-alice"].case.state.as_str(), "noticed");
    assert_eq!(
        c["nb-alice"].target.as_deref(),
        Some("Deployment notebooks/nb-alice")
    );
    assert_eq!(steps(&c["nb-alice"]), ["opened", "notice"]);
    assert!(
        c["nb-alice"].steps[1].detail.contains("notebooks-team"),
        "{:?}",
        c["nb-alice"].steps
    );
    assert_eq!(c["nb-carol"].case.state.as_str(), "refused");
    assert_outcome(&c["nb-carol"], "gpulens.io/reclaim=exempt");
    assert_outcome(&c["nb-dave"], "bare pod");
    assert_eq!(
        c["sweep-eve"].target.as_deref(),
        Some("Workload batch/job-sweep-eve-3f2a1")
    );
    assert!(
        c["nb-alice"].case.idle_hours >= 12.0,
        "{:?}",
        c["nb-alice"].case
    );

    // The notice is an alert with the team's labels, so the team's receiver gets it.
    let mut alerting = collector::alerts::rules::Facts::default();
    let open = t
        .store
        .reclaim_cases(&CaseFilter {
            states: &store::reclaim_cases::CaseState::NOTIFIED,
            ..CaseFilter::newest(10)
        })
        .await
        .unwrap();
    alerting.reclaim_cases = &open;
    let rules = vec![collector::alerts::rules::Rule::default_for(
        collector::alerts::rules::Kind::ReclaimNotice,
    )];
    let notices = collector::alerts::rules::evaluate(&rules, &alerting);
    assert_eq!(notices.len(), 3, "{notices:?}");
    let alice = notices
        .iter()
        .find(|n| n.labels["reclaim_case"] == c["nb-alice"].id.to_string())
        .unwrap();
    assert_eq!(alice.labels["alertname"], "GpulensReclaimNotice");
    assert_eq!(alice.labels["team"], "notebooks");
    assert_eq!(alice.labels["namespace"], "notebooks");
    let says = &alice.annotations["description"];
    assert!(
        says.contains("scale Deployment notebooks/nb-alice to zero")
            && says.contains("gpulens.io/reclaim=exempt"),
        "{says}"
    );

    // Nothing is done during the grace; bob's notebook works again in it.
    assert_eq!(
        r.pass_at(now + 30 * 60_000).await.unwrap().unwrap().acted,
        0
    );
    load(
        &t.store,
        &fleet("steady_training"),
        "b",
        now,
        now + 20 * 60_000,
    )
    .await;
    let report = r.pass_at(now + H + 60_000).await.unwrap().unwrap();
    let c = cases(&t.store).await;
    assert_eq!(c["nb-bob"].case.state.as_str(), "cancelled");
    assert_outcome(&c["nb-bob"], "used again");
    // Alice waits for a person; the batch policy approves itself and deactivated the Workload.
    assert_eq!(c["nb-alice"].case.state.as_str(), "awaiting_approval");
    assert_eq!(
        c["sweep-eve"].case.state.as_str(),
        "acted",
        "{:?}",
        c["sweep-eve"].steps
    );
    assert_eq!(c["sweep-eve"].decided_by.as_deref(), Some("policy:batch"));
    assert_eq!((report.cancelled, report.acted), (1, 1), "{report:?}");
    let w = kube
        .object(
            "kueue.x-k8s.io/v1beta1",
            "workloads",
            "batch",
            "job-sweep-eve-3f2a1",
        )
        .unwrap();
    assert_eq!(w["spec"]["active"], false);
    assert_eq!(
        w["metadata"]["annotations"]["gpulens.io/reclaim-case"],
        c["sweep-eve"].id.to_string()
    );
    assert_eq!(
        kube.object("apps/v1", "deployments", "notebooks", "nb-alice")
            .unwrap()["spec"]["replicas"],
        1,
        "nothing is scaled before approval"
    );

    // An operator approves through the API.
    let state = support::default_state(t.store.clone())
        .with_labels(collector::labels::Settings {
            operators: vec![collector::labels::settings::Operator {
                name: "alice-oncall".into(),
                token: collector::config::Secret("operator-token-1".into()),
            }],
            ..Default::default()
        })
        .with_reclaim(settings.clone());
    let call = |req: Request<Body>| {
        let state = state.clone();
        async move {
            let resp = collector::router::router(state).oneshot(req).await.unwrap();
            let code = resp.status();
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            (code, serde_json::from_slice::<Value>(&bytes).unwrap())
        }
    };
    let post = |path: String, token: Option<&str>| {
        let mut r = Request::post(path);
        if let Some(t) = token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        r.body(Body::empty()).unwrap()
    };
    let id = c["nb-alice"].id;
    assert_eq!(
        call(post(format!("/api/v1/reclaim/{id}/approve"), None))
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    let (code, body) = call(post(
        format!("/api/v1/reclaim/{id}/approve"),
        Some("operator-token-1"),
    ))
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["by"], "alice-oncall");
    let (code, body) = call(post(
        format!("/api/v1/reclaim/{}/approve", c["nb-carol"].id),
        Some("operator-token-1"),
    ))
    .await;
    assert_eq!(
        code,
        StatusCode::CONFLICT,
        "a refused case is not approved: {body}"
    );
    assert_eq!(
        call(post(
            "/api/v1/reclaim/99999/cancel".into(),
            Some("operator-token-1")
        ))
        .await
        .0,
        StatusCode::NOT_FOUND
    );

    // The next pass acts: the Deployment goes to zero, with how to undo it.
    let acted_at = now + H + 2 * 60_000;
    assert_eq!(r.pass_at(acted_at).await.unwrap().unwrap().acted, 1);
    let d = kube
        .object("apps/v1", "deployments", "notebooks", "nb-alice")
        .unwrap();
    assert_eq!(d["spec"]["replicas"], 0);
    assert_eq!(
        d["metadata"]["annotations"]["gpulens.io/reclaimed-replicas"],
        "1"
    );
    let c = cases(&t.store).await;
    let alice = &c["nb-alice"];
    assert_eq!(alice.case.state.as_str(), "acted");
    assert_eq!(
        alice.undo.as_deref(),
        Some("kubectl -n notebooks scale deployment/nb-alice --replicas=1")
    );
    assert_eq!(alice.decided_by.as_deref(), Some("alice-oncall"));
    // Nothing but the approved and self-approved cases was changed.
    let patched: Vec<String> = kube
        .requests()
        .into_iter()
        .filter(|(m, _, _)| m == "PATCH")
        .map(|(_, p, _)| p)
        .collect();
    assert_eq!(
        patched,
        [
            "/apis/kueue.x-k8s.io/v1beta1/namespaces/batch/workloads/job-sweep-eve-3f2a1",
            "/apis/apps/v1/namespaces/notebooks/deployments/nb-alice"
        ]
    );

    // The controller removes the pod; the agents stop seeing it; the outcome check says so.
    kube.remove_pod("notebooks", "nb-alice");
    let report = r.pass_at(acted_at + 11 * 60_000).await.unwrap().unwrap();
    assert!(report.finished >= 1, "{report:?}");
    let c = cases(&t.store).await;
    assert_eq!(c["nb-alice"].case.state.as_str(), "freed");
    assert_outcome(&c["nb-alice"], "freed a GPU of gpu-h100-01");
    assert_eq!(
        steps(&c["nb-alice"]),
        [
            "opened",
            "notice",
            "grace over",
            "approved",
            "acted",
            "outcome"
        ]
    );

    // The API lists the cases with their steps.
    let (code, body) = call(
        Request::get("/api/v1/reclaim?limit=10")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["dry_run"], false);
    assert_eq!(body["policies"][0]["name"], "notebooks");
    let listed = body["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["pod"] == "nb-alice")
        .unwrap();
    assert_eq!(listed["state"], "freed");
    assert_eq!(listed["steps"].as_array().unwrap().len(), 6);
    // One state's cases; a state that is none of them is refused, naming them.
    let (code, body) = call(
        Request::get("/api/v1/reclaim?state=freed")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    let cases = body["cases"].as_array().unwrap();
    assert!(!cases.is_empty() && cases.iter().all(|c| c["state"] == "freed"));
    let (code, body) = call(
        Request::get("/api/v1/reclaim?state=Freed")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("awaiting_approval"), "{body}");

    // The dashboard's page lists them, with what was done and how to undo it.
    let resp = collector::router::router(state.clone())
        .oneshot(Request::get("/reclaim").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let html = String::from_utf8(
        axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    assert!(html.contains("Acting: after the grace"), "{html:.400}");
    assert!(html.contains("notebooks/nb-alice"), "{html:.400}");
    assert!(
        html.contains(
            "Undo: <code>kubectl -n notebooks scale deployment/nb-alice --replicas=1</code>"
        ),
        "{html}"
    );
    assert!(html.contains("exempt: gpulens.io/reclaim=exempt"), "{html}");

    // A new pass opens nothing again for the pods it already took up.
    assert_eq!(
        r.pass_at(acted_at + 12 * 60_000)
            .await
            .unwrap()
            .unwrap()
            .opened,
        0
    );
}

#[tokio::test]
async fn dry_run_and_an_absent_policy_change_nothing() {
    let t = support::sqlite().await;
    let now = model::time::now_ms() / H * H;
    analysed(&t.store, now).await;
    let kube = cluster(&t.store).await;

    // No policy: no case, no request.
    let none = reclaim(&t.store, &kube, Settings::default());
    assert_eq!(
        none.pass_at(now).await.unwrap().unwrap(),
        Default::default()
    );
    assert!(cases(&t.store).await.is_empty());

    // Dry run (the default): the cases run their course to "dry_run", nothing is patched.
    let dry = reclaim(
        &t.store,
        &kube,
        Settings {
            policies: policies(),
            ..Settings::default()
        },
    );
    dry.pass_at(now).await.unwrap();
    dry.pass_at(now + H + 60_000).await.unwrap();
    let c = cases(&t.store).await;
    assert_eq!(c["nb-alice"].case.state.as_str(), "dry_run");
    assert_eq!(c["sweep-eve"].case.state.as_str(), "dry_run");
    assert_outcome(
        &c["nb-alice"],
        "would scale to zero Deployment notebooks/nb-alice",
    );
    assert!(
        kube.requests().iter().all(|(m, _, _)| m != "PATCH"),
        "{:?}",
        kube.requests()
    );
}

/// Asserts the case ended with an outcome that says `text`.
#[track_caller]
fn assert_outcome(case: &CaseRecord, text: &str) {
    let outcome = case.outcome.as_deref().unwrap_or_default();
    assert!(outcome.contains(text), "{text:?} not in {:?}", case.outcome);
}
