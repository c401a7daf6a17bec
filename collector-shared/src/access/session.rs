//! Sessions for the dashboard: a signed cookie (`HttpOnly`, `SameSite=Strict`) saying how
//! someone signed in (which token, or which OpenID groups), and until when; a CSRF token
//! derived from it for every form that changes something. The cookie carries no role: each
//! request maps it through the configuration in force, so a token removed or a group's role
//! changed takes effect at once. Sign-out revokes a cookie on the server.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::signing::{hex, hmac_sha256, unhex};

pub const COOKIE: &str = "gpulens_session";
/// Sessions last this long.
pub const LIFETIME_MS: i64 = 8 * 3_600_000;
/// Groups kept in a cookie at most (only groups the configuration maps are kept).
pub const MAX_GROUPS: usize = 64;

/// How a session was opened: what each request maps to a principal again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "lowercase")]
pub enum Source {
    /// A token typed on the sign-in form (an operator's or a program's), by its name and a
    /// keyed fingerprint of the token (`b`), so a token replaced under the same name ends it.
    Token { n: String, b: String },
    /// An OpenID Connect sign-in: the person's name and the configured groups they are in.
    Oidc { n: String, g: Vec<String> },
}

#[derive(Debug, Serialize, Deserialize)]
struct Payload {
    #[serde(flatten)]
    source: Source,
    /// Expiry, Unix ms.
    e: i64,
}

/// The cookie value for `source` signed in at `now_ms`.
pub fn issue(key: &[u8; 32], source: Source, now_ms: i64) -> String {
    let payload = serde_json::to_vec(&Payload {
        source,
        e: now_ms + LIFETIME_MS,
    })
    .expect("a payload serializes");
    let payload = hex(&payload);
    format!("{payload}.{}", hex(&hmac_sha256(key, payload.as_bytes())))
}

/// How a cookie's session was opened, if the cookie is genuine and unexpired.
pub fn verify(key: &[u8; 32], value: &str, now_ms: i64) -> Option<Source> {
    if value.len() > 8 * 1024 {
        return None;
    }
    let (payload, mac) = value.rsplit_once('.')?;
    let want = hex(&hmac_sha256(key, payload.as_bytes()));
    if !crate::signing::constant_time_eq(want.as_bytes(), mac.as_bytes()) {
        return None;
    }
    let p: Payload = serde_json::from_slice(&unhex(payload)?).ok()?;
    (p.e >= now_ms).then_some(p.source)
}

/// A cookie's expiry (Unix ms), read without checking it (for the revocation list).
fn expiry(value: &str) -> Option<i64> {
    let (payload, _) = value.rsplit_once('.')?;
    serde_json::from_slice::<Payload>(&unhex(payload)?)
        .ok()
        .map(|p| p.e)
}

/// The CSRF token of a session.
pub fn csrf(key: &[u8; 32], cookie: &str) -> String {
    hex(&hmac_sha256(key, format!("csrf:{cookie}").as_bytes()))
}

/// A cookie's value from a request's `Cookie` header.
pub fn from_header(header: Option<&str>, name: &str) -> Option<String> {
    header?.split(';').find_map(|c| {
        let (k, v) = c.trim().split_once('=')?;
        (k == name).then(|| v.to_owned())
    })
}

/// Server-side session state: cookies revoked by sign-out (until they would have expired) and
/// wrong tokens per client address (attempts.rs).
#[derive(Debug, Default)]
pub struct Sessions {
    /// Revoked cookie → its expiry (Unix ms), pruned as they expire.
    revoked: Mutex<HashMap<String, i64>>,
    pub attempts: crate::attempts::Attempts,
}

/// Revoked cookies kept at most (each expires within `LIFETIME_MS` anyway).
const MAX_REVOKED: usize = 100_000;

impl Sessions {
    /// Ends a session now: its cookie is refused until it would have expired.
    pub fn revoke(&self, cookie: &str, now_ms: i64) {
        let expires = expiry(cookie).unwrap_or(now_ms + LIFETIME_MS);
        let mut r = lock(&self.revoked);
        r.retain(|_, e| *e >= now_ms);
        if r.len() < MAX_REVOKED {
            r.insert(cookie.to_owned(), expires);
        }
    }

    pub fn is_revoked(&self, cookie: &str) -> bool {
        lock(&self.revoked).contains_key(cookie)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    fn alice() -> Source {
        Source::Token {
            n: "alice".into(),
            b: "00".into(),
        }
    }

    #[test]
    fn sign_out_revokes() {
        let sessions = Sessions::default();
        let c = issue(&KEY, alice(), 1_000);
        assert!(!sessions.is_revoked(&c));
        sessions.revoke(&c, 2_000);
        assert!(sessions.is_revoked(&c));
    }

    #[test]
    fn cookies_are_signed_and_expire() {
        let c = issue(&KEY, alice(), 1_000);
        assert_eq!(verify(&KEY, &c, 2_000), Some(alice()));
        assert_eq!(verify(&KEY, &c, 1_000 + LIFETIME_MS + 1), None, "expired");
        let (payload, mac) = c.rsplit_once('.').unwrap();
        let forged = hex(&String::from_utf8(unhex(payload).unwrap())
            .unwrap()
            .replace("alice", "malory")
            .into_bytes());
        assert_eq!(verify(&KEY, &format!("{forged}.{mac}"), 2_000), None);
        assert_eq!(verify(&[8; 32], &c, 2_000), None, "another key");
        assert_eq!(verify(&KEY, "zz.zz", 2_000), None);
        let o = Source::Oidc {
            n: "bob".into(),
            g: vec!["team-search".into()],
        };
        assert_eq!(verify(&KEY, &issue(&KEY, o.clone(), 0), 1), Some(o));
        assert_ne!(csrf(&KEY, &c), csrf(&KEY, &issue(&KEY, alice(), 5_000)));
        assert_eq!(
            from_header(Some("a=b; gpulens_session=xyz; c=d"), COOKIE).as_deref(),
            Some("xyz")
        );
    }
}
