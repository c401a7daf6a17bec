//! Placing bins on the pool's nodes so whole nodes empty, keeping tenants at home where that
//! costs nothing.

use model::inventory::Sharing;
use std::collections::BTreeMap;

use crate::config::Config;

use super::bins::*;
use super::group::*;
use super::layout::*;

/// Places the bins on the pool's nodes: fixed GPUs stay; pinned bins go to their node; the
/// others fill the nodes already opened before opening another, whole GPUs first, then MIG.
/// Time-sliced tenants are then grouped node by node as the device plugin runs them
/// ([`group_shared`]); a tenant no group takes runs on a whole GPU. Finally a whole or MIG bin
/// goes back to the node its tenants are on when that node is open anyway and has room.
/// Returns the bins no node could take.
pub(super) fn place(cfg: &Config, pool: &mut PoolLayout) -> Vec<usize> {
    let n = pool.nodes.len();
    let mut class = vec![Class::Open; n];
    for (ni, node) in pool.nodes.iter_mut().enumerate() {
        for (gi, g) in node.gpus.iter().enumerate() {
            if pool.fixed_gpus.contains(g.uuid.as_str()) {
                node.placed[gi] = Some(Placed::Fixed);
                class[ni] = if node.gpus.iter().all(|g| g.sharing == Sharing::Exclusive) {
                    Class::WholeOnly
                } else {
                    Class::Locked
                };
            }
        }
    }
    // Time-sliced bins dissolve, and so do the lone tenants that could share: they are all
    // grouped per node below.
    let items = &pool.items;
    let (shared, kept): (Vec<Bin>, Vec<Bin>) = std::mem::take(&mut pool.bins)
        .into_iter()
        .partition(|b| b.waits.is_empty() && b.items.iter().all(|&i| items[i].fit == Fit::Share));
    pool.bins = kept;
    let mut to_share: Vec<usize> = shared.into_iter().flat_map(|b| b.items).collect();
    to_share.sort_by(|&a, &b| {
        let w = |i: usize| weight(&pool.items[i], pool.memory_total);
        w(b).total_cmp(&w(a)).then(a.cmp(&b))
    });
    let mut unplaced = Vec::new();
    let first: Vec<usize> = (0..pool.bins.len()).collect();
    place_bins(pool, &mut class, &first, &mut unplaced);
    let alone = group_shared(cfg, pool, &mut class, to_share);
    let singles: Vec<usize> = alone
        .into_iter()
        .map(|i| {
            let mut b = Bin::new(Fit::Whole);
            add(&mut b, i, &pool.items[i]);
            pool.bins.push(b);
            pool.bins.len() - 1
        })
        .collect();
    place_bins(pool, &mut class, &singles, &mut unplaced);
    back_home(pool, &class);
    unplaced
}

/// Places whole and MIG bins, pinned ones first, each on an opened node before a new one,
/// preferring the node holding most of its tenants now.
pub(super) fn place_bins(
    pool: &mut PoolLayout,
    class: &mut [Class],
    bins: &[usize],
    unplaced: &mut Vec<usize>,
) {
    let mig = pool.family.is_some();
    let tenants_now: BTreeMap<&str, usize> =
        pool.items.iter().fold(BTreeMap::new(), |mut m, it| {
            *m.entry(it.h.node.as_str()).or_default() += 1;
            m
        });
    let mut order = bins.to_vec();
    let stage = |b: &Bin| -> u8 {
        match (b.pin.is_some(), b.fit) {
            (true, _) => 0,
            (false, Fit::Whole) => 1,
            (false, _) => 2,
        }
    };
    order.sort_by_key(|&b| (stage(&pool.bins[b]), b));
    for b in order {
        let home = homes(pool, b);
        let bin = &pool.bins[b];
        let best = (0..pool.nodes.len())
            .filter(|&ni| bin.pin.as_deref().is_none_or(|p| p == pool.nodes[ni].node))
            .filter(|&ni| free(&pool.nodes, ni) > 0 && class[ni].takes(bin.fit, mig).is_some())
            .max_by(|&a, &c| {
                let key = |ni: usize| {
                    let node = &pool.nodes[ni];
                    (
                        node.used() > 0,
                        home.get(node.node).copied().unwrap_or(0.0),
                        tenants_now.get(node.node).copied().unwrap_or(0),
                        node.gpus.len(),
                    )
                };
                let (ka, kc) = (key(a), key(c));
                ka.0.cmp(&kc.0)
                    .then(ka.1.total_cmp(&kc.1))
                    .then(ka.2.cmp(&kc.2))
                    .then(ka.3.cmp(&kc.3))
                    .then(pool.nodes[c].node.cmp(pool.nodes[a].node))
            });
        let Some(ni) = best else {
            unplaced.push(b);
            continue;
        };
        class[ni] = class[ni].takes(bin.fit, mig).unwrap_or(class[ni]);
        if let Some(gi) = pool.nodes[ni].placed.iter().position(|p| p.is_none()) {
            pool.nodes[ni].placed[gi] = Some(Placed::Bin(b));
        }
    }
}

