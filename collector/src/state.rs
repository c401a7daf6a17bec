//! The composition root of the collector's state: [`AppState`] builds the [`Shared`] state,
//! registers every feature's metrics on the one registry, and hands each feature its own state
//! (its settings, in-memory parts and metrics next to the shared ones). Features never import
//! this file; `router.rs` and `schedule.rs` use it to wire them.

use std::sync::Arc;

use store::{Retention, Store};

use crate::alerts::AlertMetrics;
use crate::analysis::{AnalysisMetrics, AnalysisState};
use crate::dashboard::DashboardState;
use crate::fleet::LatestGpus;
use crate::health::HealthState;
use crate::ingest::{IngestConfig, IngestMetrics, IngestState};
use crate::labels::{LabelMetrics, LabelsState};
use crate::remote_write::{Receiver, RemoteWriteMetrics, RemoteWriteState};
use crate::reports::{ReportMetrics, ReportsState};
use crate::upkeep::{StorageMetrics, Upkeep};
use collector_shared::access::Access;
use collector_shared::agent_auth::Auth;
use collector_shared::newest::Newest;
use collector_shared::shared::{Shared, SharedInner};
use collector_shared::tasks::TaskHealth;
use collector_shared::teams::TeamsConfig;

/// The name of the session key in the `secrets` table.
pub const SESSION_KEY_SECRET: &str = "session_key";

/// Every feature's state, built once. Cheap to clone (everything in it is shared).
#[derive(Debug, Clone)]
pub struct AppState {
    pub shared: Shared,
    pub ingest: Arc<IngestConfig>,
    /// Each node's batches in the ingest handler (`ingest/per_node.rs`).
    pub ingest_per_node: Arc<crate::ingest::PerNode>,
    pub analytics: Arc<crate::analysis::Settings>,
    pub labels: Arc<crate::labels::Settings>,
    pub reports: Arc<crate::reports::Settings>,
    /// `[reclaim]`: its policies, for the API.
    pub reclaim: Arc<crate::reclaim::Settings>,
    /// The newest stored analysis, parsed once and shared (dashboard, /metrics, agents'
    /// labels, alerting).
    pub newest: Arc<Newest>,
    /// The funnel over a range a reader picks (tenants' and teams' pages), one at a time.
    pub ranged: Arc<crate::analysis::Ranged>,
    /// Each GPU's newest readings, for the fleet metrics on /metrics.
    pub latest: Arc<LatestGpus>,
    /// Remote-written dcgm-exporter samples waiting for their scrape to complete.
    pub remote_write: Arc<Receiver>,
    /// Who may see what (`[access]`, with the operators of `[labels]`), with the sessions.
    pub access: Arc<Access>,
    /// The `[access]` settings the rules were built from (rebuilt when operators change).
    pub access_settings: Arc<collector_shared::access::Settings>,
    /// The deployment's stored session key (`secrets` table), used when `[access]
    /// session_key` is not set; `None`: a random key for this process.
    pub session_secret: Option<[u8; 32]>,
    /// In-flight refusals per request class (admission.rs), for /metrics and /readyz.
    pub refusals: Arc<collector_shared::admission::Refusals>,
    pub metrics: FeatureMetrics,
}

/// Each feature's metrics, registered on the shared registry.
#[derive(Debug, Clone)]
pub struct FeatureMetrics {
    pub ingest: IngestMetrics,
    pub storage: StorageMetrics,
    pub analysis: AnalysisMetrics,
    pub alerts: AlertMetrics,
    pub reports: ReportMetrics,
    pub labels: LabelMetrics,
    pub demand: crate::demand::DemandMetrics,
    pub reclaim: crate::reclaim::ReclaimMetrics,
}

impl AppState {
    pub fn new(
        store: Store,
        auth: Auth,
        ingest: IngestConfig,
        retention: Retention,
        teams: TeamsConfig,
    ) -> AppState {
        AppState::with_analytics(store, auth, ingest, retention, teams, Default::default())
    }

    pub fn with_analytics(
        store: Store,
        auth: Auth,
        ingest: IngestConfig,
        retention: Retention,
        teams: TeamsConfig,
        analytics: crate::analysis::Settings,
    ) -> AppState {
        let mut registry = collector_shared::metrics::registry();
        let metrics = FeatureMetrics {
            ingest: IngestMetrics::register(&mut registry),
            storage: StorageMetrics::register(&mut registry),
            analysis: AnalysisMetrics::register(&mut registry),
            alerts: AlertMetrics::register(&mut registry),
            reports: ReportMetrics::register(&mut registry),
            labels: LabelMetrics::register(&mut registry),
            demand: crate::demand::DemandMetrics::register(&mut registry),
            reclaim: crate::reclaim::ReclaimMetrics::register(&mut registry),
        };
        let tasks = Arc::new(TaskHealth::registered(&mut registry));
        let remote_write = Receiver::with_metrics(RemoteWriteMetrics::register(&mut registry));
        let refusals = collector_shared::admission::Refusals::register(&mut registry);
        let shared = Shared::new(SharedInner {
            store,
            auth,
            retention,
            teams: Arc::new(teams),
            tasks,
            registry: Arc::new(registry),
            loading: Arc::default(),
        });
        AppState {
            shared,
            ingest_per_node: crate::ingest::PerNode::new(ingest.max_in_flight_per_node),
            ingest: Arc::new(ingest),
            analytics: Arc::new(analytics),
            labels: Default::default(),
            reports: Default::default(),
            reclaim: Default::default(),
            newest: Default::default(),
            ranged: Default::default(),
            latest: Default::default(),
            remote_write: Arc::new(remote_write),
            access: Default::default(),
            access_settings: Default::default(),
            session_secret: None,
            refusals,
            metrics,
        }
    }

