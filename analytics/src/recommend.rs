//! Recommendations, each replayed against the recorded demand before it is made:
//! `reclaim`, `right_size`, `consolidate` with `time_slicing`/`mps`, `mig_layout` and
//! `separate`. Proposals whose replay predicts harm are reported as rejected, not made.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::Config;
use crate::findings::{
    Ctx, Evidence, Finding, FindingKind, GIB, Severity, activity_evidence, finding_id, gib,
    stable_id,
};
use crate::holdings::Holding;
use crate::input::GpuRef;
use crate::mig::{self, MigPartedConfig, MigPartedEntry, Profile};
use crate::replay::{Replay, Slot, replay};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecKind {
    Reclaim,
    RightSize,
    Consolidate,
    MigLayout,
    TimeSlicing,
    Mps,
    Separate,
}

impl RecKind {
    pub const ALL: [RecKind; 7] = [
        RecKind::Reclaim,
        RecKind::RightSize,
        RecKind::Consolidate,
        RecKind::MigLayout,
        RecKind::TimeSlicing,
        RecKind::Mps,
        RecKind::Separate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RecKind::Reclaim => "reclaim",
            RecKind::RightSize => "right_size",
            RecKind::Consolidate => "consolidate",
            RecKind::MigLayout => "mig_layout",
            RecKind::TimeSlicing => "time_slicing",
            RecKind::Mps => "mps",
            RecKind::Separate => "separate",
        }
    }

    pub fn parse(s: &str) -> Option<RecKind> {
        RecKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Where a tenant would go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Target {
    WholeGpu,
    Mig {
        profile: String,
        memory_gib: f64,
        compute_slices: u32,
    },
    Share {
        replicas: u32,
    },
}

impl Target {
    fn describe(&self) -> String {
        match self {
            Target::WholeGpu => "a whole GPU".into(),
            Target::Mig { profile, .. } => format!("a MIG {profile} instance"),
            Target::Share { replicas } => format!("a 1/{replicas} time-slice share"),
        }
    }
}

/// A tenant's move in a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Move {
    pub tenant: String,
    pub from_gpu: String,
    /// Index of the GPU on the node it would run on.
    pub to_gpu_index: i64,
    pub target: Target,
}

/// What a recommendation proposes, ready to apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Proposal {
    Reclaim {
        tenant: String,
        gpus: Vec<String>,
        gpu_equivalents: f64,
    },
    RightSize {
        tenant: String,
        gpu: String,
        current: String,
        target: Target,
    },
    Consolidate {
        moves: Vec<Move>,
        gpus_before: usize,
        gpus_after: usize,
    },
    MigLayout {
        config_name: String,
        mig_parted_yaml: String,
        moves: Vec<Move>,
    },
    Sharing {
        mode: String,
        replicas: u32,
        device_plugin_yaml: String,
    },
    Separate {
        victim: String,
        aggressor: String,
        plan: String,
        moves: Vec<Move>,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recommendation {
    pub id: String,
    pub kind: RecKind,
    pub cluster: String,
    pub node: String,
    pub gpus: Vec<String>,
    pub tenants: Vec<String>,
    pub team: Option<String>,
    pub summary: String,
    /// 0–1: how much recorded data and which signal the recommendation rests on.
    pub confidence: f64,
    /// Ids of the findings it answers.
    pub findings: Vec<String>,
    pub proposal: Proposal,
    pub replay: Replay,
    pub evidence: Vec<Evidence>,
}

/// A proposal the replay turned down, kept so people can see why nothing was recommended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rejected {
    pub kind: RecKind,
    pub cluster: String,
    pub node: String,
    pub tenants: Vec<String>,
    pub reason: String,
    pub replay: Option<Replay>,
}

/// What the recommender produced, and the underutilized findings it confirms.
#[derive(Debug, Default)]
pub struct Output {
    pub recommendations: Vec<Recommendation>,
    pub rejected: Vec<Rejected>,
    pub underutilized: Vec<Finding>,
}

impl Output {
    /// A node plan's replay: returned when it predicts no harm, else the plan is listed under
    /// `rejected` with the replay's reason.
    fn unless_harmful(
        &mut self,
        kind: RecKind,
        cluster: &str,
        node: &str,
        tenants: &[String],
        r: Replay,
    ) -> Option<Replay> {
        if !r.harmful {
            return Some(r);
        }
        self.rejected.push(Rejected {
            kind,
            cluster: cluster.into(),
            node: node.into(),
            tenants: tenants.to_vec(),
            reason: r.reason.clone().unwrap_or_default(),
            replay: Some(r),
        });
        None
    }
}

