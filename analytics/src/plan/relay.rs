//! A pool's plan laid out again under a per-GPU mechanism it has: where the pool
//! has a mechanism that pins groups of tenants to GPUs (a DRA claim with a device selector),
//! or one whose scheduler places them within requested capacities (consumable capacity
//! without a selector, HAMi, KAI), and it frees more than node-wide sharing, the plan's
//! placement becomes those groups — each a bin on the GPU `pergpu::place_groups` chose; for a
//! scheduler, the packing its binpack policy is expected to make, while every other placement
//! the requests allow is as safe — so the steps, their moves, their replay and the accounting
//! of what each frees are made exactly as for any plan.
//!
//! What stays: GPUs whose tenants cannot be sized, tenants pinned to their node (Slurm jobs,
//! host users, tenants of several GPUs) on their GPUs, and whole GPUs the plan keeps for
//! waiting work. A pool whose waiting work the node-wide plan does not serve with whole GPUs
//! (a MIG instance kept for it belongs to a MIG layout the pinned groups would replace) is not
//! laid out again: its plan stays node-wide, and the worth says what pinning would free.

use std::collections::{BTreeMap, HashMap};

use super::layout::{Bin, Fit, Placed, PoolLayout};
use super::pergpu::{movable, pack_pinned, place_groups, scheduled_groups};
use crate::findings::Ctx;
use crate::mechanism::{Chooser, Mechanism};

/// `pool` laid out under `m`, or None where `m` is not a per-GPU mechanism, the pool keeps MIG
/// instances for waiting work beside tenants, or a group finds no GPU.
pub fn relay<'a>(ctx: &Ctx, pool: &PoolLayout<'a>, m: Mechanism) -> Option<PoolLayout<'a>> {
    let d = m.declared();
    if !matches!(
        d.chooser,
        Chooser::PlanPerGpu | Chooser::SchedulerWithinLimits
    ) {
        return None;
    }
    // Waiting work is served first: only where the node-wide plan keeps whole GPUs for it
    // (a MIG instance kept for it belongs to a MIG layout the pinned groups would replace).
    let kept = pool.kept_for_waiting();
    let served: std::collections::BTreeSet<usize> = kept
        .iter()
        .flat_map(|(_, b)| pool.bins[*b].waits.iter().copied())
        .collect();
    let served = served.len();
    if served < pool.waits.len() || kept.iter().any(|(_, b)| pool.bins[*b].fit != Fit::Whole) {
        return None;
    }
    let (tenants, _) = movable(ctx, pool);
    // Under a scheduler, a tenant that must run alone keeps a whole-GPU request (its item's
    // fit says so) in a group of its own.
    let (groups, alone) = match d.chooser {
        Chooser::SchedulerWithinLimits => scheduled_groups(&tenants, pool.memory_total),
        _ => (
            pack_pinned(&tenants, pool.memory_total, d.one_namespace),
            Vec::new(),
        ),
    };
    let placed = place_groups(pool, &tenants, &groups);
    if placed.len() != groups.len() {
        return None;
    }
    let (sized, fixed) = &pool.sized;
    let mut out = pool.clone();
    // The movable items, in the order `movable` gave its tenants (index t is tenant t).
    out.items = sized
        .iter()
        .filter(|it| it.pin.is_none())
        .cloned()
        .collect();
    out.fixed_gpus = fixed.clone();
    out.fixed_gpus.extend(
        sized
            .iter()
            .filter(|it| it.pin.is_some())
            .map(|it| it.h.gpu.as_str()),
    );
    out.refused.clear();
    out.bins.clear();
    let mut on: HashMap<String, usize> = HashMap::new();
    for (members, group) in groups.iter().zip(&placed) {
        let mut bin = Bin::new(Fit::PerGpu(m));
        bin.replicas = members.len();
        let mut hourly: BTreeMap<i64, (f64, f64)> = BTreeMap::new();
        for &t in members {
            let it = &mut out.items[t];
            it.memory = tenants[t].memory;
            it.fit = if alone.contains(&t) {
                Fit::Whole
            } else {
                Fit::PerGpu(m)
            };
            bin.items.push(t);
            bin.compute += it.compute;
            bin.memory += it.memory;
            for &(hour, compute, memory) in &it.hours {
                let e = hourly.entry(hour).or_default();
                e.0 += compute;
                e.1 += memory;
            }
        }
        bin.hourly = hourly.into_iter().map(|(h, (c, m))| (h, c, m)).collect();
        on.insert(group.gpu.clone(), out.bins.len());
        out.bins.push(bin);
    }
    for (gpu, b) in kept {
        on.insert(gpu.to_owned(), out.bins.len());
        out.bins.push(pool.bins[b].clone());
    }
    for n in &mut out.nodes {
        for (g, p) in n.gpus.iter().zip(n.placed.iter_mut()) {
            *p = if out.fixed_gpus.contains(g.uuid.as_str()) {
                Some(Placed::Fixed)
            } else if *p == Some(Placed::Faulty) {
                Some(Placed::Faulty)
            } else {
                on.get(&g.uuid).map(|&b| Placed::Bin(b))
            };
        }
    }
    let used: usize = out.nodes.iter().map(|n| n.used()).sum();
    out.changes = used < out.live_gpus.len();
    Some(out)
}
