//! Recommendations, each replayed against the recorded demand before it is made:
//! `reclaim`, `right_size`, `consolidate` with `time_slicing`/`mps`, `mig_layout` and
//! `separate`. Proposals whose replay predicts harm are reported as rejected, not made.

use crate::measure::Measure;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use model::figures::{self, count};

use crate::findings::{Ctx, Evidence, Finding, FindingKind, gib};
use crate::holdings::Holding;
use crate::input::GpuRef;
use crate::need::confidence;
use crate::plan::FleetPlan;
use crate::recommendation::rec_id;
pub use crate::recommendation::{
    Move, Proposal, RecKind, Recommendation, Rejected, Served, Target, config_name,
    device_plugin_config,
};
use crate::replay::{Replay, Slot, replay};
use crate::{steps, underutilized};

/// What the recommender produced, and the underutilized findings it confirms.
#[derive(Debug, Default)]
pub struct Output {
    pub plan: FleetPlan,
    pub recommendations: Vec<Recommendation>,
    pub rejected: Vec<Rejected>,
    pub underutilized: Vec<Finding>,
}

pub fn recommend(ctx: &Ctx, holdings: &[Holding], findings: &[Finding]) -> Output {
    let cfg = ctx.cfg;
    let mut out = Output::default();
    let (reclaims, reclaimed) = reclaims(ctx, holdings, findings);
    out.recommendations = reclaims;
    let eligible = |h: &Holding| h.allocated_hours() >= cfg.min_alloc_hours;

    let reclaim_ids: HashMap<(String, String), String> = out
        .recommendations
        .iter()
        .flat_map(|r| {
            r.gpus
                .iter()
                .map(move |g| ((g.clone(), r.tenants[0].clone()), r.id.clone()))
        })
        .collect();
    // Wasters are known before the plan (their finding ids are stable); the plan's steps
    // name them, and their findings name the step.
    let wasters: Vec<&Holding> = holdings
        .iter()
        .filter(|h| eligible(h) && !reclaimed.contains(&(h.gpu.as_str(), h.tenant.as_str())))
        .filter(|h| underutilized::is_waster(h, cfg))
        .collect();
    let waste_ids: HashMap<(String, String), String> = wasters
        .iter()
        .map(|h| {
            (
                (h.gpu.clone(), h.tenant.clone()),
                underutilized::finding_id_of(h, ctx),
            )
        })
        .collect();
    let fleet = steps::fleet(ctx, holdings, &reclaimed, &reclaim_ids, &waste_ids);
    out.recommendations.extend(fleet.recommendations);
    let named = step_names(&out.recommendations);
    count_freed(
        &mut out.recommendations,
        &fleet.freed_by,
        &named,
        &fleet.held,
    );
    say_held(ctx, &mut out.recommendations, &fleet.held);
    say_served(ctx, &mut out.recommendations, fleet.served);
    crate::requires::link_requirements(
        ctx,
        holdings,
        &mut out.recommendations,
        &reclaim_ids,
        &fleet.moves,
    );
    credit_needs_reclaims(&mut out.recommendations, &fleet.freed_by, &reclaim_ids);
    name_unblocked(&mut out.recommendations, &named);
    out.rejected.extend(fleet.rejected);
    out.underutilized = wasters
        .iter()
        .map(|h| {
            let planned = fleet.moves.get(&(h.gpu.clone(), h.tenant.clone()));
            let planned = planned.map(|(id, m)| (named.get(id).unwrap_or(id).as_str(), m));
            underutilized::finding(ctx, h, planned)
        })
        .collect();
    let moved: BTreeSet<String> = fleet.moves.keys().map(|k| k.1.clone()).collect();
    let freed: BTreeSet<&str> = fleet.freed_by.keys().map(String::as_str).collect();
    separate(ctx, holdings, findings, &moved, &freed, &mut out);
    crate::disrupts::fill(ctx, holdings, &mut out.recommendations);
    out.plan = fleet.plan;
    out.plan.steps = step_order(&out.recommendations);
    out
}

