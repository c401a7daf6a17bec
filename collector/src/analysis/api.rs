//! `/api/v1/findings` and `/api/v1/recommendations`: the newest stored analysis (or one
//! computed for the requested range), filtered by team, node, kind and severity.

use axum::Json;
use axum::extract::{Query, State, rejection::QueryRejection};
use std::sync::Arc;

use analytics::{Analysis, Funnel, Rejected};
use serde::Serialize;

use super::AnalysisState;
use super::requested::{Filters, analysis};
use super::view::{FindingView, RecommendationView};
use collector_shared::access::routes::{Need::*, Routes, Teams::*};
use collector_shared::error::ApiError;
use collector_shared::openapi::{Op, window};
use model::time::rfc3339;
use serde_json::json;

/// The analysis routes (merged in `router.rs`).
pub fn routes() -> Routes<AnalysisState> {
    Routes::new()
        .get("/api/v1/funnel", Read(AllTeams), funnel_op(), funnel)
        .get("/api/v1/findings", Read(Filtered), findings_op(), findings)
        .get(
            "/api/v1/recommendations",
            Read(AllTeams),
            recommendations_op(),
            recommendations,
        )
        .get("/api/v1/plan", Read(AllTeams), plan_op(), plan)
        .get("/api/v1/outcomes", Read(AllTeams), outcomes_op(), outcomes)
        .get(
            "/api/v1/forecast",
            Read(Filtered),
            super::forecast::api::op(),
            super::forecast::api::forecast,
        )
        .get(
            "/api/v1/cost/focus",
            Read(Filtered),
            super::cost::api::op(),
            super::cost::api::focus,
        )
}

/// An analysis answer: what its 200 carries, and the refusals every one shares.
fn answer(op: Op, description: &str, schema: serde_json::Value) -> Op {
    op.json(200, description, schema).refusals(&[400, 503])
}

fn team_and_node() -> [serde_json::Value; 2] {
    [
        json!({"name": "team", "in": "query", "schema": {"type": "string"}, "description": "Only items of this team."}),
        json!({"name": "node", "in": "query", "schema": {"type": "string"}, "description": "Only items on this node."}),
    ]
}

fn funnel_op() -> Op {
    let op = Op::new("The utilization funnel (Capacity, Allocated, Active, Effective GPU-hours, waste and cost) in total and by cluster, model, node, team and tenant.")
        .params(window());
    answer(
        op,
        "generated, from, to, source, funnel",
        json!({"type": "object", "properties": {"funnel": {"type": "object"}}}),
    )
}

fn findings_op() -> Op {
    let kinds = analytics::FindingKind::ALL.map(|k| k.as_str());
    let op = Op::new(&format!("Findings of the newest analysis ({}), each with window, tenants, device, severity, signal, summary, metrics and evidence series (with their /api/v1/series href). See docs/analytics.md.", kinds.join(", ")))
        .params(team_and_node())
        .params(window())
        .query_enum("kind", kinds, None)
        .query_enum("severity", ["info", "warning", "critical"], Some("A minimum, not a match: severity=warning returns warning and critical findings; severity=critical only critical ones."));
    answer(
        op,
        "generated, from, to, source (stored|computed), limitations, count, findings[]",
        json!({
        "type": "object", "properties": {
            "generated": {"type": "string"}, "from": {"type": "string"}, "to": {"type": "string"}, "source": {"type": "string"},
            "limitations": {"type": "array", "items": {"type": "string"}}, "count": {"type": "integer"},
            "findings": {"type": "array", "items": {"type": "object", "properties": {
                "id": {"type": "string"}, "kind": {"type": "string"}, "severity": {"type": "string"}, "cluster": {"type": "string"}, "node": {"type": "string"},
                "gpu": {"type": ["string", "null"]}, "tenants": {"type": "array", "items": {"type": "string"}}, "team": {"type": ["string", "null"]},
                "pool": {"type": "string", "description": "waiting_demand: the GPU product the work waited for, or \"any GPU\"; node is empty (the finding is about a pool)"},
                "from_ms": {"type": "integer"}, "to_ms": {"type": "integer"}, "signal": {"type": "string"},
                "reason": {"type": "string", "enum": ["fits_smaller", "memory_bound", "compute_bound", "no_data"]},
                "summary": {"type": "string"}, "metrics": {"type": "object"},
                "evidence": {"type": "array", "items": {"$ref": "#/components/schemas/Evidence"}},
                "demand_hours": {"type": "array", "description": "waiting_demand: hour by hour, the GPUs its work waited for and the GPUs of its pool held idle (hour means)", "items": {"type": "object", "properties": {"hour_ms": {"type": "integer"}, "waiting_gpus": {"type": "number"}, "idle_gpus": {"type": "number"}}}}}}}}}),
    )
}