fn confidence(h: &Holding, cfg: &Config) -> f64 {
    let coverage = (h.rows.len() as f64 / (cfg.min_alloc_hours * 6.0)).min(1.0);
    let signal = match h.signal() {
        "sm_active" => 1.0,
        "mixed" => 0.9,
        _ => 0.8,
    };
    (coverage * signal * 100.0).round() / 100.0
}

/// How sure a plan is: the confidence of the tenants it moves, weighted by the GPU-hours each
/// holds (a short-lived neighbour the plan does not touch, or barely weighs, cannot sink it).
fn plan_confidence(live: &[&Holding], moved: &[String], cfg: &Config) -> f64 {
    let touched: Vec<&&Holding> = live.iter().filter(|h| moved.contains(&h.tenant)).collect();
    let weight: f64 = touched.iter().map(|h| h.allocated_hours()).sum();
    if touched.is_empty() || weight <= 0.0 {
        return live.iter().map(|h| confidence(h, cfg)).fold(1.0, f64::min);
    }
    let c = touched
        .iter()
        .map(|h| confidence(h, cfg) * h.allocated_hours())
        .sum::<f64>()
        / weight;
    (c * 100.0).round() / 100.0
}

/// The tenant's current size on its GPU, in words.
fn current(h: &Holding, gpu: Option<&GpuRef>) -> String {
    let share = h.share();
    match gpu {
        Some(g) if g.sharing == "mig" => format!("a MIG slice of {}/7", (share * 7.0).round()),
        Some(g) if g.sharing == "time_slicing" || g.sharing == "mps" => {
            format!("a 1/{} {} share", g.replicas, g.sharing.replace('_', "-"))
        }
        _ if share >= 0.999 => "a whole GPU".into(),
        _ => format!("{share:.2} of a GPU"),
    }
}

/// What a tenant needs: memory p99 and compute p95 with headroom (bytes, GPU-equivalents).
fn need(h: &Holding, cfg: &Config) -> Option<(f64, f64)> {
    Some((
        h.mem_p99()? as f64 * (1.0 + cfg.memory_headroom),
        h.eff_p95()? * (1.0 + cfg.compute_headroom),
    ))
}

/// The smallest size strictly below the current share that fits the need, if any.
fn smaller_target(h: &Holding, gpu: &GpuRef, cfg: &Config) -> Option<(Target, f64, f64)> {
    let (mem, compute) = need(h, cfg)?;
    let share = h.share();
    if let Some(f) = mig::family(&gpu.model) {
        if let Some(p) = f.smallest_fitting(mem / GIB, compute)
            && p.compute_share() < share - 1e-6
        {
            return Some((mig_target(p), p.compute_share(), p.memory_gib * GIB));
        }
        return None;
    }
    (2..=cfg.max_replicas)
        .rev()
        .map(|k| (k, 1.0 / f64::from(k)))
        .find(|&(k, s)| {
            s >= compute && gpu.memory_total_bytes as f64 / f64::from(k) >= mem && s < share - 1e-6
        })
        .map(|(k, s)| {
            (
                Target::Share { replicas: k },
                s,
                gpu.memory_total_bytes as f64 / f64::from(k),
            )
        })
}

fn mig_target(p: &Profile) -> Target {
    Target::Mig {
        profile: p.name.into(),
        memory_gib: p.memory_gib,
        compute_slices: p.compute_slices,
    }
}

fn slot_now<'a>(h: &'a Holding, gpu: Option<&GpuRef>) -> Slot<'a> {
    let mem = gpu.map_or(f64::MAX, |g| g.memory_total_bytes as f64);
    let share = h.share().max(1e-6);
    Slot {
        compute: if gpu.is_some_and(|g| g.sharing == "time_slicing" || g.sharing == "mps") {
            1.0
        } else {
            share
        },
        memory_bytes: if gpu.is_some_and(|g| g.sharing == "mig") {
            mem * share
        } else {
            mem
        },
        holdings: vec![h],
    }
}

