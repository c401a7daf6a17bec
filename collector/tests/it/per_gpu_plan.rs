//! A pool that has a per-GPU mechanism pinning groups gets a plan under it — its
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
/// live collector's window ends inside an hour, no finding ends after the window (an
/// underutilized finding must not end after the analysis that made it).
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
    // Having both, the plan takes the one that frees more.
    let a = plan_with(
        label,
        input,
        &[Mechanism::DraSharedClaim, Mechanism::DraConsumableCapacity],
    );
    assert_eq!(a.plan.pools[0].uses, Some(Mechanism::DraConsumableCapacity));
    assert_eq!(a.plan.gpus_freed, 2, "{label}");
    // Placed by a scheduler within memory requests: one day tenant and one night tenant keep a
    // GPU of their own (a placement beside them could contend), the other pair shares: 1 freed,
    // under each scheduler-placed mechanism, with the requests each takes.
    for (m, marker) in [
        (Mechanism::Hami, "hami.io/gpu-scheduler-policy"),
        (Mechanism::KaiFractions, "schedulerName"),
        (Mechanism::DraConsumableScheduled, "capacity"),
    ] {
        let a = plan_with(label, input, &[m]);
        assert_eq!(
            (a.plan.pools[0].uses, a.plan.gpus_freed),
            (Some(m), 1),
            "{label} {m:?}"
        );
        let w = a.plan.pools[0]
            .worth
            .iter()
            .find(|w| w.mechanism == m)
            .unwrap();
        assert_eq!((w.gpus_after, w.own_gpu), (3, 2), "{label} {m:?}");
        let steps: Vec<_> = a
            .recommendations
            .iter()
            .filter(|r| r.kind == RecKind::PerGpuSharing)
            .collect();
        assert_eq!(steps.len(), 1, "{label} {m:?}");
        let analytics::Proposal::PerGpu { objects_yaml, .. } = &steps[0].proposal else {
            panic!("{label} {m:?}: {:?}", steps[0].proposal);
        };
        assert!(
            objects_yaml.contains(marker),
            "{label} {m:?}: {objects_yaml}"
        );
        assert!(
            objects_yaml.contains("keeps nvidia.com/gpu: 1"),
            "{label} {m:?}: a tenant that must run alone keeps its GPU: {objects_yaml}"
        );
        assert!(
            steps[0]
                .summary
                .contains("any placement the requests allow holds"),
            "{}",
            steps[0].summary
        );
        println!("{label}: under {m:?}: {}", steps[0].summary);
        // No node selector: the scheduler picks where each pod runs.
        for i in &steps[0].interrupts {
            let change = i.change.as_deref().unwrap_or_default();
            assert!(!change.contains("nodeSelector"), "{label} {m:?}: {change}");
        }
        if m == Mechanism::DraConsumableScheduled {
            crate::one_number::validate_objects(label, &step_claims(&a));
        }
    }
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
    assert_eq!(
        node.sharing_after.as_str(),
        "dra_consumable_capacity",
        "{label}"
    );
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

/// A MIG layout on a pool with DRA DynamicMIG is carried out by claims: the same GPUs freed,
/// each MIG move a ResourceClaim of class `mig.nvidia.com` for its profile on its GPU, no node
/// drained, and the claims valid against the Kubernetes schemas. Checked on every scenario
/// whose plan has a mig-parted step and no waiting work.
pub(crate) fn mig_layouts_under_dynamic_mig(
    label: &str,
    input: &analytics::Input,
    a: &analytics::Analysis,
) {
    let mig_steps = a
        .recommendations
        .iter()
        .filter(|r| matches!(r.proposal, analytics::Proposal::MigLayout { .. }))
        .count();
    if mig_steps == 0 || a.recommendations.iter().any(|r| !r.serves.is_empty()) {
        return;
    }
    let clusters: std::collections::BTreeSet<&str> =
        input.nodes.iter().map(|n| n.cluster.as_str()).collect();
    let mut cfg = analytics::Config::default();
    for c in clusters {
        cfg.mechanisms
            .insert(c.into(), vec![Mechanism::DraDynamicMig]);
    }
    let d = analytics::analyze(input, &cfg).unwrap();
    assert_eq!(d.plan.gpus_freed, a.plan.gpus_freed, "{label}");
    assert_eq!(
        crate::plan_totals::applied_frees(&d, input),
        d.plan.gpus_freed as i64,
        "{label}: under DynamicMIG"
    );
    let mut carved = 0;
    for r in d
        .recommendations
        .iter()
        .filter(|r| r.kind == RecKind::MigLayout)
    {
        let analytics::Proposal::PerGpu { mechanism, .. } = &r.proposal else {
            panic!(
                "{label}: {} keeps a mig-parted config under DynamicMIG",
                r.id
            );
        };
        assert_eq!(*mechanism, Mechanism::DraDynamicMig, "{label}");
        assert!(r.summary.contains("not drained"), "{}", r.summary);
        assert!(
            r.interrupts
                .iter()
                .all(|i| i.how != analytics::disrupts::Disruption::Drained),
            "{label}: {} drains its node",
            r.id
        );
        let mig_moves = r
            .moves()
            .iter()
            .filter(|m| matches!(m.target, analytics::recommend::Target::Mig { .. }))
            .count();
        carved += mig_moves;
    }
    let claims = step_claims(&d);
    assert_eq!(claims.len(), carved, "{label}: a claim per MIG move");
    assert!(carved > 0, "{label}");
    for c in &claims {
        let req = &c["spec"]["devices"]["requests"][0]["exactly"];
        assert_eq!(req["deviceClassName"], "mig.nvidia.com", "{c}");
        let cel = req["selectors"][0]["cel"]["expression"].as_str().unwrap();
        assert!(
            cel.contains(".profile == ") && cel.contains(".parentUUID == \"GPU-"),
            "{cel}"
        );
    }
    crate::one_number::validate_objects(label, &claims);
    println!("{label}: under DynamicMIG, {carved} MIG instances carved by claims");
    let pool = d.plan.pools.iter().find(|p| p.uses.is_some()).unwrap();
    assert_eq!(pool.uses, Some(Mechanism::DraDynamicMig), "{label}");
}
