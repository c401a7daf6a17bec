//! The first code that touches bytes from outside: request bodies and query parameters.
//!
//! Everything here is a pure function whose work is bounded by its arguments (a decoded size
//! limit, a fixed parse), so it can be fuzzed on its own (`fuzz/`, run by the test command)
//! without the collector's server, store or Kubernetes client. The collector maps the errors
//! to HTTP answers; the domains are documented in docs/security.md.

pub mod batch;
pub mod body;
pub mod query;
pub mod remote_write;
