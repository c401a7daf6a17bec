//! The fleet plan: one consistent placement of every live tenant per pool (nodes of one GPU
//! model in one cluster), packed by what each tenant needs (p99 memory and p95 compute, with
//! headroom) into whole GPUs, MIG instances or time-sliced GPUs, across the pool's nodes so
//! whole nodes empty, and checked against the recorded hourly demand while it packs. The
//! bound — the fewest GPUs that demand needs under the same rules — says how close it gets.
//!
//! [`crate::steps`] turns a pool's placement into approvable recommendations.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::Config;
use crate::findings::{Ctx, GIB};
use crate::holdings::{Holding, HourUse};
use crate::input::GpuRef;
use crate::mig::{self, MigFamily, Profile};
use crate::recommend::need;
use crate::replay;
use model::rollup::HOUR_MS;

/// Hours in a month of cost: 365 × 24 / 12.
pub const HOURS_PER_MONTH: f64 = 730.0;

/// The plan over the whole fleet: non-overlapping totals and the steps that reach them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FleetPlan {
    /// GPUs some allocation held over the window (reclaimed ones included).
    pub gpus_in_use: usize,
    /// GPUs the plan uses.
    pub gpus_after: usize,
    pub gpus_freed: usize,
    /// Nodes with a GPU in use, and nodes the plan empties.
    pub nodes_in_use: usize,
    pub nodes_freed: usize,
    /// The fewest GPUs the recorded demand needs under the same headroom rules.
    pub bound_gpus: usize,
    /// `gpus_freed / (gpus_in_use − bound_gpus)`; None when nothing could be freed.
    pub efficiency: Option<f64>,
    /// What the freed GPUs cost per month at the configured prices.
    pub money_per_month: f64,
    pub currency: String,
    /// Recommendation ids of the plan's steps, most GPUs freed first.
    pub steps: Vec<String>,
    pub pools: Vec<PoolPlan>,
    pub nodes: Vec<NodePlan>,
}

/// One pool's numbers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PoolPlan {
    pub cluster: String,
    pub model: String,
    pub nodes: usize,
    pub gpus_in_use: usize,
    pub bound_gpus: usize,
    pub gpus_after: usize,
    pub gpus_freed: usize,
    pub nodes_in_use: usize,
    pub nodes_freed: usize,
    pub efficiency: Option<f64>,
    pub money_per_month: f64,
}

/// One node's numbers: GPUs in use, its own bound (its tenants alone), GPUs after the plan.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NodePlan {
    pub cluster: String,
    pub node: String,
    pub model: String,
    pub gpus_in_use: usize,
    pub bound_gpus: usize,
    pub gpus_after: usize,
    pub efficiency: Option<f64>,
    /// exclusive | mig | time_slicing | mps | empty | unchanged
    pub sharing_after: String,
}

/// `freed / (in_use − bound)`, None when the bound leaves nothing to free.
pub fn efficiency(in_use: usize, bound: usize, freed: usize) -> Option<f64> {
    (in_use > bound).then(|| ((freed as f64 / (in_use - bound) as f64) * 1000.0).round() / 1000.0)
}

/// How a tenant is packed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fit {
    Whole,
    Mig(&'static Profile),
    Share,
}

/// A tenant on a GPU, as the packer sees it.
#[derive(Debug, Clone)]
pub struct Item<'a> {
    pub h: &'a Holding,
    /// Compute (GPU-equivalents) and memory (bytes) it needs, headroom included.
    pub compute: f64,
    pub memory: f64,
    /// The node it must stay on (Slurm jobs, host users, tenants holding several GPUs).
    pub pin: Option<&'a str>,
    /// (hour, p95 effective use, peak memory bytes): what replay reads.
    pub hours: Vec<(i64, f64, f64)>,
    pub fit: Fit,
}

/// A GPU of the plan and who runs on it.
#[derive(Debug, Clone)]
pub struct Bin {
    pub fit: Fit,
    pub items: Vec<usize>,
    pub pin: Option<String>,
    compute: f64,
    memory: f64,
    profiles: Vec<&'static Profile>,
    hourly: BTreeMap<i64, (f64, f64)>,
}

