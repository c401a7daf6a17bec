//! The guarded reconfiguration workflow: how an approved plan changes a GPU Operator label.
//!
//! cordon → wait until no GPU pods remain on the node (or the operator overrides) → write the
//! label → for `nvidia.com/mig.config`, watch `nvidia.com/mig.config.state` leave its old value
//! and reach `success` → uncordon. On `failed` or a timeout the previous label is restored and
//! the rollback watched the same way; a node whose rollback does not reach `success` is left
//! cordoned for a person to look at. Every step is reported to an [`Audit`].

use std::time::Duration;

use std::collections::BTreeMap;

use analytics::Analysis;
use analytics::recommend::Proposal;
use model::labels::{
    MigManagerState, OPERATOR_DEVICE_PLUGIN_CONFIG, OPERATOR_MIG_CONFIG, OPERATOR_MIG_STATE,
};
use serde::{Deserialize, Serialize};

use super::kube::{self, Cluster, KubeError};
use super::layouts::{self, Change, Layout};

/// What to change on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub node: String,
    /// `nvidia.com/mig.config` or `nvidia.com/device-plugin.config`.
    pub label: String,
    /// The named config to select.
    pub value: String,
    /// The generated config to write into the operator's ConfigMap first (custom layouts on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<Layout>,
    /// The recommendation as it was when planned: what the outcome check compares the
    /// measured result with once the change is applied (docs/analytics.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<Box<analytics::Recommendation>>,
    /// For a rollback offered by the outcome check: the action it undoes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<i64>,
}

/// The GPU Operator changes an analysis proposes, one per node at most; with `layouts`, each
/// carries its generated config for the operator's ConfigMap.
pub fn plans(
    a: &Analysis,
    cluster: &str,
    layouts: Option<&layouts::Settings>,
) -> BTreeMap<String, Plan> {
    let mut out = BTreeMap::new();
    for r in a.recommendations.iter().filter(|r| r.cluster == cluster) {
        let plan = match &r.proposal {
            Proposal::MigLayout {
                config_name,
                mig_parted_yaml,
                ..
            } => Plan {
                node: r.node.clone(),
                label: OPERATOR_MIG_CONFIG.into(),
                value: config_name.clone(),
                layout: layouts.map(|l| Layout::MigParted {
                    namespace: l.namespace.clone(),
                    config_map: l.mig_config_map.clone(),
                    yaml: mig_parted_yaml.clone(),
                }),
                recommendation: Some(Box::new(r.clone())),
                rollback_of: None,
            },
            Proposal::Sharing {
                mode,
                replicas,
                device_plugin_yaml,
                ..
            } => Plan {
                node: r.node.clone(),
                label: OPERATOR_DEVICE_PLUGIN_CONFIG.into(),
                value: super::advisory::device_plugin_config_name(*mode, *replicas),
                layout: layouts.map(|l| Layout::DevicePlugin {
                    namespace: l.namespace.clone(),
                    config_map: l.device_plugin_config_map.clone(),
                    yaml: device_plugin_yaml.clone(),
                }),
                recommendation: Some(Box::new(r.clone())),
                rollback_of: None,
            },
            _ => continue,
        };
        out.entry(r.node.clone()).or_insert(plan);
    }
    out
}

/// Timeouts of one run.
#[derive(Debug, Clone)]
pub struct Limits {
    /// How long to wait for GPU pods to leave the cordoned node.
    pub drain_timeout: Duration,
    /// How long the MIG manager may take to report `success`.
    pub config_timeout: Duration,
    /// How often to look for GPU pods.
    pub poll: Duration,
    /// Go ahead although GPU pods remain (the operator said so).
    pub override_pods: bool,
    /// How long to wait after a ConfigMap changed before writing the label.
    pub sync_wait: Duration,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The label is set and the operator reported success (or has nothing to report); the node
    /// is schedulable again.
    Applied,
    /// Nothing to change: the label already had the value.
    Unchanged,
    /// Not started: GPU pods stayed on the node. Nothing was changed; the node is as before.
    Refused { reason: String },
    /// The change failed or timed out; the previous label was restored, the operator reported
    /// success for it, and the node is schedulable again.
    RolledBack { reason: String },
    /// The change failed and so did the rollback: the node is left cordoned.
    Failed { reason: String },
}

