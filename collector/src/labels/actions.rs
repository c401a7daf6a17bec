//! Label actions: the GPU Operator changes an analysis proposes, recorded as `planned`,
//! approved by a person (API or CLI), then run by the workflow with every step stored — the
//! audit trail behind `/api/v1/label-actions`. A per-node rate limit stops a node from being
//! reconfigured more than once per `min_interval`.

use std::collections::BTreeMap;

use super::kube::Cluster;
use super::metrics::LabelMetrics;
use super::settings::{Mode, Settings};
use super::workflow::{self, Audit, Limits, Outcome, Plan};
use collector_shared::newest::{Newest, NewestError};
use store::Store;
use store::label_actions::{
    ActionFilter, ActionState, LabelStep, NewLabelAction, OPEN, Transition,
};

/// End states in which the node's labels were changed (they count for the rate limit).
const CHANGED: [ActionState; 3] = [
    ActionState::Applied,
    ActionState::RolledBack,
    ActionState::Failed,
];

/// Stores each step of a run (and optionally prints it).
pub struct StoreAudit<'a> {
    pub store: &'a Store,
    pub id: i64,
    pub actor: String,
    pub echo: bool,
}

impl Audit for StoreAudit<'_> {
    async fn step(&mut self, step: &str, result: &str, detail: String) {
        let s = LabelStep {
            ts_ms: model::time::now_ms(),
            actor: self.actor.clone(),
            step: step.into(),
            result: result.into(),
            detail,
        };
        if self.echo {
            println!(
                "  {} [{}] {}: {} {}",
                model::time::rfc3339(s.ts_ms),
                s.actor,
                s.step,
                s.result,
                s.detail
            );
        }
        if let Err(e) = self.store.add_label_step(self.id, &s).await {
            tracing::error!(error = %e, action = self.id, step, "cannot record a label step");
        }
    }

    async fn previous(&mut self, value: Option<&str>) {
        if let Err(e) = self.store.set_label_previous(self.id, value).await {
            tracing::error!(error = %e, action = self.id, "cannot record the label's previous value");
        }
    }
}

/// Records each plan as a `planned` action unless the node already has an open one for the same
/// label. Returns the new ids.
pub async fn record_plans(
    store: &Store,
    plans: &BTreeMap<String, Plan>,
    by: &str,
    now: i64,
) -> anyhow::Result<Vec<i64>> {
    let existing = store
        .label_actions(&ActionFilter {
            states: &OPEN,
            ..ActionFilter::newest(10_000)
        })
        .await?;
    let mut ids = Vec::new();
    for plan in plans.values() {
        let open = existing
            .iter()
            .any(|a| a.node == plan.node && a.label == plan.label && a.state.open());
        if open {
            continue;
        }
        ids.push(
            store
                .insert_label_action(&NewLabelAction {
                    node: plan.node.clone(),
                    label: plan.label.clone(),
                    value: plan.value.clone(),
                    requested_by: by.into(),
                    requested_ms: now,
                    plan: serde_json::to_string(plan)?,
                })
                .await?,
        );
    }
    Ok(ids)
}

/// Why an approval was refused.
#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error(
        "label actuation is {0}: GPU Operator labels are only written in mode apply-with-approval"
    )]
    Mode(&'static str),
    #[error("no label action {0}")]
    Unknown(i64),
    #[error("label action {0} is {1}, not planned")]
    NotPlanned(i64, ActionState),
    #[error(
        "label action {0} carries out step {1}, which requires {2} first: no label action does \
         that (a reclaim or a move is a person's change); carry it out, let the next analysis \
         see it, then approve again"
    )]
    Requires(i64, String, String),
    /// The steps a step requires come from the newest analysis; when it cannot be read, no
    /// dependent step is approved.
    #[error(
        "label action {0} carries out a step that requires others, and the newest analysis, \
         which says whether they are done, cannot be read ({1}); the collector's log says more"
    )]
    Analysis(i64, String),
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