impl Bin {
    pub fn profiles(&self) -> &[&'static Profile] {
        &self.profiles
    }
}

/// A tenant the packer kept off a time-sliced GPU because the recorded hours collide.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub item: usize,
    /// The items already on that GPU.
    pub bin: Vec<usize>,
    /// Contended hours the pairing would have had (infinite: memory would overflow).
    pub contended: f64,
}

/// What sits on a GPU after the plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Placed {
    /// Left as it is: a tenant on it cannot be sized (too little data, no effective use).
    Fixed,
    Bin(usize),
}

/// One node of a pool after the plan: its GPUs (by index) and what each runs.
#[derive(Debug, Clone)]
pub struct NodeAfter<'a> {
    pub node: &'a str,
    pub gpus: Vec<&'a GpuRef>,
    pub placed: Vec<Option<Placed>>,
}

impl NodeAfter<'_> {
    pub fn used(&self) -> usize {
        self.placed.iter().filter(|p| p.is_some()).count()
    }
}

/// A pool's plan: the items, their bins and where each bin runs.
#[derive(Debug)]
pub struct PoolLayout<'a> {
    pub cluster: &'a str,
    pub model: &'a str,
    pub family: Option<&'static MigFamily>,
    pub memory_total: f64,
    pub items: Vec<Item<'a>>,
    pub bins: Vec<Bin>,
    pub nodes: Vec<NodeAfter<'a>>,
    /// Holdings that stay where they are, by GPU.
    pub fixed_gpus: BTreeSet<&'a str>,
    /// GPUs in use now (allocated, reclaimed included) and with live tenants.
    pub in_use: BTreeSet<&'a str>,
    pub live_gpus: BTreeSet<&'a str>,
    /// Whether the plan beats today's placement of the live tenants; if not, nothing moves.
    pub changes: bool,
    /// Pairings replay kept apart.
    pub refused: Vec<Refusal>,
}

impl PoolLayout<'_> {
    /// The GPUs the plan uses: those it places something on, or, when it changes nothing, the
    /// GPUs the live tenants hold today.
    pub fn used_after(&self) -> BTreeSet<&str> {
        if !self.changes {
            return self.live_gpus.clone();
        }
        self.nodes
            .iter()
            .flat_map(|n| {
                n.gpus
                    .iter()
                    .zip(&n.placed)
                    .filter(|(_, p)| p.is_some())
                    .map(|(g, _)| g.uuid.as_str())
            })
            .collect()
    }

    /// Where each item runs: (node, GPU) after the plan.
    pub fn item_places(&self) -> HashMap<usize, (&str, &GpuRef)> {
        let mut out = HashMap::new();
        for n in &self.nodes {
            for (g, p) in n.gpus.iter().zip(&n.placed) {
                if let Some(Placed::Bin(b)) = p {
                    for &i in &self.bins[*b].items {
                        out.insert(i, (n.node, *g));
                    }
                }
            }
        }
        out
    }

    /// The fewest GPUs the demand of `items` (plus `fixed` GPUs left as they are) needs under
    /// the plan's rules — a lower bound: tenants that need a whole GPU each take one; the rest
    /// need at least their summed compute and memory needs, one GPU for each need above half a
    /// GPU, and, hour by hour, their summed recorded demand (all but the hours replay
    /// tolerates) and memory. It ignores pins, MIG granularity and node boundaries, so no
    /// placement can beat it.
    pub fn bound_of(&self, cfg: &Config, items: &[usize], fixed: usize) -> usize {
        let mut whole = 0usize;
        let mut sharable: Vec<(f64, f64)> = Vec::new();
        let mut hourly: BTreeMap<i64, (f64, f64)> = BTreeMap::new();
        for &i in items {
            let it = &self.items[i];
            if it.fit == Fit::Whole && needs_whole(it.compute, it.memory, self.memory_total) {
                whole += 1;
                continue;
            }
            sharable.push((it.compute, it.memory / self.memory_total));
            for &(hour, eff, mem) in &it.hours {
                let e = hourly.entry(hour).or_default();
                e.0 += eff;
                e.1 += mem;
            }
        }
        let mut demand: Vec<f64> = hourly.values().map(|v| v.0).collect();
        demand.sort_by(|a, b| b.total_cmp(a));
        let skip = allowed(cfg, demand.len()).floor() as usize;
        let by_hour = demand.get(skip).copied().map_or(0, gpus);
        let by_hour_memory = hourly
            .values()
            .map(|v| gpus(v.1 / self.memory_total))
            .max()
            .unwrap_or(0);
        let by_need = needs_bound(&sharable);
        fixed + whole + by_need.max(by_hour).max(by_hour_memory)
    }
}

