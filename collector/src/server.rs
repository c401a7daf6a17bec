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
    crate::listener::serve(
        listener,
        router(state),
        crate::listener::ServerLimits::default(),
        None,
        shutdown,
    )
    .await
}

/// Serves the router within `limits` (timeouts, connection and in-flight caps), over TLS when
/// `limits.tls` is set; a certificate or key that does not load stops the start, named.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: AppState,
    limits: crate::listener::ServerLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let tls = match &limits.tls {
        Some(t) => Some(crate::tls::Tls::from_settings(t)?),
        None => None,
    };
    Ok(crate::listener::serve(listener, router(state), limits, tls, shutdown).await?)
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