/// Where each step is recorded.
pub trait Audit {
    fn step(
        &mut self,
        step: &str,
        result: &str,
        detail: String,
    ) -> impl std::future::Future<Output = ()> + Send;

    /// The label's value before the change (None: unset), heard once the run starts.
    fn previous(&mut self, _value: Option<&str>) -> impl std::future::Future<Output = ()> + Send {
        async {}
    }
}

/// The GPU Operator's per-node component switches (`nvidia.com/gpu.deploy.<component>`):
/// `false` turns the component off on the node; `paused-for-mig-change` is what the MIG
/// manager sets while it reconfigures the GPUs.
const DEPLOY_PREFIX: &str = "nvidia.com/gpu.deploy.";
const PAUSED: &str = "paused-for-mig-change";

/// Why the GPU Operator cannot take this change on the node now, read from its labels before
/// anything is touched: a MIG change still in flight (a component paused for it, or the MIG
/// manager's state `pending`/`rebooting`), or the component that would act on the label
/// switched off on the node.
pub fn operator_busy(labels: &BTreeMap<String, String>, label: &str) -> Option<String> {
    let paused: Vec<&str> = labels
        .iter()
        .filter(|(k, v)| k.starts_with(DEPLOY_PREFIX) && v.as_str() == PAUSED)
        .map(|(k, _)| k.as_str())
        .collect();
    if !paused.is_empty() {
        return Some(format!(
            "the GPU Operator is in the middle of a MIG change on this node ({} = {PAUSED}); try again once it has finished",
            paused.join(", ")
        ));
    }
    if let Some(state) = labels
        .get(OPERATOR_MIG_STATE)
        .and_then(|v| MigManagerState::parse(v))
        && state.busy()
    {
        return Some(format!(
            "the MIG manager is still applying a change ({OPERATOR_MIG_STATE}={state}); try again once it reports success or failed"
        ));
    }
    let component = if label == OPERATOR_MIG_CONFIG {
        "mig-manager"
    } else if label == OPERATOR_DEVICE_PLUGIN_CONFIG {
        "device-plugin"
    } else {
        return None;
    };
    let key = format!("{DEPLOY_PREFIX}{component}");
    (labels.get(&key).map(String::as_str) == Some("false")).then(|| {
        format!(
            "the GPU Operator's {component} is switched off on this node ({key}=false), so {label} would change nothing"
        )
    })
}

/// Waits for the MIG manager to take up the change written at `rv` and finish it.
async fn watch_mig(
    c: &Cluster,
    node: &str,
    rv: &str,
    timeout: Duration,
    audit: &mut impl Audit,
) -> Result<Option<MigManagerState>, KubeError> {
    // Which values of the state label end each wait: the change taken up, then finished.
    let started = |v: &str| MigManagerState::parse(v).filter(|s| s.started());
    let done = |v: &str| MigManagerState::parse(v).filter(|s| s.done());
    let deadline = tokio::time::Instant::now() + timeout;
    let Some((first, seen_at)) = c
        .wait_for_label(node, OPERATOR_MIG_STATE, &started, rv, timeout)
        .await?
    else {
        return Ok(None);
    };
    audit
        .step(
            "watch",
            first.as_str(),
            format!("{OPERATOR_MIG_STATE}={first}"),
        )
        .await;
    if first == MigManagerState::Failed {
        return Ok(Some(first));
    }
    // Watch on from where the change was taken up, so no later state is missed.
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    Ok(
        c.wait_for_label(node, OPERATOR_MIG_STATE, &done, &seen_at, left)
            .await?
            .map(|(state, _)| state),
    )
}

/// Makes the node schedulable again, unless it was cordoned before the run.
async fn uncordon(
    c: &Cluster,
    node: &str,
    was_cordoned: bool,
    audit: &mut impl Audit,
) -> Result<(), KubeError> {
    if !was_cordoned {
        c.set_unschedulable(node, false).await?;
        audit.step("uncordon", "ok", String::new()).await;
    }
    Ok(())
}

