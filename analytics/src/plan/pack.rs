//! Packing a pool's items into bins: whole GPUs, MIG instances or time-sliced GPUs, each bin
//! checked against the recorded hourly demand as it fills.

use crate::config::Config;
use crate::mig::MigFamily;

use super::bins::*;
use super::layout::*;
use super::place::*;

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Strategy {
    /// MIG instances wherever a profile fits; time-slicing where memory rules MIG out.
    MigFirst,
    /// Time-slicing for every tenant that can share.
    ShareFirst,
}

/// Plans the pool both ways (MIG first on MIG-capable models, time-slicing first): packs
/// the tenants, places the bins on nodes, and keeps the way that uses fewer GPUs with every
/// bin placed (MIG on a tie: it isolates). Returns the items of bins no node could take (they
/// stay where they are on the next try).
pub(super) fn solve(cfg: &Config, pool: &mut PoolLayout) -> Vec<usize> {
    let strategies: &[Strategy] = if pool.family.is_some() {
        &[Strategy::MigFirst, Strategy::ShareFirst]
    } else {
        &[Strategy::ShareFirst]
    };
    let mut best: Option<((bool, usize), PoolLayout, Vec<usize>)> = None;
    for &s in strategies {
        let mut trial = pool.clone();
        for it in &mut trial.items {
            it.fit = fit(cfg, trial.family, trial.memory_total, it, s);
        }
        let Packing { bins, refused } = pack(cfg, &trial.items, trial.memory_total, trial.family);
        trial.bins = bins;
        trial.refused = refused;
        reserve(&mut trial, cfg.max_replicas);
        let unplaced = place(cfg, &mut trial);
        let used: usize = trial.nodes.iter().map(NodeAfter::used).sum();
        let key = (!unplaced.is_empty(), used);
        if best.as_ref().is_none_or(|b| key < b.0) {
            best = Some((key, trial, unplaced));
        }
    }
    let Some((_, trial, unplaced)) = best else {
        return Vec::new();
    };
    *pool = trial;
    if !unplaced.is_empty() {
        return unplaced
            .iter()
            .flat_map(|&b| pool.bins[b].items.clone())
            .collect();
    }
    let after: usize = pool.nodes.iter().map(NodeAfter::used).sum();
    pool.changes = after < pool.live_gpus.len();
    Vec::new()
}

pub(super) fn fit(
    cfg: &Config,
    family: Option<&'static MigFamily>,
    memory_total: f64,
    it: &Item,
    s: Strategy,
) -> Fit {
    if runs_alone(it, memory_total) {
        return Fit::Whole;
    }
    if s == Strategy::MigFirst
        && let Some(p) = family.and_then(|f| mig_fit(cfg, f, it))
    {
        return Fit::Mig(p);
    }
    Fit::Share
}

/// A packing: the bins, and the pairings replay refused.
pub(super) struct Packing {
    pub(super) bins: Vec<Bin>,
    pub(super) refused: Vec<Refusal>,
}

/// First-fit decreasing. A tenant joins a time-sliced bin when the memory needs (p99 plus
/// headroom, never shared by time) fit and, hour by hour, the bin's recorded demand stays
/// within the replay's tolerance with no memory overflow in any hour — compute is the demand
/// series, not one number, so tenants busy at different hours share. MIG bins take profiles
/// with a legal placement.
pub(super) fn pack(
    cfg: &Config,
    items: &[Item],
    memory_total: f64,
    family: Option<&'static MigFamily>,
) -> Packing {
    let mut order: Vec<usize> = (0..items.len()).collect();
    let rank = |it: &Item| -> (u8, u32, u32, i64) {
        match it.fit {
            // The node-wide packer never sees a per-GPU fit (plan::relay makes those).
            Fit::Whole | Fit::PerGpu(_) => (0, 0, 0, 0),
            Fit::Mig(p) => (1, 7 - p.compute_slices, 8 - p.memory_slices, 0),
            Fit::Share => (
                2,
                0,
                0,
                -((it.compute.max(it.memory / memory_total)) * 1e6) as i64,
            ),
        }
    };
    order.sort_by(|&a, &b| {
        rank(&items[a])
            .cmp(&rank(&items[b]))
            .then(items[a].h.tenant.cmp(&items[b].h.tenant))
            .then(items[a].h.gpu.cmp(&items[b].h.gpu))
    });
    let mut bins: Vec<Bin> = Vec::new();
    let mut refused = Vec::new();
    // The whole GPU's profile: every slice a MIG bin has.
    let whole = family.and_then(|f| f.profiles.last());
    // Bins that may take another item, in the order they were opened: first-fit looks only
    // at these (a pool's whole GPUs and full bins would otherwise be walked for every item).
    let mut open: Vec<usize> = Vec::new();
    for i in order {
        let it = &items[i];
        let pin_ok = |b: &Bin| match (it.pin, b.pin.as_deref()) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        let mut chosen = None;
        let mut first_refusal = None;
        for &bi in &open {
            let b = &bins[bi];
            if !pin_ok(b) {
                continue;
            }
            match (it.fit, b.fit) {
                (Fit::Mig(p), Fit::Mig(_)) if mig_takes(b, p, whole, family) => {
                    chosen = Some(bi);
                    break;
                }
                (Fit::Share, Fit::Share) => {
                    if b.items.len() as u32 >= cfg.max_replicas
                        || b.memory + it.memory > memory_total
                    {
                        continue;
                    }
                    // The count of contended hours is only read for the first refusal.
                    let counted = first_refusal.is_none() && b.compute + it.compute <= 1.0 + 1e-9;
                    match hourly_verdict(cfg, b, it, memory_total, counted) {
                        Ok(()) => {
                            chosen = Some(bi);
                            break;
                        }
                        // Worth saying only when their needs alone would have let them share.
                        Err(contended) if b.compute + it.compute <= 1.0 + 1e-9 => {
                            if first_refusal.is_none() {
                                first_refusal = Some((bi, contended));
                            }
                        }
                        Err(_) => {}
                    }
                }
                _ => {}
            }
        }
        let bi = match chosen {
            Some(bi) => {
                add(&mut bins[bi], i, it);
                bi
            }
            None => {
                let mut b = Bin::new(it.fit);
                add(&mut b, i, it);
                bins.push(b);
                open.push(bins.len() - 1);
                bins.len() - 1
            }
        };
        if full(cfg, &bins[bi], whole) {
            open.retain(|&o| o != bi);
        }
        if let Some((bi, contended)) = first_refusal
            && chosen != Some(bi)
        {
            refused.push(Refusal {
                item: i,
                bin: bins[bi].items.clone(),
                contended,
            });
        }
    }
    // A time-sliced bin with one tenant is a whole GPU: no sharing needed.
    for b in &mut bins {
        if b.fit == Fit::Share && b.items.len() == 1 {
            b.fit = Fit::Whole;
        }
    }
    Packing { bins, refused }
}

