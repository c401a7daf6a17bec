//! Small holes, a regression test each: no answer may be framed by another site,
//! wrong agent tokens on the node-labels route are limited like everywhere else, and a
//! sign-in in progress is spent by its first callback.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use tower::ServiceExt;

async fn call(state: &collector::state::AppState, req: Request<Body>) -> (StatusCode, String) {
    let resp = collector::router::router(state.clone())
        .oneshot(req)
        .await
        .unwrap();
    let code = resp.status();
    let headers = resp.headers().clone();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    assert_eq!(
        headers.get(header::X_FRAME_OPTIONS).map(|v| v.as_bytes()),
        Some(&b"DENY"[..]),
        "every answer refuses framing"
    );
    assert!(
        headers
            .get(header::CONTENT_SECURITY_POLICY)
            .is_some_and(|v| v.to_str().unwrap().contains("frame-ancestors 'none'")),
        "every answer refuses framing"
    );
    (code, String::from_utf8_lossy(&body).into_owned())
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn no_answer_can_be_framed_pages_api_or_errors() {
    let t = crate::support::sqlite().await;
    let state = crate::support::default_state(t.store.clone());
    for uri in ["/", "/recommendations", "/api/v1/findings", "/no-such-page"] {
        call(&state, get(uri)).await;
    }
}

/// Wrong agent tokens on `GET /api/v1/nodes/{node}/labels` were neither limited nor audited:
/// now they count against the address as on ingest, and a right one still passes.
#[tokio::test]
async fn wrong_tokens_on_the_node_labels_route_are_limited() {
    let t = crate::support::sqlite().await;
    let mut auth = collector_shared::agent_auth::Auth::default();
    auth.add("node-token-right-1", vec!["gpu-1".into()], None);
    let state = collector::state::AppState::new(
        t.store.clone(),
        auth,
        Default::default(),
        Default::default(),
        Default::default(),
    );
    let labels = |token: &str| {
        Request::get("/api/v1/nodes/gpu-1/labels?cluster=c")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap()
    };
    let mut codes = Vec::new();
    for i in 0..12 {
        codes.push(call(&state, labels(&format!("wrong-token-{i:04}"))).await.0);
    }
    assert_eq!(codes[0], StatusCode::UNAUTHORIZED);
    assert!(
        codes.contains(&StatusCode::TOO_MANY_REQUESTS),
        "wrong tokens were never limited: {codes:?}"
    );
    let (code, body) = call(&state, labels("node-token-right-1")).await;
    assert_ne!(code, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_ne!(code, StatusCode::UNAUTHORIZED, "{body}");
}

/// A sign-in's flow cookie could be presented again for its ten minutes; the first callback
/// that presents it spends it, whatever its outcome.
#[tokio::test]
async fn a_sign_in_in_progress_is_spent_by_its_first_callback() {
    let t = crate::support::sqlite().await;
    let access: collector_shared::access::Settings = toml::from_str(
        r#"
        session_key = "test-session-key-0123456789"
        [oidc]
        issuer = "http://127.0.0.1:1"
        client_id = "gpulens"
        redirect_url = "http://127.0.0.1:1/auth/callback"
        "#,
    )
    .unwrap();
    let state = crate::support::default_state(t.store.clone())
        .with_access(access)
        .unwrap();
    let callback = || {
        Request::get("/auth/callback?code=c0de&state=st4te")
            .header(
                header::COOKIE,
                format!(
                    "{}=a-flow-cookie-value",
                    collector_shared::access::oidc::FLOW_COOKIE
                ),
            )
            .body(Body::empty())
            .unwrap()
    };
    let (code, first) = call(&state, callback()).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    assert!(first.contains("Sign-in failed"), "{first}");
    let (code, again) = call(&state, callback()).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    assert!(again.contains("already used"), "{again}");
}
