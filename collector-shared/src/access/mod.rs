//! Who may see what (docs/security.md). People sign in through OpenID Connect, a trusted
//! reverse proxy, or a token on the sign-in form; programs send a bearer token; every route
//! declares what it needs where it is declared ([`routes::Routes`]); [`enforce`] applies it before any
//! handler runs. Handlers read the outcome as a [`Caller`]; those that show tenants to
//! team-scoped people filter with [`Caller::sees_team`].

pub mod audit;
pub mod cidr;
pub mod oidc;
pub mod principal;
pub mod proxy;
pub mod routes;
pub mod session;
pub mod settings;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::settings::Secret;
use crate::signing::sha256;
pub use principal::{Caller, Principal, Role, Via};
use routes::{Need, Teams};
pub use session::{Sessions, Source};
pub use settings::{Mode, Settings};

/// A token the collector knows: a program's (`[[access.tokens]]`) or an operator's
/// (`[[labels.operators]]`), kept as its SHA-256.
#[derive(Clone)]
struct Known {
    name: String,
    role: Role,
    teams: Option<BTreeSet<String>>,
    hash: [u8; 32],
}

impl Known {
    fn principal(&self, via: Via) -> Principal {
        Principal {
            name: self.name.clone(),
            role: self.role,
            teams: self.teams.clone(),
            via,
        }
    }
}

/// The access rules in force: built once from `[access]` and the operators of `[labels]`.
pub struct Access {
    mode: Mode,
    key: [u8; 32],
    pub secure_cookies: bool,
    default_role: Option<Role>,
    groups: Vec<settings::Group>,
    tokens: Vec<Known>,
    scrape_open: bool,
    scrape: Option<[u8; 32]>,
    proxy: Option<proxy::Trusted>,
    /// The OpenID Connect provider, when configured.
    pub oidc: Option<oidc::Provider>,
    /// Revoked sessions and failed attempts per address.
    pub sessions: Sessions,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("mode", &self.mode)
            .field("tokens", &self.tokens.len())
            .field("groups", &self.groups.len())
            .field("proxy", &self.proxy.is_some())
            .field("oidc", &self.oidc.is_some())
            .finish()
    }
}

impl Default for Access {
    fn default() -> Self {
        Access::new(&Settings::default(), &[]).expect("the default access settings are valid")
    }
}

/// A SHA-256 written in hex (checked by `Settings::check`).
fn unhex32(h: &str) -> [u8; 32] {
    crate::signing::unhex(h)
        .and_then(|b| b.try_into().ok())
        .unwrap_or([0; 32])
}

impl Access {
    /// `operators` are `[[labels.operators]]` (name, token): operator tokens, as before.
    pub fn new(s: &Settings, operators: &[(String, Secret)]) -> anyhow::Result<Access> {
        Access::with_stored_key(s, operators, None)
    }

