//! Reads what the node's sharing mechanisms granted from the Kubernetes API server
//! (`--kube-api`): the Node (which GPUs HAMi registered), its pods (HAMi and KAI
//! annotations), its ResourceSlices and the ResourceClaims the kubelet says its containers
//! hold — read-only, bounded, and never on the sampling path: a failed read keeps the grants
//! read last.
//!
//! Bounds: an answer is read up to [`MAX_ANSWER`] bytes (the read fails at that byte), each
//! request has [`TIMEOUT`], lists are paged by 500 for at most [`MAX_PAGES`] pages, and at most
//! [`MAX_CLAIMS`] claims are fetched per pass; the node's name and a claim's namespace and name
//! must be DNS names (they end up in a URL path).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::grants::Grants;

/// The most bytes of one answer: a page of 500 pods is a few MiB.
pub const MAX_ANSWER: usize = 16 * 1024 * 1024;
/// Each request's deadline.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// The most pages of one list.
pub const MAX_PAGES: usize = 20;
/// The most claims fetched in one pass.
pub const MAX_CLAIMS: usize = 512;

/// An object's metadata alone (`PartialObjectMetadata`), else the whole object.
const METADATA_ONLY: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json";

/// In-cluster credentials, as the kubelet mounts them.
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A read-only client of the API server.
pub struct KubeRead {
    client: reqwest::Client,
    base: String,
    /// The bearer token, read again as the kubelet rotates it.
    token: Option<ingest_client::Token>,
}

impl KubeRead {
    /// A client of `url`, or — for `in-cluster` — of `KUBERNETES_SERVICE_HOST` with the pod's
    /// ServiceAccount token and CA. `token_file` (read now, and again as the kubelet rotates
    /// projected tokens: [`ingest_client::Token`]) and `ca_file` override those.
    pub fn new(
        url: &str,
        token_file: Option<PathBuf>,
        ca_file: Option<PathBuf>,
    ) -> anyhow::Result<KubeRead> {
        let (base, token_file, ca_file) = if url == "in-cluster" {
            let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| {
                anyhow::anyhow!(
                    "--kube-api in-cluster: KUBERNETES_SERVICE_HOST is not set (not in a pod?)"
                )
            })?;
            let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host
            };
            (
                format!("https://{host}:{port}"),
                token_file.or_else(|| Some(PathBuf::from(SA_DIR).join("token"))),
                ca_file.or_else(|| Some(PathBuf::from(SA_DIR).join("ca.crt"))),
            )
        } else {
            let parsed = reqwest::Url::parse(url)
                .map_err(|e| anyhow::anyhow!("--kube-api {url}: not a URL: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                anyhow::bail!("--kube-api {url}: give an http(s) URL or in-cluster");
            }
            (url.trim_end_matches('/').to_owned(), token_file, ca_file)
        };
        let tls = ingest_client::Tls::from_files(ca_file.as_deref(), None, None)
            .map_err(|e| anyhow::anyhow!("--kube-ca-file: {e}"))?;
        let client = tls
            .apply(ingest_client::http())
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .build()?;
        let token = token_file
            .map(|f| ingest_client::Token::file(&f))
            .transpose()
            .map_err(|e| anyhow::anyhow!("--kube-token-file {e}"))?;
        Ok(KubeRead {
            client,
            base,
            token,
        })
    }

    /// One object or list page, its body bounded by [`MAX_ANSWER`]. `Ok(None)`: 404 (the API
    /// server does not serve that resource, or the object is gone).
    async fn get(&self, path: &str) -> anyhow::Result<Option<Value>> {
        self.get_as(path, "application/json").await
    }

    /// [`KubeRead::get`] asking for the representation `accept` (the API server falls back to
    /// the full object where it cannot serve it).
    async fn get_as(&self, path: &str, accept: &str) -> anyhow::Result<Option<Value>> {
        let mut req = self
            .client
            .get(format!("{}{path}", self.base))
            .header(reqwest::header::ACCEPT, accept);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t.current());
        }
        let resp = req.send().await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !resp.status().is_success() {
            anyhow::bail!("GET {path}: {}", resp.status());
        }
        let body = ingest_client::bounded::body(resp, MAX_ANSWER)
            .await
            .map_err(|e| anyhow::anyhow!("GET {path}: {e}"))?;
        Ok(Some(serde_json::from_slice(&body)?))
    }

    /// Every item of a list, paged; an unserved resource is an empty list.
    async fn list(&self, path: &str) -> anyhow::Result<Vec<Value>> {
        let mut items = Vec::new();
        let mut next: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let sep = if path.contains('?') { '&' } else { '?' };
            let mut page = format!("{path}{sep}limit=500");
            if let Some(c) = &next {
                page.push_str("&continue=");
                page.push_str(&form(c));
            }
            let Some(v) = self.get(&page).await? else {
                return Ok(items);
            };
            items.extend(v["items"].as_array().cloned().unwrap_or_default());
            next = v["metadata"]["continue"]
                .as_str()
                .filter(|c| !c.is_empty())
                .map(str::to_owned);
            if next.is_none() {
                return Ok(items);
            }
        }
        anyhow::bail!("{path}: more than {MAX_PAGES} pages")
    }

    /// What the mechanisms granted on `node`, for the claims `(namespace, name)` the kubelet
    /// says its containers hold.
    pub async fn grants(&self, node: &str, claims: &[(String, String)]) -> anyhow::Result<Grants> {
        // The Node says which GPUs HAMi serves here. Unreadable (a chart without `get nodes`,
        // a name that is no DNS name), HAMi's grants count nowhere: the equal split stands.
        let node_object = if dns_name(node) {
            // Its metadata only: a GPU node's status (images, conditions) is often hundreds of
            // KiB, read by every agent every minute.
            match self
                .get_as(&format!("/api/v1/nodes/{node}"), METADATA_ONLY)
                .await
            {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read this node's object; HAMi's grants are not counted until it can be read");
                    None
                }
            }
        } else {
            None
        };
        let on_node = format!("fieldSelector={}", form(&format!("spec.nodeName={node}")));
        let pods = self.list(&format!("/api/v1/pods?{on_node}")).await?;
        let slices = self
            .list(&format!(
                "/apis/resource.k8s.io/v1/resourceslices?{on_node}"
            ))
            .await?;
        let mut got = Vec::new();
        for (ns, name) in claims.iter().take(MAX_CLAIMS) {
            if !dns_name(ns) || !dns_name(name) {
                continue;
            }
            let path = format!("/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}");
            if let Some(c) = self.get(&path).await? {
                got.push(c);
            }
        }
        Ok(Grants::from_objects(
            node_object.as_ref(),
            &pods,
            &slices,
            &got,
        ))
    }
}

