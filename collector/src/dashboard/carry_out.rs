//! How a step page says what carrying the step out takes: the workloads it
//! interrupts with their teams, how long by the label workflow's own limits, where the
//! generated config goes, and — where the workflow is off — the commands by hand and what
//! turning the workflow on takes.

use super::page::*;
use crate::labels::Mode;
use analytics::disrupts::Disruption;
use model::labels::OPERATOR_MIG_CONFIG;

/// The carry-out part of step `r`'s page; `plan`: the label change it makes on its node, as
/// the label workflow plans it (none for a step that changes no label).
pub(super) fn carry_out(
    state: &DashboardState,
    a: &Analysis,
    r: &analytics::Recommendation,
    plan: Option<&crate::labels::Plan>,
    team_of: &HashMap<&str, &str>,
) -> pages::CarryOut {
    let labels = &state.labels;
    let interrupts = interrupt_rows(a, r, team_of);
    let drained = r.interrupts.iter().any(|i| i.how == Disruption::Drained);
    let restarted = r
        .interrupts
        .iter()
        .filter(|i| matches!(i.how, Disruption::Moved | Disruption::Restarted))
        .count();
    let duration = |d: std::time::Duration| model::time::format_duration(d);
    let timing = match (&r.proposal, drained) {
        (Proposal::MigLayout { .. }, true) => Some(format!(
            "The workflow cordons {node} and waits up to {} for its GPU pods to leave (it evicts none: their owners, or a drain, move them), then up to {} for the MIG manager to reconfigure the GPUs, and uncordons it: drained workloads are out for the drain plus the reconfiguration (a few minutes on a node whose pods leave at once), and come back where their requests fit. A pod still there after the wait holds the step unless the approver lets the workflow go ahead.",
            duration(labels.drain_timeout),
            duration(labels.config_timeout),
            node = r.node
        )),
        (Proposal::Sharing { .. }, true) => Some(format!(
            "The workflow cordons {node} and waits up to {} for its GPU pods to leave (it evicts none), then selects the device plugin's config (the plugin restarts in about a minute) and uncordons it: drained workloads come back on the shared GPUs.",
            duration(labels.drain_timeout),
            node = r.node
        )),
        _ if restarted > 0 => Some(format!(
            "{} once: its pod is recreated with the change shown, so it is out for as long as it takes to start again.",
            model::figures::count(restarted as f64, "workload restarts", "workloads restart")
        )),
        _ => None,
    };
    let mut out = pages::CarryOut {
        interrupts,
        timing,
        ..pages::CarryOut::default()
    };
    let Some(plan) = plan else {
        return out;
    };
    let layouts = labels.custom_layouts.clone().unwrap_or_default();
    let writes = labels.custom_layouts.is_some();
    let (label, value) = (plan.label.as_str(), plan.value.as_str());
    // mig-parted reads one key; the device plugin a key per config, named as the label's value.
    let (map, key) = if label == OPERATOR_MIG_CONFIG {
        (&layouts.mig_config_map, crate::labels::MIG_PARTED_KEY)
    } else {
        (&layouts.device_plugin_config_map, value)
    };
    out.config_place = Some(format!(
        "The generated config below goes into ConfigMap {map} in namespace {ns} under the key {key} (the one the GPU Operator's ClusterPolicy names{which}){how}; the node label {label}={value} on {node} selects it.",
        ns = layouts.namespace,
        which = if label == OPERATOR_MIG_CONFIG {
            " in migManager.config.name"
        } else {
            " in devicePlugin.config.name"
        },
        how = if writes {
            ": gpulens writes it there before the label ([labels.custom_layouts])"
        } else {
            ": add it there yourself, or let gpulens write it with [labels.custom_layouts]"
        },
        node = r.node
    ));
    if labels.mode != Mode::ApplyWithApproval {
        let state_check = if label == OPERATOR_MIG_CONFIG {
            format!(
                "kubectl get node {node} -o jsonpath='{{.metadata.labels.nvidia\\.com/mig\\.config\\.state}}'   # until: success\n",
                node = r.node
            )
        } else {
            String::new()
        };
        out.by_hand = Some(format!(
            "kubectl -n {ns} edit configmap {map}   # add the config below under {key}\nkubectl cordon {node}\nkubectl drain {node} --ignore-daemonsets --delete-emptydir-data   # evicts every pod; gpulens' workflow waits for GPU pods only\nkubectl label node {node} {label}={value} --overwrite\n{state_check}kubectl uncordon {node}\n",
            ns = layouts.namespace,
            node = r.node
        ));
        out.turn_on = Some(format!(
            "To have gpulens carry it out (label mode is {} here): set [labels] mode = \"apply-with-approval\" with at least one [[labels.operators]] token, give the collector RBAC to read, label and cordon nodes and list pods (the Helm chart grants it with labels.api and that labels.mode), then approve it on this page or run: gpulens labels apply --approve {} (docs/labels.md).",
            labels.mode.as_str(),
            r.node
        ));
    }
    out
}

/// The workloads `r` interrupts, one line per workload and how (a tenant drained on two GPUs
/// is one line, saying so), each with its team.
fn interrupt_rows(
    a: &Analysis,
    r: &analytics::Recommendation,
    team_of: &HashMap<&str, &str>,
) -> Vec<pages::InterruptRow> {
    // One line per workload and how: a tenant drained on two GPUs is one line.
    let mut lines: Vec<(pages::InterruptRow, usize)> = Vec::new();
    for i in &r.interrupts {
        let row = pages::InterruptRow {
            workload: name_of(a, &i.tenant),
            team: team_of
                .get(i.tenant.as_str())
                .copied()
                .unwrap_or("–")
                .into(),
            how: i.how.as_str().into(),
            change: i.change.clone(),
        };
        match lines.iter_mut().find(|(x, _)| *x == row) {
            Some((_, n)) => *n += 1,
            None => lines.push((row, 1)),
        }
    }
    lines
        .into_iter()
        .map(|(mut row, gpus)| {
            if gpus > 1 {
                row.how = format!("{} ({gpus} GPUs)", row.how);
            }
            row
        })
        .collect()
}
