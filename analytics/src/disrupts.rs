//! What carrying out a step interrupts: the workloads it stops, drains, moves or
//! restarts, and the change each moved workload's pod spec needs — so a step says what it
//! costs the people running on the GPUs it touches before anyone approves it.
//!
//! - A MIG layout or a sharing config reconfigures every GPU of its node: the guarded workflow
//!   cordons the node and waits until no GPU pod is left, so every workload holding a GPU
//!   there now is **drained** (those the step moves elsewhere as well).
//! - A consolidation, a per-GPU sharing step or a separation **moves** each tenant it places on
//!   another GPU, and **restarts** one that keeps its GPU under a new request (a claim).
//! - A reclaim **stops** the holding; a right-sizing **restarts** the workload on a smaller
//!   place.
//!
//! The spec change is the resource request and node selector a Kubernetes pod needs at its new
//! place (a Slurm job or host process is told where to run instead).

use std::collections::{BTreeMap, BTreeSet};

use crate::findings::Ctx;
use crate::holdings::Holding;
use crate::mechanism::Mechanism;
use crate::recommendation::{Move, Proposal, Recommendation, Target};

pub use crate::recommendation::{Disruption, Interrupted};

/// The change a moved pod's spec needs: the resource it requests at its new place and, when
/// it changes node, a node selector (none where a scheduler places it). `under`: the per-GPU
/// mechanism the step carries it out with. None where nothing in the spec changes.
pub fn spec_change(m: &Move, under: Option<Mechanism>) -> Option<String> {
    const CLAIM: &str = "claims: [{name: gpu}]  # in place of its GPU limit; spec.resourceClaims names the step's claim";
    let mut node =
        (!m.to_node.is_empty() && m.to_node != m.from_node).then_some(m.to_node.as_str());
    let resource = match &m.target {
        Target::Mig { .. } if under == Some(Mechanism::DraDynamicMig) => Some(CLAIM.to_owned()),
        Target::Mig { profile, .. } if !profile.is_empty() => Some(mig_resource(profile)),
        // A time-sliced or MPS replica is still requested as nvidia.com/gpu; a pinned share
        // is a claim (the step's ResourceClaims say which); a scheduler-placed share is the
        // mechanism's request, and the scheduler picks the node.
        Target::PerGpu {
            memory_gib,
            scheduled: true,
            ..
        } => {
            node = None;
            let mib = (memory_gib * 1024.0).ceil();
            match under {
                Some(Mechanism::Hami) => Some(format!(
                    "nvidia.com/gpumem: {mib}  # beside nvidia.com/gpu: 1, with the step's binpack annotations"
                )),
                Some(Mechanism::KaiFractions) => {
                    return Some(format!(
                        "metadata:\n  annotations:\n    gpu-memory: \"{mib}\"\nspec:\n  schedulerName: kai-scheduler\n"
                    ));
                }
                _ => Some(CLAIM.to_owned()),
            }
        }
        Target::PerGpu { .. } => Some(CLAIM.to_owned()),
        _ => None,
    };
    patch(node, resource.as_deref())
}

/// A MIG instance as a container's resource limit.
fn mig_resource(profile: &str) -> String {
    format!("nvidia.com/mig-{profile}: 1  # in place of nvidia.com/gpu")
}

/// A pod-spec patch: the node selector and the container's resource limit it sets, if any.
fn patch(node: Option<&str>, resource: Option<&str>) -> Option<String> {
    if node.is_none() && resource.is_none() {
        return None;
    }
    let mut out = String::from("spec:\n");
    if let Some(n) = node {
        out.push_str(&format!(
            "  nodeSelector:\n    kubernetes.io/hostname: {n}\n"
        ));
    }
    if let Some(r) = resource {
        out.push_str(&format!(
            "  containers:\n  - name: <its container>\n    resources:\n      limits:\n        {r}\n"
        ));
    }
    Some(out)
}

