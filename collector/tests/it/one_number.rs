//! One number per fact. An interference incident's contended time is the
//! same figure, in the same unit, on its finding and on the separation step that answers it
//! (the alert carries the finding's summary, the weekly report its `contended_hours`); a GPU
//! with unrecovered hardware errors that a step empties is not counted as freed, and the step
//! and the plan say so.

use analytics::Measure;
use analytics::{FindingKind, RecKind};

pub(crate) fn one_number_per_fact(label: &str, a: &analytics::Analysis) {
    for r in a
        .recommendations
        .iter()
        .filter(|r| r.kind == RecKind::Separate)
    {
        let f = a
            .findings
            .iter()
            .find(|f| r.findings.contains(&f.id) && f.kind == FindingKind::Interference)
            .unwrap_or_else(|| panic!("{label}: {} answers no interference finding", r.id));
        let said = analytics::finding::contended_hours(f.metrics[&Measure::ContendedHours]);
        assert!(f.summary.contains(&said), "{label}: {}", f.summary);
        assert!(
            r.summary.contains(&said),
            "{label}: {} vs {said}",
            r.summary
        );
        assert!(
            r.replay.gpus_freed <= 0.0,
            "{label}: a separation frees nothing"
        );
        assert_eq!(
            r.replay.gpus_freed < 0.0,
            r.summary.contains("takes idle GPU"),
            "{label}: {}",
            r.summary
        );
        assert!(!a.plan.steps.contains(&r.id), "{label}: beside the plan");
    }
    let held: Vec<_> = a
        .recommendations
        .iter()
        .filter(|r| r.summary.contains("not counted as freed until repaired"))
        .collect();
    assert!(held.len() <= a.plan.held_for_repair, "{label}");
    if label.ends_with("k8s-mixed.toml") {
        // The reserved L40S sits on GPU 3 of gpu-l40s-01, which fell off the bus (XID 79).
        assert_eq!(a.plan.held_for_repair, 1, "{label}");
        let [r] = held.as_slice() else {
            panic!("{label}: one step empties the faulty GPU: {held:?}")
        };
        assert_eq!(r.kind, RecKind::Reclaim);
        assert_eq!(r.replay.gpus_freed, 0.0);
        assert!(r.summary.contains("XID 79"), "{}", r.summary);
        assert!(
            a.recommendations
                .iter()
                .any(|r| r.kind == RecKind::Separate),
            "{label}: the demo separates its interfering pair"
        );
        // The DRA node's services, paired per GPU through consumable capacity: one step on
        // that node frees 2 of its 4 GPUs (the demo shows a per-GPU step).
        let per_gpu: Vec<_> = a
            .recommendations
            .iter()
            .filter(|r| r.kind == RecKind::PerGpuSharing)
            .collect();
        let [step] = per_gpu.as_slice() else {
            panic!("{label}: one per-GPU step: {per_gpu:?}")
        };
        assert_eq!(step.node, "gpu-l40s-dra-01", "{label}");
        assert_eq!(step.replay.gpus_freed, 2.0, "{}", step.summary);
        assert!(
            step.summary
                .contains("DRA consumable capacity pinned to a GPU")
                && step.summary.contains("4 ResourceClaims"),
            "{}",
            step.summary
        );
    }
}

/// What each per-GPU mechanism would leave in use, never below its bound, on every
/// scenario; and the counts `tests/scenarios/pinned-per-gpu.toml` works out.
pub(crate) fn per_gpu_worth_as_worked_out(label: &str, a: &analytics::Analysis) {
    use analytics::mechanism::Mechanism;
    for p in &a.plan.pools {
        assert_eq!(p.worth.len(), Mechanism::PER_GPU.len(), "{label}");
        for w in &p.worth {
            assert!(
                w.bound_gpus <= w.gpus_after,
                "{label}: {:?} bound {} above its plan {}",
                w.mechanism,
                w.bound_gpus,
                w.gpus_after
            );
            assert_eq!(
                w.beyond_plan,
                p.gpus_after as i64 - w.gpus_after as i64,
                "{label}"
            );
        }
    }
    if !label.ends_with("pinned-per-gpu.toml") {
        return;
    }
    let plan = &a.plan;
    assert_eq!((plan.gpus_in_use, plan.gpus_freed), (4, 0), "{label}");
    let after = |m: Mechanism| {
        plan.worth
            .iter()
            .find(|w| w.mechanism == m)
            .map(|w| (w.gpus_after, w.beyond_plan, w.own_gpu))
            .unwrap()
    };
    assert_eq!(
        after(Mechanism::DraConsumableCapacity),
        (2, 2, 0),
        "{label}"
    );
    // Two shared GPUs with consumable capacity: a claim for each of the four pods; one shared
    // claim (day-1 with night-1, both in api); placed by the scheduler, a claim for each of the
    // two pods that share (the other two keep a whole GPU).
    assert_eq!(claims_validate(label, a), 4 + 1 + 2, "{label}");
    assert_eq!(after(Mechanism::DraSharedClaim), (3, 1, 0), "{label}");
    for m in [
        Mechanism::DraConsumableScheduled,
        Mechanism::Hami,
        Mechanism::KaiFractions,
    ] {
        assert_eq!(after(m), (3, 1, 2), "{label}: {m:?}");
    }
}

