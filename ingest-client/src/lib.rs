//! The wire-protocol client: encodes a [`Batch`] as snappy-compressed MessagePack (the compact
//! layout: structs as arrays), posts it to a collector's `/api/v1/ingest`, and retries what is
//! worth retrying — connection failures, timeouts, 5xx, 408 and 429 — with exponential backoff
//! and jitter, honouring `Retry-After`.
//! Other 4xx answers are final: resending the same batch cannot succeed.
//!
//! A collector that does not take MessagePack (one older than the encoding answers 415) gets
//! every batch from then on as gzip-compressed JSON, which every collector takes: the client
//! re-encodes what it was given, so bodies already encoded (an agent's spool) are never lost
//! to the change.

mod answer;
pub mod backoff;
pub mod bounded;
mod stream;
pub mod token;

pub use answer::{Delivered, SendError};
pub use token::Token;

use answer::{answer_of, retry_after};

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use model::wire::v1::stream::Encoding;
use model::wire::v1::{Batch, Format};

/// Retry policy for [`Client::send_with_retry`].
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    /// Give up after this long (None: never).
    pub give_up_after: Option<Duration>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(30),
            give_up_after: None,
        }
    }
}

/// A reqwest client builder with TLS ready: installs rustls' ring provider as the process
/// default the first time (reqwest is built without a provider of its own). Build every HTTP
/// client of gpulens through this.
pub fn http() -> reqwest::ClientBuilder {
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        // Err: another provider is already installed, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}

/// How HTTPS connections to the collector are made: a CA to trust instead of the default
/// roots (a private CA that signed the collector's certificate), and a client certificate for
/// mutual TLS (its DNS names must include the node the agent sends for).
#[derive(Clone, Default)]
pub struct Tls {
    ca: Option<Vec<reqwest::Certificate>>,
    identity: Option<reqwest::Identity>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("custom_ca", &self.ca.is_some())
            .field("client_certificate", &self.identity.is_some())
            .finish()
    }
}

fn read(path: &std::path::Path, what: &str) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if meta.len() > 1024 * 1024 {
        return Err(format!(
            "{what} {} is {} bytes; a PEM file of certificates is far smaller",
            path.display(),
            meta.len()
        ));
    }
    std::fs::read(path).map_err(|e| format!("{what} {}: {e}", path.display()))
}

impl Tls {
    /// Reads the PEM files: `ca` (one or more CA certificates), and `cert` with `key` (the
    /// client certificate chain and its private key). Errors name the file, never its content.
    pub fn from_files(
        ca: Option<&std::path::Path>,
        cert: Option<&std::path::Path>,
        key: Option<&std::path::Path>,
    ) -> Result<Tls, String> {
        let ca = match ca {
            Some(p) => {
                let certs = reqwest::Certificate::from_pem_bundle(&read(p, "--ca-file")?)
                    .map_err(|e| format!("--ca-file {}: not PEM certificates: {e}", p.display()))?;
                if certs.is_empty() {
                    return Err(format!("--ca-file {}: no certificate in it", p.display()));
                }
                Some(certs)
            }
            None => None,
        };
        let identity = match (cert, key) {
            (Some(c), Some(k)) => {
                let mut pem = read(c, "--client-cert")?;
                pem.push(b'\n');
                pem.extend(read(k, "--client-key")?);
                Some(reqwest::Identity::from_pem(&pem).map_err(|e| {
                    format!(
                        "--client-cert {} / --client-key {}: not a PEM certificate and its key: {e}",
                        c.display(),
                        k.display()
                    )
                })?)
            }
            (None, None) => None,
            _ => return Err("--client-cert and --client-key go together".into()),
        };
        Ok(Tls { ca, identity })
    }

    /// `builder` with these settings.
    pub fn apply(&self, mut builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        if let Some(ca) = &self.ca {
            builder = builder.tls_certs_only(ca.iter().cloned());
        }
        if let Some(id) = &self.identity {
            builder = builder.identity(id.clone());
        }
        builder
    }
}

/// How batches travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// On ingest streams where the collector offers them (`stream.rs`), as requests where it
    /// does not.
    #[default]
    Stream,
    /// One `POST /api/v1/ingest` each.
    Post,
}

/// A collector endpoint with credentials.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    token: Token,
    /// Set once the collector refused MessagePack: JSON from then on, for every clone, until
    /// the program restarts (and tries MessagePack again).
    json_only: Arc<AtomicBool>,
    transport: Transport,
    /// The open ingest streams, shared by every clone.
    streams: Arc<stream::Streams>,
}

