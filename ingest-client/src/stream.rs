//! Batches on ingest streams (`model::wire::v1::stream`, docs/ingest.md "The stream"): one
//! upgraded connection carries batch after batch, each answered in turn, where a request each
//! would cost an HTTP exchange on both ends. A client keeps a few open streams and sends each
//! batch on one no other send is using; a collector that does not offer streams (it answers
//! the upgrade with anything but 101) gets requests instead, and is asked again a minute later.
//!
//! A stream is given up when it breaks, when it has been idle long enough that the collector
//! may have closed it, and before the collector's `gpulens-stream-max-age`. A send on a stream
//! kept from an earlier one that breaks before its answer is tried once more on a new stream,
//! and one on a new stream that breaks so as a request: the collector stores a sequence number
//! once, so a batch that was stored after all is answered as a duplicate.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use model::wire::v1::stream::{self, Encoding};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::answer::{Delivered, SendError, answer_of, retry_after};
use crate::token::Token;

/// Open streams kept between sends (the agent uses one; a bench sending 8 at once, 8).
const KEEP: usize = 16;
/// A stream idle this long is closed rather than used: the collector closes one after 120 s.
const IDLE: Duration = Duration::from_secs(60);
/// How long one batch may take on a stream, sending and answer together.
const EXCHANGE: Duration = Duration::from_secs(60);
/// After a collector declined a stream, how long batches go as requests before it is asked
/// again.
const ASK_AGAIN: Duration = Duration::from_secs(60);

/// A client's streams to one collector.
#[derive(Debug)]
pub(crate) struct Streams {
    url: String,
    open: Mutex<Vec<Open>>,
    /// Until when the collector is not asked for a stream.
    declined_until: Mutex<Option<Instant>>,
}

#[derive(Debug)]
struct Open {
    io: reqwest::Upgraded,
    last_used: Instant,
    /// When to stop using it (before the collector's maximum age).
    retire_at: Instant,
}

impl Open {
    fn usable(&self, now: Instant) -> bool {
        now < self.retire_at && now.duration_since(self.last_used) < IDLE
    }
}

impl Streams {
    /// Streams to the collector at `base` (its URL without a path).
    pub(crate) fn new(base: &str) -> Streams {
        Streams {
            url: format!("{}{}", base.trim_end_matches('/'), stream::PATH),
            open: Mutex::default(),
            declined_until: Mutex::default(),
        }
    }

    /// One batch on a stream; None when there is no stream to send it on (the collector
    /// declined one, or opening one failed): the caller sends a request.
    pub(crate) async fn send(
        &self,
        http: &reqwest::Client,
        token: &Token,
        encoding: Encoding,
        body: &[u8],
    ) -> Option<Result<Delivered, SendError>> {
        if self
            .declined_until
            .lock()
            .expect("streams")
            .is_some_and(|until| Instant::now() < until)
        {
            return None;
        }
        let frame = stream::batch_frame(encoding, body);
        if let Some(kept) = self.take() {
            match exchange(kept, &frame).await {
                Ok((answer, open)) => {
                    self.keep(open);
                    return Some(answer);
                }
                // Closed by the collector meanwhile, or broken: once more on a new one.
                Err(e) => {
                    tracing::debug!(error = %e, "an ingest stream kept open broke; opening another")
                }
            }
        }
        let fresh = match self.open(http, token).await {
            Ok(open) => open,
            // The token refused, or too many wrong ones: a request would hear the same (and
            // count as one more wrong token).
            Err(NoStream::Refused(answer)) => return Some(answer),
            Err(NoStream::Declined(why)) => {
                tracing::debug!(collector = %self.url, %why, "no ingest stream; sending batches as requests");
                self.decline();
                return None;
            }
        };
        match exchange(fresh, &frame).await {
            Ok((answer, open)) => {
                self.keep(open);
                Some(answer)
            }
            // A new stream that breaks before its first answer (a proxy that lets the upgrade
            // through but not what follows, or a collector going down): this batch and the
            // next minute's go as requests, which say which it was.
            Err(e) => {
                tracing::warn!(collector = %self.url, error = %e, "an ingest stream broke before its first answer; sending batches as requests for a minute");
                self.decline();
                None
            }
        }
    }

