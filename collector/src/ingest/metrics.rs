//! What ingest counts: batches by outcome, refusals by reason, rows by kind, sizes, lag and the
//! time to store a batch.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::metrics::snake_label;

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
    TooLarge,
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
    TooLarge => "too_large",
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

/// Ingest's metrics.
#[derive(Debug, Clone)]
pub struct IngestMetrics {
    pub batches: Family<OutcomeLabels, Counter>,
    pub rejected: Family<ReasonLabels, Counter>,
    pub rows: Family<RowLabels, Counter>,
    pub batch_rows: Histogram,
    pub batch_bytes: Histogram,
    pub ingest_lag: Histogram,
    pub storage_write: Histogram,
}

impl Default for IngestMetrics {
    fn default() -> Self {
        IngestMetrics {
            batches: Family::default(),
            rejected: Family::default(),
            rows: Family::default(),
            batch_rows: Histogram::new(exponential_buckets(1.0, 4.0, 10)),
            batch_bytes: Histogram::new(exponential_buckets(256.0, 4.0, 10)),
            ingest_lag: Histogram::new(exponential_buckets(0.01, 4.0, 10)),
            storage_write: Histogram::new(exponential_buckets(0.0005, 3.0, 12)),
        }
    }
}

impl IngestMetrics {
    pub fn register(registry: &mut Registry) -> IngestMetrics {
        let m = IngestMetrics::default();
        crate::metrics::register!(registry, m,
            batches => "ingest_batches",
                "Batches accepted by POST /api/v1/ingest, by outcome (stored, or duplicate retry)";
            rejected => "ingest_rejected_batches",
                "Batches refused, by reason";
            rows => "ingest_rows",
                "Sample rows stored, by kind";
            batch_rows => "ingest_batch_rows",
                "Rows per stored batch";
            batch_bytes => "ingest_batch_size" in Unit::Bytes,
                "Size of batch bodies as received (compressed)";
            ingest_lag => "ingest_lag" in Unit::Seconds,
                "Time from a batch's newest sample to its commit";
            storage_write => "storage_write" in Unit::Seconds,
                "Time to store one batch (transaction included)";
        );
        m
    }

    pub fn reject(&self, reason: RejectReason) {
        self.rejected.get_or_create(&ReasonLabels { reason }).inc();
    }
}
