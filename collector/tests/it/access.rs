//! Who may see what, through `router(state)`: every route the router serves has exactly one
//! rule; in sign-in mode nobody anonymous reads; viewers read, operators approve;
//! a team-scoped viewer sees its own tenants and the fleet's totals, and is refused views of
//! every team; program tokens, the scrape token and the trusted proxy's headers (from the
//! proxy's address only) each work as documented.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request, StatusCode, header};
use collector::config::{Config, TeamsConfig};
use collector::{router::router, state::AppState};
use collector_shared::access::routes::{Need, Routes, Rule};
use collector_shared::openapi::Doc::Page;
use serde_json::Value;
use tower::ServiceExt;

use crate::support;

async fn send(state: &AppState, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, String) {
    let resp = router(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 24)
        .await
        .unwrap();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn req(method: &str, uri: &str, token: Option<&str>) -> Request<Body> {
    let mut r = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        r = r.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    r.body(Body::empty()).unwrap()
}

fn from(mut r: Request<Body>, addr: &str) -> Request<Body> {
    let addr: SocketAddr = format!("{addr}:40000").parse().unwrap();
    r.extensions_mut().insert(ConnectInfo(addr));
    r
}

/// Routes are declared with their rules (`access::routes::Routes`), so a route cannot lack one;
/// this probes the router: every method it answers on a path has a rule, every rule a method,
/// and a second declaration of a route is refused where it is made.
#[tokio::test]
async fn every_route_has_exactly_one_access_rule() {
    let t = support::sqlite().await;
    let state = crate::support::default_state(t.store.clone());
    let table = table_of(&state);
    let in_table: BTreeSet<String> = table.iter().map(|r| r.path.to_owned()).collect();
    assert!(in_table.len() > 30, "{in_table:?}");
    let twice = std::panic::catch_unwind(|| {
        Routes::<()>::new()
            .get("/x", Need::Public, Page, || async { "" })
            .merge(Routes::new().get(
                "/x",
                Need::Operate(collector_shared::access::routes::Teams::AllTeams),
                Page,
                || async { "" },
            ))
    });
    assert!(twice.is_err(), "a route declared twice was accepted");
    let undescribed = std::panic::catch_unwind(|| {
        Routes::<()>::new().get("/api/v1/x", Need::Public, Page, || async { "" })
    });
    assert!(
        undescribed.is_err(),
        "an API route without its operation was accepted"
    );
    for path in &in_table {
        let uri = path
            .replace("{node}", "n1")
            .replace("{uuid}", "GPU-1")
            .replace("{id}", "1")
            .replace("{week}", "2026-W01");
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            let (code, _, body) = send(&state, req(method, &uri, None)).await;
            let ruled = table.iter().any(|r| r.path == path && r.method == method);
            if ruled {
                assert_ne!(
                    code,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {path} has a rule but no handler"
                );
                assert!(!body.contains("no access rule"), "{method} {path}: {body}");
            } else {
                assert_eq!(
                    code,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {path} is served without a rule"
                );
            }
        }
    }
}

const VIEWER: &str = "viewer-token-0001";
const SCOPED: &str = "scoped-token-0002";
const OPERATOR: &str = "operator-token-3";
const SCRAPE: &str = "scrape-token-0004";

async fn signed_in_state() -> (AppState, support::TestStore) {
    let t = support::sqlite().await;
    let teams = TeamsConfig::default();
    support::ingest_small_fleet(&t.store, &teams).await;
    let config = Config::parse(&format!(
        r#"
[access]
[[access.tokens]]
name = "grafana"
token = "{VIEWER}"
[[access.tokens]]
name = "ml-bot"
sha256 = "{scoped}"
teams = ["ml"]
[access.scrape]
token = "{SCRAPE}"
[access.proxy]
trusted = ["10.0.0.5"]
[[access.groups]]
group = "gpu-platform"
role = "operator"
[[access.groups]]
group = "team-ml"
role = "viewer"
teams = ["ml"]
[[labels.operators]]
name = "olga"
token = "{OPERATOR}"
"#,
        scoped = hex_sha256(SCOPED)
    ))
    .unwrap();
    let state = AppState::new(
        t.store.clone(),
        Default::default(),
        Default::default(),
        Default::default(),
        teams,
    )
    .with_access(config.access.clone())
    .unwrap()
    .with_labels(config.labels.clone());
    (state, t)
}

