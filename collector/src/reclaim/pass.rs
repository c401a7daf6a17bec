//! One pass of the reclaim loop, under its database lock: take up the idle holdings a policy
//! governs (newest analysis' ongoing `idle_allocation` findings) as cases with a notice, then
//! move every open case on — cancel it when the GPU is used again or the pod is gone, end its
//! grace (report, dry run, await approval, or the policy's own approval), act on approved ones
//! within the hourly limit, and check what an action freed. Every move is audited.

use analytics::Measure;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use analytics::{Analysis, Finding, FindingKind};
use model::time::rfc3339;
use store::audit::{Step, Trail};
use store::reclaim_cases::{CaseFilter, CaseRecord, CaseState, Move, NewCase};
use store::{Agg, Entity, LOCK_RECLAIM, Metric, Retention, SeriesQuery, Store, TenantRecord};

use super::metrics::ReclaimMetrics;
use super::notice;
use super::settings::{Action, Policy, Settings};
use super::target::{Cluster, Found, Target};

/// Most open cases one pass moves on (the oldest first); the rest wait for the next.
pub const MAX_OPEN: i64 = 500;
/// How long after an action the outcome check waits for the agents to stop seeing the pod.
const SETTLE_MS: i64 = 10 * 60_000;
/// An acted case whose pod is still seen this long after is `not_freed`.
const GIVE_UP_MS: i64 = 3_600_000;
/// The pod may be seen this long after the action (its termination grace, the agents' interval).
const STOP_SLACK_MS: i64 = 2 * 60_000;

/// An alert receiver as the loop sees it: its name and matchers.
pub type Receiver = (String, BTreeMap<String, String>);

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PassReport {
    pub opened: usize,
    pub cancelled: usize,
    pub acted: usize,
    pub refused: usize,
    pub finished: usize,
}

/// The reclaim loop.
#[derive(Clone)]
pub struct Reclaim {
    pub store: Store,
    pub cluster: Cluster,
    pub settings: Arc<Settings>,
    pub newest: Arc<collector_shared::newest::Newest>,
    pub retention: Retention,
    pub receivers: Vec<Receiver>,
    pub metrics: ReclaimMetrics,
}

impl std::fmt::Debug for Reclaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reclaim")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Where a case goes next, and why.
struct Next<'a> {
    to: CaseState,
    step: &'a str,
    result: &'a str,
    detail: String,
}

impl Reclaim {
    /// One pass at `now_ms`; `None` when another collector holds the lock.
    pub async fn pass_at(&self, now_ms: i64) -> anyhow::Result<Option<PassReport>> {
        let Some(lock) = self.store.try_job_lock(LOCK_RECLAIM).await? else {
            return Ok(None);
        };
        let result = self.locked_pass(now_ms).await;
        lock.release().await?;
        result.map(Some)
    }

    async fn locked_pass(&self, now: i64) -> anyhow::Result<PassReport> {
        let mut report = PassReport::default();
        if self.settings.policies.is_empty() {
            return Ok(report);
        }
        let tenants: HashMap<(String, String), TenantRecord> = self
            .store
            .tenants()
            .await?
            .into_iter()
            .map(|t| ((t.cluster.clone(), t.tenant.key.clone()), t))
            .collect();
        if let Some(cluster) = self.cluster().await? {
            self.open_cases(&cluster, &tenants, now, &mut report)
                .await?;
        }
        let mut open = self
            .store
            .reclaim_cases(&CaseFilter {
                states: &CaseState::OPEN,
                ..CaseFilter::newest(MAX_OPEN)
            })
            .await?;
        open.reverse();
        for c in open {
            let key = (c.case.cluster.clone(), c.case.tenant.clone());
            self.advance(&c, tenants.get(&key), now, &mut report)
                .await?;
        }
        self.measure().await?;
        Ok(report)
    }

