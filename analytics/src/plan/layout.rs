//! What a plan is made of: the fleet's, pools' and nodes' plans as reported, and the packer's
//! working view — items (tenants sized), bins (GPUs, MIG instances, time-sliced GPUs), a pool's
//! layout and its nodes after the move.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use model::inventory::Sharing;

use crate::holdings::Holding;
use crate::input::GpuRef;
use crate::mechanism::Mechanism;
use crate::mig::{MigFamily, Profile};

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
    /// GPUs emptied but not counted as freed: unrecovered hardware errors (see the pools).
    #[serde(default)]
    pub held_for_repair: usize,
    /// Per per-GPU sharing mechanism, the fleet's sum of what it would give its pools.
    #[serde(default)]
    pub worth: Vec<super::worth::Worth>,
    /// How the plan made without the window's most recent part held on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out: Option<crate::held_out::verdict::Score>,
}

impl FleetPlan {
    /// Puts pools in (cluster, model) and nodes in (cluster, node) order and makes the fleet's
    /// totals the sums of its pools: how a plan is finished, whether its pools were planned
    /// together or one cluster at a time.
    pub fn sum_pools(&mut self) {
        self.pools
            .sort_by(|a, b| (&a.cluster, &a.model).cmp(&(&b.cluster, &b.model)));
        self.nodes
            .sort_by(|a, b| (&a.cluster, &a.node).cmp(&(&b.cluster, &b.node)));
        let sum = |f: fn(&PoolPlan) -> usize| self.pools.iter().map(f).sum::<usize>();
        self.gpus_in_use = sum(|x| x.gpus_in_use);
        self.gpus_after = sum(|x| x.gpus_after);
        self.gpus_freed = sum(|x| x.gpus_freed);
        self.nodes_in_use = sum(|x| x.nodes_in_use);
        self.nodes_freed = sum(|x| x.nodes_freed);
        self.bound_gpus = sum(|x| x.bound_gpus);
        self.held_for_repair = sum(|x| x.held_for_repair);
        self.worth = super::worth::sum(self.pools.iter().map(|p| p.worth.as_slice()));
        self.efficiency = efficiency(self.gpus_in_use, self.bound_gpus, self.gpus_freed);
        self.money_per_month =
            (self.pools.iter().map(|x| x.money_per_month).sum::<f64>() * 100.0).round() / 100.0;
    }
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
    /// GPUs the plan empties that have unrecovered hardware errors: kept out of the freed
    /// count and its money (counted in `gpus_after`) until repaired.
    #[serde(default)]
    pub held_for_repair: usize,
    /// What each per-GPU sharing mechanism would leave in use in this pool.
    #[serde(default)]
    pub worth: Vec<super::worth::Worth>,
    /// The per-GPU sharing mechanisms the pool has: configured (`[analytics.mechanisms]`) or
    /// seen on its nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub has: Vec<crate::mechanism::Mechanism>,
    /// Of those, the ones seen in place, each with how many of the pool's nodes show it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seen: Vec<(crate::mechanism::Mechanism, usize)>,
    /// The per-GPU mechanism the pool's plan uses (one it has that frees more than node-wide
    /// sharing); None: the plan shares node-wide (device plugin, MIG).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<crate::mechanism::Mechanism>,
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
    pub sharing_after: SharingAfter,
}

/// How a node shares its GPUs after the plan, written as one word: a node-wide mode
/// (`exclusive`, `mig`, `time_slicing`, `mps`), the per-GPU mechanism its tenants are pinned
/// under (`dra_shared_claim`, …), `empty`, or `unchanged` (its pool keeps its layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SharingAfter {
    Mode(Sharing),
    PerGpu(Mechanism),
    Empty,
    #[default]
    Unchanged,
}

