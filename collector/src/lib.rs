//! The gpulens collector: ingest API, storage (PostgreSQL or embedded SQLite) with rollups
//! and retention, the read API, the dashboard, `/metrics`, and the `gpulens` command line.

pub mod alerts;
pub mod analysis;
pub mod api;
pub mod auth;
pub mod commands;
pub mod config;
pub mod error;
pub mod fleet_metrics;
pub mod health;
pub mod ingest;
pub mod jobs;
pub mod labels;
pub mod listener;
pub mod metrics;
pub mod remote_write;
pub mod reports;
pub mod router;
pub mod server;
pub mod simulate;
pub mod state;
pub mod tasks;
pub mod ui;

pub use commands::run;
pub use model::time::now_ms;

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
