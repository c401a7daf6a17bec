//! What the reclaim loop counts: its open cases by state, and the actions it carried out.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// noticed, awaiting_approval, approved or acted.
    pub state: String,
}

#[derive(Debug, Clone, Default)]
pub struct ReclaimMetrics {
    pub open: Family<StateLabels, Gauge>,
    pub actions: Counter,
}

impl ReclaimMetrics {
    pub fn register(registry: &mut Registry) -> ReclaimMetrics {
        let m = ReclaimMetrics::default();
        crate::metrics::register!(registry, m,
            open => "reclaim_cases_open",
                "Reclaim cases still open after the last pass, by state";
            actions => "reclaim_actions",
                "Controllers the reclaim loop scaled to zero or suspended";
        );
        m
    }
}