/// Approves a planned action, together with the planned actions of the steps its step
/// requires (those that empty the GPUs it moves tenants onto), so a chain is approved whole
/// and `run_approved` runs it in order. Refused when a required step that is still in the
/// newest analysis has no label action (a reclaim, a consolidation): a person does that first.
pub async fn approve(
    store: &Store,
    settings: &Settings,
    newest: &Newest,
    id: i64,
    by: &str,
    override_pods: bool,
    now: i64,
) -> Result<(), ApproveError> {
    if settings.mode != Mode::ApplyWithApproval {
        return Err(ApproveError::Mode(settings.mode.as_str()));
    }
    let found = store
        .label_actions(&ActionFilter {
            id: Some(id),
            ..ActionFilter::newest(1)
        })
        .await?;
    let Some(action) = found.first() else {
        return Err(ApproveError::Unknown(id));
    };
    if action.state != ActionState::Planned {
        return Err(ApproveError::NotPlanned(id, action.state));
    }
    let chain = required_actions(store, newest, id, &action.plan).await?;
    for &x in chain.iter().chain(std::iter::once(&id)) {
        let moved = store
            .transition_label_action(&Transition {
                id: x,
                from: &[ActionState::Planned],
                to: ActionState::Approved,
                by: Some(by),
                override_pods: Some(override_pods),
                now_ms: now,
                outcome: None,
            })
            .await?;
        if x == id && !moved {
            let now_state = store
                .label_actions(&ActionFilter {
                    id: Some(id),
                    ..ActionFilter::newest(1)
                })
                .await?
                .first()
                .map(|a| a.state);
            return Err(match now_state {
                Some(s) => ApproveError::NotPlanned(id, s),
                None => ApproveError::Unknown(id),
            });
        }
    }
    Ok(())
}

/// The step an action carries out, from its stored plan.
fn step_of(plan: &str) -> Option<analytics::Recommendation> {
    serde_json::from_str::<Plan>(plan)
        .ok()?
        .recommendation
        .map(|r| *r)
}

/// The planned actions to approve with action `id`: those of every step its step requires,
/// transitively, that the newest analysis still proposes. Err when such a step has no open
/// label action.
///
/// The newest analysis is read where every other reader reads it ([`Newest`], which decodes
/// the stored form); a second decoder here read the stored envelope as no analysis
/// at all and approved dependent steps alone.
async fn required_actions(
    store: &Store,
    newest: &Newest,
    id: i64,
    plan: &str,
) -> Result<Vec<i64>, ApproveError> {
    let Some(step) = step_of(plan) else {
        return Ok(Vec::new());
    };
    if step.requires.is_empty() {
        return Ok(Vec::new());
    }
    let newest = match newest.get(store).await {
        Ok(Some(a)) => a,
        // No analysis stored: the step was planned by hand (`gpulens labels apply`) or its
        // analysis is gone with retention; nothing says what it requires any more.
        Ok(None) => return Ok(Vec::new()),
        Err(NewestError::Store(e)) => return Err(e.into()),
        Err(e @ NewestError::Corrupt(_)) => {
            tracing::error!(error = %e, action = id, "the newest analysis cannot be read to check what a step requires");
            return Err(ApproveError::Analysis(id, e.to_string()));
        }
    };
    let open = store
        .label_actions(&ActionFilter {
            states: &OPEN,
            ..ActionFilter::newest(10_000)
        })
        .await?;
    // The open action of each step, its plan read once.
    let action_of: std::collections::HashMap<String, &store::label_actions::LabelActionRecord> =
        open.iter()
            .filter_map(|a| Some((step_of(&a.plan)?.id, a)))
            .collect();
    let mut chain: Vec<i64> = Vec::new();
    let mut seen: std::collections::BTreeSet<String> = [step.id.clone()].into();
    let mut todo: Vec<String> = step.requires.clone();
    while let Some(rec) = todo.pop() {
        if !seen.insert(rec.clone()) {
            continue;
        }
        // A step the newest analysis no longer proposes has been carried out (or overtaken).
        let Some(r) = newest.recommendations.iter().find(|r| r.id == rec) else {
            continue;
        };
        match action_of.get(&rec) {
            Some(a) => {
                if a.state == ActionState::Planned {
                    chain.push(a.id);
                }
                todo.extend(r.requires.iter().cloned());
            }
            None => {
                return Err(ApproveError::Requires(
                    id,
                    step.id.clone(),
                    format!("{} ({})", r.id, r.summary),
                ));
            }
        }
    }
    // Deepest requirement first: the order run_approved keeps.
    chain.reverse();
    Ok(chain)
}

