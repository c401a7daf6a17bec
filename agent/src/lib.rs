//! The gpulens node agent: samples the node's GPUs through a [`backend::GpuBackend`], ships
//! sequence-numbered batches to a collector, and prints single sampling cycles for people to
//! check. Backends: NVML (real GPUs, or the fake-nvml stand-in in tests) and a simulated node of a
//! scenario file.

pub mod allocation;
pub mod attribution;
pub mod backend;
/// The agent's own benchmarks (`gpulens-agent bench`, `bench-recovery`) and the ingest
/// stand-in they and the delivery tests ship to: not part of sampling or shipping.
pub mod bench;
pub mod bounded_file;
pub mod dcgm;
pub mod dcgm_listener;
mod driver_calls;
pub use driver_calls::CallTime;
mod driver_lists;
mod driver_values;
pub mod grants;
pub mod kube_read;
pub mod kubelet;
pub mod kubelet_pods;
pub mod listen;
pub mod metrics;
pub mod nfd;
pub mod nvml;
mod nvml_raw;
pub mod out_of_domain;
mod process_shares;
pub mod report;
pub mod runner;
pub mod schedule;
pub mod scratch;
pub mod shipper;
pub mod slurm;
pub mod slurm_jobs;
pub mod spool;
