//! The demand poll: every `[demand] every`, list the pods waiting to be scheduled that ask for
//! GPUs (paged, bounded by `max_pods`), record them as waiting episodes and drop episodes
//! older than `keep`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use store::Store;
use store::waiting::WaitingRecord;

use super::metrics::{DemandMetrics, ResourceLabels};
use super::pods::waiting_of;
use super::settings::{PAGE, Settings};
use crate::teams::TeamsConfig;

/// The selector of pods waiting for a node: pending and not bound.
pub const PENDING_UNBOUND: &str = "status.phase=Pending,spec.nodeName=";

/// What one poll saw.
#[derive(Debug, Default, PartialEq)]
pub struct PollReport {
    /// Pending unbound pods read.
    pub pods_read: usize,
    /// Of those, pods asking for GPUs, recorded.
    pub waiting_pods: usize,
    pub refused: usize,
    /// Whether `max_pods` stopped the listing before its end.
    pub truncated: bool,
}

/// One cluster's demand poll.
#[derive(Clone)]
pub struct Poll {
    pub store: Store,
    pub client: kube::Client,
    pub settings: Settings,
    pub teams: TeamsConfig,
    pub metrics: DemandMetrics,
}

impl std::fmt::Debug for Poll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poll")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Poll {
    /// A poll of the API server at `settings.kube_url` (else in-cluster, else kubeconfig).
    pub async fn connect(
        store: Store,
        settings: Settings,
        teams: TeamsConfig,
        metrics: DemandMetrics,
    ) -> anyhow::Result<Poll> {
        let client = match settings.kube_url.as_deref() {
            Some(u) => kube::Client::try_from(kube::Config::new(u.parse()?))?,
            None => kube::Client::try_default().await?,
        };
        Ok(Poll {
            store,
            client,
            settings,
            teams,
            metrics,
        })
    }

    /// The gpulens cluster the pods belong to: the configured one, else the only one stored.
    async fn cluster(&self) -> anyhow::Result<Option<String>> {
        if let Some(c) = &self.settings.cluster {
            return Ok(Some(c.clone()));
        }
        let mut clusters: Vec<String> = self
            .store
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
                "the data holds {} clusters ({}); set [demand] cluster to the one whose pending pods this collector reads",
                many.len(),
                many.join(", ")
            ),
        }
    }

    /// Pending unbound pods, page by page, at most `max_pods`.
    async fn pending_pods(&self) -> anyhow::Result<(Vec<Pod>, bool)> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let max = self.settings.max_pods;
        let mut pods = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut lp = ListParams::default()
                .fields(PENDING_UNBOUND)
                .limit(PAGE.min(u32::try_from(max - pods.len()).unwrap_or(PAGE)));
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = api.list(&lp).await?;
            token = page.metadata.continue_.clone().filter(|t| !t.is_empty());
            pods.extend(page.items);
            if pods.len() >= max {
                pods.truncate(max);
                return Ok((pods, token.is_some()));
            }
            if token.is_none() {
                return Ok((pods, false));
            }
        }
    }

    /// One poll at `now_ms`.
    pub async fn poll(&self, now_ms: i64) -> anyhow::Result<PollReport> {
        let Some(cluster) = self.cluster().await? else {
            tracing::debug!("no agent has reported yet; the demand poll waits for a cluster name");
            return Ok(PollReport::default());
        };
        let (pods, truncated) = self.pending_pods().await?;
        let team_of = |ns: &str| {
            self.teams
                .namespaces
                .get(ns)
                .cloned()
                .unwrap_or_else(|| ns.to_owned())
        };
        let mut report = PollReport {
            pods_read: pods.len(),
            truncated,
            ..PollReport::default()
        };
        let mut records: Vec<WaitingRecord> = Vec::new();
        for p in &pods {
            match waiting_of(p, &cluster, &team_of, now_ms) {
                Ok(w) if w.is_empty() => {}
                Ok(w) => {
                    report.waiting_pods += 1;
                    records.extend(w);
                }
                Err(why) => {
                    report.refused += 1;
                    tracing::warn!(%why, "a pending pod was refused by the demand poll");
                }
            }
        }
        self.store.record_waiting(&records).await?;
        let keep_ms = i64::try_from(self.settings.keep.as_millis()).unwrap_or(i64::MAX);
        self.store
            .prune_waiting(now_ms.saturating_sub(keep_ms))
            .await?;
        self.measure(&report, &records);
        if truncated {
            tracing::warn!(
                max_pods = self.settings.max_pods,
                "more pending pods than [demand] max_pods; the rest were not read this poll"
            );
        }
        Ok(report)
    }

    fn measure(&self, report: &PollReport, records: &[WaitingRecord]) {
        let m = &self.metrics;
        m.pods.set(report.waiting_pods as i64);
        m.refused.inc_by(report.refused as u64);
        if report.truncated {
            m.left_out.inc();
        }
        m.units.clear();
        for r in records {
            m.units
                .get_or_create(&ResourceLabels {
                    resource: r.resource.clone(),
                })
                .inc_by(r.count);
        }
    }
}

/// The periodic demand poll.
pub fn task(poll: Poll) -> Arc<dyn crate::tasks::Task> {
    let every = poll.settings.every;
    let poll = Arc::new(poll);
    crate::tasks::Periodic::task("demand_poll", every, move || {
        let poll = poll.clone();
        Box::pin(async move {
            poll.poll(model::time::now_ms()).await?;
            Ok(())
        })
    })
}
