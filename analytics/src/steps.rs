//! A pool's plan as approvable steps: one recommendation per node the plan changes
//! (`mig_layout`, `time_slicing`/`mps`, or `consolidate` when only tenants move), each with
//! its moves, its replay, and the GPUs it frees — every freed GPU counted by exactly one step,
//! so steps add up to the plan's total.

use model::inventory::Sharing;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use model::figures::count;

use crate::findings::{Ctx, Evidence, GIB};
use crate::holdings::Holding;
use crate::input::GpuRef;
use crate::mechanism::Mechanism;
use crate::mig::{MigPartedConfig, MigPartedEntry};
use crate::need::{plan_confidence, slot_now};
use crate::plan::pergpu::PinnedGroup;
use crate::plan::{self, Fit, FleetPlan, NodeAfter, NodePlan, Placed, PoolLayout, PoolPlan};
use crate::recommendation::{
    Move, Proposal, RecKind, Recommendation, Rejected, Served, Target, config_name,
    device_plugin_config, mig_target, rec_id,
};
use crate::replay::{Slot, replay};

/// What one pool's steps come to.
#[derive(Debug, Default)]
pub struct PoolSteps {
    pub recommendations: Vec<Recommendation>,
    /// Tenants (GPU, key) of steps replay called harmful: the plan is made again without
    /// moving them.
    pub harmful: Vec<(String, String)>,
    /// Freed GPU → the id of the step that frees it.
    pub freed_by: BTreeMap<String, String>,
    /// GPUs a step empties that are not counted as freed: GPU → (step id, why).
    pub held: BTreeMap<String, (String, String)>,
    /// Waiting work the plan serves, with the id of the step that serves it.
    pub served: Vec<(String, Served)>,
    pub pool: PoolPlan,
    pub nodes: Vec<NodePlan>,
}

/// Each node's step (into `out`, or its tenants into `out.harmful` where replay calls it
/// harmful), and the id of the step of each node that has one.
fn node_steps<'a>(
    ctx: &Ctx,
    pool: &PoolLayout<'a>,
    waste_ids: &HashMap<(String, String), String>,
    out: &mut PoolSteps,
) -> BTreeMap<&'a str, String> {
    let mut step_of_node = BTreeMap::new();
    if !pool.changes {
        return step_of_node;
    }
    for node in &pool.nodes {
        if let Some(step) = node_step(ctx, pool, node, waste_ids) {
            if step.rec.replay.harmful {
                out.harmful.extend(step.moved);
                continue;
            }
            step_of_node.insert(node.node, step.rec.id.clone());
            out.recommendations.push(step.rec);
        }
    }
    step_of_node
}

/// How a GPU is shared now, as a move's target would say it.
fn target_now(h: &Holding, g: &GpuRef) -> Target {
    match g.sharing {
        Sharing::Mig => {
            let slices = (h.share() * 7.0).round() as u32;
            Target::Mig {
                profile: String::new(),
                memory_gib: 0.0,
                compute_slices: slices,
            }
        }
        Sharing::TimeSlicing | Sharing::Mps => Target::Share {
            replicas: g.replicas.max(1) as u32,
        },
        Sharing::Exclusive => Target::WholeGpu,
    }
}

/// A move that changes nothing: same GPU, same kind and size of place.
fn unchanged(now: &Target, to: &Target) -> bool {
    match (now, to) {
        (Target::WholeGpu, Target::WholeGpu) => true,
        (
            Target::Mig {
                compute_slices: a, ..
            },
            Target::Mig {
                compute_slices: b, ..
            },
        ) => a == b,
        (Target::Share { replicas: a }, Target::Share { replicas: b }) => a >= b,
        _ => false,
    }
}

/// The profiles each MIG GPU of a node runs now, by GPU index (`3g.40gb` names).
fn mig_now(gpus: &[&GpuRef]) -> BTreeMap<i64, Vec<(String, u32)>> {
    gpus.iter()
        .filter(|g| g.sharing == Sharing::Mig)
        .map(|g| {
            let mut counts: BTreeMap<String, u32> = BTreeMap::new();
            for m in &g.mig {
                let name = m.profile.rsplit(' ').next().unwrap_or(&m.profile);
                *counts.entry(name.to_owned()).or_default() += 1;
            }
            (g.index, counts.into_iter().collect())
        })
        .collect()
}

