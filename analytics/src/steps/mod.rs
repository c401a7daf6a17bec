//! A pool's plan as approvable steps: one recommendation per node the plan changes
//! (`mig_layout`, `time_slicing`/`mps`, or `consolidate` when only tenants move), each with
//! its moves, its replay, and the GPUs it frees — every freed GPU counted by exactly one step,
//! so steps add up to the plan's total.

mod node;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use model::figures::count;

use crate::findings::Ctx;
use crate::holdings::Holding;
use crate::input::GpuRef;
use crate::mechanism::{Chooser, Mechanism};
use crate::plan::{
    self, Fit, FleetPlan, NodeAfter, NodePlan, Placed, PoolLayout, PoolPlan, SharingAfter,
};
use crate::recommendation::{Move, Proposal, RecKind, Recommendation, Rejected, Served};

/// What one pool's steps come to.
#[derive(Debug, Default)]
pub struct PoolSteps {
    pub recommendations: Vec<Recommendation>,
    /// Tenants (GPU, key) of steps replay called harmful: the plan is made again without
    /// moving them.
    pub harmful: Vec<(String, String)>,
    /// Freed GPU → the id of the step that frees it.
    pub freed_by: BTreeMap<String, String>,
    /// GPUs a step empties that are not counted as freed: GPU → (step id, why).
    pub held: BTreeMap<String, (String, String)>,
    /// Waiting work the plan serves, with the id of the step that serves it.
    pub served: Vec<(String, Served)>,
    pub pool: PoolPlan,
    pub nodes: Vec<NodePlan>,
}

/// Each node's step (into `out`, or its tenants into `out.harmful` where replay calls it
/// harmful), and the id of the step of each node that has one.
fn node_steps<'a>(
    ctx: &Ctx,
    pool: &PoolLayout<'a>,
    waste_ids: &HashMap<(String, String), String>,
    dynamic_mig: bool,
    out: &mut PoolSteps,
) -> BTreeMap<&'a str, String> {
    let mut step_of_node = BTreeMap::new();
    if !pool.changes {
        return step_of_node;
    }
    for node in &pool.nodes {
        if let Some(step) = node::node_step(ctx, pool, node, waste_ids, dynamic_mig) {
            if step.rec.replay.harmful {
                out.harmful.extend(step.moved);
                continue;
            }
            step_of_node.insert(node.node, step.rec.id.clone());
            out.recommendations.push(step.rec);
        }
    }
    step_of_node
}

/// Steps for one pool: under node-wide sharing, or — where the pool has a per-GPU mechanism
/// that pins groups and a plan under it frees more — under that mechanism
/// ([`plan::relay`]); what every per-GPU mechanism would free is stated against the plan
/// made.
pub fn pool_steps(
    ctx: &Ctx,
    pool: &PoolLayout,
    reclaim_ids: &HashMap<(String, String), String>,
    waste_ids: &HashMap<(String, String), String>,
) -> PoolSteps {
    let node_wide = layout_steps(ctx, pool, reclaim_ids, waste_ids, None);
    let best = node_wide
        .pool
        .worth
        .iter()
        .filter(|w| {
            w.pools_with > 0
                && w.beyond_plan > 0
                && matches!(
                    w.mechanism.declared().chooser,
                    Chooser::PlanPerGpu | Chooser::SchedulerWithinLimits
                )
        })
        // The fewest GPUs after; between equals, a pinned plan (the plan knows each GPU's group).
        .min_by_key(|w| (w.gpus_after, w.mechanism.placed_by_scheduler()));
    let Some(m) = best.map(|w| w.mechanism) else {
        return node_wide;
    };
    let Some(relaid) = plan::relay(ctx, pool, m) else {
        return node_wide;
    };
    let mut per_gpu = layout_steps(ctx, &relaid, reclaim_ids, waste_ids, Some(&node_wide.pool));
    if !per_gpu.harmful.is_empty() || per_gpu.pool.gpus_freed <= node_wide.pool.gpus_freed {
        return node_wide;
    }
    per_gpu.pool.uses = Some(m);
    let price = pool.price_per_month(ctx.cfg);
    plan::pergpu::rebase(
        &mut per_gpu.pool.worth,
        per_gpu.pool.gpus_after,
        price,
        Some(m),
    );
    per_gpu
}

