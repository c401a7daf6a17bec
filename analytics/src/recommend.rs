//! Recommendations, each replayed against the recorded demand before it is made:
//! `reclaim`, `right_size`, `consolidate` with `time_slicing`/`mps`, `mig_layout` and
//! `separate`. Proposals whose replay predicts harm are reported as rejected, not made.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::Config;
use crate::findings::{Ctx, Evidence, Finding, FindingKind, GIB, gib, stable_id};
use crate::holdings::Holding;
use crate::input::GpuRef;
use crate::mig::{self, MigPartedEntry, Profile};
use crate::plan::FleetPlan;
use crate::replay::{Replay, Slot, replay};
use crate::{steps, waste};

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
    /// The place in words: "a whole GPU", "a MIG 3g.40gb instance", "a 1/2 time-slice share".
    pub fn describe(&self) -> String {
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
    /// Where it runs now, in words people use (empty in analyses stored before the plan).
    #[serde(default)]
    pub from_node: String,
    #[serde(default)]
    pub from_gpu_index: i64,
    /// The node it would run on (its own unless the plan consolidates across nodes).
    #[serde(default)]
    pub to_node: String,
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
        /// The tenants that move onto the shared GPUs.
        #[serde(default)]
        moves: Vec<Move>,
    },
    Separate {
        victim: String,
        aggressor: String,
        plan: String,
        moves: Vec<Move>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Steps that must be carried out first: those that empty the GPUs this one moves tenants
    /// onto (a reclaim, or another node's step moving the tenant there away). Approving a step
    /// approves the planned label changes of these with it; a required step without one (a
    /// reclaim, a consolidation: a person's change) must be done first.
    #[serde(default)]
    pub requires: Vec<String>,
}

impl Recommendation {
    /// The tenants this step moves, if any.
    pub fn moves(&self) -> &[Move] {
        match &self.proposal {
            Proposal::Consolidate { moves, .. }
            | Proposal::MigLayout { moves, .. }
            | Proposal::Sharing { moves, .. }
            | Proposal::Separate { moves, .. } => moves,
            _ => &[],
        }
    }
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
    pub plan: FleetPlan,
    pub recommendations: Vec<Recommendation>,
    pub rejected: Vec<Rejected>,
    pub underutilized: Vec<Finding>,
}