/// Runs an approved plan to its end. Errors from the API are returned as they happen; the
/// audit shows how far the run got.
pub async fn run(
    c: &Cluster,
    plan: &Plan,
    limits: &Limits,
    audit: &mut impl Audit,
) -> Result<Outcome, KubeError> {
    let node = c.node(&plan.node).await?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let previous = labels.get(&plan.label).cloned();
    if previous.as_deref() == Some(plan.value.as_str()) {
        audit
            .step(
                "plan",
                "unchanged",
                format!("{} is already {}", plan.label, plan.value),
            )
            .await;
        return Ok(Outcome::Unchanged);
    }
    if let Some(reason) = operator_busy(&labels, &plan.label) {
        audit.step("preflight", "refused", reason.clone()).await;
        return Ok(Outcome::Refused { reason });
    }
    audit
        .step(
            "plan",
            "started",
            format!(
                "{}: {} → {}",
                plan.label,
                previous.as_deref().unwrap_or("(unset)"),
                plan.value
            ),
        )
        .await;
    audit.previous(previous.as_deref()).await;
    // The config first: a missing or unwritable ConfigMap stops the run before the node is
    // touched.
    if let Some(layout) = &plan.layout {
        write_config(c, plan, layout, &labels, limits, audit).await?;
    }
    let was_cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    if was_cordoned {
        audit
            .step(
                "cordon",
                "already",
                "the node was already cordoned; it stays cordoned afterwards".into(),
            )
            .await;
    } else {
        c.set_unschedulable(&plan.node, true).await?;
        audit.step("cordon", "ok", String::new()).await;
    }
    match cordoned(c, plan, previous.as_deref(), was_cordoned, limits, audit).await {
        Ok(outcome) => Ok(outcome),
        // An API error after the cordon left the node cordoned with the new label.
        Err(e) => Ok(undo(c, plan, previous.as_deref(), was_cordoned, limits, audit, e).await),
    }
}

/// What runs while the node is cordoned: drain, label, watch, uncordon.
async fn cordoned(
    c: &Cluster,
    plan: &Plan,
    previous: Option<&str>,
    was_cordoned: bool,
    limits: &Limits,
    audit: &mut impl Audit,
) -> Result<Outcome, KubeError> {
    if let Some(reason) = drain(c, plan, limits, audit).await? {
        uncordon(c, &plan.node, was_cordoned, audit).await?;
        return Ok(Outcome::Refused { reason });
    }
    let rv = c
        .set_operator_label(&plan.node, &plan.label, Some(&plan.value))
        .await?;
    audit
        .step("label", "ok", format!("{}={}", plan.label, plan.value))
        .await;
    if plan.label != OPERATOR_MIG_CONFIG {
        uncordon(c, &plan.node, was_cordoned, audit).await?;
        return Ok(Outcome::Applied);
    }
    let reason = match watch_mig(c, &plan.node, &rv, limits.config_timeout, audit).await? {
        Some(MigManagerState::Success) => {
            audit.step("watch", "success", String::new()).await;
            uncordon(c, &plan.node, was_cordoned, audit).await?;
            return Ok(Outcome::Applied);
        }
        Some(s) => format!("the MIG manager reported {OPERATOR_MIG_STATE}={s}"),
        None => format!(
            "the MIG manager did not report success within {}",
            model::time::format_duration(limits.config_timeout)
        ),
    };
    audit.step("watch", "failed", reason.clone()).await;
    rollback(c, plan, previous, reason, was_cordoned, limits, audit).await
}

/// Undoes a run the API failed after the cordon: the label back to its previous value where
/// the node carries another (the write may have landed before the error), watched as a
/// rollback is, and the node uncordoned. Each step is audited; when the undo fails too, the
/// outcome says what may be left on the node.
async fn undo(
    c: &Cluster,
    plan: &Plan,
    previous: Option<&str>,
    was_cordoned: bool,
    limits: &Limits,
    audit: &mut impl Audit,
    error: KubeError,
) -> Outcome {
    let reason = format!("the Kubernetes API failed mid-run: {error}");
    audit.step("error", "failed", reason.clone()).await;
    let undone = async {
        let node = c.node(&plan.node).await?;
        let now = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(&plan.label))
            .cloned();
        if now.as_deref() != previous {
            return rollback(
                c,
                plan,
                previous,
                reason.clone(),
                was_cordoned,
                limits,
                audit,
            )
            .await;
        }
        audit
            .step(
                "rollback",
                "label unchanged",
                format!("{} is still {}", plan.label, previous.unwrap_or("(unset)")),
            )
            .await;
        uncordon(c, &plan.node, was_cordoned, audit).await?;
        Ok(Outcome::RolledBack {
            reason: reason.clone(),
        })
    }
    .await;
    match undone {
        Ok(outcome) => outcome,
        Err(e) => {
            let reason = format!(
                "{reason}; undoing it failed too ({e}): the node may still be cordoned and carry \
                 {}={}; check it with `kubectl describe node {}`",
                plan.label, plan.value, plan.node
            );
            audit.step("rollback", "failed", reason.clone()).await;
            Outcome::Failed { reason }
        }
    }
}

