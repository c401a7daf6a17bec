//! The collector's own metrics, one typed catalogue (no string names at call sites), served
//! at `/metrics` in the Prometheus text format. Label values are bounded enums.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

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

/// Label values are written in snake_case, as Prometheus convention has it.
macro_rules! snake_label {
    ($t:ty { $($v:ident => $s:literal),* $(,)? }) => {
        impl $t {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$v => $s),* }
            }
        }
        impl EncodeLabelValue for $t {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, self.as_str())
            }
        }
    };
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

/// How a background task's pass ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum TaskOutcome {
    Ok,
    Failed,
    Panicked,
}

snake_label!(TaskOutcome { Ok => "ok", Failed => "failed", Panicked => "panicked" });

/// A background task (`tasks::Task::name`, a fixed set).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabels {
    pub task: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskRunLabels {
    pub task: &'static str,
    pub outcome: TaskOutcome,
}

type HistogramMaker = fn() -> Histogram;

/// Every metric the collector exports.
#[derive(Debug)]
pub struct Metrics {
    pub registry: Registry,
    pub batches: Family<OutcomeLabels, Counter>,
    pub rejected: Family<ReasonLabels, Counter>,
    pub rows: Family<RowLabels, Counter>,
    pub batch_rows: Histogram,
    pub batch_bytes: Histogram,
    pub ingest_lag: Histogram,
    pub storage_write: Histogram,
    pub rollup_buckets: Counter,
    pub rollup_failures: Counter,
    pub rollup_undecodable_rows: Counter,
    pub task_runs: Family<TaskRunLabels, Counter>,
    pub task_duration: Family<TaskLabels, Histogram, HistogramMaker>,
    pub task_last_success: Family<TaskLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub retention_dropped: Counter,
    pub last_rollup_timestamp: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("gpulens");
        let batches = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "ingest_batches",
            "Batches accepted by POST /api/v1/ingest, by outcome (stored, or duplicate retry)",
            batches.clone(),
        );
        let rejected = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "ingest_rejected_batches",
            "Batches refused, by reason",
            rejected.clone(),
        );
        let rows = Family::<RowLabels, Counter>::default();
        registry.register("ingest_rows", "Sample rows stored, by kind", rows.clone());
        let batch_rows = Histogram::new(exponential_buckets(1.0, 4.0, 10));
        registry.register(
            "ingest_batch_rows",
            "Rows per stored batch",
            batch_rows.clone(),
        );
        let batch_bytes = Histogram::new(exponential_buckets(256.0, 4.0, 10));
        registry.register_with_unit(
            "ingest_batch_size",
            "Size of batch bodies as received (compressed)",
            Unit::Bytes,
            batch_bytes.clone(),
        );
        let ingest_lag = Histogram::new(exponential_buckets(0.01, 4.0, 10));
        registry.register_with_unit(
            "ingest_lag",
            "Time from a batch's newest sample to its commit",
            Unit::Seconds,
            ingest_lag.clone(),
        );
        let storage_write = Histogram::new(exponential_buckets(0.0005, 3.0, 12));
        registry.register_with_unit(
            "storage_write",
            "Time to store one batch (transaction included)",
            Unit::Seconds,
            storage_write.clone(),
        );
        let rollup_buckets = Counter::default();
        registry.register(
            "rollup_buckets",
            "Node-minute buckets rolled up",
            rollup_buckets.clone(),
        );
        let rollup_failures = Counter::default();
        registry.register(
            "rollup_failures",
            "Rollup passes that failed",
            rollup_failures.clone(),
        );
        let rollup_undecodable_rows = Counter::default();
        registry.register(
            "rollup_undecodable_rows",
            "Stored raw rows the rollup could not decode; skipped (not rolled up) so the pass goes on",
            rollup_undecodable_rows.clone(),
        );
        let task_runs = Family::<TaskRunLabels, Counter>::default();
        registry.register(
            "task_runs",
            "Passes of each background task, by outcome (ok, failed, panicked); a failed or panicked pass is followed by the next as usual",
            task_runs.clone(),
        );
        let task_duration =
            Family::<TaskLabels, Histogram, HistogramMaker>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 4.0, 10))
            });
        registry.register_with_unit(
            "task_duration",
            "Time one pass of a background task took",
            Unit::Seconds,
            task_duration.clone(),
        );
        let task_last_success =
            Family::<TaskLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register_with_unit(
            "task_last_success_timestamp",
            "When a background task last finished a pass without error (Unix time)",
            Unit::Seconds,
            task_last_success.clone(),
        );
        let retention_dropped = Counter::default();
        registry.register(
            "retention_dropped_partitions",
            "Partitions dropped or tables pruned for retention",
            retention_dropped.clone(),
        );
        let last_rollup_timestamp = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register_with_unit(
            "last_rollup_timestamp",
            "When the last rollup pass finished (Unix time)",
            Unit::Seconds,
            last_rollup_timestamp.clone(),
        );
        Metrics {
            registry,
            batches,
            rejected,
            rows,
            batch_rows,
            batch_bytes,
            ingest_lag,
            storage_write,
            rollup_buckets,
            rollup_failures,
            rollup_undecodable_rows,
            task_runs,
            task_duration,
            task_last_success,
            retention_dropped,
            last_rollup_timestamp,
        }
    }

    pub fn reject(&self, reason: RejectReason) {
        self.rejected.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }
}

pub use model::exposition::to_prometheus_text;

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