/// Orders approved actions so that an action runs after the actions of the steps its step
/// requires (a cycle keeps the stored order).
fn in_required_order(actions: &mut Vec<store::label_actions::LabelActionRecord>) {
    let steps: Vec<Option<analytics::Recommendation>> =
        actions.iter().map(|a| step_of(&a.plan)).collect();
    let index: std::collections::HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((s.as_ref()?.id.as_str(), i)))
        .collect();
    // The approved actions each one waits for.
    let waits: Vec<Vec<usize>> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.iter()
                .flat_map(|s| &s.requires)
                .filter_map(|r| index.get(r.as_str()).copied())
                .filter(|&j| j != i)
                .collect()
        })
        .collect();
    let n = actions.len();
    let mut placed = vec![false; n];
    let mut order: Vec<usize> = Vec::with_capacity(n);
    while order.len() < n {
        let mut ready: Vec<usize> = (0..n)
            .filter(|&i| !placed[i] && waits[i].iter().all(|&j| placed[j]))
            .collect();
        if ready.is_empty() {
            // A cycle: the rest in stored order.
            ready = (0..n).filter(|&i| !placed[i]).collect();
        }
        for i in ready {
            placed[i] = true;
            order.push(i);
        }
    }
    let mut taken: Vec<Option<store::label_actions::LabelActionRecord>> =
        std::mem::take(actions).into_iter().map(Some).collect();
    *actions = order.into_iter().filter_map(|i| taken[i].take()).collect();
}

fn state_of(o: &Outcome) -> (ActionState, Option<String>) {
    match o {
        Outcome::Applied => (ActionState::Applied, None),
        Outcome::Unchanged => (ActionState::Unchanged, None),
        Outcome::Refused { reason } => (ActionState::Refused, Some(reason.clone())),
        Outcome::RolledBack { reason } => (ActionState::RolledBack, Some(reason.clone())),
        Outcome::Failed { reason } => (ActionState::Failed, Some(reason.clone())),
    }
}

/// Runs every approved action once: claims it (so two collectors never run the same one),
/// applies the per-node rate limit, runs the workflow and records the outcome. Returns the
/// actions run.
pub async fn run_approved(
    store: &Store,
    cluster: &Cluster,
    settings: &Settings,
    echo: bool,
) -> anyhow::Result<Vec<(i64, Outcome)>> {
    let mut approved = store
        .label_actions(&ActionFilter {
            states: &[ActionState::Approved],
            ..ActionFilter::newest(1000)
        })
        .await?;
    // Oldest first, and never a step before the steps it requires.
    approved.reverse();
    in_required_order(&mut approved);
    let mut done = Vec::new();
    for a in &approved {
        let now = model::time::now_ms();
        if !store
            .transition_label_action(&Transition {
                id: a.id,
                from: &[ActionState::Approved],
                to: ActionState::Running,
                by: None,
                override_pods: None,
                now_ms: now,
                outcome: None,
            })
            .await?
        {
            continue;
        }
        let actor = a.approved_by.clone().unwrap_or_else(|| "unknown".into());
        let mut audit = StoreAudit {
            store,
            id: a.id,
            actor,
            echo,
        };
        let window = settings.min_interval.as_millis() as i64;
        // Read now, so a change this pass just made on the node counts too.
        let changed = store
            .label_actions(&ActionFilter {
                node: Some(&a.node),
                states: &CHANGED,
                ..ActionFilter::newest(100)
            })
            .await?;
        let recent = changed
            .iter()
            .find(|b| b.finished_ms.is_some_and(|t| now - t < window));
        let outcome = if let Some(b) = recent {
            let last = b.finished_ms.unwrap_or(now);
            let reason = format!(
                "rate limit: {} was last changed at {} (action {}); the next change is allowed after {}",
                a.node,
                model::time::rfc3339(last),
                b.id,
                model::time::rfc3339(last + window)
            );
            audit.step("rate_limit", "refused", reason.clone()).await;
            Outcome::Refused { reason }
        } else {
            let plan: Plan = serde_json::from_str(&a.plan)?;
            let limits = Limits {
                drain_timeout: settings.drain_timeout,
                config_timeout: settings.config_timeout,
                poll: std::time::Duration::from_secs(5).min(settings.drain_timeout / 4),
                override_pods: a.override_pods,
                sync_wait: settings
                    .custom_layouts
                    .as_ref()
                    .map_or(std::time::Duration::ZERO, |l| l.sync_wait),
            };
            match workflow::run(cluster, &plan, &limits, &mut audit).await {
                Ok(o) => o,
                Err(e) => {
                    let reason = format!("the workflow stopped: {e}");
                    audit.step("error", "failed", reason.clone()).await;
                    Outcome::Failed { reason }
                }
            }
        };
        let (state, reason) = state_of(&outcome);
        collector_shared::access::audit::label_applied(
            a.id,
            &a.node,
            &a.label,
            &a.value,
            a.approved_by.as_deref().unwrap_or("unknown"),
            state.as_str(),
        );
        store
            .transition_label_action(&Transition {
                id: a.id,
                from: &[ActionState::Running],
                to: state,
                by: None,
                override_pods: None,
                now_ms: model::time::now_ms(),
                outcome: reason.as_deref(),
            })
            .await?;
        if matches!(outcome, Outcome::RolledBack { .. } | Outcome::Failed { .. }) {
            tracing::error!(action = a.id, node = %a.node, ?outcome, "GPU Operator change did not succeed");
        }
        done.push((a.id, outcome));
    }
    Ok(done)
}

