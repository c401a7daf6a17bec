//! The dashboard's pages: handlers that read the store and the newest analysis into the web
//! crate's view models. Everything a page shows is in its URL (range, filters, sort), so links
//! can be shared; changes (sign-in, approval) are POSTed forms with a CSRF token.

mod alerts;
mod carry_out;
mod evidence;
mod findings;
mod holder;
mod login;
mod nodes;
mod overview;
mod page;
mod reclaim;
mod recommendations;
mod reports;
mod series;
mod usage;

use alerts::alerts;
use collector_shared::access::routes::{Need::*, Routes, Teams::*};
use collector_shared::openapi::{Doc::Page, Op};
use findings::{finding, findings};
use login::{login, login_page, logout, oidc_callback, oidc_start};
use nodes::{gpu, node, nodes};
use overview::overview;
use recommendations::{approve, recommendation, recommendations};
use reports::reports;
use usage::{teams, tenants};

pub use page::{DashboardState, PageError, no_page};

/// The front page, the one page a program may look for, is in the API's document; the other
/// pages are for people.
fn front_page() -> Op {
    Op::new("The dashboard (HTML)").response(200, serde_json::json!({"description": "HTML"}))
}

/// The dashboard routes (merged in `router.rs`).
pub fn routes() -> Routes<DashboardState> {
    Routes::new()
        .get("/", Read(Filtered), front_page(), overview)
        .get("/nodes", Read(NoTenants), Page, nodes)
        .get("/nodes/{node}", Read(AllTeams), Page, node)
        .get("/gpus/{uuid}", Read(AllTeams), Page, gpu)
        .get("/tenants", Read(Filtered), Page, tenants)
        .get("/tenants/{key}", Read(Filtered), Page, holder::tenant)
        .get("/teams", Read(Filtered), Page, teams)
        .get("/teams/{team}", Read(Filtered), Page, holder::team)
        .get("/findings", Read(Filtered), Page, findings)
        .get("/findings/{id}", Read(Filtered), Page, finding)
        .get("/recommendations", Read(AllTeams), Page, recommendations)
        .get(
            "/recommendations/{id}",
            Read(AllTeams),
            Page,
            recommendation,
        )
        .post(
            "/recommendations/{id}/approve",
            Operate(AllTeams),
            Page,
            approve,
        )
        .get("/reports", Read(AllTeams), Page, reports)
        .get("/alerts", Read(AllTeams), Page, alerts)
        .get("/reclaim", Read(Filtered), Page, reclaim::reclaim)
        .post(
            "/reclaim/{id}/approve",
            Operate(Filtered),
            Page,
            reclaim::approve,
        )
        .post(
            "/reclaim/{id}/cancel",
            Operate(Filtered),
            Page,
            reclaim::cancel,
        )
        // Signing in and out.
        .get("/login", Public, Page, login_page)
        .post("/login", Public, Page, login)
        .post("/logout", Public, Page, logout)
        .get("/auth/oidc", Public, Page, oidc_start)
        .get("/auth/callback", Public, Page, oidc_callback)
}
