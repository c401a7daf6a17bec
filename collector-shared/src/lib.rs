//! The collector's shared layer: what every feature of the collector may use — the hardened
//! listener and its admission, TLS, access for people (sessions, OpenID Connect, roles) and
//! agents, the OpenAPI builder, background tasks, settings helpers, metrics, the shared HTTP
//! state, and the newest stored analysis. It names no feature: Cargo keeps that wall, as the
//! collector's features depend on this crate and not the other way round.

pub mod access;
pub mod admission;
pub mod agent_auth;
pub mod attempts;
pub mod error;
pub mod http;
pub mod kube_api;
pub mod listener;
pub mod metrics;
pub mod newest;
pub mod openapi;
pub mod request_limits;
pub mod settings;
pub mod shared;
pub mod signing;
pub mod tasks;
pub mod teams;
pub mod tls;
pub mod token_review;
