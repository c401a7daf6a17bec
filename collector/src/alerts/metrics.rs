//! What alerting counts of its own work: notifications built, and delivery attempts per
//! receiver by outcome with their duration. (How many alerts are firing is a fact about the
//! fleet; `fleet::metrics` serves it.)

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Unit;

/// A receiver by its configured name (a bounded set) and how an attempt ended
/// (`deliver::Verdict`: delivered, retry, failed).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    pub receiver: String,
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReceiverLabels {
    pub receiver: String,
}

model::metric_set! {
    pub struct AlertMetrics {
        enqueued: Family<ReceiverLabels, Counter> => "alert_notifications_enqueued",
            "Notifications built into the outbox, by receiver";
        attempts: Family<AttemptLabels, Counter> => "alert_delivery_attempts",
            "Attempts to deliver a notification, by receiver and outcome (delivered, retry, failed)";
        attempt_duration: Histogram = Histogram::new(exponential_buckets(0.005, 3.0, 10))
            => "alert_delivery_attempt_duration" in Unit::Seconds,
            "Time one delivery attempt took";
    }
}
