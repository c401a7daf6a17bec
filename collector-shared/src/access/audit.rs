//! The audit trail: sign-ins (and refused ones), sign-outs, approvals and label changes, each
//! one log line on the target `gpulens::audit` with who, how they signed in, and from where
//! (the time is the line's own). With `--log-format json` every line is one JSON object a log
//! pipeline can keep apart (docs/security.md).

use super::principal::{Caller, Principal, Via};

pub const TARGET: &str = "gpulens::audit";

fn via(p: &Principal) -> &'static str {
    match p.via {
        Via::Token => "token",
        Via::Session => "session",
        Via::Proxy => "proxy",
    }
}

/// Who made a request and how they signed in (`-` for anonymous callers).
fn who_and_how(caller: &Caller) -> (&str, &'static str) {
    caller
        .principal
        .as_ref()
        .map_or(("-", "-"), |p| (p.name.as_str(), via(p)))
}

/// Someone signed in (`method`: token, oidc).
pub fn signed_in(p: &Principal, method: &str, caller: &Caller) {
    tracing::info!(
        target: TARGET,
        event = "sign_in",
        who = %p.name,
        role = p.role.as_str(),
        teams = ?p.teams,
        method,
        from = %caller.from(),
        "signed in"
    );
}

/// A sign-in or a request was refused (a wrong token, no role for the person).
pub fn refused(why: &str, who: Option<&str>, caller: &Caller) {
    tracing::warn!(
        target: TARGET,
        event = "refused",
        who = who.unwrap_or("-"),
        why,
        from = %caller.from(),
        "refused"
    );
}

pub fn signed_out(caller: &Caller) {
    tracing::info!(
        target: TARGET,
        event = "sign_out",
        who = caller.name().unwrap_or("-"),
        from = %caller.from(),
        "signed out"
    );
}

/// A label action approved (through the dashboard or the API).
pub fn approved(action: i64, caller: &Caller, override_pods: bool) {
    let (who, how) = who_and_how(caller);
    tracing::info!(
        target: TARGET,
        event = "approve",
        who,
        via = how,
        action,
        override_pods,
        from = %caller.from(),
        "label action approved"
    );
}

/// The workflow ran an approved label action (applied, refused, rolled back or failed).
pub fn label_applied(
    action: i64,
    node: &str,
    label: &str,
    value: &str,
    approved_by: &str,
    outcome: &str,
) {
    tracing::info!(
        target: TARGET,
        event = "label_action",
        who = approved_by,
        action,
        node,
        label,
        value,
        outcome,
        from = "collector",
        "label action run"
    );
}

/// A reclaim case approved or cancelled by a person (`decision`: approve, cancel).
pub fn reclaim_decided(case: i64, decision: model::reclaim::CaseState, caller: &Caller) {
    let (who, how) = who_and_how(caller);
    tracing::info!(
        target: TARGET,
        event = "reclaim",
        who,
        via = how,
        case,
        decision = decision.as_str(),
        from = %caller.from(),
        "reclaim case decided"
    );
}