pub(crate) fn confidence(h: &Holding, cfg: &Config) -> f64 {
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
pub(crate) fn plan_confidence(live: &[&Holding], moved: &[String], cfg: &Config) -> f64 {
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
pub(crate) fn current(h: &Holding, gpu: Option<&GpuRef>) -> String {
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
pub(crate) fn need(h: &Holding, cfg: &Config) -> Option<(f64, f64)> {
    Some((
        h.mem_p99()? as f64 * (1.0 + cfg.memory_headroom),
        h.eff_p95()? * (1.0 + cfg.compute_headroom),
    ))
}

/// The sizes strictly below the tenant's current share of its GPU, smallest first, as
/// (target, compute share, memory bytes): the model's MIG profiles, or 1/k time-slice shares
/// (k up to `max_replicas`, memory split k ways) on models without MIG.
pub(crate) fn smaller_sizes(h: &Holding, gpu: &GpuRef, cfg: &Config) -> Vec<(Target, f64, f64)> {
    let share = h.share();
    match mig::family(&gpu.model) {
        Some(f) => f
            .fitting(0.0, 0.0)
            .filter(|p| p.compute_share() < share - 1e-6)
            .map(|p| (mig_target(p), p.compute_share(), p.memory_gib * GIB))
            .collect(),
        None => (2..=cfg.max_replicas)
            .rev()
            .map(|k| (k, 1.0 / f64::from(k)))
            .filter(|&(_, s)| s < share - 1e-6)
            .map(|(k, s)| {
                (
                    Target::Share { replicas: k },
                    s,
                    gpu.memory_total_bytes as f64 / f64::from(k),
                )
            })
            .collect(),
    }
}

/// The smallest size strictly below the current share that fits the need, if any.
pub(crate) fn smaller_target(
    h: &Holding,
    gpu: &GpuRef,
    cfg: &Config,
) -> Option<(Target, f64, f64)> {
    let (mem, compute) = need(h, cfg)?;
    smaller_sizes(h, gpu, cfg)
        .into_iter()
        .find(|(_, c, m)| *c >= compute - 1e-9 && *m >= mem)
}

pub(crate) fn mig_target(p: &Profile) -> Target {
    Target::Mig {
        profile: p.name.into(),
        memory_gib: p.memory_gib,
        compute_slices: p.compute_slices,
    }
}

pub(crate) fn slot_now<'a>(h: &'a Holding, gpu: Option<&GpuRef>) -> Slot<'a> {
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
                "reclaim {name}'s allocation on {node}: idle {:.0}% of the {:.0} GPU-hours it held{}; releases {freed:.2} GPU",
                hs[0].idle_ratio() * 100.0,
                hs.iter().map(|h| h.allocated_hours()).sum::<f64>(),
                if mem > 0 { format!(" while keeping {:.1} GiB of memory", gib(mem as f64)) } else { String::new() }
            ),
            confidence: confidence(hs[0], cfg),
            findings: ids,
            proposal: Proposal::Reclaim { tenant: tenant.into(), gpus, gpu_equivalents: freed },
            replay: r,
            evidence: vec![Evidence::tenant("allocated share", "alloc_share", &hs[0].cluster, tenant, ctx.input.from_ms, ctx.input.to_ms)],
            requires: Vec::new(),
        });
    }

    let reclaim_ids: HashMap<(String, String), String> = out
        .recommendations
        .iter()
        .flat_map(|r| {
            r.gpus
                .iter()
                .map(move |g| ((g.clone(), r.tenants[0].clone()), r.id.clone()))
        })
        .collect();
    // Wasters are known before the plan (their finding ids are stable); the plan's steps
    // name them, and their findings name the step.
    let wasters: Vec<&Holding> = holdings
        .iter()
        .filter(|h| eligible(h) && !reclaimed.contains(&(h.gpu.as_str(), h.tenant.as_str())))
        .filter(|h| waste::is_waster(h, cfg))
        .collect();
    let waste_ids: HashMap<(String, String), String> = wasters
        .iter()
        .map(|h| {
            (
                (h.gpu.clone(), h.tenant.clone()),
                waste::finding_id_of(h, ctx),
            )
        })
        .collect();
    let fleet = steps::fleet(ctx, holdings, &reclaimed, &reclaim_ids, &waste_ids);
    out.recommendations.extend(fleet.recommendations);
    // Each step frees the GPUs attributed to it, every freed GPU to exactly one step.
    let mut freed: HashMap<&str, usize> = HashMap::new();
    for id in fleet.freed_by.values() {
        *freed.entry(id.as_str()).or_default() += 1;
    }
    for r in &mut out.recommendations {
        let n = freed.get(r.id.as_str()).copied().unwrap_or(0);
        r.replay.gpus_freed = n as f64;
        let freed_with = r
            .gpus
            .iter()
            .find_map(|g| fleet.freed_by.get(g))
            .filter(|id| **id != r.id);
        r.summary.push_str(&match (r.kind, n) {
            (RecKind::Reclaim, 0) => match freed_with {
                Some(id) => format!("; its GPU is freed, and counted, with step {id}"),
                None => {
                    "; frees no GPU by itself: the plan keeps that GPU in use for other tenants"
                        .to_owned()
                }
            },
            (RecKind::Reclaim, n) => format!(", freeing {n} GPU(s)"),
            (_, n) => format!("; frees {n} GPU(s)"),
        });
    }
    steps::link_requirements(
        ctx,
        holdings,
        &mut out.recommendations,
        &reclaim_ids,
        &fleet.moves,
    );
    out.rejected.extend(fleet.rejected);
    out.underutilized = wasters
        .iter()
        .map(|h| waste::finding(ctx, h, fleet.moves.get(&(h.gpu.clone(), h.tenant.clone()))))
        .collect();
    let moved: BTreeSet<String> = fleet.moves.keys().map(|k| k.1.clone()).collect();
    separate(ctx, holdings, findings, &moved, &mut out);
    let mut plan = fleet.plan;
    let mut steps: Vec<&Recommendation> = out
        .recommendations
        .iter()
        .filter(|r| r.kind != RecKind::Separate)
        .collect();
    steps.sort_by(|a, b| {
        b.replay
            .gpus_freed
            .total_cmp(&a.replay.gpus_freed)
            .then(a.id.cmp(&b.id))
    });
    plan.steps = steps.iter().map(|r| r.id.clone()).collect();
    out.plan = plan;
    out
}

pub(crate) fn rec_id(kind: RecKind, subject: &str) -> String {
    stable_id(kind.as_str(), &[subject.as_bytes()])
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

/// The NVIDIA device plugin's sharing configuration (version v1).
pub fn device_plugin_config(mode: &str, replicas: u32) -> String {
    let key = if mode == "mps" { "mps" } else { "timeSlicing" };
    format!(
        "version: v1\nflags:\n  migStrategy: none\nsharing:\n  {key}:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )
}

/// Separate interfering tenants: move the aggressor to the GPU of the same node where replay
/// predicts the least contention.
fn separate(
    ctx: &Ctx,
    holdings: &[Holding],
    findings: &[Finding],
    moved: &BTreeSet<String>,
    out: &mut Output,
) {
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
        // The plan moves one of them already: its step is the answer.
        if moved.contains(victim) || moved.contains(aggressor) {
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
                        moves: vec![Move { tenant: aggressor.clone(), from_gpu: gpu.into(), from_node: f.node.clone(), from_gpu_index: src.index, to_node: f.node.clone(), to_gpu_index: g.index, target: Target::Share { replicas: g.replicas.max(1) as u32 } }],
                    },
                    replay: r,
                    evidence: f.evidence.clone(),
                    requires: Vec::new(),
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