/// Back home: a whole or MIG bin returns to the node its tenants are on when that node is
/// open anyway and takes it; within a node, a bin takes the GPU its tenants are on when it
/// can.
pub(super) fn back_home(pool: &mut PoolLayout, class: &[Class]) {
    let mig = pool.family.is_some();
    for b in 0..pool.bins.len() {
        if pool.bins[b].fit == Fit::Share {
            continue;
        }
        let Some(now) = pool
            .nodes
            .iter()
            .position(|n| n.placed.contains(&Some(Placed::Bin(b))))
        else {
            continue;
        };
        let home = homes(pool, b);
        let Some((home_node, _)) = home
            .iter()
            .max_by(|a, c| a.1.total_cmp(c.1).then(c.0.cmp(a.0)))
        else {
            continue;
        };
        let Some(hi) = pool.nodes.iter().position(|x| x.node == *home_node) else {
            continue;
        };
        if hi == now || pool.nodes[hi].used() == 0 || free(&pool.nodes, hi) == 0 {
            continue;
        }
        let fit = pool.bins[b].fit;
        if class[hi].takes(fit, mig) != Some(class[hi]) {
            continue;
        }
        if let Some(gi) = pool.nodes[now]
            .placed
            .iter()
            .position(|p| *p == Some(Placed::Bin(b)))
        {
            pool.nodes[now].placed[gi] = None;
        }
        if let Some(gi) = pool.nodes[hi].placed.iter().position(|p| p.is_none()) {
            pool.nodes[hi].placed[gi] = Some(Placed::Bin(b));
        }
    }
    // Within a node, a bin takes the GPU its tenants are on when it can.
    for node in &mut pool.nodes {
        let bins: Vec<usize> = node
            .placed
            .iter()
            .filter_map(|p| match p {
                Some(Placed::Bin(b)) => Some(*b),
                _ => None,
            })
            .collect();
        for p in node.placed.iter_mut() {
            if matches!(p, Some(Placed::Bin(_))) {
                *p = None;
            }
        }
        let mut rest = Vec::new();
        for b in bins {
            let mut shares: Vec<(&str, f64)> = pool.bins[b]
                .items
                .iter()
                .map(|&i| (pool.items[i].h.gpu.as_str(), pool.items[i].h.share()))
                .collect();
            shares.sort_by(|a, c| c.1.total_cmp(&a.1).then(a.0.cmp(c.0)));
            let own = shares.iter().find_map(|(gpu, _)| {
                node.gpus
                    .iter()
                    .position(|g| g.uuid == *gpu)
                    .filter(|&gi| node.placed[gi].is_none())
            });
            match own {
                Some(gi) => node.placed[gi] = Some(Placed::Bin(b)),
                None => rest.push(b),
            }
        }
        for b in rest {
            if let Some(gi) = node.placed.iter().position(|p| p.is_none()) {
                node.placed[gi] = Some(Placed::Bin(b));
            }
        }
    }
}
