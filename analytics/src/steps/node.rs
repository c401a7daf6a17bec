//! One node's step of a pool's plan: what its placement changes (moves, MIG layout,
//! replicas, per-GPU groups), the replay of the bins it touches, and the recommendation it
//! becomes — a MIG layout (a mig-parted config, or DynamicMIG claims where the pool carves
//! instances at allocation), a sharing config, a per-GPU sharing step (pinned claims, or the
//! requests a scheduler places within), or a consolidation.

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
use crate::plan::{self, Fit, NodeAfter, Placed, PoolLayout, SharingAfter};
use crate::recommendation::{
    Move, Proposal, RecKind, Recommendation, Target, config_name, device_plugin_config, mig_target,
    rec_id,
};
use crate::replay::{Slot, replay};

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
pub(super) struct NodeStep {
    pub(super) rec: Recommendation,
    pub(super) moved: Vec<(String, String)>,
}

/// What a node's placement changes: the tenants that move, the bins they move into, the MIG
/// layout per GPU index and the most replicas a time-sliced GPU needs.
#[derive(Default)]
struct NodeChange {
    moves: Vec<Move>,
    touched_bins: BTreeSet<usize>,
    layout: BTreeMap<i64, Vec<(String, u32)>>,
    replicas: u32,
    /// Under a per-GPU mechanism: the mechanism, the groups on the node's GPUs (pinned, or
    /// as its scheduler is expected to pack them).
    pinned: Option<(Mechanism, Vec<PinnedGroup>)>,
    /// Under a scheduler-placed mechanism: what each tenant of those groups requests
    /// (key, memory bytes, whether it keeps a whole GPU).
    requests: Vec<(String, f64, bool)>,
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
            if m.placed_by_scheduler() {
                c.requests.extend(bin.items.iter().map(|&i| {
                    let it = &pool.items[i];
                    (it.h.tenant.clone(), it.memory, it.fit == Fit::Whole)
                }));
            }
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
                Fit::PerGpu(m) if bin.items.len() > 1 || m.placed_by_scheduler() => {
                    Target::PerGpu {
                        memory_gib: (it.memory / GIB * 10.0).ceil() / 10.0,
                        tenants: bin.items.len() as u32,
                        scheduled: m.placed_by_scheduler(),
                    }
                }
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
    /// The MIG layout is carried out by DRA DynamicMIG claims, not a mig-parted config.
    dynamic_mig: bool,
    share: bool,
    after_mode: SharingAfter,
    c: &'a NodeChange,
    names: Vec<String>,
    /// The ResourceClaims a pinned per-GPU step emits (none for other steps).
    claims: Vec<plan::claims::Claim>,
    /// What a scheduler-placed step asks of each pod: (pods that change, YAML).
    requests: (usize, String),
    from_nodes: String,
}

/// A per-GPU step: the claims that pin each group, or the requests a scheduler places within.
fn per_gpu_proposal(
    node: &NodeAfter,
    ch: &Change,
    m: Mechanism,
    groups: &[PinnedGroup],
) -> (RecKind, Proposal, String) {
    let (moves, names, from_nodes) = (&ch.c.moves, ch.names.join(", "), &ch.from_nodes);
    let used = count(node.used() as f64, "GPU", "GPUs");
    let shared = groups.iter().filter(|g| g.tenants.len() > 1).count();
    let (objects_yaml, summary) = if m.placed_by_scheduler() {
        let (changed, yaml) = &ch.requests;
        (
            yaml.clone(),
            format!(
                "request memory for {names} ({} to change) and let {} place them: packed, they share {} of {}{from_nodes}, {used} in use — any placement the requests allow holds",
                count(*changed as f64, "pod", "pods"),
                m.declared().name,
                count(shared as f64, "GPU", "GPUs"),
                node.node,
            ),
        )
    } else {
        (
            plan::claims::yaml(&ch.claims),
            format!(
                "pin {names} to {} of {} through {} ({} to create){from_nodes}, {used} in use",
                count(shared as f64, "shared GPU", "shared GPUs"),
                node.node,
                m.declared().name,
                count(ch.claims.len() as f64, "ResourceClaim", "ResourceClaims"),
            ),
        )
    };
    (
        RecKind::PerGpuSharing,
        Proposal::PerGpu {
            mechanism: m,
            objects_yaml,
            moves: moves.clone(),
        },
        summary,
    )
}

/// A MIG layout carried out by DRA DynamicMIG: a claim per moved pod for an instance of its
/// profile on its GPU, carved at allocation — no mig-parted config, no node drain.
fn dynamic_mig_proposal(node: &NodeAfter, ch: &Change) -> (RecKind, Proposal, String) {
    let m = Mechanism::DraDynamicMig;
    let n = ch.claims.len() as f64;
    (
        RecKind::MigLayout,
        Proposal::PerGpu {
            mechanism: m,
            objects_yaml: plan::claims::yaml(&ch.claims),
            moves: ch.c.moves.clone(),
        },
        format!(
            "carve {} for {} on {} through {} ({} to create; the node is not drained){}, {} in use",
            count(n, "MIG instance", "MIG instances"),
            ch.names.join(", "),
            node.node,
            m.declared().name,
            count(n, "ResourceClaim", "ResourceClaims"),
            ch.from_nodes,
            count(node.used() as f64, "GPU", "GPUs")
        ),
    )
}

