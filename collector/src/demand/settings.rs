//! `[demand]` in the collector's configuration: whether and where waiting work is read.

use std::time::Duration;

use serde::Deserialize;

/// Most pending pods one poll reads (pages of [`PAGE`]); the rest are counted as left out.
pub const MAX_PODS_LIMIT: usize = 100_000;
/// Pods per page of the Kubernetes list.
pub const PAGE: u32 = 500;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Read pending pods that ask for GPUs from the Kubernetes API (needs `list` on pods
    /// cluster-wide). Off by default.
    #[serde(default)]
    pub pending_pods: bool,
    /// With `pending_pods`, also read Kueue Workloads that are not admitted (where Kueue is
    /// installed; needs `list` on `workloads.kueue.x-k8s.io`).
    #[serde(default = "yes")]
    pub kueue_workloads: bool,
    /// The API server; unset: the in-cluster service account, else the local kubeconfig.
    #[serde(default)]
    pub kube_url: Option<String>,
    /// The gpulens cluster name (the agents' `--cluster`) of that Kubernetes cluster. Unset:
    /// the one cluster the data holds; with several, polls fail until this is set.
    #[serde(default)]
    pub cluster: Option<String>,
    /// Time between polls.
    #[serde(
        default = "default_every",
        deserialize_with = "crate::settings::duration"
    )]
    pub every: Duration,
    /// Most pending pods read per poll, and most Workloads (at most 100,000 each).
    #[serde(default = "default_max_pods")]
    pub max_pods: usize,
    /// How long a waiting episode is kept after it was last seen.
    #[serde(
        default = "default_keep",
        deserialize_with = "crate::settings::duration"
    )]
    pub keep: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            pending_pods: false,
            kueue_workloads: true,
            kube_url: None,
            cluster: None,
            every: default_every(),
            max_pods: default_max_pods(),
            keep: default_keep(),
        }
    }
}

impl Settings {
    /// Refuses values that cannot work.
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=MAX_PODS_LIMIT).contains(&self.max_pods),
            "[demand] max_pods = {} is out of range: 1 to {MAX_PODS_LIMIT}",
            self.max_pods
        );
        anyhow::ensure!(
            self.every >= Duration::from_secs(5),
            "[demand] every = {:?} is too short: at least 5s",
            self.every
        );
        if let Some(c) = &self.cluster {
            model::names::check_subdomain(c)
                .map_err(|why| anyhow::anyhow!("[demand] cluster = {c:?}: {why}"))?;
        }
        Ok(())
    }
}

fn yes() -> bool {
    true
}
fn default_every() -> Duration {
    Duration::from_secs(60)
}
fn default_max_pods() -> usize {
    5_000
}
fn default_keep() -> Duration {
    Duration::from_secs(90 * 86_400)
}
