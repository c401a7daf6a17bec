//! What every page shares: the dashboard's state, its errors, the frame around a page, time
//! ranges, team visibility and sorting.

pub(super) use std::collections::{BTreeMap, BTreeSet, HashMap};
pub(super) use std::sync::Arc;

pub(super) use analytics::{Analysis, Finding, FindingKind, Proposal, Severity};
pub(super) use axum::Form;
pub(super) use axum::extract::{Path, Query, State};
pub(super) use axum::http::{HeaderMap, StatusCode, header};
pub(super) use axum::response::{Html, IntoResponse, Redirect, Response};
pub(super) use serde::Deserialize;
pub(super) use web::chart::{Chart, Line};
pub(super) use web::format::{enc, time};
pub(super) use web::pages::{self, Sort};
pub(super) use web::{Frame, format};

pub(super) use crate::fleet::node_status;
pub(super) use collector_shared::access::{Access, Caller};
pub(super) use collector_shared::newest::Newest;
pub(super) use collector_shared::shared::Shared;
pub(super) use store::{Agg, Entity, Metric, SeriesQuery};

/// What the pages need.
#[derive(Debug, Clone)]
pub struct DashboardState {
    pub shared: Shared,
    /// The `[labels]` settings: the approval mode and the operators who may sign in.
    pub labels: Arc<crate::labels::Settings>,
    pub newest: Arc<Newest>,
    /// The funnel over a range a reader picks, and the settings (prices) it is made with.
    pub ranged: Arc<crate::analysis::Ranged>,
    pub analytics: Arc<crate::analysis::Settings>,
    /// Who may see what, sessions and sign-in attempts.
    pub access: Arc<Access>,
    /// `[reclaim]`: whether the loop runs dry, and its policies.
    pub reclaim: Arc<crate::reclaim::Settings>,
}

pub(super) const RANGES: [(&str, i64); 3] = [
    ("24h", 86_400_000),
    ("7d", 7 * 86_400_000),
    ("30d", 30 * 86_400_000),
];

/// The longest range a page computes.
const MAX_RANGE_MS: i64 = 31 * 86_400_000;

/// The range the query picks: (from, to, what to carry in links: range, from, to), `None`
/// for the analysis' window; Err(the notice) for one that cannot be read, then the window.
pub(super) type Chosen = Option<(i64, i64, (String, String, String))>;

pub(super) fn picked_range(
    state: &DashboardState,
    range: &Option<String>,
    from: &Option<String>,
    to: &Option<String>,
) -> Result<Chosen, String> {
    let now = model::time::now_ms();
    fn given(s: &Option<String>) -> Option<&str> {
        s.as_deref().map(str::trim).filter(|s| !s.is_empty())
    }
    let (from, to, shown) = match (given(from), given(to), given(range)) {
        (None, None, None) => return Ok(None),
        (None, None, Some(r)) => {
            let Some((key, span)) = RANGES.iter().find(|(k, _)| *k == r) else {
                let shown: String = r.chars().take(40).collect();
                return Err(format!(
                    "Unknown range {shown:?}: one of 24h, 7d, 30d, or a from/to. Showing the analysed window."
                ));
            };
            (
                now - span,
                now,
                ((*key).to_owned(), String::new(), String::new()),
            )
        }
        (from, to, _) => {
            let at = |s: Option<&str>, end: bool| -> Result<i64, String> {
                match s {
                    None if end => Ok(now),
                    None => {
                        Err("A custom range needs its from. Showing the analysed window.".into())
                    }
                    Some(s) => intake::query::parse_time(&calendar(s), now)
                        .map_err(|e| format!("{e}. Showing the analysed window.")),
                }
            };
            let (f, t) = (at(from, false)?, at(to, true)?);
            let shown = (
                String::new(),
                from.unwrap_or("").to_owned(),
                to.unwrap_or("").to_owned(),
            );
            (f, t, shown)
        }
    };
    if from >= to {
        return Err("The range's from is not before its to. Showing the analysed window.".into());
    }
    let oldest = now - state.shared.retention.hour.as_millis() as i64;
    if from < oldest {
        return Err(format!(
            "The range starts before the oldest hour kept ({} UTC, [retention] hour). Showing the analysed window.",
            time(oldest)
        ));
    }
    // What one page view may read: a month of the fleet's hour rollups.
    if to.min(now) - from > MAX_RANGE_MS {
        return Err(
            "A range is at most 31 days (a month of hour rollups per page view). Showing the analysed window."
                .into(),
        );
    }
    Ok(Some((from, to.min(now), shown)))
}

