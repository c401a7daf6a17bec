//! The `[ingest]` section: how much one agent batch may be.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestConfig {
    /// Largest request body accepted, as sent (compressed).
    #[serde(default = "max_body_default")]
    pub max_body_bytes: usize,
    /// Largest batch after decompression.
    #[serde(default = "max_decoded_default")]
    pub max_decoded_bytes: usize,
    /// Largest number of rows in one batch.
    #[serde(default = "max_rows_default")]
    pub max_rows: usize,
}

fn max_body_default() -> usize {
    16 * 1024 * 1024
}
fn max_decoded_default() -> usize {
    128 * 1024 * 1024
}
fn max_rows_default() -> usize {
    500_000
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            max_body_bytes: max_body_default(),
            max_decoded_bytes: max_decoded_default(),
            max_rows: max_rows_default(),
        }
    }
}
