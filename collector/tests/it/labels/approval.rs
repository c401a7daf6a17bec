//! Label actions through the API and the agents: approval runs and audits a change, agents
//! read their nodes' labels, clusters keep their node names apart, the operator's own labels
//! and MIG strategy are honoured, dependent steps run in order.

use super::*;

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
        &collector_shared::newest::Newest::default(),
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
    let newest = collector_shared::newest::Newest::default();
    let err = actions::approve(
        &t.store,
        &advise,
        &newest,
        id,
        "alice",
        false,
        collector::now_ms(),
    )
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
    use collector::labels::settings::{Mode, Settings};
    use collector::{router::router, state::AppState};
    use collector_shared::agent_auth::Auth;
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

/// Label planning grouped by node name only, so batches sent for `gpu-h100-01` in
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
            yaml: analytics::recommend::device_plugin_config(
                model::inventory::Sharing::TimeSlicing,
                4,
            ),
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

/// An analysis (not stored) with a chain of steps: time-slicing `step-a` on node-a requires
/// `reclaim-c` (a reclaim, a person's change) and time-slicing `step-b` on node-b.
async fn chain_of_steps(
    store: &store::Store,
) -> (analytics::Analysis, [analytics::Recommendation; 3]) {
    let base = crate::support::store_time_slicing_step(store, "step-b", "node-b", false).await;
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
    (base, [a, b, c])
}

/// A step that requires others is approved with the planned label actions of the
/// steps it requires, which run first; a required step with no label action (a reclaim) that
/// the newest analysis still proposes refuses the approval, naming it.
#[tokio::test]
async fn dependent_steps_are_approved_together_and_never_run_out_of_order() {
    use collector::labels::actions::{self, ApproveError};
    use collector::labels::settings::{Mode, Settings};

    let t = crate::support::sqlite().await;
    let (base, [a, b, c]) = chain_of_steps(&t.store).await;
    let save = |recs: Vec<analytics::Recommendation>, at: i64| {
        let mut analysis = base.clone();
        analysis.recommendations = recs;
        analysis.generated_ms = at;
        let store = t.store.clone();
        async move {
            // Stored as `gpulens serve` stores it: a bare analysis would let this pass while a
            // running collector approved dependent steps alone.
            collector::analysis::save(&store, &analysis, at, 5)
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
    let newest = collector_shared::newest::Newest::default();
    assert!(ids.contains(&id_a) && ids.contains(&id_b));
    // The reclaim is a person's change: approving A before it is done is refused, naming it.
    let err = actions::approve(&t.store, &settings, &newest, id_a, "alice", false, now)
        .await
        .unwrap_err();
    assert!(matches!(err, ApproveError::Requires(..)), "{err}");
    assert!(err.to_string().contains("reclaim-c"), "{err}");
    assert_eq!(action_of("node-a").await.state.as_str(), "planned");
    assert_eq!(action_of("node-b").await.state.as_str(), "planned");
    // Once an analysis no longer proposes the reclaim, A is approved with B.
    save(vec![a.clone(), b.clone()], now + 2).await;
    actions::approve(&t.store, &settings, &newest, id_a, "alice", false, now)
        .await
        .unwrap();
    assert_eq!(action_of("node-a").await.state.as_str(), "approved");
    let b_action = action_of("node-b").await;
    assert_eq!(b_action.state.as_str(), "approved");
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

/// A running collector (`gpulens serve`'s state over a real socket, the analysis
/// stored by the scheduled job's own save) refuses an operator's approval of a step whose
/// required reclaim is still proposed, naming it, and approves the chain once the reclaim is
/// done. Before the fix the stored envelope read as "no analysis" and the step was approved
/// alone.
#[tokio::test]
async fn a_running_collector_refuses_a_dependent_step_approved_alone() {
    use collector::labels::actions;
    use collector::labels::settings::{Mode, Operator, Settings};

    let t = crate::support::sqlite().await;
    let (base, [a, b, c]) = chain_of_steps(&t.store).await;
    let now = collector::now_ms();
    let mut analysis = base.clone();
    analysis.recommendations = vec![a.clone(), b.clone(), c.clone()];
    analysis.generated_ms = now + 1;
    collector::analysis::save(&t.store, &analysis, now + 1, 5)
        .await
        .unwrap();
    let plans = workflow::plans(&analysis, "c", None);
    actions::record_plans(&t.store, &plans, "gpulens-analysis", now)
        .await
        .unwrap();
    let action_of = |node: &'static str| {
        let store = t.store.clone();
        async move {
            store
                .label_actions(&store::label_actions::ActionFilter {
                    node: Some(node),
                    ..store::label_actions::ActionFilter::newest(5)
                })
                .await
                .unwrap()
                .remove(0)
        }
    };
    let id_a = action_of("node-a").await.id;

    let state = crate::support::default_state(t.store.clone()).with_labels(Settings {
        mode: Mode::ApplyWithApproval,
        operators: vec![Operator {
            name: "alice".into(),
            token: collector::config::Secret("operator-token-1".into()),
        }],
        ..Settings::default()
    });
    let serving = crate::support::serve(state).await;
    let base_url = serving.base.clone();
    let http = ingest_client::http().build().unwrap();
    let approve = || {
        http.post(format!("{base_url}/api/v1/label-actions/{id_a}/approve"))
            .bearer_auth("operator-token-1")
            .send()
    };
    let resp = approve().await.unwrap();
    let code = resp.status();
    let body = resp.text().await.unwrap();
    assert_eq!(code, reqwest::StatusCode::CONFLICT, "{body}");
    assert!(body.contains("reclaim-c"), "{body}");
    assert_eq!(action_of("node-a").await.state.as_str(), "planned");
    assert_eq!(action_of("node-b").await.state.as_str(), "planned");

    // The reclaim carried out: the next analysis no longer proposes it; A goes with B.
    let mut next = analysis.clone();
    next.recommendations = vec![a, b];
    next.generated_ms = now + 2;
    collector::analysis::save(&t.store, &next, now + 2, 5)
        .await
        .unwrap();
    let resp = approve().await.unwrap();
    let code = resp.status();
    let body = resp.text().await.unwrap();
    assert_eq!(code, reqwest::StatusCode::OK, "{body}");
    assert_eq!(action_of("node-a").await.state.as_str(), "approved");
    assert_eq!(action_of("node-b").await.state.as_str(), "approved");
    serving.stop().await;
}
