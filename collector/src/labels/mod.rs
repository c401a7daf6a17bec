//! Closing the loop: advisory `gpulens.io/` node labels from the latest analysis, and the
//! guarded workflow that changes the GPU Operator's labels after approval. See docs/labels.md.

pub mod advisory;
pub mod cli;
pub mod kube;
pub mod settings;
pub mod workflow;
