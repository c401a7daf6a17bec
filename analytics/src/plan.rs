//! The fleet plan: one consistent placement of every live tenant per pool (nodes of one GPU
//! model in one cluster), packed by what each tenant needs (p99 memory and p95 compute, with
//! headroom) into whole GPUs, MIG instances or time-sliced GPUs, across the pool's nodes so
//! whole nodes empty, and checked against the recorded hourly demand while it packs. The
//! bound — the fewest GPUs that demand needs under the same rules — says how close it gets.
//!
//! [`crate::steps`] turns a pool's placement into approvable recommendations.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::findings::{Ctx, GIB};
use crate::holdings::{Holding, HourUse};
use crate::input::GpuRef;
use crate::mig::{self, MigFamily, Profile};
use crate::need::need;
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
    /// For a time-sliced GPU: the replicas its node advertises per GPU.
    pub replicas: usize,
}

impl Bin {
    fn new(fit: Fit) -> Bin {
        Bin {
            fit,
            items: Vec::new(),
            pin: None,
            compute: 0.0,
            memory: 0.0,
            profiles: Vec::new(),
            hourly: BTreeMap::new(),
            replicas: 1,
        }
    }

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
#[derive(Debug, Clone)]
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
    /// the plan's rules — a valid lower bound ([`bound`]).
    pub fn bound_of(&self, cfg: &Config, items: &[usize], fixed: usize) -> usize {
        let items: Vec<&Item> = items.iter().map(|&i| &self.items[i]).collect();
        fixed + bound(cfg, &items, self.memory_total, self.family)
    }
}

