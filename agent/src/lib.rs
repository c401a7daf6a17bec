//! The gpulens node agent: samples the node's GPUs through a [`backend::GpuBackend`], ships
//! sequence-numbered batches to a collector, and prints single sampling cycles for people to
//! check. This release has the simulated backend; the NVML backend plugs into the same trait.

pub mod backend;
pub mod shipper;
