//! A node agent's identity from the API server (`[token_review]`, docs/security.md): the agent
//! presents its pod's projected ServiceAccount token, issued for gpulens' audience; the
//! collector asks the API server's TokenReview who that is, and accepts it only as the agents'
//! ServiceAccount, bound to a pod on a node — the node named in the review's
//! `authentication.kubernetes.io/node-name` (Kubernetes ≥ 1.30, `ServiceAccountTokenPodNodeInfo`).
//! The agent may then speak for that node only: one node's token cannot send another's batches.
//!
//! A review answers for at most `cache` (default 5 min) and never past the token's own `exp`;
//! a refusal is remembered for [`REFUSED_FOR_MS`] (the same wrong token costs one review a
//! minute); at most [`MAX_CACHED`] answers are remembered, and at most [`IN_FLIGHT`] reviews run
//! at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use serde::Deserialize;

use crate::settings::duration;

/// The key of a pod-bound token's node in the review's `user.extra`.
pub const NODE_NAME: &str = "authentication.kubernetes.io/node-name";
/// The most reviewed tokens remembered (one per agent, and a rotation's overlap).
pub const MAX_CACHED: usize = 50_000;
/// The most reviews in flight; others wait.
pub const IN_FLIGHT: usize = 16;
/// The longest a review may take.
pub const DEADLINE: Duration = Duration::from_secs(10);
/// The longest token sent for review (a projected token is about 1 KiB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// How long a refusal is remembered: the same wrong token sent again costs no review.
pub const REFUSED_FOR_MS: i64 = 60_000;

/// `[token_review]`: agents identified by their projected ServiceAccount token.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// The agents' ServiceAccount as `namespace/name`; any other account is refused.
    pub service_account: String,
    /// The audience the agents' tokens are issued for (the chart's projected volume sets it);
    /// a token for the API server itself is refused.
    #[serde(default = "default_audience")]
    pub audience: String,
    /// The cluster name these agents must report.
    #[serde(default)]
    pub cluster: Option<String>,
    /// The API server; unset: in-cluster, else the kubeconfig.
    #[serde(default)]
    pub kube_url: Option<String>,
    /// How long one review answers for.
    #[serde(default = "default_cache", deserialize_with = "duration")]
    pub cache: Duration,
}

fn default_audience() -> String {
    "gpulens".into()
}
fn default_cache() -> Duration {
    Duration::from_secs(300)
}

impl Settings {
    pub fn check(&self) -> anyhow::Result<()> {
        let parts: Vec<&str> = self.service_account.split('/').collect();
        if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
            anyhow::bail!(
                "token_review.service_account {:?} must be namespace/name, e.g. \"gpulens/gpulens-agent\"",
                self.service_account
            );
        }
        if self.audience.trim().is_empty() {
            anyhow::bail!("token_review.audience is empty");
        }
        if self.cache.is_zero() || self.cache > Duration::from_secs(3600) {
            anyhow::bail!("token_review.cache must be between 1 s and 1 h");
        }
        Ok(())
    }

    /// The user name the API server gives the agents' ServiceAccount.
    fn username(&self) -> String {
        format!(
            "system:serviceaccount:{}",
            self.service_account.replacen('/', ":", 1)
        )
    }
}

/// A review's answer: the token's node, or why it is not an agent's.
type Answer = Result<String, String>;

/// Why a token was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The token is not an agent's (unknown, expired, another account or audience, no node).
    #[error("{0}")]
    NotAnAgent(String),
    /// The API server could not be asked; the agent should retry.
    #[error("the Kubernetes API could not review the token: {0}")]
    Unavailable(String),
}

/// The reviewer: a bounded cache in front of the API server's TokenReview.
pub struct Reviewer {
    settings: Settings,
    username: String,
    client: tokio::sync::OnceCell<kube::Client>,
    /// Token hash → (its node, or why it was refused; until when that answer holds).
    cache: Mutex<HashMap<[u8; 32], (Answer, i64)>>,
    in_flight: tokio::sync::Semaphore,
}

impl std::fmt::Debug for Reviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reviewer({})", self.username)
    }
}

impl Reviewer {
    pub fn new(settings: Settings) -> Reviewer {
        Reviewer {
            username: settings.username(),
            settings,
            client: Default::default(),
            cache: Default::default(),
            in_flight: tokio::sync::Semaphore::new(IN_FLIGHT),
        }
    }

    /// The cluster these agents are bound to.
    pub fn cluster(&self) -> Option<&str> {
        self.settings.cluster.as_deref()
    }

    /// Whether `token` looks like a ServiceAccount token (a JWT) worth sending for review.
    pub fn looks_like_jwt(token: &str) -> bool {
        token.len() <= MAX_TOKEN_BYTES
            && token.split('.').count() == 3
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    }

