//! `/login` and `/logout`: operator sign-in for approvals (a signed session cookie).

use super::*;

pub async fn login_page(State(state): State<DashboardState>, headers: HeaderMap) -> Html<String> {
    Html(pages::login(frame(&state, &headers, "Sign in"), None))
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    pub token: String,
}

pub async fn login(
    State(state): State<DashboardState>,
    peer: Option<axum::extract::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let now = model::time::now_ms();
    // Without a socket (tests driving the router) every caller shares one record.
    let addr = peer.map_or(std::net::IpAddr::from([0, 0, 0, 0]), |p| p.0.0.ip());
    if let Err(wait) = state.sessions.may_try(addr, now) {
        tracing::warn!(%addr, wait_s = wait, "sign-in refused: too many wrong tokens from this address");
        let mut resp = (
            StatusCode::TOO_MANY_REQUESTS,
            Html(pages::login(
                frame(&state, &headers, "Sign in"),
                Some(format!(
                    "Too many wrong tokens from your address; try again in {wait} s."
                )),
            )),
        )
            .into_response();
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(wait));
        return resp;
    }
    let Some(name) = state.labels.operator(form.token.trim()).map(str::to_owned) else {
        state.sessions.failed(addr, now);
        tracing::warn!(%addr, "sign-in with a wrong operator token");
        return (
            StatusCode::UNAUTHORIZED,
            Html(pages::login(
                frame(&state, &headers, "Sign in"),
                Some("That is not an operator token.".into()),
            )),
        )
            .into_response();
    };
    state.sessions.succeeded(addr);
    let Some(cookie) = session::issue(&state.labels, &name, now) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    tracing::info!(operator = %name, %addr, "operator signed in");
    (
        [(
            header::SET_COOKIE,
            format!(
                "{}={cookie}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
                session::COOKIE,
                session::LIFETIME_MS / 1000,
                secure(&state)
            ),
        )],
        Redirect::to("/recommendations"),
    )
        .into_response()
}

/// `; Secure` when the configuration says the dashboard is reached over TLS.
fn secure(state: &DashboardState) -> &'static str {
    if state.labels.secure_cookies {
        "; Secure"
    } else {
        ""
    }
}

/// Signs out: the session's cookie is revoked on the server (a copy of it no longer works)
/// and cleared in the browser.
pub async fn logout(State(state): State<DashboardState>, headers: HeaderMap) -> Response {
    if let Some(cookie) =
        session::from_header(headers.get(header::COOKIE).and_then(|v| v.to_str().ok()))
        && session::verify(&state.labels, &cookie, model::time::now_ms()).is_some()
    {
        // Only a genuine session is recorded: the list cannot be filled with made-up values.
        state.sessions.revoke(&cookie, model::time::now_ms());
    }
    (
        [(
            header::SET_COOKIE,
            format!(
                "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
                session::COOKIE,
                secure(&state)
            ),
        )],
        Redirect::to("/"),
    )
        .into_response()
}