/// Puts the pool's waits into the packing: a MIG instance joins a MIG GPU of the plan with
/// room for it, else opens a MIG GPU of its own; whole GPUs and shared replicas get GPUs of
/// their own. Bins holding only waits have no tenants; placing them takes GPUs like any bin.
pub(super) fn reserve(pool: &mut PoolLayout, max_replicas: u32) {
    let family = pool.family;
    let whole = family.and_then(|f| f.profiles.last());
    for wi in 0..pool.waits.len() {
        match pool.waits[wi].ask {
            super::waiting::Ask::Mig(p, n) => {
                for _ in 0..n {
                    let room = pool.bins.iter().position(|b| {
                        matches!(b.fit, Fit::Mig(_)) && mig_takes(b, p, whole, family)
                    });
                    let bi = room.unwrap_or_else(|| {
                        pool.bins.push(Bin::new(Fit::Mig(p)));
                        pool.bins.len() - 1
                    });
                    add_wait(&mut pool.bins[bi], wi, Some(p));
                }
            }
            super::waiting::Ask::Gpus(gpus) => whole_gpus(pool, wi, gpus),
            super::waiting::Ask::Shared(n) => whole_gpus(pool, wi, n.div_ceil(max_replicas.max(1))),
        }
    }
}

/// Keeps `gpus` GPUs of their own for wait `wi`.
fn whole_gpus(pool: &mut PoolLayout, wi: usize, gpus: u32) {
    for _ in 0..gpus {
        let mut b = Bin::new(Fit::Whole);
        add_wait(&mut b, wi, None);
        pool.bins.push(b);
    }
}

/// Whether MIG bin `b` can take profile `p`: a legal placement of its profiles and `p`.
pub(super) fn mig_takes(
    b: &Bin,
    p: &'static crate::mig::Profile,
    whole: Option<&crate::mig::Profile>,
    family: Option<&'static MigFamily>,
) -> bool {
    // Slices the GPU does not have rule a placement out before looking.
    let (c, m) = b
        .profiles
        .iter()
        .fold((p.compute_slices, p.memory_slices), |s, q| {
            (s.0 + q.compute_slices, s.1 + q.memory_slices)
        });
    if whole.is_some_and(|w| c > w.compute_slices || m > w.memory_slices) {
        return false;
    }
    let mut list = b.profiles.clone();
    list.push(p);
    family.is_some_and(|f| f.place(&list).is_some())
}

/// Whether bin `b` can take no further item: a whole GPU, a time-sliced GPU at its replica
/// limit, a MIG GPU with no compute or memory slice left.
fn full(cfg: &Config, b: &Bin, whole: Option<&crate::mig::Profile>) -> bool {
    match b.fit {
        Fit::Whole | Fit::PerGpu(_) => true,
        Fit::Share => b.items.len() as u32 >= cfg.max_replicas,
        Fit::Mig(_) => whole.is_none_or(|w| {
            let c: u32 = b.profiles.iter().map(|q| q.compute_slices).sum();
            let m: u32 = b.profiles.iter().map(|q| q.memory_slices).sum();
            c >= w.compute_slices || m >= w.memory_slices
        }),
    }
}
