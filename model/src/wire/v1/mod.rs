//! Wire protocol version 1: one batch per request, JSON or MessagePack ([`Format`]),
//! compressed on the wire (gzip or snappy).
//!
//! A batch carries the sending agent's identity, a per-agent-instance sequence number and
//! one or more snapshots (sampling cycles). See docs/ingest.md for the full contract. The
//! collector's answer to an agent asking for its node's labels is here too.

mod batch;
mod format;
mod validate;

pub use batch::{Batch, NodeLabels, Snapshot, VERSION};
pub use format::Format;
pub use validate::{
    Invalid, Limits, MAX_GPU_INDEX, MAX_MEMORY_BYTES, MAX_MIG_ID, MAX_MIG_SLICES, MAX_PID,
    MAX_REPLICA, is_name,
};

#[cfg(test)]
mod tests;
