//! Which step frees each GPU the plan empties (exactly one), which emptied GPUs are held for
//! repair instead, and which serve waiting work: the accounting that makes the steps add up
//! to what applying them frees.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::findings::Ctx;
use crate::input::GpuRef;
use crate::plan::{Placed, PoolLayout};
use crate::recommendation::Served;

/// Who can free a GPU: where each item runs after the plan, each node's step, the reclaims.
pub struct Steps<'s, 'a> {
    pub places: &'s HashMap<usize, (&'a str, &'a GpuRef)>,
    pub step_of_node: &'s BTreeMap<&'a str, String>,
    pub reclaim_ids: &'s HashMap<(String, String), String>,
}

/// What a pool's plan frees, holds and serves, step by step.
#[derive(Debug, Default)]
pub struct Accounted<'c> {
    /// Freed GPU → the id of the step that frees it.
    pub freed_by: BTreeMap<String, String>,
    /// GPUs a step empties that are not counted as freed: GPU → (step id, why).
    pub held: BTreeMap<String, (String, String)>,
    /// The GPUs held for repair, with why.
    pub repair: BTreeMap<&'c str, String>,
    /// Waiting work the plan serves, with the id of the step that serves it.
    pub served: Vec<(String, Served)>,
}

/// The accounting of a pool whose placement after the plan uses `used_after`, which grows by
/// the GPUs held for repair.
pub fn account<'c>(
    ctx: &'c Ctx,
    pool: &PoolLayout,
    who: &Steps,
    used_after: &mut BTreeSet<&'c str>,
) -> Accounted<'c> {
    // A GPU with unrecovered hardware errors that the plan empties is not freed: it stays
    // counted as in use, and the step that empties it says so.
    let mut out = Accounted {
        repair: held_for_repair(ctx, pool, used_after),
        ..Accounted::default()
    };
    if !out.repair.is_empty() {
        let by = freed_by(pool, who, used_after);
        out.held = attribute(&out.repair, &by);
        used_after.extend(out.repair.keys().copied());
    }
    out.freed_by = freed_by(pool, who, used_after);
    if pool.changes && !pool.waits.is_empty() {
        let kept: BTreeSet<&str> = pool.kept_for_waiting().iter().map(|k| k.0).collect();
        let without: BTreeSet<&str> = used_after.difference(&kept).copied().collect();
        let would = freed_by(pool, who, &without);
        out.served = served(pool, who.step_of_node, &would);
    }
    out
}

/// Each GPU held for repair with the step that empties it and why.
fn attribute(
    repair: &BTreeMap<&str, String>,
    emptied_by: &BTreeMap<String, String>,
) -> BTreeMap<String, (String, String)> {
    repair
        .iter()
        .filter_map(|(g, why)| Some(((*g).to_owned(), (emptied_by.get(*g)?.clone(), why.clone()))))
        .collect()
}

/// The GPUs in use that the plan empties and that have unrecovered hardware errors, with why.
fn held_for_repair<'c>(
    ctx: &'c Ctx,
    pool: &PoolLayout,
    used_after: &BTreeSet<&str>,
) -> BTreeMap<&'c str, String> {
    ctx.input
        .health
        .iter()
        .filter(|h| pool.in_use.contains(h.gpu.as_str()) && !used_after.contains(h.gpu.as_str()))
        .filter_map(|h| Some((h.gpu.as_str(), crate::findings::unrecovered(h)?)))
        .collect()
}