fn recommendations_op() -> Op {
    let op = Op::new("Recommendations of the newest analysis: the steps of the fleet plan (reclaim, consolidate, mig_layout, time_slicing, mps, per_gpu_sharing; right_size in analyses stored before the plan) and separate, each with its proposal (mig-parted or device-plugin config, or ResourceClaims, where it applies), confidence, replay result and what carrying it out interrupts; plus the proposals replay rejected and why.")
        .params(team_and_node())
        .params(window())
        .query_enum("kind", analytics::RecKind::ALL.iter().map(|k| k.as_str()), None);
    answer(
        op,
        "generated, from, to, source, count, gpus_freed (the sum of the listed plan steps' frees — a separation, advice beside the plan, is not counted; unfiltered, the plan's gpus_freed), recommendations[] (each with requires[]: the ids of the steps to carry out first; interrupts[]: {tenant, gpu, how: drained|moved|restarted|stopped, change: the pod-spec change of a move}; held_out: {verdict: held|failed|no_twin, hours, memory_overflow_hours, contention_hours_added, working_again, why} — its twin's result on the window's last day, which the plan it came from did not see), rejected[]",
        json!({"type": "object", "properties": {"count": {"type": "integer"}, "gpus_freed": {"type": "number"}, "recommendations": {"type": "array"}, "rejected": {"type": "array"}}}),
    )
}

fn plan_op() -> Op {
    let op = Op::new("The fleet plan of the newest analysis (docs/analytics.md): one consistent set of steps (the recommendations whose ids are listed), GPUs and nodes in use, after and freed, money saved per month, the bound (the fewest GPUs the recorded demand needs under the same headroom rules) and efficiency = freed / (in use - bound); per pool (cluster and GPU model) and per node.")
        .params(window());
    answer(
        op,
        "generated, from, to, source, limitations, plan {gpus_in_use, gpus_after, gpus_freed, nodes_in_use, nodes_freed, bound_gpus, efficiency, money_per_month, currency, steps[], pools[], nodes[]}",
        json!({
        "type": "object", "properties": {"plan": {"type": "object", "required": ["gpus_in_use", "gpus_after", "gpus_freed", "bound_gpus", "steps"], "properties": {
            "gpus_in_use": {"type": "integer"}, "gpus_after": {"type": "integer"}, "gpus_freed": {"type": "integer"},
            "nodes_in_use": {"type": "integer"}, "nodes_freed": {"type": "integer"}, "bound_gpus": {"type": "integer"},
            "efficiency": {"type": ["number", "null"]}, "money_per_month": {"type": "number"}, "currency": {"type": "string"},
            "steps": {"type": "array", "items": {"type": "string"}}, "pools": {"type": "array"}, "nodes": {"type": "array"}}}}}),
    )
}

fn outcomes_op() -> Op {
    let op = Op::new("The outcome check of the newest analysis (docs/analytics.md): for every step applied through a label action inside the window, what replay predicted and what was measured since (GPUs freed, contended and memory-overflow tenant-hours), each moved workload's effective use and memory before and after (followed across pod re-creation), and the verdict: pending, as_predicted, better or worse.")
        .params(window());
    answer(
        op,
        "generated, from, to, source, limitations, count, outcomes[] (action, recommendation, kind, cluster, node, summary, applied_ms, hours_after, verdict, reasons[], predicted{gpus_freed, contention_hours, memory_overflow_hours}, measured{…}, tenants[])",
        json!({
        "type": "object", "required": ["count", "outcomes"], "properties": {
            "count": {"type": "integer"},
            "outcomes": {"type": "array", "items": {"type": "object", "required": ["action", "node", "verdict"], "properties": {
                "action": {"type": "integer"}, "node": {"type": "string"},
                "verdict": {"type": "string", "enum": ["pending", "as_predicted", "better", "worse"]},
                "reasons": {"type": "array", "items": {"type": "string"}}, "tenants": {"type": "array"}}}}}}),
    )
}

