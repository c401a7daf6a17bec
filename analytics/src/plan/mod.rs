//! The fleet plan: one consistent placement of every live tenant per pool (nodes of one GPU
//! model in one cluster), packed by what each tenant needs (p99 memory and p95 compute, with
//! headroom) into whole GPUs, MIG instances or time-sliced GPUs, across the pool's nodes so
//! whole nodes empty, and checked against the recorded hourly demand while it packs. The
//! bound — the fewest GPUs that demand needs under the same rules — says how close it gets.
//!
//! [`crate::steps`] turns a pool's placement into approvable recommendations.

mod bins;
mod bound;
pub mod claims;
mod group;
mod layout;
mod pack;
pub mod pergpu;
mod place;
mod relay;
pub mod waiting;
mod worth;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::findings::Ctx;
use crate::holdings::{Holding, HourUse};
use crate::input::GpuRef;
use crate::mig;
use crate::need::need;

pub use bound::bound;
pub use layout::{
    Bin, Fit, FleetPlan, HOURS_PER_MONTH, Item, NodeAfter, NodePlan, Placed, PoolLayout, PoolPlan,
    Refusal, SharingAfter, efficiency, is_current,
};
use pack::solve;
pub use relay::relay;

/// Every pool of the fleet, planned. `reclaimed` holdings are gone from the plan; holdings in
/// `fixed_tenants` (GPU, tenant) stay where they are (a retry after replay refused a step).
pub fn plan_pools<'a>(
    ctx: &Ctx<'a>,
    holdings: &'a [Holding],
    reclaimed: &BTreeSet<(&str, &str)>,
    fixed_tenants: &BTreeSet<(String, String)>,
) -> Vec<PoolLayout<'a>> {
    let input = ctx.input;
    let pools = pools(input);
    let kinds: HashMap<(&str, &str), &str> = input
        .tenants
        .iter()
        .map(|t| ((t.cluster.as_str(), t.key.as_str()), t.kind.as_str()))
        .collect();
    let mut gpus_of: HashMap<(&str, &str), BTreeSet<&str>> = HashMap::new();
    for h in holdings
        .iter()
        .filter(|h| h.total.alloc_n > 0 && is_current(h, input.to_ms))
    {
        gpus_of
            .entry((&h.cluster, &h.tenant))
            .or_default()
            .insert(&h.gpu);
    }
    let faulty = faulty_gpus(input);
    let mut out = Vec::new();
    let models_of =
        |c: &str| -> Vec<&str> { pools.keys().filter(|k| k.0 == c).map(|k| k.1).collect() };
    for ((cluster, model), nodes) in &pools {
        let (cluster, model) = (*cluster, *model);
        let waits = waiting::pending(
            input,
            cluster,
            model,
            mig::family(model),
            &models_of(cluster),
        );
        let node_set: BTreeSet<&str> = nodes.iter().map(|n| n.0).collect();
        let mixed: BTreeSet<&str> = nodes.iter().filter(|n| n.2).map(|n| n.0).collect();
        let pool_holdings: Vec<&Holding> = holdings
            .iter()
            .filter(|h| h.cluster == cluster && node_set.contains(h.node.as_str()))
            .filter(|h| h.total.alloc_n > 0 && is_current(h, input.to_ms))
            .collect();
        if pool_holdings.is_empty() {
            continue;
        }
        let memory_total = nodes[0].1[0].memory_total_bytes as f64;
        let family = mig::family(model);
        let mut in_use = BTreeSet::new();
        let mut live = Vec::new();
        for h in pool_holdings {
            in_use.insert(h.gpu.as_str());
            if !reclaimed.contains(&(h.gpu.as_str(), h.tenant.as_str())) {
                live.push(h);
            }
        }
        let live_gpus: BTreeSet<&str> = live.iter().map(|h| h.gpu.as_str()).collect();
        let mut forced: BTreeSet<(String, String)> = fixed_tenants.clone();
        let mut first: Option<(Vec<Item>, BTreeSet<&str>)> = None;
        // Each try fixes the tenants of bins no node could take; the set only grows.
        loop {
            let (items, fixed_gpus) = items(
                ctx,
                &live,
                &forced,
                &mixed,
                memory_total,
                &Pinned {
                    kinds: &kinds,
                    gpus_of: &gpus_of,
                },
            );
            let sized = first
                .get_or_insert_with(|| (items.clone(), fixed_gpus.clone()))
                .clone();
            let mut layout = PoolLayout {
                cluster,
                model,
                family,
                memory_total,
                items,
                bins: Vec::new(),
                nodes: nodes
                    .iter()
                    .map(|(n, g, _)| NodeAfter {
                        node: n,
                        gpus: g.clone(),
                        // A GPU with unrecovered hardware errors takes no tenant.
                        placed: g
                            .iter()
                            .map(|g| faulty.contains(g.uuid.as_str()).then_some(Placed::Faulty))
                            .collect(),
                    })
                    .collect(),
                fixed_gpus,
                in_use: in_use.clone(),
                live_gpus: live_gpus.clone(),
                changes: false,
                refused: Vec::new(),
                sized,
                waits: waits.clone(),
            };
            let unplaced = solve(ctx.cfg, &mut layout);
            if unplaced.is_empty() {
                out.push(layout);
                break;
            }
            for i in unplaced {
                let h = layout.items[i].h;
                forced.insert((h.gpu.clone(), h.tenant.clone()));
            }
        }
    }
    out
}

