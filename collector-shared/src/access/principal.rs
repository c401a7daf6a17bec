//! Who is asking: a role, how they proved it, and what the access middleware hands each
//! handler about the request.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use serde::{Deserialize, Serialize};

/// What someone may do. Ordered: each role may do what the ones before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The dashboard and the read API.
    Viewer,
    /// Also approves and applies label actions.
    Operator,
    /// Everything an operator may; reserved for administration routes.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

/// How a caller proved who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A bearer token (a program, or an operator's CLI).
    Token,
    /// A dashboard session (token on the sign-in form, or OpenID Connect).
    Session,
    /// The trusted reverse proxy's headers.
    Proxy,
}

/// Someone signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    /// The teams whose tenants this person sees; `None`: every team.
    pub teams: Option<BTreeSet<String>>,
    pub via: Via,
}

/// What the access middleware learned about a request; handlers take it as an extractor.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// Who is signed in; `None`: nobody (open mode lets them read).
    pub principal: Option<Principal>,
    /// The session cookie's value, when signed in through one.
    pub session: Option<String>,
    pub addr: Option<IpAddr>,
}

impl Caller {
    /// Whether this caller may see tenants of `team` (tenants without a team are seen only
    /// by callers who see every team).
    pub fn sees_team(&self, team: Option<&str>) -> bool {
        match self.principal.as_ref().and_then(|p| p.teams.as_ref()) {
            None => true,
            Some(teams) => team.is_some_and(|t| teams.contains(t)),
        }
    }

    /// Whether this caller may see something that concerns all of `teams` (a finding names
    /// its team and its tenants' teams; `None` for a tenant without one). Nothing named:
    /// seen by everyone (a GPU's hardware errors).
    pub fn sees_teams<'a>(&self, teams: impl IntoIterator<Item = Option<&'a str>>) -> bool {
        match self.scope() {
            None => true,
            Some(scope) => teams
                .into_iter()
                .all(|t| t.is_some_and(|t| scope.contains(t))),
        }
    }

    /// The teams this caller is limited to, if any.
    pub fn scope(&self) -> Option<&BTreeSet<String>> {
        self.principal.as_ref().and_then(|p| p.teams.as_ref())
    }

    pub fn name(&self) -> Option<&str> {
        self.principal.as_ref().map(|p| p.name.as_str())
    }

    pub fn is_operator(&self) -> bool {
        self.principal
            .as_ref()
            .is_some_and(|p| p.role >= Role::Operator)
    }

    /// Where the request came from, for logs and audit lines.
    pub fn from(&self) -> String {
        self.addr.map_or_else(|| "-".into(), |a| a.to_string())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Caller, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Caller>()
            .cloned()
            .unwrap_or_else(|| Caller {
                addr: peer(&parts.extensions),
                ..Caller::default()
            }))
    }
}

pub(super) fn peer(ext: &axum::http::Extensions) -> Option<IpAddr> {
    ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip())
}
