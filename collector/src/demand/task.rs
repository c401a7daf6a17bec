//! The demand poll: every `[demand] every`, list the pods waiting to be scheduled that ask for
//! GPUs (paged, bounded by `max_pods`), record them as waiting episodes and drop episodes
//! older than `keep`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::json;
use store::Store;
use store::waiting::WaitingRecord;

use super::kueue;
use super::metrics::{DemandMetrics, ResourceLabels};
use super::pods::waiting_of;
use super::settings::{PAGE, Settings};
use collector_shared::teams::TeamsConfig;

/// The selector of pods waiting for a node: pending and not bound.
pub const PENDING_UNBOUND: &str = "status.phase=Pending,spec.nodeName=";

/// What one poll saw.
#[derive(Debug, Default, PartialEq)]
pub struct PollReport {
    /// Pending unbound pods read.
    pub pods_read: usize,
    /// Of those, pods asking for GPUs, recorded.
    pub waiting_pods: usize,
    /// Kueue Workloads not admitted that ask for GPUs, recorded.
    pub waiting_workloads: usize,
    /// Pods and Workloads refused (a field outside its domain).
    pub refused: usize,
    /// Whether `max_pods` stopped a listing before its end.
    pub truncated: bool,
    /// Slurm jobs pending with a GPU request, recorded.
    pub waiting_jobs: usize,
    /// Slurm jobs pending with a GPU request but held (not stored: they wait for a person).
    pub held_jobs: usize,
}

/// Whether `e` is the API server's 404: a resource it does not serve (no Kueue, no DRA).
fn not_served(e: &anyhow::Error) -> bool {
    e.downcast_ref::<kube::Error>()
        .is_some_and(|e| matches!(e, kube::Error::Api(s) if s.code == 404))
}

