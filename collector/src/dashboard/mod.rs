//! The dashboard's pages: handlers that read the store and the newest analysis into the web
//! crate's view models. Everything a page shows is in its URL (range, filters, sort), so links
//! can be shared; changes (sign-in, approval) are POSTed forms with a CSRF token.

mod alerts;
mod evidence;
mod findings;
mod login;
mod nodes;
mod overview;
mod page;
mod recommendations;
mod reports;
mod series;
mod usage;

use alerts::alerts;
use findings::{finding, findings};
use login::{login, login_page, logout, oidc_callback, oidc_start};
use nodes::{gpu, node, nodes};
use overview::overview;
use recommendations::{approve, recommendation, recommendations};
use reports::reports;
use usage::{teams, tenants};

pub use page::{DashboardState, PageError};

/// The dashboard routes (merged in `router.rs`).
pub fn routes() -> axum::Router<DashboardState> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/", get(overview))
        .route("/nodes", get(nodes))
        .route("/nodes/{node}", get(node))
        .route("/gpus/{uuid}", get(gpu))
        .route("/tenants", get(tenants))
        .route("/teams", get(teams))
        .route("/findings", get(findings))
        .route("/findings/{id}", get(finding))
        .route("/recommendations", get(recommendations))
        .route("/recommendations/{id}", get(recommendation))
        .route("/recommendations/{id}/approve", post(approve))
        .route("/reports", get(reports))
        .route("/alerts", get(alerts))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/auth/oidc", get(oidc_start))
        .route("/auth/callback", get(oidc_callback))
}
