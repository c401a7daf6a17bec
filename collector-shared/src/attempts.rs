//! Wrong credentials, limited. Every presented credential is checked, and one that
//! verifies is never refused for what others did from the same address; wrong ones are
//! counted per client address and for the whole collector:
//! - **per address**: `FREE` wrong ones, then each further one doubles the wait (1 s, 2 s, 4 s
//!   … up to `MAX_BACKOFF_MS`); a quiet quarter of an hour forgives the past;
//! - **globally**: more than `GLOBAL_PER_MINUTE` wrong ones in a minute, from however many
//!   addresses, put every address in backoff for the rest of that minute.
//!
//! While backing off, a wrong credential is answered 429 with the seconds to wait instead of
//! 401, and audited. Credentials are long random tokens, so guessing is not the threat this
//! stops; it keeps a flood of guesses from every address visible, bounded and cheap, and keeps
//! the people whose credential is right working through it. Used for sign-in and `[access]`
//! tokens (access/) and for agent tokens (auth.rs), each with its own record.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Wrong credentials from one address allowed before the backoff starts.
pub const FREE: u32 = 5;
/// The longest wait the backoff imposes.
pub const MAX_BACKOFF_MS: i64 = 15 * 60 * 1000;
/// Wrong credentials per minute from all addresses together before everyone backs off.
pub const GLOBAL_PER_MINUTE: u32 = 120;
/// Addresses tracked at most; past this the oldest records are dropped first.
const MAX_TRACKED: usize = 10_000;

#[derive(Debug, Default)]
pub struct Attempts {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_addr: HashMap<IpAddr, Record>,
    /// The minute (Unix ms / 60,000) `global` counts, and its wrong attempts.
    minute: i64,
    global: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct Record {
    failures: u32,
    /// Wrong credentials from the address are answered 429 until this time (Unix ms).
    locked_until_ms: i64,
    last_ms: i64,
}

impl Attempts {
    /// The seconds `addr` must wait before a wrong credential is answered 401 again; `None`
    /// when it is not backing off.
    pub fn backing_off(&self, addr: IpAddr, now_ms: i64) -> Option<u64> {
        let inner = lock(&self.inner);
        let own = inner
            .by_addr
            .get(&addr)
            .filter(|r| r.locked_until_ms > now_ms)
            .map(|r| r.locked_until_ms - now_ms);
        let global = (inner.minute == now_ms / 60_000 && inner.global > GLOBAL_PER_MINUTE)
            .then(|| 60_000 - now_ms % 60_000);
        own.max(global).map(|ms| (ms as u64).div_ceil(1000))
    }

    /// Records a wrong credential from `addr`; returns the wait when it is (now) backing off.
    pub fn failed(&self, addr: IpAddr, now_ms: i64) -> Option<u64> {
        {
            let mut inner = lock(&self.inner);
            let minute = now_ms / 60_000;
            if inner.minute != minute {
                inner.minute = minute;
                inner.global = 0;
            }
            inner.global = inner.global.saturating_add(1);
            let all = &mut inner.by_addr;
            if all.len() >= MAX_TRACKED && !all.contains_key(&addr) {
                all.retain(|_, a| {
                    a.locked_until_ms > now_ms || now_ms - a.last_ms < MAX_BACKOFF_MS
                });
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
            a.failures = a.failures.saturating_add(1);
            a.last_ms = now_ms;
            if a.failures >= FREE {
                let exp = (a.failures - FREE).min(20);
                a.locked_until_ms = now_ms + (1000i64 << exp).min(MAX_BACKOFF_MS);
            }
        }
        self.backing_off(addr, now_ms)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_backs_off_after_its_free_attempts_and_doubles() {
        let a = Attempts::default();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        let now = 1_000_000;
        for _ in 0..FREE - 1 {
            assert_eq!(a.failed(ip, now), None);
        }
        assert_eq!(a.failed(ip, now), Some(1));
        assert_eq!(a.backing_off(ip, now), Some(1));
        assert_eq!(a.backing_off(other, now), None, "per address");
        assert_eq!(a.failed(ip, now + 1_000), Some(2), "doubles");
        assert_eq!(a.backing_off(ip, now + 1_000 + MAX_BACKOFF_MS), None);
    }

    /// 2,500 guesses over 500 addresses (5 each) were all answered 401.
    #[test]
    fn guesses_spread_over_many_addresses_meet_the_global_limit() {
        let a = Attempts::default();
        let now = 60_000 * 1_000;
        let mut backed_off = 0;
        for i in 0..2_500u32 {
            let ip = IpAddr::from([10, 0, (i / 5 / 256) as u8, (i / 5 % 256) as u8]);
            if a.failed(ip, now + i64::from(i)).is_some() {
                backed_off += 1;
            }
        }
        assert!(
            backed_off >= 2_500 - GLOBAL_PER_MINUTE as usize - 1,
            "only {backed_off} of 2,500 met a limit"
        );
        let fresh: IpAddr = "198.51.100.1".parse().unwrap();
        assert!(
            a.backing_off(fresh, now + 2_500).is_some(),
            "everyone backs off"
        );
        assert_eq!(
            a.backing_off(fresh, now + 60_000),
            None,
            "for that minute only"
        );
    }
}