    fn decline(&self) {
        *self.declined_until.lock().expect("streams") = Some(Instant::now() + ASK_AGAIN);
    }

    /// A kept stream still fit to use; the unfit ones are closed.
    fn take(&self) -> Option<Open> {
        let now = Instant::now();
        let mut open = self.open.lock().expect("streams");
        open.retain(|o| o.usable(now));
        open.pop()
    }

    fn keep(&self, stream: Open) {
        let mut open = self.open.lock().expect("streams");
        if open.len() < KEEP {
            open.push(stream);
        }
    }

    /// A new stream: the upgrade asked for and answered 101.
    async fn open(&self, http: &reqwest::Client, token: &Token) -> Result<Open, NoStream> {
        let declined = |e: reqwest::Error| NoStream::Declined(crate::bounded::error_chain(&e));
        let resp = http
            .get(&self.url)
            .header("authorization", format!("Bearer {}", token.current()))
            .header("connection", "upgrade")
            .header("upgrade", stream::UPGRADE)
            .send()
            .await
            .map_err(declined)?;
        let status = resp.status().as_u16();
        if matches!(status, 401 | 403 | 429) {
            let retry_after = retry_after(resp.headers());
            let body = crate::bounded::body(resp, stream::MAX_ANSWER)
                .await
                .unwrap_or_default();
            let value = serde_json::from_slice(&body).unwrap_or_default();
            return Err(NoStream::Refused(answer_of(status, &value, retry_after)));
        }
        if status != 101 {
            return Err(NoStream::Declined(format!(
                "the collector answered {status}"
            )));
        }
        let max_age = resp
            .headers()
            .get(stream::MAX_AGE_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(60), Duration::from_secs);
        let io = resp.upgrade().await.map_err(declined)?;
        let now = Instant::now();
        Ok(Open {
            io,
            last_used: now,
            // A tenth early, so the collector's own closing is not met in the middle of a send.
            retire_at: now + max_age.mul_f64(0.9),
        })
    }
}

/// Why a stream did not open.
enum NoStream {
    /// The credential was refused: the answer for the batch, as a request's would be.
    Refused(Result<Delivered, SendError>),
    /// Anything else (no stream offered, a proxy in the way, the collector down): requests.
    Declined(String),
}

/// Sends one frame on `open` and reads its answer: the send's outcome as a request's would
/// be, and the stream when it can carry the next one. An error when it broke before the
/// answer came.
async fn exchange(
    mut open: Open,
    frame: &[u8],
) -> Result<(Result<Delivered, SendError>, Open), String> {
    let answer = tokio::time::timeout(EXCHANGE, async {
        open.io.write_all(frame).await?;
        open.io.flush().await?;
        // Read as it comes, usually the whole answer in one read. Nothing follows an answer
        // until the next frame is sent, so more than one is a broken stream.
        let mut answer = Vec::with_capacity(512);
        loop {
            if let Some(header) = answer.first_chunk::<{ stream::ANSWER_HEADER }>() {
                let len = u32::from_be_bytes(*header) as usize;
                if len > stream::MAX_ANSWER {
                    return Err(std::io::Error::other(format!(
                        "an answer of {len} bytes; the longest a collector sends is {}",
                        stream::MAX_ANSWER
                    )));
                }
                let whole = stream::ANSWER_HEADER + len;
                if answer.len() > whole {
                    return Err(std::io::Error::other("bytes after the answer"));
                }
                if answer.len() == whole {
                    answer.drain(..stream::ANSWER_HEADER);
                    return Ok(answer);
                }
                answer.reserve(whole - answer.len());
            }
            if open.io.read_buf(&mut answer).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    })
    .await
    .map_err(|_| format!("no answer within {} s", EXCHANGE.as_secs()))?
    .map_err(|e| e.to_string())?;
    let value: serde_json::Value = serde_json::from_slice(&answer)
        .map_err(|e| format!("the collector's answer is not JSON: {e}"))?;
    let status = value["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .ok_or("the collector's answer has no status code")?;
    let retry_after = value["retry_after"].as_u64().map(Duration::from_secs);
    open.last_used = Instant::now();
    Ok((answer_of(status, &value, retry_after), open))
}
