//! What the analysis counts of its own work: passes by outcome, and how long loading and
//! analysing took.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Unit;

use collector_shared::metrics::{FGauge, snake_label};

/// How an analysis pass ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum PassOutcome {
    /// Computed and stored.
    Stored,
    /// Another collector held the analysis lock.
    Skipped,
    Failed,
}

snake_label!(PassOutcome { Stored => "stored", Skipped => "skipped", Failed => "failed" });

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PassLabels {
    pub outcome: PassOutcome,
}

model::metric_set! {
    pub struct AnalysisMetrics {
        passes: Family<PassLabels, Counter> => "analysis_passes",
            "Scheduled or on-demand analysis passes, by outcome (stored; skipped: another collector held the lock; failed)";
        load: Histogram = Histogram::new(exponential_buckets(0.01, 3.0, 10))
            => "analysis_load" in Unit::Seconds,
            "Time to read one analysis' input (inventory, rollups, health) from the store";
        analyze: Histogram = Histogram::new(exponential_buckets(0.01, 3.0, 10))
            => "analysis_compute" in Unit::Seconds,
            "Time to analyse one input (funnel, findings, recommendations)";
        /// Hour and minute rows the newest pass read.
        input_rows: FGauge => "analysis_input_rows",
            "Hour and minute rows the newest analysis read";
    }
}

impl AnalysisMetrics {
    pub fn count(&self, outcome: PassOutcome) {
        self.passes.get_or_create(&PassLabels { outcome }).inc();
    }
}
