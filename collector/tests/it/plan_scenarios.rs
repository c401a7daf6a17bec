//! What each plan scenario's comments work out (tests/scenarios/*.toml), checked on its
//! analysis: which steps, which moves, how many GPUs freed (called by the ground-truth test
//! in `analytics.rs` for every scenario).

use std::collections::{BTreeSet, HashMap};

/// What the plan scenarios' comments work out (tests/scenarios/*.toml).
pub(crate) fn plan_steps_as_worked_out(
    label: &str,
    a: &analytics::Analysis,
    key_name: &HashMap<String, String>,
) {
    use analytics::RecKind;
    use analytics::recommend::Target;
    let name = |k: &str| key_name.get(k).cloned().unwrap_or_default();
    let moved_by = |r: &analytics::Recommendation| -> Vec<String> {
        r.moves().iter().map(|m| name(&m.tenant)).collect()
    };
    let plan = &a.plan;
    if label.ends_with("colliding-peaks.toml") {
        assert_eq!(plan.gpus_freed, 0, "{label}");
        assert!(
            a.recommendations.iter().all(|r| r.moves().is_empty()),
            "{label}"
        );
        let refused = a.rejected.iter().find(|r| {
            let names: BTreeSet<String> = r.tenants.iter().map(|t| name(t)).collect();
            names.contains("reindex-a") && names.contains("reindex-b")
        });
        let refused = refused.unwrap_or_else(|| panic!("{label}: replay did not refuse the pair"));
        assert!(
            refused.reason.contains("hour by hour"),
            "{}",
            refused.reason
        );
        assert_eq!(plan.bound_gpus, 2, "{label}: the hour-by-hour bound");
    }
    if label.ends_with("consolidate-pool.toml") {
        assert_eq!((plan.gpus_freed, plan.nodes_freed), (3, 2), "{label}");
        let step = a
            .recommendations
            .iter()
            .find(|r| r.kind == RecKind::TimeSlicing)
            .unwrap_or_else(|| panic!("{label}: no time-slicing step"));
        let moved = moved_by(step);
        assert!(moved.len() >= 3, "{label}: {moved:?}");
        // Tenants arrive from the nodes the plan empties: GPUs that are not the step's node's.
        let arriving = step
            .moves()
            .iter()
            .filter(|m| m.to_node == step.node && !step.gpus.contains(&m.from_gpu))
            .count();
        assert_eq!(arriving, 3, "{label}: {moved:?}");
    }
    if label.ends_with("memory-bound-mig.toml") {
        assert_eq!(plan.gpus_freed, 3, "{label}");
        let shared = a
            .recommendations
            .iter()
            .find(|r| matches!(r.kind, RecKind::TimeSlicing | RecKind::Mps))
            .unwrap_or_else(|| panic!("{label}: no sharing step for the long-context pods"));
        for m in shared.moves() {
            assert!(
                name(&m.tenant).starts_with("long-context"),
                "{label}: {m:?}"
            );
            assert_eq!(m.target, Target::Share { replicas: 2 }, "{label}");
        }
        assert_eq!(shared.moves().len(), 4, "{label}");
        for f in a
            .findings
            .iter()
            .filter(|f| f.kind.as_str() == "underutilized")
        {
            if name(&f.tenants[0]).starts_with("big") {
                assert_eq!(f.reason.as_deref(), Some("memory_bound"), "{label}");
            }
        }
    }
    if label.ends_with("complementary-diurnal.toml") {
        // One day and one night tenant per node, two replicas on one GPU: frees 2 of 4.
        assert_eq!((plan.gpus_freed, plan.bound_gpus), (2, 2), "{label}");
        for r in a
            .recommendations
            .iter()
            .filter(|r| r.kind == RecKind::TimeSlicing)
        {
            let mut names: Vec<String> = r
                .moves()
                .iter()
                .map(|m| name(&m.tenant))
                .chain(r.tenants.iter().map(|t| name(t)))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            names.sort();
            assert!(
                names.iter().any(|n| n.starts_with("day"))
                    && names.iter().any(|n| n.starts_with("night")),
                "{label}: {names:?}"
            );
        }
    }
    if label.ends_with("coinciding-memory.toml") || label.ends_with("staggered-peaks.toml") {
        assert_eq!((plan.gpus_freed, plan.bound_gpus), (0, 2), "{label}");
        assert!(
            a.recommendations.iter().all(|r| r.moves().is_empty()),
            "{label}"
        );
    }
    if label.ends_with("waiting-slice.toml") {
        // Ignoring the pending pod would free 6; the plan keeps its 1g.10gb instance.
        assert_eq!((plan.gpus_in_use, plan.gpus_freed), (7, 5), "{label}");
        let step = a
            .recommendations
            .iter()
            .find(|r| r.kind == RecKind::MigLayout)
            .unwrap_or_else(|| panic!("{label}: no mig_layout step"));
        let analytics::Proposal::MigLayout {
            mig_parted_yaml, ..
        } = &step.proposal
        else {
            unreachable!()
        };
        let instances: u32 = mig_parted_yaml
            .lines()
            .filter_map(|l| l.trim().strip_prefix("\"1g.10gb\": "))
            .filter_map(|n| n.parse::<u32>().ok())
            .sum();
        assert_eq!(
            instances, 8,
            "{label}: seven tenants and the pending pod\n{mig_parted_yaml}"
        );
        let served: Vec<&str> = step.serves.iter().map(|s| s.pod.as_str()).collect();
        assert_eq!(served, ["notebooks/jupyter-dave"], "{label}");
        assert_eq!(
            step.serves[0].profile.as_deref(),
            Some("1g.10gb"),
            "{label}"
        );
        assert!(
            step.summary.contains("keeps a 1g.10gb instance")
                && step.summary.contains("notebooks/jupyter-dave"),
            "{label}: {}",
            step.summary
        );
    }
    if label.ends_with("short-lived-neighbour.toml") {
        let step = a
            .recommendations
            .iter()
            .find(|r| r.kind == RecKind::MigLayout)
            .unwrap_or_else(|| panic!("{label}: no mig_layout step"));
        let mut moved = moved_by(step);
        moved.sort();
        assert_eq!(moved, ["small-1", "small-2", "small-3"], "{label}");
        assert!(
            step.confidence >= 0.9,
            "{label}: confidence {}",
            step.confidence
        );
        assert_eq!(plan.gpus_freed, 2, "{label}");
    }
}
