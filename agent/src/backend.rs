//! Where samples come from. One trait, one implementation per source: the simulated backend
//! (a node of a scenario file) here; NVML behind the same trait.

use model::wire::v1::Snapshot;
use model::{GpuInfo, Tenant, UnixMillis};

/// A source of GPU samples for one node.
pub trait GpuBackend: Send {
    /// The cluster and node names the samples belong to.
    fn identity(&self) -> (&str, &str);
    /// The node's GPUs now.
    fn inventory(&self) -> Vec<GpuInfo>;
    /// One sampling cycle at `ts`, with the tenants its samples refer to.
    fn sample(&mut self, ts: UnixMillis) -> anyhow::Result<(Snapshot, Vec<Tenant>)>;
    /// The kubelet's device assignments (backends that attribute from them override this).
    fn set_assignments(&mut self, _assignments: crate::kubelet::Assignments) {}
    /// What the driver calls have cost so far, by reading, for `gpulens-agent bench`; none for
    /// a backend without a driver.
    fn call_costs(&self) -> Vec<(&'static str, crate::CallTime)> {
        Vec::new()
    }
    /// Whether driver calls are timed on the calling thread's CPU clock too (for the bench: two
    /// system calls a call).
    fn time_calls_on_cpu(&mut self, _on: bool) {}
}

/// A simulated node: one node of a scenario file, sampled exactly as the simulator models it.
#[derive(Debug)]
pub struct SimulatedBackend {
    fleet: simulator::Fleet,
    node: usize,
}

impl SimulatedBackend {
    pub fn new(scenario: simulator::Scenario, node: &str) -> anyhow::Result<SimulatedBackend> {
        let fleet = simulator::Fleet::new(scenario);
        let index = fleet.node_index(node).ok_or_else(|| {
            let names: Vec<_> = fleet.nodes.iter().map(|n| n.spec.name.as_str()).collect();
            anyhow::anyhow!("node {node:?} is not in the scenario; it has {names:?}")
        })?;
        Ok(SimulatedBackend { fleet, node: index })
    }
}

impl GpuBackend for SimulatedBackend {
    fn identity(&self) -> (&str, &str) {
        (
            &self.fleet.scenario.cluster,
            &self.fleet.nodes[self.node].spec.name,
        )
    }

    fn inventory(&self) -> Vec<GpuInfo> {
        self.fleet.nodes[self.node].gpus.clone()
    }

    fn sample(&mut self, ts: UnixMillis) -> anyhow::Result<(Snapshot, Vec<Tenant>)> {
        Ok(self.fleet.snapshot(self.node, ts))
    }
}
