//! `/api/v1/label-actions`: the GPU Operator changes gpulens planned, who approved them, and
//! every step of their runs; and approval by an operator (docs/labels.md).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};

use std::sync::Arc;

use super::actions::{self, ApproveError};
use super::settings::{Mode, Settings};
use collector_shared::error::ApiError;
use collector_shared::http::StepView;
use collector_shared::newest::{Newest, NewestError};
use collector_shared::shared::Shared;
use model::time::rfc3339;

/// What the label handlers need.
#[derive(Debug, Clone)]
pub struct LabelsState {
    pub shared: Shared,
    /// The `[labels]` settings (mode, operators who may approve).
    pub labels: Arc<Settings>,
    pub newest: Arc<Newest>,
}

use collector_shared::access::routes::{Need::*, Routes, Teams::*};
use collector_shared::openapi::Op;
use serde_json::json;
use store::label_actions::{ActionFilter, ActionState, LabelActionRecord};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only actions of this node.
    pub node: Option<String>,
    /// Only actions in this state.
    pub state: Option<String>,
    /// At most this many, newest first (default 100, at most 1000).
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize)]
pub struct ActionList {
    /// off | advise | apply-with-approval
    pub mode: &'static str,
    pub actions: Vec<LabelActionView>,
}

/// A planned GPU Operator change, its approval and outcome, and every step it took.
#[derive(Debug, Serialize)]
pub struct LabelActionView {
    pub id: i64,
    pub node: String,
    pub label: String,
    pub value: String,
    pub state: ActionState,
    pub requested_by: String,
    pub requested_at: String,
    pub approved_by: Option<String>,
    pub approved_at: Option<String>,
    pub override_pods: bool,
    pub finished_at: Option<String>,
    pub outcome: Option<String>,
    /// The value the run replaced (what a rollback restores).
    pub previous_value: Option<String>,
    /// The recommendation it was planned from (its outcome is checked after it is applied).
    pub recommendation: Option<String>,
    /// For a rollback the outcome check offered: the action it undoes.
    pub rollback_of: Option<i64>,
    pub steps: Vec<StepView>,
}

impl From<LabelActionRecord> for LabelActionView {
    fn from(a: LabelActionRecord) -> Self {
        let plan = serde_json::from_str::<super::workflow::Plan>(&a.plan).ok();
        LabelActionView {
            previous_value: a.previous_value,
            recommendation: plan
                .as_ref()
                .and_then(|p| p.recommendation.as_ref().map(|r| r.id.clone())),
            rollback_of: plan.and_then(|p| p.rollback_of),
            id: a.id,
            node: a.node,
            label: a.label,
            value: a.value,
            state: a.state,
            requested_by: a.requested_by,
            requested_at: rfc3339(a.requested_ms),
            approved_by: a.approved_by,
            approved_at: a.approved_ms.map(rfc3339),
            override_pods: a.override_pods,
            finished_at: a.finished_ms.map(rfc3339),
            outcome: a.outcome,
            steps: a.steps.into_iter().map(StepView::from).collect(),
        }
    }
}