/// After a scheduled analysis: converge advisory labels and, in apply-with-approval, record
/// the proposed changes as planned actions.
pub async fn after_analysis(
    store: &Store,
    cluster: &Cluster,
    settings: &Settings,
    analysis: &analytics::Analysis,
    now: i64,
    metrics: &LabelMetrics,
) -> anyhow::Result<()> {
    if settings.mode == Mode::Off {
        return Ok(());
    }
    let (name, nodes) = super::advisory::for_cluster(
        super::advisory::labels(analysis, now),
        settings.cluster.as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("no labels written: {e}"))?;
    for (node, labels) in nodes {
        let written = cluster.converge_if_known(&node, &labels).await;
        metrics.advisory_write(written.is_ok());
        if let Err(e) = written {
            tracing::warn!(node, error = %e, "advisory labels not written");
        }
    }
    if settings.mode == Mode::ApplyWithApproval {
        // Rollbacks of changes that turned out worse first: a node being rolled back gets no
        // new change on top.
        let rollbacks = rollback_plans(store, analysis, &name).await?;
        let mut ids = record_plans(store, &rollbacks, "gpulens-outcome-check", now).await?;
        let mut plans = workflow::plans(analysis, &name, settings.custom_layouts.as_ref());
        plans.retain(|node, _| !rollbacks.contains_key(node));
        ids.extend(record_plans(store, &plans, "gpulens-analysis", now).await?);
        metrics.planned.inc_by(ids.len() as u64);
        if !ids.is_empty() {
            tracing::info!(
                ?ids,
                "GPU Operator changes planned; approve them at /api/v1/label-actions"
            );
        }
    }
    Ok(())
}

/// The rollback of each applied change the outcome check found worse than predicted, as a
/// plan back to the label's previous value, unless one was offered before. A change that set
/// a label that was unset before has no value to go back to: it is logged, not planned.
pub async fn rollback_plans(
    store: &Store,
    analysis: &analytics::Analysis,
    cluster: &str,
) -> anyhow::Result<BTreeMap<String, Plan>> {
    let worse: Vec<i64> = analysis
        .outcomes
        .iter()
        .filter(|o| o.cluster == cluster && o.verdict == analytics::Verdict::Worse)
        .map(|o| o.action)
        .collect();
    let mut out = BTreeMap::new();
    if worse.is_empty() {
        return Ok(out);
    }
    let recent = store.label_actions(&ActionFilter::newest(10_000)).await?;
    let offered: std::collections::BTreeSet<i64> = recent
        .iter()
        .filter_map(|a| serde_json::from_str::<Plan>(&a.plan).ok()?.rollback_of)
        .collect();
    for id in worse.into_iter().filter(|id| !offered.contains(id)) {
        let Some(a) = recent.iter().find(|a| a.id == id) else {
            continue;
        };
        let Some(previous) = a.previous_value.clone() else {
            tracing::warn!(action = id, node = %a.node, label = %a.label, "the change turned out worse than predicted, but the label was unset before it: remove it by hand to roll back");
            continue;
        };
        out.insert(
            a.node.clone(),
            Plan {
                node: a.node.clone(),
                label: a.label.clone(),
                value: previous,
                layout: None,
                recommendation: None,
                rollback_of: Some(id),
            },
        );
    }
    Ok(out)
}

/// Running approved label actions as a background task, every `settings.every`.
pub fn task(
    store: Store,
    cluster: Cluster,
    settings: Settings,
    metrics: LabelMetrics,
) -> std::sync::Arc<dyn collector_shared::tasks::Task> {
    let every = settings.every;
    let shared = std::sync::Arc::new((store, cluster, settings, metrics));
    collector_shared::tasks::Periodic::task("label_actions", every, move || {
        let shared = shared.clone();
        Box::pin(async move {
            let (store, cluster, settings, metrics) = &*shared;
            for (_, outcome) in run_approved(store, cluster, settings, false).await? {
                metrics.run(state_of(&outcome).0.as_str());
            }
            Ok(())
        })
    })
}
