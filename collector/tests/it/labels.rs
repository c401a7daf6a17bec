//! Labels against the Kubernetes API stand-in (kube-standin; no real API server runs here):
//! advisory labels converge without touching anyone else's, the allow-list refuses foreign
//! keys, and the reconfiguration workflow's happy path, failure with rollback, timeout and
//! refusal while GPU pods remain. A fake MIG manager plays the GPU Operator's part.

use std::collections::BTreeMap;
use std::time::Duration;

use collector::labels::kube::{Cluster, KubeError};
use collector::labels::layouts::Layout;
use collector::labels::workflow::{self, Audit, Limits, Outcome, Plan};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube_standin::StandIn;
use model::labels::{
    MANAGED_ANNOTATION, OPERATOR_MIG_CONFIG, OPERATOR_MIG_STATE, RECOMMENDED_MIG_CONFIG,
    RECOMMENDED_SHARING, UTILIZATION_CLASS,
};
use serde_json::json;

fn node(name: &str, labels: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": {},
    }))
    .unwrap()
}

fn foreign() -> serde_json::Value {
    json!({
        "kubernetes.io/hostname": "gpu-1",
        "node-role.kubernetes.io/worker": "",
        "nvidia.com/gpu.present": "true",
        "team": "ml",
        "gpulens.io/owner": "set-by-a-person",
    })
}

fn labels(s: &StandIn, n: &str) -> BTreeMap<String, String> {
    s.node(n).unwrap().metadata.labels.unwrap_or_default()
}