pub async fn list(
    State(state): State<LabelsState>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ActionList>, ApiError> {
    let Query(q) = q.map_err(collector_shared::http::bad_query)?;
    let limit = collector_shared::http::list_limit(q.limit)?;
    let states: Vec<ActionState> = match q.state.as_deref() {
        None => Vec::new(),
        Some(s) => vec![ActionState::parse(s).ok_or_else(|| {
            let shown: String = s.chars().take(40).collect();
            let allowed: Vec<&str> = ActionState::ALL.iter().map(|a| a.as_str()).collect();
            ApiError::BadRequest(format!(
                "state {shown:?} is not a label-action state: one of {}",
                allowed.join(", ")
            ))
        })?],
    };
    let actions = state
        .shared
        .store
        .label_actions(&ActionFilter {
            id: None,
            node: q.node.as_deref(),
            states: &states,
            limit,
        })
        .await?;
    Ok(Json(ActionList {
        mode: state.labels.mode.as_str(),
        actions: actions.into_iter().map(LabelActionView::from).collect(),
    }))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    /// Go ahead although GPU pods remain on the node after the drain wait.
    #[serde(default)]
    pub override_pods: bool,
}

#[derive(Debug, Serialize)]
pub struct Approved {
    pub id: i64,
    pub state: ActionState,
    pub approved_by: String,
}

/// Approves a planned action; the collector runs it within `[labels] every`.
pub async fn approve(
    State(state): State<LabelsState>,
    id: Result<Path<i64>, axum::extract::rejection::PathRejection>,
    caller: collector_shared::access::Caller,
    body: axum::body::Body,
) -> Result<Json<Approved>, ApiError> {
    // The access table lets only operators' bearer tokens this far.
    let who = caller
        .name()
        .ok_or_else(|| ApiError::Unauthorized("sign in as an operator".into()))?
        .to_owned();
    // The body is read only once the token is known to be an operator's, and never past 64 KiB
    // (an approval is a few bytes).
    let Path(id) = id.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let body = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map_err(|_| ApiError::PayloadTooLarge("an approval body is at most 64 KiB".into()))?;
    let body: ApproveBody = if body.iter().all(u8::is_ascii_whitespace) {
        ApproveBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::BadRequest(format!("the body is not an approval: {e}")))?
    };
    match actions::approve(
        &state.shared.store,
        &state.labels,
        &state.newest,
        id,
        &who,
        body.override_pods,
        model::time::now_ms(),
    )
    .await
    {
        Ok(()) => {
            collector_shared::access::audit::approved(id, &caller, body.override_pods);
            Ok(Json(Approved {
                id,
                state: ActionState::Approved,
                approved_by: who,
            }))
        }
        Err(e) => {
            // What happened is audited: a refused approval is refused, not approved.
            collector_shared::access::audit::refused(&e.to_string(), Some(&who), &caller);
            Err(match e {
                ApproveError::Unknown(_) => ApiError::NotFound(format!("no label action {id}")),
                ApproveError::Mode(_)
                | ApproveError::NotPlanned(..)
                | ApproveError::Requires(..) => ApiError::Conflict(e.to_string()),
                ApproveError::Analysis(..) => ApiError::RetryLater(e.to_string(), 60),
                ApproveError::Store(e) => e.into(),
            })
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeLabelsQuery {
    /// The agent's cluster (its token may be bound to one).
    pub cluster: String,
}

pub use model::wire::v1::NodeLabels;

/// The label actions routes (merged in `router.rs`).
pub fn routes() -> Routes<LabelsState> {
    Routes::new()
        .get("/api/v1/label-actions", Read(AllTeams), list_op(), list)
        // Agents read their own node's labels with their own tokens.
        .get(
            "/api/v1/nodes/{node}/labels",
            Agent,
            node_labels_op(),
            node_labels,
        )
        .post(
            "/api/v1/label-actions/{id}/approve",
            Operate(AllTeams),
            approve_op(),
            approve,
        )
}

fn list_op() -> Op {
    Op::new("GPU Operator label changes gpulens planned (docs/labels.md): state (planned, approved, running, applied, unchanged, refused, rolled_back, failed), who requested and approved them, the outcome, and every step of the run with its time, actor and result; plus the label mode.")
        .param(json!({"name": "node", "in": "query", "schema": {"type": "string"}, "description": "Only actions of this node."}))
        .param(json!({"name": "state", "in": "query", "schema": {"type": "string", "enum": ActionState::ALL.map(|a| a.as_str())}, "description": "Only actions in this state (another value is a 400 that lists these)."}))
        .param(json!({"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}, "description": "Newest first, default 100."}))
        .json(200, "mode, actions[] (id, node, label, value, state, requested_by, requested_at, approved_by, approved_at, override_pods, finished_at, outcome, previous_value, recommendation, rollback_of, steps[{at, actor, step, result, detail}])",
            json!({"type": "object", "properties": {"mode": {"type": "string", "enum": ["off", "advise", "apply-with-approval"]}, "actions": {"type": "array"}}}))
        .refusals(&[400, 503])
}

fn node_labels_op() -> Op {
    Op::new("A node's advisory gpulens.io labels from the newest stored analysis, for the node's agent to write into Node Feature Discovery's features.d (docs/labels.md). Needs the agent token bound to that node.")
        .param(json!({"name": "node", "in": "path", "required": true, "schema": {"type": "string"}}))
        .param(json!({"name": "cluster", "in": "query", "required": true, "schema": {"type": "string"}, "description": "The agent's cluster."}))
        .json(200, "node, analyzed (RFC 3339), labels {key: value}",
            json!({"type": "object", "properties": {"node": {"type": "string"}, "analyzed": {"type": "string", "format": "date-time"}, "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}))
        .refusals(&[400, 401, 403, 409, 503])
        .throttled("agent tokens")
}

fn approve_op() -> Op {
    Op::new("Approve a planned change (operator token; mode apply-with-approval). The collector runs it within [labels] every: cordon, wait for GPU pods, label, watch, uncordon.")
        .param(json!({"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}))
        .body(json!({"required": false, "content": {"application/json": {"schema": {"type": "object", "properties": {"override_pods": {"type": "boolean", "description": "Go ahead although GPU pods remain after the drain wait."}}}}}}))
        .response(200, json!({"description": "id, state, approved_by"}))
        .refusals(&[401, 403, 404, 409, 503])
        .throttled("tokens")
}

/// `GET /api/v1/nodes/{node}/labels?cluster=…`: the node's advisory labels from the newest
/// stored analysis, for the agent token bound to that node.
pub async fn node_labels(
    State(state): State<LabelsState>,
    Path(node): Path<String>,
    q: Result<Query<NodeLabelsQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
    caller: collector_shared::access::Caller,
) -> Result<Json<NodeLabels>, ApiError> {
    // The token first, counted and audited as ingest counts it (wrong tokens here
    // were neither limited nor audited).
    let id = state
        .shared
        .auth
        .check_headers(&headers, caller.addr)
        .await?;
    let Query(q) = q.map_err(collector_shared::http::bad_query)?;
    collector_shared::agent_auth::Auth::authorize(&id, &q.cluster, &node)?;
    if state.labels.mode == Mode::Off {
        return Err(ApiError::Conflict(
            "node labels are off on this collector ([labels] mode = \"off\")".into(),
        ));
    }
    let a = match state.newest.get(&state.shared.store).await {
        Ok(Some(a)) => a,
        Ok(None) => {
            return Err(ApiError::RetryLater(
                "no analysis has run yet; the first runs shortly after the collector starts".into(),
                60,
            ));
        }
        Err(NewestError::Store(e)) => return Err(e.into()),
        Err(e) => return Err(ApiError::Internal(e.to_string())),
    };
    let mut all = super::advisory::labels(&a, a.generated_ms);
    Ok(Json(NodeLabels {
        labels: all
            .remove(&(q.cluster.clone(), node.clone()))
            .unwrap_or_default(),
        node,
        analyzed: model::time::rfc3339(a.generated_ms),
    }))
}