pub fn recommend(ctx: &Ctx, holdings: &[Holding], findings: &[Finding]) -> Output {
    let cfg = ctx.cfg;
    let mut out = Output::default();
    let idle_ids: HashMap<(&str, &str), &str> = findings
        .iter()
        .filter(|f| f.kind == FindingKind::IdleAllocation)
        .filter_map(|f| {
            Some((
                (f.gpu.as_deref()?, f.tenants.first()?.as_str()),
                f.id.as_str(),
            ))
        })
        .collect();
    let eligible = |h: &Holding| h.allocated_hours() >= cfg.min_alloc_hours;

    // Reclaim: idle nearly all the time it was allocated.
    let mut reclaimed: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut by_tenant: BTreeMap<(&str, &str, &str), Vec<&Holding>> = BTreeMap::new();
    for h in holdings
        .iter()
        .filter(|h| eligible(h) && h.idle_ratio() >= cfg.reclaim_idle_share)
    {
        by_tenant
            .entry((&h.cluster, &h.node, &h.tenant))
            .or_default()
            .push(h);
    }
    for ((cluster, node, tenant), hs) in by_tenant {
        let freed: f64 = hs.iter().map(|h| h.share()).sum();
        let gpus: Vec<String> = hs.iter().map(|h| h.gpu.clone()).collect();
        let name = ctx.name(cluster, tenant);
        let mem = hs.iter().filter_map(|h| h.mem_p99()).max().unwrap_or(0);
        let ids: Vec<String> = hs
            .iter()
            .filter_map(|h| {
                idle_ids
                    .get(&(h.gpu.as_str(), tenant))
                    .map(|s| s.to_string())
            })
            .collect();
        let r = Replay {
            hours: hs.iter().map(|h| h.rows.len()).max().unwrap_or(0),
            gpus_freed: freed,
            ..Replay::default()
        };
        for h in &hs {
            reclaimed.insert((&h.gpu, &h.tenant));
        }
        out.recommendations.push(Recommendation {
            id: rec_id(RecKind::Reclaim, &format!("{node}/{tenant}")),
            kind: RecKind::Reclaim,
            cluster: cluster.into(),
            node: node.into(),
            gpus: gpus.clone(),
            tenants: vec![tenant.into()],
            team: ctx.team(cluster, tenant),
            summary: format!(
                "reclaim {name}'s allocation on {node}: idle {:.0}% of the {:.0} GPU-hours it held{}; frees {freed:.2} GPU",
                hs[0].idle_ratio() * 100.0,
                hs.iter().map(|h| h.allocated_hours()).sum::<f64>(),
                if mem > 0 { format!(" while keeping {:.1} GiB of memory", gib(mem as f64)) } else { String::new() }
            ),
            confidence: confidence(hs[0], cfg),
            findings: ids,
            proposal: Proposal::Reclaim { tenant: tenant.into(), gpus, gpu_equivalents: freed },
            replay: r,
            evidence: vec![Evidence::new("allocated share", "alloc_share", format!("tenant:{tenant}"), ctx.input.from_ms, ctx.input.to_ms)],
        });
    }

    // Right-size, which also decides the underutilized findings.
    let mut sized: HashMap<(&str, &str), (Target, f64, f64)> = HashMap::new();
    for h in holdings.iter().filter(|h| eligible(h)) {
        if reclaimed.contains(&(h.gpu.as_str(), h.tenant.as_str())) {
            continue;
        }
        let Some(ratio) = h.effective_ratio() else {
            continue;
        };
        if ratio >= cfg.underutilized_ratio {
            continue;
        }
        let Some(gpu) = ctx.gpu(&h.gpu) else {
            continue;
        };
        let Some((target, compute, memory)) = smaller_target(h, gpu, cfg) else {
            continue;
        };
        let before = [slot_now(h, Some(gpu))];
        let after = [Slot {
            compute,
            memory_bytes: memory,
            holdings: vec![h],
        }];
        let freed = h.share() - compute;
        let r = replay(&before, &after, freed, cfg.replay_tolerance);
        let name = ctx.name(&h.cluster, &h.tenant);
        let now = current(h, Some(gpu));
        if r.harmful {
            out.rejected.push(Rejected {
                kind: RecKind::RightSize,
                cluster: h.cluster.clone(),
                node: h.node.clone(),
                tenants: vec![h.tenant.clone()],
                reason: format!(
                    "{name} on {}: {}",
                    target.describe(),
                    r.reason.clone().unwrap_or_default()
                ),
                replay: Some(r),
            });
            continue;
        }
        let (mem_p99, p95) = (h.mem_p99().unwrap_or(0) as f64, h.eff_p95().unwrap_or(0.0));
        let finding = Finding {
            id: finding_id(
                FindingKind::Underutilized,
                &format!("{}/{}", h.gpu, h.tenant),
                ctx.input.from_ms,
            ),
            kind: FindingKind::Underutilized,
            severity: if ratio < 0.1 && h.share() >= 0.99 {
                Severity::Warning
            } else {
                Severity::Info
            },
            cluster: h.cluster.clone(),
            node: h.node.clone(),
            gpu: Some(h.gpu.clone()),
            tenants: vec![h.tenant.clone()],
            team: ctx.team(&h.cluster, &h.tenant),
            from_ms: h.rows.first().map_or(ctx.input.from_ms, |r| r.0),
            to_ms: h
                .rows
                .last()
                .map_or(ctx.input.to_ms, |r| r.0 + model::rollup::HOUR_MS),
            signal: h.signal().into(),
            summary: format!(
                "{name} used {:.0}% of {} ({}: p95 {:.2} GPU, p99 memory {:.1} GiB) and would fit {}",
                ratio * 100.0,
                now,
                h.signal(),
                p95,
                gib(mem_p99),
                target.describe()
            ),
            metrics: BTreeMap::from([
                ("effective_ratio".into(), ratio),
                ("effective_p95_gpu".into(), p95),
                ("memory_p99_gib".into(), gib(mem_p99)),
                ("allocated_gpu_hours".into(), h.allocated_hours()),
                ("effective_gpu_hours".into(), h.effective_hours()),
            ]),
            evidence: vec![
                activity_evidence(h, ctx.input.from_ms, ctx.input.to_ms),
                Evidence::new(
                    "tenant memory",
                    "mem_used_bytes",
                    format!("tenant:{}", h.tenant),
                    ctx.input.from_ms,
                    ctx.input.to_ms,
                ),
            ],
        };
        out.recommendations.push(Recommendation {
            id: rec_id(RecKind::RightSize, &format!("{}/{}", h.gpu, h.tenant)),
            kind: RecKind::RightSize,
            cluster: h.cluster.clone(),
            node: h.node.clone(),
            gpus: vec![h.gpu.clone()],
            tenants: vec![h.tenant.clone()],
            team: finding.team.clone(),
            summary: format!(
                "move {name} from {now} to {}; frees {freed:.2} GPU",
                target.describe()
            ),
            confidence: confidence(h, cfg),
            findings: vec![finding.id.clone()],
            proposal: Proposal::RightSize {
                tenant: h.tenant.clone(),
                gpu: h.gpu.clone(),
                current: now,
                target: target.clone(),
            },
            replay: r,
            evidence: finding.evidence.clone(),
        });
        out.underutilized.push(finding);
        sized.insert((&h.gpu, &h.tenant), (target, compute, memory));
    }

    node_plans(ctx, holdings, &reclaimed, &sized, &mut out);
    separate(ctx, holdings, findings, &mut out);
    out
}

