//! What the reclaim loop counts: its open cases by state, and the actions it carried out.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// noticed, awaiting_approval, approved or acted.
    pub state: String,
}

model::metric_set! {
    pub struct ReclaimMetrics {
        open: Family<StateLabels, Gauge> => "reclaim_cases_open",
            "Reclaim cases still open after the last pass, by state";
        actions: Counter => "reclaim_actions",
            "Controllers the reclaim loop scaled to zero or suspended";
    }
}