/// Every GPU in use that the plan does not use is freed by exactly one step: the one that
/// moves its largest moved tenant away (it then requires the reclaims of the GPU's other
/// tenants, so it is the last to leave the GPU empty), or the reclaim of its largest tenant. A GPU the plan fills
/// that was not in use (an idle GPU of a node that takes tenants in) is one GPU more in use
/// after: it cancels one GPU its node's step frees (else another step's, the step freeing the
/// most first), so the steps add up to what applying them frees — the pool's in use minus
/// after (steps added up to 34 where the plan freed 24, a MIG layout "freeing 7"
/// while filling idle GPUs of its own node).
fn freed_by(
    pool: &PoolLayout,
    who: &Steps,
    used_after: &BTreeSet<&str>,
) -> BTreeMap<String, String> {
    let (places, step_of_node, reclaim_ids) = (who.places, who.step_of_node, who.reclaim_ids);
    let mut freed_by = BTreeMap::new();
    for gpu in pool.in_use.difference(used_after) {
        let moved = pool
            .items
            .iter()
            .enumerate()
            .filter(|(i, it)| it.h.gpu == *gpu && places.contains_key(i))
            .max_by(|a, b| a.1.h.share().total_cmp(&b.1.h.share()))
            .and_then(|(i, _)| places.get(&i))
            .and_then(|(node, _)| step_of_node.get(node));
        let by = moved.cloned().or_else(|| {
            reclaim_ids
                .iter()
                .filter(|((g, _), _)| g == gpu)
                .map(|(_, id)| id.clone())
                .min()
        });
        if let Some(id) = by {
            freed_by.insert((*gpu).to_owned(), id);
        }
    }
    // The GPUs filled that were idle, each with the step of its node.
    let node_of: HashMap<&str, &str> = pool
        .nodes
        .iter()
        .flat_map(|n| n.gpus.iter().map(move |g| (g.uuid.as_str(), n.node)))
        .collect();
    for filled in used_after.difference(&pool.in_use) {
        let step = node_of
            .get(filled)
            .and_then(|node| step_of_node.get(node))
            .filter(|id| freed_by.values().any(|v| v == *id))
            .cloned()
            .or_else(|| most_freeing(&freed_by));
        let Some(step) = step else {
            break;
        };
        // The last GPU (in uuid order) that step frees is the one the filled GPU cancels.
        let cancelled = freed_by
            .iter()
            .rev()
            .find(|(_, id)| **id == step)
            .map(|(g, _)| g.clone());
        if let Some(g) = cancelled {
            freed_by.remove(&g);
        }
    }
    freed_by
}

/// The waiting work each step serves: a GPU kept for it goes to the step that would have
/// freed that GPU (else its node's step, else the step freeing the most), a MIG instance
/// kept in a layout to the step of that layout's node.
fn served(
    pool: &PoolLayout,
    step_of_node: &BTreeMap<&str, String>,
    would: &BTreeMap<String, String>,
) -> Vec<(String, Served)> {
    let mut out = Vec::new();
    for n in &pool.nodes {
        for (g, p) in n.gpus.iter().zip(&n.placed) {
            let Some(Placed::Bin(b)) = p else { continue };
            let bin = &pool.bins[*b];
            let node_step = step_of_node.get(n.node);
            let step = if bin.waiting_only() {
                would
                    .get(&g.uuid)
                    .or(node_step)
                    .cloned()
                    .or_else(|| most_freeing(would))
            } else {
                node_step.cloned()
            };
            let Some(step) = step else { continue };
            let profile = |wi: usize| match pool.waits[wi].ask {
                crate::plan::waiting::Ask::Mig(p, _) => Some(p.name.to_owned()),
                _ => None,
            };
            for &wi in &bin.waits {
                let w = pool.waits[wi].w;
                out.push((
                    step.clone(),
                    Served {
                        pod: w.name.clone(),
                        resource: w.resource.clone(),
                        node: n.node.into(),
                        gpu: g.uuid.clone(),
                        gpu_index: g.index,
                        profile: profile(wi),
                        since_ms: w.from_ms,
                    },
                ));
            }
        }
    }
    out
}

/// The step freeing the most GPUs (the smallest id among equals).
fn most_freeing(freed_by: &BTreeMap<String, String>) -> Option<String> {
    let mut n: BTreeMap<&str, usize> = BTreeMap::new();
    for id in freed_by.values() {
        *n.entry(id).or_default() += 1;
    }
    n.into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
        .map(|(id, _)| id.to_owned())
}
