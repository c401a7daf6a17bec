//! The shared HTTP state: what every feature's handlers and tasks may use — the store, agent
//! credentials, retention, the team mapping, the background tasks' health and the metrics
//! registry. It names no feature; each feature's own state holds a [`Shared`] next to its own
//! parts (settings, in-memory state, metrics), and `state.rs` builds them all.

use std::sync::Arc;

use prometheus_client::registry::Registry;
use store::{Retention, Store};

use crate::agent_auth::Auth;
use crate::tasks::TaskHealth;
use crate::teams::TeamsConfig;

/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct Shared(Arc<SharedInner>);

#[derive(Debug)]
pub struct SharedInner {
    pub store: Store,
    pub auth: Auth,
    pub retention: Retention,
    pub teams: Arc<TeamsConfig>,
    /// The background tasks' state (`tasks::Runner`), for `/healthz/tasks` and `/readyz`.
    pub tasks: Arc<TaskHealth>,
    /// Every feature's metrics, served at `/metrics`.
    pub registry: Arc<Registry>,
    /// History being loaded in bulk (the demo's backfill), for the overview's "loading" state.
    pub loading: Arc<Loading>,
}

/// Progress of a bulk history load: batches done of the total; 0 of 0 when none runs.
#[derive(Debug, Default)]
pub struct Loading {
    done: std::sync::atomic::AtomicU64,
    total: std::sync::atomic::AtomicU64,
}

impl Loading {
    pub fn set(&self, done: u64, total: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.total.store(total, Relaxed);
        self.done.store(done, Relaxed);
    }

    /// Marks the load finished (or none running).
    pub fn finish(&self) {
        self.set(0, 0);
    }

    /// (done, total) while a load runs.
    pub fn progress(&self) -> Option<(u64, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        let total = self.total.load(Relaxed);
        (total > 0).then(|| (self.done.load(Relaxed).min(total), total))
    }
}

impl Shared {
    pub fn new(inner: SharedInner) -> Shared {
        Shared(Arc::new(inner))
    }
}

impl std::ops::Deref for Shared {
    type Target = SharedInner;
    fn deref(&self) -> &SharedInner {
        &self.0
    }
}

/// The gpulens cluster a task that talks to one Kubernetes (or Slurm) cluster works on:
/// `configured`, else the only cluster the data holds; `None` before any agent reported. With
/// several clusters and none configured, the error names them and the setting to set
/// (`section`, e.g. `[demand] cluster`).
pub async fn the_cluster(
    store: &Store,
    configured: Option<&str>,
    section: &str,
) -> anyhow::Result<Option<String>> {
    if let Some(c) = configured {
        return Ok(Some(c.to_owned()));
    }
    let mut clusters: Vec<String> = store
        .nodes()
        .await?
        .into_iter()
        .map(|n| n.cluster)
        .collect();
    clusters.sort();
    clusters.dedup();
    match clusters.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        many => anyhow::bail!(
            "the data holds {} clusters ({}); set {section} to the one this collector works on",
            many.len(),
            many.join(", ")
        ),
    }
}
