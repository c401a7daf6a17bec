//! The outcome check end to end: a simulated fleet is analysed, the plan's steps are approved
//! and applied through the Kubernetes API stand-in, the simulated tenants then run where the
//! steps put them (as new pods, under new generated names), and a later analysis measures the
//! result. On one node the tenants behave as recorded (as predicted); on the other a moved
//! tenant's load grows past what it ever recorded, so sharing its GPU turns out worse than
//! replay predicted: a finding, an alert, and a rollback offered as a planned label action.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use analytics::recommend::Proposal;
use analytics::{Analysis, Verdict};
use collector::alerts::rules::{Facts, Kind, Rule, evaluate};
use collector::labels::actions;
use collector::labels::kube::Cluster;
use collector::labels::settings::{Mode, Settings};
use collector::labels::workflow::{self, Outcome, Plan};
use k8s_openapi::api::core::v1::Node;
use kube_standin::StandIn;
use model::labels::OPERATOR_DEVICE_PLUGIN_CONFIG;
use simulator::workload::Pattern;
use simulator::{Fleet, Scenario};
use store::label_actions::ActionFilter;

const HOUR: i64 = 3_600_000;

/// Two pools (different models), each with two light inference pods on whole GPUs: each
/// node's step time-slices one GPU for both and frees the other.
fn before() -> Scenario {
    let mut toml = String::from(
        r#"
name = "outcome-check"
description = "Two time-slicing steps: one goes as predicted, one turns out worse"
cluster = "pool"
seed = 53
interval = "1s"

[[nodes]]
name = "l40s-a"
model = "L40S"
gpus = 2

[[nodes]]
name = "a10g-b"
model = "A10G"
gpus = 2
"#,
    );
    for (node, app, gpu) in [
        ("l40s-a", "chat", 0),
        ("l40s-a", "embed", 1),
        ("a10g-b", "rank", 0),
        ("a10g-b", "search", 1),
    ] {
        toml.push_str(&format!(
            r#"
[[tenants]]
name = "{app}-5c9d8f7b6d-x2kqp"
kind = "pod"
namespace = "web"
node = "{node}"
devices = ["{gpu}"]
pattern = "diurnal_inference"
intensity = 0.5
mem_gib = 6
"#
        ));
    }
    Scenario::from_toml(&toml).unwrap()
}

/// The fleet after the steps ran: each step's node shares as proposed and every tenant on it
/// runs where the moves put it, as a new pod (new UID, new generated name). On `worse_node`,
/// the first tenant's load grows to steady training well past its recorded demand.
fn after(
    before: &Scenario,
    a: &Analysis,
    names: &HashMap<String, String>,
    worse_node: &str,
) -> Scenario {
    let mut s = before.clone();
    for r in &a.recommendations {
        let Proposal::Sharing {
            mode,
            replicas,
            moves,
            ..
        } = &r.proposal
        else {
            continue;
        };
        let node = s.nodes.iter_mut().find(|n| n.name == r.node).unwrap();
        node.sharing = *mode;
        node.replicas = *replicas;
        let mut next: BTreeMap<i64, u32> = BTreeMap::new();
        for m in moves {
            let t = s
                .tenants
                .iter_mut()
                .find(|t| t.name == names[&m.tenant])
                .unwrap();
            let replica = next.entry(m.to_gpu_index).or_default();
            t.node = m.to_node.clone();
            t.devices = vec![format!("{}::{replica}", m.to_gpu_index)];
            *replica += 1;
        }
    }
    let mut worsened = false;
    for t in &mut s.tenants {
        t.name = t.name.replace("-x2kqp", "-m4tzw");
        if t.node == worse_node && !worsened {
            t.pattern = Pattern::SteadyTraining;
            t.intensity = 2.0;
            worsened = true;
        }
    }
    s
}

fn gpu_node(name: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "labels": {
            "nvidia.com/gpu.present": "true",
            OPERATOR_DEVICE_PLUGIN_CONFIG: "default",
        }},
        "spec": {},
    }))
    .unwrap()
}