/// One cluster's demand poll.
#[derive(Clone)]
pub struct Poll {
    pub store: Store,
    /// The Kubernetes API, when pending pods are read.
    pub client: Option<kube::Client>,
    /// slurmrestd, when `[demand.slurm]` is set.
    pub slurm: Option<super::slurm::Source>,
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
        let client = match (settings.pending_pods, settings.kube_url.as_deref()) {
            (false, _) => None,
            (true, url) => Some(
                collector_shared::kube_api::connect(url, collector_shared::kube_api::Bounds::LISTS)
                    .await?,
            ),
        };
        let slurm = settings
            .slurm
            .clone()
            .map(super::slurm::Source::new)
            .transpose()?;
        Ok(Poll {
            store,
            client,
            slurm,
            settings,
            teams,
            metrics,
        })
    }

    /// The gpulens cluster the pods belong to: the configured one, else the only one stored.
    async fn cluster(&self) -> anyhow::Result<Option<String>> {
        collector_shared::shared::the_cluster(
            &self.store,
            self.settings.cluster.as_deref(),
            "[demand] cluster",
        )
        .await
    }

    /// Every object of `api` matching `fields`, page by page, at most `max_pods`; and whether
    /// that bound stopped the listing (more pages, or a page longer than asked for). A listing
    /// that does not advance — an empty page that still carries a `continue` token, or the
    /// same token twice — stops with an error rather than asking forever.
    async fn list_all<K>(&self, api: Api<K>, fields: Option<&str>) -> anyhow::Result<(Vec<K>, bool)>
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let api = &api;
        self.list_pages(|lp| async move { api.list(&lp).await }, fields)
            .await
    }

    /// [`Poll::list_all`] over the pages `fetch` answers (a full listing, or only the
    /// objects' metadata).
    async fn list_pages<K, F, Fut>(
        &self,
        fetch: F,
        fields: Option<&str>,
    ) -> anyhow::Result<(Vec<K>, bool)>
    where
        K: Clone,
        F: Fn(ListParams) -> Fut,
        Fut: std::future::Future<Output = kube::Result<kube::core::ObjectList<K>>>,
    {
        let max = self.settings.max_pods;
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        let mut seen = std::collections::HashSet::new();
        loop {
            let limit = PAGE.min(u32::try_from(max - items.len()).unwrap_or(PAGE));
            let mut lp = ListParams::default().limit(limit);
            if let Some(f) = fields {
                lp = lp.fields(f);
            }
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = fetch(lp).await?;
            let next = page.metadata.continue_.clone().filter(|t| !t.is_empty());
            if let Some(t) = &next {
                anyhow::ensure!(
                    !page.items.is_empty(),
                    "the Kubernetes API answered an empty page with a continue token; the listing \
                     does not advance and was stopped"
                );
                anyhow::ensure!(
                    seen.insert(t.clone()),
                    "the Kubernetes API gave the same continue token twice; the listing does not \
                     advance and was stopped"
                );
            }
            token = next;
            items.extend(page.items);
            // A server that ignores `limit` sends more than asked: what is past `max` is left
            // out, and counted as such. Every page holds an item, so at most `max` pages.
            if items.len() > max {
                items.truncate(max);
                return Ok((items, true));
            }
            if items.len() == max {
                return Ok((items, token.is_some()));
            }
            if token.is_none() {
                return Ok((items, false));
            }
        }
    }

    /// Kueue Workloads, or `None` where Kueue is not installed (the API server answers 404).
    async fn workloads(
        &self,
        client: &kube::Client,
    ) -> anyhow::Result<Option<(Vec<DynamicObject>, bool)>> {
        let gvk = GroupVersionKind::gvk(kueue::GROUP, kueue::VERSION, "Workload");
        let resource = ApiResource::from_gvk_with_plural(&gvk, kueue::PLURAL);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        match self.list_all(api, None).await {
            Ok(w) => Ok(Some(w)),
            Err(e) if not_served(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One poll at `now_ms`: pending pods and Kueue Workloads (when read), Slurm's pending
    /// jobs (when `[demand.slurm]` is set); records what waits and prunes old episodes.
    pub async fn poll(&self, now_ms: i64) -> anyhow::Result<PollReport> {
        let mut report = PollReport::default();
        let mut records: Vec<WaitingRecord> = Vec::new();
        // The reads have one deadline together: a server trickling its answer a byte at a
        // time passes every per-read timeout, not this.
        let deadline = self.settings.deadline;
        let reads = async {
            if let Some(client) = &self.client {
                self.poll_kubernetes(client, now_ms, &mut report, &mut records)
                    .await?;
            }
            if let Some(slurm) = &self.slurm {
                self.poll_slurm(slurm, now_ms, &mut report, &mut records)
                    .await?;
            }
            anyhow::Ok(())
        };
        tokio::time::timeout(deadline, reads).await.map_err(|_| {
            anyhow::anyhow!(
                "the demand poll's reads took longer than [demand] deadline = {}; nothing was \
                 recorded this poll",
                model::time::format_duration(deadline)
            )
        })??;
        self.store.record_waiting(&records).await?;
        let keep_ms = model::time::millis(self.settings.keep);
        self.store
            .prune_waiting(now_ms.saturating_sub(keep_ms))
            .await?;
        self.measure(&report, &records);
        if report.truncated {
            tracing::warn!(
                max_pods = self.settings.max_pods,
                "more waiting work than [demand] max_pods; the rest was not read this poll"
            );
        }
        Ok(report)
    }

    async fn poll_kubernetes(
        &self,
        client: &kube::Client,
        now_ms: i64,
        report: &mut PollReport,
        records: &mut Vec<WaitingRecord>,
    ) -> anyhow::Result<()> {
        let Some(cluster) = self.cluster().await? else {
            tracing::debug!("no agent has reported yet; the demand poll waits for a cluster name");
            return Ok(());
        };
        let (pods, truncated) = self
            .list_all(Api::<Pod>::all(client.clone()), Some(PENDING_UNBOUND))
            .await?;
        let team_of = |ns: &str| self.teams.team_of_namespace(ns);
        report.pods_read = pods.len();
        report.truncated |= truncated;
        let mut refused = 0;
        // One object's outcome: its records kept and counted, or its refusal logged.
        let mut take =
            |r: Result<Vec<WaitingRecord>, String>, what: &str, waiting: &mut usize| match r {
                Ok(w) if w.is_empty() => {}
                Ok(w) => {
                    *waiting += 1;
                    records.extend(w);
                }
                Err(why) => {
                    refused += 1;
                    tracing::warn!(%why, "a {what} was refused by the demand poll");
                }
            };
        let mut waiting_pods = 0;
        for p in &pods {
            take(
                waiting_of(p, &cluster, &team_of, now_ms),
                "pending pod",
                &mut waiting_pods,
            );
        }
        let mut waiting_workloads = 0;
        if self.settings.kueue_workloads
            && let Some((workloads, cut)) = self.workloads(client).await?
        {
            report.truncated |= cut;
            for o in workloads {
                let w = serde_json::to_value(&o)
                    .and_then(serde_json::from_value::<kueue::Workload>)
                    .map_err(|e| format!("not a Workload: {e}"))
                    .and_then(|w| kueue::waiting_of(&w, &cluster, &team_of, now_ms));
                take(w, "Kueue Workload", &mut waiting_workloads);
            }
        }
        report.waiting_pods = waiting_pods;
        report.waiting_workloads = waiting_workloads;
        report.refused += refused;
        // What each node has in place is worth knowing, not worth failing the poll for (an
        // API server without DRA, RBAC from an older chart).
        if let Err(e) = self.mechanisms(client, &cluster, now_ms).await {
            tracing::warn!(error = %e, "cannot read which sharing mechanisms the nodes have");
        }
        Ok(())
    }

    /// Records which per-GPU sharing mechanisms each node of `cluster` has in place
    /// ([`super::mechanisms`]): its ResourceSlices (none where the API server does not serve
    /// them) and its nodes' annotations.
    async fn mechanisms(
        &self,
        client: &kube::Client,
        cluster: &str,
        now_ms: i64,
    ) -> anyhow::Result<()> {
        let gvk = GroupVersionKind::gvk("resource.k8s.io", "v1", "ResourceSlice");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "resourceslices");
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let slices = match self.list_all(api, None).await {
            Ok((s, _)) => s,
            Err(e) if not_served(&e) => Vec::new(),
            Err(e) => return Err(e),
        };
        // Only the nodes' metadata: their annotations say what is registered on them, and a
        // node's status (images, conditions) is most of its size.
        let nodes_api = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
        let nodes_api = &nodes_api;
        let (nodes, _) = self
            .list_pages(|lp| async move { nodes_api.list_metadata(&lp).await }, None)
            .await?;
        // A slice's `data` is everything but its type and metadata: its spec.
        let slices: Vec<serde_json::Value> = slices.into_iter().map(|s| s.data).collect();
        let nodes: Vec<serde_json::Value> = nodes
            .iter()
            .map(|n| json!({"metadata": {"name": n.metadata.name, "annotations": n.metadata.annotations}}))
            .collect();
        let seen: Vec<(String, String)> = super::mechanisms::seen(&slices, &nodes)
            .into_iter()
            .map(|(node, m)| (node, m.as_str().to_owned()))
            .collect();
        self.store.record_mechanisms(cluster, &seen, now_ms).await?;
        Ok(())
    }

    async fn poll_slurm(
        &self,
        slurm: &super::slurm::Source,
        now_ms: i64,
        report: &mut PollReport,
        records: &mut Vec<WaitingRecord>,
    ) -> anyhow::Result<()> {
        let (jobs, more) = slurm.jobs(self.settings.max_pods).await?;
        report.truncated |= more;
        let team_of = |account: &str| self.teams.team_of_account(account);
        let cluster = &slurm.settings.cluster;
        for job in &jobs {
            match super::slurm::job_of(job, cluster, &team_of, now_ms) {
                Ok(super::slurm::Job::Waiting(w)) => {
                    report.waiting_jobs += 1;
                    records.extend(w);
                }
                Ok(super::slurm::Job::Held) => report.held_jobs += 1,
                Ok(super::slurm::Job::NotWaiting) => {}
                Err(why) => {
                    report.refused += 1;
                    tracing::warn!(%why, "a Slurm job was refused by the demand poll");
                }
            }
        }
        Ok(())
    }

    fn measure(&self, report: &PollReport, records: &[WaitingRecord]) {
        let m = &self.metrics;
        m.pods.set(report.waiting_pods as i64);
        m.workloads.set(report.waiting_workloads as i64);
        m.slurm_jobs.set(report.waiting_jobs as i64);
        m.held_jobs.set(report.held_jobs as i64);
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
pub fn task(poll: Poll) -> Arc<dyn collector_shared::tasks::Task> {
    let every = poll.settings.every;
    let poll = Arc::new(poll);
    collector_shared::tasks::Periodic::task("demand_poll", every, move || {
        let poll = poll.clone();
        Box::pin(async move {
            poll.poll(model::time::now_ms()).await?;
            Ok(())
        })
    })
}
