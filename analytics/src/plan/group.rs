//! Grouping time-sliced tenants node by node, so any replicas of a node fit one GPU as the
//! device plugin runs them.

use std::collections::BTreeMap;

use crate::config::Config;

use super::bins::*;
use super::layout::*;

/// Consecutive tenants a node's group may turn down before it stops looking (bounds the
/// work on large pools; the tenants are in decreasing size, so later ones rarely fit better).
pub(super) const GROUP_SCAN: usize = 64;

/// Groups time-sliced tenants (`items`, largest first) node by node as the device plugin runs
/// them: it advertises `r` replicas of every GPU of a time-sliced node and hands them to pods
/// without choosing who shares a physical GPU, so a node is safe only when ANY `r` of its
/// tenants fit one GPU ([`Group`]). Nodes holding pinned tenants come first, then the others,
/// those holding most of the tenants now first. For each node every `r` from `max_replicas`
/// down to 2 is tried, taking tenants that keep the node safe (up to `r` per free GPU); the
/// `r` that saves most GPUs wins. Returns the tenants no node groups (they run alone).
pub(super) fn group_shared(
    cfg: &Config,
    pool: &mut PoolLayout,
    class: &mut [Class],
    items: Vec<usize>,
) -> Vec<usize> {
    let mut left: Vec<usize> = items;
    let now: BTreeMap<&str, usize> = left.iter().fold(BTreeMap::new(), |mut m, &i| {
        *m.entry(pool.items[i].h.node.as_str()).or_default() += 1;
        m
    });
    let mut order: Vec<usize> = (0..pool.nodes.len()).collect();
    order.sort_by_key(|&ni| {
        let node = pool.nodes[ni].node;
        let pinned = left.iter().any(|&i| pool.items[i].pin == Some(node));
        (
            !pinned,
            std::cmp::Reverse(now.get(node).copied().unwrap_or(0)),
            std::cmp::Reverse(pool.nodes[ni].gpus.len()),
            node,
        )
    });
    // `left`'s length when a node without pinned tenants found no two of them to pair: until
    // a group takes some (`left` only shrinks), no such node can pair any either — which
    // pair fits depends neither on the node nor on its free GPUs.
    let mut barren: Option<usize> = None;
    for ni in order {
        let node = pool.nodes[ni].node;
        let slots = free(&pool.nodes, ni);
        if slots == 0 || class[ni].takes(Fit::Share, false).is_none() {
            continue;
        }
        let forced: Vec<usize> = left
            .iter()
            .copied()
            .filter(|&i| pool.items[i].pin == Some(node))
            .collect();
        if forced.is_empty() && barren == Some(left.len()) {
            continue;
        }
        let mut best: Option<(usize, usize, Vec<usize>)> = None; // (saved, r, members)
        for r in 2..=cfg.max_replicas as usize {
            let Some(members) = fill(cfg, pool, &forced, &left, r, r * slots) else {
                continue;
            };
            if members.len() < 2 {
                // No two tenants pair at `r`; a pair safe at a larger `r` would be safe here
                // (its sums are the same), so no larger `r` pairs any either.
                if forced.is_empty() {
                    barren = Some(left.len());
                }
                break;
            }
            let saved = members.len() - members.len().div_ceil(r);
            if best.as_ref().is_none_or(|b| saved > b.0) {
                best = Some((saved, r, members));
            }
        }
        let Some((saved, r, members)) = best else {
            continue;
        };
        if saved == 0 {
            continue;
        }
        left.retain(|i| !members.contains(i));
        let gpus = members.len().div_ceil(r);
        let mut bins: Vec<Bin> = (0..gpus).map(|_| Bin::new(Fit::Share)).collect();
        for (k, &i) in members.iter().enumerate() {
            add(&mut bins[k % gpus], i, &pool.items[i]);
        }
        class[ni] = Class::Shared;
        for mut b in bins {
            b.pin = Some(node.to_owned());
            b.replicas = r;
            pool.bins.push(b);
            let bi = pool.bins.len() - 1;
            if let Some(gi) = pool.nodes[ni].placed.iter().position(|p| p.is_none()) {
                pool.nodes[ni].placed[gi] = Some(Placed::Bin(bi));
            }
        }
    }
    left
}

/// Seeds tried before a node's group is given up: the largest tenant left may pair with
/// nobody, so the next ones start the group in turn.
pub(super) const GROUP_SEEDS: usize = 8;

