//! Replay: re-run the recorded hourly demand of tenants under a proposed placement and count
//! the hours it would hurt. Demand per tenant-hour is its p95 effective use (GPU-equivalents)
//! and its peak memory; a device is contended in an hour when the demands placed on it add up
//! to more than its compute, and overflows when their peaks add up to more than its memory.
//! Recorded demand is what tenants *got*, so demand that contention already held back is
//! under-counted; docs/analytics.md says so.

use std::collections::BTreeMap;

use model::figures::count;

use crate::holdings::{Holding, HourUse};

/// A device in a plan: a whole GPU, a MIG instance or a shared GPU.
#[derive(Debug, Clone)]
pub struct Slot<'a> {
    /// Compute in GPU-equivalents (1 for a GPU, slices/7 for a MIG instance).
    pub compute: f64,
    pub memory_bytes: f64,
    pub holdings: Vec<&'a Holding>,
}

pub use crate::recommendation::Replay;

/// Contended and overflowing hours per tenant of one slot, and the hours replayed.
fn slot_hours(slot: &Slot, per_tenant: &mut BTreeMap<String, (f64, f64)>) -> usize {
    let mut per_hour: BTreeMap<i64, (f64, f64, Vec<&str>)> = BTreeMap::new();
    for h in &slot.holdings {
        for u in h.hours().filter(HourUse::in_demand) {
            let e = per_hour.entry(u.hour).or_default();
            e.0 += u.eff_p95.unwrap_or(0.0);
            e.1 += u.mem_max_bytes.unwrap_or(0) as f64;
            e.2.push(&h.tenant);
        }
    }
    for (demand, mem, tenants) in per_hour.values() {
        for t in tenants {
            let e = per_tenant.entry((*t).to_owned()).or_default();
            if *demand > slot.compute + 1e-9 {
                e.0 += 1.0;
            }
            if *mem > slot.memory_bytes {
                e.1 += 1.0;
            }
        }
    }
    per_hour.len()
}

/// Hours a tenant may be contended more than today when `hours` are replayed: the
/// `tolerance` share of them, at least one.
pub fn allowed(tolerance: f64, hours: usize) -> f64 {
    (tolerance * hours as f64).max(1.0)
}

/// Replays `before` (today's placement of the affected tenants) and `after` (the proposal).
/// Harmful when any tenant would be contended in more than `tolerance` (a share of the hours
/// replayed, at least one hour) more hours than today, or any memory would overflow.
pub fn replay(before: &[Slot], after: &[Slot], gpus_freed: f64, tolerance: f64) -> Replay {
    let mut t0 = BTreeMap::new();
    let mut t1 = BTreeMap::new();
    before.iter().for_each(|s| {
        slot_hours(s, &mut t0);
    });
    let hours = after
        .iter()
        .map(|s| slot_hours(s, &mut t1))
        .max()
        .unwrap_or(0);
    let c0: f64 = t0.values().map(|v: &(f64, f64)| v.0).sum();
    let c1: f64 = t1.values().map(|v: &(f64, f64)| v.0).sum();
    let o1: f64 = t1.values().map(|v: &(f64, f64)| v.1).sum();
    let allowed = allowed(tolerance, hours);
    let mut r = Replay {
        hours,
        contention_hours_before: c0,
        contention_hours_after: c1,
        memory_overflow_hours: o1,
        memory_overflow_risk: if hours > 0 { o1 / hours as f64 } else { 0.0 },
        gpus_freed,
        harmful: false,
        reason: None,
    };
    let worse = t1
        .iter()
        .map(|(t, v)| (t, v.0 - t0.get(t).map_or(0.0, |b: &(f64, f64)| b.0)))
        .filter(|(_, d)| *d > allowed)
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if o1 > 0.0 {
        r.harmful = true;
        r.reason = Some(format!(
            "memory would overflow in {} of the recorded demand",
            count(o1, "tenant-hour", "tenant-hours")
        ));
    } else if let Some((tenant, d)) = worse {
        r.harmful = true;
        r.reason = Some(format!(
            "{tenant} would be contended in {d:.0} more of the {hours} recorded hours"
        ));
    }
    r
}
