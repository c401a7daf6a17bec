//! What the weekly reports count of their own work: reports made, and webhook announcements
//! by outcome.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnnounceLabels {
    /// `sent` or `failed`.
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Default)]
pub struct ReportMetrics {
    pub made: Counter,
    pub announcements: Family<AnnounceLabels, Counter>,
}

impl ReportMetrics {
    pub fn register(registry: &mut Registry) -> ReportMetrics {
        let m = ReportMetrics::default();
        crate::metrics::register!(registry, m,
            made => "reports_made",
                "Weekly reports made and stored by this collector";
            announcements => "report_announcements",
                "Webhook announcements of a stored report, by outcome (sent, failed after 3 tries)";
        );
        m
    }
}
