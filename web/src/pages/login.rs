//! Signing in: the sign-in page, and the page after single sign-on.

use super::*;

/// What the sign-in page offers.
#[derive(Debug, Clone, Default)]
pub struct LoginView {
    pub error: Option<String>,
    /// Where to go once signed in.
    pub next: String,
    /// The single sign-on button's label, when OpenID Connect is configured.
    pub sso: Option<String>,
    /// Tokens (an operator's or a program's) can be typed in.
    pub tokens: bool,
    /// Reading needs no sign-in here.
    pub open: bool,
}

pub fn login(frame: Frame, v: LoginView) -> String {
    document(frame, Nav::None, move || {
        let error = v
            .error
            .map(|e| view! { <p class="error" role="alert">{e}</p> });
        let has_sso = v.sso.is_some();
        let sso = v.sso.map(|label| {
            let href = format!("/auth/oidc?next={}", crate::format::enc(&v.next));
            view! { <p><a class="button" href=href>{format!("Sign in with {label}")}</a></p> }
        });
        let open = v.open.then(|| view! {
            <p>"Reading needs no sign-in on this collector. Sign in to approve GPU Operator changes."</p>
        });
        let next = v.next.clone();
        let via_proxy = (!has_sso && !v.tokens).then(|| view! {
            <p>"No way to sign in here is configured: reach gpulens through your organisation's sign-in proxy, or ask its administrators for single sign-on or a token (docs/security.md)."</p>
        });
        let form = v.tokens.then(|| view! {
            <form method="post" action="/login" class="filters">
                <input type="hidden" name="next" value=next/>
                <label for="token">"Token"<input id="token" name="token" type="password" autocomplete="current-password" required=true/></label>
                <button type="submit">"Sign in"</button>
            </form>
            <p class="hint">"An operator's token ([[labels.operators]]) or a token from [[access.tokens]] in the collector's configuration."</p>
        });
        view! {
            <h1>"Sign in"</h1>
            {open}
            {error}
            {sso}
            {form}
            {via_proxy}
        }
        .into_any()
    })
}

/// The page after single sign-on: on to where the person was going.
pub fn signed_in(next: &str) -> String {
    let next_attr = crate::chart::esc(next);
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={next_attr}\"><title>Signed in · gpulens</title></head><body><p>Signed in. <a href=\"{next_attr}\">Continue</a>.</p></body></html>"
    )
}