    /// The gpulens cluster this collector acts on: the configured one, else the only one
    /// (with several and none configured, nothing is taken up and the log says why).
    async fn cluster(&self) -> anyhow::Result<Option<String>> {
        let configured = self.settings.cluster.as_deref();
        match collector_shared::shared::the_cluster(&self.store, configured, "[reclaim] cluster")
            .await
        {
            Ok(c) => Ok(c),
            Err(e) => {
                tracing::warn!(error = %e, "no reclaim case is opened");
                Ok(None)
            }
        }
    }

    /// Records a step of case `id`.
    async fn step(&self, id: i64, actor: &str, step: &str, result: &str, detail: String) {
        let s = Step {
            ts_ms: model::time::now_ms(),
            actor: actor.into(),
            step: step.into(),
            result: result.into(),
            detail,
        };
        if let Err(e) = self.store.add_audit_step(Trail::ReclaimCases, id, &s).await {
            tracing::error!(error = %e, case = id, step, "cannot record a reclaim step");
        }
    }

    /// Takes up the ongoing idle holdings of `cluster` a policy governs and that have no case
    /// open (nor one that ended within the policy's `min_idle`).
    async fn open_cases(
        &self,
        cluster: &str,
        tenants: &HashMap<(String, String), TenantRecord>,
        now: i64,
        report: &mut PassReport,
    ) -> anyhow::Result<()> {
        let Some(analysis) = self.newest.get(&self.store).await? else {
            return Ok(());
        };
        let longest = self
            .settings
            .policies
            .iter()
            .map(|p| p.min_idle.as_millis() as i64)
            .max()
            .unwrap_or(0);
        let recent = self
            .store
            .reclaim_cases(&CaseFilter {
                opened_since_ms: Some(now - longest - 31 * 86_400_000),
                ..CaseFilter::newest(10_000)
            })
            .await?;
        for f in analysis.findings.iter() {
            let Some(c) = self.candidate(&analysis, f, cluster, tenants) else {
                continue;
            };
            let Some(policy) = self.settings.policy_for(&c.namespace, &c.team) else {
                continue;
            };
            if c.idle_share < policy.idle_share
                || f.metrics
                    .get(&Measure::LastIdleRunHours)
                    .copied()
                    .unwrap_or(0.0)
                    * 3_600_000.0
                    < policy.min_idle.as_millis() as f64
            {
                continue;
            }
            let cooldown = policy.min_idle.as_millis() as i64;
            let taken = recent.iter().any(|r| {
                r.case.cluster == c.cluster
                    && r.case.tenant == c.tenant
                    && (r.case.state.is_open() || r.finished_ms.is_some_and(|t| now - t < cooldown))
            });
            if taken {
                continue;
            }
            self.open(c, f, policy, now, report).await?;
        }
        Ok(())
    }

    /// The case an idle finding would open, before any policy is asked.
    fn candidate(
        &self,
        a: &Analysis,
        f: &Finding,
        cluster: &str,
        tenants: &HashMap<(String, String), TenantRecord>,
    ) -> Option<NewCase> {
        if f.kind != FindingKind::IdleAllocation || f.cluster != cluster || !a.ongoing(f) {
            return None;
        }
        let key = f.tenants.first()?;
        let record = tenants.get(&(f.cluster.clone(), key.clone()))?;
        let t = &record.tenant;
        let (namespace, pod, uid) = (t.namespace.as_ref()?, t.pod.as_ref()?, t.pod_uid.as_ref()?);
        if let Err(why) = crate::demand::check_identity(namespace, pod, uid) {
            tracing::warn!(%why, tenant = key, "an idle pod's identity is outside its domain; no reclaim case");
            return None;
        }
        let signal = f.evidence.first()?;
        Some(NewCase {
            cluster: f.cluster.clone(),
            node: f.node.clone(),
            gpu: f.gpu.clone().unwrap_or_default(),
            tenant: key.clone(),
            tenant_name: a
                .tenant_names
                .get(key)
                .cloned()
                .unwrap_or_else(|| t.display_name()),
            namespace: namespace.clone(),
            pod: pod.clone(),
            pod_uid: uid.clone(),
            team: f
                .team
                .clone()
                .or_else(|| record.team.clone())
                .unwrap_or_else(|| namespace.clone()),
            policy: String::new(),
            action: String::new(),
            dry_run: self.settings.dry_run,
            finding: f.id.clone(),
            idle_hours: f
                .metrics
                .get(&Measure::LastIdleRunHours)
                .copied()
                .unwrap_or(0.0),
            idle_share: f
                .metrics
                .get(&Measure::IdleShareOfAllocation)
                .copied()
                .unwrap_or(0.0),
            signal_metric: signal.metric.clone(),
            signal_entity: signal.entity.clone(),
            state: CaseState::Noticed,
            opened_ms: 0,
            act_after_ms: 0,
        })
    }

