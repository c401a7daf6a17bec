//! Binds the router to a socket: `serve` with the default listener limits, `serve_with`
//! within given ones, both with graceful shutdown.

use crate::router::router;
use crate::state::AppState;

/// Serves `router` on `listener` until `shutdown` resolves.
/// Serves the router with the default listener limits (`listener::ServerLimits`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(
        listener,
        state,
        crate::listener::ServerLimits::default(),
        shutdown,
    )
    .await
}

/// Serves the router within `limits` (timeouts, connection and in-flight caps).
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: AppState,
    limits: crate::listener::ServerLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::listener::serve(listener, router(state), limits, shutdown).await
}

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
