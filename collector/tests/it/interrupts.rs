//! Every step names what carrying it out interrupts — each tenant it moves (with
//! its pod-spec change where the spec changes), every workload on a node whose GPUs it
//! reconfigures (drained), the holding a reclaim stops.

use std::collections::BTreeSet;

use analytics::disrupts::Disruption;
use analytics::{Proposal, RecKind};

pub(crate) fn every_step_names_what_it_interrupts(
    label: &str,
    a: &analytics::Analysis,
    input: &analytics::Input,
) {
    let holdings = analytics::holdings::holdings(input);
    for r in &a.recommendations {
        let named: BTreeSet<(&str, &str)> = r
            .interrupts
            .iter()
            .map(|i| (i.tenant.as_str(), i.gpu.as_str()))
            .collect();
        for m in r.moves() {
            assert!(
                named.contains(&(m.tenant.as_str(), m.from_gpu.as_str())),
                "{label}: {} moves {} and does not say so",
                r.id,
                m.tenant
            );
            let i = r
                .interrupts
                .iter()
                .find(|i| i.tenant == m.tenant && i.gpu == m.from_gpu)
                .unwrap();
            let changes_node = !m.to_node.is_empty() && m.to_node != m.from_node;
            let changes_resource = matches!(
                m.target,
                analytics::recommend::Target::Mig { .. }
                    | analytics::recommend::Target::PerGpu { .. }
            );
            assert_eq!(
                i.change.is_some(),
                changes_node || changes_resource,
                "{label}: {} {:?}",
                r.id,
                i
            );
            if changes_node {
                let c = i.change.as_deref().unwrap();
                assert!(
                    c.contains(&format!("kubernetes.io/hostname: {}", m.to_node)),
                    "{c}"
                );
            }
        }
        if matches!(
            r.proposal,
            Proposal::MigLayout { .. } | Proposal::Sharing { .. }
        ) {
            for h in holdings.iter().filter(|h| {
                h.cluster == r.cluster
                    && h.node == r.node
                    && crate::plan_totals::runs_now(h, input.to_ms)
            }) {
                assert!(
                    named.contains(&(h.tenant.as_str(), h.gpu.as_str())),
                    "{label}: {} reconfigures {} and does not name {} it drains",
                    r.id,
                    r.node,
                    h.tenant
                );
            }
        }
        if r.kind == RecKind::Reclaim {
            assert!(
                r.interrupts
                    .iter()
                    .any(|i| i.how == Disruption::Stopped && i.tenant == r.tenants[0]),
                "{label}: {}",
                r.id
            );
        }
    }
}