/// A need as shares of one GPU: (compute, memory).
type Need = (f64, f64);

/// GPUs for a fractional need (1e-9 spared for float noise).
fn gpus(x: f64) -> usize {
    (x - 1e-9).ceil().max(0.0) as usize
}

/// A lower bound on GPUs for items of (compute, memory) shares, each at most one GPU: the
/// summed needs; and, for the items above half a GPU in one dimension (no two of them share a
/// GPU), one GPU each plus what the rest cannot fit beside them — the rest's summed needs
/// beyond the room those GPUs leave, and all of whatever fits beside none of them.
fn needs_bound(items: &[Need]) -> usize {
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

/// Whether a holding still runs at the end of the window (an allocation in its last two
/// hours): the plan is about what runs now; a finished job or a replaced pod needs no GPU.
pub fn is_current(h: &Holding, to_ms: i64) -> bool {
    h.rows
        .iter()
        .rev()
        .take_while(|(hour, _)| *hour + 2 * HOUR_MS > to_ms)
        .any(|(_, a)| a.alloc_n > 0)
}

/// A tenant that cannot share a GPU with anyone: it needs (nearly) all of one.
fn needs_whole(compute: f64, memory: f64, memory_total: f64) -> bool {
    compute >= 1.0 - 1e-9 || memory > memory_total
}

/// Every pool of the fleet, planned. `reclaimed` holdings are gone from the plan; holdings in
/// `fixed_tenants` (GPU, tenant) stay where they are (a retry after replay refused a step).
pub fn plan_pools<'a>(
    ctx: &Ctx<'a>,
    holdings: &'a [Holding],
    reclaimed: &BTreeSet<(&str, &str)>,
    fixed_tenants: &BTreeSet<(String, String)>,
) -> Vec<PoolLayout<'a>> {
    let input = ctx.input;
    // Nodes by (cluster, node) with their GPUs; mixed-model nodes are left alone.
    let mut node_gpus: BTreeMap<(&str, &str), Vec<&GpuRef>> = BTreeMap::new();
    for g in &input.gpus {
        node_gpus.entry((&g.cluster, &g.node)).or_default().push(g);
    }
    // (node, its GPUs by index, whether they are of several models), by (cluster, model).
    type PoolNodes<'g> = Vec<(&'g str, Vec<&'g GpuRef>, bool)>;
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
    let mut out = Vec::new();
    for ((cluster, model), nodes) in pools {
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
        // Each try fixes the tenants of bins no node could take; the set only grows.
        loop {
            // A GPU with a tenant that cannot be sized stays as it is, with all its tenants.
            let mut fixed_gpus: BTreeSet<&str> = BTreeSet::new();
            let mut sized = Vec::new();
            for h in &live {
                let stays = forced.contains(&(h.gpu.clone(), h.tenant.clone()))
                    || mixed.contains(h.node.as_str());
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
                let several = gpus_of.get(&key).is_some_and(|g| g.len() > 1);
                if kinds.get(&key).copied() != Some("pod") || several {
                    it.pin = Some(it.h.node.as_str());
                }
            }
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
                        placed: vec![None; g.len()],
                    })
                    .collect(),
                fixed_gpus,
                in_use: in_use.clone(),
                live_gpus: live_gpus.clone(),
                changes: false,
                refused: Vec::new(),
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