    /// Opens one case: reads the pod and its controller, refuses what the policy excludes,
    /// records the notice and whom it reaches.
    async fn open(
        &self,
        mut c: NewCase,
        f: &Finding,
        policy: &Policy,
        now: i64,
        report: &mut PassReport,
    ) -> anyhow::Result<()> {
        let found = self.cluster.find(&c.namespace, &c.pod, &c.pod_uid).await?;
        let Found::Pod { marks, target } = found else {
            return Ok(());
        };
        c.policy = policy.name.clone();
        c.action = policy.action.as_str().into();
        c.opened_ms = now;
        c.act_after_ms = now + policy.grace.as_millis() as i64;
        let refusal = refusal(policy, &marks, &target);
        if refusal.is_some() {
            c.state = CaseState::Refused;
        }
        let id = self.store.insert_reclaim_case(&c).await?;
        self.step(
            id,
            "gpulens",
            "opened",
            "ok",
            format!("{} (finding {}; policy {})", f.summary, f.id, policy.name),
        )
        .await;
        let target_name = target.as_ref().ok().map(Target::describe);
        if let Some(why) = refusal {
            self.store
                .move_reclaim_case(&Move {
                    target: target_name.as_deref(),
                    outcome: Some(&why),
                    ..Move::new(id, &[CaseState::Refused], CaseState::Refused, now)
                })
                .await?;
            self.step(id, "gpulens", "refused", "refused", why).await;
            report.refused += 1;
            return Ok(());
        }
        if let Some(t) = &target_name {
            self.store
                .move_reclaim_case(&Move {
                    target: Some(t),
                    ..Move::new(id, &[CaseState::Noticed], CaseState::Noticed, now)
                })
                .await?;
        }
        let reached = self.receivers_for(id, &c);
        let detail = if reached.is_empty() {
            "no alert receiver matches this notice's labels: nobody is told, so the case will not act".to_owned()
        } else {
            format!(
                "GpulensReclaimNotice to {}; grace until {}",
                reached.join(", "),
                rfc3339(c.act_after_ms)
            )
        };
        let result = if reached.is_empty() {
            "unsent"
        } else {
            "queued"
        };
        self.step(id, "gpulens", "notice", result, detail).await;
        report.opened += 1;
        Ok(())
    }

    /// The receivers whose matchers the notice of case `id` satisfies.
    fn receivers_for(&self, id: i64, c: &NewCase) -> Vec<String> {
        let mut labels = notice::labels(id, c);
        labels.insert("alertname".into(), notice::ALERTNAME.into());
        labels.insert("severity".into(), "warning".into());
        self.receivers
            .iter()
            .filter(|(_, m)| m.iter().all(|(k, v)| labels.get(k) == Some(v)))
            .map(|(n, _)| n.clone())
            .collect()
    }

    async fn case(&self, id: i64) -> anyhow::Result<Option<CaseRecord>> {
        Ok(self
            .store
            .reclaim_cases(&CaseFilter {
                id: Some(id),
                ..CaseFilter::newest(1)
            })
            .await?
            .pop())
    }