/// How often a node's grants are read again (sooner when the kubelet names a claim the last
/// read did not see): a node's pods, slices and claims are three requests a minute.
pub const REFRESH: Duration = Duration::from_secs(60);

/// The grants of one node as last read, with when and for which claims.
type LastRead = (std::time::Instant, Vec<(String, String)>, Grants);

/// The grants of one node, read again every [`REFRESH`]; a failed read keeps the last.
pub struct NodeGrants {
    pub read: KubeRead,
    pub node: String,
    last: tokio::sync::Mutex<Option<LastRead>>,
}

impl std::fmt::Debug for NodeGrants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeGrants({} at {})", self.node, self.read.base)
    }
}

impl NodeGrants {
    pub fn new(read: KubeRead, node: String) -> NodeGrants {
        NodeGrants {
            read,
            node,
            last: Default::default(),
        }
    }

    /// The grants for the claims `a`'s containers hold: read again when due, else the last.
    pub async fn refresh(&self, a: &crate::kubelet::Assignments) -> Option<Grants> {
        let mut claims: Vec<(String, String)> = a
            .by_dra
            .values()
            .flatten()
            .filter_map(|h| h.claim.as_ref())
            .map(|c| (c.namespace.clone(), c.claim.clone()))
            .collect();
        claims.sort();
        claims.dedup();
        let mut last = self.last.lock().await;
        if let Some((at, seen, g)) = last.as_ref()
            && at.elapsed() < REFRESH
            && claims.iter().all(|c| seen.contains(c))
        {
            return Some(g.clone());
        }
        match self.read.grants(&self.node, &claims).await {
            Ok(g) => {
                // Grants HAMi and KAI wrote before a pod started stand against later edits.
                let g = match last.as_ref() {
                    Some((_, _, earlier)) => g.keeping_first(earlier),
                    None => g,
                };
                *last = Some((std::time::Instant::now(), claims, g.clone()));
                Some(g)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read what the node's sharing mechanisms granted; keeping the last read");
                last.as_ref().map(|l| l.2.clone())
            }
        }
    }
}

/// Percent-encodes a query value.
fn form(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A DNS-1123 subdomain ([`model::names`]): what namespaces and claim names are, and all a
/// name that goes into a URL path may be.
fn dns_name(s: &str) -> bool {
    model::names::check_subdomain(s).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_reach_a_url_are_dns_names() {
        for ok in ["ml", "trainer-gpu", "a.b-c", "x1"] {
            assert!(dns_name(ok), "{ok}");
        }
        for bad in [
            "",
            "../x",
            "a/b",
            "A",
            "-a",
            "a-",
            "a?b",
            "a%2Fb",
            &"a".repeat(254),
        ] {
            assert!(!dns_name(bad), "{bad}");
        }
        assert_eq!(form("spec.nodeName=n 1/&"), "spec.nodeName%3Dn%201%2F%26");
    }
}
