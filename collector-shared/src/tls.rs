//! TLS on the collector's listener (`[server.tls]`): rustls with the certificate and key from
//! files, picked up again when the files change (a renewed certificate needs no restart), and
//! optionally mutual TLS for agents: with `client_ca_file`, a client may present a certificate
//! signed by that CA, and its DNS names then bind the connection to those nodes, as an agent
//! token's `nodes` do (a batch for another node is refused). With `agent_certificates =
//! "required"` (the default when a client CA is set) `POST /api/v1/ingest` refuses a connection
//! without one. Browsers and API clients need no certificate.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use serde::Deserialize;

/// `[server.tls]` in the configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// PEM certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// PEM CA certificates whose client certificates identify agents (mutual TLS).
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// With a client CA: `required` (default) refuses ingest over a connection without a
    /// client certificate; `optional` only binds the nodes of the certificates presented.
    #[serde(default)]
    pub agent_certificates: Option<AgentCertificates>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentCertificates {
    Required,
    Optional,
}

impl TlsSettings {
    /// Whether ingest needs a client certificate.
    pub fn agent_certificates_required(&self) -> bool {
        self.client_ca_file.is_some()
            && self
                .agent_certificates
                .unwrap_or(AgentCertificates::Required)
                == AgentCertificates::Required
    }
}

/// The DNS names of the verified client certificate of a connection, put on each of its
/// requests by the listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    pub names: Vec<String>,
}

impl ClientIdentity {
    /// Whether the certificate names this node (a name matches exactly; case as sent).
    pub fn allows(&self, node: &str) -> bool {
        self.names.iter().any(|n| n.eq_ignore_ascii_case(node))
    }

    /// The one node the certificate names, when it names one.
    pub fn only_name(&self) -> Option<&str> {
        match self.names.as_slice() {
            [n] => Some(n),
            _ => None,
        }
    }
}

/// The identity of a verified client certificate: its subject alternative DNS names.
pub fn identity_of(cert: &CertificateDer<'_>) -> Option<ClientIdentity> {
    let ee = webpki::EndEntityCert::try_from(cert).ok()?;
    let names: Vec<String> = ee.valid_dns_names().map(str::to_owned).collect();
    (!names.is_empty()).then_some(ClientIdentity { names })
}

/// The certificates of a PEM file, the file named in every error.
fn pem_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    CertificateDer::pem_file_iter(path)
        .map_err(|e| anyhow::anyhow!("tls: cannot read {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("tls: {} is not PEM certificates: {e}", path.display()))
}

fn read_key(cert_file: &Path, key_file: &Path) -> anyhow::Result<CertifiedKey> {
    let certs = pem_certs(cert_file)?;
    if certs.is_empty() {
        anyhow::bail!("tls: {} holds no certificate", cert_file.display());
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| {
        anyhow::anyhow!("tls: {} is not a PEM private key: {e}", key_file.display())
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let key = CertifiedKey::from_der(certs, key, &provider).map_err(|e| {
        anyhow::anyhow!(
            "tls: the key in {} does not fit the certificate in {}: {e}",
            key_file.display(),
            cert_file.display()
        )
    })?;
    Ok(key)
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// How often the files are looked at again.
const RECHECK: Duration = Duration::from_secs(2);

/// The server's certificate, read again when its files change. A renewal that does not load
/// (half-written, a key that does not fit) keeps the previous certificate and is logged.
#[derive(Debug)]
struct Reloading {
    cert_file: PathBuf,
    key_file: PathBuf,
    state: Mutex<Current>,
}

#[derive(Debug)]
struct Current {
    key: Arc<CertifiedKey>,
    stamps: (Option<SystemTime>, Option<SystemTime>),
    checked: Instant,
}

impl Reloading {
    fn new(cert_file: &Path, key_file: &Path) -> anyhow::Result<Reloading> {
        let key = read_key(cert_file, key_file)?;
        Ok(Reloading {
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
            state: Mutex::new(Current {
                key: Arc::new(key),
                stamps: (modified(cert_file), modified(key_file)),
                checked: Instant::now(),
            }),
        })
    }

    fn current(&self) -> Arc<CertifiedKey> {
        let mut s = self.state.lock().expect("tls certificate");
        if s.checked.elapsed() >= RECHECK {
            s.checked = Instant::now();
            let stamps = (modified(&self.cert_file), modified(&self.key_file));
            if stamps != s.stamps {
                match read_key(&self.cert_file, &self.key_file) {
                    Ok(k) => {
                        s.key = Arc::new(k);
                        s.stamps = stamps;
                        tracing::info!(cert = %self.cert_file.display(), "tls: certificate reloaded");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "tls: the changed certificate does not load; serving the previous one");
                    }
                }
            }
        }
        s.key.clone()
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The listener's TLS: the acceptor and whether ingest needs a client certificate.
#[derive(Clone)]
pub struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub agent_certificates_required: bool,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field(
                "agent_certificates_required",
                &self.agent_certificates_required,
            )
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Loads the files now, so a mistake stops the start with the file named.
    pub fn from_settings(s: &TlsSettings) -> anyhow::Result<Tls> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| anyhow::anyhow!("tls: {e}"))?;
        let builder = match &s.client_ca_file {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                let certs = pem_certs(ca)?;
                for c in certs {
                    roots.add(c).map_err(|e| {
                        anyhow::anyhow!("tls: a certificate in {} is not a CA: {e}", ca.display())
                    })?;
                }
                if roots.is_empty() {
                    anyhow::bail!("tls: {} holds no CA certificate", ca.display());
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        // Browsers and API clients connect without one; ingest checks.
                        .allow_unauthenticated()
                        .build()
                        .map_err(|e| anyhow::anyhow!("tls: client CA: {e}"))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config =
            builder.with_cert_resolver(Arc::new(Reloading::new(&s.cert_file, &s.key_file)?));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            agent_certificates_required: s.agent_certificates_required(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dir: &Path) -> TlsSettings {
        TlsSettings {
            cert_file: dir.join("tls.crt"),
            key_file: dir.join("tls.key"),
            client_ca_file: None,
            agent_certificates: None,
        }
    }

    #[test]
    fn files_that_do_not_load_stop_the_start_with_the_file_named() {
        let dir = std::env::temp_dir().join(format!(
            "gpulens-tls-unit-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir(&dir).unwrap();
        let s = settings(&dir);
        let e = Tls::from_settings(&s).unwrap_err().to_string();
        assert!(e.contains("tls.crt"), "{e}");
        std::fs::write(dir.join("tls.crt"), "not a certificate\n").unwrap();
        let e = Tls::from_settings(&s).unwrap_err().to_string();
        assert!(e.contains("tls.crt") && e.contains("no certificate"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_client_ca_makes_agent_certificates_required_unless_optional() {
        let mut s = settings(Path::new("/x"));
        assert!(!s.agent_certificates_required());
        s.client_ca_file = Some("/ca.pem".into());
        assert!(s.agent_certificates_required());
        s.agent_certificates = Some(AgentCertificates::Optional);
        assert!(!s.agent_certificates_required());
        let id = ClientIdentity {
            names: vec!["gpu-node-1".into()],
        };
        assert!(id.allows("gpu-node-1") && !id.allows("gpu-node-2"));
    }
}
