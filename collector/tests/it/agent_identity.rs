//! An agent identified by its pod's projected ServiceAccount token, reviewed
//! by the API server (the stand-in's TokenReview), speaks for its own node only — over a real
//! socket, with the agent's own client reading its token file as the kubelet rotates it.

use ingest_client::{Client, SendError, Tls, Token};
use kube_standin::{StandIn, TokenFor};

const ACCOUNT: &str = "gpulens/gpulens-agent";

fn token_for<'a>(node: &'a str, pod: &'a str) -> TokenFor<'a> {
    TokenFor {
        service_account: ACCOUNT,
        pod,
        node,
        audience: "gpulens",
        ttl_s: 3600,
    }
}

/// Sends one batch of `node` with the token in `file`; the collector's answer.
async fn send(
    base: &str,
    file: &std::path::Path,
    b: &model::wire::v1::Batch,
) -> Result<(), SendError> {
    let client = Client::with_token(base, Token::file(file).unwrap(), &Tls::default()).unwrap();
    client
        .send_encoded(Client::encode(b).unwrap())
        .await
        .map(|_| ())
}

#[tokio::test]
async fn an_agent_speaks_for_the_node_its_token_is_bound_to_and_no_other() {
    let kube = StandIn::start().await;
    let t = crate::support::sqlite().await;
    let config = collector::config::Config::parse(&format!(
        r#"
[token_review]
service_account = "{ACCOUNT}"
cluster = "test"
kube_url = "{}"
"#,
        kube.url()
    ))
    .unwrap();
    let auth = collector_shared::agent_auth::Auth::from_config(
        &config.agents,
        config.token_review.as_ref(),
    )
    .unwrap();
    let state = collector::state::AppState::new(
        t.store.clone(),
        auth,
        Default::default(),
        Default::default(),
        Default::default(),
    );
    let serving = crate::support::serve(state).await;
    let fleet = crate::support::fleet();
    let minute = collector::now_ms() / 60_000 * 60_000 - 600_000;
    let mine = fleet.batch(0, "agent-a", 1, &[minute], 60_000);
    let other = fleet.batch(1, "agent-a", 2, &[minute], 60_000);
    assert_ne!(mine.node, other.node);
    assert_eq!(
        mine.cluster, "test",
        "the fleet's cluster is the one configured"
    );
    let dir = crate::support::TempDir::new("agent-identity");
    let file = dir.path().join("token");

    // The agent on node 0 sends its own node's batch; the review is asked once, then cached.
    let own = kube
        .tokens()
        .issue(token_for(&mine.node, "gpulens-agent-a"));
    std::fs::write(&file, format!("{own}\n")).unwrap();
    send(&serving.base, &file, &mine)
        .await
        .expect("its own node's batch is stored");
    let again = fleet.batch(0, "agent-a", 3, &[minute + 60_000], 60_000);
    send(&serving.base, &file, &again).await.unwrap();
    assert_eq!(kube.tokens().reviews(), 1, "a review answers for a while");

    // The same token for another node's batch: refused as final, nothing stored.
    match send(&serving.base, &file, &other).await {
        Err(SendError::Rejected {
            status: 403,
            message,
        }) => {
            assert!(message.contains("not bound to node"), "{message}")
        }
        r => panic!("another node's batch: {r:?}"),
    }

    // Tokens that are not the agents' own: each refused 401, whatever it claims.
    let wrong = [
        (
            "another ServiceAccount",
            kube.tokens().issue(TokenFor {
                service_account: "default/builder",
                ..token_for(&mine.node, "x")
            }),
            "not to the agents'",
        ),
        (
            "the API server's audience",
            kube.tokens().issue(TokenFor {
                audience: kube_standin::API_SERVER_AUDIENCE,
                ..token_for(&mine.node, "x")
            }),
            "does not accept",
        ),
        (
            "an expired token",
            kube.tokens().issue(TokenFor {
                ttl_s: -10,
                ..token_for(&mine.node, "x")
            }),
            "does not accept",
        ),
        (
            "a forged token shaped as one",
            {
                let real = kube.tokens().issue(token_for(&mine.node, "x"));
                let (head, _) = real.rsplit_once('.').unwrap();
                format!("{head}.forged")
            },
            "does not accept",
        ),
    ];
    for (what, token, says) in wrong {
        std::fs::write(&file, &token).unwrap();
        match send(&serving.base, &file, &mine).await {
            Err(SendError::Rejected {
                status: 401,
                message,
            }) => {
                assert!(message.contains(says), "{what}: {message}")
            }
            r => panic!("{what}: {r:?}"),
        }
    }

    // A refusal is remembered: the same forged token again costs no review (answered 401, or
    // 429 now that this address sent five wrong tokens).
    let before = kube.tokens().reviews();
    match send(&serving.base, &file, &mine).await {
        Err(SendError::Rejected { status: 401, .. }) => {}
        Err(SendError::Retryable { message, .. }) if message.contains("429") => {}
        r => panic!("the forged token again: {r:?}"),
    }
    assert_eq!(kube.tokens().reviews(), before, "a refusal is remembered");

    // Rotation: the kubelet writes a new token; the old one's pod is gone. The new one works
    // (one more review), the old one is answered from the cache no longer than it lives.
    let rotated = kube
        .tokens()
        .issue(token_for(&mine.node, "gpulens-agent-a"));
    std::fs::write(&file, &rotated).unwrap();
    let reviews = kube.tokens().reviews();
    let third = fleet.batch(0, "agent-a", 4, &[minute + 120_000], 60_000);
    send(&serving.base, &file, &third)
        .await
        .expect("the rotated token works");
    assert_eq!(kube.tokens().reviews(), reviews + 1);
    kube.tokens().revoke(&own);

    // The collector's own view: node 0's minutes are stored, node 1's are not.
    let stored: Vec<String> = t
        .store
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.node)
        .collect();
    assert!(stored.contains(&mine.node), "{stored:?}");
    assert!(!stored.contains(&other.node), "{stored:?}");
    serving.stop().await;
}
