//! The demo's cluster: the in-process Kubernetes API **stand-in** (kube-standin; no API server
//! runs where gpulens is built and demonstrated) holding the scenario's pods, each owned by a
//! Deployment through its ReplicaSet, so the reclaim loop can run against it — in dry run, as
//! a new installation does: it opens cases for idle holdings, notifies and reports what it
//! would scale, and changes nothing.

use std::time::Duration;

use kube_standin::StandIn;
use serde_json::json;

use crate::reclaim::settings::{Action, Policy, Settings};

/// The dry-run reclaim settings of the demo, pointing at the stand-in at `kube_url`: one
/// policy for the namespaces of the scenario's pods with the documented defaults (90 % idle
/// over 24 h, four hours' grace, approval required), a pass a minute.
pub fn settings(scenario: &simulator::Scenario, kube_url: &str) -> Settings {
    let namespaces: std::collections::BTreeSet<String> = scenario
        .tenants
        .iter()
        .filter(|t| t.kind == "pod")
        .filter_map(|t| t.namespace.clone())
        .collect();
    Settings {
        dry_run: true,
        every: Duration::from_secs(60),
        kube_url: Some(kube_url.to_owned()),
        cluster: Some(scenario.cluster.clone()),
        policies: vec![Policy {
            name: "demo-idle".into(),
            namespaces: namespaces.into_iter().collect(),
            teams: Vec::new(),
            idle_share: 0.9,
            min_idle: Duration::from_secs(24 * 3600),
            grace: Duration::from_secs(4 * 3600),
            action: Action::ScaleToZero,
            approval: true,
            use_threshold: 0.05,
            exempt: Vec::new(),
        }],
        ..Settings::default()
    }
}

/// Fills the stand-in with a pod per pod tenant the store knows (name, namespace, uid and node
/// as the agents reported them), each owned by a Deployment through its ReplicaSet.
pub async fn fill(kube: &StandIn, store: &store::Store) -> anyhow::Result<()> {
    // A tenant reported from two nodes is one pod.
    let mut pods = std::collections::BTreeSet::new();
    for t in store.tenants().await? {
        let p = &t.tenant;
        let (Some(ns), Some(name), Some(uid)) = (&p.namespace, &p.pod, &p.pod_uid) else {
            continue;
        };
        let Some(node) = t.nodes.first() else {
            continue;
        };
        if !pods.insert((ns.clone(), name.clone())) {
            continue;
        }
        let deployment = name.clone();
        let replica_set = format!("{name}-demo");
        kube.add_object(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": deployment, "namespace": ns, "uid": format!("uid-{ns}-{deployment}")},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "main"}]}}}}));
        kube.add_object(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": replica_set, "namespace": ns, "uid": format!("uid-{ns}-{replica_set}"),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                             "name": deployment, "uid": format!("uid-{ns}-{deployment}"), "controller": true}]},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}}}));
        kube.add_pod(serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "uid": uid, "labels": {"app": name},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                             "name": replica_set, "uid": format!("uid-{ns}-{replica_set}"), "controller": true}]},
            "spec": {"nodeName": node, "containers": [{"name": "main"}]},
            "status": {"phase": "Running"}
        }))?);
    }
    Ok(())
}

/// The reclaim loop of the demo once its history is stored: the stand-in filled with the
/// pods, the loop in dry run against it with the settings the state lists, no receivers (its
/// notices show on /alerts and /reclaim).
pub async fn dry_run_reclaim(
    state: &crate::state::AppState,
    kube: &StandIn,
) -> anyhow::Result<Option<crate::reclaim::Reclaim>> {
    fill(kube, &state.shared.store).await?;
    Ok(crate::reclaim::connect_if_enabled(
        &state.shared.store,
        &state.reclaim,
        state.newest.clone(),
        state.shared.retention,
        Vec::new(),
        &state.metrics.reclaim,
    )
    .await)
}
