//! Closing the loop: advisory `gpulens.io/` node labels from the latest analysis, and the
//! guarded workflow that changes the GPU Operator's labels after approval. See docs/labels.md.

pub mod actions;
pub mod advisory;
pub mod api;
pub mod kube;
pub mod layouts;
pub mod metrics;
pub mod settings;
pub mod workflow;

pub use actions::{ApproveError, after_analysis, approve, task};
pub use advisory::{labels as advisory_labels, utilization_class};
pub use api::{LabelsState, routes};
pub use kube::Cluster;
pub use layouts::MIG_PARTED_KEY;
pub use metrics::LabelMetrics;
pub use settings::{Mode, Operator, Settings};
pub use workflow::{Plan, plans};

/// The cluster to label, when labels are on and the API server is reachable; otherwise a
/// warning in the log and no labelling.
pub async fn connect_if_enabled(s: &settings::Settings) -> Option<kube::Cluster> {
    if s.mode == settings::Mode::Off || !s.api {
        return None;
    }
    match kube::Cluster::connect(s.kube_url.as_deref()).await {
        Ok(c) => {
            tracing::info!(mode = s.mode.as_str(), "node labels enabled");
            Some(c)
        }
        Err(e) => {
            tracing::warn!(error = %e, mode = s.mode.as_str(), "node labels are configured but the Kubernetes API cannot be reached; labelling is off");
            None
        }
    }
}