/// Reclaim: holdings idle nearly all the time they were allocated, one step per tenant and
/// node; and the (GPU, tenant) pairs they reclaim.
fn reclaims<'a>(
    ctx: &Ctx,
    holdings: &'a [Holding],
    findings: &[Finding],
) -> (Vec<Recommendation>, BTreeSet<(&'a str, &'a str)>) {
    let mut recs = Vec::new();
    let idle_ids: HashMap<(&str, &str), &str> = findings
        .iter()
        .filter(|f| f.kind == FindingKind::IdleAllocation)
        .filter_map(|f| {
            Some((
                (f.gpu.as_deref()?, f.tenants.first()?.as_str()),
                f.id.as_str(),
            ))
        })
        .collect();
    let cfg = ctx.cfg;
    let eligible = |h: &Holding| h.allocated_hours() >= cfg.min_alloc_hours;

    let mut reclaimed: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut by_tenant: BTreeMap<(&str, &str, &str), Vec<&Holding>> = BTreeMap::new();
    for h in holdings
        .iter()
        .filter(|h| eligible(h) && h.idle_ratio() >= cfg.reclaim_idle_share)
    {
        by_tenant
            .entry((&h.cluster, &h.node, &h.tenant))
            .or_default()
            .push(h);
    }
    for ((cluster, node, tenant), hs) in by_tenant {
        let freed: f64 = hs.iter().map(|h| h.share()).sum();
        let gpus: Vec<String> = hs.iter().map(|h| h.gpu.clone()).collect();
        let name = ctx.name(cluster, tenant);
        let mem = hs.iter().filter_map(|h| h.mem_p99()).max().unwrap_or(0);
        let ids: Vec<String> = hs
            .iter()
            .filter_map(|h| {
                idle_ids
                    .get(&(h.gpu.as_str(), tenant))
                    .map(|s| s.to_string())
            })
            .collect();
        let r = Replay {
            hours: hs.iter().map(|h| h.rows.len()).max().unwrap_or(0),
            gpus_freed: freed,
            ..Replay::default()
        };
        for h in &hs {
            reclaimed.insert((&h.gpu, &h.tenant));
        }
        recs.push(Recommendation {
            id: rec_id(RecKind::Reclaim, &format!("{node}/{tenant}")),
            kind: RecKind::Reclaim,
            cluster: cluster.into(),
            node: node.into(),
            gpus: gpus.clone(),
            tenants: vec![tenant.into()],
            team: ctx.team(cluster, tenant),
            summary: format!(
                "reclaim {name}'s allocation on {node}: idle {:.0} % of the {:.0} GPU-hours it held{}; releases {}",
                hs[0].idle_ratio() * 100.0,
                hs.iter().map(|h| h.allocated_hours()).sum::<f64>(),
                if mem > 0 { format!(" while keeping {:.1} GiB of memory", gib(mem as f64)) } else { String::new() },
                released(&hs)
            ),
            confidence: confidence(hs[0], cfg),
            findings: ids,
            proposal: Proposal::Reclaim { tenant: tenant.into(), gpus, gpu_equivalents: freed },
            replay: r,
            evidence: vec![Evidence::tenant("allocated share", "alloc_share", &hs[0].cluster, tenant, ctx.input.from_ms, ctx.input.to_ms)],
            requires: Vec::new(),
            serves: Vec::new(),
        interrupts: Vec::new(),
        held_out: None,
        ahead: None,
        });
    }

    (recs, reclaimed)
}

/// What a reclaim gives back, as people count it: whole GPUs by number ("its GPU", "its 2
/// GPUs"), a share of one in GPU-equivalents ("0.14 GPU").
fn released(holdings: &[&Holding]) -> String {
    if holdings.iter().all(|h| h.whole_gpu()) {
        match holdings.len() {
            1 => "its GPU".to_owned(),
            n => format!("its {n} GPUs"),
        }
    } else {
        figures::gpu(holdings.iter().map(|h| h.share()).sum())
    }
}

