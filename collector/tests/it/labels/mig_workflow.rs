//! The MIG reconfiguration workflow against the stand-in and a fake MIG manager: the happy
//! path, custom layouts in the operator's ConfigMap, failure with rollback, timeout, refusal
//! while GPU pods remain.

use super::*;

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

/// An API error at any step after the cordon — listing the node's pods, writing the
/// label, watching the MIG manager, uncordoning — is undone: the label is back to what it was
/// (the rollback watched like any other), the node is schedulable again, every step recorded.
#[tokio::test]
async fn an_api_error_after_the_cordon_is_rolled_back_at_every_step() {
    use kube_standin::Fault;
    let faults = [
        ("drain", "GET", "/api/v1/pods", None),
        ("label", "PATCH", "/api/v1/nodes/gpu-1", Some("all-1g.10gb")),
        ("watch", "GET", "watch=true", None),
        (
            "uncordon",
            "PATCH",
            "/api/v1/nodes/gpu-1",
            Some(r#""unschedulable":null"#),
        ),
    ];
    for (step, method, target, body) in faults {
        let (s, c) = mig_node_answering(Answer::Success).await;
        s.fail(Fault {
            method,
            target: target.into(),
            body: body.map(Into::into),
            skip: 0,
        });
        let mut audit = Steps::default();
        let out = workflow::run(&c, &plan(), &limits(), &mut audit)
            .await
            .unwrap();
        assert_eq!(s.pending_faults(), 0, "{step}: the fault was never met");
        let Outcome::RolledBack { reason } = &out else {
            panic!("{step}: {out:?} {:?}", audit.0)
        };
        assert!(reason.contains("failed mid-run"), "{step}: {reason}");
        assert_eq!(
            labels(&s, "gpu-1")[OPERATOR_MIG_CONFIG],
            "all-disabled",
            "{step}: {:?}",
            audit.0
        );
        assert!(!unschedulable(&s), "{step}: left cordoned: {:?}", audit.0);
        let names = audit.names();
        assert!(
            names.contains(&"error:failed".to_owned()),
            "{step}: {names:?}"
        );
        assert_eq!(
            names.last().map(String::as_str),
            Some("uncordon:ok"),
            "{step}: {names:?}"
        );
    }
}

/// When undoing fails too (the API keeps failing), the outcome says the node may be left
/// cordoned and labelled, and how to look.
#[tokio::test]
async fn an_undo_that_fails_says_what_may_be_left_on_the_node() {
    use kube_standin::Fault;
    let (s, c) = mig_node_answering(Answer::Success).await;
    for _ in 0..2 {
        s.fail(Fault {
            method: "PATCH",
            target: "/api/v1/nodes/gpu-1".into(),
            body: Some(r#""unschedulable":null"#.into()),
            skip: 0,
        });
    }
    let mut audit = Steps::default();
    let out = workflow::run(&c, &plan(), &limits(), &mut audit)
        .await
        .unwrap();
    let Outcome::Failed { reason } = &out else {
        panic!("{out:?} {:?}", audit.0)
    };
    assert!(reason.contains("kubectl describe node gpu-1"), "{reason}");
    assert!(unschedulable(&s));
}
