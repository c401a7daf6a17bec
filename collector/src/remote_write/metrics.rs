//! What the remote-write receiver counts: samples it dropped and why, series it does not
//! read, and scrapes it stored.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use collector_shared::metrics::snake_label;

/// Why a remote-written sample was not stored.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum DropReason {
    /// Its scrape was stored already.
    Late,
    /// Its value is outside its DCGM field's domain (`model::dcgm`).
    OutOfDomain,
    /// Dated before the raw retention or more than five minutes ahead of the clock.
    OutOfWindow,
    /// Of a host beyond `MAX_HOSTS` (a flood of made-up hosts).
    TooManyHosts,
    /// Of a GPU beyond `MAX_GPUS_PER_HOST` on its host.
    TooManyGpus,
    /// Its pod labels are not Kubernetes names (the GPU's own sample is kept; only the
    /// allocation to the pod is dropped), or its host has `MAX_TENANTS_PER_HOST` pods already.
    BadTenant,
}

snake_label!(DropReason { Late => "late", OutOfDomain => "out_of_domain", OutOfWindow => "out_of_window", TooManyHosts => "too_many_hosts", TooManyGpus => "too_many_gpus", BadTenant => "bad_tenant" });

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    pub reason: DropReason,
}

model::metric_set! {
    pub struct RemoteWriteMetrics {
        dropped: Family<DropLabels, Counter> => "remote_write_samples_dropped",
            "Remote-write samples not stored, by reason: late (their scrape was stored already), out_of_domain (value outside the DCGM field's domain), out_of_window (dated before the raw retention or over 5 minutes ahead), too_many_hosts, too_many_gpus (over the receiver's caps), bad_tenant (the pod allocation only: pod labels that are not Kubernetes names, or too many pods on the host)";
        ignored_series: Counter => "remote_write_ignored_series",
            "Remote-write series gpulens does not read (not a DCGM field it knows, no UUID, or a host that is not a node name)";
        scrapes_stored: Counter => "remote_write_scrapes_stored",
            "Complete dcgm-exporter scrapes stored as batches";
        /// Complete scrapes that did not pass the batch checks and were dropped whole.
        scrapes_refused: Counter => "remote_write_scrapes_refused",
            "Complete dcgm-exporter scrapes dropped whole because they failed the batch checks (the collector's log says why)";
    }
}

impl RemoteWriteMetrics {
    pub fn drop(&self, reason: DropReason) {
        self.drop_n(reason, 1);
    }

    /// Counts `n` samples dropped for `reason`.
    pub fn drop_n(&self, reason: DropReason, n: usize) {
        self.dropped
            .get_or_create(&DropLabels { reason })
            .inc_by(n as u64);
    }

    /// Samples dropped for `reason` so far.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped.get_or_create(&DropLabels { reason }).get()
    }
}
