//! What a node has: its GPUs and, on GPUs in MIG mode, the GPU and compute instances.

use serde::{Deserialize, Serialize};

/// One physical GPU as the agent found it. The UUID is the identity; the index is only a hint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuInfo {
    pub uuid: String,
    pub index: u32,
    /// Product name as NVML reports it, e.g. "NVIDIA H100 80GB HBM3".
    pub model: String,
    pub memory_total_bytes: i64,
    #[serde(default)]
    pub pci_bus_id: Option<String>,
    /// Whether MIG mode is currently enabled on the GPU.
    #[serde(default)]
    pub mig_enabled: bool,
    /// How the GPU is shared (exclusive when not said).
    #[serde(default)]
    pub sharing: Sharing,
    /// Time-slicing or MPS replicas advertised for the GPU (1 when not shared).
    #[serde(default = "one")]
    pub replicas: u32,
    #[serde(default)]
    pub mig_instances: Vec<MigInstanceInfo>,
}

/// One MIG device: a compute instance inside a GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigInstanceInfo {
    pub gi_id: u32,
    pub ci_id: u32,
    /// Profile name as mig-parted and nvidia-smi spell it, e.g. "3g.40gb" or "1c.3g.71gb".
    pub profile: String,
    /// First memory slice of the GPU instance's placement.
    #[serde(default)]
    pub placement_start: Option<u32>,
    /// Number of memory slices the placement spans.
    #[serde(default)]
    pub placement_size: Option<u32>,
    pub memory_total_bytes: i64,
    /// Compute slices (of 7 on A100/H100/H200) this instance owns.
    #[serde(default)]
    pub compute_slices: Option<u32>,
    #[serde(default)]
    pub uuid: Option<String>,
}

fn one() -> u32 {
    1
}

crate::closed_set! {
    /// How a GPU is shared, as the device plugin and the GPU Operator set it up.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    pub enum Sharing {
        /// One tenant at a time.
        #[default]
        Exclusive = "exclusive",
        /// Replicas of the GPU handed out by the device plugin; tenants take turns.
        TimeSlicing = "time_slicing",
        /// Replicas served by the MPS daemon; tenants' kernels run side by side.
        Mps = "mps",
        /// Partitioned into MIG instances, each a device of its own.
        Mig = "mig",
    }
}

impl Sharing {
    /// Whether tenants share the GPU by time (time-slicing or MPS replicas).
    pub fn by_time(self) -> bool {
        matches!(self, Sharing::TimeSlicing | Sharing::Mps)
    }
}
