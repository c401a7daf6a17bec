//! The API server's TokenReview (`POST /apis/authentication.k8s.io/v1/tokenreviews`) for the
//! projected ServiceAccount tokens the stand-in issues ([`Tokens::issue`], reached through
//! `StandIn::tokens`): a token the
//! stand-in issued, not expired nor revoked, whose audiences meet the review's, is answered
//! `authenticated` with the ServiceAccount's user name, groups and the pod-bound `extra` keys
//! the API server adds (pod name and uid, node name and uid, credential id — node info since
//! Kubernetes 1.30); anything else is answered `authenticated: false` with an error, as the API
//! server answers. The tokens are JWT-shaped (header, claims, signature) so a client may read
//! the claims; the signature is random, and only the stand-in can tell a real token.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::wire::status;

/// The path of the review.
pub(crate) const PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// The audience a token is for when the review names none: the API server's own.
pub const API_SERVER_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// One issued token.
#[derive(Debug, Clone)]
struct Issued {
    username: String,
    namespace: String,
    node: String,
    pod: String,
    audiences: Vec<String>,
    expires_s: i64,
}

/// The issued tokens and the reviews asked.
#[derive(Debug, Clone, Default)]
pub struct Tokens(Arc<Mutex<State_>>);

#[derive(Debug, Default)]
struct State_ {
    issued: BTreeMap<String, Issued>,
    reviews: usize,
}

impl Tokens {
    fn lock(&self) -> std::sync::MutexGuard<'_, State_> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a token is issued for.
#[derive(Debug, Clone)]
pub struct TokenFor<'a> {
    /// The ServiceAccount, `namespace/name`.
    pub service_account: &'a str,
    /// The pod the token is bound to, and its node.
    pub pod: &'a str,
    pub node: &'a str,
    pub audience: &'a str,
    /// Seconds from now until it expires (negative: already expired).
    pub ttl_s: i64,
}

impl Tokens {
    /// Issues a projected ServiceAccount token, as the kubelet asks the API server for one.
    pub fn issue(&self, t: TokenFor<'_>) -> String {
        let (namespace, name) = t
            .service_account
            .split_once('/')
            .expect("service_account is namespace/name");
        let username = format!("system:serviceaccount:{namespace}:{name}");
        let expires_s = model::time::now_ms() / 1000 + t.ttl_s;
        let b64 =
            |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let header = b64(&json!({"alg": "RS256", "kid": "stand-in"}));
        let claims = b64(&json!({
            "aud": [t.audience], "exp": expires_s, "iss": "https://kubernetes.default.svc",
            "sub": username,
            "kubernetes.io": {"namespace": namespace, "node": {"name": t.node},
                              "pod": {"name": t.pod}, "serviceaccount": {"name": name}},
        }));
        let mut tokens = self.lock();
        let signature = format!("sig{:016x}{}", rand_u64(), tokens.issued.len());
        let token = format!("{header}.{claims}.{signature}");
        tokens.issued.insert(
            token.clone(),
            Issued {
                username,
                namespace: namespace.to_owned(),
                node: t.node.to_owned(),
                pod: t.pod.to_owned(),
                audiences: vec![t.audience.to_owned()],
                expires_s,
            },
        );
        token
    }

    /// Revokes a token (its pod was deleted): later reviews answer it unauthenticated.
    pub fn revoke(&self, token: &str) {
        self.lock().issued.remove(token);
    }

    /// How many token reviews were asked.
    pub fn reviews(&self) -> usize {
        self.lock().reviews
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_i64(model::time::now_ms());
    h.finish()
}

/// `POST …/tokenreviews`: the review of `spec.token` for `spec.audiences`.
pub(crate) async fn review(State(tokens): State<Tokens>, body: Bytes) -> Response {
    let Ok(ask) = serde_json::from_slice::<Value>(&body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the body is not JSON",
        );
    };
    if ask["kind"] != "TokenReview" || ask["apiVersion"] != "authentication.k8s.io/v1" {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the body must be an authentication.k8s.io/v1 TokenReview",
        );
    }
    let token = ask["spec"]["token"].as_str().unwrap_or_default();
    let wanted: Vec<String> = match ask["spec"]["audiences"].as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => vec![API_SERVER_AUDIENCE.to_owned()],
    };
    let issued = {
        let mut tokens = tokens.lock();
        tokens.reviews += 1;
        tokens.issued.get(token).cloned()
    };
    let now_s = model::time::now_ms() / 1000;
    let status_ = match issued {
        None => unauthenticated("invalid bearer token"),
        Some(i) if i.expires_s <= now_s => unauthenticated("token has expired"),
        Some(i) => {
            let met: Vec<&String> = wanted.iter().filter(|a| i.audiences.contains(a)).collect();
            if met.is_empty() {
                unauthenticated("token audiences is invalid for the target audiences")
            } else {
                json!({
                    "authenticated": true,
                    "audiences": met,
                    "user": {
                        "username": i.username,
                        "uid": format!("uid-{}", i.username.len()),
                        "groups": ["system:serviceaccounts",
                                   format!("system:serviceaccounts:{}", i.namespace),
                                   "system:authenticated"],
                        "extra": {
                            "authentication.kubernetes.io/pod-name": [i.pod],
                            "authentication.kubernetes.io/pod-uid": [format!("pod-uid-{}", i.pod)],
                            "authentication.kubernetes.io/node-name": [i.node],
                            "authentication.kubernetes.io/node-uid": [format!("node-uid-{}", i.node)],
                            "authentication.kubernetes.io/credential-id": ["JTI=stand-in"],
                        },
                    },
                })
            }
        }
    };
    let mut answer = ask;
    answer["status"] = status_;
    (
        StatusCode::CREATED,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
        .into_response()
}

fn unauthenticated(error: &str) -> Value {
    json!({"authenticated": false, "user": {}, "error": error})
}
