//! Sending the outbox: each receiver's notifications in order, every attempt stored.
//!
//! 2xx delivers. 408, 429, 5xx, timeouts and connection failures are retried with a backoff
//! that doubles from one second up to `group_interval`; the notification and every one queued
//! behind it for the receiver wait, so a receiver that comes back gets them all, in order.
//! Other 4xx answers fail the notification at once (sending it again cannot help) and the
//! next one goes. Slack URLs get at most one message a second.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::settings::Receiver;
use collector_shared::signing::signed;
use store::Store;
use store::alerts::Attempt;

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Delivered,
    Retry,
    Failed,
}

impl Verdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Delivered => "delivered",
            Verdict::Retry => "retry",
            Verdict::Failed => "failed",
        }
    }
}

/// Classifies an HTTP status.
pub fn verdict(status: u16) -> Verdict {
    match status {
        200..=299 => Verdict::Delivered,
        408 | 429 | 500..=599 => Verdict::Retry,
        _ => Verdict::Failed,
    }
}

/// The wait before the next attempt after `attempts` failed ones: a second, doubled per
/// failure, up to `cap` (the outbox keeps the count, not a sender).
pub fn backoff(attempts: i64, cap: Duration) -> Duration {
    let failures = u32::try_from(attempts.max(0)).unwrap_or(u32::MAX);
    ingest_client::backoff::doubled(Duration::from_secs(1), failures, cap)
}

/// Sends notifications; remembers when each URL of a receiver with a least gap between posts
/// (Slack) was last used.
pub struct Sender {
    http: reqwest::Client,
    last_post: HashMap<String, Instant>,
    pub metrics: super::metrics::AlertMetrics,
}

/// Notifications sent per receiver and tick at most (the rest wait for the next tick).
const BATCH: i64 = 50;

impl Sender {
    pub fn new() -> anyhow::Result<Sender> {
        Ok(Sender {
            http: ingest_client::http()
                .user_agent(concat!("gpulens/", env!("CARGO_PKG_VERSION")))
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
            last_post: HashMap::new(),
            metrics: Default::default(),
        })
    }

    /// One POST; the verdict, the status if one came, and what happened.
    pub async fn post(
        &mut self,
        r: &Receiver,
        url: &str,
        body: &str,
        notification: i64,
    ) -> (Verdict, Option<u16>, String) {
        let min_gap = r.kind.format().min_gap();
        if !min_gap.is_zero() {
            if let Some(last) = self.last_post.get(url) {
                tokio::time::sleep(min_gap.saturating_sub(last.elapsed())).await;
            }
            self.last_post.insert(url.to_owned(), Instant::now());
        }
        let req = self
            .http
            .post(url)
            .timeout(r.timeout)
            .header("content-type", "application/json")
            .header("x-gpulens-notification-id", notification.to_string());
        match signed(req, r.secret.as_ref(), body)
            .body(body.to_owned())
            .send()
            .await
        {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let v = verdict(status);
                let detail = if v == Verdict::Delivered {
                    format!("HTTP {status}")
                } else {
                    // The first 300 bytes say why; the rest is never read (an
                    // endless error body took the collector to 9 GB).
                    let text = ingest_client::bounded::prefix(resp, 300).await;
                    format!("HTTP {status}: {text}")
                };
                (v, Some(status), detail)
            }
            Err(e) if e.is_timeout() => (
                Verdict::Retry,
                None,
                format!(
                    "no answer within {}",
                    model::time::format_duration(r.timeout)
                ),
            ),
            // The URL (a Slack secret) stays out of the message.
            Err(e) => (
                Verdict::Retry,
                None,
                format!("cannot reach the receiver: {}", e.without_url()),
            ),
        }
    }

    /// Sends the receiver's due notifications in order until one must wait; `now` is the
    /// pass's time (attempts are stored at it).
    pub async fn drain(
        &mut self,
        store: &Store,
        r: &Receiver,
        cap: Duration,
        now: i64,
    ) -> anyhow::Result<usize> {
        let url = r.kind.format().endpoint(&r.url.0);
        let mut sent = 0;
        for n in store.queued_notifications(&r.name, BATCH).await? {
            if n.next_ms > now {
                break;
            }
            let started = Instant::now();
            let (v, status, detail) = self.post(r, &url, &n.payload, n.id).await;
            // An attempt is stored at its end: the pass's time plus how long the request took.
            let elapsed = started.elapsed();
            self.metrics
                .attempts
                .get_or_create(&super::metrics::AttemptLabels {
                    receiver: r.name.clone(),
                    outcome: v.as_str(),
                })
                .inc();
            self.metrics.attempt_duration.observe(elapsed.as_secs_f64());
            let took = elapsed.as_millis() as i64;
            let at = now + took;
            let attempt = Attempt {
                ts_ms: at,
                outcome: v.as_str().into(),
                http_status: status.map(i32::from),
                detail: detail.clone(),
                duration_ms: took,
            };
            let (state, next) = match v {
                Verdict::Delivered => ("delivered", at),
                Verdict::Failed => ("failed", at),
                Verdict::Retry => ("queued", at + backoff(n.attempts, cap).as_millis() as i64),
            };
            store.record_attempt(n.id, &attempt, state, next).await?;
            match v {
                Verdict::Delivered => sent += 1,
                Verdict::Failed => {
                    tracing::error!(receiver = %r.name, notification = n.id, %detail, "the receiver refused a notification; not retried")
                }
                Verdict::Retry => {
                    if n.attempts == 0 {
                        tracing::warn!(receiver = %r.name, notification = n.id, %detail, "notification not delivered; retrying with backoff");
                    }
                    break;
                }
            }
        }
        Ok(sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_backoff() {
        assert_eq!(verdict(200), Verdict::Delivered);
        assert_eq!(verdict(204), Verdict::Delivered);
        assert_eq!(verdict(500), Verdict::Retry);
        assert_eq!(verdict(503), Verdict::Retry);
        assert_eq!(verdict(429), Verdict::Retry);
        assert_eq!(verdict(408), Verdict::Retry);
        assert_eq!(verdict(400), Verdict::Failed);
        assert_eq!(verdict(404), Verdict::Failed);
        assert_eq!(verdict(302), Verdict::Failed);
        let cap = Duration::from_secs(300);
        assert_eq!(backoff(0, cap), Duration::from_secs(1));
        assert_eq!(backoff(3, cap), Duration::from_secs(8));
        assert_eq!(backoff(30, cap), cap);
    }
}