/// Hours a tenant may be contended more than today (the replay's own rule).
fn allowed(cfg: &Config, hours: usize) -> f64 {
    replay::allowed(cfg.replay_tolerance, hours)
}

/// The smallest MIG profile below the whole GPU that fits the item's need and its recorded
/// hours alone.
fn mig_fit(cfg: &Config, family: &'static MigFamily, it: &Item) -> Option<&'static Profile> {
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

#[derive(Clone, Copy, PartialEq)]
enum Strategy {
    /// MIG instances wherever a profile fits; time-slicing where memory rules MIG out.
    MigFirst,
    /// Time-slicing for every tenant that can share.
    ShareFirst,
}

/// Packs the pool both ways (MIG first on MIG-capable models, time-slicing first), keeps the
/// one that needs fewer GPUs (MIG on a tie: it isolates), and places its bins on nodes.
/// Returns the items of bins no node could take (they stay where they are on the next try).
fn solve(cfg: &Config, pool: &mut PoolLayout) -> Vec<usize> {
    let strategies: &[Strategy] = if pool.family.is_some() {
        &[Strategy::MigFirst, Strategy::ShareFirst]
    } else {
        &[Strategy::ShareFirst]
    };
    let mut best: Option<(usize, Vec<Fit>, Packing)> = None;
    for &s in strategies {
        let fits: Vec<Fit> = pool
            .items
            .iter()
            .map(|it| fit(cfg, pool.family, pool.memory_total, it, s))
            .collect();
        let mut items = pool.items.clone();
        for (it, f) in items.iter_mut().zip(&fits) {
            it.fit = *f;
        }
        let packing = pack(cfg, &items, pool.memory_total, pool.family);
        let n = packing.bins.len();
        if best.as_ref().is_none_or(|b| n < b.0) {
            best = Some((n, fits, packing));
        }
    }
    let Some((_, fits, Packing { bins, refused })) = best else {
        return Vec::new();
    };
    for (it, f) in pool.items.iter_mut().zip(fits) {
        it.fit = f;
    }
    pool.bins = bins;
    pool.refused = refused;
    let unplaced = place(cfg, pool);
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

fn fit(
    cfg: &Config,
    family: Option<&'static MigFamily>,
    memory_total: f64,
    it: &Item,
    s: Strategy,
) -> Fit {
    if needs_whole(it.compute, it.memory, memory_total)
        || it.hours.iter().any(|h| h.2 > memory_total)
    {
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
struct Packing {
    bins: Vec<Bin>,
    refused: Vec<Refusal>,
}

/// First-fit decreasing. A tenant joins a time-sliced bin only when the static needs fit and
/// the bin's recorded hours stay within the replay's tolerance (no memory overflow in any
/// hour); MIG bins take profiles with a legal placement.
fn pack(
    cfg: &Config,
    items: &[Item],
    memory_total: f64,
    family: Option<&'static MigFamily>,
) -> Packing {
    let mut order: Vec<usize> = (0..items.len()).collect();
    let rank = |it: &Item| -> (u8, u32, u32, i64) {
        match it.fit {
            Fit::Whole => (0, 0, 0, 0),
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
    for i in order {
        let it = &items[i];
        let pin_ok = |b: &Bin| match (it.pin, b.pin.as_deref()) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        let mut chosen = None;
        let mut first_refusal = None;
        for (bi, b) in bins.iter().enumerate() {
            if !pin_ok(b) {
                continue;
            }
            match (it.fit, b.fit) {
                (Fit::Mig(p), Fit::Mig(_)) => {
                    let mut list = b.profiles.clone();
                    list.push(p);
                    if family.is_some_and(|f| f.place(&list).is_some()) {
                        chosen = Some(bi);
                        break;
                    }
                }
                (Fit::Share, Fit::Share) => {
                    if b.items.len() as u32 >= cfg.max_replicas
                        || b.compute + it.compute > 1.0 + 1e-9
                        || b.memory + it.memory > memory_total
                    {
                        continue;
                    }
                    match hourly_verdict(cfg, b, it, memory_total) {
                        Ok(()) => {
                            chosen = Some(bi);
                            break;
                        }
                        Err(contended) => {
                            if first_refusal.is_none() {
                                first_refusal = Some((bi, contended));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        match chosen {
            Some(bi) => add(&mut bins[bi], i, it),
            None => {
                let mut b = Bin {
                    fit: it.fit,
                    items: Vec::new(),
                    pin: None,
                    compute: 0.0,
                    memory: 0.0,
                    profiles: Vec::new(),
                    hourly: BTreeMap::new(),
                };
                add(&mut b, i, it);
                bins.push(b);
            }
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

fn add(b: &mut Bin, i: usize, it: &Item) {
    b.items.push(i);
    b.compute += it.compute;
    b.memory += it.memory;
    if let Fit::Mig(p) = it.fit {
        b.profiles.push(p);
    }
    if let Some(pin) = it.pin {
        b.pin = Some(pin.to_owned());
    }
    for &(hour, eff, mem) in &it.hours {
        let e = b.hourly.entry(hour).or_default();
        e.0 += eff;
        e.1 += mem;
    }
}

/// Whether `it` may join time-sliced bin `b` by the recorded hours: Err with the contended
/// hours when the merged demand would exceed the GPU in more hours than replay tolerates, or
/// memory would overflow in any hour.
fn hourly_verdict(cfg: &Config, b: &Bin, it: &Item, memory_total: f64) -> Result<(), f64> {
    let mine: HashMap<i64, (f64, f64)> = it.hours.iter().map(|&(h, e, m)| (h, (e, m))).collect();
    let shared = b.hourly.iter().map(|(h, v)| {
        let m = mine.get(h).copied().unwrap_or_default();
        (v.0 + m.0, v.1 + m.1)
    });
    let only_mine = it
        .hours
        .iter()
        .filter(|x| !b.hourly.contains_key(&x.0))
        .map(|x| (x.1, x.2));
    let (mut hours, mut contended) = (0usize, 0usize);
    for (eff, mem) in shared.chain(only_mine) {
        hours += 1;
        if mem > memory_total {
            return Err(f64::INFINITY);
        }
        if eff > 1.0 + 1e-9 {
            contended += 1;
        }
    }
    if contended as f64 > allowed(cfg, hours) {
        return Err(contended as f64);
    }
    Ok(())
}

/// What a node may run after the plan.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Class {
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
    fn takes(self, fit: Fit, mig: bool) -> Option<Class> {
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

/// Places the bins on the pool's nodes: fixed GPUs stay; pinned bins go to their node; the
/// others fill the nodes already opened before opening another, whole GPUs first, then MIG,
/// then time-sliced; finally a bin goes back to the node its tenants are on when that node
/// is open anyway and has room. A time-sliced bin joins a node only when the node stays safe
/// under any assignment the device plugin may make ([`device_plugin_safe`]). Returns the bins
/// no node could take.
fn place(cfg: &Config, pool: &mut PoolLayout) -> Vec<usize> {
    let n = pool.nodes.len();
    let mut class = vec![Class::Open; n];
    for (ni, node) in pool.nodes.iter_mut().enumerate() {
        for (gi, g) in node.gpus.iter().enumerate() {
            if pool.fixed_gpus.contains(g.uuid.as_str()) {
                node.placed[gi] = Some(Placed::Fixed);
                class[ni] = if node.gpus.iter().all(|g| g.sharing == "exclusive") {
                    Class::WholeOnly
                } else {
                    Class::Locked
                };
            }
        }
    }
    let mig = pool.family.is_some();
    // How much of each bin's tenants each node holds now.
    let home: Vec<BTreeMap<&str, f64>> = pool
        .bins
        .iter()
        .map(|b| {
            let mut m = BTreeMap::new();
            for &i in &b.items {
                *m.entry(pool.items[i].h.node.as_str()).or_default() += pool.items[i].h.share();
            }
            m
        })
        .collect();
    let tenants_now: BTreeMap<&str, usize> =
        pool.items.iter().fold(BTreeMap::new(), |mut m, it| {
            *m.entry(it.h.node.as_str()).or_default() += 1;
            m
        });
    let mut at: Vec<Option<usize>> = vec![None; pool.bins.len()];
    let mut unplaced = Vec::new();
    let mut order: Vec<usize> = (0..pool.bins.len()).collect();
    let stage = |b: &Bin| -> u8 {
        match (b.pin.is_some(), b.fit) {
            (true, _) => 0,
            (false, Fit::Whole) => 1,
            (false, Fit::Mig(_)) => 2,
            (false, Fit::Share) => 3,
        }
    };
    order.sort_by_key(|&b| (stage(&pool.bins[b]), b));
    let free =
        |nodes: &[NodeAfter], ni: usize| nodes[ni].placed.iter().filter(|p| p.is_none()).count();
    for b in order {
        let bin = &pool.bins[b];
        let candidates: Vec<usize> = (0..n)
            .filter(|&ni| bin.pin.as_deref().is_none_or(|p| p == pool.nodes[ni].node))
            .filter(|&ni| free(&pool.nodes, ni) > 0 && class[ni].takes(bin.fit, mig).is_some())
            .filter(|&ni| bin.fit != Fit::Share || device_plugin_safe(cfg, pool, ni, b))
            .collect();
        let opened = |ni: usize| pool.nodes[ni].used() > 0;
        let best = candidates.iter().copied().max_by(|&a, &c| {
            let key = |ni: usize| {
                (
                    opened(ni),
                    home[b].get(pool.nodes[ni].node).copied().unwrap_or(0.0),
                    tenants_now.get(pool.nodes[ni].node).copied().unwrap_or(0),
                    pool.nodes[ni].gpus.len(),
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
        let slot = pool.nodes[ni].placed.iter().position(|p| p.is_none());
        if let Some(gi) = slot {
            pool.nodes[ni].placed[gi] = Some(Placed::Bin(b));
            at[b] = Some(ni);
        }
    }
    // Back home when home is open anyway and takes the bin.
    for b in 0..pool.bins.len() {
        let Some(now) = at[b] else { continue };
        let Some((home_node, _)) = home[b]
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
        if fit == Fit::Share && !device_plugin_safe(cfg, pool, hi, b) {
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
            at[b] = Some(hi);
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
    unplaced
}

/// Whether node `ni` with time-sliced bin `b` added is safe as the device plugin runs it. Time-slicing is node-wide: the plugin advertises `replicas` slots on
/// each GPU and hands them to pods without choosing who shares a physical GPU, so any
/// `replicas` of the node's time-sliced tenants may land on one GPU. Safe means that holds for
/// the worst such group: the node's `replicas` largest memory needs (p99 plus headroom) fit one
/// GPU, and in all but the hours replay tolerates, the `replicas` largest recorded demands of
/// that hour add up to at most one GPU (a sufficient condition: no group can contend in an hour
/// where the largest one does not).
fn device_plugin_safe(cfg: &Config, pool: &PoolLayout, ni: usize, b: usize) -> bool {
    let mut bins: Vec<usize> = pool.nodes[ni]
        .placed
        .iter()
        .filter_map(|p| match p {
            Some(Placed::Bin(x)) if pool.bins[*x].fit == Fit::Share => Some(*x),
            _ => None,
        })
        .collect();
    if !bins.contains(&b) {
        bins.push(b);
    }
    let items: Vec<&Item> = bins
        .iter()
        .flat_map(|&x| pool.bins[x].items.iter().map(|&i| &pool.items[i]))
        .collect();
    let replicas = bins
        .iter()
        .map(|&x| pool.bins[x].items.len())
        .max()
        .unwrap_or(1);
    worst_group_fits(cfg, &items, replicas, pool.memory_total)
}

/// Whether any `r` of `items` fit one GPU: memory needs and, hour by hour within replay's
/// tolerance, recorded demand and peak memory.
fn worst_group_fits(cfg: &Config, items: &[&Item], r: usize, memory_total: f64) -> bool {
    let top = |mut v: Vec<f64>| -> f64 {
        v.sort_by(|a, b| b.total_cmp(a));
        v.iter().take(r).sum()
    };
    if top(items.iter().map(|it| it.memory).collect()) > memory_total * (1.0 + 1e-9) {
        return false;
    }
    let mut by_hour: BTreeMap<i64, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for it in items {
        for &(hour, eff, mem) in &it.hours {
            let e = by_hour.entry(hour).or_default();
            e.0.push(eff);
            e.1.push(mem);
        }
    }
    let hours = by_hour.len();
    let mut contended = 0usize;
    for (_, (eff, mem)) in by_hour {
        if top(mem) > memory_total * (1.0 + 1e-9) {
            return false;
        }
        if top(eff) > 1.0 + 1e-9 {
            contended += 1;
        }
    }
    contended as f64 <= allowed(cfg, hours)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo's H100 pool: two trainers near a whole GPU's memory and three small pods whose
    /// memory adds up to just over one GPU. Summed needs say 3 GPUs; none of the small pods fits
    /// beside a trainer, and together they need two: 4.
    #[test]
    fn the_bound_sees_what_fits_beside_the_large_tenants() {
        let items = [
            (0.72, 0.98),
            (0.72, 0.98),
            (0.16, 0.30),
            (0.09, 0.25),
            (0.28, 0.47),
        ];
        assert_eq!(needs_bound(&items), 4);
        // Small ones that fit the room the large ones leave need nothing more.
        assert_eq!(
            needs_bound(&[(0.7, 0.5), (0.7, 0.5), (0.2, 0.4), (0.2, 0.4)]),
            2
        );
        // Compute-large and memory-large tenants may share: no dimension alone decides.
        assert_eq!(needs_bound(&[(0.8, 0.1), (0.1, 0.8)]), 1);
        assert_eq!(needs_bound(&[]), 0);
    }

    /// Issue 43: time-slicing is node-wide, so a node whose GPUs each pair a heavy tenant with
    /// a light one is unsafe: the device plugin may put both heavy ones on one GPU.
    #[test]
    fn a_time_sliced_node_is_judged_by_its_worst_group_not_its_pairs() {
        const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
        let cfg = Config::default();
        let h = Holding {
            cluster: "c".into(),
            node: "n".into(),
            gpu: "g".into(),
            tenant: "t".into(),
            total: Default::default(),
            rows: vec![],
        };
        let item = |compute: f64, memory_gib: f64| Item {
            h: &h,
            compute,
            memory: memory_gib * GIB,
            pin: None,
            hours: (0..48)
                .map(|i| (i * HOUR_MS, compute * 0.9, memory_gib * GIB * 0.9))
                .collect(),
            fit: Fit::Share,
        };
        let (heavy, light) = (item(0.6, 30.0), item(0.3, 10.0));
        let total = 80.0 * GIB;
        // Each GPU's own pair fits (0.54 + 0.27 a GPU)...
        assert!(worst_group_fits(&cfg, &[&heavy, &light], 2, total));
        // ...but two heavy ones on one GPU contend every hour (1.08).
        assert!(!worst_group_fits(
            &cfg,
            &[&heavy, &light, &heavy, &light],
            2,
            total
        ));
        // Memory decides alone: three 30-GiB tenants per GPU cannot be guaranteed 80 GiB.
        let big = item(0.1, 30.0);
        assert!(worst_group_fits(&cfg, &[&big, &big], 2, total));
        assert!(!worst_group_fits(&cfg, &[&big, &big, &big], 3, total));
        // Light ones only: any two fit.
        assert!(worst_group_fits(
            &cfg,
            &[&light, &light, &light, &light],
            2,
            total
        ));
    }

    #[test]
    fn efficiency_is_freed_over_what_the_bound_leaves() {
        assert_eq!(efficiency(10, 6, 3), Some(0.75));
        assert_eq!(efficiency(10, 6, 4), Some(1.0));
        // Nothing to free: no ratio (not 0 %, not 100 %).
        assert_eq!(efficiency(5, 5, 0), None);
    }
}
