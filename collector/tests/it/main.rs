//! The collector's integration tests, in one test binary.

mod access;
mod alerts;
mod analytics;
mod architecture;
mod browser;
mod citus;
mod consistency;
mod dashboard;
mod delivery;
mod demo;
mod deploy;
mod helm;
mod http;
mod labels;
mod listener;
mod outcome;
mod prometheus;
mod readme;
mod remote_write;
mod reports;
mod robustness;
mod sign_in;
mod support;
mod tasks;
mod tls;
mod trust;
