//! Issue 73: a pool that has a per-GPU mechanism pinning groups gets a plan under it — its
//! steps pin the groups (ResourceClaims to create, the moves), they add up to the plan's total,
//! carrying them out frees what the plan says, and the worked counts of
//! `tests/scenarios/pinned-per-gpu.toml` hold for each mechanism.

use analytics::RecKind;
use analytics::mechanism::Mechanism;

/// What the plan of `input` is under `cfg` with pool `one-node` having `has`: the GPUs it
/// frees, checked against its steps and carrying them out.
fn plan_with(label: &str, input: &analytics::Input, has: &[Mechanism]) -> analytics::Analysis {
    let mut cfg = analytics::Config::default();
    cfg.mechanisms.insert("one-node".into(), has.to_vec());
    let a = analytics::analyze(input, &cfg).unwrap();
    let plan = &a.plan;
    let by_steps = crate::plan_totals::freed_by_plan_steps(&a);
    assert_eq!(by_steps, plan.gpus_freed as f64, "{label} {has:?}");
    assert_eq!(
        crate::plan_totals::applied_frees(&a, input),
        plan.gpus_freed as i64,
        "{label} {has:?}: applying every step does not free what the plan says"
    );
    crate::plan_totals::carried_out_in_order(&a, input).unwrap_or_else(|e| panic!("{label}: {e}"));
    assert!(plan.bound_gpus <= plan.gpus_after, "{label} {has:?}");
    assert!(plan.efficiency.is_none_or(|e| e <= 1.0), "{label} {has:?}");
    a
}

/// The claims a per-GPU step emits, as JSON objects.
fn step_claims(a: &analytics::Analysis) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for r in &a.recommendations {
        if let analytics::Proposal::PerGpu { objects_yaml, .. } = &r.proposal {
            for doc in serde_yaml::Deserializer::from_str(objects_yaml) {
                use serde::Deserialize;
                out.push(serde_json::Value::deserialize(doc).unwrap());
            }
        }
    }
    out
}

/// The plan of the pinned-per-gpu scenario under each mechanism its pool may have; and, as a
/// live collector's window ends inside an hour, no finding ends after the window (issue 74.8:
/// underutilized findings ended 54 minutes after the analysis that made them).
pub(crate) fn plans_under_what_the_pool_has(label: &str, input: &analytics::Input) {
    let mut live = input.clone();
    live.to_ms -= 20 * 60_000;
    let a = analytics::analyze(&live, &analytics::Config::default()).unwrap();
    assert!(!a.findings.is_empty(), "{label}");
    for f in &a.findings {
        assert!(
            f.to_ms <= live.to_ms,
            "{label}: {} ends after its window",
            f.id
        );
    }
    // Consumable capacity pinned per GPU: day-1 and day-2 each with a night tenant, 2 freed.
    let a = plan_with(label, input, &[Mechanism::DraConsumableCapacity]);
    let pool = &a.plan.pools[0];
    assert_eq!(pool.uses, Some(Mechanism::DraConsumableCapacity), "{label}");
    assert_eq!((a.plan.gpus_in_use, a.plan.gpus_freed), (4, 2), "{label}");
    let steps: Vec<_> = a
        .recommendations
        .iter()
        .filter(|r| r.kind == RecKind::PerGpuSharing)
        .collect();
    assert_eq!(steps.len(), 1, "{label}: one node, one step");
    let step = steps[0];
    println!("{label}: under consumable capacity: {}", step.summary);
    assert_eq!(step.replay.gpus_freed, 2.0, "{label}");
    assert!(!step.replay.harmful && step.replay.memory_overflow_hours == 0.0);
    assert!(
        step.summary.contains("2 shared GPUs")
            && step
                .summary
                .contains("DRA consumable capacity pinned to a GPU")
            && step.summary.contains("4 ResourceClaims"),
        "{}",
        step.summary
    );
    let claims = step_claims(&a);
    assert_eq!(claims.len(), 4, "{label}: a claim per pod");
    for c in &claims {
        assert_eq!(c["apiVersion"], "resource.k8s.io/v1");
        let req = &c["spec"]["devices"]["requests"][0]["exactly"];
        assert!(req["capacity"]["requests"]["memory"].is_string(), "{c}");
    }
    // Every moved tenant names its place: a share pinned to a GPU of two.
    for m in step.moves() {
        assert!(
            matches!(
                m.target,
                analytics::recommend::Target::PerGpu { tenants: 2, .. }
            ),
            "{label}: {m:?}"
        );
    }
    crate::one_number::validate_objects(label, &claims);
    // The worth of the mechanism in use is against the plan that uses it.
    let w = pool
        .worth
        .iter()
        .find(|w| w.mechanism == Mechanism::DraConsumableCapacity)
        .unwrap();
    assert_eq!((w.uses, w.beyond_plan), (1, 0), "{label}");
    assert!(w.sentence("USD").contains("the plan uses it"), "{label}");
    // A shared claim joins one namespace only: day-1 with night-1 (both api), 1 freed.
    let a = plan_with(label, input, &[Mechanism::DraSharedClaim]);
    assert_eq!(a.plan.gpus_freed, 1, "{label}");
    let claims = step_claims(&a);
    assert_eq!(claims.len(), 1, "{label}: one shared claim");
    assert_eq!(claims[0]["metadata"]["namespace"], "api");
    crate::one_number::validate_objects(label, &claims);
    // Having both, the plan takes the one that frees more; having only a scheduler-placed
    // mechanism, the plan stays node-wide (nothing freed here) and says what it is worth.
    let a = plan_with(
        label,
        input,
        &[Mechanism::DraSharedClaim, Mechanism::DraConsumableCapacity],
    );
    assert_eq!(a.plan.pools[0].uses, Some(Mechanism::DraConsumableCapacity));
    assert_eq!(a.plan.gpus_freed, 2, "{label}");
    let a = plan_with(label, input, &[Mechanism::Hami]);
    assert_eq!((a.plan.pools[0].uses, a.plan.gpus_freed), (None, 0));
}