/// The ResourceClaims of the pinned per-GPU plans of `a` validate against the Kubernetes
/// 1.34 and 1.36 schemas in strict mode (kubernetes-validate, in the Helm test's venv).
pub(crate) fn claims_validate(label: &str, a: &analytics::Analysis) -> usize {
    use analytics::mechanism::Mechanism;
    use analytics::plan::claims;
    let name = |k: &str| a.tenant_names.get(k).cloned().unwrap_or_default();
    let mut objects = Vec::new();
    for p in &a.plan.pools {
        for w in &p.worth {
            for g in &w.groups {
                for c in claims::resource_claims(w.mechanism, g, &name) {
                    assert!(
                        matches!(
                            w.mechanism,
                            Mechanism::DraSharedClaim | Mechanism::DraConsumableCapacity
                        ),
                        "{label}"
                    );
                    objects.push(c.object);
                }
            }
            if w.mechanism == Mechanism::DraConsumableScheduled {
                let (_, yaml) = claims::scheduled_requests(w.mechanism, &w.requests, &name);
                for doc in serde_yaml::Deserializer::from_str(&yaml) {
                    use serde::Deserialize;
                    objects.push(serde_json::Value::deserialize(doc).unwrap());
                }
            }
        }
    }
    validate_objects(label, &objects);
    objects.len()
}

/// `objects` validate against the Kubernetes 1.34 and 1.36 schemas in strict mode
/// (kubernetes-validate, in the Helm test's venv; skipped where it is not installed unless
/// `GPULENS_REQUIRE_HELM` is set).
pub(crate) fn validate_objects(label: &str, objects: &[serde_json::Value]) {
    let python = crate::helm::helm_python();
    let Some(python) = python.filter(|_| !objects.is_empty()) else {
        assert!(
            objects.is_empty() || std::env::var("GPULENS_REQUIRE_HELM").is_err(),
            "kubernetes-validate (target/helm-venv) is not installed"
        );
        return;
    };
    let dir = crate::support::TempDir::new("claims");
    let file = dir.path().join("claims.json");
    std::fs::write(&file, serde_json::to_vec(&objects).unwrap()).unwrap();
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(
            "import json, sys, kubernetes_validate as kv\n\
             bad = []\n\
             for o in json.load(open(sys.argv[1])):\n\
             \x20   for v in ('1.34.0', '1.36.0'):\n\
             \x20       try: kv.validate(o, v, strict=True)\n\
             \x20       except Exception as e: bad.append(f'{v} {o[\"metadata\"][\"name\"]}: {e}')\n\
             print('\\n'.join(bad)); sys.exit(1 if bad else 0)",
        )
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{label}: ResourceClaims refused: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// No step moves a tenant onto a GPU with unrecovered hardware errors (one that fell off the
/// bus, XID 79): the plan empties such a GPU and holds it for repair. On the demo's fleet the
/// reserved L40S sits on one, and the consolidation once placed a service there.
pub(crate) fn no_tenant_lands_on_a_faulty_gpu(
    label: &str,
    a: &analytics::Analysis,
    input: &analytics::Input,
) {
    let faulty: Vec<(&str, &str, i64)> = input
        .health
        .iter()
        .filter(|h| analytics::findings::unrecovered(h).is_some())
        .filter_map(|h| {
            let g = input.gpu(&h.gpu)?;
            Some((g.cluster.as_str(), g.node.as_str(), g.index))
        })
        .collect();
    for r in &a.recommendations {
        for m in r.moves() {
            assert!(
                !faulty.contains(&(r.cluster.as_str(), m.to_node.as_str(), m.to_gpu_index)),
                "{label}: {} moves {} onto GPU {} of {}, which has unrecovered hardware errors",
                r.id,
                m.tenant,
                m.to_gpu_index,
                m.to_node
            );
        }
    }
    if label.ends_with("k8s-mixed.toml") {
        assert!(!faulty.is_empty(), "{label}: the demo's faulty GPU");
    }
}
