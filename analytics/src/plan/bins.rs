//! What the packer, the bound and the placement share: what a bin may take (memory and
//! the recorded hours), MIG fits, and how a node's bins are classed and weighed.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::findings::GIB;
use crate::mig::{MigFamily, Profile};
use crate::replay;

use super::layout::*;

/// A tenant that cannot share a GPU with anyone: its memory need, or a recorded hour's peak,
/// exceeds a GPU's memory. (Compute alone never decides: tenants busy at different hours may
/// share, which the recorded hours decide.)
pub(super) fn runs_alone(it: &Item, memory_total: f64) -> bool {
    it.memory > memory_total || it.hours.iter().any(|h| h.2 > memory_total)
}

/// Hours a tenant may be contended more than today (the replay's own rule).
pub(super) fn allowed(cfg: &Config, hours: usize) -> f64 {
    replay::allowed(cfg.replay_tolerance, hours)
}

/// The smallest MIG profile below the whole GPU that fits the item's need and its recorded
/// hours alone.
pub(super) fn mig_fit(
    cfg: &Config,
    family: &'static MigFamily,
    it: &Item,
) -> Option<&'static Profile> {
    let mut options = family
        .fitting(it.memory / GIB, it.compute)
        .filter(|p| p.compute_slices < 7);
    options.find(|p| {
        let contended = it
            .hours
            .iter()
            .filter(|h| h.1 > p.compute_share() + 1e-9)
            .count();
        let overflow = it.hours.iter().any(|h| h.2 > p.memory_gib * GIB);
        !overflow && (contended as f64) <= allowed(cfg, it.hours.len())
    })
}

pub(super) fn add(b: &mut Bin, i: usize, it: &Item) {
    b.items.push(i);
    b.compute += it.compute;
    b.memory += it.memory;
    if let Fit::Mig(p) = it.fit {
        b.profiles.push(p);
    }
    if let Some(pin) = it.pin {
        b.pin = Some(pin.to_owned());
    }
    add_hours(&mut b.hourly, &it.hours);
}

/// Keeps room in `b` for waiting work `wi`: a MIG instance of `profile`, or the whole GPU.
pub(super) fn add_wait(b: &mut Bin, wi: usize, profile: Option<&'static Profile>) {
    b.waits.push(wi);
    if let Some(p) = profile {
        b.profiles.push(p);
    }
}

/// Adds `more` (hour, compute, memory) to the time-ordered `hourly`: a merge of the two lists
/// when `more` is in time order too (it is: a holding's hours), else hour by hour.
fn add_hours(hourly: &mut Vec<(i64, f64, f64)>, more: &[(i64, f64, f64)]) {
    // A new hour starts from 0.0 + the value, as the map's default-then-add did (−0.0 reads 0.0).
    let add_to = |e: &mut (i64, f64, f64), eff: f64, mem: f64| {
        e.1 += eff;
        e.2 += mem;
    };
    if !more.is_sorted_by_key(|h| h.0) {
        for &(hour, eff, mem) in more {
            match hourly.binary_search_by_key(&hour, |h| h.0) {
                Ok(i) => add_to(&mut hourly[i], eff, mem),
                Err(i) => hourly.insert(i, (hour, 0.0 + eff, 0.0 + mem)),
            }
        }
        return;
    }
    let had = std::mem::take(hourly);
    let mut out: Vec<(i64, f64, f64)> = Vec::with_capacity(had.len() + more.len());
    let mut more = more.iter().peekable();
    for h in had {
        while let Some(&&(hour, eff, mem)) = more.peek()
            && hour < h.0
        {
            match out.last_mut() {
                Some(last) if last.0 == hour => add_to(last, eff, mem),
                _ => out.push((hour, 0.0 + eff, 0.0 + mem)),
            }
            more.next();
        }
        out.push(h);
        while let Some(&&(hour, eff, mem)) = more.peek()
            && hour == h.0
        {
            add_to(out.last_mut().expect("just pushed"), eff, mem);
            more.next();
        }
    }
    for &(hour, eff, mem) in more {
        match out.last_mut() {
            Some(last) if last.0 == hour => add_to(last, eff, mem),
            _ => out.push((hour, 0.0 + eff, 0.0 + mem)),
        }
    }
    *hourly = out;
}