    /// The node of a token reviewed before and still within its answer's life.
    pub fn cached(&self, hash: &[u8; 32], now_ms: i64) -> Option<String> {
        self.answer(hash, now_ms)?.ok()
    }

    /// A review's answer still within its life: the node, or why the token was refused.
    fn answer(&self, hash: &[u8; 32], now_ms: i64) -> Option<Answer> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(hash)
            .filter(|(_, until)| *until > now_ms)
            .map(|(answer, _)| answer.clone())
    }

    /// The node the agent presenting `token` runs on, from the cache or a review.
    pub async fn node_of(
        &self,
        token: &str,
        hash: [u8; 32],
        now_ms: i64,
    ) -> Result<String, Refused> {
        match self.answer(&hash, now_ms) {
            Some(Ok(node)) => return Ok(node),
            Some(Err(why)) => return Err(Refused::NotAnAgent(why)),
            None => {}
        }
        if !Self::looks_like_jwt(token) {
            return Err(Refused::NotAnAgent("unknown agent token".into()));
        }
        let _permit = self
            .in_flight
            .acquire()
            .await
            .map_err(|e| Refused::Unavailable(e.to_string()))?;
        let review = tokio::time::timeout(DEADLINE, self.review(token))
            .await
            .map_err(|_| Refused::Unavailable(format!("no answer within {DEADLINE:?}")))??;
        let node = match self.accept(review) {
            Ok(node) => node,
            Err(Refused::NotAnAgent(why)) => {
                self.remember(hash, Err(why.clone()), now_ms + REFUSED_FOR_MS, now_ms);
                return Err(Refused::NotAnAgent(why));
            }
            Err(e) => return Err(e),
        };
        let until = now_ms + self.settings.cache.as_millis() as i64;
        let until = expiry_ms(token).map_or(until, |exp| exp.min(until));
        self.remember(hash, Ok(node.clone()), until, now_ms);
        Ok(node)
    }

    async fn review(&self, token: &str) -> Result<TokenReview, Refused> {
        let client = self
            .client
            .get_or_try_init(|| {
                crate::kube_api::connect(
                    self.settings.kube_url.as_deref(),
                    crate::kube_api::Bounds::LISTS,
                )
            })
            .await
            .map_err(|e| Refused::Unavailable(format!("{e:#}")))?;
        let api: kube::Api<TokenReview> = kube::Api::all(client.clone());
        let ask = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: Some(vec![self.settings.audience.clone()]),
            },
            ..TokenReview::default()
        };
        api.create(&kube::api::PostParams::default(), &ask)
            .await
            .map_err(|e| Refused::Unavailable(ingest_client::bounded::error_chain(&e)))
    }

    /// The node of an answered review, or why the token is not an agent's.
    fn accept(&self, review: TokenReview) -> Result<String, Refused> {
        let refuse = |why: String| Err(Refused::NotAnAgent(why));
        let Some(status) = review.status else {
            return refuse("the token review answered no status".into());
        };
        if status.authenticated != Some(true) {
            return refuse("the API server does not accept this token".into());
        }
        let audiences = status.audiences.unwrap_or_default();
        if !audiences.contains(&self.settings.audience) {
            return refuse(format!(
                "the token is not issued for audience {:?}",
                self.settings.audience
            ));
        }
        let Some(user) = status.user else {
            return refuse("the token review named no user".into());
        };
        if user.username.as_deref() != Some(self.username.as_str()) {
            return refuse(format!(
                "the token belongs to {:?}, not to the agents' {:?}",
                ingest_client::bounded::one_line(
                    user.username.as_deref().unwrap_or("-"),
                    200,
                    false
                ),
                self.username
            ));
        }
        let node = user
            .extra
            .and_then(|mut e| e.remove(NODE_NAME))
            .unwrap_or_default();
        match node.as_slice() {
            [n] if model::names::check_subdomain(n).is_ok() => Ok(n.clone()),
            _ => refuse(format!(
                "the token is not bound to a pod on one node (no {NODE_NAME}; Kubernetes ≥ 1.30 \
                 and a projected token are needed)"
            )),
        }
    }

    fn remember(&self, hash: [u8; 32], answer: Answer, until_ms: i64, now_ms: i64) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, (_, until)| *until > now_ms);
        }
        if cache.len() < MAX_CACHED {
            cache.insert(hash, (answer, until_ms));
        }
    }
}

/// The `exp` claim of a JWT, in ms, read without verifying (the API server verified it): a
/// review is never trusted past the token's own end.
fn expiry_ms(token: &str) -> Option<i64> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("exp")?.as_i64()?.checked_mul(1000)
}