fn check_kind(kind: &Option<String>, valid: &[&str]) -> Result<(), ApiError> {
    match kind {
        Some(k) if !valid.contains(&k.as_str()) => Err(ApiError::BadRequest(format!(
            "unknown kind {k:?}; one of: {}",
            valid.join(", ")
        ))),
        _ => Ok(()),
    }
}

/// What the filters ask of an item: its team (None where it has none), node and kind.
fn wanted(f: &Filters, team: Option<&str>, node: &str, kind: &str) -> bool {
    f.team.as_deref().is_none_or(|t| team == Some(t))
        && f.node.as_deref().is_none_or(|n| node == n)
        && f.kind.as_deref().is_none_or(|k| kind == k)
}

/// What every answer about an analysis carries: when and over what it was made, whether it
/// was stored or computed for the request, and what it could not measure.
#[derive(Debug, Serialize)]
pub struct Envelope {
    pub generated: String,
    pub from: String,
    pub to: String,
    /// stored | computed
    pub source: &'static str,
    pub limitations: Vec<String>,
}

impl Envelope {
    fn of(a: &Analysis, source: &'static str) -> Envelope {
        Envelope {
            generated: rfc3339(a.generated_ms),
            from: rfc3339(a.from_ms),
            to: rfc3339(a.to_ms),
            source,
            limitations: a.limitations.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct FindingsResponse {
    #[serde(flatten)]
    pub envelope: Envelope,
    pub count: usize,
    pub findings: Vec<FindingView>,
}

pub async fn findings(
    State(state): State<AnalysisState>,
    caller: collector_shared::access::Caller,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Json<FindingsResponse>, ApiError> {
    let Query(f) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let kinds: Vec<&str> = analytics::FindingKind::ALL
        .iter()
        .map(|k| k.as_str())
        .collect();
    check_kind(&f.kind, &kinds)?;
    let min = match f.severity.as_deref() {
        Some(s) => Some(analytics::Severity::parse(s).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "unknown severity {s:?}; one of: info, warning, critical"
            ))
        })?),
        None => None,
    };
    let (a, source) = analysis(&state, &f).await?;
    // Team-scoped callers see the findings whose team and tenants are all theirs.
    let team_of: std::collections::HashMap<String, Option<String>> = match caller.scope() {
        Some(_) => state
            .shared
            .store
            .tenants()
            .await?
            .into_iter()
            .map(|t| (t.tenant.key, t.team))
            .collect(),
        None => Default::default(),
    };
    let findings: Vec<FindingView> = a
        .findings
        .iter()
        .filter(|x| {
            wanted(&f, x.team.as_deref(), &x.node, x.kind.as_str())
                && min.is_none_or(|m| x.severity >= m)
                && caller.sees_teams(
                    x.team.as_deref().map(Some).into_iter().chain(
                        x.tenants
                            .iter()
                            .map(|t| team_of.get(t).and_then(|t| t.as_deref())),
                    ),
                )
        })
        .map(FindingView::from)
        .collect();
    Ok(Json(FindingsResponse {
        envelope: Envelope::of(&a, source),
        count: findings.len(),
        findings,
    }))
}

#[derive(Debug, Serialize)]
pub struct RecommendationsResponse {
    #[serde(flatten)]
    pub envelope: Envelope,
    pub count: usize,
    /// The GPUs the listed recommendations free, as their replays measured them.
    pub gpus_freed: f64,
    pub recommendations: Vec<RecommendationView>,
    pub rejected: Vec<Rejected>,
}