/// The tenants a node with `cap` slots of `r` replicas takes: the `forced` ones (pinned
/// there), then a seed and every tenant of `left` (largest first) that keeps the node safe.
/// None when the forced ones alone are not safe.
pub(super) fn fill(
    cfg: &Config,
    pool: &PoolLayout,
    forced: &[usize],
    left: &[usize],
    r: usize,
    cap: usize,
) -> Option<Vec<usize>> {
    let mut base = Group::new(r, pool.memory_total);
    if forced.len() > cap || !forced.iter().all(|&i| base.try_add(cfg, &pool.items[i])) {
        return None;
    }
    let free: Vec<usize> = left
        .iter()
        .copied()
        .filter(|&i| pool.items[i].pin.is_none())
        .collect();
    let mut best = forced.to_vec();
    for &seed in free.iter().take(GROUP_SEEDS) {
        let mut g = base.clone();
        if forced.len() >= cap || !g.try_add(cfg, &pool.items[seed]) {
            continue;
        }
        let mut members = forced.to_vec();
        members.push(seed);
        let mut misses = 0;
        for &i in &free {
            if members.len() >= cap || misses >= GROUP_SCAN {
                break;
            }
            if i == seed {
                continue;
            }
            if g.try_add(cfg, &pool.items[i]) {
                members.push(i);
                misses = 0;
            } else {
                misses += 1;
            }
        }
        if members.len() > best.len() {
            best = members;
        }
        // A seed that pairs with someone is as good a start as any.
        if best.len() >= forced.len() + 2 {
            break;
        }
    }
    Some(best)
}

/// A time-sliced node's tenants as the device plugin's worst assignment sees them: for `r`
/// replicas, the `r` largest memory needs, and hour by hour the `r` largest demands and
/// memory peaks — any `r` tenants the plugin puts on one GPU need no more.
#[derive(Clone)]
pub(super) struct Group {
    pub(super) r: usize,
    pub(super) memory_total: f64,
    pub(super) needs: Vec<f64>,
    /// The hours any member was in demand, in time order.
    pub(super) hours: Vec<Slot>,
    pub(super) contended: usize,
}

/// One hour of a [`Group`]: its `r` largest demands and memory peaks, largest first.
#[derive(Clone)]
pub(super) struct Slot {
    pub(super) hour: i64,
    pub(super) effs: Vec<f64>,
    pub(super) mems: Vec<f64>,
}

/// The sum of the `r` largest of `top` (kept sorted, largest first) with `x` added.
pub(super) fn top_with(top: &[f64], x: f64, r: usize) -> f64 {
    let mut sum = 0.0;
    let mut used = false;
    let mut k = 0;
    for &v in top {
        if k == r {
            break;
        }
        if !used && x > v {
            sum += x;
            used = true;
            k += 1;
            if k == r {
                break;
            }
        }
        sum += v;
        k += 1;
    }
    if !used && k < r {
        sum += x;
    }
    sum
}

pub(super) fn insert_top(top: &mut Vec<f64>, x: f64, r: usize) {
    let at = top.iter().position(|&v| x > v).unwrap_or(top.len());
    top.insert(at, x);
    top.truncate(r);
}

impl Group {
    pub(super) fn new(r: usize, memory_total: f64) -> Group {
        Group {
            r,
            memory_total,
            needs: Vec::new(),
            hours: Vec::new(),
            contended: 0,
        }
    }

    /// Adds `it` when the group stays safe with it; false (and nothing changed) otherwise.
    /// Both hour lists are in time order, so one merge walk finds each hour's slot.
    pub(super) fn try_add(&mut self, cfg: &Config, it: &Item) -> bool {
        let limit = self.memory_total * (1.0 + 1e-9);
        if top_with(&self.needs, it.memory, self.r) > limit {
            return false;
        }
        let mut contended = self.contended;
        let mut new_hours = 0;
        let mut j = 0;
        for &(hour, eff, mem) in &it.hours {
            while j < self.hours.len() && self.hours[j].hour < hour {
                j += 1;
            }
            let (effs, mems): (&[f64], &[f64]) = match self.hours.get(j) {
                Some(s) if s.hour == hour => (&s.effs, &s.mems),
                _ => {
                    new_hours += 1;
                    (&[], &[])
                }
            };
            if top_with(mems, mem, self.r) > limit {
                return false;
            }
            let before: f64 = effs.iter().take(self.r).sum();
            let after = top_with(effs, eff, self.r);
            if before <= 1.0 + 1e-9 && after > 1.0 + 1e-9 {
                contended += 1;
            }
        }
        if contended as f64 > allowed(cfg, self.hours.len() + new_hours) {
            return false;
        }
        insert_top(&mut self.needs, it.memory, self.r);
        let r = self.r;
        let put = |s: &mut Slot, eff: f64, mem: f64| {
            insert_top(&mut s.effs, eff, r);
            insert_top(&mut s.mems, mem, r);
        };
        if new_hours == 0 {
            let mut j = 0;
            for &(hour, eff, mem) in &it.hours {
                while self.hours[j].hour < hour {
                    j += 1;
                }
                put(&mut self.hours[j], eff, mem);
            }
        } else {
            let old = std::mem::take(&mut self.hours);
            let mut old = old.into_iter().peekable();
            for &(hour, eff, mem) in &it.hours {
                while let Some(s) = old.next_if(|s| s.hour < hour) {
                    self.hours.push(s);
                }
                let mut slot = old.next_if(|s| s.hour == hour).unwrap_or(Slot {
                    hour,
                    effs: Vec::new(),
                    mems: Vec::new(),
                });
                put(&mut slot, eff, mem);
                self.hours.push(slot);
            }
            self.hours.extend(old);
        }
        self.contended = contended;
        true
    }
}
