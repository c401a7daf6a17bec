//! The dashboard's pages: handlers that read the store and the newest analysis into the web
//! crate's view models. Everything a page shows is in its URL (range, filters, sort), so links
//! can be shared; changes (sign-in, approval) are POSTed forms with a CSRF token.

mod alerts;
mod evidence;
mod findings;
mod login;
mod nodes;
mod overview;
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
use series::*;
use usage::{teams, tenants};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use analytics::{Analysis, Finding, FindingKind, Proposal, Severity};
use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;
use web::chart::{Chart, Line};
use web::format::{enc, time};
use web::pages::{self, Sort};
use web::{Frame, format};

use crate::access::{Access, Caller};
use crate::analysis::Newest;
use crate::fleet::node_status;
use crate::shared::Shared;
use store::{Agg, Entity, Metric, SeriesQuery};

/// What the pages need.
#[derive(Debug, Clone)]
pub struct DashboardState {
    pub shared: Shared,
    /// The `[labels]` settings: the approval mode and the operators who may sign in.
    pub labels: Arc<crate::labels::Settings>,
    pub newest: Arc<Newest>,
    /// Who may see what, sessions and sign-in attempts.
    pub access: Arc<Access>,
}

crate::shared::derefs_to_shared!(DashboardState);

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

const RANGES: [(&str, i64); 3] = [
    ("24h", 86_400_000),
    ("7d", 7 * 86_400_000),
    ("30d", 30 * 86_400_000),
];

fn range_ms(r: Option<&str>) -> (&'static str, i64) {
    RANGES
        .iter()
        .find(|(n, _)| Some(*n) == r)
        .copied()
        .unwrap_or(RANGES[1])
}

fn ranges() -> Vec<String> {
    RANGES.iter().map(|(n, _)| (*n).to_owned()).collect()
}

/// A page's failure, shown as a page.
pub struct PageError(StatusCode, String);

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let frame = Frame {
            title: "Problem".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            ..Frame::default()
        };
        (self.0, Html(pages::problem(frame, self.1))).into_response()
    }
}

impl From<store::StoreError> for PageError {
    fn from(e: store::StoreError) -> Self {
        PageError(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    }
}

fn not_found(what: String) -> PageError {
    PageError(StatusCode::NOT_FOUND, what)
}

pub type Page = Result<Html<String>, PageError>;

async fn analysis(state: &DashboardState) -> Result<Option<Arc<Analysis>>, PageError> {
    state.newest.get(&state.store).await.map_err(|e| match e {
        crate::analysis::NewestError::Store(e) => e.into(),
        e => PageError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    })
}

fn frame(state: &DashboardState, caller: &Caller, title: impl Into<String>) -> Frame {
    let p = caller.principal.as_ref();
    Frame {
        title: title.into(),
        refresh_s: None,
        operator: p.map(|p| p.name.clone()),
        role: p.map(|p| match &p.teams {
            Some(t) => format!(
                "{}, {}",
                p.role.as_str(),
                t.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
            None => p.role.as_str().to_owned(),
        }),
        open: state.access.mode() == crate::access::Mode::Open,
        notice: None,
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

fn window(a: &Analysis) -> String {
    format!("{} to {} UTC", time(a.from_ms), time(a.to_ms))
}

/// Bytes in a GiB, for memory the pages show.
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Tenant key → team, from the store's tenants.
fn team_map(tenants: &[store::TenantRecord]) -> HashMap<&str, &str> {
    tenants
        .iter()
        .filter_map(|t| Some((t.key.as_str(), t.team.as_deref()?)))
        .collect()
}

/// A team column's text as a team: the dash of "no team" is none.
fn team_opt(t: &str) -> Option<&str> {
    (!t.is_empty() && t != "–").then_some(t)
}

/// Whether a team-scoped caller may see a finding: its team and every tenant's it names are
/// theirs (unscoped callers see all).
fn finding_visible(caller: &Caller, f: &Finding, team_of: &HashMap<&str, &str>) -> bool {
    caller.sees_teams(
        f.team
            .as_deref()
            .map(Some)
            .into_iter()
            .chain(f.tenants.iter().map(|t| team_of.get(t.as_str()).copied())),
    )
}

/// The teams a finding concerns: its own and every named tenant's (an interference finding
/// concerns the aggressor's team as well as the victim's). Team counts and the findings
/// filter both use it, so a count and the list it links to agree.
fn finding_teams<'a>(f: &'a Finding, team_of: &HashMap<&str, &'a str>) -> BTreeSet<&'a str> {
    f.team
        .as_deref()
        .into_iter()
        .chain(
            f.tenants
                .iter()
                .filter_map(|t| team_of.get(t.as_str()).copied()),
        )
        .collect()
}

fn name_of(a: &Analysis, key: &str) -> String {
    a.tenant_names
        .get(key)
        .cloned()
        .unwrap_or_else(|| key.to_owned())
}

/// Sorts rows by the URL's `sort`/`dir`, a default otherwise.
fn sorted<T>(rows: &mut [T], q: &SortQuery, default: &str, key: impl Fn(&T, &str) -> SortKey) {
    let k = q.sort.as_deref().unwrap_or(default);
    let desc = q.dir.as_deref() != Some("asc");
    rows.sort_by(|a, b| {
        let o = key(a, k).cmp(&key(b, k));
        if desc { o.reverse() } else { o }
    });
}

/// A comparable cell.
#[derive(Debug, PartialEq)]
enum SortKey {
    Num(f64),
    Text(String),
}

impl Eq for SortKey {}

impl PartialOrd for SortKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SortKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (SortKey::Num(a), SortKey::Num(b)) => a.total_cmp(b),
            (SortKey::Text(a), SortKey::Text(b)) => a.cmp(b),
            (SortKey::Num(_), SortKey::Text(_)) => std::cmp::Ordering::Less,
            (SortKey::Text(_), SortKey::Num(_)) => std::cmp::Ordering::Greater,
        }
    }
}

fn num(x: f64) -> SortKey {
    SortKey::Num(x)
}
fn text(s: &str) -> SortKey {
    SortKey::Text(s.to_lowercase())
}

#[derive(Debug, Default, Deserialize)]
pub struct SortQuery {
    pub sort: Option<String>,
    pub dir: Option<String>,
}

fn sort_state(base: String, q: &SortQuery, default: &str) -> Sort {
    Sort {
        base,
        key: q.sort.clone().unwrap_or_else(|| default.into()),
        desc: q.dir.as_deref() != Some("asc"),
    }
}

fn query_string(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}
