//! The reclaim loop (opt-in): idle holdings a `[reclaim]` policy governs become cases — the
//! owner is notified through the alert receivers, a grace period runs in which any use cancels
//! the case, then the policy reports, or (not in dry run, after approval) scales the pod's
//! Deployment or StatefulSet to zero or suspends its Job or Kueue Workload; the outcome check
//! measures what it freed. Every step is audited. See docs/reclaim.md.

pub mod api;
pub mod metrics;
pub mod notice;
pub mod pass;
pub mod settings;
pub mod target;

pub use api::{CaseView, DecideError, Decision, ReclaimState, decide, routes};
pub use metrics::ReclaimMetrics;
pub use notice::{
    ALERTNAME as NOTICE_ALERTNAME, labels as notice_labels, summary as notice_summary,
};
pub use pass::{PassReport, Receiver, Reclaim};
pub use settings::{Action, Settings};

use std::sync::Arc;

/// The loop, when `[reclaim]` names a policy and a Kubernetes client can be made; otherwise
/// nothing (and a warning when policies are configured but the API cannot be reached).
pub async fn connect_if_enabled(
    store: &store::Store,
    settings: &Settings,
    newest: Arc<collector_shared::newest::Newest>,
    retention: store::Retention,
    receivers: Vec<Receiver>,
    metrics: &ReclaimMetrics,
) -> Option<Reclaim> {
    if settings.policies.is_empty() {
        return None;
    }
    let client = collector_shared::kube_api::connect(
        settings.kube_url.as_deref(),
        collector_shared::kube_api::Bounds::LISTS,
    )
    .await;
    match client {
        Ok(client) => {
            tracing::info!(
                policies = settings.policies.len(),
                dry_run = settings.dry_run,
                "reclaim loop enabled"
            );
            Some(Reclaim {
                store: store.clone(),
                cluster: target::Cluster { client },
                settings: Arc::new(settings.clone()),
                newest,
                retention,
                receivers,
                metrics: metrics.clone(),
            })
        }
        Err(e) => {
            tracing::warn!(error = %e, "[reclaim] has policies but no Kubernetes client could be made; nothing is reclaimed");
            None
        }
    }
}

/// The periodic reclaim pass.
pub fn task(reclaim: Reclaim) -> Arc<dyn collector_shared::tasks::Task> {
    let every = reclaim.settings.every;
    let reclaim = Arc::new(reclaim);
    collector_shared::tasks::Periodic::task("reclaim", every, move || {
        let reclaim = reclaim.clone();
        Box::pin(async move {
            if let Some(r) = reclaim.pass_at(model::time::now_ms()).await?
                && r != PassReport::default()
            {
                tracing::info!(
                    opened = r.opened,
                    cancelled = r.cancelled,
                    acted = r.acted,
                    refused = r.refused,
                    finished = r.finished,
                    "reclaim pass"
                );
            }
            Ok(())
        })
    })
}