/// Steps for one pool: under node-wide sharing, or — where the pool has a per-GPU mechanism
/// that pins groups and a plan under it frees more — under that mechanism
/// ([`plan::relay`]); what every per-GPU mechanism would free is stated against the plan
/// made.
pub fn pool_steps(
    ctx: &Ctx,
    pool: &PoolLayout,
    reclaim_ids: &HashMap<(String, String), String>,
    waste_ids: &HashMap<(String, String), String>,
) -> PoolSteps {
    let node_wide = layout_steps(ctx, pool, reclaim_ids, waste_ids, None);
    let best = node_wide
        .pool
        .worth
        .iter()
        .filter(|w| {
            w.pools_with > 0
                && w.beyond_plan > 0
                && w.mechanism.declared().chooser == crate::mechanism::Chooser::PlanPerGpu
        })
        .min_by_key(|w| w.gpus_after);
    let Some(m) = best.map(|w| w.mechanism) else {
        return node_wide;
    };
    let Some(relaid) = plan::relay(ctx, pool, m) else {
        return node_wide;
    };
    let mut per_gpu = layout_steps(ctx, &relaid, reclaim_ids, waste_ids, Some(&node_wide.pool));
    if !per_gpu.harmful.is_empty() || per_gpu.pool.gpus_freed <= node_wide.pool.gpus_freed {
        return node_wide;
    }
    per_gpu.pool.uses = Some(m);
    let price = pool.price_per_month(ctx.cfg);
    plan::pergpu::rebase(
        &mut per_gpu.pool.worth,
        per_gpu.pool.gpus_after,
        price,
        Some(m),
    );
    per_gpu
}

/// Steps for one laid-out pool; `node_wide`: the pool's node-wide plan, where this layout is
/// one under a per-GPU mechanism (its worth is kept, and its bound is the per-GPU one).
fn layout_steps(
    ctx: &Ctx,
    pool: &PoolLayout,
    reclaim_ids: &HashMap<(String, String), String>,
    waste_ids: &HashMap<(String, String), String>,
    node_wide: Option<&PoolPlan>,
) -> PoolSteps {
    let (cfg, places) = (ctx.cfg, pool.item_places());
    let mut out = PoolSteps::default();
    let step_of_node = node_steps(ctx, pool, waste_ids, &mut out);
    let mut used_after = pool.used_after();
    let (places, step_of_node) = (&places, &step_of_node);
    let who = crate::freed::Steps {
        places,
        step_of_node,
        reclaim_ids,
    };
    let accounted = crate::freed::account(ctx, pool, &who, &mut used_after);
    let repair = accounted.repair;
    (out.freed_by, out.held, out.served) = (accounted.freed_by, accounted.held, accounted.served);
    out.nodes = node_plans(ctx, pool, places, &used_after, &repair, node_wide.is_some());
    let all: Vec<usize> = (0..pool.items.len()).collect();
    let fixed = pool.fixed_gpus.len();
    let in_use = pool.in_use.len();
    let after = used_after.len();
    // GPUs kept whole for waiting work share with no one: they add to the bound.
    let kept_whole = pool
        .kept_for_waiting()
        .iter()
        .filter(|(_, b)| pool.bins[*b].fit == Fit::Whole)
        .count();
    let mut bound = (pool.bound_of(cfg, &all, fixed) + repair.len() + kept_whole).min(in_use);
    let nodes_in_use = out.nodes.len();
    let nodes_after = out.nodes.iter().filter(|n| n.gpus_after > 0).count();
    let freed = in_use.saturating_sub(after);
    let (has, seen) = plan::pergpu::in_place(ctx, pool);
    let worth = match node_wide {
        Some(p) => {
            // Under pinned groups the bound is the per-GPU one (the fewest GPUs any per-GPU
            // packing needs), where it is lower.
            let per_gpu = p.worth.iter().map(|w| w.bound_gpus).min().unwrap_or(bound);
            bound = bound.min(per_gpu).min(after);
            p.worth.clone()
        }
        None => plan::pergpu::worth(ctx, pool, in_use, after, repair.len(), &has),
    };
    out.pool = PoolPlan {
        cluster: pool.cluster.into(),
        model: pool.model.into(),
        nodes: pool.nodes.len(),
        gpus_in_use: in_use,
        bound_gpus: bound,
        gpus_after: after,
        gpus_freed: freed,
        nodes_in_use,
        nodes_freed: nodes_in_use - nodes_after,
        efficiency: plan::efficiency(in_use, bound, freed),
        money_per_month: freed as f64 * pool.price_per_month(cfg),
        held_for_repair: repair.len(),
        worth,
        has,
        seen,
        uses: None,
    };
    out
}