    /// Moves one open case on.
    async fn advance(
        &self,
        c: &CaseRecord,
        tenant: Option<&TenantRecord>,
        now: i64,
        report: &mut PassReport,
    ) -> anyhow::Result<()> {
        let state = c.case.state;
        if state == CaseState::Acted {
            if let Some(next) = outcome(c, tenant, now) {
                report.finished += 1;
                self.finish(c, next, now).await?;
            }
            return Ok(());
        }
        if let Some(next) = self.cancellation(c, now).await? {
            report.cancelled += 1;
            return self.finish(c, next, now).await;
        }
        let Some(policy) = self
            .settings
            .policies
            .iter()
            .find(|p| p.name == c.case.policy)
        else {
            report.cancelled += 1;
            let detail = format!(
                "policy {} is no longer configured; nothing is done",
                c.case.policy
            );
            return self
                .finish(
                    c,
                    next(CaseState::Cancelled, "cancelled", "ok", detail),
                    now,
                )
                .await;
        };
        match state {
            CaseState::Noticed if now >= c.case.act_after_ms => {
                let next = self.grace_over(c, policy);
                if next.to == CaseState::Refused {
                    report.refused += 1;
                }
                let approved = next.to == CaseState::Approved;
                self.finish(c, next, now).await?;
                if approved {
                    let c = self.case(c.id).await?.expect("the case just moved");
                    self.act(&c, policy, now, report).await?;
                }
            }
            CaseState::Approved => self.act(c, policy, now, report).await?,
            _ => {}
        }
        Ok(())
    }

