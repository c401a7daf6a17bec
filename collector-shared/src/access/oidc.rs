//! Sign-in through an OpenID Connect provider: the authorization code flow with PKCE, a
//! state and a nonce kept in a short-lived signed cookie, the ID token's signature, issuer,
//! audience, expiry and nonce checked by the `openidconnect` crate against the provider's
//! published keys. The person's name and groups come from the verified ID token.

use std::time::{Duration, Instant};

use ingest_client::bounded::error_chain;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, IssuerUrl, Nonce, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, Scope, TokenResponse,
};
use serde::{Deserialize, Serialize};

use super::settings::Oidc;
use crate::signing::{hex, hmac_sha256};

/// The cookie that carries a sign-in in progress from `/auth/oidc` to `/auth/callback`.
pub const FLOW_COOKIE: &str = "gpulens_oidc";
/// A sign-in must come back within this long.
pub const FLOW_LIFETIME_MS: i64 = 10 * 60 * 1000;
/// The provider's discovery document and keys are fetched again after this long.
const METADATA_TTL: Duration = Duration::from_secs(3600);
/// Answers from the provider larger than this are refused.
const MAX_BODY: usize = 1024 * 1024;

/// The configured provider and what was learned from its discovery document.
pub struct Provider {
    pub settings: Oidc,
    http: reqwest::Client,
    metadata: tokio::sync::Mutex<Option<(CoreProviderMetadata, Instant)>>,
}

/// A sign-in in progress (in the flow cookie, signed).
#[derive(Debug, Serialize, Deserialize)]
struct Flow {
    /// The `state` sent to the provider.
    s: String,
    /// The nonce the ID token must carry.
    n: String,
    /// The PKCE verifier.
    v: String,
    /// Where to go after signing in (a path on this collector).
    next: String,
    /// Expiry, Unix ms.
    e: i64,
}

/// Who signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub groups: Vec<String>,
}

impl Provider {
    pub fn new(settings: Oidc) -> Provider {
        let http = ingest_client::http()
            // Following redirects from the provider's endpoints could be steered elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .expect("an HTTP client builds");
        Provider {
            settings,
            http,
            metadata: tokio::sync::Mutex::new(None),
        }
    }

    async fn metadata(&self, fresh: bool) -> Result<CoreProviderMetadata, String> {
        let mut m = self.metadata.lock().await;
        if !fresh
            && let Some((meta, at)) = m.as_ref()
            && at.elapsed() < METADATA_TTL
        {
            return Ok(meta.clone());
        }
        let issuer = IssuerUrl::new(self.settings.issuer.clone())
            .map_err(|e| format!("issuer {:?}: {e}", self.settings.issuer))?;
        let http = self.client();
        let meta = CoreProviderMetadata::discover_async(issuer, &http)
            .await
            .map_err(|e| {
                format!(
                    "cannot read the provider's discovery document: {}",
                    error_chain(&e)
                )
            })?;
        *m = Some((meta.clone(), Instant::now()));
        Ok(meta)
    }

    fn client(&self) -> impl Fn(openidconnect::HttpRequest) -> BoxedResponse + use<> {
        let http = self.http.clone();
        move |req| {
            let http = http.clone();
            Box::pin(async move { send(&http, req).await })
        }
    }

    fn oauth_client(
        &self,
        meta: CoreProviderMetadata,
    ) -> Result<
        CoreClient<
            openidconnect::EndpointSet,
            openidconnect::EndpointNotSet,
            openidconnect::EndpointNotSet,
            openidconnect::EndpointNotSet,
            openidconnect::EndpointMaybeSet,
            openidconnect::EndpointMaybeSet,
        >,
        String,
    > {
        let redirect = RedirectUrl::new(self.settings.redirect_url.clone())
            .map_err(|e| format!("redirect_url: {e}"))?;
        Ok(CoreClient::from_provider_metadata(
            meta,
            ClientId::new(self.settings.client_id.clone()),
            self.settings
                .client_secret
                .as_ref()
                .map(|s| ClientSecret::new(s.0.clone())),
        )
        .set_redirect_uri(redirect))
    }

