//! Signing in and out: `/login` (the ways configured: single sign-on, a token), the OpenID
//! Connect round trip (`/auth/oidc` → provider → `/auth/callback`), and `/logout`. Sessions
//! are signed cookies (access/session.rs); every outcome is an audit line.

use super::page::*;
use collector_shared::access::oidc::{self, FLOW_COOKIE};
use collector_shared::access::{Source, audit, session};

#[derive(Debug, Default, Deserialize)]
pub struct NextQuery {
    #[serde(default)]
    pub next: Option<String>,
}

fn login_view(state: &DashboardState, next: &str, error: Option<String>) -> pages::LoginView {
    pages::LoginView {
        error,
        next: oidc::safe_next(next).to_owned(),
        sso: state
            .access
            .oidc
            .as_ref()
            .map(|o| o.settings.display_name.clone()),
        tokens: state.access.has_tokens(),
        open: state.access.mode() == collector_shared::access::Mode::Open,
    }
}

pub async fn login_page(
    State(state): State<DashboardState>,
    caller: Caller,
    Query(q): Query<NextQuery>,
) -> Html<String> {
    let next = q.next.unwrap_or_else(|| "/".into());
    Html(pages::login(
        frame(&state, &caller, "Sign in"),
        login_view(&state, &next, None),
    ))
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    pub token: String,
    #[serde(default)]
    pub next: Option<String>,
}

/// Whether a form post comes from another site (login CSRF: a page elsewhere signing the
/// visitor in as someone else). Browsers say so in `Sec-Fetch-Site`, or at least send an
/// `Origin`; programs that send neither are not browsers and cannot be led by another site.
pub fn cross_site(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return !matches!(site, "same-origin" | "none");
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, h)| h.trim_end_matches('/'));
    origin_host.is_none() || origin_host != host
}

pub async fn login(
    State(state): State<DashboardState>,
    caller: Caller,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let now = model::time::now_ms();
    if cross_site(&headers) {
        audit::refused("sign-in form posted from another site", None, &caller);
        return (
            StatusCode::FORBIDDEN,
            Html(pages::login(
                frame(&state, &caller, "Sign in"),
                login_view(
                    &state,
                    "/",
                    Some(
                        "This sign-in came from another site and was refused; sign in here.".into(),
                    ),
                ),
            )),
        )
            .into_response();
    }
    let next = form.next.as_deref().unwrap_or("/recommendations");
    // Without a socket (tests driving the router) every caller shares one record.
    let addr = caller.addr.unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]));
    let sessions = &state.access.sessions;
    // The token is checked first: a right one is never refused for what others did from this
    // address; a wrong one counts, and is answered 429 while the address backs off.
    let Some((principal, source)) = state.access.sign_in_with_token(form.token.trim()) else {
        let wait = sessions.attempts.failed(addr, now);
        audit::refused("wrong token on the sign-in form", None, &caller);
        let (status, message) = match wait {
            Some(wait) => (
                StatusCode::TOO_MANY_REQUESTS,
                format!("Too many wrong tokens from your address; try again in {wait} s."),
            ),
            None => (
                StatusCode::UNAUTHORIZED,
                "That token is not known here.".to_owned(),
            ),
        };
        let mut resp = (
            status,
            Html(pages::login(
                frame(&state, &caller, "Sign in"),
                login_view(&state, next, Some(message)),
            )),
        )
            .into_response();
        if let Some(wait) = wait {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(wait));
        }
        return resp;
    };
    audit::signed_in(&principal, "token", &caller);
    let cookie = state.access.issue(source, now);
    (
        [(
            header::SET_COOKIE,
            state.access.session_cookie(Some(&cookie)),
        )],
        Redirect::to(oidc::safe_next(next)),
    )
        .into_response()
}

/// Signs out: the session's cookie is revoked on the server (a copy of it no longer works)
/// and cleared in the browser.
pub async fn logout(State(state): State<DashboardState>, caller: Caller) -> Response {
    if let Some(cookie) = &caller.session {
        // Only a genuine session reaches here: the list cannot be filled with made-up values.
        state.access.sessions.revoke(cookie, model::time::now_ms());
        audit::signed_out(&caller);
    }
    (
        [(header::SET_COOKIE, state.access.session_cookie(None))],
        Redirect::to("/"),
    )
        .into_response()
}

/// Starts an OpenID Connect sign-in: to the provider, with the flow in a short-lived cookie.
pub async fn oidc_start(
    State(state): State<DashboardState>,
    caller: Caller,
    Query(q): Query<NextQuery>,
) -> Response {
    let Some(provider) = &state.access.oidc else {
        return PageError(
            StatusCode::NOT_FOUND,
            "Single sign-on is not configured here ([access.oidc]).".into(),
        )
        .into_response();
    };
    let next = q.next.unwrap_or_else(|| "/".into());
    match provider
        .start(&state.access.key(), &next, model::time::now_ms())
        .await
    {
        Ok((url, flow)) => (
            [(header::SET_COOKIE, flow_cookie(&state, Some(&flow)))],
            Redirect::to(&url),
        )
            .into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "OpenID Connect sign-in could not start");
            (
                StatusCode::BAD_GATEWAY,
                Html(pages::login(
                    frame(&state, &caller, "Sign in"),
                    login_view(
                        &state,
                        &next,
                        Some(format!("The sign-in provider cannot be reached: {e}")),
                    ),
                )),
            )
                .into_response()
        }
    }
}

