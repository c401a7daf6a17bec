//! Agent authentication: a bearer token identifies a credential, and the credential names the
//! nodes (and optionally the cluster) it may send for, so a node's identity is bound to its
//! batches. A configured token names its nodes; a projected ServiceAccount token reviewed by
//! the API server (token_review.rs) names the one node its pod runs on.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

use crate::error::ApiError;
use crate::settings::Secret;
use crate::token_review::{Refused, Reviewer};

/// One agent credential (`[[agents]]` in the config).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentAuth {
    /// The bearer token (or use `token_file`).
    #[serde(default)]
    pub token: Option<Secret>,
    /// A file holding the token (trailing whitespace ignored).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Nodes this token may send for. `"*"` allows any node: only for simulators and tests.
    pub nodes: Vec<String>,
    /// Restrict the token to one cluster name.
    #[serde(default)]
    pub cluster: Option<String>,
}

/// What an agent's credential lets it speak for: nodes and, optionally, one cluster.
#[derive(Debug)]
pub struct Grant {
    nodes: Vec<String>,
    cluster: Option<String>,
}

/// The agent a request comes from, as its credential names it.
pub type Agent = Arc<Grant>;

impl Grant {
    /// The one node this credential speaks for: a reviewed token's node, or an `[[agents]]`
    /// token listing one node. None for `"*"` or several nodes.
    pub fn only_node(&self) -> Option<&str> {
        match self.nodes.as_slice() {
            [n] if n != "*" => Some(n),
            _ => None,
        }
    }
}

/// The credentials the collector accepts: `[[agents]]` tokens (compared as SHA-256 hashes, of
/// one length whatever is sent) and, with `[token_review]`, projected ServiceAccount tokens the
/// API server vouches for, each bound to the node its pod runs on.
#[derive(Clone, Default)]
pub struct Auth {
    credentials: Vec<([u8; 32], Agent)>,
    review: Option<Arc<Reviewer>>,
    /// Wrong agent tokens per client address (attempts.rs), shared by every clone.
    failures: Arc<crate::attempts::Attempts>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Auth({} credentials, token review {})",
            self.credentials.len(),
            if self.review.is_some() { "on" } else { "off" }
        )
    }
}