/// Each step's id → how the plan's text names it ([`RecKind::step_on`]).
fn step_names(recommendations: &[Recommendation]) -> HashMap<String, String> {
    recommendations
        .iter()
        .map(|r| (r.id.clone(), r.kind.step_on(&r.node)))
        .collect()
}

/// Each step frees the GPUs attributed to it, every freed GPU to exactly one step; the
/// summary says how many.
/// `named` is [`step_names`] of the same recommendations.
fn count_freed(
    recommendations: &mut [Recommendation],
    freed_by: &BTreeMap<String, String>,
    named: &HashMap<String, String>,
    held: &BTreeMap<String, (String, String)>,
) {
    let mut freed: HashMap<&str, usize> = HashMap::new();
    for id in freed_by.values() {
        *freed.entry(id.as_str()).or_default() += 1;
    }
    for r in recommendations.iter_mut() {
        let n = freed.get(r.id.as_str()).copied().unwrap_or(0);
        r.replay.gpus_freed = n as f64;
        let freed_with = r
            .gpus
            .iter()
            .find_map(|g| freed_by.get(g))
            .filter(|id| **id != r.id);
        r.summary.push_str(&match (r.kind, n) {
            (RecKind::Reclaim, 0) => match freed_with {
                Some(id) => format!(
                    "; its GPU is freed, and counted, by {}",
                    named.get(id).map_or(id.as_str(), String::as_str)
                ),
                // Its GPU is held for repair: say_held says so.
                None if r.gpus.iter().any(|g| held.contains_key(g)) => String::new(),
                None => {
                    "; frees no GPU by itself: the plan keeps that GPU in use for other tenants"
                        .to_owned()
                }
            },
            (RecKind::Reclaim, n) => format!(", freeing {}", count(n as f64, "GPU", "GPUs")),
            (_, n) => format!("; frees {}", count(n as f64, "GPU", "GPUs")),
        });
    }
}

/// A step credited with a GPU it empties requires the reclaims of that GPU's other tenants:
/// in the required order it is then the last step to leave the GPU empty, the step that frees
/// it (a notebook's reclaim listed after the MIG step credited with its GPU).
fn credit_needs_reclaims(
    recommendations: &mut [Recommendation],
    freed_by: &BTreeMap<String, String>,
    reclaim_ids: &HashMap<(String, String), String>,
) {
    let mut needs: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for ((gpu, _), reclaim) in reclaim_ids {
        if let Some(step) = freed_by.get(gpu)
            && step != reclaim
        {
            needs
                .entry(step.as_str())
                .or_default()
                .insert(reclaim.as_str());
        }
    }
    for r in recommendations.iter_mut() {
        let Some(more) = needs.get(r.id.as_str()) else {
            continue;
        };
        let mut all: BTreeSet<String> = r.requires.drain(..).collect();
        all.extend(more.iter().map(|s| (*s).to_owned()));
        r.requires = all.into_iter().collect();
    }
}

/// A step that empties a GPU with unrecovered hardware errors says it is not counted as freed
/// (such a GPU was priced as savings).
fn say_held(
    ctx: &Ctx,
    recommendations: &mut [Recommendation],
    held: &BTreeMap<String, (String, String)>,
) {
    for (gpu, (id, why)) in held {
        if let Some(r) = recommendations.iter_mut().find(|r| &r.id == id) {
            r.summary.push_str(&format!(
                "; {} it empties has unrecovered hardware errors ({why}): not counted as freed until repaired (see its hardware finding)",
                ctx.gpu_label(gpu)
            ));
        }
    }
}

