//! Waiting demand: work that waits for GPUs, read from where it waits (pending pods and Kueue
//! Workloads that are not admitted, through the Kubernetes API) and stored as waiting episodes the analysis sets against idle supply
//! (`waiting_demand` findings). See docs/demand.md.

pub mod api;
pub mod kueue;
pub mod mechanisms;
pub mod metrics;
pub mod pods;
pub mod settings;
pub mod slurm;
pub mod task;

pub use api::routes;
pub use metrics::DemandMetrics;
pub use pods::{check_identity, check_namespace};
pub use settings::Settings;
pub use task::{Poll, task};

/// The demand poll, when `[demand] pending_pods` is on and a client can be made; otherwise a
/// warning in the log and no poll.
pub async fn connect_if_enabled(
    store: &store::Store,
    s: &Settings,
    teams: &collector_shared::teams::TeamsConfig,
    metrics: &DemandMetrics,
) -> Option<Poll> {
    if !s.pending_pods && s.slurm.is_none() {
        return None;
    }
    match Poll::connect(store.clone(), s.clone(), teams.clone(), metrics.clone()).await {
        Ok(p) => {
            tracing::info!(every = ?s.every, pods = s.pending_pods, slurm = s.slurm.is_some(), "waiting demand is read");
            Some(p)
        }
        Err(e) => {
            tracing::warn!(error = %e, "[demand] is on but its sources cannot be reached (no Kubernetes client, or no HTTP client for slurmrestd); waiting demand is not read");
            None
        }
    }
}