fn desired(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn advisory_labels_converge_and_leave_foreign_labels_alone() {
    let s = StandIn::start().await;
    s.add_node(node("gpu-1", foreign()));
    let c = Cluster::connect(Some(s.url())).await.unwrap();

    let first = desired(&[
        (UTILIZATION_CLASS, "low"),
        (RECOMMENDED_SHARING, "mig"),
        (RECOMMENDED_MIG_CONFIG, "gpulens-gpu-1"),
    ]);
    let done = c.converge_advisory("gpu-1", &first).await.unwrap();
    assert_eq!(done.added.len(), 3);
    let l = labels(&s, "gpu-1");
    for (k, v) in &first {
        assert_eq!(l.get(k), Some(v));
    }
    let ann = s.node("gpu-1").unwrap().metadata.annotations.unwrap();
    assert_eq!(
        ann[MANAGED_ANNOTATION],
        "gpulens.io/recommended-mig-config,gpulens.io/recommended-sharing,gpulens.io/utilization-class"
    );

    // Converging again changes nothing and sends nothing.
    let before = s.requests().len();
    assert!(
        c.converge_advisory("gpu-1", &first)
            .await
            .unwrap()
            .is_noop()
    );
    assert_eq!(s.requests().len(), before);

    // The analysis changed its mind: one changed, one gone.
    let second = desired(&[(UTILIZATION_CLASS, "high"), (RECOMMENDED_SHARING, "keep")]);
    let done = c.converge_advisory("gpu-1", &second).await.unwrap();
    assert_eq!(done.changed.len(), 2);
    assert_eq!(done.removed, vec![RECOMMENDED_MIG_CONFIG.to_string()]);
    let l = labels(&s, "gpu-1");
    assert_eq!(l[UTILIZATION_CLASS], "high");
    assert!(!l.contains_key(RECOMMENDED_MIG_CONFIG));
    // Everyone else's labels, including one in our namespace we never set, are as they were.
    for (k, v) in foreign().as_object().unwrap() {
        assert_eq!(l.get(k).map(String::as_str), v.as_str(), "{k}");
    }
    // Every write was a merge patch of the node.
    assert!(s.requests().iter().all(|(m, p, ct)| m == "PATCH"
        && p == "/api/v1/nodes/gpu-1"
        && ct == "application/merge-patch+json"));
}

#[tokio::test]
async fn the_allow_list_refuses_foreign_keys_before_any_request() {
    let s = StandIn::start().await;
    s.add_node(node("gpu-1", foreign()));
    let c = Cluster::connect(Some(s.url())).await.unwrap();
    for key in [
        "kubernetes.io/hostname",
        "node-role.kubernetes.io/gpu",
        "team",
        "nvidia.com/mig.config",
    ] {
        let err = c
            .converge_advisory("gpu-1", &desired(&[(key, "x")]))
            .await
            .unwrap_err();
        assert!(matches!(err, KubeError::Refused(_)), "{key}: {err}");
    }
    for key in [
        "kubernetes.io/hostname",
        OPERATOR_MIG_STATE,
        UTILIZATION_CLASS,
    ] {
        let err = c
            .set_operator_label("gpu-1", key, Some("x"))
            .await
            .unwrap_err();
        assert!(matches!(err, KubeError::Refused(_)), "{key}: {err}");
    }
    assert!(s.requests().is_empty(), "nothing reached the API server");
    assert_eq!(
        labels(&s, "gpu-1").len(),
        foreign().as_object().unwrap().len()
    );
}

#[tokio::test]
async fn the_stand_in_speaks_the_api_servers_rules() {
    let s = StandIn::start().await;
    s.add_node(node("gpu-1", json!({"team": "ml"})));
    let client = reqwest_like(&s);
    // A stale resource version is a conflict.
    let (code, _) = client
        .patch(
            "application/merge-patch+json",
            json!({"metadata": {"resourceVersion": "999", "labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(code, 409);
    // Invalid label values are refused with 422 and change nothing.
    let (code, body) = client
        .patch(
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"a": "not valid!"}}}),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["kind"], "Status");
    // Strategic-merge directives are refused rather than misapplied.
    let (code, _) = client
        .patch(
            "application/strategic-merge-patch+json",
            json!({"metadata": {"labels": {"$patch": "replace"}}}),
        )
        .await;
    assert_eq!(code, 422);
    // Server-side apply removes what the same manager applied before and now leaves out.
    let apply = |labels| json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": labels}});
    let (code, _) = client
        .apply(
            "gpulens",
            apply(json!({"gpulens.io/a": "1", "gpulens.io/b": "2"})),
        )
        .await;
    assert_eq!(code, 200);
    let (code, _) = client
        .apply("gpulens", apply(json!({"gpulens.io/a": "1"})))
        .await;
    assert_eq!(code, 200);
    let l = labels(&s, "gpu-1");
    assert_eq!(l.get("gpulens.io/a").map(String::as_str), Some("1"));
    assert!(!l.contains_key("gpulens.io/b"));
    assert_eq!(l["team"], "ml");
    let (code, _) = client.apply("", apply(json!({}))).await;
    assert_eq!(code, 400, "apply needs a field manager");
}

/// A small raw HTTP client for the stand-in's own tests (the product goes through kube).
struct Raw {
    url: String,
}

fn reqwest_like(s: &StandIn) -> Raw {
    Raw {
        url: format!("{}/api/v1/nodes/gpu-1", s.url()),
    }
}

impl Raw {
    async fn send(
        &self,
        url: String,
        ct: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let client = ingest_client::http().build().unwrap();
        let r = client
            .patch(url)
            .header("content-type", ct)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let code = r.status().as_u16();
        let text = r.text().await.unwrap();
        (code, serde_json::from_str(&text).unwrap_or(json!(text)))
    }

    async fn patch(&self, ct: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.send(self.url.clone(), ct, body).await
    }

    async fn apply(&self, manager: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.send(
            format!("{}?fieldManager={manager}", self.url),
            "application/apply-patch+yaml",
            body,
        )
        .await
    }
}

/// How the fake MIG manager answers a requested config.
#[derive(Clone, Copy, PartialEq)]
enum Answer {
    Success,
    Fail,
    Ignore,
}

/// A stand-in cluster with the MIG node `gpu-1`, whose MIG manager gives `to_plan` for the
/// plan's config (`all-1g.10gb`) and succeeds with any other (the rollback's).
async fn mig_node_answering(to_plan: Answer) -> (StandIn, Cluster) {
    let s = StandIn::start().await;
    s.add_node(mig_node());
    fake_mig_manager(&s, "gpu-1", move |cfg| {
        if cfg == "all-1g.10gb" {
            to_plan
        } else {
            Answer::Success
        }
    });
    let c = Cluster::connect(Some(s.url())).await.unwrap();
    (s, c)
}

/// Plays the GPU Operator's MIG manager: when `nvidia.com/mig.config` changes it sets the
/// state label to `pending`, then after a moment to the answer for that config.
fn fake_mig_manager(
    s: &StandIn,
    node: &'static str,
    answer: impl Fn(&str) -> Answer + Send + 'static,
) {
    let mut rx = s.subscribe();
    let s = s.clone();
    let mut last = labels(&s, node).get(OPERATOR_MIG_CONFIG).cloned();
    tokio::spawn(async move {
        while let Ok(ev) = rx.recv().await {
            let want = ev.node["metadata"]["labels"][OPERATOR_MIG_CONFIG]
                .as_str()
                .map(str::to_owned);
            if want == last {
                continue;
            }
            last = want.clone();
            let Some(config) = want else { continue };
            let a = answer(&config);
            if a == Answer::Ignore {
                continue;
            }
            s.set_label(node, OPERATOR_MIG_STATE, Some("pending"));
            tokio::time::sleep(Duration::from_millis(100)).await;
            let state = if a == Answer::Success {
                "success"
            } else {
                "failed"
            };
            s.set_label(node, OPERATOR_MIG_STATE, Some(state));
        }
    });
}

#[derive(Default)]
struct Steps(Vec<(String, String, String)>);

impl Audit for Steps {
    async fn step(&mut self, step: &str, result: &str, detail: String) {
        self.0.push((step.into(), result.into(), detail));
    }
}

impl Steps {
    fn names(&self) -> Vec<String> {
        self.0.iter().map(|(s, r, _)| format!("{s}:{r}")).collect()
    }
}

fn mig_node() -> Node {
    node(
        "gpu-1",
        json!({
            "nvidia.com/gpu.present": "true",
            OPERATOR_MIG_CONFIG: "all-disabled",
            OPERATOR_MIG_STATE: "success",
        }),
    )
}

fn plan() -> Plan {
    Plan {
        node: "gpu-1".into(),
        label: OPERATOR_MIG_CONFIG.into(),
        value: "all-1g.10gb".into(),
        layout: None,
        recommendation: None,
        rollback_of: None,
    }
}

fn limits() -> Limits {
    Limits {
        drain_timeout: Duration::from_millis(600),
        config_timeout: Duration::from_secs(2),
        poll: Duration::from_millis(50),
        override_pods: false,
        sync_wait: Duration::ZERO,
    }
}

fn unschedulable(s: &StandIn) -> bool {
    s.node("gpu-1")
        .unwrap()
        .spec
        .and_then(|x| x.unschedulable)
        .unwrap_or(false)
}

fn gpu_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"},
    }))
    .unwrap()
}