    /// Whether the case ends before acting: the GPU was used since the case opened, or the pod
    /// is gone.
    async fn cancellation(
        &self,
        c: &CaseRecord,
        now: i64,
    ) -> anyhow::Result<Option<Next<'static>>> {
        let threshold = self
            .settings
            .policies
            .iter()
            .find(|p| p.name == c.case.policy)
            .map_or(0.05, |p| p.use_threshold);
        if let Some((at, v)) = self.used_since(c, threshold, now).await? {
            let detail = format!(
                "the GPU was used again: {} reached {:.0} % at {} (above {:.0} %)",
                c.case.signal_metric,
                v * 100.0,
                rfc3339(at),
                threshold * 100.0
            );
            return Ok(Some(next(
                CaseState::Cancelled,
                "use returned",
                "cancelled",
                detail,
            )));
        }
        let found = self
            .cluster
            .find(&c.case.namespace, &c.case.pod, &c.case.pod_uid)
            .await?;
        if found == Found::Gone {
            let detail = format!(
                "pod {}/{} is gone: its owner released the GPU",
                c.case.namespace, c.case.pod
            );
            return Ok(Some(next(
                CaseState::Cancelled,
                "pod gone",
                "cancelled",
                detail,
            )));
        }
        Ok(None)
    }

    /// The first time since the case opened that the idle signal rose above `threshold`.
    async fn used_since(
        &self,
        c: &CaseRecord,
        threshold: f64,
        now: i64,
    ) -> anyhow::Result<Option<(i64, f64)>> {
        let (Some(metric), Some(entity)) = (
            Metric::parse(&c.case.signal_metric),
            Entity::parse(&c.case.signal_entity),
        ) else {
            return Ok(None);
        };
        if now <= c.case.opened_ms {
            return Ok(None);
        }
        let span = (now - c.case.opened_ms).max(60_000);
        let step_ms = ((span / 500).max(60_000) + 59_999) / 60_000 * 60_000;
        let q = SeriesQuery {
            metric,
            entity: entity.in_cluster(&c.case.cluster),
            from_ms: c.case.opened_ms,
            to_ms: now,
            step_ms,
            agg: Agg::Max,
        };
        let series = self.store.series(&q, now, &self.retention).await?;
        Ok(series
            .points
            .into_iter()
            .find_map(|(t, v)| v.filter(|v| *v > threshold).map(|v| (t, v))))
    }

    /// Where a case goes when its grace is over.
    fn grace_over(&self, c: &CaseRecord, policy: &Policy) -> Next<'static> {
        let target = c.target.as_deref().unwrap_or("its controller");
        if policy.action == Action::Report {
            let detail = format!(
                "grace over, still idle; policy {} only reports",
                policy.name
            );
            return next(CaseState::Reported, "grace over", "reported", detail);
        }
        if c.case.dry_run {
            let detail = format!(
                "grace over, still idle; dry run: would {} {target}",
                policy.action.as_str().replace('-', " ")
            );
            return next(CaseState::DryRun, "grace over", "dry run", detail);
        }
        let told = c
            .steps
            .iter()
            .any(|s| s.step == "notice" && s.result == "queued");
        if !told {
            return next(CaseState::Refused,
                "grace over",
                "refused",
                "no receiver carried the notice, so the owner was never told: gpulens does not act (add a receiver whose matchers fit the team)".into(),
            );
        }
        if policy.approval {
            let detail = format!(
                "grace over, still idle; waiting for an operator to approve (POST /api/v1/reclaim/{}/approve)",
                c.id
            );
            return next(CaseState::AwaitingApproval, "grace over", "ok", detail);
        }
        let detail = format!("grace over, still idle; policy {} approves", policy.name);
        next(CaseState::Approved, "grace over", "approved", detail)
    }

    /// Acts on an approved case: within the hourly limit, on a pod that is still the one
    /// noticed, with a controller the policy may change and no exemption.
    async fn act(
        &self,
        c: &CaseRecord,
        policy: &Policy,
        now: i64,
        report: &mut PassReport,
    ) -> anyhow::Result<()> {
        let acted = self
            .store
            .reclaim_cases(&CaseFilter {
                acted_since_ms: Some(now - 3_600_000),
                ..CaseFilter::newest(1_000)
            })
            .await?
            .len();
        if acted >= self.settings.max_actions_per_hour as usize {
            if c.steps.last().is_none_or(|s| s.step != "deferred") {
                let detail = format!(
                    "{} in the last hour, the most [reclaim] max_actions_per_hour allows; acts on a later pass",
                    model::figures::count(acted as f64, "action", "actions")
                );
                self.step(c.id, "gpulens", "deferred", "rate limited", detail)
                    .await;
            }
            return Ok(());
        }
        let found = self
            .cluster
            .find(&c.case.namespace, &c.case.pod, &c.case.pod_uid)
            .await?;
        let Found::Pod { marks, target } = found else {
            let detail = "the pod is gone".to_owned();
            return self
                .finish(
                    c,
                    next(CaseState::Cancelled, "act", "cancelled", detail),
                    now,
                )
                .await;
        };
        if let Some(why) = refusal(policy, &marks, &target) {
            report.refused += 1;
            return self
                .finish(c, next(CaseState::Refused, "act", "refused", why), now)
                .await;
        }
        let target = target.expect("refusal() passes only a target");
        match self.cluster.act(&target, c.id).await {
            Ok(undo) => {
                report.acted += 1;
                let what = target.describe();
                self.store
                    .move_reclaim_case(&Move {
                        target: Some(&what),
                        undo: Some(&undo),
                        ..Move::new(c.id, &[CaseState::Approved], CaseState::Acted, now)
                    })
                    .await?;
                let detail = format!(
                    "{} {what}; undo: {undo}",
                    policy.action.as_str().replace('-', " ")
                );
                self.step(c.id, "gpulens", "acted", "ok", detail).await;
                self.metrics.actions.inc();
            }
            Err(e) => {
                let detail = format!(
                    "the API server refused the change to {}: {e}",
                    target.describe()
                );
                self.finish(c, next(CaseState::Failed, "act", "failed", detail), now)
                    .await?;
            }
        }
        Ok(())
    }

    /// Moves a case to `n.to` (from the state it was read in) and records the step.
    async fn finish(&self, c: &CaseRecord, n: Next<'_>, now: i64) -> anyhow::Result<()> {
        let open = n.to.is_open();
        let by = (n.to == CaseState::Approved).then(|| format!("policy:{}", c.case.policy));
        let moved = self
            .store
            .move_reclaim_case(&Move {
                by: by.as_deref(),
                outcome: (!open).then_some(n.detail.as_str()),
                ..Move::new(c.id, &[c.case.state], n.to, now)
            })
            .await?;
        if moved {
            self.step(c.id, "gpulens", n.step, n.result, n.detail).await;
        }
        Ok(())
    }

    /// Counts the cases by state for `/metrics`.
    async fn measure(&self) -> anyhow::Result<()> {
        let open = self
            .store
            .reclaim_cases(&CaseFilter {
                states: &CaseState::OPEN,
                ..CaseFilter::newest(10_000)
            })
            .await?;
        self.metrics.open.clear();
        for c in &open {
            self.metrics
                .open
                .get_or_create(&super::metrics::StateLabels {
                    state: c.case.state.as_str().to_owned(),
                })
                .inc();
        }
        Ok(())
    }
}

