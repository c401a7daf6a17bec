//! What the workspace's tests share: free ports for the servers they start as child processes
//! ([`free_port`]), promtool's check of a metrics scrape ([`promtool`]), and with the `stores`
//! feature the stores' support ([`stores`]: temporary directories, stores on both backends,
//! throwaway PostgreSQL databases and clusters, a small simulated fleet).

mod ports;
pub mod promtool;
#[cfg(feature = "stores")]
pub mod stores;

pub use ports::free_port;