pub async fn recommendations(
    State(state): State<AnalysisState>,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Json<RecommendationsResponse>, ApiError> {
    let Query(f) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let kinds: Vec<&str> = analytics::RecKind::ALL.iter().map(|k| k.as_str()).collect();
    check_kind(&f.kind, &kinds)?;
    if f.severity.is_some() {
        return Err(ApiError::BadRequest(
            "recommendations have no severity; filter by kind, team or node".into(),
        ));
    }
    let (a, source) = analysis(&state, &f).await?;
    let recommendations: Vec<RecommendationView> = a
        .recommendations
        .iter()
        .filter(|r| wanted(&f, r.team.as_deref(), &r.node, r.kind.as_str()))
        .map(RecommendationView::from)
        .collect();
    // A rejected proposal belongs to no team: a team filter leaves none.
    let rejected: Vec<Rejected> = a
        .rejected
        .iter()
        .filter(|r| wanted(&f, None, &r.node, r.kind.as_str()))
        .cloned()
        .collect();
    Ok(Json(RecommendationsResponse {
        envelope: Envelope::of(&a, source),
        count: recommendations.len(),
        gpus_freed: recommendations
            .iter()
            .filter(|r| r.kind != analytics::recommend::RecKind::Separate)
            .map(|r| r.replay.gpus_freed)
            .sum(),
        recommendations,
        rejected,
    }))
}

#[derive(Debug, Serialize)]
pub struct FunnelResponse {
    #[serde(flatten)]
    pub envelope: Envelope,
    pub funnel: Funnel,
}

/// `/api/v1/funnel`: the funnel of the newest (or requested) analysis.
pub async fn funnel(
    State(state): State<AnalysisState>,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Json<FunnelResponse>, ApiError> {
    let (a, envelope) = range_only(
        &state,
        q,
        "the funnel takes only `from` and `to`; it is grouped by team and node already",
    )
    .await?;
    Ok(Json(FunnelResponse {
        envelope,
        funnel: a.funnel.clone(),
    }))
}

/// The analysis of an endpoint that takes only a range (`from`, `to`), with its envelope; the
/// item filters are refused, saying `why`.
async fn range_only(
    state: &AnalysisState,
    q: Result<Query<Filters>, QueryRejection>,
    why: &str,
) -> Result<(Arc<Analysis>, Envelope), ApiError> {
    let Query(f) = q.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    if f.kind.is_some() || f.severity.is_some() || f.node.is_some() || f.team.is_some() {
        return Err(ApiError::BadRequest(why.into()));
    }
    let (a, source) = analysis(state, &f).await?;
    let envelope = Envelope::of(&a, source);
    Ok((a, envelope))
}

#[derive(Debug, Serialize)]
pub struct PlanResponse {
    #[serde(flatten)]
    pub envelope: Envelope,
    pub plan: analytics::FleetPlan,
}

/// `/api/v1/plan`: the fleet plan of the newest (or requested) analysis — its totals, the bound
/// and how much of it the plan reaches, per pool and node, and the ids of its steps.
pub async fn plan(
    State(state): State<AnalysisState>,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Json<PlanResponse>, ApiError> {
    let (a, envelope) = range_only(
        &state,
        q,
        "the plan takes only `from` and `to`; it lists every pool and node already",
    )
    .await?;
    Ok(Json(PlanResponse {
        envelope,
        plan: a.plan.clone(),
    }))
}

#[derive(Debug, Serialize)]
pub struct OutcomesResponse {
    #[serde(flatten)]
    pub envelope: Envelope,
    pub count: usize,
    pub outcomes: Vec<analytics::Outcome>,
}

/// `/api/v1/outcomes`: the outcome check of every applied step the analysis window covers —
/// predicted and measured GPUs freed, contention and memory, each moved workload before and
/// after, and the verdict.
pub async fn outcomes(
    State(state): State<AnalysisState>,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Json<OutcomesResponse>, ApiError> {
    let (a, envelope) = range_only(
        &state,
        q,
        "outcomes take only `from` and `to`; each names its node and label action",
    )
    .await?;
    Ok(Json(OutcomesResponse {
        envelope,
        count: a.outcomes.len(),
        outcomes: a.outcomes.clone(),
    }))
}