fn rec_id(kind: RecKind, subject: &str) -> String {
    stable_id(kind.as_str(), &[subject.as_bytes()])
}

/// Per node: pack what the tenants need onto as few GPUs as possible. MIG-capable models get
/// a mig-parted layout; others a consolidation onto time-sliced or MPS GPUs.
fn node_plans(
    ctx: &Ctx,
    holdings: &[Holding],
    reclaimed: &BTreeSet<(&str, &str)>,
    sized: &HashMap<(&str, &str), (Target, f64, f64)>,
    out: &mut Output,
) {
    let mut by_node: BTreeMap<(&str, &str), Vec<&Holding>> = BTreeMap::new();
    for h in holdings.iter().filter(|h| h.total.alloc_n > 0) {
        by_node.entry((&h.cluster, &h.node)).or_default().push(h);
    }
    for ((cluster, node), hs) in by_node {
        let mut gpus: Vec<&GpuRef> = ctx
            .input
            .gpus
            .iter()
            .filter(|g| g.cluster == cluster && g.node == node)
            .collect();
        gpus.sort_by_key(|g| g.index);
        let Some(model) = gpus.first().map(|g| g.model.as_str()) else {
            continue;
        };
        if gpus.iter().any(|g| g.model != model) {
            continue;
        }
        let live: Vec<&Holding> = hs
            .iter()
            .copied()
            .filter(|h| !reclaimed.contains(&(h.gpu.as_str(), h.tenant.as_str())))
            .collect();
        // GPUs in use after the reclaims: what a plan has to beat.
        let in_use: BTreeSet<&str> = live.iter().map(|h| h.gpu.as_str()).collect();
        // Only plans that change something: at least one right-sized tenant.
        if !live
            .iter()
            .any(|h| sized.contains_key(&(h.gpu.as_str(), h.tenant.as_str())))
        {
            continue;
        }
        let case = NodeCase {
            cluster,
            node,
            gpus,
            in_use,
            live,
        };
        match mig::family(model) {
            Some(family) => mig_plan(ctx, &case, family, sized, out),
            None => share_plan(ctx, &case, sized, out),
        }
    }
}

/// One node's case for a layout plan.
struct NodeCase<'a> {
    cluster: &'a str,
    node: &'a str,
    /// The node's GPUs by index (all of one model).
    gpus: Vec<&'a GpuRef>,
    /// GPUs in use after the reclaims: what a plan has to beat.
    in_use: BTreeSet<&'a str>,
    /// Holdings that stay (not reclaimed).
    live: Vec<&'a Holding>,
}