/// Steps for one laid-out pool; `node_wide`: the pool's node-wide plan, where this layout is
/// one under a per-GPU mechanism (its worth is kept, and its bound is the per-GPU one).
fn layout_steps(
    ctx: &Ctx,
    pool: &PoolLayout,
    reclaim_ids: &HashMap<(String, String), String>,
    waste_ids: &HashMap<(String, String), String>,
    node_wide: Option<&PoolPlan>,
) -> PoolSteps {
    let (cfg, places) = (ctx.cfg, pool.item_places());
    let mut out = PoolSteps::default();
    // What the pool has in place; where its GPUs can be carved at allocation (DynamicMIG), a
    // MIG layout is carried out by claims.
    let (has, seen) = plan::pergpu::in_place(ctx, pool);
    let dynamic_mig = has.contains(&Mechanism::DraDynamicMig);
    let step_of_node = node_steps(ctx, pool, waste_ids, dynamic_mig, &mut out);
    let mut used_after = pool.used_after();
    let (places, step_of_node) = (&places, &step_of_node);
    let who = crate::freed::Steps {
        places,
        step_of_node,
        reclaim_ids,
    };
    let accounted = crate::freed::account(ctx, pool, &who, &mut used_after);
    let repair = accounted.repair;
    (out.freed_by, out.held, out.served) = (accounted.freed_by, accounted.held, accounted.served);
    out.nodes = node_plans(ctx, pool, places, &used_after, &repair, node_wide.is_some());
    let all: Vec<usize> = (0..pool.items.len()).collect();
    let fixed = pool.fixed_gpus.len();
    let in_use = pool.in_use.len();
    let after = used_after.len();
    // GPUs kept whole for waiting work share with no one: they add to the bound.
    let kept_whole = pool
        .kept_for_waiting()
        .iter()
        .filter(|(_, b)| pool.bins[*b].fit == Fit::Whole)
        .count();
    let mut bound = (pool.bound_of(cfg, &all, fixed) + repair.len() + kept_whole).min(in_use);
    let nodes_in_use = out.nodes.len();
    let nodes_after = out.nodes.iter().filter(|n| n.gpus_after > 0).count();
    let freed = in_use.saturating_sub(after);
    let worth = match node_wide {
        Some(p) => {
            // Under pinned groups the bound is the per-GPU one (the fewest GPUs any per-GPU
            // packing needs), where it is lower.
            let per_gpu = p.worth.iter().map(|w| w.bound_gpus).min().unwrap_or(bound);
            bound = bound.min(per_gpu).min(after);
            p.worth.clone()
        }
        None => plan::pergpu::worth(ctx, pool, in_use, after, repair.len(), &has),
    };
    out.pool = PoolPlan {
        cluster: pool.cluster.into(),
        model: pool.model.into(),
        nodes: pool.nodes.len(),
        gpus_in_use: in_use,
        bound_gpus: bound,
        gpus_after: after,
        gpus_freed: freed,
        nodes_in_use,
        nodes_freed: nodes_in_use - nodes_after,
        efficiency: plan::efficiency(in_use, bound, freed),
        money_per_month: freed as f64 * pool.price_per_month(cfg),
        held_for_repair: repair.len(),
        worth,
        has,
        seen,
        // A MIG layout carried out by DynamicMIG claims uses it (a per-GPU plan says its own).
        uses: out.recommendations.iter().find_map(|r| match r.proposal {
            Proposal::PerGpu {
                mechanism: m @ Mechanism::DraDynamicMig,
                ..
            } => Some(m),
            _ => None,
        }),
    };
    out
}

/// Each node's numbers after the pool's plan (`per_gpu`: a layout under a per-GPU mechanism).
fn node_plans(
    ctx: &Ctx,
    pool: &PoolLayout,
    places: &HashMap<usize, (&str, &GpuRef)>,
    used_after: &BTreeSet<&str>,
    repair: &BTreeMap<&str, String>,
    per_gpu: bool,
) -> Vec<NodePlan> {
    let cfg = ctx.cfg;
    let mut out = Vec::new();
    let fixed_on = |n: &NodeAfter| {
        n.placed
            .iter()
            .filter(|p| **p == Some(Placed::Fixed))
            .count()
    };
    let in_use_on = |n: &NodeAfter| {
        n.gpus
            .iter()
            .filter(|g| pool.in_use.contains(g.uuid.as_str()))
            .count()
    };
    // Nodes that send or receive tenants across nodes: their own numbers say little alone.
    let crossing: BTreeSet<&str> = places
        .iter()
        .filter(|(i, (node, _))| pool.items[**i].h.node != *node)
        .flat_map(|(i, (node, _))| [*node, pool.items[*i].h.node.as_str()])
        .collect();
    for n in &pool.nodes {
        let items: Vec<usize> = (0..pool.items.len())
            .filter(|&i| pool.items[i].h.node == n.node)
            .collect();
        let in_use = in_use_on(n);
        if in_use == 0 {
            continue;
        }
        let after = n
            .gpus
            .iter()
            .filter(|g| used_after.contains(g.uuid.as_str()))
            .count();
        // A GPU held for repair stays counted after the plan: the bound counts it too.
        let held_here = n
            .gpus
            .iter()
            .filter(|g| repair.contains_key(g.uuid.as_str()))
            .count();
        let mut bound = (pool.bound_of(cfg, &items, fixed_on(n)) + held_here).min(in_use);
        if per_gpu {
            // The node-wide rules' bound does not hold for pinned groups: none fewer is known
            // than the plan reaches.
            bound = bound.min(after);
        }
        out.push(NodePlan {
            cluster: pool.cluster.into(),
            node: n.node.into(),
            model: pool.model.into(),
            gpus_in_use: in_use,
            bound_gpus: bound,
            gpus_after: after,
            efficiency: if pool.changes && crossing.contains(n.node) {
                None
            } else {
                plan::efficiency(in_use, bound, in_use.saturating_sub(after))
            },
            sharing_after: if after == 0 {
                SharingAfter::Empty
            } else if pool.changes {
                node::sharing_after(pool, n)
            } else {
                SharingAfter::Unchanged
            },
        });
    }
    out
}