fn hex_sha256(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn keys(body: &str) -> BTreeSet<String> {
    let v: Value = serde_json::from_str(body).unwrap();
    v["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["team"].as_str().unwrap_or("-").to_owned())
        .collect()
}

#[tokio::test]
async fn sign_in_mode_enforces_roles_and_team_scopes() {
    let (state, _t) = signed_in_state().await;
    // Nobody anonymous reads: the API says 401 with a challenge, pages send to sign-in.
    let (code, h, body) = send(&state, req("GET", "/api/v1/tenants", None)).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{body}");
    assert!(h.contains_key(header::WWW_AUTHENTICATE));
    let (code, h, _) = send(&state, req("GET", "/findings?kind=idle_allocation", None)).await;
    assert_eq!(code, StatusCode::SEE_OTHER);
    assert_eq!(
        h[header::LOCATION],
        "/login?next=%2Ffindings%3Fkind%3Didle_allocation"
    );
    // Probes, sign-in and the API description stay public.
    for uri in ["/healthz", "/login", "/api/v1/openapi.json"] {
        let (code, _, _) = send(&state, req("GET", uri, None)).await;
        assert_eq!(code, StatusCode::OK, "{uri}");
    }
    // A wrong token is refused.
    let (code, _, _) = send(
        &state,
        req("GET", "/api/v1/tenants", Some("nope-nope-nope")),
    )
    .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);

    // A viewer's token reads everything, every team.
    let (code, _, body) = send(&state, req("GET", "/api/v1/tenants", Some(VIEWER))).await;
    assert_eq!(code, StatusCode::OK);
    let all = keys(&body);
    assert!(all.len() >= 3 && all.contains("ml"), "{all:?}");
    let (code, _, _) = send(&state, req("GET", "/api/v1/funnel", Some(VIEWER))).await;
    assert_ne!(code, StatusCode::FORBIDDEN);
    // ... and cannot approve.
    let (code, _, body) = send(
        &state,
        req("POST", "/api/v1/label-actions/1/approve", Some(VIEWER)),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("needs an operator"), "{body}");
    // An operator's token gets past the table to the handler (labels are off here: 409).
    let (code, _, body) = send(
        &state,
        req("POST", "/api/v1/label-actions/1/approve", Some(OPERATOR)),
    )
    .await;
    assert_eq!(code, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("label actuation is off"), "{body}");

    // The team-scoped token (stored as its hash) sees team ml's tenants only.
    let (code, _, body) = send(&state, req("GET", "/api/v1/tenants", Some(SCOPED))).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(keys(&body), ["ml".to_owned()].into());
    // Views of every team at once are refused to it; fleet-level ones are not.
    for uri in [
        "/api/v1/funnel",
        "/api/v1/alerts",
        "/api/v1/recommendations",
        "/recommendations",
        "/nodes/whole",
    ] {
        let (code, _, body) = send(&state, req("GET", uri, Some(SCOPED))).await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{uri}: {body}");
        assert!(body.contains("ml"), "{uri} names the scope: {body}");
    }
    let (code, _, _) = send(&state, req("GET", "/api/v1/nodes", Some(SCOPED))).await;
    assert_eq!(code, StatusCode::OK);
    // Another team's tenant's series reads as unknown.
    let key_of = tenant_of_team(&state).await;
    let series = |key: String| {
        format!(
            "/api/v1/series?metric=alloc_share&entity=tenant:{}&from=now-5m",
            support_enc(&key)
        )
    };
    let (code, _, body) = send(&state, req("GET", &series(key_of("physics")), Some(SCOPED))).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "{body}");
    let (code, _, body) = send(&state, req("GET", &series(key_of("ml")), Some(SCOPED))).await;
    assert_eq!(code, StatusCode::OK, "{body}");

    // /metrics: the scrape token or a viewer's; nobody else.
    let (code, _, _) = send(&state, req("GET", "/metrics", None)).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    for t in [SCRAPE, VIEWER] {
        let (code, _, _) = send(&state, req("GET", "/metrics", Some(t))).await;
        assert_eq!(code, StatusCode::OK);
    }
    // The scrape token reads nothing else.
    let (code, _, _) = send(&state, req("GET", "/api/v1/tenants", Some(SCRAPE))).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
}

fn support_enc(s: &str) -> String {
    web::format::enc(s)
}

