//! What the remote-write receiver counts: samples it dropped and why, series it does not
//! read, and scrapes it stored.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::metrics::snake_label;

/// Why a remote-written sample was not stored.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum DropReason {
    /// Its scrape was stored already.
    Late,
    /// Its value is outside its DCGM field's domain (`model::dcgm`).
    OutOfDomain,
    /// Dated before the raw retention or more than five minutes ahead of the clock.
    OutOfWindow,
}

snake_label!(DropReason { Late => "late", OutOfDomain => "out_of_domain", OutOfWindow => "out_of_window" });

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    pub reason: DropReason,
}

#[derive(Debug, Clone, Default)]
pub struct RemoteWriteMetrics {
    pub dropped: Family<DropLabels, Counter>,
    pub ignored_series: Counter,
    pub scrapes_stored: Counter,
}

impl RemoteWriteMetrics {
    pub fn register(registry: &mut Registry) -> RemoteWriteMetrics {
        let m = RemoteWriteMetrics::default();
        registry.register(
            "remote_write_samples_dropped",
            "Remote-write samples not stored, by reason: late (their scrape was stored already), out_of_domain (value outside the DCGM field's domain), out_of_window (dated before the raw retention or over 5 minutes ahead)",
            m.dropped.clone(),
        );
        registry.register(
            "remote_write_ignored_series",
            "Remote-write series gpulens does not read (not a DCGM field it knows, no UUID, or a host that is not a node name)",
            m.ignored_series.clone(),
        );
        registry.register(
            "remote_write_scrapes_stored",
            "Complete dcgm-exporter scrapes stored as batches",
            m.scrapes_stored.clone(),
        );
        m
    }

    pub fn drop(&self, reason: DropReason) {
        self.dropped.get_or_create(&DropLabels { reason }).inc();
    }

    /// Samples dropped for `reason` so far.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped.get_or_create(&DropLabels { reason }).get()
    }
}