#[tokio::test]
async fn mig_reconfiguration_happy_path() {
    let s = StandIn::start().await;
    s.add_node(mig_node());
    fake_mig_manager(&s, "gpu-1", |_| Answer::Success);
    // A pod without GPUs does not hold the change up.
    s.add_pod(
        serde_json::from_value(json!({
            "metadata": {"name": "logs", "namespace": "kube-system"},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "c"}]},
        }))
        .unwrap(),
    );
    let c = Cluster::connect(Some(s.url())).await.unwrap();
    let mut audit = Steps::default();
    let out = workflow::run(&c, &plan(), &limits(), &mut audit)
        .await
        .unwrap();
    assert_eq!(out, Outcome::Applied);
    assert_eq!(
        audit.names(),
        [
            "plan:started",
            "cordon:ok",
            "drain:ok",
            "label:ok",
            "watch:pending",
            "watch:success",
            "uncordon:ok"
        ]
    );
    assert_eq!(labels(&s, "gpu-1")[OPERATOR_MIG_CONFIG], "all-1g.10gb");
    assert_eq!(labels(&s, "gpu-1")[OPERATOR_MIG_STATE], "success");
    assert!(!unschedulable(&s));
    // Run again: nothing to do.
    let again = workflow::run(&c, &plan(), &limits(), &mut Steps::default())
        .await
        .unwrap();
    assert_eq!(again, Outcome::Unchanged);
}

/// The operator's ConfigMap as the GPU Operator's docs show a custom one.
const OPERATOR_MIG_PARTED: &str = "version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  five-1g-one-2g:
    - devices: all
      mig-enabled: true
      mig-devices:
        \"1g.10gb\": 5
        \"2g.20gb\": 1
";

fn generated_layout() -> (String, Layout) {
    let name = "gpulens-mig-0123456789ab".to_string();
    let yaml = format!(
        "version: v1\nmig-configs:\n  {name}:\n    - devices: [0, 1]\n      mig-enabled: true\n      mig-devices:\n        \"1g.10gb\": 7\n"
    );
    let layout = Layout::MigParted {
        namespace: "gpu-operator".into(),
        config_map: "custom-mig-config".into(),
        yaml,
    };
    (name, layout)
}

fn mig_configs(s: &StandIn) -> serde_yaml::Mapping {
    let cm = s.configmap("gpu-operator", "custom-mig-config").unwrap();
    let text = &cm.data.unwrap()["config.yaml"];
    let doc: serde_yaml::Value = serde_yaml::from_str(text).unwrap();
    doc["mig-configs"].as_mapping().unwrap().clone()
}

