//! The ways a cluster can share a GPU, as data: one declaration per mechanism says
//! who chooses which tenants meet on a GPU, what is isolated, what the cluster needs and what a
//! step emits. The per-GPU packer ([`crate::plan::pergpu`]), the bound, the plan's "what
//! enabling each is worth", the pages and docs/analytics.md read these declarations; no
//! mechanism is a string compared anywhere else.
//!
//! Sources (facts and names, checked 2026-12): the NVIDIA k8s-device-plugin's sharing config
//! (`timeSlicing`/`mps` replicas, node-wide: any `replicas` tenants of the node may meet on a
//! GPU); the GPU Operator's mig-manager (`nvidia.com/mig.config`); Kubernetes DRA
//! (`resource.k8s.io/v1`: a ResourceClaim referenced by several pods of its namespace shares
//! its device; KEP-5075 consumable capacity, beta and on by default from 1.36, with the NVIDIA
//! DRA driver's `--consumable-shares`; a CEL device selector on `device.attributes` pins a
//! claim to one GPU; DynamicMIG carves MIG devices at allocation); HAMi (`nvidia.com/gpumem`
//! MiB and `nvidia.com/gpucores` percent per container, memory limit enforced in the
//! container, placed by HAMi's scheduler); KAI Scheduler (`gpu-fraction` / `gpu-memory` pod
//! annotations, placed by KAI).

use serde::{Deserialize, Serialize};

/// A sharing mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    DevicePluginTimeSlicing,
    DevicePluginMps,
    MigParted,
    DraSharedClaim,
    DraConsumableCapacity,
    DraConsumableScheduled,
    DraDynamicMig,
    Hami,
    KaiFractions,
}

/// Who decides which tenants meet on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Chooser {
    /// Any tenants of the node may meet on any GPU (the device plugin's replicas): a plan
    /// must hold for every group of that size on the node.
    NodeWide,
    /// The plan pins each group to one GPU.
    PlanPerGpu,
    /// A scheduler places within the requested capacities: a plan must hold for any placement
    /// the requests allow.
    SchedulerWithinLimits,
    /// Fixed partitions (MIG profiles), chosen by the plan.
    Partitions,
}

/// What keeps tenants of one GPU apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Hardware partitions: memory and compute (MIG).
    Hardware,
    /// A memory limit enforced per tenant; compute shared.
    MemoryLimit,
    /// Only accounted: nothing stops a tenant from taking more.
    Accounted,
}

/// One mechanism's declaration.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Declaration {
    pub mechanism: Mechanism,
    /// How people name it.
    pub name: &'static str,
    pub chooser: Chooser,
    pub isolation: Isolation,
    /// Whether one group on a GPU must be of one namespace (a shared ResourceClaim is
    /// namespaced; consumable capacity lets claims of many namespaces share a device).
    pub one_namespace: bool,
    /// What the cluster needs.
    pub needs: &'static str,
    /// The objects a step emits.
    pub emits: &'static str,
}

impl Mechanism {
    pub const ALL: [Mechanism; 9] = [
        Mechanism::DevicePluginTimeSlicing,
        Mechanism::DevicePluginMps,
        Mechanism::MigParted,
        Mechanism::DraSharedClaim,
        Mechanism::DraConsumableCapacity,
        Mechanism::DraConsumableScheduled,
        Mechanism::DraDynamicMig,
        Mechanism::Hami,
        Mechanism::KaiFractions,
    ];