#[tokio::test]
async fn applied_steps_are_checked_against_their_prediction() {
    let t = crate::support::sqlite().await;
    let store = &t.store;
    // The change runs now (the runner stamps the wall clock): history before it, and the
    // hours after it simulated ahead of the clock, each analysis told its own "now".
    let cut = collector::now_ms() / HOUR * HOUR;
    let from = cut - 30 * HOUR;
    let scenario = before();
    let fleet = Fleet::new(scenario.clone());
    crate::analytics::load(store, &fleet, "before", from, cut).await;
    let first = crate::support::analyse(store, from, cut).await;
    let plans = workflow::plans(&first, "pool", None);
    assert_eq!(
        plans.keys().collect::<Vec<_>>(),
        ["a10g-b", "l40s-a"],
        "{:#?}",
        first.recommendations
    );
    for p in plans.values() {
        assert_eq!(p.label, OPERATOR_DEVICE_PLUGIN_CONFIG);
        let r = p
            .recommendation
            .as_ref()
            .expect("the plan keeps its recommendation");
        assert_eq!(r.replay.gpus_freed, 1.0, "{r:?}");
    }

    // Approved and applied through the Kubernetes API stand-in.
    let s = StandIn::start().await;
    s.add_node(gpu_node("l40s-a"));
    s.add_node(gpu_node("a10g-b"));
    let cluster = Cluster::connect(Some(s.url())).await.unwrap();
    let settings = Settings {
        mode: Mode::ApplyWithApproval,
        cluster: Some("pool".into()),
        drain_timeout: Duration::from_millis(500),
        config_timeout: Duration::from_secs(2),
        ..Settings::default()
    };
    let ids = actions::record_plans(store, &plans, "gpulens-analysis", collector::now_ms())
        .await
        .unwrap();
    let newest = collector_shared::newest::Newest::default();
    for id in &ids {
        actions::approve(
            store,
            &settings,
            &newest,
            *id,
            "alice",
            false,
            collector::now_ms(),
        )
        .await
        .unwrap();
    }
    let ran = actions::run_approved(store, &cluster, &settings, false)
        .await
        .unwrap();
    assert!(ran.iter().all(|(_, o)| *o == Outcome::Applied), "{ran:?}");
    let applied = store
        .label_actions(&ActionFilter::newest(10))
        .await
        .unwrap();
    let action_of = |node: &str| applied.iter().find(|a| a.node == node).unwrap();
    assert_eq!(
        action_of("a10g-b").previous_value.as_deref(),
        Some("default")
    );
    let applied_ms = applied.iter().filter_map(|a| a.finished_ms).max().unwrap();

    // Twelve hours after the change, the tenants where the steps put them.
    let names_before = crate::analytics::names(&fleet, from, cut);
    let later = Fleet::new(after(&scenario, &first, &names_before, "a10g-b"));
    let start = (applied_ms + HOUR - 1) / HOUR * HOUR;
    let to = start + 12 * HOUR;
    // Nothing while the change ran: the first hour after it is measured from the next whole hour.
    crate::analytics::load(store, &later, "after", start, to).await;
    let second = crate::support::analyse(store, from, to).await;
    let outcome = |node: &str| {
        second
            .outcomes
            .iter()
            .find(|o| o.node == node)
            .unwrap_or_else(|| panic!("no outcome for {node}: {:#?}", second.outcomes))
    };

    let fine = outcome("l40s-a");
    assert_eq!(fine.action, action_of("l40s-a").id);
    assert_eq!(fine.verdict, Verdict::AsPredicted, "{fine:#?}");
    assert_eq!(fine.measured.gpus_freed, 1.0, "{fine:#?}");
    assert_eq!(fine.measured.contention_hours, 0.0, "{fine:#?}");
    assert!(fine.hours_after >= 11, "{fine:#?}");
    for t in &fine.tenants {
        // Followed across re-creation: a new pod of the same workload.
        assert!(
            t.workload.starts_with("web/") && !t.workload.contains("x2kqp"),
            "{t:?}"
        );
        assert!(
            !t.tenants_after.is_empty() && !t.tenants_after.contains(&t.tenant),
            "{t:?}"
        );
        assert!(
            t.effective_before.is_some() && t.effective_after.is_some(),
            "{t:?}"
        );
        assert!(t.memory_after_bytes.is_some(), "{t:?}");
    }

    let bad = outcome("a10g-b");
    assert_eq!(bad.verdict, Verdict::Worse, "{bad:#?}");
    assert_eq!(bad.predicted.contention_hours, 0.0, "{bad:#?}");
    assert!(bad.measured.contention_hours >= 6.0, "{bad:#?}");
    assert!(
        bad.reasons.iter().any(|r| r.contains("contended")),
        "{bad:#?}"
    );
    let grown = bad
        .tenants
        .iter()
        .find(|t| t.workload.starts_with("web/rank"))
        .unwrap();
    assert!(
        grown.effective_after.unwrap() > 2.0 * grown.effective_before.unwrap(),
        "{grown:?}"
    );

    // A finding and an alert name it …
    let finding = second
        .findings
        .iter()
        .find(|f| f.kind == analytics::FindingKind::OutcomeWorse)
        .expect("an outcome_worse finding");
    assert_eq!(finding.node, "a10g-b");
    assert!(
        finding.summary.contains("roll it back"),
        "{}",
        finding.summary
    );
    let rules = vec![Rule::default_for(Kind::Finding(
        analytics::FindingKind::OutcomeWorse,
    ))];
    let firing = evaluate(
        &rules,
        &Facts {
            analysis: Some(&second),
            now_ms: to,
            ..Facts::default()
        },
    );
    assert_eq!(firing.len(), 1, "{firing:?}");
    assert_eq!(firing[0].labels["alertname"], "GpulensOutcomeWorse");
    assert_eq!(firing[0].labels["node"], "a10g-b");

    // The API, the step's page and the weekly report show it.
    collector::analysis::save(store, &second, to, 10)
        .await
        .unwrap();
    let state = collector::state::AppState::new(
        store.clone(),
        Default::default(),
        Default::default(),
        Default::default(),
        Default::default(),
    );
    let get = |uri: String| {
        let state = state.clone();
        async move {
            use tower::ServiceExt;
            let resp = collector::router::router(state)
                .oneshot(
                    axum::http::Request::get(uri)
                        .body(axum::body::Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            let code = resp.status();
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            (code, String::from_utf8(bytes.to_vec()).unwrap())
        }
    };
    let (code, body) = get("/api/v1/outcomes".into()).await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["count"], 2);
    let (code, page) = get(format!("/recommendations/{}", bad.recommendation)).await;
    assert_eq!(code, 200, "{page}");
    assert!(
        page.contains("worse than predicted") && page.contains("web/rank/main"),
        "{page}"
    );
    let (code, page) = get("/recommendations".into()).await;
    assert_eq!(code, 200);
    assert!(
        page.contains("Applied steps") && page.contains("1 turned out worse"),
        "{page}"
    );
    let report = collector::reports::content::ReportData::build(
        "2026-W48".into(),
        "UTC".into(),
        &second,
        None,
        to,
    );
    let html = collector::reports::html::render(&report);
    assert!(
        html.contains("Applied steps, checked") && html.contains("worse"),
        "{html}"
    );

    // … and the rollback is offered as a planned change back to the previous config, once.
    for _ in 0..2 {
        actions::after_analysis(store, &cluster, &settings, &second, to, &Default::default())
            .await
            .unwrap();
    }
    let all = store
        .label_actions(&ActionFilter::newest(100))
        .await
        .unwrap();
    let rollbacks: Vec<_> = all
        .iter()
        .filter(|a| {
            serde_json::from_str::<Plan>(&a.plan)
                .unwrap()
                .rollback_of
                .is_some()
        })
        .collect();
    assert_eq!(rollbacks.len(), 1, "{all:#?}");
    let rb = rollbacks[0];
    assert_eq!(
        (rb.node.as_str(), rb.value.as_str(), rb.state.as_str()),
        ("a10g-b", "default", "planned")
    );
    assert_eq!(
        serde_json::from_str::<Plan>(&rb.plan).unwrap().rollback_of,
        Some(action_of("a10g-b").id)
    );
}
