//! Sessions for the dashboard: a signed cookie (`HttpOnly`, `SameSite=Strict`) saying how
//! someone signed in (which token, or which OpenID groups), and until when; a CSRF token
//! derived from it for every form that changes something. The cookie carries no role: each
//! request maps it through the configuration in force, so a token removed or a group's role
//! changed takes effect at once. Sign-out revokes a cookie on the server.

use std::collections::HashMap;
use std::net::IpAddr;
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
    /// A token typed on the sign-in form (an operator's or a program's), by its name.
    Token { n: String },
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
/// failed sign-in attempts per client address.
#[derive(Debug, Default)]
pub struct Sessions {
    /// Revoked cookie → its expiry (Unix ms), pruned as they expire.
    revoked: Mutex<HashMap<String, i64>>,
    attempts: Mutex<HashMap<IpAddr, Attempts>>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Attempts {
    failures: u32,
    /// No attempt is checked before this time (Unix ms).
    locked_until_ms: i64,
    last_ms: i64,
}

/// Wrong tokens from one address allowed before the backoff starts.
pub const FREE_ATTEMPTS: u32 = 5;
/// The longest wait the backoff imposes.
pub const MAX_BACKOFF_MS: i64 = 15 * 60 * 1000;
/// Addresses tracked at most; past this the oldest records are dropped first.
const MAX_TRACKED: usize = 10_000;
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

    /// `Err(seconds)` while `addr` must wait before its next sign-in attempt is checked.
    pub fn may_try(&self, addr: IpAddr, now_ms: i64) -> Result<(), u64> {
        match lock(&self.attempts).get(&addr) {
            Some(a) if a.locked_until_ms > now_ms => {
                Err(((a.locked_until_ms - now_ms) as u64).div_ceil(1000))
            }
            _ => Ok(()),
        }
    }

    /// Records a wrong token from `addr`: after `FREE_ATTEMPTS`, each further one doubles the
    /// wait (1 s, 2 s, 4 s … up to 15 min).
    pub fn failed(&self, addr: IpAddr, now_ms: i64) {
        let mut all = lock(&self.attempts);
        if all.len() >= MAX_TRACKED && !all.contains_key(&addr) {
            all.retain(|_, a| a.locked_until_ms > now_ms || now_ms - a.last_ms < MAX_BACKOFF_MS);
            if all.len() >= MAX_TRACKED
                && let Some(oldest) = all.iter().min_by_key(|(_, a)| a.last_ms).map(|(k, _)| *k)
            {
                all.remove(&oldest);
            }
        }
        let a = all.entry(addr).or_default();
        // A quiet quarter of an hour forgives the past.
        if now_ms - a.last_ms > MAX_BACKOFF_MS {
            a.failures = 0;
        }
        a.failures += 1;
        a.last_ms = now_ms;
        if a.failures >= FREE_ATTEMPTS {
            let exp = (a.failures - FREE_ATTEMPTS).min(20);
            a.locked_until_ms = now_ms + (1000i64 << exp).min(MAX_BACKOFF_MS);
        }
    }

    /// A correct token clears the address's record.
    pub fn succeeded(&self, addr: IpAddr) {
        lock(&self.attempts).remove(&addr);
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
        Source::Token { n: "alice".into() }
    }

    /// Issue 15: 2,000 wrong sign-ins in 0.9 s met no limit; logout did not end the session.
    #[test]
    fn wrong_tokens_back_off_and_sign_out_revokes() {
        let sessions = Sessions::default();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        let mut now = 1_000_000;
        for _ in 0..FREE_ATTEMPTS - 1 {
            assert!(sessions.may_try(ip, now).is_ok());
            sessions.failed(ip, now);
        }
        sessions.failed(ip, now);
        assert_eq!(sessions.may_try(ip, now), Err(1));
        assert!(sessions.may_try(other, now).is_ok(), "per address");
        now += 1_000;
        sessions.failed(ip, now);
        assert_eq!(sessions.may_try(ip, now), Err(2), "doubles");
        let mut tries = 0;
        for _ in 0..2_000 {
            if sessions.may_try(ip, now).is_ok() {
                tries += 1;
                sessions.failed(ip, now);
            }
            now += 1;
        }
        assert_eq!(tries, 0, "2,000 attempts in 2 s get no check");
        sessions.succeeded(ip);
        assert!(sessions.may_try(ip, now).is_ok());

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