#[tokio::test]
async fn the_proxys_headers_count_from_the_proxy_only() {
    let (state, _t) = signed_in_state().await;
    let who = |r: Request<Body>, user: &str, groups: &str| {
        let mut r = r;
        r.headers_mut()
            .insert("x-forwarded-user", user.parse().unwrap());
        r.headers_mut()
            .insert("x-forwarded-groups", groups.parse().unwrap());
        r
    };
    // From the proxy: a member of team-ml is a viewer scoped to ml.
    let (code, _, body) = send(
        &state,
        from(
            who(req("GET", "/api/v1/tenants", None), "maria", "team-ml"),
            "10.0.0.5",
        ),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(keys(&body), ["ml".to_owned()].into());
    let (_, _, html) = send(
        &state,
        from(
            who(req("GET", "/login", None), "maria", "team-ml"),
            "10.0.0.5",
        ),
    )
    .await;
    assert!(
        html.contains("Signed in as") && html.contains("maria"),
        "{html}"
    );
    // The same headers from anywhere else are ignored: not signed in.
    let (code, _, _) = send(
        &state,
        from(
            who(req("GET", "/api/v1/tenants", None), "maria", "gpu-platform"),
            "10.0.0.6",
        ),
    )
    .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    // A person the proxy vouches for, with no group that has a role, is refused and told why.
    let (code, _, body) = send(
        &state,
        from(
            who(req("GET", "/api/v1/tenants", None), "eve", "marketing"),
            "10.0.0.5",
        ),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert!(body.contains("marketing"), "{body}");
    // Proxy users change nothing through the API (their browser's headers could be forged
    // into a cross-site request); operators use the dashboard's forms or a token.
    let (code, _, _) = send(
        &state,
        from(
            who(
                req("POST", "/api/v1/label-actions/1/approve", None),
                "olga",
                "gpu-platform",
            ),
            "10.0.0.5",
        ),
    )
    .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let _ = Method::GET;
}

/// The route table of a collector.
fn table_of(state: &AppState) -> Vec<Rule> {
    collector::router::routes(state).rules().to_vec()
}

#[tokio::test]
async fn the_table_names_agents_routes_for_their_own_tokens() {
    let t = support::sqlite().await;
    let table = table_of(&crate::support::default_state(t.store.clone()));
    for path in [
        "/api/v1/ingest",
        "/api/v1/write",
        "/api/v1/nodes/{node}/labels",
    ] {
        assert!(
            table
                .iter()
                .any(|r| r.path == path && r.need == Need::Agent),
            "{path}"
        );
    }
}

/// Open mode reads need no token, so a token that is nobody's here (an agent's, sent by a
/// tool configured once for every route) is ignored on reads — never refused, never counted
/// as a wrong attempt — while approving still refuses it.
#[tokio::test]
async fn open_mode_ignores_unknown_tokens_on_reads() {
    let t = support::sqlite().await;
    let state = crate::support::default_state(t.store.clone());
    for _ in 0..12 {
        let (code, _, body) =
            send(&state, req("GET", "/api/v1/nodes", Some("agent-token-xyz"))).await;
        assert_eq!(code, StatusCode::OK, "{body}");
    }
    let (code, _, _) = send(
        &state,
        req(
            "POST",
            "/api/v1/label-actions/1/approve",
            Some("agent-token-xyz"),
        ),
    )
    .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
}

/// Every tenant and team of the analysis has a page; a team-scoped viewer reads
/// its own team's and its tenants' pages, and another team's read as unknown (404).
#[tokio::test]
async fn tenant_and_team_pages_keep_to_the_callers_teams() {
    let (state, t, now) = analysed_state().await;
    let key_of = tenant_of_team(&state).await;
    let page = |key: String| format!("/tenants/{}", support_enc(&key));
    for (uri, who, want) in [
        (page(key_of("ml")), VIEWER, StatusCode::OK),
        (page(key_of("physics")), VIEWER, StatusCode::OK),
        ("/teams/physics".into(), VIEWER, StatusCode::OK),
        (page(key_of("ml")), SCOPED, StatusCode::OK),
        ("/teams/ml".into(), SCOPED, StatusCode::OK),
        (page(key_of("physics")), SCOPED, StatusCode::NOT_FOUND),
        ("/teams/physics".into(), SCOPED, StatusCode::NOT_FOUND),
        ("/teams/nobody".into(), VIEWER, StatusCode::NOT_FOUND),
        (page("pod/none/main".into()), VIEWER, StatusCode::NOT_FOUND),
    ] {
        let (code, _, body) = send(&state, req("GET", &uri, Some(who))).await;
        assert_eq!(code, want, "{uri} as {who}: {body}");
        if code == StatusCode::OK {
            assert!(
                body.contains("allocated GPU-hours") && body.contains("Steps of the plan"),
                "{uri}: {body}"
            );
        }
    }
    // A team's page lists its tenants, each linking to its own page.
    let (_, _, body) = send(&state, req("GET", "/teams/ml", Some(VIEWER))).await;
    assert!(body.contains(&page(key_of("ml"))), "{body}");
    // A reclaim case of a tenant is on its page and its team's.
    let mut case = crate::scope::case("ml", "nb-ml", now);
    case.tenant = key_of("ml");
    let id = t.store.insert_reclaim_case(&case).await.unwrap();
    for uri in [page(key_of("ml")), "/teams/ml".into()] {
        let (_, _, body) = send(&state, req("GET", &uri, Some(SCOPED))).await;
        assert!(
            body.contains(&format!("case {id}: ml/nb-ml on gpu-1, awaiting approval")),
            "{uri}: {body}"
        );
    }
    let (_, _, body) = send(&state, req("GET", &page(key_of("physics")), Some(VIEWER))).await;
    assert!(!body.contains("Reclaim cases"), "{body}");
}

/// The signed-in state with an analysis of its small fleet stored.
async fn analysed_state() -> (AppState, support::TestStore, i64) {
    let (state, t) = signed_in_state().await;
    let now = model::time::now_ms();
    t.store.rollup(now + 3_600_000).await.unwrap();
    let a = support::analyse(&t.store, now - 3_600_000, now + 60_000).await;
    collector::analysis::save(&t.store, &a, now, 5)
        .await
        .unwrap();
    (state, t, now)
}

/// The tenants', teams', findings', steps', nodes' and alerts' tables download as CSV with the rows and
/// columns the page shows, in its order and filtered as it is, for the caller's teams only;
/// an unknown format is a 400 that names the allowed ones.
#[tokio::test]
async fn tables_download_as_the_page_shows_them() {
    let (state, _t, _) = analysed_state().await;
    for (page, header) in [
        (
            "/tenants",
            "Tenant,Allocated GPU-h,Effective GPU-h,Effective,Waste GPU-h,",
        ),
        (
            "/teams",
            "Team,Allocated GPU-h,Effective GPU-h,Effective,Waste GPU-h,",
        ),
        (
            "/recommendations",
            "What,Step,GPUs freed,Kind,Node,Team,Confidence",
        ),
        (
            "/findings",
            "What,Finding,Waste cost (USD),Severity,Kind,Node,Tenant,Team,Also on",
        ),
        (
            "/nodes",
            "Node,GPU util 24h (%),Status,GPUs,Class,Models,Sharing,Cluster,",
        ),
        (
            "/alerts",
            "Alert,Severity,State,Node,GPU,What,Since (UTC),Began (UTC),Finding,Step",
        ),
        (
            "/reclaim",
            "Pod,Case,Node,State,Team,Idle hours,Idle share,",
        ),
    ] {
        let (code, _, html) = send(&state, req("GET", page, Some(VIEWER))).await;
        assert_eq!(code, StatusCode::OK);
        assert!(html.contains("format=csv"), "{page}: no download link");
        let (code, h, body) = send(
            &state,
            req("GET", &format!("{page}?format=csv"), Some(VIEWER)),
        )
        .await;
        assert_eq!(code, StatusCode::OK, "{page}: {body}");
        assert_eq!(h[header::CONTENT_TYPE], "text/csv; charset=utf-8");
        assert!(
            h[header::CONTENT_DISPOSITION]
                .to_str()
                .unwrap()
                .starts_with("attachment"),
            "{page}"
        );
        assert!(body.starts_with(header), "{page}: {body}");
        // As many rows as the page has table rows (the header aside).
        let lines = body.lines().count() - 1;
        // The recommendations page has the plan's tables above its steps: count the steps.
        // The alerts page has the notifications' table under its alerts.
        let html = html.split("<h2>Notifications</h2>").next().unwrap();
        let shown = if page == "/recommendations" {
            html.matches("<td><a href=\"/recommendations/").count()
        } else {
            // Table rows, less the header, a "None" row and a total row.
            html.matches("<tr>").count()
                - 1
                - html.matches("None: ").count()
                - html.matches("<tfoot>").count()
        };
        assert_eq!(lines, shown, "{page}: {body}");
        let (code, _, body) = send(
            &state,
            req("GET", &format!("{page}?format=xml"), Some(VIEWER)),
        )
        .await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{page}");
        assert!(body.contains("html or csv"), "{body}");
    }
    // A team-scoped caller's download holds its teams' lines only.
    let (_, _, body) = send(&state, req("GET", "/teams?format=csv", Some(SCOPED))).await;
    let teams: Vec<&str> = body
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(teams, ["ml"], "{body}");
}

/// A tenant key of each team, as a viewer reads `/api/v1/tenants`.
async fn tenant_of_team(state: &AppState) -> impl Fn(&str) -> String {
    let tenants: Value = serde_json::from_str(
        &send(state, req("GET", "/api/v1/tenants", Some(VIEWER)))
            .await
            .2,
    )
    .unwrap();
    move |team: &str| {
        tenants["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["team"] == team)
            .unwrap()["key"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}
