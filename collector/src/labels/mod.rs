//! Closing the loop: advisory `gpulens.io/` node labels from the latest analysis, and the
//! guarded workflow that changes the GPU Operator's labels after approval. See docs/labels.md.

pub mod advisory;
pub mod kube;
pub mod workflow;