fn next<'a>(to: CaseState, step: &'a str, result: &'a str, detail: String) -> Next<'a> {
    Next {
        to,
        step,
        result,
        detail,
    }
}

/// Why a policy may not act on this pod: an exemption on the pod or its controller, no
/// controller, or a controller the policy's action does not fit. `report` needs no controller.
fn refusal(
    policy: &Policy,
    marks: &[(String, String)],
    target: &Result<Target, String>,
) -> Option<String> {
    let controller = target
        .as_ref()
        .map(|t| t.marks.as_slice())
        .unwrap_or_default();
    let all = marks.iter().chain(controller);
    if let Some(e) = policy.exemption(all.map(|(k, v)| (k.as_str(), v.as_str()))) {
        return Some(format!("exempt: {e} on the pod or its controller"));
    }
    if policy.action == Action::Report {
        return None;
    }
    match target {
        Err(why) => Some(format!("nothing the policy may act on: {why}")),
        Ok(t) if t.kind.action() != policy.action => Some(format!(
            "{} needs {}, which policy {} does not name (it names {})",
            t.describe(),
            t.kind.action().as_str(),
            policy.name,
            policy.action.as_str()
        )),
        Ok(_) => None,
    }
}

/// The outcome check of an acted case: freed once the agents stopped seeing the pod, not
/// freed when they still see it an hour on; `None` while it is too early to say.
fn outcome(c: &CaseRecord, tenant: Option<&TenantRecord>, now: i64) -> Option<Next<'static>> {
    let acted = c.acted_ms?;
    if now - acted < SETTLE_MS {
        return None;
    }
    let last_seen = tenant.map(|t| t.last_seen_ms);
    let k = &c.case;
    match last_seen {
        Some(seen) if seen > acted + STOP_SLACK_MS => (now - acted >= GIVE_UP_MS).then(|| {
            let detail = format!(
                "{} still held a GPU of {} at {}, {} min after the action: look at {}",
                k.tenant_name,
                k.node,
                rfc3339(seen),
                (seen - acted) / 60_000,
                c.target.as_deref().unwrap_or("its controller")
            );
            next(CaseState::NotFreed, "outcome", "not freed", detail)
        }),
        _ => {
            let detail = format!(
                "freed a GPU of {} ({}): {} last seen {}; it had been idle {:.0} h",
                k.node,
                k.gpu,
                k.tenant_name,
                last_seen.map_or_else(|| "never".to_owned(), rfc3339),
                k.idle_hours
            );
            Some(next(CaseState::Freed, "outcome", "freed", detail))
        }
    }
}