    /// As [`Access::new`], with the deployment's stored session key (`Store::shared_secret`)
    /// for when `session_key` is not configured. Neither: a random key for this process.
    pub fn with_stored_key(
        s: &Settings,
        operators: &[(String, Secret)],
        stored: Option<[u8; 32]>,
    ) -> anyhow::Result<Access> {
        s.check()?;
        let mut tokens = Vec::new();
        for (name, token) in operators {
            tokens.push(Known {
                name: name.clone(),
                role: Role::Operator,
                teams: None,
                hash: sha256(token.0.as_bytes()),
            });
        }
        for t in &s.tokens {
            if tokens.iter().any(|k| k.name == t.name) {
                anyhow::bail!(
                    "access.tokens: {:?} is also an operator's name in [[labels.operators]]",
                    t.name
                );
            }
            let hash = match (&t.sha256, &t.token) {
                (Some(h), _) => unhex32(h),
                (None, Some(secret)) => sha256(secret.0.as_bytes()),
                (None, None) => unreachable!("checked"),
            };
            tokens.push(Known {
                name: t.name.clone(),
                role: t.role,
                teams: t.teams.clone(),
                hash,
            });
        }
        let scrape = match (&s.scrape.sha256, &s.scrape.token) {
            (Some(h), _) => Some(unhex32(h)),
            (None, Some(t)) => Some(sha256(t.0.as_bytes())),
            _ => None,
        };
        let mode = s.mode();
        let key = session_key(s, stored)?;
        Ok(Access {
            mode,
            key,
            secure_cookies: s.secure_cookies,
            default_role: s.default_role,
            groups: s.groups.clone(),
            tokens,
            scrape_open: s.scrape.open.unwrap_or(mode == Mode::Open),
            scrape,
            proxy: s
                .proxy
                .as_ref()
                .map(proxy::Trusted::new)
                .transpose()
                .map_err(|e| anyhow::anyhow!("access.proxy: {e}"))?,
            oidc: s.oidc.clone().map(oidc::Provider::new),
            sessions: Sessions::default(),
        })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The key that signs sessions and sign-ins in progress.
    pub fn key(&self) -> [u8; 32] {
        self.key
    }

    /// Whether people can sign in with a token on the sign-in form.
    pub fn has_tokens(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The known token a bearer token is, compared by hash against every known token.
    fn known_token(&self, token: &str) -> Option<&Known> {
        let h = sha256(token.as_bytes());
        let mut found = None;
        for k in &self.tokens {
            if crate::signing::constant_time_eq(&k.hash, &h) && found.is_none() {
                found = Some(k);
            }
        }
        found
    }

    /// The principal of a bearer token.
    fn by_token(&self, token: &str) -> Option<Principal> {
        self.known_token(token).map(|k| k.principal(Via::Token))
    }

    /// The principal a person with `groups` gets: the highest role among their groups'
    /// entries, limited to the union of their teams unless one entry is unlimited; the default
    /// role when no group is listed; `None` when there is no default either.
    pub fn from_groups(&self, name: &str, groups: &[String], via: Via) -> Option<Principal> {
        let matched: Vec<&settings::Group> = self
            .groups
            .iter()
            .filter(|g| groups.contains(&g.group))
            .collect();
        if matched.is_empty() {
            return self.default_role.map(|role| Principal {
                name: name.to_owned(),
                role,
                teams: None,
                via,
            });
        }
        let role = matched.iter().map(|g| g.role).max().expect("not empty");
        let teams = if matched.iter().any(|g| g.teams.is_none()) {
            None
        } else {
            Some(
                matched
                    .iter()
                    .flat_map(|g| g.teams.iter().flatten().cloned())
                    .collect(),
            )
        };
        Some(Principal {
            name: name.to_owned(),
            role,
            teams,
            via,
        })
    }

    /// The configured groups among `groups` (what a session cookie keeps).
    pub fn known_groups(&self, groups: &[String]) -> Vec<String> {
        let mut out: Vec<String> = groups
            .iter()
            .filter(|g| self.groups.iter().any(|x| x.group == **g))
            .cloned()
            .collect();
        out.sort();
        out.dedup();
        out.truncate(session::MAX_GROUPS);
        out
    }

    /// A session cookie for `source`.
    pub fn issue(&self, source: Source, now_ms: i64) -> String {
        session::issue(&self.key, source, now_ms)
    }

    /// The `Set-Cookie` value that stores a session, or clears it (`None`).
    pub fn session_cookie(&self, value: Option<&str>) -> String {
        let secure = if self.secure_cookies { "; Secure" } else { "" };
        match value {
            Some(v) => format!(
                "{}={v}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
                session::COOKIE,
                session::LIFETIME_MS / 1000
            ),
            None => format!(
                "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}",
                session::COOKIE
            ),
        }
    }

    /// The principal of a session cookie, if it is genuine, unexpired, not revoked, and what
    /// it names still gives a role.
    pub fn from_session(&self, cookie: &str, now_ms: i64) -> Option<Principal> {
        if self.sessions.is_revoked(cookie) {
            return None;
        }
        match session::verify(&self.key, cookie, now_ms)? {
            Source::Token { n, b } => self
                .tokens
                .iter()
                .find(|k| k.name == n && token_binding(&self.key, k) == b)
                .map(|k| k.principal(Via::Session)),
            Source::Oidc { n, g } => self.from_groups(&n, &g, Via::Session),
        }
    }

    /// Whether the request carries a credential that verifies (a known token, the trusted
    /// proxy's headers for a user with a role, a live session), resolved as every route does
    /// but without side effects: nothing is counted or audited. Used to give verified callers
    /// their own in-flight slots before anything else runs (admission.rs).
    pub fn verifies(&self, headers: &HeaderMap, addr: Option<IpAddr>, now_ms: i64) -> bool {
        matches!(
            self.presented(headers, addr, now_ms, false),
            Presented::Token(Some(_))
                | Presented::Proxy {
                    principal: Some(_),
                    ..
                }
                | Presented::Session(..)
        )
    }

    /// A token typed on the sign-in form: the session source it opens.
    pub fn sign_in_with_token(&self, token: &str) -> Option<(Principal, Source)> {
        let known = self.known_token(token)?;
        let source = Source::Token {
            n: known.name.clone(),
            b: token_binding(&self.key, known),
        };
        Some((known.principal(Via::Token), source))
    }

    /// The CSRF token of forms shown to `caller` (sessions: derived from the cookie; proxy
    /// users: from their name).
    pub fn csrf(&self, caller: &Caller) -> Option<String> {
        let p = caller.principal.as_ref()?;
        match (&caller.session, p.via) {
            (Some(cookie), _) => Some(session::csrf(&self.key, cookie)),
            (None, Via::Proxy) => Some(session::csrf(&self.key, &format!("proxy:{}", p.name))),
            _ => None,
        }
    }

    /// The credential a request presents, resolved without side effects. Where a token is not
    /// needed (`strict` false: public routes, reading in open mode), one that is not a
    /// person's or a program's (an agent's, say) is passed over for the proxy's headers or a
    /// session, rather than being a wrong token.
    fn presented(
        &self,
        headers: &HeaderMap,
        addr: Option<IpAddr>,
        now: i64,
        strict: bool,
    ) -> Presented {
        let token = bearer_of(headers);
        let known = token.and_then(|t| self.by_token(t));
        if headers.contains_key(header::AUTHORIZATION) && (known.is_some() || strict) {
            return match token {
                Some(_) => Presented::Token(known),
                None => Presented::NotBearer,
            };
        }
        if let Some(proxy) = &self.proxy
            && let Some((user, groups)) = proxy.identity(headers, addr)
        {
            let principal = self.from_groups(&user, &groups, Via::Proxy);
            return Presented::Proxy {
                user,
                groups,
                principal,
            };
        }
        session::from_header(
            headers.get(header::COOKIE).and_then(|v| v.to_str().ok()),
            session::COOKIE,
        )
        .and_then(|cookie| {
            let p = self.from_session(&cookie, now)?;
            Some(Presented::Session(cookie, p))
        })
        .unwrap_or(Presented::Nothing)
    }

    /// Who a request comes from: [`Access::presented`], with wrong tokens counted against
    /// the address (attempts.rs) and refusals audited. `strict`: a wrong token or an unmapped
    /// proxy user is an error; otherwise they count as nobody.
    fn identify(
        &self,
        headers: &HeaderMap,
        addr: Option<IpAddr>,
        now: i64,
        strict: bool,
    ) -> Result<Caller, Refusal> {
        let mut caller = Caller {
            addr,
            ..Caller::default()
        };
        match self.presented(headers, addr, now, strict) {
            Presented::NotBearer => {
                return Err(Refusal::SignIn(
                    "Authorization must be `Bearer <token>`".into(),
                ));
            }
            // A token that verifies is never refused for what others did from this address.
            Presented::Token(None) => {
                let ip = addr.unwrap_or(IpAddr::from([0, 0, 0, 0]));
                let wait = self.sessions.attempts.failed(ip, now);
                audit::refused("unknown token", None, &caller);
                return Err(match wait {
                    Some(wait) => Refusal::TooMany(wait),
                    None => Refusal::SignIn("unknown token".into()),
                });
            }
            Presented::Proxy {
                user,
                groups,
                principal: None,
            } => {
                audit::refused("no role for the proxy's user", Some(&user), &caller);
                return Err(Refusal::Forbidden(format!(
                    "signed in as {user:?} by the proxy, but none of the groups given for you ({}) has a role in [[access.groups]]",
                    groups.join(", ")
                )));
            }
            Presented::Token(Some(p))
            | Presented::Proxy {
                principal: Some(p), ..
            } => {
                caller.principal = Some(p);
            }
            Presented::Session(cookie, p) => {
                caller.principal = Some(p);
                caller.session = Some(cookie);
            }
            Presented::Nothing => {}
        }
        Ok(caller)
    }

    /// Whether `caller` may use a route needing `need` at `path`.
    fn permit(&self, need: Need, path: &str, caller: &Caller) -> Result<(), Refusal> {
        match need {
            Need::Public | Need::Agent => Ok(()),
            Need::Scrape => {
                if caller.principal.is_some() {
                    return Ok(());
                }
                Err(Refusal::SignIn(
                    "/metrics needs the scrape token or a viewer's token ([access.scrape])".into(),
                ))
            }
            Need::Read(teams) => {
                let Some(p) = &caller.principal else {
                    return if self.mode == Mode::Open {
                        Ok(())
                    } else {
                        Err(Refusal::SignIn("sign in to see this".into()))
                    };
                };
                match (&p.teams, teams) {
                    (Some(scope), Teams::AllTeams) => Err(Refusal::Forbidden(format!(
                        "you see the tenants of {} only, and this shows every team's",
                        scope.iter().cloned().collect::<Vec<_>>().join(", ")
                    ))),
                    _ => Ok(()),
                }
            }
            Need::Operate(teams) => {
                let Some(p) = &caller.principal else {
                    return Err(Refusal::SignIn("sign in as an operator to do this".into()));
                };
                if p.role < Role::Operator {
                    return Err(Refusal::Forbidden(format!(
                        "{} is a {}; this needs an operator",
                        p.name,
                        p.role.as_str()
                    )));
                }
                // A browser's cookie or proxy headers ride along on cross-site requests: the API
                // changes things for bearer tokens only (the dashboard's forms carry a CSRF token).
                if path.starts_with("/api/") && p.via != Via::Token {
                    return Err(Refusal::SignIn(
                        "the API changes things for `Authorization: Bearer <operator token>` only"
                            .into(),
                    ));
                }
                match (&p.teams, teams) {
                    (Some(scope), Teams::AllTeams) => Err(Refusal::Forbidden(format!(
                        "{} operates for {} only, and this changes what every team on a node \
                         runs; an operator without a team scope does it",
                        p.name,
                        scope.iter().cloned().collect::<Vec<_>>().join(", ")
                    ))),
                    _ => Ok(()),
                }
            }
        }
    }
}

/// The session key: configured, or the deployment's stored random key, or random for this
/// process. Never derived from the rest of the configuration: token names, token hashes and
/// the scrape token's hash are meant to be shareable, and a key computed from them could be
/// computed by anyone who reads the file.
fn session_key(s: &Settings, stored: Option<[u8; 32]>) -> anyhow::Result<[u8; 32]> {
    let mut h = Sha256::new();
    h.update(b"gpulens sessions v3");
    match (&s.session_key, stored) {
        (Some(k), _) => h.update(k.0.as_bytes()),
        (None, Some(k)) => h.update(k),
        (None, None) => h.update(crate::signing::random_key()?),
    }
    Ok(h.finalize().into())
}

/// What a token session is bound to besides its name: a fingerprint of the token itself, so
/// that a token replaced under the same name ends the sessions opened with the old one. It
/// is keyed, so the (readable) cookie says nothing about the token's hash.
fn token_binding(key: &[u8; 32], k: &Known) -> String {
    let mut message = b"token binding:".to_vec();
    message.extend_from_slice(&k.hash);
    crate::signing::hex(&crate::signing::hmac_sha256(key, &message)[..12])
}

/// What a request presents as its credential ([`Access::presented`]).
enum Presented {
    /// A bearer token: whose, if it is known.
    Token(Option<Principal>),
    /// An `Authorization` header that is not `Bearer <token>`, where a token is needed.
    NotBearer,
    /// The trusted proxy's headers: the user, their groups, and what those give.
    Proxy {
        user: String,
        groups: Vec<String>,
        principal: Option<Principal>,
    },
    /// A live session cookie and whose it is.
    Session(String, Principal),
    Nothing,
}

/// Why a request is refused.
#[derive(Debug)]
enum Refusal {
    /// Not signed in (or a wrong token): 401, or the sign-in page for a page.
    SignIn(String),
    /// Signed in, but not allowed: 403.
    Forbidden(String),
    /// Too many wrong tokens from this address: 429 with the seconds to wait.
    TooMany(u64),
}

impl Refusal {
    fn respond(self, path: &str, method: &axum::http::Method, uri: &axum::http::Uri) -> Response {
        let api = path.starts_with("/api/") || path == "/metrics";
        match self {
            Refusal::TooMany(wait) => ApiError::TooManyRequests(
                format!(
                    "too many wrong tokens from your address (or from everywhere at once); a \
                     wrong one is answered so for {wait} s, a right one still works"
                ),
                wait,
            )
            .into_response(),
            Refusal::SignIn(msg) if api => {
                let mut r = ApiError::Unauthorized(msg).into_response();
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"gpulens\""),
                );
                r
            }
            Refusal::Forbidden(msg) if api => ApiError::Forbidden(msg).into_response(),
            Refusal::SignIn(_) if method == axum::http::Method::GET => {
                let next = uri.path_and_query().map_or("/", |p| p.as_str());
                Redirect::to(&format!("/login?next={}", web::format::enc(next))).into_response()
            }
            Refusal::SignIn(msg) => page(StatusCode::UNAUTHORIZED, "Sign in", msg),
            Refusal::Forbidden(msg) => page(StatusCode::FORBIDDEN, "Not for your role", msg),
        }
    }
}