/// Each node's numbers after the pool's plan (`per_gpu`: a layout under a per-GPU mechanism).
fn node_plans(
    ctx: &Ctx,
    pool: &PoolLayout,
    places: &HashMap<usize, (&str, &GpuRef)>,
    used_after: &BTreeSet<&str>,
    repair: &BTreeMap<&str, String>,
    per_gpu: bool,
) -> Vec<NodePlan> {
    let cfg = ctx.cfg;
    let mut out = Vec::new();
    let fixed_on = |n: &NodeAfter| {
        n.placed
            .iter()
            .filter(|p| **p == Some(Placed::Fixed))
            .count()
    };
    let in_use_on = |n: &NodeAfter| {
        n.gpus
            .iter()
            .filter(|g| pool.in_use.contains(g.uuid.as_str()))
            .count()
    };
    // Nodes that send or receive tenants across nodes: their own numbers say little alone.
    let crossing: BTreeSet<&str> = places
        .iter()
        .filter(|(i, (node, _))| pool.items[**i].h.node != *node)
        .flat_map(|(i, (node, _))| [*node, pool.items[*i].h.node.as_str()])
        .collect();
    for n in &pool.nodes {
        let items: Vec<usize> = (0..pool.items.len())
            .filter(|&i| pool.items[i].h.node == n.node)
            .collect();
        let in_use = in_use_on(n);
        if in_use == 0 {
            continue;
        }
        let after = n
            .gpus
            .iter()
            .filter(|g| used_after.contains(g.uuid.as_str()))
            .count();
        // A GPU held for repair stays counted after the plan: the bound counts it too.
        let held_here = n
            .gpus
            .iter()
            .filter(|g| repair.contains_key(g.uuid.as_str()))
            .count();
        let mut bound = (pool.bound_of(cfg, &items, fixed_on(n)) + held_here).min(in_use);
        if per_gpu {
            // The node-wide rules' bound does not hold for pinned groups: none fewer is known
            // than the plan reaches.
            bound = bound.min(after);
        }
        out.push(NodePlan {
            cluster: pool.cluster.into(),
            node: n.node.into(),
            model: pool.model.into(),
            gpus_in_use: in_use,
            bound_gpus: bound,
            gpus_after: after,
            efficiency: if pool.changes && crossing.contains(n.node) {
                None
            } else {
                plan::efficiency(in_use, bound, in_use.saturating_sub(after))
            },
            sharing_after: if after == 0 {
                "empty".into()
            } else if pool.changes {
                sharing_after(pool, n)
            } else {
                "unchanged".into()
            },
        });
    }
    out
}

/// The node's sharing after the plan, in the words of `GpuRef::sharing`.
fn sharing_after(pool: &PoolLayout, n: &NodeAfter) -> String {
    let bins: Vec<&plan::Bin> = n
        .placed
        .iter()
        .filter_map(|p| match p {
            Some(Placed::Bin(b)) => Some(&pool.bins[*b]),
            _ => None,
        })
        .collect();
    if let Some(m) = bins.iter().find_map(|b| match b.fit {
        Fit::PerGpu(m) => Some(m),
        _ => None,
    }) {
        m.as_str().into()
    } else if bins.iter().any(|b| matches!(b.fit, Fit::Mig(_))) {
        "mig".into()
    } else if n.placed.contains(&Some(Placed::Fixed)) {
        n.gpus[0].sharing.as_str().into()
    } else if bins.iter().any(|b| b.fit == Fit::Share) {
        if low_occupancy(pool, &bins) {
            "mps".into()
        } else {
            "time_slicing".into()
        }
    } else {
        "exclusive".into()
    }
}

