//! The `[access]` section: whether reading needs sign-in, how people sign in (OpenID Connect,
//! a trusted reverse proxy, a token on the sign-in form), which groups get which role and
//! team scope, tokens for programs, and the scrape token for `/metrics` (docs/security.md).

use std::collections::BTreeSet;

use serde::Deserialize;

use super::principal::Role;
use crate::settings::Secret;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// `"sign-in"`: the dashboard and the read API need a signed-in person or a token;
    /// `"open"`: they answer anyone (approvals still need an operator). Unset: sign-in as soon
    /// as a way to sign in is configured (`oidc`, `proxy` or `tokens`), open otherwise.
    #[serde(default)]
    pub mode: Option<Mode>,
    /// The key that signs session cookies, shared by every collector of a deployment (a
    /// secret: a file or the environment). Unset: a random key generated once and kept in the
    /// database (`gpulens rotate-session-key` replaces it); never derived from the rest of the
    /// configuration, which may be shared.
    #[serde(default)]
    pub session_key: Option<Secret>,
    /// Mark cookies `Secure` (the dashboard is reached over HTTPS, directly or via a proxy).
    #[serde(default)]
    pub secure_cookies: bool,
    /// The role of a signed-in person none of whose groups is listed in `groups`. Unset:
    /// such a person is refused.
    #[serde(default)]
    pub default_role: Option<Role>,
    /// Groups (from the OpenID `groups_claim` or the proxy's groups header) and what they give.
    #[serde(default)]
    pub groups: Vec<Group>,
    /// Tokens for programs (scripts, Grafana): `Authorization: Bearer <token>`.
    #[serde(default)]
    pub tokens: Vec<Token>,
    #[serde(default)]
    pub scrape: Scrape,
    #[serde(default)]
    pub oidc: Option<Oidc>,
    #[serde(default)]
    pub proxy: Option<Proxy>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    SignIn,
    Open,
}

/// `[[access.groups]]`: members of `group` get `role`, limited to `teams` when given.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    pub group: String,
    pub role: Role,
    /// Tenants of these teams only (and the fleet's totals). Unset: every team.
    #[serde(default)]
    pub teams: Option<BTreeSet<String>>,
}

/// `[[access.tokens]]`: a token for a program. Give `sha256` (hex of the token's SHA-256, so
/// the config holds no usable secret) or `token` (a secret: value, `${ENV}` or file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Token {
    /// Shown in logs and audit lines as who acted.
    pub name: String,
    #[serde(default = "viewer")]
    pub role: Role,
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default)]
    pub token: Option<Secret>,
    #[serde(default)]
    pub teams: Option<BTreeSet<String>>,
}

fn viewer() -> Role {
    Role::Viewer
}

/// `[access.scrape]`: who may read `/metrics`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scrape {
    /// `/metrics` answers anyone even in sign-in mode. Unset: open in open mode, and in
    /// sign-in mode only to the scrape token or a viewer's token.
    #[serde(default)]
    pub open: Option<bool>,
    /// Hex SHA-256 of the scrape token (or `token`).
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default)]
    pub token: Option<Secret>,
}

/// `[access.oidc]`: sign-in through an OpenID Connect provider (authorization code + PKCE).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Oidc {
    /// The provider's issuer URL (its discovery document is `<issuer>/.well-known/openid-configuration`).
    pub issuer: String,
    pub client_id: String,
    /// Unset: a public client (PKCE alone).
    #[serde(default)]
    pub client_secret: Option<Secret>,
    /// This collector's callback as the provider knows it: `https://<host>/auth/callback`.
    pub redirect_url: String,
    /// Scopes asked for besides `openid`.
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// The ID token claim that lists the person's groups.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// The claim shown as the person's name (falls back to `email`, then `sub`: the first that
    /// is 1–256 bytes without control characters).
    #[serde(default = "default_name_claim")]
    pub name_claim: String,
    /// The label of the sign-in button.
    #[serde(default = "default_display_name")]
    pub display_name: String,
}

