//! The notice an open case sends its owner through the alert receivers: the labels the
//! `reclaim_notice` alert carries (receivers pick their team's with `matchers`) and its summary.

use std::collections::BTreeMap;

use model::time::rfc3339;
use store::reclaim_cases::{CaseRecord, CaseState, NewCase};

/// The alertname of the default rule.
pub const ALERTNAME: &str = "GpulensReclaimNotice";

/// The labels that identify a case's notice, beyond the alert's own (`alertname`,
/// `severity`): cluster, node, GPU, tenant, team, namespace, policy, case and whether the loop
/// runs dry.
pub fn labels(id: i64, k: &NewCase) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("cluster".to_owned(), k.cluster.clone()),
        ("node".to_owned(), k.node.clone()),
        ("gpu_uuid".to_owned(), k.gpu.clone()),
        ("tenant".to_owned(), k.tenant.clone()),
        ("team".to_owned(), k.team.clone()),
        ("namespace".to_owned(), k.namespace.clone()),
        ("policy".to_owned(), k.policy.clone()),
        ("reclaim_case".to_owned(), id.to_string()),
        ("dry_run".to_owned(), k.dry_run.to_string()),
    ])
}

/// What the owner is told: what was seen, what will happen when, and how to stop it.
pub fn summary(c: &CaseRecord) -> String {
    let k = &c.case;
    let what = match (k.action.as_str(), c.target.as_deref()) {
        ("report", _) => "report it (the policy changes nothing)".to_owned(),
        ("scale-to-zero", Some(t)) => format!("scale {t} to zero"),
        ("suspend", Some(t)) => format!("suspend {t}"),
        (a, _) => a.replace('-', " "),
    };
    let when = match k.state {
        CaseState::AwaitingApproval => "once an operator approves".to_owned(),
        CaseState::Approved => "now (approved)".to_owned(),
        _ => format!("after {}", rfc3339(k.act_after_ms)),
    };
    let dry = if k.dry_run {
        " (dry run: nothing will be changed)"
    } else {
        ""
    };
    format!(
        "{} has held a GPU of {} ({}) idle for {:.0} h ({:.0} % of its allocated time); under policy {} gpulens will {what} {when} unless the GPU is used or the pod is annotated gpulens.io/reclaim=exempt (case {}){dry}",
        k.tenant_name,
        k.node,
        k.gpu,
        k.idle_hours,
        k.idle_share * 100.0,
        k.policy,
        c.id
    )
}