/// MPS suits tenants whose kernels leave most SMs idle (DCGM shows it).
fn low_occupancy(pool: &PoolLayout, bins: &[&plan::Bin]) -> bool {
    bins.iter()
        .filter(|b| b.fit == Fit::Share)
        .flat_map(|b| b.items.iter())
        .all(|&i| {
            let h = pool.items[i].h;
            h.signal() == "sm_active" && h.effective_hours() < 0.5 * h.active_hours().max(1e-9)
        })
}

/// The node's mig-parted config: GPUs without MIG instances MIG-disabled together, then each
/// distinct layout with its GPUs; named after the layout.
fn mig_parted(gpus: &[&GpuRef], layout: &BTreeMap<i64, Vec<(String, u32)>>) -> MigPartedConfig {
    let mut entries: Vec<MigPartedEntry> = Vec::new();
    let disabled: Vec<i64> = gpus
        .iter()
        .filter(|g| !layout.contains_key(&g.index))
        .map(|g| g.index)
        .collect();
    if !disabled.is_empty() {
        entries.push(MigPartedEntry {
            devices: disabled,
            mig_enabled: false,
            mig_devices: vec![],
        });
    }
    let mut grouped: BTreeMap<&[(String, u32)], Vec<i64>> = BTreeMap::new();
    for (idx, l) in layout {
        grouped.entry(l).or_default().push(*idx);
    }
    for (l, devices) in grouped {
        entries.push(MigPartedEntry {
            devices,
            mig_enabled: true,
            mig_devices: l.to_vec(),
        });
    }
    MigPartedConfig {
        name: config_name(&entries),
        entries,
    }
}

/// A node's step: the recommendation, and the tenants (GPU, key) it moves.
struct NodeStep {
    rec: Recommendation,
    moved: Vec<(String, String)>,
}

/// What a node's placement changes: the tenants that move, the bins they move into, the MIG
/// layout per GPU index and the most replicas a time-sliced GPU needs.
#[derive(Default)]
struct NodeChange {
    moves: Vec<Move>,
    touched_bins: BTreeSet<usize>,
    layout: BTreeMap<i64, Vec<(String, u32)>>,
    replicas: u32,
    /// Under a per-GPU mechanism: the mechanism, the groups pinned to the node's GPUs.
    pinned: Option<(Mechanism, Vec<PinnedGroup>)>,
}

fn node_change(ctx: &Ctx, pool: &PoolLayout, node: &NodeAfter) -> NodeChange {
    let mut c = NodeChange {
        replicas: 1,
        ..NodeChange::default()
    };
    let (moves, touched_bins, layout, replicas) = (
        &mut c.moves,
        &mut c.touched_bins,
        &mut c.layout,
        &mut c.replicas,
    );
    for (g, p) in node.gpus.iter().zip(&node.placed) {
        let Some(Placed::Bin(b)) = p else { continue };
        let bin = &pool.bins[*b];
        if let Fit::Mig(_) = bin.fit {
            let mut counts: BTreeMap<(u32, u32, &str), u32> = BTreeMap::new();
            for p in bin.profiles() {
                *counts
                    .entry((p.compute_slices, p.memory_slices, p.name))
                    .or_default() += 1;
            }
            layout.insert(
                g.index,
                counts
                    .into_iter()
                    .map(|((_, _, n), c)| (n.to_owned(), c))
                    .collect(),
            );
        }
        if bin.fit == Fit::Share {
            *replicas = (*replicas).max(bin.replicas as u32);
        }
        if let Fit::PerGpu(m) = bin.fit {
            let groups = &mut c.pinned.get_or_insert_with(|| (m, Vec::new())).1;
            groups.push(PinnedGroup {
                node: node.node.to_owned(),
                gpu: g.uuid.clone(),
                tenants: bin
                    .items
                    .iter()
                    .map(|&i| (pool.items[i].h.tenant.clone(), pool.items[i].memory))
                    .collect(),
            });
        }
        for &i in &bin.items {
            let it = &pool.items[i];
            let to = match it.fit {
                Fit::Mig(p) if matches!(bin.fit, Fit::Mig(_)) => mig_target(p),
                _ if bin.fit == Fit::Share => Target::Share {
                    replicas: bin.replicas as u32,
                },
                Fit::PerGpu(_) if bin.items.len() > 1 => Target::PerGpu {
                    memory_gib: (it.memory / GIB * 10.0).ceil() / 10.0,
                    tenants: bin.items.len() as u32,
                },
                _ => Target::WholeGpu,
            };
            let from = ctx.gpu(&it.h.gpu);
            let same =
                from.is_some_and(|f| f.uuid == g.uuid && unchanged(&target_now(it.h, f), &to));
            if !same {
                touched_bins.insert(*b);
                moves.push(Move {
                    tenant: it.h.tenant.clone(),
                    from_gpu: it.h.gpu.clone(),
                    from_node: it.h.node.clone(),
                    from_gpu_index: from.map_or(-1, |f| f.index),
                    to_node: node.node.to_owned(),
                    to_gpu_index: g.index,
                    target: to,
                });
            }
        }
    }
    c
}

