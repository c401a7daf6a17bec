//! The bound: the fewest GPUs a pool's recorded demand needs under the same rules as the
//! packer, which says how close a plan gets.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::mig::MigFamily;

use super::bins::*;
use super::layout::*;

/// A lower bound on the GPUs `items` need under the packer's rules, whatever it chooses:
///
/// - a tenant whose memory need (p99 plus headroom) or any recorded hour's peak exceeds a GPU
///   runs alone: one GPU each;
/// - the others' memory needs are never shared by time, so they need at least their summed
///   memory, and one GPU for each need above half a GPU plus what cannot fit beside those
///   (`needs_bound` on memory alone);
/// - compute is shared hour by hour. With B GPUs, an hour whose summed demand exceeds B has
///   a GPU over its capacity. A time-sliced GPU may be over in at most `allowed` hours (the
///   replay's tolerance) and a MIG GPU in at most `allowed` hours per instance (each tenant
///   over its own instance), so the hours over B number at most `allowed` × (B + the tenants
///   that have a MIG profile). The smallest B that satisfies this is a bound.
///
/// It ignores pins, node boundaries, MIG placement rules and the device plugin's node-wide
/// rule, which only ever need more.
pub fn bound(
    cfg: &Config,
    items: &[&Item],
    memory_total: f64,
    family: Option<&'static MigFamily>,
) -> usize {
    let mut whole = 0usize;
    let mut sharable: Vec<&Item> = Vec::new();
    let mut mig_able: Vec<bool> = Vec::new();
    for &it in items {
        if runs_alone(it, memory_total) {
            whole += 1;
        } else {
            sharable.push(it);
            mig_able.push(family.is_some_and(|f| mig_fit(cfg, f, it).is_some()));
        }
    }
    if sharable.is_empty() {
        return whole;
    }
    let mut best = sharing_bound(cfg, &sharable, &mig_able, memory_total);
    // The tenants above half a GPU's memory never share with each other; those of the rest
    // that share with none of them (memory or hour by hour; a MIG profile might, so those
    // count as sharing) need GPUs of their own beside them.
    let large: Vec<usize> = (0..sharable.len())
        .filter(|&i| sharable[i].memory > memory_total / 2.0)
        .collect();
    let apart: Vec<usize> = (0..sharable.len())
        .filter(|&i| sharable[i].memory <= memory_total / 2.0 && !mig_able[i])
        .filter(|&i| {
            large
                .iter()
                .all(|&l| mig_able[l] || !pair_fits(cfg, sharable[l], sharable[i], memory_total))
        })
        .collect();
    if !large.is_empty() && !apart.is_empty() {
        let rest: Vec<&Item> = apart.iter().map(|&i| sharable[i]).collect();
        let flags = vec![false; rest.len()];
        best = best.max(large.len() + sharing_bound(cfg, &rest, &flags, memory_total));
    }
    whole + best
}

/// The memory and hour-by-hour parts of [`bound`] for tenants that may share (`mig_able`: has a
/// MIG profile).
pub(super) fn sharing_bound(
    cfg: &Config,
    items: &[&Item],
    mig_able: &[bool],
    memory_total: f64,
) -> usize {
    let memory: Vec<Need> = items
        .iter()
        .map(|it| (0.0, it.memory / memory_total))
        .collect();
    let mut hourly: BTreeMap<i64, f64> = BTreeMap::new();
    for it in items {
        for &(hour, eff, _) in &it.hours {
            *hourly.entry(hour).or_default() += eff;
        }
    }
    let mig_able = mig_able.iter().filter(|&&m| m).count();
    let mut demand: Vec<f64> = hourly.into_values().collect();
    demand.sort_by(|a, b| b.total_cmp(a));
    let allowed = allowed(cfg, demand.len());
    let by_hour = (1..=items.len())
        .find(|&b| {
            let over = demand.iter().take_while(|&&d| d > b as f64 + 1e-9).count();
            over as f64 <= allowed * (b + mig_able) as f64
        })
        .unwrap_or(items.len());
    needs_bound(&memory).max(by_hour).max(1)
}

/// Whether two tenants may share one time-sliced GPU: the packer's own rule
/// ([`hourly_verdict`]) for `b` joining a GPU that holds `a`.
pub(super) fn pair_fits(cfg: &Config, a: &Item, b: &Item, memory_total: f64) -> bool {
    let mut gpu = Bin::new(Fit::Share);
    add(&mut gpu, 0, a);
    gpu.memory + b.memory <= memory_total
        && hourly_verdict(cfg, &gpu, b, memory_total, false).is_ok()
}

/// A need as shares of one GPU: (compute, memory).
pub(super) type Need = (f64, f64);

/// GPUs for a fractional need (1e-9 spared for float noise).
pub(super) fn gpus(x: f64) -> usize {
    (x - 1e-9).ceil().max(0.0) as usize
}

/// A lower bound on GPUs for items of (compute, memory) shares, each at most one GPU: the
/// summed needs; and, for the items above half a GPU in one dimension (no two of them share a
/// GPU), one GPU each plus what the rest cannot fit beside them — the rest's summed needs
/// beyond the room those GPUs leave, and all of whatever fits beside none of them.
pub(super) fn needs_bound(items: &[Need]) -> usize {
    let sum = |v: &[Need]| {
        v.iter()
            .fold((0.0, 0.0), |acc, x| (acc.0 + x.0, acc.1 + x.1))
    };
    let (c, m) = sum(items);
    let mut best = gpus(c).max(gpus(m));
    for dim in 0..2 {
        let big = |x: &Need| {
            if dim == 0 {
                x.0 > 0.5 + 1e-9
            } else {
                x.1 > 0.5 + 1e-9
            }
        };
        let (large, small): (Vec<Need>, Vec<Need>) = items.iter().partition(|x| big(x));
        let room: Vec<Need> = large.iter().map(|x| (1.0 - x.0, 1.0 - x.1)).collect();
        let (rc, rm) = sum(&room);
        let (sc, sm) = sum(&small);
        let beside_none: Vec<Need> = small
            .iter()
            .copied()
            .filter(|s| !room.iter().any(|r| s.0 <= r.0 + 1e-9 && s.1 <= r.1 + 1e-9))
            .collect();
        let (nc, nm) = sum(&beside_none);
        let extra = gpus(sc - rc).max(gpus(sm - rm)).max(gpus(nc)).max(gpus(nm));
        best = best.max(large.len() + extra);
    }
    best
}

impl PoolLayout<'_> {
    /// The fewest GPUs the demand of `items` (plus `fixed` GPUs left as they are) needs under
    /// the plan's rules — a valid lower bound ([`bound`]).
    pub fn bound_of(&self, cfg: &Config, items: &[usize], fixed: usize) -> usize {
        let items: Vec<&Item> = items.iter().map(|&i| &self.items[i]).collect();
        fixed + bound(cfg, &items, self.memory_total, self.family)
    }
}