/// The config first: a missing or unwritable ConfigMap stops the run before the node is
/// touched. The sharing config keeps the cluster's MIG strategy (GPU Feature Discovery's
/// label); a changed ConfigMap waits for the kubelet to update the operator's mounted copy.
async fn write_config(
    c: &Cluster,
    plan: &Plan,
    layout: &Layout,
    labels: &BTreeMap<String, String>,
    limits: &Limits,
    audit: &mut impl Audit,
) -> Result<(), KubeError> {
    // The sharing config keeps the cluster's MIG strategy (GPU Feature Discovery's label).
    let strategy = labels.get(layouts::MIG_STRATEGY_LABEL).map(String::as_str);
    let layout = layout
        .with_mig_strategy(strategy)
        .map_err(KubeError::Layout)?;
    let layout = &layout;
    let change = kube::write_layout(c, layout, &plan.value).await?;
    audit
        .step(
            "config_map",
            change.as_str(),
            format!(
                "{} in ConfigMap {}/{}",
                plan.value,
                layout.namespace(),
                layout.config_map()
            ),
        )
        .await;
    if change != Change::Unchanged && !limits.sync_wait.is_zero() {
        audit
            .step(
                "config_map",
                "sync_wait",
                format!(
                    "waiting {} for the kubelet to update the operator's mounted copy",
                    model::time::format_duration(limits.sync_wait)
                ),
            )
            .await;
        tokio::time::sleep(limits.sync_wait).await;
    }
    Ok(())
}

/// Waits for GPU pods to leave the node (or goes ahead when told to override them); the
/// reason for refusing when they are still there at the deadline.
async fn drain(
    c: &Cluster,
    plan: &Plan,
    limits: &Limits,
    audit: &mut impl Audit,
) -> Result<Option<String>, KubeError> {
    let drain_deadline = tokio::time::Instant::now() + limits.drain_timeout;
    loop {
        let pods = c.gpu_pods(&plan.node).await?;
        if pods.is_empty() {
            audit.step("drain", "ok", "no GPU pods remain".into()).await;
            return Ok(None);
        }
        if limits.override_pods {
            audit
                .step(
                    "drain",
                    "overridden",
                    format!("going ahead with GPU pods on the node: {}", pods.join(", ")),
                )
                .await;
            return Ok(None);
        }
        if tokio::time::Instant::now() >= drain_deadline {
            let reason = format!(
                "GPU pods still on the node after {}: {}",
                model::time::format_duration(limits.drain_timeout),
                pods.join(", ")
            );
            audit.step("drain", "refused", reason.clone()).await;
            return Ok(Some(reason));
        }
        tokio::time::sleep(limits.poll).await;
    }
}

/// Rolls the label back to its previous value (or none) after the MIG manager failed, and
/// uncordons once the previous config is back; a failed rollback leaves the node cordoned.
async fn rollback(
    c: &Cluster,
    plan: &Plan,
    previous: Option<&str>,
    reason: String,
    was_cordoned: bool,
    limits: &Limits,
    audit: &mut impl Audit,
) -> Result<Outcome, KubeError> {
    let rv = c
        .set_operator_label(&plan.node, &plan.label, previous)
        .await?;
    audit
        .step(
            "rollback",
            "label restored",
            format!("{}={}", plan.label, previous.unwrap_or("(removed)")),
        )
        .await;
    let back = if previous.is_some() {
        watch_mig(c, &plan.node, &rv, limits.config_timeout, audit).await?
    } else {
        // No previous config: nothing for the MIG manager to restore.
        Some(MigManagerState::Success)
    };
    if back == Some(MigManagerState::Success) {
        audit.step("rollback", "success", String::new()).await;
        uncordon(c, &plan.node, was_cordoned, audit).await?;
        Ok(Outcome::RolledBack { reason })
    } else {
        let reason = format!(
            "{reason}; the rollback did not reach success either, so the node stays cordoned"
        );
        audit.step("rollback", "failed", reason.clone()).await;
        Ok(Outcome::Failed { reason })
    }
}