fn page(status: StatusCode, title: &str, msg: String) -> Response {
    let frame = web::Frame {
        title: title.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..web::Frame::default()
    };
    (status, Html(web::pages::problem(frame, msg))).into_response()
}

/// What the middleware needs: the access rules in force and the table of every route's rule.
#[derive(Clone)]
pub struct Guard {
    pub access: Arc<Access>,
    pub table: Arc<[routes::Rule]>,
}

/// The middleware: looks the route up in the route table ([`routes::Routes`]), finds out who
/// calls, refuses or passes the request on with a [`Caller`] in its extensions.
pub async fn enforce(State(guard): State<Guard>, mut req: Request, next: Next) -> Response {
    let access = &guard.access;
    let Some(path) = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
    else {
        return next.run(req).await;
    };
    let Some(rule) = routes::find(&guard.table, req.method().as_str(), &path) else {
        if routes::known_path(&guard.table, &path) {
            // Another method of a known route: the router answers 405.
            return next.run(req).await;
        }
        tracing::error!(%path, "this route was not declared through access::routes::Routes; refused");
        return ApiError::Internal(format!("no access rule for {path}")).into_response();
    };
    if rule.need == Need::Agent {
        return next.run(req).await;
    }
    if rule.need == Need::Scrape && (access.scrape_open || access.is_scrape_token(req.headers())) {
        return next.run(req).await;
    }
    let addr = principal::peer(req.extensions());
    let strict = match rule.need {
        Need::Public => false,
        Need::Read(_) | Need::Scrape => access.mode == Mode::SignIn,
        Need::Agent | Need::Operate(_) => true,
    };
    let caller = match access.identify(req.headers(), addr, model::time::now_ms(), strict) {
        Ok(c) => c,
        // Public routes serve nobody in particular rather than refusing.
        Err(_) if rule.need == Need::Public => Caller {
            addr,
            ..Caller::default()
        },
        Err(r) => return r.respond(&path, req.method(), req.uri()),
    };
    if let Err(r) = access.permit(rule.need, &path, &caller) {
        return r.respond(&path, req.method(), req.uri());
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

impl Access {
    /// Whether the request carries the scrape token.
    fn is_scrape_token(&self, headers: &HeaderMap) -> bool {
        match (&self.scrape, bearer_hash(headers)) {
            (Some(want), Some(got)) => crate::signing::constant_time_eq(want, &got),
            _ => false,
        }
    }
}

/// The token of an `Authorization: Bearer …` header.
fn bearer_of(headers: &HeaderMap) -> Option<&str> {
    crate::agent_auth::bearer(headers.get(header::AUTHORIZATION)?.to_str().ok()).ok()
}

fn bearer_hash(headers: &HeaderMap) -> Option<[u8; 32]> {
    Some(sha256(bearer_of(headers)?.as_bytes()))
}