    /// Starts a sign-in: the provider's authorization URL and the flow cookie's value.
    pub async fn start(
        &self,
        key: &[u8; 32],
        next: &str,
        now_ms: i64,
    ) -> Result<(String, String), String> {
        let client = self.oauth_client(self.metadata(false).await?)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut req = client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for s in &self.settings.scopes {
            req = req.add_scope(Scope::new(s.clone()));
        }
        let (url, state, nonce) = req.set_pkce_challenge(challenge).url();
        let flow = Flow {
            s: state.secret().clone(),
            n: nonce.secret().clone(),
            v: verifier.secret().clone(),
            next: safe_next(next).to_owned(),
            e: now_ms + FLOW_LIFETIME_MS,
        };
        Ok((url.to_string(), seal(key, &flow)))
    }

    /// Finishes a sign-in: checks the state against the flow cookie, exchanges the code
    /// (with the PKCE verifier) and verifies the ID token. Returns who signed in and where
    /// they were going.
    pub async fn finish(
        &self,
        key: &[u8; 32],
        flow_cookie: Option<&str>,
        code: &str,
        state: &str,
        now_ms: i64,
    ) -> Result<(Identity, String), String> {
        let flow: Flow = flow_cookie.and_then(|c| unseal(key, c)).ok_or(
            "this sign-in did not start here, or took longer than 10 minutes; start again",
        )?;
        if flow.e < now_ms {
            return Err("this sign-in took longer than 10 minutes; start again".into());
        }
        if !crate::signing::constant_time_eq(flow.s.as_bytes(), state.as_bytes()) {
            return Err(
                "the provider's answer does not belong to this sign-in (state differs)".into(),
            );
        }
        let client = self.oauth_client(self.metadata(false).await?)?;
        let http = self.client();
        let token = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| format!("the provider has no token endpoint: {e}"))?
            .set_pkce_verifier(PkceCodeVerifier::new(flow.v.clone()))
            .request_async(&http)
            .await
            .map_err(|e| format!("the provider refused the code: {}", error_chain(&e)))?;
        let id_token = token
            .id_token()
            .ok_or("the provider's answer has no ID token")?;
        let nonce = Nonce::new(flow.n.clone());
        // Verified (signature, issuer, audience, expiry, nonce); the claims are read below.
        if let Err(first) = id_token.claims(&client.id_token_verifier(), &nonce) {
            // The provider may have rotated its keys since they were fetched.
            let client = self.oauth_client(self.metadata(true).await?)?;
            id_token
                .claims(&client.id_token_verifier(), &nonce)
                .map_err(|_| format!("the ID token does not verify: {}", error_chain(&first)))?;
        }
        // The token verified; read the configured claims from its payload.
        let raw = serde_json::to_value(id_token)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .ok_or("the ID token cannot be read")?;
        let payload = payload(&raw).ok_or("the ID token's claims cannot be read")?;
        Ok((identity(&payload, &self.settings)?, flow.next))
    }
}

type BoxedResponse = std::pin::Pin<
    Box<dyn Future<Output = Result<openidconnect::HttpResponse, HttpFailure>> + Send>,
>;

/// An HTTP exchange with the provider that failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HttpFailure(String);

async fn send(
    http: &reqwest::Client,
    req: openidconnect::HttpRequest,
) -> Result<openidconnect::HttpResponse, HttpFailure> {
    let req = reqwest::Request::try_from(req).map_err(|e| HttpFailure(e.to_string()))?;
    let url = req.url().clone();
    let resp = http
        .execute(req)
        .await
        .map_err(|e| HttpFailure(format!("{url}: {e}")))?;
    let mut out = openidconnect::http::Response::builder().status(resp.status().as_u16());
    for (k, v) in resp.headers() {
        out = out.header(k.as_str(), v.as_bytes());
    }
    let body = ingest_client::bounded::body(resp, MAX_BODY)
        .await
        .map_err(|e| HttpFailure(format!("{url}: {e}")))?;
    out.body(body).map_err(|e| HttpFailure(e.to_string()))
}