    /// The same state with `[metrics]` settings (per-tenant series on /metrics or not).
    pub fn with_fleet_metrics(mut self, settings: &crate::fleet::MetricsSettings) -> AppState {
        self.latest = Arc::new(crate::fleet::LatestGpus::new(settings));
        self
    }

    /// The same state with report settings (the time zone the API defaults to).
    pub fn with_reports(mut self, reports: crate::reports::Settings) -> AppState {
        self.reports = Arc::new(reports);
        self
    }

    /// The same state with label settings (mode, operators who may approve).
    pub fn with_labels(mut self, labels: crate::labels::Settings) -> AppState {
        self.labels = Arc::new(labels);
        let settings = self.access_settings.as_ref().clone();
        self.with_access(settings)
            .expect("access settings that were valid stay valid with operators")
    }

    /// The same state with `[access]` settings: who may read, sign in, approve.
    pub fn with_access(
        mut self,
        settings: collector_shared::access::Settings,
    ) -> anyhow::Result<AppState> {
        let mut s = settings.clone();
        s.secure_cookies |= self.labels.secure_cookies;
        let operators: Vec<_> = self
            .labels
            .operators
            .iter()
            .map(|o| (o.name.clone(), o.token.clone()))
            .collect();
        self.access = Arc::new(Access::with_stored_key(
            &s,
            &operators,
            self.session_secret,
        )?);
        self.access_settings = Arc::new(settings);
        Ok(self)
    }

    /// The same state signing sessions with the deployment's session key, read from (or
    /// created in) the database, so every replica accepts the cookies any of them issued.
    /// A configured `[access] session_key` still wins.
    pub async fn with_stored_session_key(mut self) -> anyhow::Result<AppState> {
        let key = self
            .shared
            .store
            .shared_secret(
                SESSION_KEY_SECRET,
                &collector_shared::signing::random_key()?,
            )
            .await?;
        let key: [u8; 32] = key.try_into().map_err(|k: Vec<u8>| {
            anyhow::anyhow!(
                "the stored session key is {} bytes, not 32: run `gpulens rotate-session-key`",
                k.len()
            )
        })?;
        self.session_secret = Some(key);
        let settings = self.access_settings.as_ref().clone();
        self.with_access(settings)
    }

    pub fn ingest_state(&self) -> IngestState {
        IngestState {
            shared: self.shared.clone(),
            ingest: self.ingest.clone(),
            per_node: self.ingest_per_node.clone(),
            latest: self.latest.clone(),
            metrics: self.metrics.ingest.clone(),
        }
    }

    pub fn remote_write_state(&self) -> RemoteWriteState {
        RemoteWriteState {
            shared: self.shared.clone(),
            ingest: self.ingest.clone(),
            latest: self.latest.clone(),
            remote_write: self.remote_write.clone(),
        }
    }

    pub fn analysis_state(&self) -> AnalysisState {
        AnalysisState {
            shared: self.shared.clone(),
            analytics: self.analytics.clone(),
            newest: self.newest.clone(),
            metrics: self.metrics.analysis.clone(),
        }
    }

    /// The same state with `[reclaim]` settings (the policies the API lists).
    pub fn with_reclaim(mut self, reclaim: crate::reclaim::Settings) -> AppState {
        self.reclaim = Arc::new(reclaim);
        self
    }

    pub fn reclaim_state(&self) -> crate::reclaim::ReclaimState {
        crate::reclaim::ReclaimState {
            shared: self.shared.clone(),
            settings: self.reclaim.clone(),
        }
    }

    pub fn labels_state(&self) -> LabelsState {
        LabelsState {
            shared: self.shared.clone(),
            labels: self.labels.clone(),
            newest: self.newest.clone(),
        }
    }

    pub fn reports_state(&self) -> ReportsState {
        ReportsState {
            shared: self.shared.clone(),
            reports: self.reports.clone(),
        }
    }

    pub fn dashboard_state(&self) -> DashboardState {
        DashboardState {
            shared: self.shared.clone(),
            labels: self.labels.clone(),
            newest: self.newest.clone(),
            ranged: self.ranged.clone(),
            analytics: self.analytics.clone(),
            access: self.access.clone(),
            reclaim: self.reclaim.clone(),
        }
    }

    pub fn health_state(&self) -> HealthState {
        HealthState {
            shared: self.shared.clone(),
            newest: self.newest.clone(),
            latest: self.latest.clone(),
            refusals: self.refusals.clone(),
            access: self.access.clone(),
            storage: self.metrics.storage.clone(),
        }
    }

    pub fn upkeep(&self) -> Upkeep {
        Upkeep {
            shared: self.shared.clone(),
            metrics: self.metrics.storage.clone(),
            sealed_to: Default::default(),
        }
    }

    /// One pass of storage upkeep as the tasks do it, in order: partitions, remote-write
    /// settling, rollups, retention. Returns the rolled-up node-minutes (the demo's backfill
    /// and tests use it; a running collector has the tasks).
    pub async fn upkeep_once(&self) -> anyhow::Result<usize> {
        let now = model::time::now_ms();
        let upkeep = self.upkeep();
        upkeep.partitions(now).await?;
        crate::remote_write::settle(&self.remote_write_state()).await?;
        let minutes = upkeep.rollup(now).await?;
        upkeep.retain(now).await?;
        Ok(minutes)
    }
}