/// The fleet plan and its steps.
#[derive(Debug, Default)]
pub struct FleetSteps {
    pub recommendations: Vec<Recommendation>,
    pub rejected: Vec<Rejected>,
    /// Freed GPU → the step that frees it (reclaims included).
    pub freed_by: BTreeMap<String, String>,
    /// Emptied GPUs held for repair → (the step that empties it, why).
    pub held: BTreeMap<String, (String, String)>,
    /// Waiting work the plan serves, with the step serving it.
    pub served: Vec<(String, Served)>,
    pub plan: FleetPlan,
    /// Where the plan puts each tenant it moves: (from GPU, tenant) → (step id, move).
    pub moves: HashMap<(String, String), (String, Move)>,
}

/// A pairing the packer refused, as people read it.
fn refused(layout: &PoolLayout, refusal: &plan::Refusal) -> Rejected {
    let it = &layout.items[refusal.item];
    let others: Vec<String> = refusal
        .bin
        .iter()
        .map(|&j| layout.items[j].h.tenant.clone())
        .collect();
    let why = if refusal.contended.is_finite() {
        format!(
            "by the needs they fit, but replayed hour by hour their demand collides in {} (more than the replay tolerates)",
            count(refusal.contended, "hour", "hours")
        )
    } else {
        "replayed hour by hour their memory would overflow".to_owned()
    };
    let reason = format!(
        "{} would share a GPU with {}: {why}; kept apart",
        it.h.tenant,
        others.join(", ")
    );
    let mut tenants = vec![it.h.tenant.clone()];
    tenants.extend(others);
    Rejected {
        kind: RecKind::TimeSlicing,
        cluster: layout.cluster.into(),
        node: it.h.node.clone(),
        tenants,
        reason,
        replay: None,
    }
}

/// The most times the plan is made again after replay refused a step (each time without
/// moving that step's tenants).
const MAX_TRIES: usize = 8;

/// Plans every pool, turns each into steps, and totals the fleet. A step whose replay
/// predicts harm (it should not: the packer checks the same hours) sends its tenants back to
/// where they are, and the plan is made again.
pub fn fleet(
    ctx: &Ctx,
    holdings: &[Holding],
    reclaimed: &BTreeSet<(&str, &str)>,
    reclaim_ids: &HashMap<(String, String), String>,
    waste_ids: &HashMap<(String, String), String>,
) -> FleetSteps {
    let cfg = ctx.cfg;
    let mut fixed: BTreeSet<(String, String)> = BTreeSet::new();
    let mut out = FleetSteps::default();
    for attempt in 0..MAX_TRIES {
        let layouts = plan::plan_pools(ctx, holdings, reclaimed, &fixed);
        let mut done = FleetSteps::default();
        let mut harmful = Vec::new();
        for layout in &layouts {
            let s = pool_steps(ctx, layout, reclaim_ids, waste_ids);
            harmful.extend(s.harmful);
            for r in &s.recommendations {
                for m in r.moves() {
                    done.moves.insert(
                        (m.from_gpu.clone(), m.tenant.clone()),
                        (r.id.clone(), m.clone()),
                    );
                }
            }
            done.recommendations.extend(s.recommendations);
            done.freed_by.extend(s.freed_by);
            done.held.extend(s.held);
            done.served.extend(s.served);
            done.plan.pools.push(s.pool);
            done.plan.nodes.extend(s.nodes);
            done.rejected
                .extend(layout.refused.iter().map(|r| refused(layout, r)));
        }
        if harmful.is_empty() || attempt + 1 == MAX_TRIES {
            out = done;
            break;
        }
        fixed.extend(harmful);
    }
    out.plan.currency = cfg.currency.clone();
    out.plan.sum_pools();
    out
}
