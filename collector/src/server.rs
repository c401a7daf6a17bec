//! Binds the router to a socket: `serve` with the default listener limits, `serve_with`
//! within given ones, both with graceful shutdown.

use std::sync::Arc;

use axum::http::{Method, header};

use crate::router::router_and_table;
use crate::state::AppState;
use collector_shared::access::routes::Rule;
use collector_shared::admission::{Class, Classifier, agent_route, has_body};

/// Serves `router` on `listener` until `shutdown` resolves.
/// Serves the router with the default listener limits (`listener::ServerLimits`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (router, table) = router_and_table(state.clone());
    collector_shared::listener::serve(
        listener,
        router,
        collector_shared::listener::ServerLimits::default(),
        None,
        admission(&state, table),
        shutdown,
    )
    .await
}

/// Serves the router within `limits` (timeouts, connection and in-flight caps), over TLS when
/// `limits.tls` is set; a certificate or key that does not load stops the start, named.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: AppState,
    limits: collector_shared::listener::ServerLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let tls = match &limits.tls {
        Some(t) => Some(collector_shared::tls::Tls::from_settings(t)?),
        None => None,
    };
    let (router, table) = router_and_table(state.clone());
    let admission = admission(&state, table);
    Ok(
        collector_shared::listener::serve(listener, router, limits, tls, admission, shutdown)
            .await?,
    )
}

fn admission(state: &AppState, table: Arc<[Rule]>) -> collector_shared::listener::Admission {
    collector_shared::listener::Admission {
        classify: classifier(state, table),
        refusals: state.refusals.clone(),
    }
}

/// The classifier of a collector's state: agent tokens through `[[agents]]` on the route
/// table's agent routes, everything else through `[access]`.
pub fn classifier(state: &AppState, table: Arc<[Rule]>) -> Classifier {
    let auth = state.shared.clone();
    let access = state.access.clone();
    Arc::new(move |method, uri, headers, peer| {
        let path = uri.path();
        let authorization = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if agent_route(&table, path)
            && authorization.is_some()
            && auth.auth.identify(authorization).is_ok()
        {
            return Class::Agent;
        }
        let now = model::time::now_ms();
        if access.verifies(headers, peer.map(|p| p.ip()), now) {
            return Class::Reader;
        }
        let reading = matches!(*method, Method::GET | Method::HEAD) && !has_body(headers);
        if reading && access.mode() == collector_shared::access::Mode::Open {
            return Class::Reader;
        }
        Class::Anonymous
    })
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
