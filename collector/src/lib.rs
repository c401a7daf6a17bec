//! The gpulens collector: ingest API, storage (PostgreSQL or embedded SQLite) with rollups
//! and retention, the read API, the dashboard, `/metrics`, and the `gpulens` command line.

// The shared layer is its own crate, `collector_shared`, which names no feature.

// The features, one folder (or file) each: settings, handlers with their routes, tasks and
// metrics. A feature may use another's public items (its `mod.rs`), never its submodules.
pub mod alerts;
pub mod analysis;
pub mod dashboard;
pub mod demand;
pub mod fleet;
pub mod health;
pub mod ingest;
pub mod labels;
pub mod reclaim;
pub mod remote_write;
pub mod reports;
pub mod simulate;
pub mod upkeep;

// The composition root: puts the features together. No feature imports these.
pub mod commands;
pub mod config;
pub mod router;
pub mod schedule;
pub mod server;
pub mod state;

pub use commands::run;
pub use model::time::now_ms;
