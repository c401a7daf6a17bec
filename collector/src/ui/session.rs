//! Operator sessions for the dashboard: a signed cookie (`HttpOnly`, `SameSite=Strict`) naming
//! the operator and its expiry, and a CSRF token derived from it for every form that changes
//! something. The signing key is derived from the configured operator tokens, so every
//! collector of a deployment accepts the same cookies and changing the tokens ends all sessions.

use sha2::{Digest, Sha256};

use crate::alerts::payload::{hex, hmac_sha256};
use crate::labels::settings::Settings;

pub const COOKIE: &str = "gpulens_operator";
/// Sessions last this long.
pub const LIFETIME_MS: i64 = 8 * 3_600_000;

fn key(s: &Settings) -> Option<[u8; 32]> {
    if s.operators.is_empty() {
        return None;
    }
    let mut h = Sha256::new();
    h.update(b"gpulens dashboard sessions v1");
    for o in &s.operators {
        h.update(o.name.as_bytes());
        h.update([0]);
        h.update(o.token.0.as_bytes());
        h.update([0]);
    }
    Some(h.finalize().into())
}

/// The cookie value for `operator` signed in at `now_ms`.
pub fn issue(s: &Settings, operator: &str, now_ms: i64) -> Option<String> {
    let key = key(s)?;
    let expires = now_ms + LIFETIME_MS;
    let name = hex(operator.as_bytes());
    let payload = format!("{name}.{expires}");
    Some(format!(
        "{payload}.{}",
        hex(&hmac_sha256(&key, payload.as_bytes()))
    ))
}

/// The operator a cookie value names, if it is genuine, unexpired, and the operator still
/// exists.
pub fn verify(s: &Settings, value: &str, now_ms: i64) -> Option<String> {
    let key = key(s)?;
    let (payload, mac) = value.rsplit_once('.')?;
    let want = hex(&hmac_sha256(&key, payload.as_bytes()));
    if !crate::auth::constant_time_eq(want.as_bytes(), mac.as_bytes()) {
        return None;
    }
    let (name, expires) = payload.split_once('.')?;
    if expires.parse::<i64>().ok()? < now_ms {
        return None;
    }
    let bytes = (0..name.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(name.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    let name = String::from_utf8(bytes).ok()?;
    s.operators.iter().any(|o| o.name == name).then_some(name)
}

/// The CSRF token of a session.
pub fn csrf(s: &Settings, cookie: &str) -> Option<String> {
    let key = key(s)?;
    Some(hex(&hmac_sha256(&key, format!("csrf:{cookie}").as_bytes())))
}

/// The session cookie of a request's `Cookie` header.
pub fn from_header(header: Option<&str>) -> Option<String> {
    header?.split(';').find_map(|c| {
        let (k, v) = c.trim().split_once('=')?;
        (k == COOKIE).then(|| v.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::settings::Operator;

    fn settings(token: &str) -> Settings {
        Settings {
            operators: vec![Operator {
                name: "alice".into(),
                token: crate::config::Secret(token.into()),
            }],
            ..Settings::default()
        }
    }

    #[test]
    fn cookies_are_signed_expire_and_follow_the_tokens() {
        let s = settings("operator-token-1");
        let c = issue(&s, "alice", 1_000).unwrap();
        assert_eq!(verify(&s, &c, 2_000).as_deref(), Some("alice"));
        assert_eq!(verify(&s, &c, 1_000 + LIFETIME_MS + 1), None, "expired");
        let forged = c.replace(&hex(b"alice"), &hex(b"mallory"));
        assert_eq!(verify(&s, &forged, 2_000), None);
        assert_eq!(verify(&settings("rotated-token"), &c, 2_000), None);
        assert_eq!(verify(&Settings::default(), &c, 2_000), None);
        assert_ne!(csrf(&s, &c), csrf(&s, &issue(&s, "alice", 5_000).unwrap()));
        assert_eq!(
            from_header(Some("a=b; gpulens_operator=xyz; c=d")).as_deref(),
            Some("xyz")
        );
    }
}