fn default_scopes() -> Vec<String> {
    vec!["profile".into(), "email".into(), "groups".into()]
}
fn default_groups_claim() -> String {
    "groups".into()
}
fn default_name_claim() -> String {
    "preferred_username".into()
}
fn default_display_name() -> String {
    "single sign-on".into()
}

/// `[access.proxy]`: a reverse proxy (oauth2-proxy and the like) that signs people in and
/// passes who they are in headers. The headers count only on connections from `trusted`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Proxy {
    /// Addresses or CIDR blocks of the proxy (`10.0.0.7`, `10.0.0.0/24`, `fd00::/8`).
    pub trusted: Vec<String>,
    #[serde(default = "default_user_header")]
    pub user_header: String,
    /// Comma-separated groups. Unset: people get `default_role`.
    #[serde(default = "default_groups_header")]
    pub groups_header: Option<String>,
}

fn default_user_header() -> String {
    "x-forwarded-user".into()
}
fn default_groups_header() -> Option<String> {
    Some("x-forwarded-groups".into())
}

impl Settings {
    /// The mode in effect (see `mode`).
    pub fn mode(&self) -> Mode {
        self.mode.unwrap_or(
            if self.oidc.is_some() || self.proxy.is_some() || !self.tokens.is_empty() {
                Mode::SignIn
            } else {
                Mode::Open
            },
        )
    }

    pub fn check(&self) -> anyhow::Result<()> {
        let mut names = BTreeSet::new();
        for (i, t) in self.tokens.iter().enumerate() {
            if t.sha256.is_some() == t.token.is_some() {
                anyhow::bail!(
                    "access.tokens[{i}] ({}) needs exactly one of sha256 or token",
                    t.name
                );
            }
            if let Some(h) = &t.sha256 {
                check_hex(h).map_err(|e| anyhow::anyhow!("access.tokens[{i}].sha256: {e}"))?;
            }
            if let Some(secret) = &t.token {
                crate::settings::check_token(&format!("access.tokens[{i}].token"), &secret.0)
                    .map_err(anyhow::Error::msg)?;
            }
            if !names.insert(t.name.as_str()) {
                anyhow::bail!("access.tokens: the name {:?} is used twice", t.name);
            }
        }
        if self.scrape.sha256.is_some() && self.scrape.token.is_some() {
            anyhow::bail!("[access.scrape] takes sha256 or token, not both");
        }
        if let Some(secret) = &self.scrape.token {
            crate::settings::check_token("access.scrape.token", &secret.0)
                .map_err(anyhow::Error::msg)?;
        }
        if let Some(h) = &self.scrape.sha256 {
            check_hex(h).map_err(|e| anyhow::anyhow!("access.scrape.sha256: {e}"))?;
        }
        if let Some(o) = &self.oidc {
            for (what, url) in [("issuer", &o.issuer), ("redirect_url", &o.redirect_url)] {
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    anyhow::bail!("access.oidc.{what} must be an http(s) URL, not {url:?}");
                }
            }
            if !o.redirect_url.ends_with("/auth/callback") {
                anyhow::bail!(
                    "access.oidc.redirect_url must be this collector's /auth/callback, e.g. https://gpulens.example.com/auth/callback"
                );
            }
        }
        if let Some(p) = &self.proxy {
            if p.trusted.is_empty() {
                anyhow::bail!(
                    "access.proxy.trusted is empty: name the proxy's addresses, or the headers could come from anyone"
                );
            }
            for t in &p.trusted {
                super::cidr::Cidr::parse(t)
                    .map_err(|e| anyhow::anyhow!("access.proxy.trusted: {e}"))?;
            }
        }
        if self.mode() == Mode::SignIn
            && self.oidc.is_none()
            && self.proxy.is_none()
            && self.tokens.is_empty()
        {
            tracing::warn!(
                "[access] mode = \"sign-in\" with no oidc, proxy or tokens: only operator tokens can sign in"
            );
        }
        Ok(())
    }
}

/// A SHA-256 in hex.
fn check_hex(h: &str) -> Result<(), String> {
    if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err("expected 64 hex digits (the output of `printf %s TOKEN | sha256sum`)".into())
    }
}