/// A step that serves waiting work carries it (`serves`) and says so: the GPUs it empties
/// serve the pool's pending pods before any is counted as freed, and a MIG layout keeps the
/// instances they wait for.
fn say_served(ctx: &Ctx, recommendations: &mut [Recommendation], served: Vec<(String, Served)>) {
    for (id, s) in served {
        let Some(r) = recommendations.iter_mut().find(|r| r.id == id) else {
            continue;
        };
        let waited = (ctx.input.to_ms - s.since_ms).max(0) as f64 / 3_600_000.0;
        let kept = match &s.profile {
            Some(p) => format!("a {p} instance on {}", ctx.gpu_label(&s.gpu)),
            None => ctx.gpu_label(&s.gpu),
        };
        r.summary.push_str(&format!(
            "; keeps {kept} for {} (pending {waited:.0} h for {})",
            s.pod, s.resource
        ));
        r.serves.push(s);
    }
}

/// The plan's steps in the order they can be carried out: a step never before a step it
/// requires; among those ready, most GPUs freed first (separations are advice beside the
/// plan). A cycle of requirements (none is planned) keeps the preference order.
pub(crate) fn step_order(recommendations: &[Recommendation]) -> Vec<String> {
    let mut steps: Vec<&Recommendation> = recommendations
        .iter()
        .filter(|r| r.kind != RecKind::Separate)
        .collect();
    steps.sort_by(|a, b| {
        b.replay
            .gpus_freed
            .total_cmp(&a.replay.gpus_freed)
            .then(a.id.cmp(&b.id))
    });
    let known: HashSet<&str> = steps.iter().map(|r| r.id.as_str()).collect();
    let mut placed: HashSet<&str> = HashSet::new();
    let mut out = Vec::with_capacity(steps.len());
    while out.len() < steps.len() {
        let ready = |r: &&&Recommendation| {
            !placed.contains(r.id.as_str())
                && r.requires
                    .iter()
                    .all(|q| !known.contains(q.as_str()) || placed.contains(q.as_str()))
        };
        let next = steps
            .iter()
            .find(ready)
            .or_else(|| steps.iter().find(|r| !placed.contains(r.id.as_str())))
            .expect("a step is left");
        placed.insert(next.id.as_str());
        out.push(next.id.clone());
    }
    out
}

/// A step that frees no GPU itself but that others require says which (a reclaim
/// the MIG layout needed read as "frees no GPU by itself" and was carried out last).
fn name_unblocked(recommendations: &mut [Recommendation], named: &HashMap<String, String>) {
    let mut needed_by: HashMap<String, Vec<String>> = HashMap::new();
    for r in recommendations.iter() {
        for q in &r.requires {
            needed_by
                .entry(q.clone())
                .or_default()
                .push(named.get(&r.id).cloned().unwrap_or_else(|| r.id.clone()));
        }
    }
    for r in recommendations.iter_mut() {
        if let Some(by) = needed_by.get_mut(&r.id) {
            by.sort();
            by.dedup();
            let who = match by.as_slice() {
                [one] => format!("{one} needs"),
                [rest @ .., last] => format!("{} and {last} need", rest.join(", ")),
                [] => continue,
            };
            r.summary.push_str(&format!("; {who} it carried out first"));
        }
    }
}