/// A lower bound on the GPUs `items` need under the packer's rules, whatever it chooses:
///
/// - a tenant whose memory need (p99 plus headroom) or any recorded hour's peak exceeds a GPU
///   runs alone: one GPU each;
/// - the others' memory needs are never shared by time, so they need at least their summed
///   memory, and one GPU for each need above half a GPU plus what cannot fit beside those
///   ([`needs_bound`] on memory alone);
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
fn sharing_bound(cfg: &Config, items: &[&Item], mig_able: &[bool], memory_total: f64) -> usize {
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
fn pair_fits(cfg: &Config, a: &Item, b: &Item, memory_total: f64) -> bool {
    let mut gpu = Bin::new(Fit::Share);
    add(&mut gpu, 0, a);
    gpu.memory + b.memory <= memory_total && hourly_verdict(cfg, &gpu, b, memory_total).is_ok()
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

/// A tenant that cannot share a GPU with anyone: its memory need, or a recorded hour's peak,
/// exceeds a GPU's memory. (Compute alone never decides: tenants busy at different hours may
/// share, which the recorded hours decide.)
fn runs_alone(it: &Item, memory_total: f64) -> bool {
    it.memory > memory_total || it.hours.iter().any(|h| h.2 > memory_total)
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

/// Plans the pool both ways (MIG first on MIG-capable models, time-slicing first): packs
/// the tenants, places the bins on nodes, and keeps the way that uses fewer GPUs with every
/// bin placed (MIG on a tie: it isolates). Returns the items of bins no node could take (they
/// stay where they are on the next try).
fn solve(cfg: &Config, pool: &mut PoolLayout) -> Vec<usize> {
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

fn fit(
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
struct Packing {
    bins: Vec<Bin>,
    refused: Vec<Refusal>,
}

/// First-fit decreasing. A tenant joins a time-sliced bin when the memory needs (p99 plus
/// headroom, never shared by time) fit and, hour by hour, the bin's recorded demand stays
/// within the replay's tolerance with no memory overflow in any hour — compute is the demand
/// series, not one number, so tenants busy at different hours share. MIG bins take profiles
/// with a legal placement.
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
                        || b.memory + it.memory > memory_total
                    {
                        continue;
                    }
                    match hourly_verdict(cfg, b, it, memory_total) {
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
        match chosen {
            Some(bi) => add(&mut bins[bi], i, it),
            None => {
                let mut b = Bin::new(it.fit);
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
    let (mut hours, mut contended) = (0usize, 0usize);
    let mut mine = it.hours.iter().peekable();
    let mut theirs = b.hourly.iter().peekable();
    loop {
        // The next hour either holds, summed (both lists are in time order).
        let (eff, mem) = match (mine.peek(), theirs.peek()) {
            (None, None) => break,
            (Some(&&(h, e, m)), Some(&(&t, _))) if h < t => {
                mine.next();
                (e, m)
            }
            (Some(&&(h, e, m)), Some(&(&t, &(te, tm)))) if h == t => {
                mine.next();
                theirs.next();
                (e + te, m + tm)
            }
            (Some(&&(_, e, m)), None) => {
                mine.next();
                (e, m)
            }
            (_, Some(&(_, &(te, tm)))) => {
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
/// others fill the nodes already opened before opening another, whole GPUs first, then MIG.
/// Time-sliced tenants are then grouped node by node as the device plugin runs them
/// ([`group_shared`]); a tenant no group takes runs on a whole GPU. Finally a whole or MIG bin
/// goes back to the node its tenants are on when that node is open anyway and has room.
/// Returns the bins no node could take.
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
    // Time-sliced bins dissolve, and so do the lone tenants that could share: they are all
    // grouped per node below.
    let items = &pool.items;
    let (shared, kept): (Vec<Bin>, Vec<Bin>) = std::mem::take(&mut pool.bins)
        .into_iter()
        .partition(|b| b.items.iter().all(|&i| items[i].fit == Fit::Share));
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

/// How large a tenant is for grouping: the larger of its compute need and memory share.
fn weight(it: &Item, memory_total: f64) -> f64 {
    it.compute.max(it.memory / memory_total)
}

/// How much of each bin's tenants each node holds now.
fn homes<'a>(pool: &PoolLayout<'a>, b: usize) -> BTreeMap<&'a str, f64> {
    let mut m = BTreeMap::new();
    for &i in &pool.bins[b].items {
        *m.entry(pool.items[i].h.node.as_str()).or_default() += pool.items[i].h.share();
    }
    m
}

fn free(nodes: &[NodeAfter], ni: usize) -> usize {
    nodes[ni].placed.iter().filter(|p| p.is_none()).count()
}

/// Places whole and MIG bins, pinned ones first, each on an opened node before a new one,
/// preferring the node holding most of its tenants now.
fn place_bins(
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

/// Consecutive tenants a node's group may turn down before it stops looking (bounds the
/// work on large pools; the tenants are in decreasing size, so later ones rarely fit better).
const GROUP_SCAN: usize = 64;

/// Groups time-sliced tenants (`items`, largest first) node by node as the device plugin runs
/// them: it advertises `r` replicas of every GPU of a time-sliced node and hands them to pods
/// without choosing who shares a physical GPU, so a node is safe only when ANY `r` of its
/// tenants fit one GPU ([`Group`]). Nodes holding pinned tenants come first, then the others,
/// those holding most of the tenants now first. For each node every `r` from `max_replicas`
/// down to 2 is tried, taking tenants that keep the node safe (up to `r` per free GPU); the
/// `r` that saves most GPUs wins. Returns the tenants no node groups (they run alone).
fn group_shared(
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
const GROUP_SEEDS: usize = 8;

/// The tenants a node with `cap` slots of `r` replicas takes: the `forced` ones (pinned
/// there), then a seed and every tenant of `left` (largest first) that keeps the node safe.
/// None when the forced ones alone are not safe.
fn fill(
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
struct Group {
    r: usize,
    memory_total: f64,
    needs: Vec<f64>,
    /// The hours any member was in demand, in time order.
    hours: Vec<Slot>,
    contended: usize,
}

/// One hour of a [`Group`]: its `r` largest demands and memory peaks, largest first.
#[derive(Clone)]
struct Slot {
    hour: i64,
    effs: Vec<f64>,
    mems: Vec<f64>,
}

/// The sum of the `r` largest of `top` (kept sorted, largest first) with `x` added.
fn top_with(top: &[f64], x: f64, r: usize) -> f64 {
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

fn insert_top(top: &mut Vec<f64>, x: f64, r: usize) {
    let at = top.iter().position(|&v| x > v).unwrap_or(top.len());
    top.insert(at, x);
    top.truncate(r);
}

impl Group {
    fn new(r: usize, memory_total: f64) -> Group {
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
    fn try_add(&mut self, cfg: &Config, it: &Item) -> bool {
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

/// Back home: a whole or MIG bin returns to the node its tenants are on when that node is
/// open anyway and takes it; within a node, a bin takes the GPU its tenants are on when it
/// can.
fn back_home(pool: &mut PoolLayout, class: &[Class]) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether any `r` of `items` fit one GPU, as a time-sliced node's group judges it.
    fn worst_group_fits(cfg: &Config, items: &[&Item], r: usize, memory_total: f64) -> bool {
        let mut g = Group::new(r, memory_total);
        items.iter().all(|it| g.try_add(cfg, it))
    }

    /// A placeholder holding: the packer reads the items' own numbers.
    fn holding() -> Holding {
        Holding {
            cluster: "c".into(),
            node: "n".into(),
            gpu: "g".into(),
            tenant: "t".into(),
            total: Default::default(),
            rows: vec![],
        }
    }

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
        let cfg = Config::default();
        let h = holding();
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

    /// A tiny deterministic generator (xorshift64*), so the property tests need no crate.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Whether `items` may share one time-sliced GPU by the packer's rules.
    fn bin_ok(cfg: &Config, items: &[&Item], total: f64) -> bool {
        if items.len() as u32 > cfg.max_replicas
            || items.iter().map(|i| i.memory).sum::<f64>() > total
        {
            return false;
        }
        let mut hours: BTreeMap<i64, (f64, f64)> = BTreeMap::new();
        for it in items {
            for &(h, e, m) in &it.hours {
                let x = hours.entry(h).or_default();
                x.0 += e;
                x.1 += m;
            }
        }
        let contended = hours.values().filter(|v| v.0 > 1.0 + 1e-9).count();
        hours.values().all(|v| v.1 <= total) && contended as f64 <= allowed(cfg, hours.len())
    }

    /// The fewest time-sliced GPUs `items` need, by trying every assignment.
    fn exact(cfg: &Config, items: &[&Item], total: f64) -> usize {
        fn go<'a>(
            cfg: &Config,
            items: &[&'a Item<'a>],
            total: f64,
            i: usize,
            bins: &mut Vec<Vec<&'a Item<'a>>>,
            best: &mut usize,
        ) {
            if bins.len() >= *best {
                return;
            }
            if i == items.len() {
                *best = bins.len();
                return;
            }
            for b in 0..bins.len() {
                bins[b].push(items[i]);
                if bin_ok(cfg, &bins[b], total) {
                    go(cfg, items, total, i + 1, bins, best);
                }
                bins[b].pop();
            }
            bins.push(vec![items[i]]);
            go(cfg, items, total, i + 1, bins, best);
            bins.pop();
        }
        let mut best = items.len();
        go(cfg, items, total, 0, &mut Vec::new(), &mut best);
        best
    }

    /// Issue 43: on random small pools an exhaustive search never needs fewer GPUs than the
    /// bound, and neither does the packer (time-slicing only, or MIG where a profile fits).
    #[test]
    fn no_packing_beats_the_bound() {
        let total = 80.0 * GIB;
        let h = holding();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let family = mig::family("NVIDIA H100 80GB HBM3");
        assert!(family.is_some());
        for case in 0..300 {
            let cfg = Config {
                max_replicas: 2 + (case % 3) as u32,
                ..Config::default()
            };
            let n = 1 + (rng.next() * 7.0) as usize;
            let hours = 4 + (rng.next() * 20.0) as i64;
            let items: Vec<Item> = (0..n)
                .map(|_| {
                    // Diurnal, flat or spiky demand; memory from tiny to most of a GPU.
                    let base = rng.next() * 0.7;
                    let phase = (rng.next() * hours as f64) as i64;
                    let shape = rng.next();
                    let memory = (2.0 + rng.next() * 60.0) * GIB;
                    let hrs: Vec<(i64, f64, f64)> = (0..hours)
                        .map(|t| {
                            let eff = if shape < 0.33 {
                                base
                            } else if shape < 0.66 {
                                if (t + phase) % hours < hours / 2 {
                                    base + 0.3
                                } else {
                                    0.05
                                }
                            } else if (t + phase) % 7 == 0 {
                                0.9
                            } else {
                                base * rng.next()
                            };
                            (t * HOUR_MS, eff.min(1.0), memory * (0.6 + 0.3 * rng.next()))
                        })
                        .collect();
                    let mut effs: Vec<f64> = hrs.iter().map(|x| x.1).collect();
                    effs.sort_by(f64::total_cmp);
                    Item {
                        h: &h,
                        compute: (effs[effs.len() * 95 / 100] * 1.25).min(1.0),
                        memory,
                        pin: None,
                        hours: hrs,
                        fit: Fit::Share,
                    }
                })
                .collect();
            let refs: Vec<&Item> = items.iter().collect();
            let lower = bound(&cfg, &refs, total, None);
            let best = exact(&cfg, &refs, total);
            assert!(lower <= best, "case {case}: bound {lower} > exact {best}");
            assert!(lower >= 1 && best <= n);
            let packed = pack(&cfg, &items, total, None).bins.len();
            assert!(
                packed >= best,
                "case {case}: packed {packed} < exact {best}"
            );
            // With MIG allowed the bound still holds for either way of packing.
            let lower_mig = bound(&cfg, &refs, total, family);
            assert!(lower_mig <= lower);
            for s in [Strategy::MigFirst, Strategy::ShareFirst] {
                let mut fitted = items.clone();
                for it in &mut fitted {
                    it.fit = fit(&cfg, family, total, it, s);
                }
                let packed = pack(&cfg, &fitted, total, family).bins.len();
                assert!(
                    packed >= lower_mig,
                    "case {case}: packed {packed} < bound {lower_mig}"
                );
            }
        }
    }

    /// Complementary diurnal tenants share a GPU though each one's p95 needs most of it.
    #[test]
    fn tenants_busy_at_different_hours_share() {
        let cfg = Config::default();
        let h = holding();
        let diurnal = |day: bool| Item {
            h: &h,
            compute: 1.0,
            memory: 20.0 * GIB,
            pin: None,
            hours: (0..48)
                .map(|t| {
                    let busy = (t % 24 < 12) == day;
                    (t * HOUR_MS, if busy { 0.85 } else { 0.05 }, 15.0 * GIB)
                })
                .collect(),
            fit: Fit::Share,
        };
        let items = [diurnal(true), diurnal(false), diurnal(true), diurnal(false)];
        let packing = pack(&cfg, &items, 80.0 * GIB, None);
        assert_eq!(packing.bins.len(), 2);
        for b in &packing.bins {
            assert_eq!(b.items.len(), 2);
            // One of each: the two day tenants would contend every day.
            assert_ne!(b.items[0] % 2, b.items[1] % 2);
        }
        let refs: Vec<&Item> = items.iter().collect();
        assert_eq!(bound(&cfg, &refs, 80.0 * GIB, None), 2);
    }

    #[test]
    fn efficiency_is_freed_over_what_the_bound_leaves() {
        assert_eq!(efficiency(10, 6, 3), Some(0.75));
        assert_eq!(efficiency(10, 6, 4), Some(1.0));
        // Nothing to free: no ratio (not 0 %, not 100 %).
        assert_eq!(efficiency(5, 5, 0), None);
    }
}
