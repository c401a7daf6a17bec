//! What ingest counts: batches by outcome, refusals by reason, rows by kind, sizes, lag and the
//! time to store a batch.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Unit;

use collector_shared::metrics::snake_label;

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Outcome {
    Stored,
    Duplicate,
}

/// Why a batch was refused.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum RejectReason {
    Unauthenticated,
    Forbidden,
    /// The node has `[ingest] max_in_flight_per_node` batches in flight already.
    NodeBusy,
    TooLarge,
    /// The body stopped before its end (the client went away, or the request timed out).
    Incomplete,
    Compression,
    Decode,
    Invalid,
    Unavailable,
    Internal,
}

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum RowKind {
    Gpu,
    Mig,
    Process,
    Allocation,
    Event,
}

snake_label!(Outcome { Stored => "stored", Duplicate => "duplicate" });
snake_label!(RejectReason {
    Unauthenticated => "unauthenticated",
    Forbidden => "forbidden",
    NodeBusy => "node_busy",
    TooLarge => "too_large",
    Incomplete => "incomplete",
    Compression => "compression",
    Decode => "decode",
    Invalid => "invalid",
    Unavailable => "unavailable",
    Internal => "internal",
});
snake_label!(RowKind { Gpu => "gpu", Mig => "mig", Process => "process", Allocation => "allocation", Event => "event" });

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: RejectReason,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RowLabels {
    pub kind: RowKind,
}

model::metric_set! {
    /// Ingest's metrics.
    pub struct IngestMetrics {
        batches: Family<OutcomeLabels, Counter> => "ingest_batches",
            "Batches accepted (POST /api/v1/ingest, or a frame on an ingest stream), by outcome (stored, or duplicate retry)";
        streams: Counter => "ingest_streams_opened",
            "Ingest streams opened (GET /api/v1/ingest/stream answered 101)";
        rejected: Family<ReasonLabels, Counter> => "ingest_rejected_batches",
            "Batches refused, by reason";
        rows: Family<RowLabels, Counter> => "ingest_rows",
            "Sample rows stored, by kind";
        batch_rows: Histogram = Histogram::new(exponential_buckets(1.0, 4.0, 10))
            => "ingest_batch_rows",
            "Rows per stored batch";
        batch_bytes: Histogram = Histogram::new(exponential_buckets(256.0, 4.0, 10))
            => "ingest_batch_size" in Unit::Bytes,
            "Size of batch bodies as received (compressed)";
        ingest_lag: Histogram = Histogram::new(exponential_buckets(0.01, 4.0, 10))
            => "ingest_lag" in Unit::Seconds,
            "Time from a batch's newest sample to its commit";
        storage_write: Histogram = Histogram::new(exponential_buckets(0.0005, 3.0, 12))
            => "storage_write" in Unit::Seconds,
            "Time to store one batch (transaction included)";
    }
}

impl IngestMetrics {
    pub fn reject(&self, reason: RejectReason) {
        self.rejected.get_or_create(&ReasonLabels { reason }).inc();
    }
}