/// Whether `it` may join time-sliced bin `b` by the recorded hours: Err with the contended
/// hours when the merged demand would exceed the GPU in more hours than replay tolerates, or
/// memory would overflow in any hour. Unless `counted`, it may stop at the first contended
/// hour past what any length of the two lists tolerates (the count is then a lower bound).
pub(super) fn hourly_verdict(
    cfg: &Config,
    b: &Bin,
    it: &Item,
    memory_total: f64,
    counted: bool,
) -> Result<(), f64> {
    let (mut hours, mut contended) = (0usize, 0usize);
    // No more hours than both lists hold: past this many contended ones the answer is no.
    let most = allowed(cfg, it.hours.len() + b.hourly.len());
    let mut mine = it.hours.iter().peekable();
    let mut theirs = b.hourly.iter().peekable();
    loop {
        // The next hour either holds, summed (both lists are in time order).
        let (eff, mem) = match (mine.peek(), theirs.peek()) {
            (None, None) => break,
            (Some(&&(h, e, m)), Some(&&(t, _, _))) if h < t => {
                mine.next();
                (e, m)
            }
            (Some(&&(h, e, m)), Some(&&(t, te, tm))) if h == t => {
                mine.next();
                theirs.next();
                (e + te, m + tm)
            }
            (Some(&&(_, e, m)), None) => {
                mine.next();
                (e, m)
            }
            (_, Some(&&(_, te, tm))) => {
                theirs.next();
                (te, tm)
            }
        };
        hours += 1;
        if mem > memory_total {
            return Err(f64::INFINITY);
        }
        if eff > 1.0 + 1e-9 {
            contended += 1;
            if !counted && contended as f64 > most {
                return Err(contended as f64);
            }
        }
    }
    if contended as f64 > allowed(cfg, hours) {
        return Err(contended as f64);
    }
    Ok(())
}

/// What a node may run after the plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Class {
    /// Nothing placed yet.
    Open,
    /// Exclusive GPUs, and MIG GPUs beside them (mig-parted per device).
    Exclusive,
    /// Time-sliced GPUs.
    Shared,
    /// Kept as it is but whole GPUs may join (an exclusive node with fixed tenants).
    WholeOnly,
    /// Kept exactly as it is.
    Locked,
}

impl Class {
    pub(super) fn takes(self, fit: Fit, mig: bool) -> Option<Class> {
        match (self, fit) {
            (Class::Locked, _) => None,
            (Class::WholeOnly, Fit::Whole) => Some(Class::WholeOnly),
            // MIG beside fixed whole GPUs: mig-parted leaves their GPUs MIG-disabled, and the
            // device plugin's mixed strategy keeps them exclusive.
            (Class::WholeOnly, Fit::Mig(_)) if mig => Some(Class::WholeOnly),
            (Class::WholeOnly, _) => None,
            (Class::Open | Class::Exclusive, Fit::Whole) => Some(Class::Exclusive),
            (Class::Open | Class::Exclusive, Fit::Mig(_)) if mig => Some(Class::Exclusive),
            (Class::Open | Class::Shared, Fit::Share) => Some(Class::Shared),
            _ => None,
        }
    }
}

/// How large a tenant is for grouping: the larger of its compute need and memory share.
pub(super) fn weight(it: &Item, memory_total: f64) -> f64 {
    it.compute.max(it.memory / memory_total)
}

/// How much of each bin's tenants each node holds now.
pub(super) fn homes<'a>(pool: &PoolLayout<'a>, b: usize) -> BTreeMap<&'a str, f64> {
    let mut m = BTreeMap::new();
    for &i in &pool.bins[b].items {
        *m.entry(pool.items[i].h.node.as_str()).or_default() += pool.items[i].h.share();
    }
    m
}

pub(super) fn free(nodes: &[NodeAfter], ni: usize) -> usize {
    nodes[ni].placed.iter().filter(|p| p.is_none()).count()
}
