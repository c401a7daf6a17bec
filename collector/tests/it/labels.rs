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

mod approval;
mod mig_workflow;

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