/// Replay of a node's step: today's places of everyone in a bin that changes, against the bins.
fn node_replay(ctx: &Ctx, pool: &PoolLayout, touched_bins: &BTreeSet<usize>) -> crate::Replay {
    let mut before = Vec::new();
    let mut after = Vec::new();
    for &b in touched_bins {
        let bin = &pool.bins[b];
        for &i in &bin.items {
            let h = pool.items[i].h;
            before.push(slot_now(h, ctx.gpu(&h.gpu)));
        }
        match bin.fit {
            Fit::Mig(_) => {
                for &i in &bin.items {
                    if let Fit::Mig(p) = pool.items[i].fit {
                        after.push(Slot {
                            compute: p.compute_share(),
                            memory_bytes: p.memory_gib * GIB,
                            holdings: vec![pool.items[i].h],
                        });
                    }
                }
            }
            _ => after.push(Slot {
                compute: 1.0,
                memory_bytes: pool.memory_total,
                holdings: bin.items.iter().map(|&i| pool.items[i].h).collect(),
            }),
        }
    }
    replay(&before, &after, 0.0, ctx.cfg.replay_tolerance)
}

/// How a node's step changes it: the sharing it turns to.
struct Change<'a> {
    mig: bool,
    share: bool,
    after_mode: String,
    c: &'a NodeChange,
    names: Vec<String>,
    /// The ResourceClaims a per-GPU step emits (none for other steps).
    claims: Vec<plan::claims::Claim>,
    from_nodes: String,
}

/// The step's kind, proposal and summary; None where the MIG layout is not valid.
fn node_proposal(
    pool: &PoolLayout,
    node: &NodeAfter,
    ch: &Change,
) -> Option<(RecKind, Proposal, String)> {
    let (mig_change, share_change, after_mode) = (ch.mig, ch.share, &ch.after_mode);
    let (moves, layout, replicas) = (&ch.c.moves, &ch.c.layout, ch.c.replicas);
    let (names, from_nodes) = (&ch.names, &ch.from_nodes);
    let used = node.used();
    let step = if let Some((m, groups)) = &ch.c.pinned {
        let claims = &ch.claims;
        let shared = groups.iter().filter(|g| g.tenants.len() > 1).count();
        (
            RecKind::PerGpuSharing,
            Proposal::PerGpu {
                mechanism: *m,
                objects_yaml: plan::claims::yaml(claims),
                moves: moves.clone(),
            },
            format!(
                "pin {} to {} of {} through {} ({} to create){from_nodes}, {} in use",
                names.join(", "),
                count(shared as f64, "shared GPU", "shared GPUs"),
                node.node,
                m.declared().name,
                count(claims.len() as f64, "ResourceClaim", "ResourceClaims"),
                count(used as f64, "GPU", "GPUs")
            ),
        )
    } else if mig_change {
        let family = pool.family?;
        let config = mig_parted(&node.gpus, layout);
        let name = config.name.clone();
        config.validate(family).ok()?;
        (
            RecKind::MigLayout,
            Proposal::MigLayout {
                config_name: name.clone(),
                mig_parted_yaml: config.to_yaml(),
                moves: moves.clone(),
            },
            format!(
                "run {} as {name}: {} in MIG instances on {}{from_nodes}, {} in use",
                node.node,
                count(
                    moves
                        .iter()
                        .filter(|m| matches!(m.target, Target::Mig { .. }))
                        .count() as f64,
                    "tenant",
                    "tenants"
                ),
                count(layout.len() as f64, "GPU", "GPUs"),
                count(used as f64, "GPU", "GPUs")
            ),
        )
    } else if share_change || after_mode == "time_slicing" || after_mode == "mps" {
        let mode = after_mode.clone();
        let kind = if mode == "mps" {
            RecKind::Mps
        } else {
            RecKind::TimeSlicing
        };
        (
            kind,
            Proposal::Sharing {
                mode: mode.clone(),
                replicas,
                device_plugin_yaml: device_plugin_config(&mode, replicas),
                moves: moves.clone(),
            },
            format!(
                "share {}'s GPUs by {} ({replicas} replicas through the device plugin: any {replicas} of its tenants may meet on one GPU, and fit) and run {}{from_nodes} on {}",
                node.node,
                if mode == "mps" { "MPS" } else { "time-slicing" },
                names.join(", "),
                count(used as f64, "GPU", "GPUs")
            ),
        )
    } else {
        let before_n = node
            .gpus
            .iter()
            .filter(|g| pool.in_use.contains(g.uuid.as_str()))
            .count();
        (
            RecKind::Consolidate,
            Proposal::Consolidate {
                moves: moves.clone(),
                gpus_before: before_n,
                gpus_after: used,
            },
            format!(
                "move {}{from_nodes} onto {} ({} in use)",
                names.join(", "),
                node.node,
                count(used as f64, "GPU", "GPUs")
            ),
        )
    };
    Some(step)
}