fn mig_plan(
    ctx: &Ctx,
    case: &NodeCase,
    family: &'static mig::MigFamily,
    sized: &HashMap<(&str, &str), (Target, f64, f64)>,
    out: &mut Output,
) {
    let cfg = ctx.cfg;
    let NodeCase {
        cluster,
        node,
        gpus,
        in_use,
        live,
    } = case;
    let (cluster, node) = (*cluster, *node);
    // Whole-GPU tenants that keep their GPU; everyone else needs a profile.
    let mut whole: Vec<&Holding> = Vec::new();
    let mut wants: Vec<(&Holding, &'static Profile)> = Vec::new();
    for h in live {
        let is_mig = gpus.iter().any(|g| g.uuid == h.gpu && g.sharing == "mig");
        let profile = match sized.get(&(h.gpu.as_str(), h.tenant.as_str())) {
            Some((Target::Mig { profile, .. }, _, _)) => family.profile(profile),
            _ if is_mig => need(h, cfg).and_then(|(m, c)| {
                family
                    .smallest_fitting(m / GIB, c)
                    .filter(|p| p.compute_share() <= h.share() + 1e-6)
            }),
            _ => None,
        };
        match profile {
            Some(p) => wants.push((h, p)),
            None if is_mig => return, // a MIG tenant we cannot size: leave the node alone
            None => whole.push(h),
        }
    }
    // First-fit decreasing into GPUs, each a legal placement.
    wants.sort_by_key(|(h, p)| {
        (
            std::cmp::Reverse(p.compute_slices),
            std::cmp::Reverse(p.memory_slices),
            h.tenant.clone(),
        )
    });
    let mut bins: Vec<Vec<(&Holding, &'static Profile)>> = Vec::new();
    for (h, p) in wants {
        let slot = bins.iter().position(|b| {
            let mut list: Vec<&Profile> = b.iter().map(|x| x.1).collect();
            list.push(p);
            family.place(&list).is_some()
        });
        match slot {
            Some(i) => bins[i].push((h, p)),
            None => bins.push(vec![(h, p)]),
        }
    }
    let whole_gpus: BTreeSet<&str> = whole.iter().map(|h| h.gpu.as_str()).collect();
    let needed = whole_gpus.len() + bins.len();
    if needed >= in_use.len() || needed > gpus.len() {
        return;
    }
    // GPU indexes: whole-GPU tenants keep theirs; MIG bins take the lowest others.
    let mut free: Vec<&GpuRef> = gpus
        .iter()
        .copied()
        .filter(|g| !whole_gpus.contains(g.uuid.as_str()))
        .collect();
    let mut moves = Vec::new();
    let mut layout: BTreeMap<i64, Vec<(String, u32)>> = BTreeMap::new();
    let mut before = Vec::new();
    let mut after = Vec::new();
    for bin in &bins {
        let g = free.remove(0);
        let mut counts: BTreeMap<(u32, u32, &str), u32> = BTreeMap::new();
        for (h, p) in bin {
            *counts
                .entry((p.compute_slices, p.memory_slices, p.name))
                .or_default() += 1;
            moves.push(Move {
                tenant: h.tenant.clone(),
                from_gpu: h.gpu.clone(),
                to_gpu_index: g.index,
                target: mig_target(p),
            });
            before.push(slot_now(h, gpus.iter().copied().find(|x| x.uuid == h.gpu)));
            after.push(Slot {
                compute: p.compute_share(),
                memory_bytes: p.memory_gib * GIB,
                holdings: vec![*h],
            });
        }
        layout.insert(
            g.index,
            counts
                .into_iter()
                .map(|((_, _, n), c)| (n.to_string(), c))
                .collect(),
        );
    }
    let freed = (in_use.len() - needed) as f64;
    let r = replay(&before, &after, freed, cfg.replay_tolerance);
    let tenants: Vec<String> = moves.iter().map(|m| m.tenant.clone()).collect();
    let Some(r) = out.unless_harmful(RecKind::MigLayout, cluster, node, &tenants, r) else {
        return;
    };
    // Entries: MIG-disabled GPUs together, then each distinct layout with its GPUs.
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
    let mut grouped: BTreeMap<Vec<(String, u32)>, Vec<i64>> = BTreeMap::new();
    for (idx, l) in &layout {
        grouped.entry(l.clone()).or_default().push(*idx);
    }
    for (l, devices) in grouped {
        entries.push(MigPartedEntry {
            devices,
            mig_enabled: true,
            mig_devices: l,
        });
    }
    let name = config_name(&entries);
    let config = MigPartedConfig {
        name: name.clone(),
        entries,
    };
    if let Err(e) = config.validate(family) {
        out.rejected.push(Rejected {
            kind: RecKind::MigLayout,
            cluster: cluster.into(),
            node: node.into(),
            tenants,
            reason: format!("generated layout is not valid: {e}"),
            replay: None,
        });
        return;
    }
    let summary = format!(
        "run {node} as {}: {} tenant(s) in MIG instances on {} GPU(s), {} whole GPU(s) kept; frees {freed:.0} GPU(s)",
        name,
        moves.len(),
        bins.len(),
        whole_gpus.len()
    );
    out.recommendations.push(Recommendation {
        id: rec_id(RecKind::MigLayout, node),
        kind: RecKind::MigLayout,
        cluster: cluster.into(),
        node: node.into(),
        gpus: gpus.iter().map(|g| g.uuid.clone()).collect(),
        tenants: tenants.clone(),
        team: None,
        summary,
        confidence: plan_confidence(live, &tenants, cfg),
        findings: vec![],
        proposal: Proposal::MigLayout {
            config_name: name,
            mig_parted_yaml: config.to_yaml(),
            moves,
        },
        replay: r,
        evidence: vec![Evidence::new(
            "node GPU utilization",
            "gpu_util",
            format!("node:{node}"),
            ctx.input.from_ms,
            ctx.input.to_ms,
        )],
    });
}

/// A mig-parted config name derived from the layout itself (`gpulens-mig-` and a hash of the
/// entries), so a changed layout gets a new name (the MIG manager acts on label changes only,
/// never on a changed config under the same name) and nodes with the same layout share one.
pub fn config_name(entries: &[MigPartedEntry]) -> String {
    let mut canonical = String::new();
    for e in entries {
        canonical.push_str(&format!(
            "{:?}|{}|{:?};",
            e.devices, e.mig_enabled, e.mig_devices
        ));
    }
    format!("gpulens-mig-{:012x}", fnv1a(canonical.as_bytes()) >> 16)
}

/// 64-bit FNV-1a: stable across builds and platforms (std's hasher is not).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn share_plan(
    ctx: &Ctx,
    case: &NodeCase,
    sized: &HashMap<(&str, &str), (Target, f64, f64)>,
    out: &mut Output,
) {
    let cfg = ctx.cfg;
    let NodeCase {
        cluster,
        node,
        gpus,
        in_use,
        live,
    } = case;
    let (cluster, node) = (*cluster, *node);
    // Only exclusive GPUs are repacked; shared ones already share.
    if gpus.iter().any(|g| g.sharing != "exclusive") {
        return;
    }
    let mem_total = gpus[0].memory_total_bytes as f64;
    let mut whole: BTreeSet<&str> = BTreeSet::new();
    let mut items: Vec<(&Holding, f64, f64)> = Vec::new();
    for h in live {
        match sized.get(&(h.gpu.as_str(), h.tenant.as_str())) {
            Some((Target::Share { .. }, compute, _)) => {
                let mem = need(h, cfg).map_or(mem_total, |n| n.0);
                items.push((h, *compute, mem));
            }
            _ => {
                whole.insert(&h.gpu);
            }
        }
    }
    items.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.tenant.cmp(&b.0.tenant)));
    let mut bins: Vec<(f64, f64, Vec<&Holding>)> = Vec::new();
    for (h, c, m) in items {
        match bins
            .iter_mut()
            .find(|b| b.0 + c <= 1.0 + 1e-9 && b.1 + m <= mem_total)
        {
            Some(b) => {
                b.0 += c;
                b.1 += m;
                b.2.push(h);
            }
            None => bins.push((c, m, vec![h])),
        }
    }
    let needed = whole.len() + bins.len();
    if needed >= in_use.len() {
        return;
    }
    let mut free: Vec<&GpuRef> = gpus
        .iter()
        .copied()
        .filter(|g| !whole.contains(g.uuid.as_str()))
        .collect();
    let mut moves = Vec::new();
    let mut before = Vec::new();
    let mut after = Vec::new();
    let mut replicas = 1u32;
    let mut low_occupancy = true;
    for (_, _, hs) in &bins {
        let g = free.remove(0);
        replicas = replicas.max(hs.len() as u32);
        for h in hs {
            moves.push(Move {
                tenant: h.tenant.clone(),
                from_gpu: h.gpu.clone(),
                to_gpu_index: g.index,
                target: Target::Share {
                    replicas: hs.len() as u32,
                },
            });
            before.push(slot_now(h, ctx.gpu(&h.gpu)));
            // MPS fits tenants whose kernels leave most SMs idle (DCGM shows it).
            low_occupancy &=
                h.signal() == "sm_active" && h.effective_hours() < 0.5 * h.active_hours().max(1e-9);
        }
        after.push(Slot {
            compute: 1.0,
            memory_bytes: mem_total,
            holdings: hs.clone(),
        });
    }
    let freed = (in_use.len() - needed) as f64;
    let r = replay(&before, &after, freed, cfg.replay_tolerance);
    let tenants: Vec<String> = moves.iter().map(|m| m.tenant.clone()).collect();
    let Some(r) = out.unless_harmful(RecKind::Consolidate, cluster, node, &tenants, r) else {
        return;
    };
    let names: Vec<String> = tenants.iter().map(|t| ctx.name(cluster, t)).collect();
    out.recommendations.push(Recommendation {
        id: rec_id(RecKind::Consolidate, node),
        kind: RecKind::Consolidate,
        cluster: cluster.into(),
        node: node.into(),
        gpus: moves.iter().map(|m| m.from_gpu.clone()).collect(),
        tenants: tenants.clone(),
        team: None,
        summary: format!(
            "pack {} onto {} shared GPU(s) of {node}; frees {freed:.0} of {} GPU(s) in use",
            names.join(", "),
            bins.len(),
            in_use.len()
        ),
        confidence: plan_confidence(live, &tenants, cfg),
        findings: vec![],
        proposal: Proposal::Consolidate {
            moves: moves.clone(),
            gpus_before: in_use.len(),
            gpus_after: needed,
        },
        replay: r.clone(),
        evidence: vec![Evidence::new(
            "node GPU utilization",
            "gpu_util",
            format!("node:{node}"),
            ctx.input.from_ms,
            ctx.input.to_ms,
        )],
    });
    let (kind, mode) = if low_occupancy {
        (RecKind::Mps, "mps")
    } else {
        (RecKind::TimeSlicing, "time_slicing")
    };
    out.recommendations.push(Recommendation {
        id: rec_id(kind, node),
        kind,
        cluster: cluster.into(),
        node: node.into(),
        gpus: gpus.iter().map(|g| g.uuid.clone()).collect(),
        tenants: tenants.clone(),
        team: None,
        summary: format!(
            "configure {node} for {} with {replicas} replicas per GPU so the consolidation above can run",
            if low_occupancy { "MPS" } else { "time-slicing" }
        ),
        confidence: plan_confidence(live, &tenants, cfg),
        findings: vec![],
        proposal: Proposal::Sharing { mode: mode.into(), replicas, device_plugin_yaml: device_plugin_config(mode, replicas) },
        replay: r,
        evidence: vec![],
    });
}