/// The encoding of a body [`Client::encode`] or [`Client::encode_json`] made: gzip (its magic
/// `1f 8b`) holds JSON, anything else is a snappy block of MessagePack (a snappy block cannot
/// start with those bytes: `8b` would be a copy before any data).
pub fn format_of(body: &[u8]) -> Format {
    if body.starts_with(&[0x1f, 0x8b]) {
        Format::Json
    } else {
        Format::MessagePack
    }
}

/// The batch a body [`Client::encode`] or [`Client::encode_json`] made holds (for stand-ins
/// of the collector and for re-encoding; a collector decodes untrusted bodies with `intake`).
pub fn decode(body: &[u8]) -> Result<Batch, String> {
    match format_of(body) {
        Format::Json => {
            let mut json = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(body), &mut json)
                .map_err(|e| format!("gzip: {e}"))?;
            serde_json::from_slice(&json).map_err(|e| format!("JSON batch: {e}"))
        }
        Format::MessagePack => {
            let packed = snap::raw::Decoder::new()
                .decompress_vec(body)
                .map_err(|e| format!("snappy: {e}"))?;
            rmp_serde::from_slice(&packed).map_err(|e| format!("MessagePack batch: {e}"))
        }
    }
}

/// `Content-Encoding` of a body in `format`, as this client compresses it.
pub fn content_encoding(format: Format) -> &'static str {
    match format {
        Format::Json => "gzip",
        Format::MessagePack => "snappy",
    }
}

fn encode_error(e: impl std::fmt::Display) -> SendError {
    SendError::Encode(e.to_string())
}

impl Client {
    /// `collector` is the base URL, e.g. `http://127.0.0.1:8080`.
    pub fn new(collector: &str, token: &str) -> Result<Client, SendError> {
        Client::with_tls(collector, token, &Tls::default())
    }

    /// [`Client::new`] with TLS settings for an `https://` collector.
    pub fn with_tls(collector: &str, token: &str, tls: &Tls) -> Result<Client, SendError> {
        Client::with_token(collector, Token::fixed(token), tls)
    }

    /// [`Client::with_tls`] with a token that may change while the client runs (a token file
    /// the kubelet rotates).
    pub fn with_token(collector: &str, token: Token, tls: &Tls) -> Result<Client, SendError> {
        let http = tls
            .apply(http())
            .timeout(Duration::from_secs(60))
            .connect_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(4)
            .build()
            .map_err(|e| SendError::Encode(format!("cannot build HTTP client: {e}")))?;
        Ok(Client {
            http,
            url: format!("{}/api/v1/ingest", collector.trim_end_matches('/')),
            token,
            json_only: Arc::default(),
            transport: Transport::default(),
            streams: Arc::new(stream::Streams::new(collector)),
        })
    }

    /// This client sending over `transport` (streams where offered, by default).
    pub fn with_transport(self, transport: Transport) -> Client {
        Client { transport, ..self }
    }

    /// Encodes a batch as the wire body: MessagePack in the compact layout (structs as arrays,
    /// `model::wire::v1::to_compact`), snappy-compressed (what the agent spools and sends).
    pub fn encode(batch: &Batch) -> Result<Vec<u8>, SendError> {
        let packed = model::wire::v1::to_compact(batch).map_err(encode_error)?;
        Client::compress(&packed)
    }

    /// [`Client::encode`] with structs as maps keyed by field name, as most MessagePack
    /// libraries write them (for measuring the two layouts side by side).
    pub fn encode_named(batch: &Batch) -> Result<Vec<u8>, SendError> {
        let packed = rmp_serde::to_vec_named(batch).map_err(encode_error)?;
        Client::compress(&packed)
    }

    fn compress(packed: &[u8]) -> Result<Vec<u8>, SendError> {
        snap::raw::Encoder::new()
            .compress_vec(packed)
            .map_err(encode_error)
    }

    /// A batch as gzip-compressed JSON, the encoding every collector takes.
    pub fn encode_json(batch: &Batch) -> Result<Vec<u8>, SendError> {
        let json = serde_json::to_vec(batch).map_err(encode_error)?;
        let mut gz = flate2::write::GzEncoder::new(
            Vec::with_capacity(json.len() / 6),
            flate2::Compression::fast(),
        );
        gz.write_all(&json).map_err(encode_error)?;
        gz.finish().map_err(encode_error)
    }