/// What was held and used over [from, to) (the ranged funnel and team hours); a 503 that says
/// why when the range cannot be read.
pub(super) async fn range_use(
    state: &DashboardState,
    from: i64,
    to: i64,
) -> Result<Arc<crate::analysis::RangeUse>, PageError> {
    state
        .ranged
        .usage(&state.shared.store, &state.analytics.thresholds, from, to)
        .await
        .map_err(|e| {
            PageError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("The range could not be read: {e}"),
            )
        })
}

/// A date (`2026-12-01`) or a date and minute (`2026-12-01T06:00`, as a browser's date and
/// time fields send them) as RFC 3339 in UTC; anything else as given.
fn calendar(s: &str) -> String {
    let b = s.as_bytes();
    if !s.is_ascii() {
        s.to_owned()
    } else if s.len() == 10 && b[4] == b'-' && b[7] == b'-' {
        format!("{s}T00:00:00Z")
    } else if s.len() == 16 && b[10] == b'T' && b[13] == b':' {
        format!("{s}:00Z")
    } else {
        s.to_owned()
    }
}

pub(super) fn range_ms(r: Option<&str>) -> (&'static str, i64) {
    RANGES
        .iter()
        .find(|(n, _)| Some(*n) == r)
        .copied()
        .unwrap_or(RANGES[1])
}

pub(super) fn ranges() -> Vec<String> {
    RANGES.iter().map(|(n, _)| (*n).to_owned()).collect()
}

/// A page's failure, shown as a page.
pub struct PageError(pub(super) StatusCode, pub(super) String);

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

/// A store failure as a browser sees it: what happened and what to do, never the database's
/// own words (table names, SQL, addresses); those go to the collector's log.
impl From<store::StoreError> for PageError {
    fn from(e: store::StoreError) -> Self {
        tracing::warn!(error = %e, "a dashboard page could not read the store");
        PageError(
            StatusCode::SERVICE_UNAVAILABLE,
            "The database did not answer this page. Try again in a moment; the collector's log says why.".into(),
        )
    }
}

pub(super) fn not_found(what: String) -> PageError {
    PageError(StatusCode::NOT_FOUND, what)
}

/// The page for a path nothing serves, for a browser (the API's clients get JSON): the path
/// as asked, cut to 200 characters.
pub fn no_page(path: &str) -> Response {
    let shown: String = path.chars().take(200).collect();
    let cut = if shown.len() < path.len() { "…" } else { "" };
    not_found(format!("Nothing is served at {shown}{cut}.")).into_response()
}

/// A page that may also answer as CSV (`?format=csv`): the page, or its table.
pub type PageOrCsv = Result<axum::response::Response, PageError>;

/// How a table page answers: `None` or `html` the page, `csv` its table as a download; any
/// other value is a 400 that names the allowed ones.
pub(super) fn wants_csv(format: Option<&str>) -> Result<bool, PageError> {
    match format {
        None | Some("" | "html") => Ok(false),
        Some("csv") => Ok(true),
        Some(other) => {
            let shown: String = other.chars().take(40).collect();
            Err(PageError(
                StatusCode::BAD_REQUEST,
                format!("Unknown format {shown:?}: html or csv."),
            ))
        }
    }
}

/// The query of a page whose tables download: `format=csv` for the download, `table=` for
/// which (the page's first when none is named).
#[derive(Debug, Deserialize)]
pub struct FormatQuery {
    pub format: Option<String>,
    pub table: Option<String>,
}

impl FormatQuery {
    pub(super) fn asked(&self) -> (Option<&str>, Option<&str>) {
        (self.format.as_deref(), self.table.as_deref())
    }
}

