//! The fleet as it is now: nodes, GPUs, tenants and series (the read API, `api.rs`), and each
//! GPU's newest readings with the newest analysis and alert counts on `/metrics`
//! (`metrics.rs`), and, opted in, each GPU-holding tenant's shares (`tenant_series.rs`); both
//! keep their state per node (`by_node.rs`).

pub mod api;
mod by_node;
pub mod metrics;
pub mod tenant_series;

use store::NodeRecord;

pub use api::routes;
pub use metrics::{LatestGpus, encode as encode_metrics};
pub use tenant_series::Settings as MetricsSettings;

/// A node older than this many sampling intervals (and at least two minutes) is silent.
const SILENT_INTERVALS: i64 = 30;

/// "reporting", or "silent" when the node has sent nothing for a while.
pub fn node_status(n: &NodeRecord, now: i64) -> &'static str {
    let silent_after = (n.interval_ms * SILENT_INTERVALS).max(120_000);
    if now - n.last_seen_ms > silent_after {
        "silent"
    } else {
        "reporting"
    }
}
