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
