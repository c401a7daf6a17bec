//! The gpulens fleet simulator. A scenario file describes nodes, GPUs (model, MIG layout,
//! sharing mode) and tenants with workload patterns; [`Fleet`] turns it into exactly the
//! wire batches real agents send, for any instant, deterministically from the scenario's
//! seed. Tenants may carry ground truth for the analytics tests. This crate does no IO.

pub mod catalogue;
pub mod fleet;
pub mod grant;
pub mod grant_objects;
pub mod noise;
pub mod scenario;
pub mod workload;

pub use fleet::Fleet;
pub use scenario::{Scenario, ScenarioError};
