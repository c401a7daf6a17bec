//! Operator sessions for the dashboard: a signed cookie (`HttpOnly`, `SameSite=Strict`) naming
//! the operator and its expiry, and a CSRF token derived from it for every form that changes
//! something. The signing key is derived from the configured operator tokens, so every
//! collector of a deployment accepts the same cookies and changing the tokens ends all sessions.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::labels::Settings;
use crate::signing::{hex, hmac_sha256};

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
    if !crate::signing::constant_time_eq(want.as_bytes(), mac.as_bytes()) {
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
        let expires = cookie
            .rsplit_once('.')
            .and_then(|(payload, _)| payload.rsplit_once('.'))
            .and_then(|(_, e)| e.parse::<i64>().ok())
            .unwrap_or(now_ms + LIFETIME_MS);
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
    use crate::labels::Operator;

    fn settings(token: &str) -> Settings {
        Settings {
            operators: vec![Operator {
                name: "alice".into(),
                token: crate::settings::Secret(token.into()),
            }],
            ..Settings::default()
        }
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

        let s = settings("operator-token-1");
        let c = issue(&s, "alice", 1_000).unwrap();
        assert!(!sessions.is_revoked(&c));
        sessions.revoke(&c, 2_000);
        assert!(sessions.is_revoked(&c));
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
