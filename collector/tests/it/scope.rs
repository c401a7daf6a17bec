//! Team scope holds on every action. Every state-changing route is walked with an
//! operator scoped to another team than the object's (bearer token on the API, session and
//! CSRF token on the dashboard's forms): each answers 403 or 404 and nothing changes; the same
//! operator still decides its own team's case, and an unscoped operator anyone's.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use collector::labels::settings::{Mode, Settings as LabelSettings};
use collector_shared::access::Caller;
use collector_shared::access::routes::Need;
use store::reclaim_cases::{CaseFilter, NewCase};
use tower::ServiceExt;

const SEARCH_OP: &str = "search-operator-token-1";
const ROOT_OP: &str = "root-operator-token-1";

pub(crate) fn case(team: &str, pod: &str, now: i64) -> NewCase {
    NewCase {
        cluster: "c".into(),
        node: "gpu-1".into(),
        gpu: format!("GPU-{pod}"),
        tenant: format!("pod/uid-{pod}/main"),
        tenant_name: format!("{team}/{pod}"),
        namespace: team.into(),
        pod: pod.into(),
        pod_uid: format!("uid-{pod}"),
        team: team.into(),
        policy: "notebooks".into(),
        action: "scale-to-zero".into(),
        dry_run: false,
        finding: format!("idle_allocation-{pod}"),
        idle_hours: 5.0,
        idle_share: 1.0,
        signal_metric: "gpu_util".into(),
        signal_entity: format!("GPU-{pod}"),
        state: store::reclaim_cases::CaseState::AwaitingApproval,
        opened_ms: now - 3_600_000,
        act_after_ms: now - 60_000,
    }
}

async fn state_of(store: &store::Store, id: i64) -> store::reclaim_cases::CaseState {
    store
        .reclaim_cases(&CaseFilter {
            id: Some(id),
            ..CaseFilter::newest(1)
        })
        .await
        .unwrap()
        .remove(0)
        .case
        .state
}

async fn newest_action(store: &store::Store) -> store::label_actions::LabelActionRecord {
    store
        .label_actions(&store::label_actions::ActionFilter::newest(1))
        .await
        .unwrap()
        .remove(0)
}

#[tokio::test]
async fn a_team_scoped_operator_changes_nothing_of_another_team_on_any_route() {
    let t = crate::support::sqlite().await;
    let now = collector::now_ms();
    let vision = t
        .store
        .insert_reclaim_case(&case("vision", "nb-vision", now))
        .await
        .unwrap();
    let search = t
        .store
        .insert_reclaim_case(&case("search", "nb-search", now))
        .await
        .unwrap();
    // A step with its planned label action: a node's change, every team's on it.
    crate::support::store_time_slicing_step(&t.store, "time_slicing-whole", "whole", true).await;
    let action = newest_action(&t.store).await;
    assert_eq!(action.state.as_str(), "planned");

    let access: collector_shared::access::Settings = toml::from_str(&format!(
        r#"
        mode = "sign-in"
        [[tokens]]
        name = "search-oncall"
        role = "operator"
        token = "{SEARCH_OP}"
        teams = ["search"]
        [[tokens]]
        name = "root-oncall"
        role = "operator"
        token = "{ROOT_OP}"
        "#
    ))
    .unwrap();
    let state = crate::support::default_state(t.store.clone())
        .with_access(access)
        .unwrap()
        .with_labels(LabelSettings {
            mode: Mode::ApplyWithApproval,
            ..LabelSettings::default()
        });
    let (router, table) = collector::router::router_and_table(state.clone());
    // The scoped operator's dashboard session and its CSRF token.
    let (principal, source) = state.access.sign_in_with_token(SEARCH_OP).unwrap();
    let cookie = state.access.issue(source, now);
    let csrf = state
        .access
        .csrf(&Caller {
            principal: Some(principal),
            session: Some(cookie.clone()),
            addr: None,
        })
        .unwrap();

    let changing: Vec<_> = table
        .iter()
        .filter(|r| r.method != "GET" && matches!(r.need, Need::Operate(_)))
        .collect();
    // Every other non-GET route is a sign-in's or an agent's, changing nothing of a team's.
    let others: Vec<_> = table
        .iter()
        .filter(|r| r.method != "GET" && !matches!(r.need, Need::Operate(_)))
        .map(|r| r.path)
        .collect();
    assert_eq!(
        others,
        ["/login", "/logout", "/api/v1/ingest", "/api/v1/write"],
        "a new state-changing route: give it Operate(..) and add it to this walk"
    );
    assert!(changing.len() >= 5, "{changing:?}");
    for r in &changing {
        let id = if r.path.contains("/reclaim/") {
            vision.to_string()
        } else if r.path.starts_with("/api/v1/label-actions/") {
            action.id.to_string()
        } else if r.path.starts_with("/recommendations/") {
            "time_slicing-whole".to_owned()
        } else {
            panic!(
                "{} {}: the scope walk does not know what this route changes; add it",
                r.method, r.path
            )
        };
        let uri = r.path.replace("{id}", &id);
        let req = if uri.starts_with("/api/") {
            Request::post(&uri)
                .header(header::AUTHORIZATION, format!("Bearer {SEARCH_OP}"))
                .body(Body::empty())
                .unwrap()
        } else {
            Request::post(&uri)
                .header(header::COOKIE, format!("gpulens_session={cookie}"))
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(format!("csrf={csrf}&action={}", action.id)))
                .unwrap()
        };
        let resp = router.clone().oneshot(req).await.unwrap();
        let code = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        assert!(
            code == StatusCode::FORBIDDEN || code == StatusCode::NOT_FOUND,
            "{} {uri} by search's operator: {code} {}",
            r.method,
            String::from_utf8_lossy(&body)
        );
    }
    // Nothing changed.
    assert_eq!(
        state_of(&t.store, vision).await.as_str(),
        "awaiting_approval"
    );
    assert_eq!(
        state_of(&t.store, search).await.as_str(),
        "awaiting_approval"
    );
    let after = newest_action(&t.store).await;
    assert_eq!(after.state.as_str(), "planned");
    assert_eq!(after.approved_by, None);

    // The scope is the object's, not a blanket refusal: search's operator decides search's
    // case, through the API and the dashboard alike, and an unscoped operator vision's.
    let post = |uri: String, token: &str| {
        Request::post(uri)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap()
    };
    let resp = router
        .clone()
        .oneshot(post(format!("/api/v1/reclaim/{search}/approve"), SEARCH_OP))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(state_of(&t.store, search).await.as_str(), "approved");
    let resp = router
        .clone()
        .oneshot(
            Request::post(format!("/reclaim/{search}/cancel"))
                .header(header::COOKIE, format!("gpulens_session={cookie}"))
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(format!("csrf={csrf}")))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(state_of(&t.store, search).await.as_str(), "cancelled");
    let resp = router
        .clone()
        .oneshot(post(format!("/api/v1/reclaim/{vision}/approve"), ROOT_OP))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(state_of(&t.store, vision).await.as_str(), "approved");
}