/// Separate interfering tenants: move the aggressor to the GPU of the same node where replay
/// predicts the least contention.
fn separate(
    ctx: &Ctx,
    holdings: &[Holding],
    findings: &[Finding],
    moved: &BTreeSet<String>,
    freed: &BTreeSet<&str>,
    out: &mut Output,
) {
    let cfg = ctx.cfg;
    let mut seen = BTreeSet::new();
    for f in findings
        .iter()
        .filter(|f| f.kind == FindingKind::Interference)
    {
        let (Some(gpu), [victim, aggressor, ..]) = (f.gpu.as_deref(), f.tenants.as_slice()) else {
            continue;
        };
        if !seen.insert((gpu, victim.as_str(), aggressor.as_str())) {
            continue;
        }
        // The plan moves one of them already: its step is the answer.
        if moved.contains(victim) || moved.contains(aggressor) {
            continue;
        }
        let on = |g: &str| -> Vec<&Holding> {
            holdings
                .iter()
                .filter(|h| h.gpu == g && h.total.alloc_n > 0)
                .collect()
        };
        let Some(a) = holdings
            .iter()
            .find(|h| h.gpu == gpu && &h.tenant == aggressor)
        else {
            continue;
        };
        let here = on(gpu);
        let Some(src) = ctx.gpu(gpu) else {
            continue;
        };
        // Never onto a GPU the plan frees (a separation filled a GPU the plan's
        // steps empty, and applying both freed one GPU less than the plan said).
        let best = quietest_gpu(ctx, f, &here, a, src, &on, freed);
        let (vn, an) = (
            ctx.name(&f.cluster, victim),
            ctx.name(&f.cluster, aggressor),
        );
        match best {
            Some((mut r, g)) if !r.harmful => {
                // The incident's contended time, as the finding measured it (one figure on
                // the finding, this step, its alert and the report).
                let contended = f.metrics.get(&Measure::ContendedHours).copied().unwrap_or(0.0);
                let idle = on(&g.uuid).is_empty();
                if idle {
                    r.gpus_freed = -1.0;
                }
                out.recommendations.push(Recommendation {
                    id: rec_id(RecKind::Separate, &format!("{gpu}/{victim}/{aggressor}")),
                    kind: RecKind::Separate,
                    cluster: f.cluster.clone(),
                    node: f.node.clone(),
                    gpus: vec![gpu.into(), g.uuid.clone()],
                    tenants: vec![victim.clone(), aggressor.clone()],
                    // The team that acts: the aggressor's workload is the one moved.
                    team: ctx.team(&f.cluster, aggressor),
                    summary: format!(
                        "move {an} from GPU {} to GPU {} of {}: {vn}, slowed during {}, then runs without it{}{}",
                        src.index, g.index, f.node, crate::finding::contended_hours(contended),
                        if r.contention_hours_after > 0.0 {
                            format!(" (replay still predicts {:.0} contended tenant-hours on the two GPUs)", r.contention_hours_after)
                        } else {
                            String::new()
                        },
                        if idle {
                            format!("; takes idle GPU {} into use: beside the plan, one GPU more in use than the plan counts", g.index)
                        } else {
                            String::new()
                        }
                    ),
                    confidence: confidence(a, cfg),
                    findings: vec![f.id.clone()],
                    proposal: Proposal::Separate {
                        victim: victim.clone(),
                        aggressor: aggressor.clone(),
                        plan: format!("reschedule {an} onto GPU {} ({})", g.index, g.uuid),
                        moves: vec![Move { tenant: aggressor.clone(), from_gpu: gpu.into(), from_node: f.node.clone(), from_gpu_index: src.index, to_node: f.node.clone(), to_gpu_index: g.index, target: Target::Share { replicas: g.replicas.max(1) as u32 } }],
                    },
                    replay: r,
                    evidence: f.evidence.clone(),
                    requires: Vec::new(),
                    serves: Vec::new(),
        interrupts: Vec::new(),
        held_out: None,
        ahead: None,
                });
            }
            other => out.rejected.push(Rejected {
                kind: RecKind::Separate,
                cluster: f.cluster.clone(),
                node: f.node.clone(),
                tenants: vec![victim.clone(), aggressor.clone()],
                reason: match &other {
                    Some((r, g)) => format!("moving {an} to GPU {}: {}", g.index, r.reason.clone().unwrap_or_default()),
                    None => format!("no other GPU of {} would take {an} without more contention; consider another node or off-peak scheduling", f.node),
                },
                replay: other.map(|o| o.0),
            }),
        }
    }
}