#[tokio::test]
async fn custom_layouts_go_into_the_operators_configmap_before_the_label() {
    let s = StandIn::start().await;
    s.add_node(mig_node());
    s.put_configmap(
        "gpu-operator",
        "custom-mig-config",
        &[("config.yaml", OPERATOR_MIG_PARTED)],
    );
    // The MIG manager succeeds only for configs its ConfigMap holds, as the real one does.
    let s2 = s.clone();
    fake_mig_manager(&s, "gpu-1", move |cfg| {
        if mig_configs(&s2).contains_key(cfg) {
            Answer::Success
        } else {
            Answer::Fail
        }
    });
    let c = Cluster::connect(Some(s.url())).await.unwrap();
    let (name, layout) = generated_layout();
    let mut p = plan();
    p.value = name.clone();
    p.layout = Some(layout);
    let mut l = limits();
    l.sync_wait = Duration::from_millis(50);
    let mut audit = Steps::default();
    let out = workflow::run(&c, &p, &l, &mut audit).await.unwrap();
    assert_eq!(out, Outcome::Applied, "{:?}", audit.0);
    assert_eq!(
        audit.names()[..4],
        [
            "plan:started",
            "config_map:added",
            "config_map:sync_wait",
            "cordon:ok"
        ]
    );
    assert_eq!(labels(&s, "gpu-1")[OPERATOR_MIG_CONFIG], name);
    // The operator's own configs are all still there, unchanged; ours is added.
    let configs = mig_configs(&s);
    let before: serde_yaml::Value = serde_yaml::from_str(OPERATOR_MIG_PARTED).unwrap();
    for (k, v) in before["mig-configs"].as_mapping().unwrap() {
        assert_eq!(configs.get(k), Some(v));
    }
    assert!(configs.contains_key(name.as_str()));

    // Going back to an operator config: gpulens never writes configs it does not own.
    let mut back = plan();
    back.value = "five-1g-one-2g".into();
    back.layout = p.layout.clone();
    let e = workflow::run(&c, &back, &l, &mut Steps::default())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not gpulens's to write"), "{e}");
    assert_eq!(labels(&s, "gpu-1")[OPERATOR_MIG_CONFIG], name);
}

#[tokio::test]
async fn a_missing_configmap_stops_the_run_before_the_node_is_touched() {
    let s = StandIn::start().await;
    s.add_node(mig_node());
    let c = Cluster::connect(Some(s.url())).await.unwrap();
    let (name, layout) = generated_layout();
    let mut p = plan();
    p.value = name;
    p.layout = Some(layout);
    let e = workflow::run(&c, &p, &limits(), &mut Steps::default())
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("ConfigMap gpu-operator/custom-mig-config not found"),
        "{e}"
    );
    assert!(!unschedulable(&s));
    assert_eq!(labels(&s, "gpu-1")[OPERATOR_MIG_CONFIG], "all-disabled");
    assert_eq!(s.requests(), [], "no write reached the API server");
}

#[tokio::test]
async fn mig_failure_restores_the_previous_config() {
    let (s, c) = mig_node_answering(Answer::Fail).await;
    let mut audit = Steps::default();
    let out = workflow::run(&c, &plan(), &limits(), &mut audit)
        .await
        .unwrap();
    let Outcome::RolledBack { reason } = out else {
        panic!("{out:?}")
    };
    assert!(reason.contains("failed"), "{reason}");
    assert_eq!(labels(&s, "gpu-1")[OPERATOR_MIG_CONFIG], "all-disabled");
    assert!(
        audit
            .names()
            .contains(&"rollback:label restored".to_string())
    );
    assert!(audit.names().contains(&"rollback:success".to_string()));
    assert!(!unschedulable(&s));
}

#[tokio::test]
async fn mig_timeout_rolls_back_and_a_failed_rollback_keeps_the_node_cordoned() {
    // The MIG manager never takes the new config up, but restores the old one.
    let (s, c) = mig_node_answering(Answer::Ignore).await;
    let mut l = limits();
    l.config_timeout = Duration::from_millis(800);
    let out = workflow::run(&c, &plan(), &l, &mut Steps::default())
        .await
        .unwrap();
    let Outcome::RolledBack { reason } = out else {
        panic!("{out:?}")
    };
    assert!(reason.contains("did not report success"), "{reason}");
    assert_eq!(labels(&s, "gpu-1")[OPERATOR_MIG_CONFIG], "all-disabled");
    assert!(!unschedulable(&s));

    // A MIG manager that answers nothing at all: the node is left cordoned for a person.
    let s = StandIn::start().await;
    s.add_node(mig_node());
    fake_mig_manager(&s, "gpu-1", |_| Answer::Ignore);
    let c = Cluster::connect(Some(s.url())).await.unwrap();
    let out = workflow::run(&c, &plan(), &l, &mut Steps::default())
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Failed { .. }), "{out:?}");
    assert!(unschedulable(&s), "left cordoned");
    assert_eq!(labels(&s, "gpu-1")[OPERATOR_MIG_CONFIG], "all-disabled");
}

#[tokio::test]
async fn gpu_pods_block_the_change_unless_overridden() {
    let s = StandIn::start().await;
    s.add_node(mig_node());
    s.add_pod(gpu_pod("trainer-0"));
    fake_mig_manager(&s, "gpu-1", |_| Answer::Success);
    let c = Cluster::connect(Some(s.url())).await.unwrap();
    let mut audit = Steps::default();
    let out = workflow::run(&c, &plan(), &limits(), &mut audit)
        .await
        .unwrap();
    let Outcome::Refused { reason } = out else {
        panic!("{out:?}")
    };
    assert!(reason.contains("ml/trainer-0"), "{reason}");
    assert_eq!(
        labels(&s, "gpu-1")[OPERATOR_MIG_CONFIG],
        "all-disabled",
        "nothing changed"
    );
    assert!(!unschedulable(&s), "uncordoned again");
    assert!(!audit.names().iter().any(|n| n.starts_with("label")));

    // The pod leaves while the workflow waits: it goes ahead.
    let s2 = s.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        s2.remove_pod("ml", "trainer-0");
    });
    let out = workflow::run(&c, &plan(), &limits(), &mut Steps::default())
        .await
        .unwrap();
    assert_eq!(out, Outcome::Applied);

    // An operator override goes ahead with pods still there.
    s.add_pod(gpu_pod("trainer-1"));
    let mut p = plan();
    p.value = "all-disabled".into();
    let mut l = limits();
    l.override_pods = true;
    let mut audit = Steps::default();
    let out = workflow::run(&c, &p, &l, &mut audit).await.unwrap();
    assert_eq!(out, Outcome::Applied);
    assert!(audit.names().contains(&"drain:overridden".to_string()));
}

