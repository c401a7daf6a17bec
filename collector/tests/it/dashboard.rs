//! The dashboard's one write path, end to end through the router: an operator signs in with
//! their token (a signed, HttpOnly, SameSite=Strict cookie), sees the approve form on a
//! recommendation that changes a GPU Operator label, and approves the planned label action
//! with the form's CSRF token; without the cookie or with a wrong token nothing is approved.
//! And the list pages' filters: unknown values are said on the page, not silently applied.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use collector::labels::settings::{Mode, Operator, Settings};
use collector::{router::router, state::AppState};
use store::label_actions::ActionFilter;
use tower::ServiceExt;

async fn send(state: &AppState, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, String) {
    let resp = router(state.clone()).oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

fn form(uri: &str, body: String, cookie: Option<&str>) -> Request<Body> {
    let mut r =
        Request::post(uri).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        r = r.header(header::COOKIE, c);
    }
    r.body(Body::from(body)).unwrap()
}

fn get(uri: &str, cookie: Option<&str>) -> Request<Body> {
    let mut r = Request::get(uri);
    if let Some(c) = cookie {
        r = r.header(header::COOKIE, c);
    }
    r.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn an_operator_approves_a_label_change_from_the_dashboard() {
    let t = crate::support::sqlite().await;
    // An analysis with a time-slicing recommendation for node gpu-1, its label action planned.
    crate::support::store_time_slicing_step(&t.store, "time_slicing-test", "gpu-1", true).await;
    let settings = Settings {
        mode: Mode::ApplyWithApproval,
        operators: vec![Operator {
            name: "alice".into(),
            token: collector::config::Secret("operator-token-1".into()),
        }],
        ..Settings::default()
    };
    let state = crate::support::default_state(t.store.clone()).with_labels(settings);
    let page = "/recommendations/time_slicing-test";

    // Anonymous: the page says what would change and asks to sign in; no form.
    let (code, _, html) = send(&state, get(page, None)).await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        html.contains("nvidia.com/device-plugin.config=gpulens-time-slicing-x4"),
        "{html}"
    );
    assert!(html.contains("Sign in as an operator"));
    assert!(!html.contains("name=\"csrf\""));
    // Whole GPUs, as the list and the plan count them.
    assert!(
        html.contains("<th scope=\"row\">GPUs freed</th><td class=\"n\">1</td>"),
        "{html}"
    );

    // The overview offers the step first, with a link to where it is approved.
    let (code, _, html) = send(&state, get("/", None)).await;
    assert_eq!(code, StatusCode::OK);
    let todo = &html[html
        .find("What to do first")
        .expect("no actions on the overview")..];
    assert!(todo.contains("Frees 1 GPU</b>"), "{todo}");
    assert!(
        todo.contains("share gpu-1&#39;s GPUs four ways")
            || todo.contains("share gpu-1's GPUs four ways"),
        "{todo}"
    );
    assert!(
        todo.contains("href=\"/recommendations/time_slicing-test#apply\">Review and approve"),
        "{todo}"
    );
    let (_, _, step) = send(&state, get(page, None)).await;
    assert!(step.contains("id=\"apply\""), "the link's target");

    // A wrong token is refused.
    let (code, headers, _) = send(&state, form("/login", "token=nope".into(), None)).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    assert!(headers.get(header::SET_COOKIE).is_none());
    // The right one signs in.
    let (code, headers, _) = send(
        &state,
        form("/login", "token=operator-token-1".into(), None),
    )
    .await;
    assert_eq!(code, StatusCode::SEE_OTHER);
    let set = headers[header::SET_COOKIE].to_str().unwrap().to_owned();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attr), "{set}");
    }
    let cookie = set.split(';').next().unwrap().to_owned();

    let (_, _, html) = send(&state, get(page, Some(&cookie))).await;
    assert!(html.contains("Signed in as"));
    let csrf = html
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("the approve form carries a CSRF token")
        .to_owned();
    let action = html
        .split("name=\"action\" value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap()
        .to_owned();
    let approve = format!("{page}/approve");

    // Without the cookie, or with a wrong CSRF token: refused, nothing approved.
    let (code, _, _) = send(
        &state,
        form(&approve, format!("csrf={csrf}&action={action}"), None),
    )
    .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let (code, _, _) = send(
        &state,
        form(
            &approve,
            format!("csrf=forged&action={action}"),
            Some(&cookie),
        ),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    let open = t
        .store
        .label_actions(&ActionFilter {
            states: &[store::label_actions::ActionState::Planned],
            ..ActionFilter::newest(10)
        })
        .await
        .unwrap();
    assert_eq!(open.len(), 1);

    // With both: approved by alice, and the page says so.
    let (code, headers, _) = send(
        &state,
        form(
            &approve,
            format!("csrf={csrf}&action={action}"),
            Some(&cookie),
        ),
    )
    .await;
    assert_eq!(code, StatusCode::SEE_OTHER);
    let to = headers[header::LOCATION].to_str().unwrap().to_owned();
    assert!(to.contains("approved="), "{to}");
    let approved = t
        .store
        .label_actions(&ActionFilter::newest(10))
        .await
        .unwrap();
    assert_eq!(approved[0].state.as_str(), "approved");
    assert_eq!(approved[0].approved_by.as_deref(), Some("alice"));
    let (_, _, html) = send(&state, get(&to, Some(&cookie))).await;
    assert!(html.contains("approved: the collector runs it"), "{html}");
    assert!(!html.contains("name=\"csrf\""), "no second approval");

    // Signing out ends the session, on the server too: a copy of the cookie no longer works
    // (the browser is not merely asked to forget it).
    let (code, headers, _) = send(&state, form("/logout", String::new(), Some(&cookie))).await;
    assert_eq!(code, StatusCode::SEE_OTHER);
    assert!(
        headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let (_, _, html) = send(&state, get(&to, Some(&cookie))).await;
    assert!(
        !html.contains("Signed in as"),
        "the revoked cookie still signs in"
    );

    // Wrong tokens meet a limit: after five from one address, each wrong one is answered 429
    // for a wait that doubles (so 2,000 wrong sign-ins cannot be tried in a second).
    let mut codes = Vec::new();
    for _ in 0..8 {
        let (code, headers, _) = send(&state, form("/login", "token=nope".into(), None)).await;
        if code == StatusCode::TOO_MANY_REQUESTS {
            assert!(headers.get(header::RETRY_AFTER).is_some());
        }
        codes.push(code);
    }
    let first = codes
        .iter()
        .position(|c| *c == StatusCode::TOO_MANY_REQUESTS)
        .expect("the limit is met");
    assert!(first <= 5, "{codes:?}");
    assert!(
        codes[first..]
            .iter()
            .all(|c| *c == StatusCode::TOO_MANY_REQUESTS),
        "{codes:?}"
    );
    // The right token is never refused for the wrong ones: an attacker guessing from the
    // same address does not lock the operator out.
    let (code, _, _) = send(
        &state,
        form("/login", "token=operator-token-1".into(), None),
    )
    .await;
    assert_eq!(code, StatusCode::SEE_OTHER);
}

/// A page's filter outside its domain is said on the page, and the page shows
/// everything rather than silently nothing; a known kind filters the recommendations list.
#[tokio::test]
async fn unknown_filters_are_said_and_known_ones_filter() {
    let t = crate::support::sqlite().await;
    crate::support::store_time_slicing_step(&t.store, "time_slicing-test", "gpu-1", true).await;
    let state = crate::support::default_state(t.store.clone());
    let (code, _, html) = send(&state, get("/recommendations?kind=bogus%3Cb%3E", None)).await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        html.contains("Unknown kind \"bogus&lt;b&gt;\": one of reclaim,")
            && html.contains("per_gpu_sharing")
            && html.contains("Showing all."),
        "{html}"
    );
    assert!(
        html.contains("/recommendations/time_slicing-test"),
        "{html}"
    );
    let (_, _, html) = send(&state, get("/recommendations?kind=time_slicing", None)).await;
    assert!(html.contains("/recommendations/time_slicing-test") && !html.contains("Unknown"));
    let (_, _, html) = send(&state, get("/recommendations?kind=reclaim", None)).await;
    assert!(
        !html.contains("/recommendations/time_slicing-test"),
        "{html}"
    );
    let (code, _, html) = send(&state, get("/findings?kind=bogus&severity=loud", None)).await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        html.contains("Unknown kind \"bogus\": one of idle_allocation")
            && html.contains("Unknown severity \"loud\": one of info, warning, critical"),
        "{html}"
    );
}

