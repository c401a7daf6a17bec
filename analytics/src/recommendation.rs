//! What a recommendation is: its kind, its target, the moves it makes and the proposal it
//! carries to the cluster (labels, device-plugin and mig-parted configs), with stable ids and
//! config names derived from their content.

use model::figures::count;
use serde::{Deserialize, Serialize};

use crate::finding::{Evidence, stable_id};
use crate::mig::{MigPartedEntry, Profile};

model::closed_set! {
    /// What a recommendation does.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    pub enum RecKind {
        Reclaim = "reclaim",
        RightSize = "right_size",
        Consolidate = "consolidate",
        MigLayout = "mig_layout",
        TimeSlicing = "time_slicing",
        Mps = "mps",
        /// Tenants pinned in groups to GPUs under a per-GPU mechanism (DRA claims).
        PerGpuSharing = "per_gpu_sharing",
        Separate = "separate",
    }
}

impl RecKind {
    /// How the plan's text names a step of this kind: "the MIG layout step on gpu-h100-01",
    /// not its id (reclaims, findings and the dashboard's pages say it alike).
    pub fn step_on(self, node: &str) -> String {
        let what = match self {
            RecKind::MigLayout => "MIG layout",
            RecKind::TimeSlicing => "time-slicing",
            RecKind::Mps => "MPS",
            RecKind::PerGpuSharing => "per-GPU sharing",
            RecKind::Consolidate => "consolidation",
            RecKind::RightSize => "right-sizing",
            RecKind::Reclaim => "reclaim",
            RecKind::Separate => "separation",
        };
        format!("the {what} step on {node}")
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
    /// A share of one GPU under a per-GPU mechanism: its memory request and how many tenants
    /// the GPU holds — pinned to its group, or (`scheduled`) as the mechanism's scheduler is
    /// expected to pack them, any other placement within the requests being as safe.
    PerGpu {
        memory_gib: f64,
        tenants: u32,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        scheduled: bool,
    },
}

impl Target {
    /// The place in words: "a whole GPU", "a MIG 3g.40gb instance", "a 1/2 time-slice share".
    pub fn describe(&self) -> String {
        match self {
            Target::WholeGpu => "a whole GPU".into(),
            Target::Mig { profile, .. } => format!("a MIG {profile} instance"),
            Target::Share { replicas } => format!("a 1/{replicas} time-slice share"),
            Target::PerGpu {
                memory_gib,
                tenants,
                scheduled: false,
            } => format!("a {memory_gib:.1} GiB share of a GPU pinned to {tenants} tenants"),
            Target::PerGpu {
                memory_gib,
                tenants,
                scheduled: true,
            } => format!(
                "a {memory_gib:.1} GiB request its scheduler places (packed: {})",
                count(*tenants as f64, "tenant on the GPU", "tenants on a GPU")
            ),
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
        /// Time-slicing or MPS.
        mode: model::inventory::Sharing,
        replicas: u32,
        device_plugin_yaml: String,
        /// The tenants that move onto the shared GPUs.
        #[serde(default)]
        moves: Vec<Move>,
    },
    /// Groups pinned to GPUs under a per-GPU mechanism: the objects to create (ResourceClaims,
    /// each with the pod-spec change its pods need) and the tenants that move.
    PerGpu {
        mechanism: crate::mechanism::Mechanism,
        objects_yaml: String,
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
    /// Waiting work the step serves: GPUs it empties that pending pods take
    /// instead of being freed, or MIG instances its layout keeps for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub serves: Vec<Served>,
    /// The workloads carrying it out interrupts, and how: drained with its node,
    /// moved, restarted or stopped, each moved one with its pod-spec change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interrupts: Vec<Interrupted>,
    /// Its twin's result on the window's most recent part, which the plan it came from did
    /// not see ([`crate::held_out`]); none where held-out replay is off or history too short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out: Option<crate::held_out::verdict::HeldOut>,
    /// Whether its tenants' memory trends outgrow it in the days ahead, and what it frees over
    /// them ([`crate::ahead`]); `None` for a reclaim or with the check off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ahead: Option<crate::ahead::outlook::Ahead>,
}

/// A pending pod the plan serves, and where.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Served {
    /// `namespace/pod`, as the scheduler names it.
    pub pod: String,
    /// What it asks for: `nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`, …
    pub resource: String,
    pub node: String,
    pub gpu: String,
    pub gpu_index: i64,
    /// The MIG instance kept for it; None: the whole GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// When it began to wait.
    pub since_ms: i64,
}

impl Recommendation {
    /// Whether this step is one of the plan's (its frees add up to the plan's total). A
    /// separation is advice beside the plan: it frees nothing, and one that takes an idle GPU
    /// into use says so with `gpus_freed` = −1, which no plan total counts.
    pub fn in_plan(&self) -> bool {
        self.kind != RecKind::Separate
    }

    /// The tenants this step moves, if any.
    pub fn moves(&self) -> &[Move] {
        match &self.proposal {
            Proposal::Consolidate { moves, .. }
            | Proposal::MigLayout { moves, .. }
            | Proposal::Sharing { moves, .. }
            | Proposal::PerGpu { moves, .. }
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
pub fn device_plugin_config(mode: model::inventory::Sharing, replicas: u32) -> String {
    let key = if mode == model::inventory::Sharing::Mps {
        "mps"
    } else {
        "timeSlicing"
    };
    format!(
        "version: v1\nflags:\n  migStrategy: none\nsharing:\n  {key}:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )
}

pub(crate) fn mig_target(p: &Profile) -> Target {
    Target::Mig {
        profile: p.name.into(),
        memory_gib: p.memory_gib,
        compute_slices: p.compute_slices,
    }
}

/// What replaying a plan predicts.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Replay {
    /// Hours of recorded demand replayed.
    pub hours: usize,
    /// Tenant-hours whose demand exceeded their device, today and under the proposal.
    pub contention_hours_before: f64,
    pub contention_hours_after: f64,
    /// Tenant-hours whose memory would not fit under the proposal.
    pub memory_overflow_hours: f64,
    /// Share of replayed hours with a memory overflow.
    pub memory_overflow_risk: f64,
    /// Whole GPUs the proposal frees (GPU-equivalents for shares).
    pub gpus_freed: f64,
    /// The verdict: harmful proposals are not made.
    pub harmful: bool,
    pub reason: Option<String>,
}

/// How a step interrupts a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disruption {
    /// Evicted while its node is reconfigured; it comes back where its request fits.
    Drained,
    /// Recreated on another GPU.
    Moved,
    /// Recreated on its GPU under a new request.
    Restarted,
    /// Its allocation is released.
    Stopped,
}

impl Disruption {
    pub fn as_str(self) -> &'static str {
        match self {
            Disruption::Drained => "drained",
            Disruption::Moved => "moved",
            Disruption::Restarted => "restarted",
            Disruption::Stopped => "stopped",
        }
    }
}

/// One workload a step interrupts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interrupted {
    pub tenant: String,
    /// The GPU it holds now.
    pub gpu: String,
    pub how: Disruption,
    /// The change its pod spec needs at its new place (YAML to merge), where it moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
}