/// A planned change approved through the API by an operator, run by the collector's runner with
/// every step stored and served at /api/v1/label-actions; a second change on the same node
/// inside the rate limit is refused.
#[tokio::test]
async fn approval_through_the_api_runs_and_audits_the_change() {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use collector::labels::actions;
    use collector::labels::settings::{Mode, Operator, Settings};
    use collector::router::router;
    use tower::ServiceExt;

    let (s, c) = mig_node_answering(Answer::Success).await;
    let t = crate::support::sqlite().await;
    let settings = Settings {
        mode: Mode::ApplyWithApproval,
        drain_timeout: Duration::from_millis(500),
        config_timeout: Duration::from_secs(2),
        operators: vec![Operator {
            name: "alice".into(),
            token: collector::config::Secret("operator-token-1".into()),
        }],
        ..Settings::default()
    };
    let state = crate::support::default_state(t.store.clone()).with_labels(settings.clone());
    let call = |req: Request<Body>| {
        let state = state.clone();
        async move {
            let resp = router(state).oneshot(req).await.unwrap();
            let code = resp.status();
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            (
                code,
                serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
            )
        }
    };
    let plans = BTreeMap::from([("gpu-1".to_string(), plan())]);
    let ids = actions::record_plans(&t.store, &plans, "gpulens-analysis", collector::now_ms())
        .await
        .unwrap();
    assert_eq!(ids.len(), 1);
    // Planning again while one is open adds nothing.
    assert!(
        actions::record_plans(&t.store, &plans, "x", collector::now_ms())
            .await
            .unwrap()
            .is_empty()
    );
    let id = ids[0];
    let approve = |token: Option<&str>| {
        let mut r = Request::post(format!("/api/v1/label-actions/{id}/approve"));
        if let Some(t) = token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        r.body(Body::empty()).unwrap()
    };
    assert_eq!(call(approve(None)).await.0, StatusCode::UNAUTHORIZED);
    // A token nobody issued for people (an agent's) is no credential here: 401.
    assert_eq!(
        call(approve(Some("agent-token-x"))).await.0,
        StatusCode::UNAUTHORIZED
    );
    let (code, body) = call(approve(Some("operator-token-1"))).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["approved_by"], "alice");
    // Approving twice is a conflict; an unknown id is 404.
    assert_eq!(
        call(approve(Some("operator-token-1"))).await.0,
        StatusCode::CONFLICT
    );
    let (code, _) = call(
        Request::post("/api/v1/label-actions/999/approve")
            .header("authorization", "Bearer operator-token-1")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(code, StatusCode::NOT_FOUND);

    let ran = actions::run_approved(&t.store, &c, &settings, false)
        .await
        .unwrap();
    assert_eq!(ran, vec![(id, Outcome::Applied)]);
    assert_eq!(labels(&s, "gpu-1")[OPERATOR_MIG_CONFIG], "all-1g.10gb");

    let (code, body) = call(
        Request::get("/api/v1/label-actions")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["mode"], "apply-with-approval");
    let a = &body["actions"][0];
    assert_eq!(a["state"], "applied");
    assert_eq!(a["approved_by"], "alice");
    assert!(a["finished_at"].as_str().unwrap().ends_with('Z'));
    let steps: Vec<String> = a["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{}:{}",
                s["step"].as_str().unwrap(),
                s["result"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            "plan:started",
            "cordon:ok",
            "drain:ok",
            "label:ok",
            "watch:pending",
            "watch:success",
            "uncordon:ok"
        ]
    );
    assert!(
        a["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["actor"] == "alice")
    );

    // A second change on the same node inside the rate limit: refused, nothing written.
    let mut back = plan();
    back.value = "all-disabled".into();
    let ids = actions::record_plans(
        &t.store,
        &BTreeMap::from([("gpu-1".to_string(), back)]),
        "gpulens-analysis",
        collector::now_ms(),
    )
    .await
    .unwrap();
    actions::approve(
        &t.store,
        &settings,
        ids[0],
        "alice",
        false,
        collector::now_ms(),
    )
    .await
    .unwrap();
    let ran = actions::run_approved(&t.store, &c, &settings, false)
        .await
        .unwrap();
    assert!(
        matches!(&ran[0].1, Outcome::Refused { reason } if reason.contains("rate limit")),
        "{ran:?}"
    );
    assert_eq!(labels(&s, "gpu-1")[OPERATOR_MIG_CONFIG], "all-1g.10gb");

    // With labels in advise mode, approval is refused.
    let advise = Settings {
        mode: Mode::Advise,
        ..settings.clone()
    };
    let err = actions::approve(&t.store, &advise, id, "alice", false, collector::now_ms())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("apply-with-approval"), "{err}");
}