/// The tenants' and teams' tables and the findings follow a picked range — the last 24 hours, or a
/// custom from/to — read from the hour rollups through the analysis' own funnel; without one
/// they show the analysed window and say so; a range that cannot be read is a notice, not an
/// error, and the window is shown.
#[tokio::test]
async fn tenants_teams_and_findings_follow_the_picked_range() {
    const H: i64 = 3_600_000;
    let t = crate::support::sqlite().await;
    let now = model::time::now_ms() / H * H;
    let fleet = simulator::Fleet::new(
        simulator::Scenario::from_toml(
            r#"
name = "range"
cluster = "prod"
seed = 3
interval = "60s"

[[nodes]]
name = "gpu-h100-01"
model = "H100-80GB"
gpus = 3
orchestrator = "kubernetes"

[[tenants]]
name = "trainer"
kind = "pod"
namespace = "llm"
node = "gpu-h100-01"
devices = ["0", "1"]
pattern = "steady_training"
mem_gib = 60

[[tenants]]
name = "idler"
kind = "pod"
namespace = "cv"
node = "gpu-h100-01"
devices = ["2"]
pattern = "idle_holding_memory"
mem_gib = 10
"#,
        )
        .unwrap(),
    );
    crate::analytics::load(&t.store, &fleet, "a", now - 12 * H, now).await;
    t.store.rollup(now + H).await.unwrap();
    let a = crate::support::analyse(&t.store, now - 12 * H, now).await;
    collector::analysis::save(&t.store, &a, now, 5)
        .await
        .unwrap();
    let state = crate::support::default_state(t.store.clone());
    // The allocated GPU-hours of the CSV's first line (the trainer's, searched for).
    let allocated = |csv: String| -> f64 {
        let line = csv.lines().nth(1).unwrap_or_else(|| panic!("{csv}"));
        line.split(',').nth(1).unwrap().parse().unwrap()
    };
    let csv = |uri: &str| {
        let state = state.clone();
        let uri = uri.to_owned();
        async move { send(&state, get(&uri, None)).await.2 }
    };
    let window = allocated(csv("/tenants?q=trainer&format=csv").await);
    assert!(
        (window - 24.0).abs() < 0.5,
        "two GPUs for 12 hours: {window}"
    );
    let day = allocated(csv("/tenants?q=trainer&range=24h&format=csv").await);
    assert!(
        (day - window).abs() < 0.5,
        "the last day holds all of it: {day}"
    );
    let from = model::time::rfc3339(now - 3 * H);
    let to = model::time::rfc3339(now - H);
    let two = allocated(
        csv(&format!(
            "/tenants?q=trainer&from={from}&to={to}&format=csv"
        ))
        .await,
    );
    assert!((two - 4.0).abs() < 0.2, "two GPUs for two hours: {two}");
    // A browser's date-and-time field (minutes, no zone: UTC) reads the same.
    let minute = |ms: i64| model::time::rfc3339(ms)[..16].to_owned();
    let same = allocated(
        csv(&format!(
            "/tenants?q=trainer&from={}&to={}&format=csv",
            minute(now - 3 * H),
            minute(now - H)
        ))
        .await,
    );
    assert!((same - two).abs() < 1e-9, "{same} vs {two}");
    // The page says what it covers and carries the range in its sort links.
    let (code, _, html) = send(&state, get("/tenants?range=24h", None)).await;
    assert_eq!(code, StatusCode::OK);
    assert!(html.contains("(the selected range;"), "{html}");
    assert!(html.contains("range=24h&amp;sort="), "{html}");
    let (_, _, html) = send(&state, get("/tenants", None)).await;
    assert!(
        html.contains("(the scheduled analysis&#39; window)")
            || html.contains("(the scheduled analysis' window)"),
        "{html}"
    );
    // Findings meet a range by their windows: the idler's idle allocation spans the last 12
    // hours, so it is in the last day and not in a range before the history.
    let idle = |uri: String| {
        let state = state.clone();
        async move {
            send(&state, get(&uri, None))
                .await
                .2
                .contains("idle_allocation-")
        }
    };
    assert!(idle("/findings?kind=idle_allocation".into()).await);
    assert!(idle("/findings?kind=idle_allocation&range=24h".into()).await);
    let before = |h: i64| minute(now - h * H);
    assert!(
        !idle(format!(
            "/findings?kind=idle_allocation&from={}&to={}",
            before(30),
            before(20)
        ))
        .await
    );
    // A tenant's and a team's page follow a picked range too: two hours of the trainer's
    // two GPUs are 4 GPU-hours; the team's chart draws its hours.
    let (_, _, list) = send(&state, get("/tenants?q=trainer", None)).await;
    let key = list
        .split("href=\"/tenants/")
        .nth(1)
        .and_then(|h| h.split('"').next())
        .expect("the trainer's page link")
        .to_owned();
    let numbers = |uri: String| {
        let state = state.clone();
        async move { send(&state, get(&uri, None)).await.2 }
    };
    let whole = numbers(format!("/tenants/{key}?format=csv&table=numbers")).await;
    assert!(whole.contains("allocated GPU-hours,24"), "{whole}");
    let part = numbers(format!(
        "/tenants/{key}?from={from}&to={to}&format=csv&table=numbers"
    ))
    .await;
    assert!(part.contains("allocated GPU-hours,4"), "{part}");
    let html = numbers(format!("/tenants/{key}?from={from}&to={to}")).await;
    assert!(html.contains("cover the selected range"), "{html}");
    assert!(html.contains("format=csv&amp;table=numbers"), "{html}");
    let html = numbers(format!("/tenants/{key}?range=1y")).await;
    assert!(html.contains("Unknown range"), "{html}");
    let (_, _, list) = send(&state, get("/teams", None)).await;
    let team = list
        .split("href=\"/teams/")
        .nth(1)
        .and_then(|h| h.split('"').next())
        .expect("a team's page link")
        .to_owned();
    let html = numbers(format!("/teams/{team}")).await;
    assert!(html.contains(": allocated against effective use"), "{html}");
    assert!(!html.contains("No allocation of this team"), "{html}");
    // The plan follows a picked range: made from that range's demand and said so, its links
    // keeping the range; the last day holds the whole history, so its plan is the scheduled
    // one's; before the history there is nothing to plan.
    let steps = |csv: String| csv.lines().skip(1).map(str::to_owned).collect::<Vec<_>>();
    let scheduled = steps(csv("/recommendations?format=csv").await);
    assert!(!scheduled.is_empty(), "the idler's reclaim at least");
    assert_eq!(
        steps(csv("/recommendations?range=24h&format=csv").await),
        scheduled
    );
    let (code, _, html) = send(&state, get("/recommendations?range=24h", None)).await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        html.contains("Made on request from the recorded demand of"),
        "{html}"
    );
    assert!(html.contains("range=24h&amp;sort="), "{html}");
    assert!(
        html.contains("/recommendations?range=24h&amp;format=csv&amp;table=pools"),
        "{html}"
    );
    let (_, _, html) = send(
        &state,
        get(
            &format!("/recommendations?from={}&to={}", before(30), before(20)),
            None,
        ),
    )
    .await;
    assert!(html.contains("this plan has no step"), "{html}");
    let (_, _, html) = send(&state, get("/recommendations?range=1y", None)).await;
    assert!(
        html.contains("Unknown range") && html.contains("Showing the scheduled plan"),
        "{html}"
    );
    assert!(html.contains("Made by the scheduled analysis"), "{html}");
    // The overview's charts take the custom range too; one that cannot be read is said.
    let (code, _, html) = send(
        &state,
        get(&format!("/?from={}&to={}", before(3), before(1)), None),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        html.contains("Fleet, ") && !html.contains("Fleet, last"),
        "{html}"
    );
    assert!(
        html.contains("Every GPU, ") && !html.contains("Every GPU, last"),
        "{html}"
    );
    let (_, _, html) = send(&state, get("/?from=yesterday", None)).await;
    assert!(
        html.contains("Showing the last 7 days") && html.contains("Fleet, last 7d"),
        "{html}"
    );
    // What cannot be read is said, and the window shown.
    for (uri, said) in [
        ("/tenants?range=1y", "Unknown range \"1y\""),
        ("/tenants?from=2026-13-45", "is not RFC 3339"),
        (
            &*format!("/tenants?from={to}&to={from}"),
            "from is not before its to",
        ),
        ("/tenants?from=1971-01-01", "before the oldest hour kept"),
        ("/tenants?from=now-40d", "at most 31 days"),
    ] {
        let (code, _, html) = send(&state, get(uri, None)).await;
        assert_eq!(code, StatusCode::OK, "{uri}");
        assert!(html.contains(said), "{uri}: {html}");
    }
}