impl Auth {
    /// The `[[agents]]` tokens, and the token review when `review` is given.
    pub fn from_config(
        agents: &[AgentAuth],
        review: Option<&crate::token_review::Settings>,
    ) -> anyhow::Result<Auth> {
        let mut auth = Auth {
            review: review.map(|r| Arc::new(Reviewer::new(r.clone()))),
            ..Auth::default()
        };
        for (i, a) in agents.iter().enumerate() {
            let token = match (&a.token, &a.token_file) {
                (Some(t), _) => t.0.clone(),
                (None, Some(path)) => std::fs::read_to_string(path)
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "agents[{i}]: cannot read token_file {}: {e}",
                            path.display()
                        )
                    })?
                    .trim_end()
                    .to_owned(),
                (None, None) => anyhow::bail!("agents[{i}] has no token"),
            };
            let setting = match (&a.token, &a.token_file) {
                (Some(_), _) => format!("agents[{i}].token"),
                (None, Some(path)) => format!("agents[{i}].token_file ({})", path.display()),
                (None, None) => unreachable!("refused above"),
            };
            crate::settings::check_token(&setting, &token).map_err(anyhow::Error::msg)?;
            auth.add(&token, a.nodes.clone(), a.cluster.clone());
        }
        Ok(auth)
    }

    /// A credential added at run time (the demo's own simulated agents).
    pub fn add(&mut self, token: &str, nodes: Vec<String>, cluster: Option<String>) {
        self.credentials
            .push((sha256(token.as_bytes()), Arc::new(Grant { nodes, cluster })));
    }

    /// The agent of an `Authorization` header value among the `[[agents]]` tokens and the
    /// reviews still remembered — never asking the API server (the listener's admission
    /// classifies with it).
    pub fn identify(&self, header: Option<&str>) -> Result<Agent, ApiError> {
        let token = sha256(bearer(header)?.as_bytes());
        self.known(&token)
            .or_else(|| self.reviewed(&token, model::time::now_ms()))
            .ok_or_else(|| ApiError::Unauthorized("unknown agent token".into()))
    }

    /// The `[[agents]]` credential of a token's hash, compared against every credential
    /// without stopping early.
    fn known(&self, token: &[u8; 32]) -> Option<Agent> {
        let mut found = None;
        for (hash, agent) in &self.credentials {
            if constant_time_eq(hash, token) && found.is_none() {
                found = Some(agent.clone());
            }
        }
        found
    }

    fn reviewed(&self, token: &[u8; 32], now_ms: i64) -> Option<Agent> {
        let review = self.review.as_ref()?;
        let node = review.cached(token, now_ms)?;
        Some(review_grant(review, node))
    }

    /// As [`Auth::identify`], asking the API server about a token neither list knows (with
    /// `[token_review]`), and counting a wrong token against `addr` (attempts.rs): while the
    /// address backs off, a wrong token is answered 429; a right one always passes.
    pub async fn check(
        &self,
        header: Option<&str>,
        addr: Option<std::net::IpAddr>,
        now_ms: i64,
    ) -> Result<Agent, ApiError> {
        let presented = bearer(header)?;
        let hash = sha256(presented.as_bytes());
        if let Some(agent) = self.known(&hash) {
            return Ok(agent);
        }
        let why = match &self.review {
            None => "unknown agent token".to_owned(),
            Some(review) => match review.node_of(presented, hash, now_ms).await {
                Ok(node) => return Ok(review_grant(review, node)),
                Err(e @ Refused::Unavailable(_)) => {
                    tracing::warn!(error = %e, "an agent's token could not be reviewed");
                    return Err(ApiError::RetryLater(e.to_string(), 10));
                }
                Err(Refused::NotAnAgent(why)) => why,
            },
        };
        // An audit line as `access::audit::refused` writes it (auth sits below access).
        tracing::warn!(
            target: "gpulens::audit",
            event = "refused",
            who = "-",
            why = %why,
            from = %addr.map_or_else(|| "-".into(), |a| a.to_string()),
            "refused"
        );
        let addr = addr.unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]));
        Err(match self.failures.failed(addr, now_ms) {
            Some(wait) => ApiError::TooManyRequests(
                format!(
                    "too many wrong agent tokens from your address (or from everywhere at \
                     once); a wrong one is answered so for {wait} s, a right one still works"
                ),
                wait,
            ),
            None => ApiError::Unauthorized(why),
        })
    }

    /// [`Auth::check`] of a request's `Authorization` header.
    pub async fn check_headers(
        &self,
        headers: &axum::http::HeaderMap,
        addr: Option<std::net::IpAddr>,
    ) -> Result<Agent, ApiError> {
        let header = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        self.check(header, addr, model::time::now_ms()).await
    }

    /// The cluster `agent` is bound to, if any.
    pub fn cluster(agent: &Agent) -> Option<&str> {
        agent.cluster.as_deref()
    }

    /// Checks that `agent` may send for `cluster`/`node`.
    pub fn authorize(agent: &Agent, cluster: &str, node: &str) -> Result<(), ApiError> {
        if let Some(allowed) = &agent.cluster
            && allowed != cluster
        {
            return Err(ApiError::Forbidden(format!(
                "this token is bound to cluster {allowed:?}, not {cluster:?}"
            )));
        }
        if agent.nodes.iter().any(|n| n == "*" || n == node) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(match agent.nodes.as_slice() {
                [only] => {
                    format!("this token is not bound to node {node:?} (it speaks for {only:?})")
                }
                _ => format!("this token is not bound to node {node:?}"),
            }))
        }
    }
}

/// The grant of a reviewed token: its node, and the cluster `[token_review]` names.
fn review_grant(review: &Reviewer, node: String) -> Agent {
    Arc::new(Grant {
        nodes: vec![node],
        cluster: review.cluster().map(str::to_owned),
    })
}

/// The token of an `Authorization: Bearer <token>` header value.
pub fn bearer(header: Option<&str>) -> Result<&str, ApiError> {
    let header = header.ok_or_else(|| {
        ApiError::Unauthorized(
            "missing Authorization header; send `Authorization: Bearer <token>`".into(),
        )
    })?;
    Ok(header
        .strip_prefix("Bearer ")
        .ok_or_else(|| ApiError::Unauthorized("Authorization must use the Bearer scheme".into()))?
        .trim())
}

use crate::signing::{constant_time_eq, sha256};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_bind_nodes() {
        let mut auth = Auth::default();
        auth.add("token-aaaa", vec!["n1".into()], None);
        auth.add("token-bbbb", vec!["*".into()], Some("lab".into()));
        assert!(auth.identify(None).is_err());
        assert!(auth.identify(Some("Basic x")).is_err());
        assert!(auth.identify(Some("Bearer nope")).is_err());
        let a = auth.identify(Some("Bearer token-aaaa")).unwrap();
        assert!(Auth::authorize(&a, "any", "n1").is_ok());
        assert!(matches!(
            Auth::authorize(&a, "any", "n2"),
            Err(ApiError::Forbidden(_))
        ));
        let b = auth.identify(Some("Bearer token-bbbb")).unwrap();
        assert!(Auth::authorize(&b, "lab", "n9").is_ok());
        assert!(Auth::authorize(&b, "prod", "n9").is_err());
    }
}