/// `GET /api/v1/nodes/{node}/labels`: the agent's token, bound to its node, reads that node's
/// advisory labels from the newest stored analysis, and nothing while labels are off.
#[tokio::test]
async fn agents_read_their_nodes_advisory_labels() {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use collector::auth::Auth;
    use collector::labels::settings::{Mode, Settings};
    use collector::{router::router, state::AppState};
    use tower::ServiceExt;

    let t = crate::support::sqlite().await;
    let mut auth = Auth::default();
    auth.add("node-token-1", vec!["gpu-1".into()], Some("prod".into()));
    let state = |auth: &Auth, mode| {
        AppState::new(
            t.store.clone(),
            auth.clone(),
            Default::default(),
            Default::default(),
            Default::default(),
        )
        .with_labels(Settings {
            mode,
            ..Settings::default()
        })
    };
    let get = |state: AppState, uri: &str, token: Option<&str>| {
        let mut req = Request::get(uri);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req.body(Body::empty()).unwrap();
        async move {
            let resp = router(state).oneshot(req).await.unwrap();
            let code = resp.status();
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            (
                code,
                serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
            )
        }
    };
    let uri = "/api/v1/nodes/gpu-1/labels?cluster=prod";
    let on = state(&auth, Mode::Advise);
    assert_eq!(get(on.clone(), uri, None).await.0, StatusCode::UNAUTHORIZED);
    let (code, body) = get(
        on.clone(),
        "/api/v1/nodes/gpu-2/labels?cluster=prod",
        Some("node-token-1"),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        get(
            on.clone(),
            "/api/v1/nodes/gpu-1/labels?cluster=dev",
            Some("node-token-1")
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    // No analysis yet: come back later.
    let (code, body) = get(on.clone(), uri, Some("node-token-1")).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");

    // An analysis of the demo fleet, stored as the scheduled job stores it.
    let to = 1_795_219_200_000;
    let fleet = crate::support::fleet();
    let node = fleet.nodes[0].spec.name.clone();
    let mut auth2 = Auth::default();
    auth2.add("node-token-2", vec![node.clone()], None);
    for (seq, chunk) in (0..60)
        .map(|i| to - 3_600_000 + i * 60_000)
        .collect::<Vec<_>>()
        .chunks(30)
        .enumerate()
    {
        let b = fleet.batch(0, "truth", seq as u64 + 1, chunk, 60_000);
        t.store.ingest(&b, to, &|_| None).await.unwrap();
    }
    t.store.rollup(to).await.unwrap();
    let a = crate::support::analyse(&t.store, to - 3_600_000, to).await;
    let body = serde_json::to_string(&a).unwrap();
    t.store
        .save_analysis(to, a.from_ms, a.to_ms, &body, 5)
        .await
        .unwrap();
    let expected = collector::labels::advisory::labels(&a, a.generated_ms)
        .remove(&(fleet.scenario.cluster.clone(), node.clone()))
        .unwrap();
    let uri = format!(
        "/api/v1/nodes/{node}/labels?cluster={}",
        fleet.scenario.cluster
    );
    let (code, body) = get(state(&auth2, Mode::Advise), &uri, Some("node-token-2")).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["node"], node.as_str());
    let got: BTreeMap<String, String> = serde_json::from_value(body["labels"].clone()).unwrap();
    assert_eq!(got, expected);
    assert!(got.contains_key(UTILIZATION_CLASS), "{got:?}");
    // Labels off: nothing is served.
    let (code, body) = get(state(&auth2, Mode::Off), &uri, Some("node-token-2")).await;
    assert_eq!(code, StatusCode::CONFLICT, "{body}");
}

/// Issue 15: label planning grouped by node name only, so batches sent for `gpu-h100-01` in
/// another cluster flipped that node's label. Nodes are now (cluster, node) from the funnel
/// to the label writer, which takes only its own cluster's nodes.
#[tokio::test]
async fn the_same_node_name_in_two_clusters_is_two_nodes_to_the_funnel_and_the_labels() {
    let t = crate::support::sqlite().await;
    let to = 1_795_219_200_000;
    let fleet = crate::support::fleet();
    let home = fleet.scenario.cluster.clone();
    let minutes: Vec<i64> = (0..30).map(|i| to - 1_800_000 + i * 60_000).collect();
    for (seq, chunk) in minutes.chunks(10).enumerate() {
        let b = fleet.batch(0, "home", seq as u64 + 1, chunk, 60_000);
        t.store.ingest(&b, to, &|_| None).await.unwrap();
        // The same node names in another cluster, with their own GPUs.
        let text = serde_json::to_string(&b)
            .unwrap()
            .replace("\"GPU-", "\"GPU-west-");
        let mut west: model::wire::v1::Batch = serde_json::from_str(&text).unwrap();
        west.cluster = "west".into();
        west.agent_id = "west".into();
        t.store.ingest(&west, to, &|_| None).await.unwrap();
    }
    t.store.rollup(to).await.unwrap();
    let a = crate::support::analyse(&t.store, to - 1_800_000, to).await;
    let node = fleet.nodes[0].spec.name.clone();
    let rows: Vec<_> = a.funnel.by_node.iter().filter(|r| r.key == node).collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let clusters: Vec<_> = rows.iter().map(|r| r.cluster.as_deref().unwrap()).collect();
    assert!(clusters.contains(&home.as_str()) && clusters.contains(&"west"));
    assert_eq!(
        rows[0].capacity_gpu_hours, rows[1].capacity_gpu_hours,
        "each cluster's node holds its own GPUs, not both"
    );
    let all = collector::labels::advisory::labels(&a, a.generated_ms);
    assert!(all.contains_key(&(home.clone(), node.clone())));
    assert!(all.contains_key(&("west".to_owned(), node.clone())));
    // A writer with no cluster configured refuses rather than guessing.
    assert!(collector::labels::advisory::for_cluster(all.clone(), None).is_err());
    let (_, mine) = collector::labels::advisory::for_cluster(all, Some(&home)).unwrap();
    assert!(mine.contains_key(&node));
}

/// Before touching a node, the workflow reads the GPU Operator's own labels: a MIG change
/// still in flight (a component paused for it, the MIG manager pending) or the component
/// switched off on the node refuses the run, and the node is left as it was.
#[tokio::test]
async fn the_operators_pause_and_deploy_labels_are_honoured() {
    for (key, value, expect) in [
        (
            "nvidia.com/gpu.deploy.device-plugin",
            "paused-for-mig-change",
            "in the middle of a MIG change",
        ),
        (OPERATOR_MIG_STATE, "pending", "still applying a change"),
        (
            "nvidia.com/gpu.deploy.mig-manager",
            "false",
            "mig-manager is switched off",
        ),
    ] {
        let s = StandIn::start().await;
        let mut n = mig_node();
        n.metadata
            .labels
            .get_or_insert_default()
            .insert(key.into(), value.into());
        s.add_node(n);
        fake_mig_manager(&s, "gpu-1", |_| Answer::Success);
        let c = Cluster::connect(Some(s.url())).await.unwrap();
        let mut audit = Steps::default();
        let out = workflow::run(&c, &plan(), &limits(), &mut audit)
            .await
            .unwrap();
        let Outcome::Refused { reason } = out else {
            panic!("{key}={value}: {out:?}")
        };
        assert!(reason.contains(expect), "{key}={value}: {reason}");
        assert_eq!(labels(&s, "gpu-1")[OPERATOR_MIG_CONFIG], "all-disabled");
        assert!(
            !unschedulable(&s),
            "{key}={value}: the node was not cordoned"
        );
        assert_eq!(audit.names(), ["preflight:refused"], "{key}={value}");
    }
    // A device-plugin change is not held up by the MIG manager being off.
    let mut l = BTreeMap::new();
    l.insert(
        "nvidia.com/gpu.deploy.mig-manager".to_owned(),
        "false".to_owned(),
    );
    assert_eq!(
        workflow::operator_busy(&l, model::labels::OPERATOR_DEVICE_PLUGIN_CONFIG),
        None
    );
}

/// A generated time-slicing config keeps the cluster's MIG strategy: on a node that GPU
/// Feature Discovery labels `nvidia.com/mig.strategy=mixed`, the config written into the
/// device plugin's ConfigMap says `migStrategy: mixed`, not the generated `none`.
#[tokio::test]
async fn device_plugin_configs_keep_the_clusters_mig_strategy() {
    let s = StandIn::start().await;
    s.add_node(node(
        "gpu-1",
        json!({"nvidia.com/gpu.present": "true", "nvidia.com/mig.strategy": "mixed"}),
    ));
    s.put_configmap("gpu-operator", "time-slicing-config", &[]);
    let c = Cluster::connect(Some(s.url())).await.unwrap();
    let name = "gpulens-time-slicing-x4";
    let p = Plan {
        node: "gpu-1".into(),
        label: model::labels::OPERATOR_DEVICE_PLUGIN_CONFIG.into(),
        value: name.into(),
        layout: Some(Layout::DevicePlugin {
            namespace: "gpu-operator".into(),
            config_map: "time-slicing-config".into(),
            yaml: analytics::recommend::device_plugin_config("time_slicing", 4),
        }),
        recommendation: None,
        rollback_of: None,
    };
    let mut audit = Steps::default();
    let out = workflow::run(&c, &p, &limits(), &mut audit).await.unwrap();
    assert_eq!(out, Outcome::Applied, "{:?}", audit.0);
    let cm = s.configmap("gpu-operator", "time-slicing-config").unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&cm.data.unwrap()[name]).unwrap();
    assert_eq!(
        doc["flags"]["migStrategy"],
        serde_yaml::Value::from("mixed")
    );
    assert_eq!(
        labels(&s, "gpu-1")[model::labels::OPERATOR_DEVICE_PLUGIN_CONFIG],
        name
    );
}

