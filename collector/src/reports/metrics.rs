//! What the weekly reports count of their own work: reports made, and webhook announcements
//! by outcome.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnnounceLabels {
    /// `sent` or `failed`.
    pub outcome: &'static str,
}

model::metric_set! {
    pub struct ReportMetrics {
        made: Counter => "reports_made",
            "Weekly reports made and stored by this collector";
        announcements: Family<AnnounceLabels, Counter> => "report_announcements",
            "Webhook announcements of a stored report, by outcome (sent, failed after 3 tries)";
    }
}
