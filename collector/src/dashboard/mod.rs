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

use crate::access::routes::{Need::*, Routes, Teams::*};
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
pub fn routes() -> Routes<DashboardState> {
    Routes::new()
        .get("/", Read(Filtered), overview)
        .get("/nodes", Read(NoTenants), nodes)
        .get("/nodes/{node}", Read(AllTeams), node)
        .get("/gpus/{uuid}", Read(AllTeams), gpu)
        .get("/tenants", Read(Filtered), tenants)
        .get("/teams", Read(Filtered), teams)
        .get("/findings", Read(Filtered), findings)
        .get("/findings/{id}", Read(Filtered), finding)
        .get("/recommendations", Read(AllTeams), recommendations)
        .get("/recommendations/{id}", Read(AllTeams), recommendation)
        .post("/recommendations/{id}/approve", Operate, approve)
        .get("/reports", Read(AllTeams), reports)
        .get("/alerts", Read(AllTeams), alerts)
        // Signing in and out.
        .get("/login", Public, login_page)
        .post("/login", Public, login)
        .post("/logout", Public, logout)
        .get("/auth/oidc", Public, oidc_start)
        .get("/auth/callback", Public, oidc_callback)
}
