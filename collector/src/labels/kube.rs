//! The Kubernetes API side of labelling: converge a node's advisory labels, and the few node
//! operations the reconfiguration workflow needs (cordon, GPU pods, one operator label, watch).
//! Every label write goes through [`model::labels`]' allow-list first.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use model::labels::{self, MANAGED_ANNOTATION, Purpose};
use serde_json::{Value, json};

use super::layouts::{Change, Layout, LayoutError, entry};

/// Why a Kubernetes operation failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error(transparent)]
    Refused(#[from] labels::LabelError),
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
    #[error("node {0:?} not found")]
    NoNode(String),
    #[error("{object} changed while gpulens was writing it; gave up after {tries} tries")]
    Conflict { object: String, tries: usize },
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error(
        "ConfigMap {namespace}/{name} not found: custom layouts go into the ConfigMap the ClusterPolicy names (migManager.config.name, devicePlugin.config.name); create it or set [labels.custom_layouts]"
    )]
    NoConfigMap { namespace: String, name: String },
    #[error("refusing to name Kubernetes object {0:?}: {1}")]
    BadName(String, String),
}

/// Every object name gpulens puts into an API path or a field selector is checked here first:
/// kube builds paths by formatting, so a name with `?`, `/` or `,` would address another
/// object or widen a selector. Node, ConfigMap and namespace names are DNS-1123 subdomains.
fn object_name(name: &str) -> Result<&str, KubeError> {
    model::names::check_subdomain(name)
        .map(|()| name)
        .map_err(|why| KubeError::BadName(name.to_owned(), why))
}

/// What converging a node's advisory labels did.
#[derive(Debug, Default, PartialEq)]
pub struct Converged {
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
}

impl Converged {
    pub fn is_noop(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }
}

/// A Kubernetes client for one cluster's nodes.
#[derive(Clone)]
pub struct Cluster {
    client: kube::Client,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cluster")
    }
}

fn labels_of(n: &Node) -> BTreeMap<String, String> {
    n.metadata.labels.clone().unwrap_or_default()
}