/// The GPU of the finding's node (same sharing) that takes the aggressor `a` with the least
/// contention replay predicts, if any lowers it.
fn quietest_gpu<'a>(
    ctx: &'a Ctx,
    f: &Finding,
    here: &[&'a Holding],
    a: &'a Holding,
    src: &'a GpuRef,
    on: &dyn Fn(&str) -> Vec<&'a Holding>,
    freed: &BTreeSet<&str>,
) -> Option<(Replay, &'a GpuRef)> {
    let cfg = ctx.cfg;
    let gpu = src.uuid.as_str();
    let mem = |g: &GpuRef| g.memory_total_bytes as f64;
    let mut best: Option<(Replay, &GpuRef)> = None;
    for g in ctx.input.gpus.iter().filter(|g| {
        g.node == f.node
            && g.cluster == f.cluster
            && g.uuid != gpu
            && g.sharing == src.sharing
            && !freed.contains(g.uuid.as_str())
    }) {
        let there = on(&g.uuid);
        let before = vec![
            Slot {
                compute: 1.0,
                memory_bytes: mem(src),
                holdings: here.to_vec(),
            },
            Slot {
                compute: 1.0,
                memory_bytes: mem(g),
                holdings: there.clone(),
            },
        ];
        let mut moved = there.clone();
        moved.push(a);
        let after = vec![
            Slot {
                compute: 1.0,
                memory_bytes: mem(src),
                holdings: here
                    .iter()
                    .copied()
                    .filter(|h| h.tenant != a.tenant)
                    .collect(),
            },
            Slot {
                compute: 1.0,
                memory_bytes: mem(g),
                holdings: moved,
            },
        ];
        let r = replay(&before, &after, 0.0, cfg.replay_tolerance);
        // Least contention after; at equal contention a GPU already in use before an idle one
        // (taking an idle GPU into use costs the GPU, which the step must then say).
        let rank = |r: &Replay, idle: bool| (r.contention_hours_after, idle);
        let idle = there.is_empty();
        if r.contention_hours_after < r.contention_hours_before
            && best.as_ref().is_none_or(|b| {
                rank(&r, idle).partial_cmp(&rank(&b.0, on(&b.1.uuid).is_empty()))
                    == Some(std::cmp::Ordering::Less)
            })
        {
            best = Some((r, g));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::mig::MigPartedEntry;
    use crate::need::plan_confidence;

    fn entry(devices: Vec<i64>, layout: &[(&str, u32)]) -> MigPartedEntry {
        MigPartedEntry {
            devices,
            mig_enabled: !layout.is_empty(),
            mig_devices: layout.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect(),
        }
    }

    fn held(share: f64) -> Holding {
        Holding {
            cluster: "c".into(),
            node: "n".into(),
            gpu: "GPU-1".into(),
            tenant: "pod/a".into(),
            total: model::rollup::TenantAgg {
                alloc_n: 7,
                alloc_share_sum: 7.0 * share,
                ..Default::default()
            },
            rows: Vec::new(),
        }
    }

    /// A reclaim of whole GPUs counts them ("releases 1.00 GPU" read as a measurement); a
    /// share of one is in GPU-equivalents.
    #[test]
    fn a_reclaim_says_what_it_gives_back_as_people_count_it() {
        let (whole, slice) = (held(1.0), held(1.0 / 7.0));
        assert_eq!(released(&[&whole]), "its GPU");
        assert_eq!(released(&[&whole, &whole]), "its 2 GPUs");
        assert_eq!(released(&[&slice]), "0.14 GPU");
        assert_eq!(released(&[&whole, &slice]), "1.14 GPU");
    }

    #[test]
    fn mig_config_names_follow_the_layout() {
        let a = vec![entry(vec![0, 1], &[("1g.10gb", 7)]), entry(vec![2], &[])];
        let b = vec![entry(vec![0, 1], &[("1g.10gb", 6)]), entry(vec![2], &[])];
        let name = config_name(&a);
        assert_eq!(name, config_name(&a.clone()));
        assert_ne!(name, config_name(&b));
        assert!(name.starts_with("gpulens-mig-"));
        model::labels::check_value(model::labels::OPERATOR_MIG_CONFIG, &name).unwrap();
        // Stable across builds: the same layout names the same config next week (value
        // computed independently with FNV-1a 64 over the canonical text).
        assert_eq!(name, "gpulens-mig-e44dc1150d6e");
    }

    /// A mig_layout's confidence fell to 0.03 because one short-lived pod on the
    /// node lacked data, while the tenants it moved had a day of it.
    #[test]
    fn a_plan_is_as_sure_as_the_tenants_it_moves() {
        use model::rollup::TenantAgg;
        let hour = TenantAgg {
            samples: 60,
            covered_s: 3600.0,
            alloc_n: 60,
            alloc_share_sum: 60.0,
            eff_n: 60,
            eff_dcgm_n: 60,
            ..TenantAgg::default()
        };
        let holding = |tenant: &str, hours: i64| Holding {
            cluster: "c".into(),
            node: "n".into(),
            gpu: format!("GPU-{tenant}"),
            tenant: tenant.into(),
            total: hour.clone(),
            rows: (0..hours)
                .map(|i| (i * 3_600_000, (&hour).into()))
                .collect(),
        };
        let cfg = Config::default();
        let (steady, other, brief) = (holding("a", 48), holding("b", 48), holding("new", 1));
        let live = [&steady, &other, &brief];
        let moved = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(plan_confidence(&live, &moved, &cfg), 1.0);
        // Moving the brief one too costs little: it holds one GPU-hour of 97.
        let all = vec!["a".to_owned(), "b".to_owned(), "new".to_owned()];
        let c = plan_confidence(&live, &all, &cfg);
        assert!(c > 0.95 && c < 1.0, "{c}");
        assert!(confidence(&brief, &cfg) < 0.1);
    }

    fn step(kind: RecKind, id: &str, node: &str, gpu: &str) -> Recommendation {
        Recommendation {
            id: id.into(),
            kind,
            cluster: "c".into(),
            node: node.into(),
            gpus: vec![gpu.into()],
            tenants: Vec::new(),
            team: None,
            summary: id.into(),
            confidence: 1.0,
            findings: Vec::new(),
            proposal: Proposal::Reclaim {
                tenant: String::new(),
                gpus: Vec::new(),
                gpu_equivalents: 0.0,
            },
            replay: Replay::default(),
            evidence: Vec::new(),
            requires: Vec::new(),
            serves: Vec::new(),
            interrupts: Vec::new(),
            held_out: None,
            ahead: None,
        }
    }

    /// Every freed GPU is counted by one step, and a reclaim whose GPU another step frees
    /// names that step as people read the plan, not by its id.
    #[test]
    fn a_reclaim_names_the_step_that_frees_its_gpu() {
        let mut recs = vec![
            step(RecKind::MigLayout, "mig_layout-1", "gpu-h100-01", "GPU-a"),
            step(RecKind::Reclaim, "reclaim-1", "gpu-h100-01", "GPU-a"),
            step(RecKind::Reclaim, "reclaim-2", "gpu-l40s-01", "GPU-b"),
            step(RecKind::Reclaim, "reclaim-3", "gpu-l40s-01", "GPU-c"),
        ];
        let freed_by: BTreeMap<String, String> = [
            ("GPU-a".to_owned(), "mig_layout-1".to_owned()),
            ("GPU-x".to_owned(), "mig_layout-1".to_owned()),
            ("GPU-b".to_owned(), "reclaim-2".to_owned()),
        ]
        .into();
        let named = step_names(&recs);
        count_freed(&mut recs, &freed_by, &named, &BTreeMap::new());
        let freed: Vec<f64> = recs.iter().map(|r| r.replay.gpus_freed).collect();
        assert_eq!(freed, [2.0, 0.0, 1.0, 0.0]);
        assert_eq!(recs[0].summary, "mig_layout-1; frees 2 GPUs");
        assert_eq!(
            recs[1].summary,
            "reclaim-1; its GPU is freed, and counted, by the MIG layout step on gpu-h100-01"
        );
        assert_eq!(recs[2].summary, "reclaim-2, freeing 1 GPU");
        assert_eq!(
            recs[3].summary,
            "reclaim-3; frees no GPU by itself: the plan keeps that GPU in use for other tenants"
        );
    }
}
