//! Which background tasks a collector runs: every feature's tasks, put together here so
//! `serve` and `demo` start the same set, and so no feature needs to know another (the
//! analysis hands its result to label convergence through a hook made here).

use std::sync::Arc;
use std::time::Duration;

use crate::state::AppState;
use collector_shared::tasks::Task;

/// What decides the set of tasks a collector runs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Partitions, remote-write settling, rollups and retention.
    pub storage_every: Duration,
    pub analysis: crate::analysis::Settings,
    /// The first analysis pass waits this long (the demo analysed its history just before).
    pub analysis_first_after: Duration,
    pub alerts: Option<crate::alerts::Settings>,
    pub reports: Option<(crate::reports::Settings, analytics::Config)>,
    /// Label convergence runs when a cluster is reachable.
    pub labels: Option<(crate::labels::Cluster, crate::labels::Settings)>,
    /// The demand poll runs when `[demand] pending_pods` is on and the API is reachable.
    pub demand: Option<crate::demand::Poll>,
    /// The reclaim loop runs when `[reclaim]` has policies and the API is reachable.
    pub reclaim: Option<crate::reclaim::Reclaim>,
}

/// The collector's tasks, the same set for `serve` and `demo`.
pub fn standard(state: &AppState, plan: Plan) -> Vec<Arc<dyn Task>> {
    let mut tasks = state.upkeep().tasks(plan.storage_every);
    // Settling stores scrapes before the rollup that reads them.
    tasks.insert(
        1,
        crate::remote_write::task(state.remote_write_state(), plan.storage_every),
    );
    let after = plan.labels.clone().map(|(cluster, settings)| {
        let store = state.shared.store.clone();
        let metrics = state.metrics.labels.clone();
        let shared = Arc::new((store, cluster, settings, metrics));
        let hook: crate::analysis::AfterAnalysis = Arc::new(move |analysis| {
            let shared = shared.clone();
            Box::pin(async move {
                let (store, cluster, settings, metrics) = &*shared;
                crate::labels::after_analysis(
                    store,
                    cluster,
                    settings,
                    &analysis,
                    model::time::now_ms(),
                    metrics,
                )
                .await
                .map_err(|e| anyhow::anyhow!("labelling after the analysis failed: {e}"))
            })
        });
        hook
    });
    if let Some(poll) = plan.demand {
        tasks.push(crate::demand::task(poll));
    }
    if let Some(r) = plan.reclaim {
        tasks.push(crate::reclaim::task(r));
    }
    tasks.push(crate::analysis::task(
        state.shared.store.clone(),
        plan.analysis,
        state.metrics.analysis.clone(),
        plan.analysis_first_after,
        after,
    ));
    if let Some(a) = plan.alerts {
        tasks.push(crate::alerts::task(
            state.shared.store.clone(),
            a,
            state.newest.clone(),
            state.metrics.alerts.clone(),
        ));
    }
    if let Some((r, thresholds)) = plan.reports {
        tasks.push(crate::reports::task(
            state.shared.store.clone(),
            r,
            thresholds,
            state.metrics.reports.clone(),
        ));
    }
    if let Some((cluster, l)) = plan.labels {
        tasks.push(crate::labels::task(
            state.shared.store.clone(),
            cluster,
            l,
            state.metrics.labels.clone(),
        ));
    }
    tasks
}