fn managed_of(n: &Node) -> Vec<String> {
    n.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MANAGED_ANNOTATION))
        .map(|v| {
            v.split(',')
                .filter(|k| !k.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// How many times a write is retried when the node changed under it.
pub(crate) const CONFLICT_TRIES: usize = 5;

impl Cluster {
    /// The cluster at `url` (plain or TLS, no credentials: tests and `kubectl proxy`), or, with
    /// `None`, the in-cluster service account or the local kubeconfig.
    pub async fn connect(url: Option<&str>) -> anyhow::Result<Cluster> {
        let client =
            collector_shared::kube_api::connect(url, collector_shared::kube_api::Bounds::WATCHES)
                .await?;
        Ok(Cluster { client })
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    pub async fn node(&self, name: &str) -> Result<Node, KubeError> {
        let name = object_name(name)?;
        self.nodes()
            .get_opt(name)
            .await?
            .ok_or_else(|| KubeError::NoNode(name.to_owned()))
    }

    /// Makes the node's `gpulens.io/` labels exactly `desired`: adds and changes what differs,
    /// removes labels gpulens set before (listed in its annotation) that are no longer wanted,
    /// and touches no other label. The patch carries the node's resource version, so a
    /// concurrent change makes it retry on fresh data instead of overwriting.
    pub async fn converge_advisory(
        &self,
        name: &str,
        desired: &BTreeMap<String, String>,
    ) -> Result<Converged, KubeError> {
        let name = object_name(name)?;
        labels::check_all(desired, Purpose::Advisory)?;
        for _ in 0..CONFLICT_TRIES {
            let node = self.node(name).await?;
            let current = labels_of(&node);
            let mut done = Converged::default();
            let mut patch = serde_json::Map::new();
            for (k, v) in desired {
                match current.get(k) {
                    Some(c) if c == v => {}
                    Some(_) => {
                        done.changed.push(k.clone());
                        patch.insert(k.clone(), json!(v));
                    }
                    None => {
                        done.added.push(k.clone());
                        patch.insert(k.clone(), json!(v));
                    }
                }
            }
            let managed = managed_of(&node);
            for k in &managed {
                // Only keys that pass the allow-list are ever removed, whatever the annotation says.
                if !desired.contains_key(k)
                    && current.contains_key(k)
                    && labels::check_key(k, Purpose::Advisory).is_ok()
                {
                    done.removed.push(k.clone());
                    patch.insert(k.clone(), Value::Null);
                }
            }
            let annotation = desired.keys().cloned().collect::<Vec<_>>().join(",");
            if done.is_noop() && managed.join(",") == annotation {
                return Ok(done);
            }
            let body = json!({
                "metadata": {
                    "resourceVersion": node.metadata.resource_version,
                    "labels": patch,
                    "annotations": { MANAGED_ANNOTATION: annotation },
                }
            });
            match self
                .nodes()
                .patch(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                Ok(_) => return Ok(done),
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(KubeError::Conflict {
            object: format!("node {name:?}"),
            tries: CONFLICT_TRIES,
        })
    }

    /// [`Cluster::converge_advisory`] for a node that may not be in this cluster (a Slurm or
    /// host node the analysis also covers): `Ok(None)` when the API server does not know it.
    pub async fn converge_if_known(
        &self,
        name: &str,
        desired: &BTreeMap<String, String>,
    ) -> Result<Option<Converged>, KubeError> {
        match self.converge_advisory(name, desired).await {
            Ok(c) => Ok(Some(c)),
            Err(KubeError::NoNode(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets (`Some`) or removes (`None`) one GPU Operator label; returns the node's resource
    /// version after the write.
    pub async fn set_operator_label(
        &self,
        name: &str,
        key: &str,
        value: Option<&str>,
    ) -> Result<String, KubeError> {
        let name = object_name(name)?;
        labels::check_key(key, Purpose::Actuation)?;
        if let Some(v) = value {
            labels::check_value(key, v)?;
        }
        let body = json!({ "metadata": { "labels": { key: value } } });
        let n = self
            .nodes()
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
        Ok(n.metadata.resource_version.unwrap_or_default())
    }

    /// A ConfigMap's data and resource version.
    pub async fn configmap_data(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<(BTreeMap<String, String>, String), KubeError> {
        let namespace = object_name(namespace)?;
        let name = object_name(name)?;
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let cm = api
            .get_opt(name)
            .await?
            .ok_or_else(|| KubeError::NoConfigMap {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })?;
        Ok((
            cm.data.unwrap_or_default(),
            cm.metadata.resource_version.unwrap_or_default(),
        ))
    }

    /// Sets one key of a ConfigMap if it is still at `resource_version`; `false` when it
    /// changed since (read it again).
    pub async fn put_configmap_entry(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
        value: &str,
        resource_version: &str,
    ) -> Result<bool, KubeError> {
        let namespace = object_name(namespace)?;
        let name = object_name(name)?;
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let body = json!({
            "metadata": { "resourceVersion": resource_version },
            "data": { key: value },
        });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Marks the node (un)schedulable.
    pub async fn set_unschedulable(&self, name: &str, on: bool) -> Result<(), KubeError> {
        let name = object_name(name)?;
        let body =
            json!({ "spec": { "unschedulable": if on { json!(true) } else { Value::Null } } });
        self.nodes()
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
        Ok(())
    }

    /// Pods on the node that request a GPU resource (`nvidia.com/…`) and have not finished.
    pub async fn gpu_pods(&self, name: &str) -> Result<Vec<String>, KubeError> {
        let name = object_name(name)?;
        let pods: Api<Pod> = Api::all(self.client.clone());
        let list = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await?;
        Ok(list
            .items
            .iter()
            .filter(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                !matches!(phase, Some("Succeeded" | "Failed"))
            })
            .filter(|p| {
                p.spec.as_ref().is_some_and(|s| {
                    s.containers.iter().any(|c| {
                        c.resources.as_ref().is_some_and(|r| {
                            [r.limits.as_ref(), r.requests.as_ref()]
                                .into_iter()
                                .flatten()
                                .any(|m| m.keys().any(|k| k.starts_with("nvidia.com/")))
                        })
                    })
                })
            })
            .map(|p| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or("default"),
                    p.metadata.name.as_deref().unwrap_or("?")
                )
            })
            .collect())
    }

    /// Watches the node from `resource_version` until `label` has a value `wanted` takes;
    /// returns it and the resource version it was seen at (to watch on from there), or `None`
    /// when `timeout` passes first.
    pub async fn wait_for_label<T>(
        &self,
        name: &str,
        label: &str,
        wanted: &(dyn Fn(&str) -> Option<T> + Sync),
        resource_version: &str,
        timeout: Duration,
    ) -> Result<Option<(T, String)>, KubeError> {
        let name = object_name(name)?;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rv = resource_version.to_owned();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let wp = WatchParams::default()
                .fields(&format!("metadata.name={name}"))
                .timeout(left.as_secs().clamp(1, 290) as u32);
            let stream = self.nodes().watch(&wp, &rv).await?;
            let mut stream = std::pin::pin!(stream);
            loop {
                let next = tokio::time::timeout_at(deadline, stream.next()).await;
                let Ok(item) = next else {
                    return Ok(None);
                };
                match item {
                    None => break,
                    Some(Ok(WatchEvent::Added(n) | WatchEvent::Modified(n))) => {
                        rv = n.metadata.resource_version.clone().unwrap_or(rv);
                        if let Some(v) = labels_of(&n).get(label).and_then(|v| wanted(v)) {
                            return Ok(Some((v, rv)));
                        }
                    }
                    Some(Ok(WatchEvent::Bookmark(b))) => rv = b.metadata.resource_version,
                    Some(Ok(WatchEvent::Deleted(_))) => return Err(KubeError::NoNode(name.into())),
                    Some(Ok(WatchEvent::Error(e))) if e.code == 410 => {
                        // Too old: start again from the node as it is now.
                        rv = self
                            .node(name)
                            .await?
                            .metadata
                            .resource_version
                            .unwrap_or_default();
                        break;
                    }
                    Some(Ok(WatchEvent::Error(e))) => {
                        return Err(KubeError::Api(kube::Error::Api(e)));
                    }
                    Some(Err(e)) => return Err(e.into()),
                }
            }
        }
    }
}

/// Writes `layout` under `name` into its ConfigMap, retrying on fresh data when the ConfigMap
/// changed under the write.
pub async fn write_layout(c: &Cluster, layout: &Layout, name: &str) -> Result<Change, KubeError> {
    let (ns, map) = (layout.namespace(), layout.config_map());
    for _ in 0..CONFLICT_TRIES {
        let (data, rv) = c.configmap_data(ns, map).await?;
        let (key, value, change) = entry(layout, name, &data)?;
        let Some(value) = value else {
            return Ok(change);
        };
        if c.put_configmap_entry(ns, map, &key, &value, &rv).await? {
            return Ok(change);
        }
    }
    Err(KubeError::Conflict {
        object: format!("ConfigMap {ns}/{map}"),
        tries: CONFLICT_TRIES,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `gpu-a?x=1` made the label writer cordon, label and uncordon `gpu-a`.
    #[test]
    fn names_that_would_address_another_object_are_refused() {
        assert_eq!(object_name("gpu-a").unwrap(), "gpu-a");
        for bad in ["gpu-a?x=1", "gpu-a/status", "a,spec.nodeName=b", "", "A"] {
            let err = object_name(bad).unwrap_err().to_string();
            assert!(err.contains("refusing to name Kubernetes object"), "{err}");
        }
    }
}
