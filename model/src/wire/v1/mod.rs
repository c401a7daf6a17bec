//! Wire protocol version 1: one batch per request, JSON or MessagePack ([`Format`]),
//! compressed on the wire (gzip or snappy), or one after another on an ingest stream
//! ([`stream`]).
//!
//! A batch carries the sending agent's identity, a per-agent-instance sequence number and
//! one or more snapshots (sampling cycles). See docs/ingest.md for the full contract. The
//! collector's answer to an agent asking for its node's labels is here too.

mod batch;
mod compact;
mod format;
mod readings;
mod rows;
pub mod stream;
mod tenants;
mod validate;

pub use batch::{Batch, NodeLabels, Snapshot, VERSION};
pub use compact::{CompactError, to_compact};
pub use format::Format;
pub use readings::{Cleared, MAX_CLOCK_MHZ, MAX_MEMORY_BYTES, MAX_POWER_W, MAX_TEMP_C, MIN_TEMP_C};
pub use rows::DroppedRow;
pub use tenants::{TakenFromTenant, drop_impossible_tenants};
pub use validate::{
    Invalid, Limits, MAX_GPU_INDEX, MAX_MIG_ID, MAX_MIG_SLICES, MAX_PID, MAX_REPLICA, is_name,
    is_text,
};

#[cfg(test)]
mod tests;