/// A page, or with `format=csv` one of its tables as a download named `gpulens-{file}-{table}`:
/// the one `table=` names, the first when none is named; an unknown name is a 400 that lists
/// the page's tables.
pub(super) fn page_or_table<V>(
    (format, table): (Option<&str>, Option<&str>),
    file: &str,
    view: V,
    tables: impl FnOnce(&V) -> Vec<pages::TableCsv>,
    page: impl FnOnce(V) -> String,
) -> PageOrCsv {
    if !wants_csv(format)? {
        return Ok(Html(page(view)).into_response());
    }
    let tables = tables(&view);
    let pick = match table {
        None | Some("") => tables.first(),
        Some(name) => tables.iter().find(|t| t.name == name),
    };
    if let Some(t) = pick {
        return Ok(csv_download(&format!("{file}-{}", t.name), t.csv.clone()));
    }
    let shown: String = table.unwrap_or_default().chars().take(40).collect();
    let names: Vec<&str> = tables.iter().map(|t| t.name.as_str()).collect();
    Err(PageError(
        StatusCode::BAD_REQUEST,
        if names.is_empty() {
            "This page has no table to download.".to_owned()
        } else {
            format!(
                "Unknown table {shown:?}: this page has {}.",
                names.join(", ")
            )
        },
    ))
}

/// A table as a CSV download named `name.csv`.
pub(super) fn csv_download(name: &str, body: String) -> axum::response::Response {
    (
        [
            (
                axum::http::header::CONTENT_TYPE,
                "text/csv; charset=utf-8".to_owned(),
            ),
            (
                axum::http::header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"gpulens-{name}.csv\""),
            ),
        ],
        body,
    )
        .into_response()
}

/// The newest analysis, or the page that says none has run yet (503).
pub(super) async fn analysis_or_wait(state: &DashboardState) -> Result<Arc<Analysis>, PageError> {
    analysis(state).await?.ok_or_else(|| {
        PageError(
            StatusCode::SERVICE_UNAVAILABLE,
            "No analysis yet: the first one runs shortly after the collector starts.".into(),
        )
    })
}

pub(super) async fn analysis(state: &DashboardState) -> Result<Option<Arc<Analysis>>, PageError> {
    state
        .newest
        .get(&state.shared.store)
        .await
        .map_err(|e| match e {
            collector_shared::newest::NewestError::Store(e) => e.into(),
            e => {
                tracing::error!(error = %e, "the newest analysis cannot be read");
                PageError(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "The newest analysis cannot be read; the collector's log says why.".into(),
                )
            }
        })
}

pub(super) fn frame(state: &DashboardState, caller: &Caller, title: impl Into<String>) -> Frame {
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
        open: state.access.mode() == collector_shared::access::Mode::Open,
        notice: None,
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

pub(super) fn window(a: &Analysis) -> String {
    format!("{} to {} UTC", time(a.from_ms), time(a.to_ms))
}

/// Bytes in a GiB, for memory the pages show.
pub(super) const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Tenant key → team, from the store's tenants.
pub(super) fn team_map(tenants: &[store::TenantRecord]) -> HashMap<&str, &str> {
    tenants
        .iter()
        .filter_map(|t| Some((t.key(), t.team.as_deref()?)))
        .collect()
}

/// A team column's text as a team: the dash of "no team" is none.
pub(super) fn team_opt(t: &str) -> Option<&str> {
    (!t.is_empty() && t != "–").then_some(t)
}

/// Whether a team-scoped caller may see a finding: its team and every tenant's it names are
/// theirs (unscoped callers see all).
pub(super) fn finding_visible(caller: &Caller, f: &Finding, team_of: &HashMap<&str, &str>) -> bool {
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
pub(super) fn finding_teams<'a>(
    f: &'a Finding,
    team_of: &HashMap<&str, &'a str>,
) -> BTreeSet<&'a str> {
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

pub(super) fn name_of(a: &Analysis, key: &str) -> String {
    a.tenant_names
        .get(key)
        .cloned()
        .unwrap_or_else(|| key.to_owned())
}

/// Sorts rows by the URL's `sort`/`dir`, a default otherwise.
pub(super) fn sorted<T>(
    rows: &mut [T],
    q: &SortQuery,
    default: &str,
    key: impl Fn(&T, &str) -> SortKey,
) {
    let k = q.sort.as_deref().unwrap_or(default);
    let desc = q.dir.as_deref() != Some("asc");
    rows.sort_by(|a, b| {
        let o = key(a, k).cmp(&key(b, k));
        if desc { o.reverse() } else { o }
    });
}

/// A comparable cell.
#[derive(Debug, PartialEq)]
pub(super) enum SortKey {
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

pub(super) fn num(x: f64) -> SortKey {
    SortKey::Num(x)
}
pub(super) fn text(s: &str) -> SortKey {
    SortKey::Text(s.to_lowercase())
}

#[derive(Debug, Default, Deserialize)]
pub struct SortQuery {
    pub sort: Option<String>,
    pub dir: Option<String>,
}

/// A page's filter value checked against its domain: Ok(Some) for one of `valid`, Ok(None)
/// for none given (or empty), Err(the notice the page shows) for any other — the page then
/// shows everything rather than silently nothing (the API answers such a value with a 400).
pub(super) fn checked_filter<'q>(
    name: &str,
    value: Option<&'q str>,
    valid: &[&str],
) -> Result<Option<&'q str>, String> {
    match value.filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) if valid.contains(&v) => Ok(Some(v)),
        Some(v) => {
            let shown: String = v.chars().take(40).collect();
            Err(format!(
                "Unknown {name} {shown:?}: one of {}. Showing all.",
                valid.join(", ")
            ))
        }
    }
}

