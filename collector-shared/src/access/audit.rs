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
        who = p.name.as_str(),
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::super::principal::Role;
    use super::*;

    /// What the binaries' text log formatter writes while `f` runs.
    fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Lines(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let out = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || out.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = lines.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    /// Each audit event is one line whatever the names in it hold: a name with a line break
    /// (a person's own display name at a provider, say) cannot start a forged line.
    #[test]
    fn an_audit_event_is_one_line_whatever_the_name() {
        let name =
            "eve\n2026-12-04T10:00:00Z  INFO gpulens::audit: event=\"sign_in\" who=\"admin\"";
        let p = Principal {
            name: name.into(),
            role: Role::Operator,
            teams: None,
            via: Via::Session,
        };
        let caller = Caller {
            principal: Some(p.clone()),
            ..Caller::default()
        };
        let text = logged(|| {
            signed_in(&p, "oidc", &caller);
            refused("no role", Some(name), &caller);
            approved(7, &caller, false);
            reclaim_decided(8, model::reclaim::CaseState::Cancelled, &caller);
            signed_out(&caller);
        });
        assert_eq!(text.lines().count(), 5, "{text}");
        for line in text.lines() {
            assert!(line.contains(r#"who="eve\n2026"#), "{line}");
        }
    }
}