/// A node's step, unless it changes nothing.
fn node_step(
    ctx: &Ctx,
    pool: &PoolLayout,
    node: &NodeAfter,
    waste_ids: &HashMap<(String, String), String>,
) -> Option<NodeStep> {
    let cfg = ctx.cfg;
    let cluster = pool.cluster;
    let c = node_change(ctx, pool, node);
    let after_mode = sharing_after(pool, node);
    let now_mode = node.gpus[0].sharing.as_str();
    let mig_change = after_mode == "mig" && (now_mode != "mig" || mig_now(&node.gpus) != c.layout);
    let share_change = (after_mode == "time_slicing" || after_mode == "mps")
        && (now_mode != after_mode
            || node
                .gpus
                .iter()
                .any(|g| (g.replicas.max(1) as u32) < c.replicas));
    if c.moves.is_empty() && !mig_change && !share_change {
        return None;
    }
    let name = |key: &str| ctx.name(cluster, key);
    let claims = c
        .pinned
        .iter()
        .flat_map(|(m, groups)| {
            groups
                .iter()
                .flat_map(move |g| plan::claims::resource_claims(*m, g, &name))
        })
        .collect();
    let r = node_replay(ctx, pool, &c.touched_bins);
    let moves = &c.moves;
    let tenants: Vec<String> = moves.iter().map(|m| m.tenant.clone()).collect();
    let moved: Vec<(String, String)> = moves
        .iter()
        .map(|m| (m.from_gpu.clone(), m.tenant.clone()))
        .collect();
    let holdings_here: Vec<&Holding> = node
        .placed
        .iter()
        .filter_map(|p| match p {
            Some(Placed::Bin(b)) => Some(&pool.bins[*b]),
            _ => None,
        })
        .flat_map(|b| b.items.iter().map(|&i| pool.items[i].h))
        .collect();
    let names: Vec<String> = tenants.iter().map(|t| ctx.name(cluster, t)).collect();
    let arriving: Vec<&Move> = moves.iter().filter(|m| m.from_node != node.node).collect();
    let from_nodes = if arriving.is_empty() {
        String::new()
    } else {
        let sources: BTreeSet<&str> = arriving.iter().map(|m| m.from_node.as_str()).collect();
        format!(
            " ({} from {})",
            arriving.len(),
            sources.into_iter().collect::<Vec<_>>().join(", ")
        )
    };
    let change = Change {
        mig: mig_change,
        share: share_change,
        after_mode,
        c: &c,
        names,
        claims,
        from_nodes,
    };
    let (kind, proposal, summary) = node_proposal(pool, node, &change)?;
    let findings: Vec<String> = moved
        .iter()
        .filter_map(|k| waste_ids.get(k).cloned())
        .collect();
    let rec = Recommendation {
        id: rec_id(kind, node.node),
        kind,
        cluster: cluster.into(),
        node: node.node.into(),
        gpus: node.gpus.iter().map(|g| g.uuid.clone()).collect(),
        tenants: tenants.clone(),
        team: None,
        summary,
        confidence: plan_confidence(&holdings_here, &tenants, cfg),
        findings,
        proposal,
        replay: r,
        evidence: vec![Evidence::new(
            "node GPU utilization",
            "gpu_util",
            format!("node:{}", node.node),
            ctx.input.from_ms,
            ctx.input.to_ms,
        )],
        requires: Vec::new(),
        serves: Vec::new(),
        interrupts: Vec::new(),
    };
    Some(NodeStep { rec, moved })
}

