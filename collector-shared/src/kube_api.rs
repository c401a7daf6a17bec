//! The one way the collector reaches a Kubernetes API server (the demand poll, node labels,
//! the reclaim loop): a kube client whose every answer is bounded while it is read — a body
//! past [`Bounds::max_answer`] bytes fails the request at that byte, not after parsing —
//! with a connect and a per-read timeout. A whole pass's deadline is the caller's
//! (`tokio::time::timeout` around it), since a trickle of one byte a second passes any
//! per-read timeout.

use std::time::Duration;

use axum::http::Response;
use http_body_util::Limited;
use kube::client::{ClientBuilder, DynBody};

/// What one answer of the API server may cost.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The most bytes of one answer (a page of a listing, a watch's whole stream).
    pub max_answer: usize,
    /// The longest wait for the next bytes of an answer (a watch's server-side timeout must
    /// be shorter).
    pub read_timeout: Duration,
}

impl Bounds {
    /// Listings and object reads: a page of 500 pending pods is a few MiB.
    pub const LISTS: Bounds = Bounds {
        max_answer: 32 * 1024 * 1024,
        read_timeout: Duration::from_secs(30),
    };
    /// Node patches and the label workflow's watches of one node (a watch's stream is one
    /// answer: a node object is tens of KiB, a watch sees a few of them).
    pub const WATCHES: Bounds = Bounds {
        max_answer: 32 * 1024 * 1024,
        read_timeout: Duration::from_secs(330),
    };
}

/// A client of the API server at `url` (else in-cluster, else the kubeconfig), bounded by
/// `bounds`.
pub async fn connect(url: Option<&str>, bounds: Bounds) -> anyhow::Result<kube::Client> {
    let mut config = match url {
        Some(u) => kube::Config::new(
            u.parse()
                .map_err(|e| anyhow::anyhow!("Kubernetes API URL {u:?}: {e}"))?,
        ),
        None => kube::Config::infer().await?,
    };
    config.read_timeout = Some(bounds.read_timeout);
    let max = bounds.max_answer;
    let limit = tower::util::MapResponseLayer::new(move |r: Response<Box<DynBody>>| {
        r.map(move |body| {
            Box::new(http_body_util::BodyExt::map_err(
                Limited::new(body, max),
                move |e| -> tower::BoxError {
                    if e.is::<http_body_util::LengthLimitError>() {
                        format!("the Kubernetes API's answer is larger than {max} bytes").into()
                    } else {
                        e
                    }
                },
            )) as Box<DynBody>
        })
    });
    Ok(ClientBuilder::try_from(config)?.with_layer(&limit).build())
}