/// The step's kind, proposal and summary; None where the MIG layout is not valid.
fn node_proposal(
    pool: &PoolLayout,
    node: &NodeAfter,
    ch: &Change,
) -> Option<(RecKind, Proposal, String)> {
    let (mig_change, share_change, after_mode) = (ch.mig, ch.share, ch.after_mode);
    let (moves, layout, replicas) = (&ch.c.moves, &ch.c.layout, ch.c.replicas);
    let (names, from_nodes) = (&ch.names, &ch.from_nodes);
    let used = node.used();
    let step = if let Some((m, groups)) = &ch.c.pinned {
        per_gpu_proposal(node, ch, *m, groups)
    } else if mig_change {
        let family = pool.family?;
        let config = mig_parted(&node.gpus, layout);
        let name = config.name.clone();
        config.validate(family).ok()?;
        if ch.dynamic_mig {
            return Some(dynamic_mig_proposal(node, ch));
        }
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
    } else if share_change
        || matches!(
            after_mode,
            SharingAfter::Mode(Sharing::TimeSlicing | Sharing::Mps)
        )
    {
        let mode = if after_mode == SharingAfter::Mode(Sharing::Mps) {
            Sharing::Mps
        } else {
            Sharing::TimeSlicing
        };
        let kind = if mode == Sharing::Mps {
            RecKind::Mps
        } else {
            RecKind::TimeSlicing
        };
        (
            kind,
            Proposal::Sharing {
                mode,
                replicas,
                device_plugin_yaml: device_plugin_config(mode, replicas),
                moves: moves.clone(),
            },
            format!(
                "share {}'s GPUs by {} ({replicas} replicas through the device plugin: any {replicas} of its tenants may meet on one GPU, and fit) and run {}{from_nodes} on {}",
                node.node,
                if mode == Sharing::Mps {
                    "MPS"
                } else {
                    "time-slicing"
                },
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

/// Whether the node keeps MIG instances or GPUs for waiting pods. Such a node keeps its
/// mig-parted config under DynamicMIG: those pods ask the device plugin for the instances (as
/// gpulens saw them ask).
fn serves_waits(pool: &PoolLayout, node: &NodeAfter) -> bool {
    node.placed.iter().any(|p| match p {
        Some(Placed::Bin(b)) => !pool.bins[*b].waits.is_empty(),
        _ => false,
    })
}

/// The objects a node's step emits: the claims (pinned groups, or DynamicMIG's per MIG move)
/// and, under a scheduler-placed mechanism, the requests (pods that change, YAML).
fn objects(
    ctx: &Ctx,
    pool: &PoolLayout,
    node: &NodeAfter,
    c: &NodeChange,
    dynamic_mig: bool,
) -> (Vec<plan::claims::Claim>, (usize, String)) {
    let name = |key: &str| ctx.name(pool.cluster, key);
    let claims = if dynamic_mig {
        let uuid_of = |index: i64| {
            node.gpus
                .iter()
                .find(|g| g.index == index)
                .map_or("", |g| g.uuid.as_str())
        };
        plan::claims::mig_claims(&c.moves, &uuid_of, &name)
    } else {
        c.pinned
            .iter()
            .flat_map(|(m, groups)| {
                groups
                    .iter()
                    .flat_map(move |g| plan::claims::resource_claims(*m, g, &name))
            })
            .collect()
    };
    let requests = match &c.pinned {
        Some((m, _)) if m.placed_by_scheduler() => {
            plan::claims::scheduled_requests(*m, &c.requests, &name)
        }
        _ => (0, String::new()),
    };
    (claims, requests)
}

/// A node's step, unless it changes nothing.
pub(super) fn node_step(
    ctx: &Ctx,
    pool: &PoolLayout,
    node: &NodeAfter,
    waste_ids: &HashMap<(String, String), String>,
    dynamic_mig: bool,
) -> Option<NodeStep> {
    let cfg = ctx.cfg;
    let cluster = pool.cluster;
    let c = node_change(ctx, pool, node);
    let after_mode = sharing_after(pool, node);
    let now_mode = node.gpus[0].sharing;
    let mig_change = after_mode == SharingAfter::Mode(Sharing::Mig)
        && (now_mode != Sharing::Mig || mig_now(&node.gpus) != c.layout);
    let share_change = matches!(
        after_mode,
        SharingAfter::Mode(Sharing::TimeSlicing | Sharing::Mps)
    ) && (SharingAfter::Mode(now_mode) != after_mode
        || node
            .gpus
            .iter()
            .any(|g| (g.replicas.max(1) as u32) < c.replicas));
    if c.moves.is_empty() && !mig_change && !share_change {
        return None;
    }
    let dynamic_mig = dynamic_mig && mig_change && c.pinned.is_none() && !serves_waits(pool, node);
    let (claims, requests) = objects(ctx, pool, node, &c, dynamic_mig);
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
        dynamic_mig,
        share: share_change,
        after_mode,
        c: &c,
        names,
        claims,
        requests,
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
        held_out: None,
        ahead: None,
    };
    Some(NodeStep { rec, moved })
}

/// The node's sharing after the plan, in the words of `GpuRef::sharing`.
pub(super) fn sharing_after(pool: &PoolLayout, n: &NodeAfter) -> SharingAfter {
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
        SharingAfter::PerGpu(m)
    } else if bins.iter().any(|b| matches!(b.fit, Fit::Mig(_))) {
        SharingAfter::Mode(Sharing::Mig)
    } else if n.placed.contains(&Some(Placed::Fixed)) {
        SharingAfter::Mode(n.gpus[0].sharing)
    } else if bins.iter().any(|b| b.fit == Fit::Share) {
        if low_occupancy(pool, &bins) {
            SharingAfter::Mode(Sharing::Mps)
        } else {
            SharingAfter::Mode(Sharing::TimeSlicing)
        }
    } else {
        SharingAfter::Mode(Sharing::Exclusive)
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
