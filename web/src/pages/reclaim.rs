//! Reclaim: the cases the reclaim loop opened on idle holdings — where each stands, what will be
//! or was done, how to undo it — with an operator's approve and cancel.

use super::*;
use model::reclaim::CaseState;

/// One case as the page shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReclaimRow {
    pub id: i64,
    pub state: CaseState,
    /// `namespace/pod`, and the tenant key its page is at.
    pub pod: String,
    pub tenant: String,
    pub team: String,
    pub node: String,
    pub policy: String,
    /// What the policy does (`scale-to-zero`), and to which controller once known.
    pub action: String,
    pub target: String,
    pub idle_hours: f64,
    pub idle_share: f64,
    /// When the grace ends, or when it acted, as fits the state.
    pub when: String,
    pub outcome: String,
    pub undo: String,
    /// The operator's CSRF token, when one is signed in.
    pub csrf: Option<String>,
}

/// The page: how the loop runs, and its cases.
#[derive(Debug, Clone, PartialEq)]
pub struct ReclaimPage {
    pub dry_run: bool,
    /// One line per policy.
    pub policies: Vec<String>,
    pub rows: Vec<ReclaimRow>,
}

fn state_class(state: CaseState) -> &'static str {
    match state {
        CaseState::AwaitingApproval | CaseState::Noticed | CaseState::Approved => "warn",
        CaseState::Freed => "ok",
        CaseState::Failed | CaseState::NotFreed => "sev-critical",
        CaseState::Acted
        | CaseState::Cancelled
        | CaseState::Refused
        | CaseState::Reported
        | CaseState::DryRun => "",
    }
}

/// The controls of a case: approve (awaiting approval) and cancel (not yet acted), for an
/// operator.
fn controls(r: &ReclaimRow) -> AnyView {
    let Some(csrf) = r.csrf.clone() else {
        return if r.state == CaseState::AwaitingApproval {
            view! { <a href="/login">"Sign in as an operator to decide."</a> }.into_any()
        } else {
            ().into_any()
        };
    };
    let form = |verb: &'static str, label: &'static str, csrf: String| {
        view! {
            <form method="post" action=format!("/reclaim/{}/{verb}", r.id) class="inline">
                <input type="hidden" name="csrf" value=csrf/>
                <button type="submit">{label}</button>
            </form>
        }
    };
    let approve =
        (r.state == CaseState::AwaitingApproval).then(|| form("approve", "Approve", csrf.clone()));
    let cancel = CaseState::NOTIFIED
        .contains(&r.state)
        .then(|| form("cancel", "Cancel", csrf));
    view! { {approve}" "{cancel} }.into_any()
}

pub fn reclaim(frame: Frame, page: ReclaimPage) -> String {
    document(frame, Nav::Reclaim, move || {
        let ReclaimPage {
            dry_run,
            policies,
            rows,
        } = page;
        let count = rows.len();
        let waiting = rows
            .iter()
            .filter(|r| r.state == CaseState::AwaitingApproval)
            .count();
        let mode = if policies.is_empty() {
            "The reclaim loop is off: no [reclaim] policy is configured (docs/reclaim.md)."
                .to_owned()
        } else if dry_run {
            "Dry run: cases are noticed and recorded, nothing in the cluster is changed ([reclaim] dry_run)."
                .to_owned()
        } else {
            "Acting: after the grace (and an operator's approval where the policy asks for one) the loop scales to zero or suspends."
                .to_owned()
        };
        let policies = policies
            .into_iter()
            .map(|p| view! { <li>{p}</li> })
            .collect_view();
        let body = rows
            .into_iter()
            .map(|r| {
                let what = if r.target.is_empty() {
                    r.action.clone()
                } else {
                    format!("{} {}", r.action, r.target)
                };
                let undo = (!r.undo.is_empty())
                    .then(|| view! { <br/>"Undo: "<code>{r.undo.clone()}</code> });
                view! {
                    <tr>
                        <td><a href=format!("/tenants/{}", enc(&r.tenant))>{r.pod.clone()}</a><br/><span class="note">{format!("case {} on ", r.id)}{node_link(&r.node)}</span></td>
                        <td class=state_class(r.state)>{r.state.words()}</td>
                        <td>{r.team.clone()}</td>
                        <td class="n">{format!("{:.0} h", r.idle_hours)}<br/><span class="note">{pct(Some(r.idle_share))}</span></td>
                        <td>{r.policy.clone()}<br/><span class="note">{what}</span></td>
                        <td class="t">{r.when.clone()}</td>
                        <td>{r.outcome.clone()}{undo}</td><td>{controls(&r)}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h1>"Reclaim"</h1>
            <p>{mode}</p>
            <ul class="note">{policies}</ul>
            {(waiting > 0).then(|| view! { <p class="warn">{if waiting == 1 { "1 case awaits an operator's approval.".to_owned() } else { format!("{waiting} cases await an operator's approval.") }}</p> })}
            <div class="scroll"><table>
                <caption>{format!("{}, newest first: idle holdings a policy took up, the notice sent, the grace, what was done and how to undo it (every step at /api/v1/reclaim)", model::figures::count(count as f64, "case", "cases"))}</caption>
                <thead><tr><th scope="col">"Pod"</th><th scope="col">"State"</th><th scope="col">"Team"</th>
                    <th scope="col" class="n key">"Idle"</th><th scope="col">"Policy, action"</th><th scope="col">"When (UTC)"</th><th scope="col">"Outcome"</th><th scope="col">"Decide"</th></tr></thead>
                <tbody>{if count == 0 { none_row(8, "no idle holding was taken up by a policy") } else { body.into_any() }}</tbody>
            </table></div>
            {download_note("/reclaim?format=csv".into(), "the cases")}
        }
        .into_any()
    })
}

/// The cases as CSV: the rows the page shows, a column per figure.
pub fn reclaim_csv(rows: &[ReclaimRow]) -> String {
    use crate::csv::{field, number, table};
    table(
        &[
            "Pod",
            "Case",
            "Node",
            "State",
            "Team",
            "Idle hours",
            "Idle share",
            "Policy",
            "Action",
            "Target",
            "When (UTC)",
            "Outcome",
            "Undo",
        ],
        rows.iter().map(|r| {
            vec![
                field(&r.pod),
                r.id.to_string(),
                field(&r.node),
                field(r.state.as_str()),
                field(&r.team),
                number(Some(r.idle_hours)),
                number(Some(r.idle_share)),
                field(&r.policy),
                field(&r.action),
                field(&r.target),
                field(&r.when),
                field(&r.outcome),
                field(&r.undo),
            ]
        }),
    )
}