/// `tests/scenarios/pinned-per-gpu-in-place.toml`: the node's mechanism is recorded as the
/// demand poll sees it, and the plan pins the services in pairs as worked out there.
pub(crate) fn in_place_as_worked_out(label: &str, a: &analytics::Analysis) {
    if !label.ends_with("pinned-per-gpu-in-place.toml") {
        return;
    }
    let pool = &a.plan.pools[0];
    assert_eq!(
        pool.seen,
        [(Mechanism::DraConsumableCapacity, 1)],
        "{label}"
    );
    assert_eq!(pool.uses, Some(Mechanism::DraConsumableCapacity), "{label}");
    assert_eq!(
        (a.plan.gpus_in_use, a.plan.gpus_freed, a.plan.bound_gpus),
        (4, 2, 2),
        "{label}"
    );
    let steps: Vec<_> = a
        .recommendations
        .iter()
        .filter(|r| r.kind == RecKind::PerGpuSharing)
        .collect();
    assert_eq!(steps.len(), 1, "{label}");
    assert_eq!(steps[0].node, "l40s-solo");
    assert_eq!(step_claims(a).len(), 4, "{label}");
    let node = a.plan.nodes.iter().find(|n| n.node == "l40s-solo").unwrap();
    assert_eq!(node.sharing_after, "dra_consumable_capacity", "{label}");
}

/// `tests/scenarios/granted-shares.toml`: every pod counts the quarter of an H100 it was
/// granted in the funnel (about 12 of the 48 hours' GPU-hours), whatever the mechanism, and
/// the pool has the three mechanisms as seen.
pub(crate) fn granted_as_allocated(
    label: &str,
    a: &analytics::Analysis,
    key_name: &std::collections::HashMap<String, String>,
) {
    if !label.ends_with("granted-shares.toml") {
        return;
    }
    let hours = (a.funnel.to_ms - a.funnel.from_ms) as f64 / 3_600_000.0;
    let mut seen = 0;
    for row in &a.funnel.by_tenant {
        let Some(name) = key_name.get(&row.key) else {
            continue;
        };
        let share = row.allocated_gpu_hours / hours;
        assert!(
            (share - 0.25).abs() < 0.01,
            "{label}: {name} allocated {share:.3} of a GPU, granted a quarter"
        );
        seen += 1;
    }
    assert_eq!(seen, 7, "{label}: every granted pod in the funnel");
    assert!(
        (a.funnel.total.allocated_gpu_hours / hours - 7.0 * 0.25).abs() < 0.05,
        "{label}: {}",
        a.funnel.total.allocated_gpu_hours
    );
    assert_eq!(
        a.plan.pools[0].seen.len(),
        3,
        "{label}: {:?}",
        a.plan.pools[0].seen
    );
}
