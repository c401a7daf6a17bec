//! What a per-GPU sharing mechanism granted a simulated pod, and the Kubernetes
//! objects that record it, shaped as the projects document them — so a scenario can put
//! several pods on one whole GPU, each allocated the share it was granted, and a test can
//! hand the objects (`crate::grant_objects`) to the agent's reader (`agent::grants`) and see
//! the same share come back.
//!
//! - `dra_consumable_capacity`: a ResourceClaim per pod whose `status.allocation` names the
//!   device (driver `gpu.nvidia.com`, the node's pool, `gpu-N`) with `consumedCapacity.memory`,
//!   and the node's ResourceSlice giving each device its `uuid` attribute and `memory` capacity.
//! - `hami`: the pod annotation `hami.io/vgpu-devices-allocated`,
//!   `<GPU UUID>,NVIDIA,<memory MiB>,<cores %>:;` for its one container.
//! - `kai_fractions`: the pod annotation `gpu-fraction` (or `gpu-memory` in MiB).

use serde::Deserialize;

/// The mechanisms a scenario may grant shares through.
pub const GRANTING: [&str; 3] = ["dra_consumable_capacity", "hami", "kai_fractions"];

/// What a mechanism granted a pod on each whole GPU it names.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// `dra_consumable_capacity`, `hami` or `kai_fractions`.
    pub mechanism: String,
    /// Memory granted, GiB: the claim's consumed capacity, HAMi's `gpumem`, KAI's
    /// `gpu-memory`.
    #[serde(default)]
    pub memory_gib: Option<f64>,
    /// HAMi's `gpucores`, percent of the GPU's compute.
    #[serde(default)]
    pub cores: Option<u32>,
    /// KAI's `gpu-fraction`.
    #[serde(default)]
    pub fraction: Option<f64>,
}

impl Grant {
    /// The share of a GPU of `gpu_memory_gib` the grant is, as the agent works it out:
    /// memory ÷ the GPU's memory; HAMi the larger of that and cores ÷ 100; KAI its fraction
    /// where given.
    pub fn share(&self, gpu_memory_gib: f64) -> f64 {
        let memory = self.memory_gib.unwrap_or(0.0) / gpu_memory_gib;
        match self.mechanism.as_str() {
            "hami" => memory.max(f64::from(self.cores.unwrap_or(0)) / 100.0),
            "kai_fractions" => self.fraction.unwrap_or(memory),
            _ => memory,
        }
    }

    /// Whether the grant means something on a GPU of `gpu_memory_gib`: a known mechanism, the
    /// quantities it needs, a share in (0, 1].
    pub fn check(&self, gpu_memory_gib: f64) -> Result<(), String> {
        if !GRANTING.contains(&self.mechanism.as_str()) {
            return Err(format!(
                "grant mechanism {:?} is not one of {}",
                self.mechanism,
                GRANTING.join(", ")
            ));
        }
        let needs_memory = self.mechanism != "kai_fractions" || self.fraction.is_none();
        if needs_memory && self.memory_gib.is_none() {
            return Err(format!("a {} grant needs memory_gib", self.mechanism));
        }
        if self.cores.is_some_and(|c| c > 100) {
            return Err("grant cores must be at most 100 (percent)".into());
        }
        let share = self.share(gpu_memory_gib);
        if !(share > 0.0 && share <= 1.0) {
            return Err(format!(
                "grant is {share:.3} of a {gpu_memory_gib} GiB GPU; it must be in (0, 1]"
            ));
        }
        Ok(())
    }
}
