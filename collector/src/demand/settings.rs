//! `[demand]` in the collector's configuration: whether and where waiting work is read.

use std::time::Duration;

use serde::Deserialize;

/// Most pending pods one poll reads (pages of [`PAGE`]); the rest are counted as left out.
pub const MAX_PODS_LIMIT: usize = 100_000;
/// Pods per page of the Kubernetes list.
pub const PAGE: u32 = 500;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Read pending pods that ask for GPUs from the Kubernetes API (needs `list` on pods
    /// cluster-wide). Off by default.
    pub pending_pods: bool,
    /// With `pending_pods`, also read Kueue Workloads that are not admitted (where Kueue is
    /// installed; needs `list` on `workloads.kueue.x-k8s.io`).
    pub kueue_workloads: bool,
    /// The API server; unset: the in-cluster service account, else the local kubeconfig.
    pub kube_url: Option<String>,
    /// The gpulens cluster name (the agents' `--cluster`) of that Kubernetes cluster. Unset:
    /// the one cluster the data holds; with several, polls fail until this is set.
    pub cluster: Option<String>,
    /// Time between polls.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub every: Duration,
    /// Most pending pods read per poll, and most Workloads (at most 100,000 each).
    pub max_pods: usize,
    /// How long a waiting episode is kept after it was last seen.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub keep: Duration,
    /// Slurm's pending jobs, read from slurmrestd (unset: Slurm is not read).
    pub slurm: Option<SlurmSettings>,
    /// The longest one poll's reads (every page of every listing, and slurmrestd) may take;
    /// past it the poll fails, records nothing, and says so in `/healthz/tasks`.
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub deadline: Duration,
}

/// `[demand.slurm]`: where slurmrestd answers and who asks.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSettings {
    /// slurmrestd's base URL (`http://slurmctld:6820`).
    pub url: String,
    /// The OpenAPI version of its jobs endpoint: `v0.0.37` (Slurm 21.08) to `v0.0.43`.
    #[serde(default = "default_slurm_api")]
    pub api_version: String,
    /// A Slurm JWT (`scontrol token`), sent as `X-SLURM-USER-TOKEN`.
    pub token: collector_shared::settings::Secret,
    /// The Slurm user the token belongs to (`X-SLURM-USER-NAME`).
    pub user: String,
    /// The gpulens cluster name (the agents' `--cluster`) of that Slurm cluster.
    pub cluster: String,
}

impl SlurmSettings {
    /// The jobs endpoint.
    pub fn jobs_url(&self) -> String {
        format!(
            "{}/slurm/{}/jobs",
            self.url.trim_end_matches('/'),
            self.api_version
        )
    }

    fn check(&self) -> anyhow::Result<()> {
        let url: reqwest::Url = self
            .url
            .parse()
            .map_err(|e| anyhow::anyhow!("[demand.slurm] url = {:?}: {e}", self.url))?;
        anyhow::ensure!(
            matches!(url.scheme(), "http" | "https"),
            "[demand.slurm] url must be http or https"
        );
        let v = self
            .api_version
            .strip_prefix("v0.0.")
            .and_then(|n| n.parse::<u32>().ok());
        anyhow::ensure!(
            v.is_some_and(|n| (37..=43).contains(&n)),
            "[demand.slurm] api_version = {:?}: gpulens reads v0.0.37 (Slurm 21.08) to v0.0.43",
            self.api_version
        );
        anyhow::ensure!(
            !self.user.is_empty()
                && self.user.len() <= 64
                && self
                    .user
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
            "[demand.slurm] user = {:?} is not a user name",
            self.user
        );
        model::names::check_subdomain(&self.cluster)
            .map_err(|why| anyhow::anyhow!("[demand.slurm] cluster = {:?}: {why}", self.cluster))?;
        Ok(())
    }
}

fn default_slurm_api() -> String {
    "v0.0.41".into()
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            pending_pods: false,
            kueue_workloads: true,
            kube_url: None,
            cluster: None,
            every: Duration::from_secs(60),
            max_pods: 5_000,
            keep: Duration::from_secs(90 * 86_400),
            slurm: None,
            deadline: Duration::from_secs(120),
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
        anyhow::ensure!(
            (Duration::from_secs(1)..=Duration::from_secs(3_600)).contains(&self.deadline),
            "[demand] deadline = {:?} is out of range: 1s to 1h",
            self.deadline
        );
        if let Some(c) = &self.cluster {
            model::names::check_subdomain(c)
                .map_err(|why| anyhow::anyhow!("[demand] cluster = {c:?}: {why}"))?;
        }
        if let Some(s) = &self.slurm {
            s.check()?;
        }
        Ok(())
    }
}