/// The flow cookie: `SameSite=Lax`, because the provider sends the browser back with a
/// cross-site navigation; scoped to `/auth/`.
fn flow_cookie(state: &DashboardState, value: Option<&str>) -> String {
    let secure = if state.access.secure_cookies {
        "; Secure"
    } else {
        ""
    };
    match value {
        Some(v) => format!(
            "{FLOW_COOKIE}={v}; Path=/auth/; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
            oidc::FLOW_LIFETIME_MS / 1000
        ),
        None => format!("{FLOW_COOKIE}=; Path=/auth/; HttpOnly; SameSite=Lax; Max-Age=0{secure}"),
    }
}

#[derive(Debug, Deserialize)]
pub struct Callback {
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub error_description: Option<String>,
}

/// Spends a sign-in in progress: its flow cookie is good for one callback, whatever its outcome
/// (it could be presented again for its ten minutes). False when it was spent.
fn spend(state: &DashboardState, flow: Option<&str>, now: i64) -> bool {
    let Some(f) = flow else { return true };
    if state.access.sessions.is_revoked(f) {
        return false;
    }
    state.access.sessions.revoke(f, now);
    true
}

/// The provider sends the browser back here: verify, open a session, go where they were going.
pub async fn oidc_callback(
    State(state): State<DashboardState>,
    caller: Caller,
    headers: HeaderMap,
    Query(cb): Query<Callback>,
) -> Response {
    let refuse = |status: StatusCode, msg: String| {
        (
            status,
            [(header::SET_COOKIE, flow_cookie(&state, None))],
            Html(pages::login(
                frame(&state, &caller, "Sign in"),
                login_view(&state, "/", Some(msg)),
            )),
        )
            .into_response()
    };
    let Some(provider) = &state.access.oidc else {
        return refuse(
            StatusCode::NOT_FOUND,
            "Single sign-on is not configured here.".into(),
        );
    };
    if let Some(e) = cb.error {
        audit::refused("the provider refused the sign-in", None, &caller);
        let detail = cb.error_description.unwrap_or_default();
        return refuse(
            StatusCode::UNAUTHORIZED,
            format!("The sign-in provider said no: {e} {detail}")
                .trim()
                .chars()
                .take(300)
                .collect(),
        );
    }
    let (Some(code), Some(st)) = (cb.code, cb.state) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "The provider's answer has no code or state; start again.".into(),
        );
    };
    let flow = session::from_header(
        headers.get(header::COOKIE).and_then(|v| v.to_str().ok()),
        FLOW_COOKIE,
    );
    let now = model::time::now_ms();
    let key = state.access.key();
    if !spend(&state, flow.as_deref(), now) {
        audit::refused("a sign-in cookie presented again", None, &caller);
        return refuse(
            StatusCode::UNAUTHORIZED,
            "This sign-in was already used; start again.".into(),
        );
    }
    let (who, next) = match provider
        .finish(&key, flow.as_deref(), &code, &st, now)
        .await
    {
        Ok(x) => x,
        Err(e) => {
            audit::refused(&e, None, &caller);
            return refuse(StatusCode::UNAUTHORIZED, format!("Sign-in failed: {e}"));
        }
    };
    let Some(principal) = state.access.from_groups(
        &who.name,
        &who.groups,
        collector_shared::access::Via::Session,
    ) else {
        audit::refused("no role for this person's groups", Some(&who.name), &caller);
        return refuse(
            StatusCode::FORBIDDEN,
            format!(
                "You signed in as {}, but none of your groups ({}) has a role here; ask the people who run gpulens to add one to [[access.groups]].",
                who.name,
                if who.groups.is_empty() {
                    "none given".to_owned()
                } else {
                    who.groups.join(", ")
                }
            ),
        );
    };
    audit::signed_in(&principal, "oidc", &caller);
    let cookie = state.access.issue(
        Source::Oidc {
            n: who.name,
            g: state.access.known_groups(&who.groups),
        },
        now,
    );
    // A page, not a redirect: a SameSite=Strict cookie set at the end of a cross-site
    // navigation is not sent with the redirect that follows it, but is with this page's
    // own navigation.
    let next = oidc::safe_next(&next).to_owned();
    let mut resp = Html(pages::signed_in(&next)).into_response();
    let h = resp.headers_mut();
    for c in [
        state.access.session_cookie(Some(&cookie)),
        flow_cookie(&state, None),
    ] {
        if let Ok(v) = header::HeaderValue::from_str(&c) {
            h.append(header::SET_COOKIE, v);
        }
    }
    resp
}