/// Issue 43: a step that requires others is approved with the planned label actions of the
/// steps it requires, which run first; a required step with no label action (a reclaim) that
/// the newest analysis still proposes refuses the approval, naming it.
#[tokio::test]
async fn dependent_steps_are_approved_together_and_never_run_out_of_order() {
    use collector::labels::actions::{self, ApproveError};
    use collector::labels::settings::{Mode, Settings};

    let t = crate::support::sqlite().await;
    let base = crate::support::store_time_slicing_step(&t.store, "step-b", "node-b", false).await;
    let b = base.recommendations[0].clone();
    let mut a = b.clone();
    a.id = "step-a".into();
    a.node = "node-a".into();
    a.requires = vec!["reclaim-c".into(), "step-b".into()];
    let mut c = b.clone();
    c.id = "reclaim-c".into();
    c.kind = analytics::RecKind::Reclaim;
    c.node = "node-c".into();
    c.summary = "reclaim pod/c's allocation on node-c".into();
    c.proposal = analytics::Proposal::Reclaim {
        tenant: "pod/c".into(),
        gpus: vec!["GPU-c".into()],
        gpu_equivalents: 1.0,
    };
    let save = |recs: Vec<analytics::Recommendation>, at: i64| {
        let mut analysis = base.clone();
        analysis.recommendations = recs;
        analysis.generated_ms = at;
        let store = t.store.clone();
        async move {
            store
                .save_analysis(
                    at,
                    analysis.from_ms,
                    analysis.to_ms,
                    &serde_json::to_string(&analysis).unwrap(),
                    5,
                )
                .await
                .unwrap();
            analysis
        }
    };
    let now = collector::now_ms();
    let analysis = save(vec![a.clone(), b.clone(), c.clone()], now + 1).await;
    let plans = workflow::plans(&analysis, "c", None);
    assert_eq!(plans.len(), 2, "{plans:?}");
    let ids = actions::record_plans(&t.store, &plans, "gpulens-analysis", now)
        .await
        .unwrap();
    let settings = Settings {
        mode: Mode::ApplyWithApproval,
        ..Settings::default()
    };
    let action_of = |node: &str| {
        let store = t.store.clone();
        let node = node.to_owned();
        async move {
            store
                .label_actions(&store::label_actions::ActionFilter {
                    node: Some(&node),
                    ..store::label_actions::ActionFilter::newest(5)
                })
                .await
                .unwrap()
                .remove(0)
        }
    };
    let (id_a, id_b) = (action_of("node-a").await.id, action_of("node-b").await.id);
    assert!(ids.contains(&id_a) && ids.contains(&id_b));
    // The reclaim is a person's change: approving A before it is done is refused, naming it.
    let err = actions::approve(&t.store, &settings, id_a, "alice", false, now)
        .await
        .unwrap_err();
    assert!(matches!(err, ApproveError::Requires(..)), "{err}");
    assert!(err.to_string().contains("reclaim-c"), "{err}");
    assert_eq!(action_of("node-a").await.state, "planned");
    assert_eq!(action_of("node-b").await.state, "planned");
    // Once an analysis no longer proposes the reclaim, A is approved with B.
    save(vec![a.clone(), b.clone()], now + 2).await;
    actions::approve(&t.store, &settings, id_a, "alice", false, now)
        .await
        .unwrap();
    assert_eq!(action_of("node-a").await.state, "approved");
    let b_action = action_of("node-b").await;
    assert_eq!(b_action.state, "approved");
    assert_eq!(b_action.approved_by.as_deref(), Some("alice"));
    // The actuator runs B before A although A was approved by name (the nodes are unknown to
    // the stand-in, so both end refused or failed: the order is what counts here).
    let s = StandIn::start().await;
    let cluster = Cluster::connect(Some(s.url())).await.unwrap();
    let ran = actions::run_approved(&t.store, &cluster, &settings, false)
        .await
        .unwrap();
    let order: Vec<i64> = ran.iter().map(|(id, _)| *id).collect();
    assert_eq!(order, vec![id_b, id_a]);
}