/// The NVIDIA device plugin's sharing configuration (version v1).
pub fn device_plugin_config(mode: &str, replicas: u32) -> String {
    let key = if mode == "mps" { "mps" } else { "timeSlicing" };
    format!(
        "version: v1\nflags:\n  migStrategy: none\nsharing:\n  {key}:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )
}

/// Separate interfering tenants: move the aggressor to the GPU of the same node where replay
/// predicts the least contention.
fn separate(ctx: &Ctx, holdings: &[Holding], findings: &[Finding], out: &mut Output) {
    let cfg = ctx.cfg;
    let mut seen = BTreeSet::new();
    for f in findings
        .iter()
        .filter(|f| f.kind == FindingKind::Interference)
    {
        let (Some(gpu), [victim, aggressor, ..]) = (f.gpu.as_deref(), f.tenants.as_slice()) else {
            continue;
        };
        if !seen.insert((gpu, victim.as_str(), aggressor.as_str())) {
            continue;
        }
        let on = |g: &str| -> Vec<&Holding> {
            holdings
                .iter()
                .filter(|h| h.gpu == g && h.total.alloc_n > 0)
                .collect()
        };
        let Some(a) = holdings
            .iter()
            .find(|h| h.gpu == gpu && &h.tenant == aggressor)
        else {
            continue;
        };
        let here = on(gpu);
        let Some(src) = ctx.gpu(gpu) else {
            continue;
        };
        let mem = |g: &GpuRef| g.memory_total_bytes as f64;
        let mut best: Option<(Replay, &GpuRef)> = None;
        for g in ctx.input.gpus.iter().filter(|g| {
            g.node == f.node && g.cluster == f.cluster && g.uuid != gpu && g.sharing == src.sharing
        }) {
            let there = on(&g.uuid);
            let before = vec![
                Slot {
                    compute: 1.0,
                    memory_bytes: mem(src),
                    holdings: here.clone(),
                },
                Slot {
                    compute: 1.0,
                    memory_bytes: mem(g),
                    holdings: there.clone(),
                },
            ];
            let mut moved = there.clone();
            moved.push(a);
            let after = vec![
                Slot {
                    compute: 1.0,
                    memory_bytes: mem(src),
                    holdings: here
                        .iter()
                        .copied()
                        .filter(|h| h.tenant != a.tenant)
                        .collect(),
                },
                Slot {
                    compute: 1.0,
                    memory_bytes: mem(g),
                    holdings: moved,
                },
            ];
            let r = replay(&before, &after, 0.0, cfg.replay_tolerance);
            if r.contention_hours_after < r.contention_hours_before
                && best
                    .as_ref()
                    .is_none_or(|b| r.contention_hours_after < b.0.contention_hours_after)
            {
                best = Some((r, g));
            }
        }
        let (vn, an) = (
            ctx.name(&f.cluster, victim),
            ctx.name(&f.cluster, aggressor),
        );
        match best {
            Some((r, g)) if !r.harmful => {
                out.recommendations.push(Recommendation {
                    id: rec_id(RecKind::Separate, &format!("{gpu}/{victim}/{aggressor}")),
                    kind: RecKind::Separate,
                    cluster: f.cluster.clone(),
                    node: f.node.clone(),
                    gpus: vec![gpu.into(), g.uuid.clone()],
                    tenants: vec![victim.clone(), aggressor.clone()],
                    team: f.team.clone(),
                    summary: format!(
                        "move {an} from GPU {} to GPU {} of {}: replay predicts contention falls from {:.0} to {:.0} tenant-hours and {vn} runs alone",
                        src.index, g.index, f.node, r.contention_hours_before, r.contention_hours_after
                    ),
                    confidence: confidence(a, cfg),
                    findings: vec![f.id.clone()],
                    proposal: Proposal::Separate {
                        victim: victim.clone(),
                        aggressor: aggressor.clone(),
                        plan: format!("reschedule {an} onto GPU {} ({})", g.index, g.uuid),
                        moves: vec![Move { tenant: aggressor.clone(), from_gpu: gpu.into(), to_gpu_index: g.index, target: Target::Share { replicas: g.replicas.max(1) as u32 } }],
                    },
                    replay: r,
                    evidence: f.evidence.clone(),
                });
            }
            other => out.rejected.push(Rejected {
                kind: RecKind::Separate,
                cluster: f.cluster.clone(),
                node: f.node.clone(),
                tenants: vec![victim.clone(), aggressor.clone()],
                reason: match &other {
                    Some((r, g)) => format!("moving {an} to GPU {}: {}", g.index, r.reason.clone().unwrap_or_default()),
                    None => format!("no other GPU of {} would take {an} without more contention; consider another node or off-peak scheduling", f.node),
                },
                replay: other.map(|o| o.0),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(devices: Vec<i64>, layout: &[(&str, u32)]) -> MigPartedEntry {
        MigPartedEntry {
            devices,
            mig_enabled: !layout.is_empty(),
            mig_devices: layout.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect(),
        }
    }

    #[test]
    fn mig_config_names_follow_the_layout() {
        let a = vec![entry(vec![0, 1], &[("1g.10gb", 7)]), entry(vec![2], &[])];
        let b = vec![entry(vec![0, 1], &[("1g.10gb", 6)]), entry(vec![2], &[])];
        let name = config_name(&a);
        assert_eq!(name, config_name(&a.clone()));
        assert_ne!(name, config_name(&b));
        assert!(name.starts_with("gpulens-mig-"));
        model::labels::check_value(model::labels::OPERATOR_MIG_CONFIG, &name).unwrap();
        // Stable across builds: the same layout names the same config next week (value
        // computed independently with FNV-1a 64 over the canonical text).
        assert_eq!(name, "gpulens-mig-e44dc1150d6e");
    }

    /// Issue 22: a mig_layout's confidence fell to 0.03 because one short-lived pod on the
    /// node lacked data, while the tenants it moved had a day of it.
    #[test]
    fn a_plan_is_as_sure_as_the_tenants_it_moves() {
        use model::rollup::TenantAgg;
        let hour = TenantAgg {
            samples: 60,
            covered_s: 3600.0,
            alloc_n: 60,
            alloc_share_sum: 60.0,
            eff_n: 60,
            eff_dcgm_n: 60,
            ..TenantAgg::default()
        };
        let holding = |tenant: &str, hours: i64| Holding {
            cluster: "c".into(),
            node: "n".into(),
            gpu: format!("GPU-{tenant}"),
            tenant: tenant.into(),
            total: hour.clone(),
            rows: (0..hours).map(|i| (i * 3_600_000, hour.clone())).collect(),
        };
        let cfg = Config::default();
        let (steady, other, brief) = (holding("a", 48), holding("b", 48), holding("new", 1));
        let live = [&steady, &other, &brief];
        let moved = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(plan_confidence(&live, &moved, &cfg), 1.0);
        // Moving the brief one too costs little: it holds one GPU-hour of 97.
        let all = vec!["a".to_owned(), "b".to_owned(), "new".to_owned()];
        let c = plan_confidence(&live, &all, &cfg);
        assert!(c > 0.95 && c < 1.0, "{c}");
        assert!(confidence(&brief, &cfg) < 0.1);
    }
}
