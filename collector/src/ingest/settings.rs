//! The `[ingest]` section: how much one agent batch may be.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestConfig {
    /// Largest request body accepted, as sent (compressed).
    pub max_body_bytes: usize,
    /// Largest batch after decompression.
    pub max_decoded_bytes: usize,
    /// Largest number of rows in one batch.
    pub max_rows: usize,
    /// Batches one node may have in the handler at once (one more: 429 + `Retry-After`); 0:
    /// no bound. Only for credentials bound to one node (`per_node.rs`).
    pub max_in_flight_per_node: usize,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            max_body_bytes: 16 * 1024 * 1024,
            max_decoded_bytes: 128 * 1024 * 1024,
            max_rows: 500_000,
            max_in_flight_per_node: 2,
        }
    }
}
