//! What every handler and task shares: the store, settings and in-memory state, behind one
//! cheaply cloned [`AppState`].

use std::sync::Arc;

use crate::auth::Auth;
use crate::config::{IngestConfig, TeamsConfig};
use crate::metrics::Metrics;
use store::{Retention, Store};

/// Everything handlers share. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Inner>);

#[derive(Debug)]
pub struct Inner {
    pub store: Store,
    pub metrics: Metrics,
    pub auth: Auth,
    pub ingest: IngestConfig,
    pub retention: Retention,
    pub teams: Arc<TeamsConfig>,
    pub analytics: crate::analysis::Settings,
    pub labels: crate::labels::settings::Settings,
    pub reports: crate::reports::Settings,
    /// The newest stored analysis, parsed once and shared (dashboard, /metrics, agents'
    /// labels, alerting).
    pub newest: Arc<crate::analysis::Newest>,
    /// Each GPU's newest readings, for the fleet metrics on /metrics.
    pub latest: crate::fleet_metrics::LatestGpus,
    /// Remote-written dcgm-exporter samples waiting for their scrape to complete.
    pub remote_write: crate::remote_write::Receiver,
    /// The background tasks' state (`tasks::Runner`), for `/healthz/tasks` and `/readyz`.
    pub tasks: crate::tasks::TaskHealth,
    /// Revoked dashboard sessions and sign-in attempts per address.
    pub sessions: crate::ui::session::Sessions,
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
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
        AppState(Arc::new(Inner {
            store,
            metrics: Metrics::new(),
            auth,
            ingest,
            retention,
            teams: Arc::new(teams),
            analytics,
            labels: Default::default(),
            reports: Default::default(),
            newest: Default::default(),
            latest: Default::default(),
            remote_write: Default::default(),
            tasks: Default::default(),
            sessions: Default::default(),
        }))
    }

    /// The same state with report settings (the time zone the API defaults to).
    pub fn with_reports(self, reports: crate::reports::Settings) -> AppState {
        let mut inner =
            Arc::try_unwrap(self.0).expect("with_reports is called before the state is shared");
        inner.reports = reports;
        AppState(Arc::new(inner))
    }

    /// The same state with label settings (mode, operators who may approve).
    pub fn with_labels(self, labels: crate::labels::settings::Settings) -> AppState {
        let mut inner =
            Arc::try_unwrap(self.0).expect("with_labels is called before the state is shared");
        inner.labels = labels;
        AppState(Arc::new(inner))
    }
}
