//! `/api/v1/reclaim`: the reclaim loop's policies and cases with every step, and an
//! operator's decision on a case — approve it (it acts within `[reclaim] every`) or cancel it
//! (docs/reclaim.md).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use model::time::rfc3339;
use serde::{Deserialize, Serialize};
use serde_json::json;
use store::reclaim_cases::{CaseFilter, CaseRecord, CaseState, Move};

use super::settings::Settings;
use collector_shared::access::routes::{Need::*, Routes, Teams::*};
use collector_shared::error::ApiError;
use collector_shared::http::StepView;
use collector_shared::openapi::Op;
use collector_shared::shared::Shared;

/// What the reclaim handlers need.
#[derive(Debug, Clone)]
pub struct ReclaimState {
    pub shared: Shared,
    pub settings: Arc<Settings>,
}

/// The reclaim routes (merged in `router.rs`).
pub fn routes() -> Routes<ReclaimState> {
    Routes::new()
        .get("/api/v1/reclaim", Read(Filtered), list_op(), list)
        .post(
            "/api/v1/reclaim/{id}/approve",
            Operate(Filtered),
            decide_op("Approve a case awaiting approval: the loop acts on it within [reclaim] every (unless the pod is used, gone or exempt by then)."),
            approve,
        )
        .post(
            "/api/v1/reclaim/{id}/cancel",
            Operate(Filtered),
            decide_op("Cancel an open case that has not acted: nothing is done to the pod."),
            cancel,
        )
}

