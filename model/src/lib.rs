//! The gpulens data model shared by the agent, the simulator and the collector: identities of
//! clusters, nodes, GPUs, MIG instances, processes and tenants; the samples taken of them; the
//! versioned wire protocol; and the rollup arithmetic that turns samples into minute and hour
//! aggregates (shared by the collector's storage and the analytics). This crate does no IO.

pub mod closed_set;
pub mod dcgm;
pub mod exposition;
pub mod figures;
pub mod hour_series;
pub mod inventory;
pub mod labels;
pub mod metric_set;
pub mod mig;
pub mod names;
pub mod own_usage;
pub mod pair_hours;
pub mod profiling;
pub mod reclaim;
pub mod rollup;
pub mod sample;
pub mod sealed;
pub mod step_outcome;
pub mod tenant;
pub mod time;
pub mod wire;

pub use inventory::{GpuInfo, MigInstanceInfo};
pub use sample::{Allocation, GpuEvent, GpuSample, MigSample, ProcessKind, ProcessSample};
pub use tenant::{Tenant, TenantKind};

/// Milliseconds since the Unix epoch, UTC. Every timestamp in the model and on the wire.
pub type UnixMillis = i64;
