//! `/reclaim`: the reclaim loop's cases, and an operator's approve and cancel (POSTed forms
//! with the session's CSRF token).

use super::page::*;
use crate::reclaim::{DecideError, Decision};
use store::reclaim_cases::{CaseFilter, CaseState};

pub async fn reclaim(
    State(state): State<DashboardState>,
    caller: Caller,
    Query(q): Query<FormatQuery>,
) -> PageOrCsv {
    let csv = wants_csv(q.format.as_deref())?;
    let cases = state
        .shared
        .store
        .reclaim_cases(&CaseFilter::newest(200))
        .await?;
    let csrf = state.access.csrf(&caller);
    let rows = cases
        .into_iter()
        .filter(|c| caller.sees_team(Some(&c.case.team)))
        .map(|c| {
            let k = &c.case;
            let when = match (c.acted_ms, k.state) {
                (Some(t), _) => format!("acted {}", time(t)),
                (None, CaseState::Noticed) => format!("grace ends {}", time(k.act_after_ms)),
                (None, CaseState::AwaitingApproval | CaseState::Approved) => {
                    format!("grace ended {}", time(k.act_after_ms))
                }
                (None, _) => c
                    .finished_ms
                    .map(|t| format!("ended {}", time(t)))
                    .unwrap_or_default(),
            };
            pages::ReclaimRow {
                id: c.id,
                state: k.state,
                pod: format!("{}/{}", k.namespace, k.pod),
                tenant: k.tenant.clone(),
                team: k.team.clone(),
                node: k.node.clone(),
                policy: k.policy.clone(),
                action: k.action.clone(),
                target: c.target.clone().unwrap_or_default(),
                idle_hours: k.idle_hours,
                idle_share: k.idle_share,
                when,
                outcome: c.outcome.clone().unwrap_or_default(),
                undo: c.undo.clone().unwrap_or_default(),
                csrf: csrf.clone(),
            }
        })
        .collect::<Vec<_>>();
    if csv {
        return Ok(csv_download("reclaim", pages::reclaim_csv(&rows)));
    }
    let policies = state
        .reclaim
        .policies
        .iter()
        .map(|p| {
            let scope: Vec<String> = p
                .namespaces
                .iter()
                .map(|n| format!("namespace {n}"))
                .chain(p.teams.iter().map(|t| format!("team {t}")))
                .collect();
            format!(
                "{}: {} — idle ≥ {:.0} % of the time and ≥ {} now, grace {}, then {}{}",
                p.name,
                scope.join(", "),
                p.idle_share * 100.0,
                model::time::format_duration(p.min_idle),
                model::time::format_duration(p.grace),
                p.action.as_str(),
                if p.approval && p.action != crate::reclaim::Action::Report {
                    " after an operator approves"
                } else {
                    ""
                }
            )
        })
        .collect();
    let mut f = frame(&state, &caller, "Reclaim");
    f.refresh_s = Some(60);
    Ok(Html(pages::reclaim(
        f,
        pages::ReclaimPage {
            dry_run: state.reclaim.dry_run,
            policies,
            rows,
        },
    ))
    .into_response())
}

#[derive(Debug, serde::Deserialize)]
pub struct DecideForm {
    pub csrf: String,
}

async fn decided(
    state: DashboardState,
    caller: Caller,
    id: i64,
    form: DecideForm,
    decision: Decision,
) -> Response {
    if let Err(page) = operator_of_form(&state, &caller, &form.csrf, "decide on reclaim cases") {
        return *page;
    }
    match crate::reclaim::decide(&state.shared.store, id, &caller, decision, "the dashboard").await
    {
        Ok(()) => {
            collector_shared::access::audit::reclaim_decided(id, decision.to(), &caller);
            Redirect::to("/reclaim").into_response()
        }
        Err(e @ (DecideError::Unknown(_) | DecideError::State { .. })) => {
            let (status, title) = match e {
                DecideError::Unknown(_) => (StatusCode::NOT_FOUND, "Not found"),
                _ => (StatusCode::CONFLICT, "Refused"),
            };
            (
                status,
                Html(pages::problem(frame(&state, &caller, title), e.to_string())),
            )
                .into_response()
        }
        Err(DecideError::Store(e)) => PageError::from(e).into_response(),
    }
}

pub async fn approve(
    State(state): State<DashboardState>,
    caller: Caller,
    Path(id): Path<i64>,
    Form(form): Form<DecideForm>,
) -> Response {
    decided(state, caller, id, form, Decision::Approve).await
}

pub async fn cancel(
    State(state): State<DashboardState>,
    caller: Caller,
    Path(id): Path<i64>,
    Form(form): Form<DecideForm>,
) -> Response {
    decided(state, caller, id, form, Decision::Cancel).await
}