/// Fills each step's `interrupts` from the holdings running at the end of the window.
pub fn fill(ctx: &Ctx, holdings: &[Holding], recs: &mut [Recommendation]) {
    let mut on_node: BTreeMap<(&str, &str), BTreeSet<(&str, &str)>> = BTreeMap::new();
    for h in holdings
        .iter()
        .filter(|h| h.total.alloc_n > 0 && crate::plan::is_current(h, ctx.input.to_ms))
    {
        on_node
            .entry((&h.cluster, &h.node))
            .or_default()
            .insert((&h.tenant, &h.gpu));
    }
    for r in recs.iter_mut() {
        let mut out: BTreeMap<(String, String), Interrupted> = BTreeMap::new();
        let mut put = |tenant: &str, gpu: &str, how: Disruption, change: Option<String>| {
            let e = out
                .entry((tenant.to_owned(), gpu.to_owned()))
                .or_insert_with(|| Interrupted {
                    tenant: tenant.to_owned(),
                    gpu: gpu.to_owned(),
                    how,
                    change: None,
                });
            // The step's own move says more than the drain it shares with the node.
            e.how = e.how.max(how);
            if change.is_some() {
                e.change = change;
            }
        };
        if matches!(
            r.proposal,
            Proposal::MigLayout { .. } | Proposal::Sharing { .. }
        ) {
            for (tenant, gpu) in on_node
                .get(&(r.cluster.as_str(), r.node.as_str()))
                .into_iter()
                .flatten()
            {
                put(tenant, gpu, Disruption::Drained, None);
            }
        }
        let under = match &r.proposal {
            Proposal::PerGpu { mechanism, .. } => Some(*mechanism),
            _ => None,
        };
        for m in r.moves() {
            let same_gpu = m.to_node == m.from_node && m.to_gpu_index == m.from_gpu_index;
            let how = if same_gpu {
                Disruption::Restarted
            } else {
                Disruption::Moved
            };
            put(&m.tenant, &m.from_gpu, how, spec_change(m, under));
        }
        match &r.proposal {
            Proposal::Reclaim { tenant, gpus, .. } => {
                for g in gpus {
                    put(tenant, g, Disruption::Stopped, None);
                }
            }
            Proposal::RightSize {
                tenant,
                gpu,
                target,
                ..
            } => {
                let change = match target {
                    Target::Mig { profile, .. } => patch(None, Some(&mig_resource(profile))),
                    _ => None,
                };
                put(tenant, gpu, Disruption::Restarted, change);
            }
            _ => {}
        }
        r.interrupts = out.into_values().collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(to_node: &str, to: i64, target: Target) -> Move {
        Move {
            tenant: "t".into(),
            from_gpu: "GPU-a".into(),
            from_node: "n1".into(),
            from_gpu_index: 0,
            to_node: to_node.into(),
            to_gpu_index: to,
            target,
        }
    }

    #[test]
    fn a_moved_pod_gets_its_new_request_and_node() {
        let mig = Target::Mig {
            profile: "3g.40gb".into(),
            memory_gib: 40.0,
            compute_slices: 3,
        };
        let c = spec_change(&mv("n2", 1, mig.clone()), None).unwrap();
        assert!(
            c.contains("kubernetes.io/hostname: n2") && c.contains("nvidia.com/mig-3g.40gb: 1"),
            "{c}"
        );
        let same_node = spec_change(&mv("n1", 1, mig.clone()), None).unwrap();
        assert!(!same_node.contains("nodeSelector"), "{same_node}");
        // Carved by DynamicMIG, the instance is the step's claim, not a device-plugin resource.
        let carved = spec_change(&mv("n1", 1, mig), Some(Mechanism::DraDynamicMig)).unwrap();
        assert!(
            carved.contains("claims: [{name: gpu}]") && !carved.contains("nvidia.com/mig-"),
            "{carved}"
        );
        // A whole GPU or a replica on the same node: nothing in the spec changes.
        assert_eq!(spec_change(&mv("n1", 1, Target::WholeGpu), None), None);
        assert_eq!(
            spec_change(&mv("n1", 1, Target::Share { replicas: 2 }), None),
            None
        );
        let share = |scheduled| Target::PerGpu {
            memory_gib: 11.0,
            tenants: 2,
            scheduled,
        };
        let claim = spec_change(&mv("n1", 0, share(false)), None).unwrap();
        assert!(claim.contains("claims: [{name: gpu}]"), "{claim}");
        // Placed by a scheduler: its request, and no node selector (the scheduler picks).
        let hami = spec_change(&mv("n2", 0, share(true)), Some(Mechanism::Hami)).unwrap();
        assert!(
            hami.contains("nvidia.com/gpumem: 11264") && !hami.contains("nodeSelector"),
            "{hami}"
        );
        let kai = spec_change(&mv("n2", 0, share(true)), Some(Mechanism::KaiFractions)).unwrap();
        assert!(
            kai.contains("gpu-memory: \"11264\"") && kai.contains("kai-scheduler"),
            "{kai}"
        );
    }

    #[test]
    fn a_move_is_said_over_the_drain_it_shares() {
        assert!(Disruption::Drained < Disruption::Moved);
        assert_eq!(Disruption::Stopped.as_str(), "stopped");
    }
}