    /// A MessagePack body made by [`Client::encode`] as JSON.
    fn to_json(body: &[u8]) -> Result<Vec<u8>, SendError> {
        Client::encode_json(&decode(body).map_err(SendError::Encode)?)
    }

    /// One attempt to deliver a body [`Client::encode`] or [`Client::encode_json`] made. A
    /// MessagePack body the collector refuses with 415 is sent again at once as JSON, and so
    /// is every later one.
    pub async fn send_encoded(&self, body: Vec<u8>) -> Result<Delivered, SendError> {
        let format = format_of(&body);
        if format == Format::Json || self.json_only.load(Ordering::Relaxed) {
            let json = match format {
                Format::Json => body,
                Format::MessagePack => Client::to_json(&body)?,
            };
            return self.deliver(Format::Json, json).await;
        }
        match self.deliver(Format::MessagePack, body.clone()).await {
            Err(SendError::Rejected {
                status: 415,
                message,
            }) => {
                if !self.json_only.swap(true, Ordering::Relaxed) {
                    tracing::warn!(collector = %self.url, answer = %message, "the collector does not take MessagePack batches (a collector older than the agent?); sending JSON from now on");
                }
                self.deliver(Format::Json, Client::to_json(&body)?).await
            }
            other => other,
        }
    }

    async fn deliver(&self, format: Format, body: Vec<u8>) -> Result<Delivered, SendError> {
        if self.transport == Transport::Stream
            && let Some(encoding) = Encoding::of(format, content_encoding(format))
            && let Some(answer) = self
                .streams
                .send(&self.http, &self.token, encoding, &body)
                .await
        {
            return answer;
        }
        let resp = self
            .http
            .post(&self.url)
            .header("authorization", format!("Bearer {}", self.token.current()))
            .header("content-type", format.content_type())
            .header("content-encoding", content_encoding(format))
            .body(body)
            .send()
            .await
            .map_err(|e| SendError::Retryable {
                message: bounded::error_chain(&e),
                retry_after: None,
            })?;
        let status = resp.status().as_u16();
        let retry_after = retry_after(resp.headers());
        // A collector's answer is a few hundred bytes; anything past 64 KiB is not read.
        let text = bounded::body(resp, 64 * 1024)
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let value = serde_json::from_str(&text)
            .unwrap_or_else(|_| serde_json::Value::String(text.chars().take(500).collect()));
        answer_of(status, &value, retry_after)
    }

    /// Delivers a batch, retrying retryable failures until it is stored, refused, or the
    /// policy gives up. `on_retry` hears about each failed attempt.
    pub async fn send_with_retry(
        &self,
        batch: &Batch,
        policy: Backoff,
        mut on_retry: impl FnMut(&SendError, Duration),
    ) -> Result<Delivered, SendError> {
        let body = Client::encode(batch)?;
        let started = std::time::Instant::now();
        let mut delays = backoff::Delays::new(policy.initial, policy.max, batch.seq);
        loop {
            match self.send_encoded(body.clone()).await {
                Ok(d) => return Ok(d),
                Err(e @ SendError::Retryable { .. }) => {
                    if policy.give_up_after.is_some_and(|g| started.elapsed() >= g) {
                        return Err(e);
                    }
                    let SendError::Retryable { retry_after, .. } = &e else {
                        unreachable!()
                    };
                    let wait = delays.next(*retry_after);
                    on_retry(&e, wait);
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips() {
        let b = Batch {
            version: 1,
            cluster: "c".into(),
            node: "n".into(),
            agent_id: "a".into(),
            seq: 1,
            agent_version: None,
            interval_ms: 1000,
            inventory: None,
            tenants: vec![],
            snapshots: vec![],
        };
        let body = Client::encode(&b).unwrap();
        assert_eq!(format_of(&body), Format::MessagePack);
        let packed = snap::raw::Decoder::new().decompress_vec(&body).unwrap();
        assert_eq!(rmp_serde::from_slice::<Batch>(&packed).unwrap(), b);
        assert_eq!(decode(&body).unwrap(), b);
        let json = Client::to_json(&body).unwrap();
        assert_eq!(format_of(&json), Format::Json);
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&json[..]), &mut out).unwrap();
        assert_eq!(serde_json::from_slice::<Batch>(&out).unwrap(), b);
        assert_eq!(decode(&json).unwrap(), b);
    }
}