/// The fleet plan and its steps.
#[derive(Debug, Default)]
pub struct FleetSteps {
    pub recommendations: Vec<Recommendation>,
    pub rejected: Vec<Rejected>,
    /// Freed GPU → the step that frees it (reclaims included).
    pub freed_by: BTreeMap<String, String>,
    /// Emptied GPUs held for repair → (the step that empties it, why).
    pub held: BTreeMap<String, (String, String)>,
    /// Waiting work the plan serves, with the step serving it.
    pub served: Vec<(String, Served)>,
    pub plan: FleetPlan,
    /// Where the plan puts each tenant it moves: (from GPU, tenant) → (step id, move).
    pub moves: HashMap<(String, String), (String, Move)>,
}

/// A pairing the packer refused, as people read it.
fn refused(layout: &PoolLayout, refusal: &plan::Refusal) -> Rejected {
    let it = &layout.items[refusal.item];
    let others: Vec<String> = refusal
        .bin
        .iter()
        .map(|&j| layout.items[j].h.tenant.clone())
        .collect();
    let why = if refusal.contended.is_finite() {
        format!(
            "by the needs they fit, but replayed hour by hour their demand collides in {} (more than the replay tolerates)",
            count(refusal.contended, "hour", "hours")
        )
    } else {
        "replayed hour by hour their memory would overflow".to_owned()
    };
    let reason = format!(
        "{} would share a GPU with {}: {why}; kept apart",
        it.h.tenant,
        others.join(", ")
    );
    let mut tenants = vec![it.h.tenant.clone()];
    tenants.extend(others);
    Rejected {
        kind: RecKind::TimeSlicing,
        cluster: layout.cluster.into(),
        node: it.h.node.clone(),
        tenants,
        reason,
        replay: None,
    }
}

/// The most times the plan is made again after replay refused a step (each time without
/// moving that step's tenants).
const MAX_TRIES: usize = 8;

/// Plans every pool, turns each into steps, and totals the fleet. A step whose replay
/// predicts harm (it should not: the packer checks the same hours) sends its tenants back to
/// where they are, and the plan is made again.
pub fn fleet(
    ctx: &Ctx,
    holdings: &[Holding],
    reclaimed: &BTreeSet<(&str, &str)>,
    reclaim_ids: &HashMap<(String, String), String>,
    waste_ids: &HashMap<(String, String), String>,
) -> FleetSteps {
    let cfg = ctx.cfg;
    let mut fixed: BTreeSet<(String, String)> = BTreeSet::new();
    let mut out = FleetSteps::default();
    for attempt in 0..MAX_TRIES {
        let layouts = plan::plan_pools(ctx, holdings, reclaimed, &fixed);
        let mut done = FleetSteps::default();
        let mut harmful = Vec::new();
        for layout in &layouts {
            let s = pool_steps(ctx, layout, reclaim_ids, waste_ids);
            harmful.extend(s.harmful);
            for r in &s.recommendations {
                for m in r.moves() {
                    done.moves.insert(
                        (m.from_gpu.clone(), m.tenant.clone()),
                        (r.id.clone(), m.clone()),
                    );
                }
            }
            done.recommendations.extend(s.recommendations);
            done.freed_by.extend(s.freed_by);
            done.held.extend(s.held);
            done.served.extend(s.served);
            done.plan.pools.push(s.pool);
            done.plan.nodes.extend(s.nodes);
            done.rejected
                .extend(layout.refused.iter().map(|r| refused(layout, r)));
        }
        if harmful.is_empty() || attempt + 1 == MAX_TRIES {
            out = done;
            break;
        }
        fixed.extend(harmful);
    }
    out.plan.currency = cfg.currency.clone();
    out.plan.sum_pools();
    out
}