/// Where to go after signing in: a path on this collector, never another site.
/// `next` when it is a same-origin absolute path, else `/`. It arrives decoded (query or
/// form), and browsers drop tabs and line breaks from a `Location` before they follow it
/// (`/\t/evil.example` becomes `//evil.example`, another host), so only visible ASCII is
/// accepted: no control characters, spaces or non-ASCII, no backslash (which browsers read
/// as `/`), no `//` at the start. What passes is also a valid header value, so the redirect
/// that carries it never fails after a cookie was set.
pub fn safe_next(next: &str) -> &str {
    let visible = next.bytes().all(|b| (0x21..=0x7e).contains(&b));
    if visible
        && next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && next.len() < 2048
    {
        next
    } else {
        "/"
    }
}

fn seal<T: Serialize>(key: &[u8; 32], value: &T) -> String {
    let body = hex(&serde_json::to_vec(value).expect("serializes"));
    let mac = hex(&hmac_sha256(key, format!("oidc-flow:{body}").as_bytes()));
    format!("{body}.{mac}")
}

fn unseal<T: for<'de> Deserialize<'de>>(key: &[u8; 32], value: &str) -> Option<T> {
    if value.len() > 16 * 1024 {
        return None;
    }
    let (body, mac) = value.rsplit_once('.')?;
    let want = hex(&hmac_sha256(key, format!("oidc-flow:{body}").as_bytes()));
    if !crate::signing::constant_time_eq(want.as_bytes(), mac.as_bytes()) {
        return None;
    }
    serde_json::from_slice(&crate::signing::unhex(body)?).ok()
}