impl SharingAfter {
    pub fn as_str(self) -> &'static str {
        match self {
            SharingAfter::Mode(m) => m.as_str(),
            SharingAfter::PerGpu(m) => m.as_str(),
            SharingAfter::Empty => "empty",
            SharingAfter::Unchanged => "unchanged",
        }
    }

    /// The word as [`SharingAfter::as_str`] writes it; `None` for any other.
    pub fn parse(s: &str) -> Option<SharingAfter> {
        match s {
            "empty" => Some(SharingAfter::Empty),
            "unchanged" => Some(SharingAfter::Unchanged),
            _ => Sharing::parse(s)
                .map(SharingAfter::Mode)
                .or_else(|| Mechanism::parse(s).map(SharingAfter::PerGpu)),
        }
    }
}

impl std::fmt::Display for SharingAfter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for SharingAfter {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SharingAfter {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let word = String::deserialize(d)?;
        SharingAfter::parse(&word).ok_or_else(|| {
            serde::de::Error::custom(format!("{word:?} is not a sharing mode or mechanism"))
        })
    }
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
    /// A GPU shared by a group the plan pins to it under a per-GPU mechanism.
    PerGpu(crate::mechanism::Mechanism),
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
    pub(super) compute: f64,
    pub(super) memory: f64,
    pub(super) profiles: Vec<&'static Profile>,
    /// The bin's summed demand per hour, (hour, compute, memory) in time order.
    pub(super) hourly: Vec<(i64, f64, f64)>,
    /// For a time-sliced GPU: the replicas its node advertises per GPU.
    pub replicas: usize,
    /// Waiting work it serves, by index into the pool's `waits` (one entry per MIG instance
    /// or GPU kept for it).
    pub waits: Vec<usize>,
}

impl Bin {
    pub(super) fn new(fit: Fit) -> Bin {
        Bin {
            fit,
            items: Vec::new(),
            pin: None,
            compute: 0.0,
            memory: 0.0,
            profiles: Vec::new(),
            hourly: Vec::new(),
            replicas: 1,
            waits: Vec::new(),
        }
    }

    /// Whether it holds only waiting work: a GPU kept for pending pods.
    pub fn waiting_only(&self) -> bool {
        self.items.is_empty() && !self.waits.is_empty()
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
    /// A GPU with unrecovered hardware errors (it fell off the bus, uncorrected ECC): it takes
    /// no tenant, so the plan empties it — held for repair, not freed.
    Faulty,
}

impl Placed {
    /// Whether the GPU is in use after the plan.
    pub fn used(self) -> bool {
        matches!(self, Placed::Fixed | Placed::Bin(_))
    }
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
        self.placed
            .iter()
            .filter(|p| p.is_some_and(Placed::used))
            .count()
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
    /// The items and fixed GPUs before any retry fixed tenants no node could take under
    /// today's mechanisms: what a per-GPU mechanism may place.
    pub sized: (Vec<Item<'a>>, BTreeSet<&'a str>),
    /// Work still waiting for this pool's GPUs when the window ends: the plan serves it first.
    pub waits: Vec<super::waiting::Wait<'a>>,
}

impl PoolLayout<'_> {
    /// What one GPU of the pool costs per month at the configured price.
    pub fn price_per_month(&self, cfg: &crate::config::Config) -> f64 {
        cfg.price_of(self.model) * HOURS_PER_MONTH
    }

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
                    .filter(|(_, p)| p.is_some_and(Placed::used))
                    .map(|(g, _)| g.uuid.as_str())
            })
            .collect()
    }

    /// The GPUs the plan keeps for waiting work alone, with the bin on each.
    pub fn kept_for_waiting(&self) -> Vec<(&str, usize)> {
        if !self.changes {
            return Vec::new();
        }
        self.nodes
            .iter()
            .flat_map(|n| n.gpus.iter().zip(&n.placed))
            .filter_map(|(g, p)| match p {
                Some(Placed::Bin(b)) if self.bins[*b].waiting_only() => Some((g.uuid.as_str(), *b)),
                _ => None,
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
}

/// Whether a holding still runs at the end of the window (an allocation in its last two
/// hours): the plan is about what runs now; a finished job or a replaced pod needs no GPU.
pub fn is_current(h: &Holding, to_ms: i64) -> bool {
    h.rows
        .iter()
        .rev()
        .take_while(|(hour, _)| *hour + super::waiting::NOW_MS > to_ms)
        .any(|(_, a)| a.alloc_n > 0)
}