pub(super) fn sort_state(base: String, q: &SortQuery, default: &str) -> Sort {
    Sort {
        base,
        key: q.sort.clone().unwrap_or_else(|| default.into()),
        desc: q.dir.as_deref() != Some("asc"),
    }
}

pub(super) fn query_string(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The operator behind a POSTed form: signed in, and the form carries their session's CSRF
/// token. Otherwise the page that says why (401 or 403), for the handler to return.
pub(super) fn operator_of_form(
    state: &DashboardState,
    caller: &Caller,
    csrf: &str,
    doing: &str,
) -> Result<String, Box<Response>> {
    let (Some(who), Some(want)) = (caller.name(), state.access.csrf(caller)) else {
        return Err(Box::new(
            (
                StatusCode::UNAUTHORIZED,
                Html(pages::problem(
                    frame(state, caller, "Sign in"),
                    format!("Sign in as an operator to {doing}."),
                )),
            )
                .into_response(),
        ));
    };
    if !collector_shared::signing::constant_time_eq(want.as_bytes(), csrf.as_bytes()) {
        return Err(Box::new(
            (
            StatusCode::FORBIDDEN,
            Html(pages::problem(
                frame(state, caller, "Refused"),
                "The form's CSRF token does not match your session; reload the page and try again."
                    .into(),
            )),
        )
            .into_response(),
        ));
    }
    Ok(who.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_store_failure_shows_the_browser_no_database_text() {
        let e = store::StoreError::Internal(
            "relation \"gpu_rollup_1h\" does not exist at postgres://gpulens@db:5432".into(),
        );
        let response = PageError::from(e).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let body = String::from_utf8(body.to_vec()).unwrap();
        assert!(body.contains("The database did not answer"), "{body}");
        for secret in ["gpu_rollup_1h", "postgres://", "relation"] {
            assert!(!body.contains(secret), "{secret} shown: {body}");
        }
    }

    /// The range fields' dates and minutes become RFC 3339; anything else, multi-byte text of
    /// the same byte lengths included, passes through untouched for the parser to refuse.
    #[test]
    fn calendar_fields_read_as_utc_and_odd_text_passes_through() {
        assert_eq!(calendar("2026-12-01"), "2026-12-01T00:00:00Z");
        assert_eq!(calendar("2026-12-01T06:00"), "2026-12-01T06:00:00Z");
        for odd in [
            "2026-12é01",
            "ééééé",
            "2026-12-01T06é0",
            "",
            "now-7d",
            "1733000000000",
        ] {
            assert_eq!(calendar(odd), odd);
        }
        assert!(intake::query::parse_time(&calendar("2026-12é01"), 0).is_err());
    }
}
