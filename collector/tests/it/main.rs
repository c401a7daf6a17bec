//! The collector's integration tests, in one test binary.

mod analytics;
mod conformance;
mod delivery;
mod http;
mod labels;
mod support;