    /// The mechanisms that share a GPU among tenants the plan pins or a scheduler places per
    /// GPU — the ones today's node-wide plan cannot express, whose worth the plan states.
    pub const PER_GPU: [Mechanism; 5] = [
        Mechanism::DraSharedClaim,
        Mechanism::DraConsumableCapacity,
        Mechanism::DraConsumableScheduled,
        Mechanism::Hami,
        Mechanism::KaiFractions,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::DevicePluginTimeSlicing => "device_plugin_time_slicing",
            Mechanism::DevicePluginMps => "device_plugin_mps",
            Mechanism::MigParted => "mig_parted",
            Mechanism::DraSharedClaim => "dra_shared_claim",
            Mechanism::DraConsumableCapacity => "dra_consumable_capacity",
            Mechanism::DraConsumableScheduled => "dra_consumable_scheduled",
            Mechanism::DraDynamicMig => "dra_dynamic_mig",
            Mechanism::Hami => "hami",
            Mechanism::KaiFractions => "kai_fractions",
        }
    }

    pub fn parse(s: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// A per-GPU mechanism named on a command line or in a scenario, or the error that lists
    /// the names it may take.
    pub fn from_name(s: &str) -> Result<Mechanism, String> {
        Mechanism::parse(s).ok_or_else(|| {
            let known: Vec<&str> = Mechanism::PER_GPU.iter().map(|m| m.as_str()).collect();
            format!(
                "unknown sharing mechanism {s:?}; known: {}",
                known.join(", ")
            )
        })
    }

    /// Whether a scheduler places its tenants within their requests (the plan does not pin
    /// them).
    pub fn placed_by_scheduler(self) -> bool {
        self.declared().chooser == Chooser::SchedulerWithinLimits
    }

    /// Its declaration.
    pub fn declared(self) -> Declaration {
        let d = |name, chooser, isolation, one_namespace, needs, emits| Declaration {
            mechanism: self,
            name,
            chooser,
            isolation,
            one_namespace,
            needs,
            emits,
        };
        use Chooser::*;
        use Isolation::*;
        match self {
            Mechanism::DevicePluginTimeSlicing => d(
                "device-plugin time-slicing",
                NodeWide,
                Accounted,
                false,
                "the NVIDIA device plugin (GPU Operator) with a sharing config",
                "a device-plugin ConfigMap entry and the node label nvidia.com/device-plugin.config",
            ),
            Mechanism::DevicePluginMps => d(
                "device-plugin MPS",
                NodeWide,
                MemoryLimit,
                false,
                "the NVIDIA device plugin ≥ 0.15 with an MPS sharing config",
                "a device-plugin ConfigMap entry and the node label nvidia.com/device-plugin.config",
            ),
            Mechanism::MigParted => d(
                "MIG (mig-parted)",
                Partitions,
                Hardware,
                false,
                "MIG-capable GPUs and the GPU Operator's mig-manager",
                "a mig-parted config and the node label nvidia.com/mig.config",
            ),
            Mechanism::DraSharedClaim => d(
                "DRA shared claim pinned to a GPU",
                PlanPerGpu,
                Accounted,
                true,
                "Kubernetes ≥ 1.34 (resource.k8s.io/v1) and NVIDIA's DRA driver for GPUs",
                "one ResourceClaim per GPU group (a device selector on the GPU's UUID), referenced by each pod of the group",
            ),
            Mechanism::DraConsumableCapacity => d(
                "DRA consumable capacity pinned to a GPU",
                PlanPerGpu,
                Accounted,
                false,
                "Kubernetes ≥ 1.36 (DRAConsumableCapacity, beta) and the DRA driver's --consumable-shares",
                "one ResourceClaim per pod requesting its memory as capacity, with a device selector on the GPU's UUID",
            ),
            Mechanism::DraConsumableScheduled => d(
                "DRA consumable capacity, placed by the scheduler",
                SchedulerWithinLimits,
                Accounted,
                false,
                "Kubernetes ≥ 1.36 (DRAConsumableCapacity, beta) and the DRA driver's --consumable-shares",
                "one ResourceClaim per pod requesting its memory as capacity",
            ),
            Mechanism::DraDynamicMig => d(
                "DRA DynamicMIG",
                Partitions,
                Hardware,
                false,
                "NVIDIA's DRA driver with DynamicMIG on MIG-capable GPUs",
                "a ResourceClaim per pod for a MIG device of its profile",
            ),
            Mechanism::Hami => d(
                "HAMi",
                SchedulerWithinLimits,
                MemoryLimit,
                false,
                "HAMi's scheduler and device plugin (CNCF)",
                "nvidia.com/gpu: 1 with nvidia.com/gpumem (MiB) and nvidia.com/gpucores (%) limits per container",
            ),
            Mechanism::KaiFractions => d(
                "KAI Scheduler GPU fractions",
                SchedulerWithinLimits,
                Accounted,
                false,
                "KAI Scheduler (or Run:ai) as the pods' scheduler",
                "the pod annotation gpu-memory (MiB) and schedulerName: kai-scheduler",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mechanism_is_declared_once_and_parses_back() {
        let mut names = std::collections::BTreeSet::new();
        for m in Mechanism::ALL {
            assert_eq!(Mechanism::parse(m.as_str()), Some(m));
            assert_eq!(m.declared().mechanism, m);
            assert!(names.insert(m.declared().name), "{m:?}");
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.as_str()));
        }
        for m in Mechanism::PER_GPU {
            assert!(matches!(
                m.declared().chooser,
                Chooser::PlanPerGpu | Chooser::SchedulerWithinLimits
            ));
        }
        assert_eq!(Mechanism::parse("bogus"), None);
        let err = Mechanism::from_name("bogus").unwrap_err();
        assert!(
            err.contains("\"bogus\"") && err.contains("dra_consumable_capacity"),
            "{err}"
        );
    }
}
