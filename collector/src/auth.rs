//! Agent authentication: a bearer token identifies a credential, and the credential names the
//! nodes (and optionally the cluster) it may send for, so a node's identity is bound to its
//! batches.

use std::path::PathBuf;

use serde::Deserialize;

use crate::error::ApiError;
use crate::settings::Secret;

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

#[derive(Debug, Clone)]
struct Credential {
    /// The token's SHA-256: tokens are compared as hashes, of one length whatever is sent.
    token: [u8; 32],
    nodes: Vec<String>,
    cluster: Option<String>,
}

/// The credentials the collector accepts.
#[derive(Clone, Default)]
pub struct Auth {
    credentials: Vec<Credential>,
    /// Wrong agent tokens per client address (attempts.rs), shared by every clone.
    failures: std::sync::Arc<crate::attempts::Attempts>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Auth({} credentials)", self.credentials.len())
    }
}

impl Auth {
    pub fn from_config(agents: &[AgentAuth]) -> anyhow::Result<Auth> {
        let mut credentials = Vec::new();
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
            credentials.push(Credential {
                token: sha256(token.as_bytes()),
                nodes: a.nodes.clone(),
                cluster: a.cluster.clone(),
            });
        }
        Ok(Auth {
            credentials,
            failures: Default::default(),
        })
    }

    /// A credential added at run time (the demo's own simulated agents).
    pub fn add(&mut self, token: &str, nodes: Vec<String>, cluster: Option<String>) {
        self.credentials.push(Credential {
            token: sha256(token.as_bytes()),
            nodes,
            cluster,
        });
    }

    /// Finds the credential of an `Authorization` header value.
    pub fn identify(&self, header: Option<&str>) -> Result<usize, ApiError> {
        let token = sha256(bearer(header)?.as_bytes());
        // Compare against every credential without stopping early.
        let mut found = None;
        for (i, c) in self.credentials.iter().enumerate() {
            if constant_time_eq(&c.token, &token) && found.is_none() {
                found = Some(i);
            }
        }
        found.ok_or_else(|| ApiError::Unauthorized("unknown agent token".into()))
    }

    /// As [`Auth::identify`], counting a wrong token against `addr` (attempts.rs): while the
    /// address backs off, a wrong token is answered 429; a right one always passes.
    pub fn check(
        &self,
        header: Option<&str>,
        addr: Option<std::net::IpAddr>,
        now_ms: i64,
    ) -> Result<usize, ApiError> {
        self.identify(header).map_err(|e| {
            // Only a presented token is a guess; a request without one is simply refused.
            if bearer(header).is_err() {
                return e;
            }
            // An audit line as `access::audit::refused` writes it (auth sits below access).
            tracing::warn!(
                target: "gpulens::audit",
                event = "refused",
                who = "-",
                why = "unknown agent token",
                from = %addr.map_or_else(|| "-".into(), |a| a.to_string()),
                "refused"
            );
            let addr = addr.unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]));
            match self.failures.failed(addr, now_ms) {
                Some(wait) => ApiError::TooManyRequests(
                    format!(
                        "too many wrong agent tokens from your address (or from everywhere at \
                         once); a wrong one is answered so for {wait} s, a right one still works"
                    ),
                    wait,
                ),
                None => e,
            }
        })
    }

    /// The cluster credential `id` is bound to, if any.
    pub fn cluster(&self, id: usize) -> Option<&str> {
        self.credentials[id].cluster.as_deref()
    }

    /// Checks that credential `id` may send for `cluster`/`node`.
    pub fn authorize(&self, id: usize, cluster: &str, node: &str) -> Result<(), ApiError> {
        let c = &self.credentials[id];
        if let Some(allowed) = &c.cluster
            && allowed != cluster
        {
            return Err(ApiError::Forbidden(format!(
                "this token is bound to cluster {allowed:?}, not {cluster:?}"
            )));
        }
        if c.nodes.iter().any(|n| n == "*" || n == node) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!(
                "this token is not bound to node {node:?}"
            )))
        }
    }
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
        assert!(auth.authorize(a, "any", "n1").is_ok());
        assert!(matches!(
            auth.authorize(a, "any", "n2"),
            Err(ApiError::Forbidden(_))
        ));
        let b = auth.identify(Some("Bearer token-bbbb")).unwrap();
        assert!(auth.authorize(b, "lab", "n9").is_ok());
        assert!(auth.authorize(b, "prod", "n9").is_err());
    }
}