/// The claims of a compact JWS, as JSON.
fn payload(jwt: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    use base64::Engine;
    let part = jwt.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Who a verified token names. The name: the configured claim, else `email`, else `sub`, the
/// first that is a name gpulens can keep. The groups: the groups claim, a list of strings or
/// one comma-separated string, each kept when it is one (the first [`MAX_GROUPS`]).
///
/// A name or group gpulens keeps is 1–256 bytes of text without control characters.
/// At many providers people edit their own display name or user name, and these values go into
/// a cookie, pages and the audit log: a line break in a name would start a forged audit line.
fn identity(
    payload: &serde_json::Map<String, serde_json::Value>,
    settings: &Oidc,
) -> Result<Identity, String> {
    let name = [settings.name_claim.as_str(), "email", "sub"]
        .into_iter()
        .find_map(|c| claim_str(payload, c))
        .ok_or_else(|| {
            format!(
                "the ID token names you by none of {:?}, \"email\" and \"sub\" as gpulens keeps a \
                 name (1 to 256 bytes, no control characters); set [access.oidc] name_claim to a \
                 claim that does",
                settings.name_claim
            )
        })?;
    let listed: Vec<&str> = match payload.get(&settings.groups_claim) {
        Some(serde_json::Value::Array(a)) => a.iter().filter_map(|g| g.as_str()).collect(),
        Some(serde_json::Value::String(s)) => s.split(',').map(str::trim).collect(),
        _ => Vec::new(),
    };
    let groups = listed
        .into_iter()
        .filter(|g| kept(g))
        .take(MAX_GROUPS)
        .map(str::to_owned)
        .collect();
    Ok(Identity { name, groups })
}

/// The most groups read from a token.
const MAX_GROUPS: usize = 1000;

/// Whether a name or group from a token is kept: not empty, and text as a batch's text fields
/// are (at most 256 bytes, no control characters).
fn kept(value: &str) -> bool {
    !value.is_empty() && model::wire::v1::is_text(value)
}

fn claim_str(payload: &serde_json::Map<String, serde_json::Value>, name: &str) -> Option<String> {
    payload
        .get(name)?
        .as_str()
        .filter(|s| kept(s))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A name or group claim longer than 256 bytes is not taken into a session.
    #[test]
    fn claims_longer_than_256_bytes_are_not_taken() {
        let payload = serde_json::json!({
            "email": "a".repeat(256), "name": "b".repeat(257), "sub": "", "n": 3,
        });
        let p = payload.as_object().unwrap();
        assert_eq!(claim_str(p, "email").map(|s| s.len()), Some(256));
        assert_eq!(claim_str(p, "name"), None);
        assert_eq!(claim_str(p, "sub"), None, "empty");
        assert_eq!(claim_str(p, "n"), None, "not a string");
    }

    fn settings(name_claim: &str) -> Oidc {
        toml::from_str(&format!(
            "issuer = \"https://idp.example\"\nclient_id = \"gpulens\"\nredirect_url = \"https://gpulens.example/auth/callback\"\nname_claim = {name_claim:?}"
        ))
        .expect("settings")
    }

    /// A name the person may have written themselves with a line break, an escape or nothing
    /// in it is passed over for the next claim; with none left, sign-in is refused, saying
    /// which claims were read.
    #[test]
    fn names_holding_control_characters_are_passed_over() {
        let s = settings("name");
        let who = |v: serde_json::Value| identity(v.as_object().unwrap(), &s);
        let forged =
            "eve\n2026-12-04T10:00:00Z  INFO gpulens::audit: event=\"sign_in\" who=\"admin\"";
        assert_eq!(
            who(json!({"name": forged, "email": "eve@example.test", "sub": "u1"}))
                .unwrap()
                .name,
            "eve@example.test"
        );
        assert_eq!(
            who(json!({"name": "Eve\u{1b}[2J", "email": "e\u{85}ve", "sub": "u1"}))
                .unwrap()
                .name,
            "u1"
        );
        assert_eq!(
            who(json!({"name": "Ève Été", "sub": "u1"})).unwrap().name,
            "Ève Été"
        );
        let refused =
            who(json!({"name": "", "email": "a\tb", "sub": "x".repeat(257)})).unwrap_err();
        assert!(
            refused.contains("\"name\", \"email\" and \"sub\""),
            "{refused}"
        );
    }

    /// Groups, as a list or one comma-separated string, keep only names gpulens keeps; at
    /// most a thousand are read.
    #[test]
    fn groups_are_kept_only_as_text() {
        let s = settings("sub");
        let groups = |g: serde_json::Value| {
            identity(json!({"sub": "u1", "groups": g}).as_object().unwrap(), &s)
                .unwrap()
                .groups
        };
        let long = "g".repeat(257);
        assert_eq!(
            groups(json!(["ops", "", "a\nb", long, 7, "ml"])),
            ["ops", "ml"]
        );
        assert_eq!(
            groups(json!(format!("ops, ,a\rb,{long}, ml"))),
            ["ops", "ml"]
        );
        let many: Vec<String> = (0..5000).map(|i| format!("g{i}")).collect();
        assert_eq!(groups(json!(many.join(","))).len(), 1000);
        assert_eq!(groups(json!(many)).len(), 1000);
        assert!(groups(json!({"ops": true})).is_empty());
    }

    #[test]
    fn the_flow_cookie_is_sealed() {
        let key = [3u8; 32];
        let f = Flow {
            s: "st".into(),
            n: "no".into(),
            v: "ve".into(),
            next: "/findings".into(),
            e: 5,
        };
        let sealed = seal(&key, &f);
        let back: Flow = unseal(&key, &sealed).unwrap();
        assert_eq!(
            (back.s.as_str(), back.next.as_str(), back.e),
            ("st", "/findings", 5)
        );
        assert!(unseal::<Flow>(&[4u8; 32], &sealed).is_none(), "another key");
        let tampered = format!("00{}", &sealed[2..]);
        assert!(unseal::<Flow>(&key, &tampered).is_none());
    }

    #[test]
    fn next_stays_on_this_collector() {
        assert_eq!(safe_next("/findings?kind=idle"), "/findings?kind=idle");
        for bad in [
            "//evil.example/x",
            "https://evil.example",
            "/\\evil",
            "",
            "x",
            // Browsers drop the tab and follow `//evil.example/x`.
            "/\t/evil.example/x",
            "/\n/evil.example/x",
            "/\r\nSet-Cookie: a=b",
            "/\u{7f}",
            "/ /evil.example",
            "/caf\u{e9}",
        ] {
            assert_eq!(safe_next(bad), "/", "{bad}");
        }
    }

    #[test]
    fn claims_are_read_from_the_payload() {
        use base64::Engine;
        let body = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"sub":"u1","groups":["a","b"],"preferred_username":"alice"}"#);
        let p = payload(&format!("e30.{body}.sig")).unwrap();
        assert_eq!(
            claim_str(&p, "preferred_username").as_deref(),
            Some("alice")
        );
        assert_eq!(p["groups"], serde_json::json!(["a", "b"]));
        assert!(payload("nodots").is_none());
    }
}