fn list_op() -> Op {
    Op::new("The reclaim loop (docs/reclaim.md): whether it runs dry, its policies, and its cases — idle holdings a policy took up — newest first, each with its state (noticed, awaiting_approval, approved, acted, freed, not_freed, cancelled, reported, dry_run, refused, failed), the controller acted on and how to undo it, and every step. Team-scoped callers see their teams' cases.")
        .param(json!({"name": "state", "in": "query", "schema": {"type": "string", "enum": CaseState::ALL.map(CaseState::as_str)}, "description": "Only cases in this state."}))
        .param(json!({"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}, "description": "Newest first, default 100."}))
        .json(200, "dry_run, policies[], cases[]", json!({"type": "object", "required": ["dry_run", "policies", "cases"], "properties": {
            "dry_run": {"type": "boolean"},
            "policies": {"type": "array", "items": {"type": "object"}},
            "cases": {"type": "array", "items": {"type": "object", "required": ["id", "state", "tenant", "team", "policy", "steps"]}}}}))
        .refusals(&[400, 503])
}

fn decide_op(what: &str) -> Op {
    Op::new(&format!("{what} Operator token; an operator scoped to teams decides its teams' cases only (another team's case answers 404)."))
        .param(json!({"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}))
        .response(200, json!({"description": "id, state, by"}))
        .refusals(&[400, 401, 403, 404, 409])
        .throttled("tokens")
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub state: Option<String>,
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize)]
pub struct PolicyView {
    pub name: String,
    pub namespaces: Vec<String>,
    pub teams: Vec<String>,
    pub idle_share: f64,
    pub min_idle_s: u64,
    pub grace_s: u64,
    pub action: &'static str,
    pub approval: bool,
    pub use_threshold: f64,
    pub exempt: Vec<String>,
}

/// A case, its decision, outcome and steps.
#[derive(Debug, Serialize)]
pub struct CaseView {
    pub id: i64,
    pub state: CaseState,
    pub cluster: String,
    pub node: String,
    pub gpu_uuid: String,
    pub tenant: String,
    pub tenant_name: String,
    pub namespace: String,
    pub pod: String,
    pub team: String,
    pub policy: String,
    pub action: String,
    pub dry_run: bool,
    pub finding: String,
    pub idle_hours: f64,
    pub idle_share: f64,
    pub opened_at: String,
    pub act_after: String,
    pub decided_by: Option<String>,
    pub decided_at: Option<String>,
    pub target: Option<String>,
    pub acted_at: Option<String>,
    pub finished_at: Option<String>,
    pub outcome: Option<String>,
    pub undo: Option<String>,
    pub steps: Vec<StepView>,
}

impl From<CaseRecord> for CaseView {
    fn from(c: CaseRecord) -> Self {
        let k = c.case;
        CaseView {
            id: c.id,
            state: k.state,
            cluster: k.cluster,
            node: k.node,
            gpu_uuid: k.gpu,
            tenant: k.tenant,
            tenant_name: k.tenant_name,
            namespace: k.namespace,
            pod: k.pod,
            team: k.team,
            policy: k.policy,
            action: k.action,
            dry_run: k.dry_run,
            finding: k.finding,
            idle_hours: k.idle_hours,
            idle_share: k.idle_share,
            opened_at: rfc3339(k.opened_ms),
            act_after: rfc3339(k.act_after_ms),
            decided_by: c.decided_by,
            decided_at: c.decided_ms.map(rfc3339),
            target: c.target,
            acted_at: c.acted_ms.map(rfc3339),
            finished_at: c.finished_ms.map(rfc3339),
            outcome: c.outcome,
            undo: c.undo,
            steps: c.steps.into_iter().map(Into::into).collect(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct CaseList {
    pub dry_run: bool,
    pub policies: Vec<PolicyView>,
    pub cases: Vec<CaseView>,
}

pub async fn list(
    State(state): State<ReclaimState>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
    caller: collector_shared::access::Caller,
) -> Result<Json<CaseList>, ApiError> {
    let Query(q) = q.map_err(collector_shared::http::bad_query)?;
    let limit = collector_shared::http::list_limit(q.limit)?;
    let states: Vec<CaseState> = match q.state.as_deref() {
        None => Vec::new(),
        Some(s) => vec![CaseState::parse(s).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "state: {s:?} is no reclaim case state (one of {})",
                CaseState::ALL.map(CaseState::as_str).join(", ")
            ))
        })?],
    };
    let cases = state
        .shared
        .store
        .reclaim_cases(&CaseFilter {
            states: &states,
            ..CaseFilter::newest(limit)
        })
        .await?;
    let s = &state.settings;
    Ok(Json(CaseList {
        dry_run: s.dry_run,
        policies: s
            .policies
            .iter()
            .map(|p| PolicyView {
                name: p.name.clone(),
                namespaces: p.namespaces.clone(),
                teams: p.teams.clone(),
                idle_share: p.idle_share,
                min_idle_s: p.min_idle.as_secs(),
                grace_s: p.grace.as_secs(),
                action: p.action.as_str(),
                approval: p.approval,
                use_threshold: p.use_threshold,
                exempt: p.exempt.clone(),
            })
            .collect(),
        cases: cases
            .into_iter()
            .filter(|c| caller.sees_team(Some(&c.case.team)))
            .map(CaseView::from)
            .collect(),
    }))
}

#[derive(Debug, Serialize)]
pub struct Decided {
    pub id: i64,
    pub state: CaseState,
    pub by: String,
}

/// A person's decision on a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A case awaiting approval goes ahead.
    Approve,
    /// An open case that has not acted ends; nothing is done to the pod.
    Cancel,
}

impl Decision {
    fn from(self) -> &'static [CaseState] {
        match self {
            Decision::Approve => &[CaseState::AwaitingApproval],
            Decision::Cancel => &CaseState::NOTIFIED,
        }
    }

    pub fn to(self) -> CaseState {
        match self {
            Decision::Approve => CaseState::Approved,
            Decision::Cancel => CaseState::Cancelled,
        }
    }
}

/// Why a decision was not taken.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error("no reclaim case {0}")]
    Unknown(i64),
    #[error("reclaim case {id} is {state}; only a case that is {from} can be {to}")]
    State {
        id: i64,
        state: CaseState,
        from: String,
        to: CaseState,
    },
    #[error(transparent)]
    Store(#[from] store::StoreError),
}

/// Records `caller`'s decision on case `id` (through `via`: the API, the dashboard), with its
/// step; refused when the case is in no state the decision applies to. A case of a team the
/// caller does not see is unknown to it, as an id that does not exist (the routes' rule is
/// `Operate(Filtered)`: this is where it is kept, for the API and the dashboard alike).
pub async fn decide(
    store: &store::Store,
    id: i64,
    caller: &collector_shared::access::Caller,
    decision: Decision,
    via: &str,
) -> Result<(), DecideError> {
    let who = caller.name().unwrap_or("-");
    let now = model::time::now_ms();
    let found = store
        .reclaim_cases(&CaseFilter {
            id: Some(id),
            ..CaseFilter::newest(1)
        })
        .await?;
    let Some(case) = found.first() else {
        return Err(DecideError::Unknown(id));
    };
    if !caller.sees_team(Some(&case.case.team)) {
        collector_shared::access::audit::refused(
            &format!("reclaim case {id} is another team's"),
            caller.name(),
            caller,
        );
        return Err(DecideError::Unknown(id));
    }
    let (from, to) = (decision.from(), decision.to());
    let outcome = format!("cancelled by {who}");
    let moved = store
        .move_reclaim_case(&Move {
            by: Some(who),
            outcome: (decision == Decision::Cancel).then_some(outcome.as_str()),
            ..Move::new(id, from, to, now)
        })
        .await?;
    if !moved {
        return Err(DecideError::State {
            id,
            state: case.case.state,
            from: from
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" or "),
            to,
        });
    }
    let step = store::audit::Step {
        ts_ms: now,
        actor: who.to_owned(),
        step: to.as_str().into(),
        result: "ok".into(),
        detail: format!("by {who} through {via}"),
    };
    store
        .add_audit_step(store::audit::Trail::ReclaimCases, id, &step)
        .await?;
    Ok(())
}

/// The API's answer to a decision.
async fn decide_api(
    state: &ReclaimState,
    id: Result<Path<i64>, axum::extract::rejection::PathRejection>,
    caller: &collector_shared::access::Caller,
    decision: Decision,
) -> Result<Json<Decided>, ApiError> {
    let who = caller
        .name()
        .ok_or_else(|| ApiError::Unauthorized("sign in as an operator".into()))?
        .to_owned();
    let Path(id) = id.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    match decide(&state.shared.store, id, caller, decision, "the API").await {
        Ok(()) => {
            collector_shared::access::audit::reclaim_decided(id, decision.to(), caller);
            Ok(Json(Decided {
                id,
                state: decision.to(),
                by: who,
            }))
        }
        Err(e @ DecideError::Unknown(_)) => Err(ApiError::NotFound(e.to_string())),
        Err(e @ DecideError::State { .. }) => Err(ApiError::Conflict(e.to_string())),
        Err(DecideError::Store(e)) => Err(e.into()),
    }
}

pub async fn approve(
    State(state): State<ReclaimState>,
    id: Result<Path<i64>, axum::extract::rejection::PathRejection>,
    caller: collector_shared::access::Caller,
) -> Result<Json<Decided>, ApiError> {
    decide_api(&state, id, &caller, Decision::Approve).await
}

pub async fn cancel(
    State(state): State<ReclaimState>,
    id: Result<Path<i64>, axum::extract::rejection::PathRejection>,
    caller: collector_shared::access::Caller,
) -> Result<Json<Decided>, ApiError> {
    decide_api(&state, id, &caller, Decision::Cancel).await
}