/// The GPUs with unrecovered hardware errors: no tenant is placed on them.
fn faulty_gpus(input: &crate::input::Input) -> BTreeSet<&str> {
    input
        .health
        .iter()
        .filter(|h| crate::findings::unrecovered(h).is_some())
        .map(|h| h.gpu.as_str())
        .collect()
}

/// (node, its GPUs by index, whether they are of several models).
type PoolNodes<'g> = Vec<(&'g str, Vec<&'g GpuRef>, bool)>;

/// The fleet's nodes by pool (cluster, model of their first GPU); mixed-model nodes are marked
/// so the plan leaves them alone.
fn pools(input: &crate::input::Input) -> BTreeMap<(&str, &str), PoolNodes<'_>> {
    let mut node_gpus: BTreeMap<(&str, &str), Vec<&GpuRef>> = BTreeMap::new();
    for g in &input.gpus {
        node_gpus.entry((&g.cluster, &g.node)).or_default().push(g);
    }
    let mut pools: BTreeMap<(&str, &str), PoolNodes> = BTreeMap::new();
    for ((cluster, node), mut gpus) in node_gpus {
        gpus.sort_by_key(|g| g.index);
        let model = gpus[0].model.as_str();
        let mixed = gpus.iter().any(|g| g.model != model);
        pools
            .entry((cluster, model))
            .or_default()
            .push((node, gpus, mixed));
    }
    pools
}

/// What pins a tenant to its node: its kind (only pods move between nodes) and the GPUs it
/// holds (a tenant on several GPUs stays whole).
struct Pinned<'p, 'a> {
    kinds: &'p HashMap<(&'a str, &'a str), &'a str>,
    gpus_of: &'p HashMap<(&'a str, &'a str), BTreeSet<&'a str>>,
}

/// The pool's live holdings sized for the packer, and the GPUs that stay as they are: those
/// with a tenant that cannot be sized or is forced to stay, and those shared more tightly
/// than the headroom rules allow (the plan never spreads tenants onto more GPUs).
fn items<'a>(
    ctx: &Ctx,
    live: &[&'a Holding],
    forced: &BTreeSet<(String, String)>,
    mixed: &BTreeSet<&str>,
    memory_total: f64,
    pinned: &Pinned<'_, 'a>,
) -> (Vec<Item<'a>>, BTreeSet<&'a str>) {
    // A GPU with a tenant that cannot be sized stays as it is, with all its tenants.
    let mut fixed_gpus: BTreeSet<&str> = BTreeSet::new();
    let mut sized = Vec::new();
    for h in live {
        let stays =
            forced.contains(&(h.gpu.clone(), h.tenant.clone())) || mixed.contains(h.node.as_str());
        match item(ctx, h) {
            Some(it) if !stays => sized.push(it),
            _ => {
                fixed_gpus.insert(h.gpu.as_str());
            }
        }
    }
    // Tenants that already share a GPU more tightly than the headroom rules allow stay
    // where they are: the plan never spreads tenants onto more GPUs.
    let mut per_gpu: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for it in &sized {
        let e = per_gpu.entry(it.h.gpu.as_str()).or_default();
        e.0 += it.compute;
        e.1 += it.memory;
    }
    for (gpu, (c, m)) in per_gpu {
        if c > 1.0 + 1e-9 || m > memory_total {
            fixed_gpus.insert(gpu);
        }
    }
    let mut items: Vec<Item> = sized
        .into_iter()
        .filter(|it| !fixed_gpus.contains(it.h.gpu.as_str()))
        .collect();
    for it in &mut items {
        let key = (it.h.cluster.as_str(), it.h.tenant.as_str());
        let several = pinned.gpus_of.get(&key).is_some_and(|g| g.len() > 1);
        if pinned.kinds.get(&key).copied() != Some("pod") || several {
            it.pin = Some(it.h.node.as_str());
        }
    }
    (items, fixed_gpus)
}

/// The packer's view of a holding, or None when it cannot be sized (too few hours, no
/// effective use or memory measured).
fn item<'a>(ctx: &Ctx, h: &'a Holding) -> Option<Item<'a>> {
    let cfg = ctx.cfg;
    if h.allocated_hours() < cfg.min_alloc_hours {
        return None;
    }
    let (memory, compute) = need(h, cfg)?;
    let compute = compute.clamp(0.0, 1.0);
    let hours = h
        .hours()
        .filter(HourUse::in_demand)
        .map(|u| {
            (
                u.hour,
                u.eff_p95.unwrap_or(0.0),
                u.mem_max_bytes.unwrap_or(0) as f64,
            )
        })
        .collect();
    Some(Item {
        h,
        compute,
        memory,
        pin: None,
        hours,
        fit: Fit::Whole,
    })
}

#[cfg(test)]
mod tests;
