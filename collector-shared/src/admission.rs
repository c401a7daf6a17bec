//! Who gets an in-flight slot: requests are put in a class before anything else
//! runs, and each class has its own share of `[server] max_in_flight`, so no class can starve
//! another — 256 anonymous clients trickling `POST /login` bodies used to fill every slot and
//! turn every agent's ingest and every signed-in read away.
//! - **agent**: an agent's route (`/api/v1/ingest`, `/api/v1/write`, a node's labels) with an
//!   agent token that verifies: half the slots.
//! - **reader**: a credential that verifies (a session cookie, an `[access]` token, the
//!   trusted proxy's headers), or — where reading is open — a request without a body:
//!   three eighths.
//! - **anonymous**: everything else (sign-in forms, the OpenID callback, unverified
//!   credentials): one eighth, bodies of at most `ANONYMOUS_MAX_BODY` with a declared length,
//!   and `ANONYMOUS_TIMEOUT` for the whole request.
//!
//! Probes and scrapes (`/healthz`, `/readyz`, `/metrics`) take no slot. Every refusal is
//! counted in `gpulens_http_refused_total{class}`, and `/readyz` names the classes refused in
//! the last minute.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use axum::http::{HeaderMap, Method, Uri, header};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::access::routes::{Need, Rule, matches};
use crate::request_limits::ANONYMOUS_MAX_BODY;

/// The longest an anonymous request may take, reading its body included.
pub const ANONYMOUS_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a refusal keeps being named by `/readyz`.
const RECENT_MS: i64 = 60_000;

/// The agents' in-flight slots (`[server] max_in_flight`'s agent share), in every request's
/// extensions: an ingest stream takes one for each batch it stores, so batches on streams and
/// in requests share one bound.
#[derive(Debug, Clone)]
pub struct AgentSlots {
    pub slots: Arc<tokio::sync::Semaphore>,
    pub refusals: Arc<Refusals>,
}

impl AgentSlots {
    /// One agent's slot, or None (counted as an agent refusal) when all are taken.
    pub fn take(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let permit = self.slots.clone().try_acquire_owned().ok();
        if permit.is_none() {
            self.refusals.record(Class::Agent, model::time::now_ms());
        }
        permit
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Agent,
    Reader,
    Anonymous,
}

impl Class {
    pub const ALL: [Class; 3] = [Class::Agent, Class::Reader, Class::Anonymous];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Agent => "agent",
            Class::Reader => "reader",
            Class::Anonymous => "anonymous",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// This class's slots out of `max_in_flight`.
    pub fn share(self, max_in_flight: usize) -> usize {
        let n = max_in_flight.max(1);
        match self {
            Class::Agent => (n / 2).max(2),
            Class::Reader => (n * 3 / 8).max(2),
            Class::Anonymous => (n / 8).max(1),
        }
    }
}

/// Puts a request in its class from its method, target, headers and peer, without reading
/// the body and without counting anything against anyone.
pub type Classifier =
    Arc<dyn Fn(&Method, &Uri, &HeaderMap, Option<SocketAddr>) -> Class + Send + Sync>;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabel {
    class: &'static str,
}

/// Refusals per class: the counter on `/metrics` and when each class was last refused.
#[derive(Debug, Default)]
pub struct Refusals {
    counter: Family<ClassLabel, Counter>,
    last_ms: [AtomicI64; 3],
}

impl Refusals {
    pub fn register(registry: &mut Registry) -> Arc<Refusals> {
        let counter = Family::<ClassLabel, Counter>::default();
        registry.register(
            "http_refused",
            "Requests refused because their class (agent, reader, anonymous) had no free in-flight slot",
            counter.clone(),
        );
        Arc::new(Refusals {
            counter,
            last_ms: Default::default(),
        })
    }

    pub fn record(&self, class: Class, now_ms: i64) {
        self.counter
            .get_or_create(&ClassLabel {
                class: class.as_str(),
            })
            .inc();
        self.last_ms[class.index()].store(now_ms, Ordering::Relaxed);
    }

    /// The classes refused within the last minute.
    pub fn recent(&self, now_ms: i64) -> Vec<&'static str> {
        Class::ALL
            .iter()
            .filter(|c| {
                let t = self.last_ms[c.index()].load(Ordering::Relaxed);
                t > 0 && now_ms - t < RECENT_MS
            })
            .map(|c| c.as_str())
            .collect()
    }
}

/// Whether a request path is one of the routes agents call with their own tokens (the route
/// table's `Agent` rules).
pub fn agent_route(table: &[Rule], path: &str) -> bool {
    table
        .iter()
        .any(|r| r.need == Need::Agent && matches(r.path, path))
}

/// The body length a request declares (`Content-Length`), if it declares one.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether the request declares a body.
pub fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

/// Why an anonymous request's body is refused before it is read: too large, or of a length
/// it does not declare.
pub fn anonymous_body_refusal(headers: &HeaderMap) -> Option<crate::error::ApiError> {
    use crate::error::ApiError;
    if headers.contains_key(header::TRANSFER_ENCODING) {
        return Some(ApiError::PayloadTooLarge(
            "a request without a credential must declare its body's length (Content-Length); \
             sign in, or send an agent's or an [access] token"
                .into(),
        ));
    }
    let length = declared_length(headers).unwrap_or(0);
    (length > ANONYMOUS_MAX_BODY).then(|| {
        ApiError::PayloadTooLarge(format!(
            "a request without a credential may send at most {ANONYMOUS_MAX_BODY} bytes; this one declares {length}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_leave_every_class_slots() {
        assert_eq!(
            Class::ALL.map(|c| c.share(256)),
            [128, 96, 32],
            "the default 256"
        );
        assert_eq!(Class::ALL.map(|c| c.share(1)), [2, 2, 1]);
        let r = Refusals::default();
        assert!(r.recent(100_000).is_empty());
        r.record(Class::Anonymous, 100_000);
        assert_eq!(r.recent(100_500), ["anonymous"]);
        assert!(r.recent(100_000 + RECENT_MS).is_empty());
    }

    #[test]
    fn bodies_are_seen_from_the_headers() {
        let mut h = HeaderMap::new();
        assert!(!has_body(&h));
        h.insert(header::CONTENT_LENGTH, "0".parse().unwrap());
        assert!(!has_body(&h));
        h.insert(header::CONTENT_LENGTH, "1000000".parse().unwrap());
        assert!(has_body(&h));
        let mut h = HeaderMap::new();
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        assert!(has_body(&h));
        let table = [
            Rule {
                method: "GET",
                path: "/api/v1/nodes/{node}/labels",
                need: Need::Agent,
                documented: true,
            },
            Rule {
                method: "GET",
                path: "/api/v1/nodes",
                need: Need::Read(crate::access::routes::Teams::NoTenants),
                documented: true,
            },
        ];
        assert!(agent_route(&table, "/api/v1/nodes/gpu-1/labels"));
        assert!(!agent_route(&table, "/api/v1/nodes"));
    }
}
