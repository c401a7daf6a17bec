//! A **stand-in** for the Kubernetes API server, for tests and `gpulens demo`: no Kubernetes API server can
//! run on the machines gpulens is built and tested on. It serves the small part of the core/v1
//! API that gpulens' label writer and reconfiguration workflow use, over real HTTP, with the real
//! object shapes:
//!
//! - Nodes: `GET /api/v1/nodes[/{name}]` (one node's metadata alone for an `Accept` of
//!   `PartialObjectMetadata`), `PATCH /api/v1/nodes/{name}` with
//!   `application/merge-patch+json` (RFC 7386), `application/strategic-merge-patch+json` (maps
//!   merge as in a merge patch; `$patch` directives are refused, lists are replaced) and
//!   `application/apply-patch+yaml` (server-side apply: a field manager is required, and labels
//!   and annotations it applied before and leaves out are removed), watch
//!   (`?watch=true`, `fieldSelector=metadata.name=…`, `resourceVersion`, `timeoutSeconds`).
//! - Pods: `GET /api/v1/pods` and `/api/v1/namespaces/{ns}/pods` with
//!   `fieldSelector=spec.nodeName=…` and/or `status.phase=…`, paged with `limit` and
//!   `continue` as the API server pages lists.
//! - ConfigMaps: `GET`, `POST`, `PATCH` (merge) in a namespace.
//! - TokenReview of the projected ServiceAccount tokens it issues (tokens.rs).
//! - DRA (`resource.k8s.io/v1`): ResourceSlices listed with `fieldSelector=spec.nodeName=…`
//!   ([`StandIn::add_resource_slice`]), ResourceClaims got by namespace and name.
//! - Kueue Workloads (`kueue.x-k8s.io/v1beta1`): `GET /apis/kueue.x-k8s.io/v1beta1/workloads`,
//!   paged like pods, once [`StandIn::install_kueue`] has installed the CRD; before that the
//!   path is 404, as on an API server without Kueue.
//! - Workload controllers: Deployments, ReplicaSets, StatefulSets (`apps/v1`), Jobs
//!   (`batch/v1`) and Kueue Workloads, `GET` one, list a namespace's, and `PATCH` one with a
//!   merge patch (`/apis/{group}/{version}/namespaces/{ns}/{plural}[/{name}]`); a single pod
//!   by `GET /api/v1/namespaces/{ns}/pods/{name}`. Nothing acts on a change: tests play the
//!   controllers (a Deployment scaled to zero keeps its pods until the test removes them).
//!
//! Every stored object is checked by deserializing it into its `k8s-openapi` type, label keys
//! and values by Kubernetes' syntax rules; a `metadata.resourceVersion` in a patch that is not
//! current gives 409 Conflict. Errors are `metav1.Status` objects. Tests act as other
//! controllers through [`StandIn::set_label`], [`StandIn::add_pod`] and [`StandIn::remove_pod`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use serde_json::{Value, json};
use tokio::sync::broadcast;

mod faults;
pub mod hostile;
mod tokens;
mod wire;

pub use faults::Fault;
pub use tokens::{API_SERVER_AUDIENCE, TokenFor, Tokens};

use wire::{
    Failure, KINDS, ObjectKey, check_object, has_directive, keys, merge_patch, no_resource,
    not_found, object_key, parse_body, selector, status, validate,
};

/// One change to a node, as a watch reports it.
#[derive(Debug, Clone)]
pub struct NodeEvent {
    pub kind: &'static str,
    pub resource_version: u64,
    pub node: Value,
}

#[derive(Default)]
struct State_ {
    rv: u64,
    nodes: BTreeMap<String, Value>,
    pods: Vec<Value>,
    configmaps: BTreeMap<(String, String), Value>,
    /// Workload controllers and Kueue Workloads by (`group/version`, plural, namespace, name).
    objects: BTreeMap<ObjectKey, Value>,
    /// Whether Kueue's Workload CRD is installed.
    kueue: bool,
    /// Label and annotation keys each field manager applied, per node.
    applied: BTreeMap<(String, String), (BTreeSet<String>, BTreeSet<String>)>,
    /// Recent node events, for watches that start from an older resource version.
    history: VecDeque<NodeEvent>,
    /// Every mutating request: (method, path, content type).
    requests: Vec<(String, String, String)>,
    /// How many node reads asked for the metadata alone.
    metadata_reads: usize,
}

/// The running stand-in. Cheap to clone.
#[derive(Clone)]
pub struct StandIn {
    state: Arc<Mutex<State_>>,
    events: broadcast::Sender<NodeEvent>,
    url: String,
    /// Failures to answer instead of serving (tests of what a client does on an API error).
    faults: faults::Faults,
    tokens: tokens::Tokens,
}

impl std::fmt::Debug for StandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StandIn({})", self.url)
    }
}

type Shared = StandIn;

impl StandIn {
    /// Starts a stand-in on a free loopback port.
    pub async fn start() -> StandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let (events, _) = broadcast::channel(1024);
        let s = StandIn {
            state: Arc::new(Mutex::new(State_::default())),
            events,
            url,
            faults: Default::default(),
            tokens: Default::default(),
        };
        let app = Router::new()
            .route("/api/v1/nodes", get(list_nodes))
            .route("/api/v1/nodes/{name}", get(get_node).patch(patch_node))
            .route("/api/v1/pods", get(list_pods_all))
            .route("/api/v1/namespaces/{ns}/pods", get(list_pods_ns))
            .route(
                "/apis/kueue.x-k8s.io/v1beta1/workloads",
                get(list_workloads),
            )
            .route("/api/v1/namespaces/{ns}/pods/{name}", get(get_pod))
            .route(
                "/apis/resource.k8s.io/v1/resourceslices",
                get(list_resource_slices),
            )
            .route(
                "/apis/{group}/{version}/namespaces/{ns}/{plural}",
                get(list_objects),
            )
            .route(
                "/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}",
                get(get_object).patch(patch_object),
            )
            .route(
                "/api/v1/namespaces/{ns}/configmaps",
                axum::routing::post(create_configmap),
            )
            .route(
                "/api/v1/namespaces/{ns}/configmaps/{name}",
                get(get_configmap).patch(patch_configmap),
            )
            .route(
                tokens::PATH,
                axum::routing::post(tokens::review).with_state(s.tokens.clone()),
            )
            .fallback(|| async {
                status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    "the stand-in does not serve this path",
                )
            })
            .layer(axum::middleware::from_fn_with_state(
                s.faults.clone(),
                faults::answer,
            ))
            .with_state(s.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        s
    }

    /// The base URL, e.g. for `kube::Config::new`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The projected ServiceAccount tokens it issues and reviews.
    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State_> {
        self.state.lock().expect("stand-in state")
    }

    /// Adds (or replaces) a node.
    pub fn add_node(&self, node: Node) {
        let mut v = serde_json::to_value(&node).expect("a Node serializes");
        v["apiVersion"] = json!("v1");
        v["kind"] = json!("Node");
        let name = node.metadata.name.clone().expect("a node has a name");
        let mut st = self.lock();
        let kind = if st.nodes.contains_key(&name) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.commit_node(&mut st, name, v, kind);
    }

    /// A node as it is now.
    pub fn node(&self, name: &str) -> Option<Node> {
        let st = self.lock();
        st.nodes
            .get(name)
            .map(|v| serde_json::from_value(v.clone()).expect("stored nodes are valid"))
    }

    /// Sets (`Some`) or removes (`None`) a label as another controller would (e.g. the GPU
    /// Operator's MIG manager reporting `nvidia.com/mig.config.state`).
    pub fn set_label(&self, node: &str, key: &str, value: Option<&str>) {
        let mut st = self.lock();
        let mut v = st.nodes.get(node).expect("known node").clone();
        let labels = v["metadata"]
            .as_object_mut()
            .expect("metadata")
            .entry("labels")
            .or_insert_with(|| json!({}));
        match value {
            Some(x) => labels[key] = json!(x),
            None => {
                labels.as_object_mut().map(|m| m.remove(key));
            }
        }
        self.commit_node(&mut st, node.to_owned(), v, "MODIFIED");
    }

    /// Adds a pod (its `spec.nodeName` places it).
    pub fn add_pod(&self, pod: Pod) {
        let mut v = serde_json::to_value(&pod).expect("a Pod serializes");
        v["apiVersion"] = json!("v1");
        v["kind"] = json!("Pod");
        let mut st = self.lock();
        st.rv += 1;
        v["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        st.pods.push(v);
    }

    /// Installs Kueue's Workload CRD: its list path answers from now on.
    pub fn install_kueue(&self) {
        self.lock().kueue = true;
    }

    /// Adds a Kueue Workload (installing the CRD if needed), as Kueue does for a queued Job.
    pub fn add_workload(&self, mut w: Value) {
        w["apiVersion"] = json!("kueue.x-k8s.io/v1beta1");
        w["kind"] = json!("Workload");
        self.install_kueue();
        self.add_object(w);
    }

    /// Adds (or replaces) a Deployment, ReplicaSet, StatefulSet, Job or Workload, as its
    /// owner would; its `apiVersion` and `kind` say which. Panics on another kind.
    pub fn add_object(&self, mut v: Value) {
        let key = object_key(&v).expect("a served kind with a namespace and a name");
        check_object(&key.1, &v).expect("a valid object");
        let mut st = self.lock();
        st.rv += 1;
        v["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        st.objects.insert(key, v);
    }

    /// Adds (or replaces) a ResourceSlice (`resource.k8s.io/v1`, cluster-scoped), as a DRA
    /// driver publishes its devices. Panics without a name or a `spec.nodeName`-less spec.
    pub fn add_resource_slice(&self, mut v: Value) {
        let name = v["metadata"]["name"]
            .as_str()
            .expect("a named slice")
            .to_owned();
        assert!(v["spec"]["driver"].is_string() && v["spec"]["pool"]["name"].is_string());
        let mut st = self.lock();
        st.rv += 1;
        v["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        let key = (
            "resource.k8s.io/v1".into(),
            "resourceslices".into(),
            String::new(),
            name,
        );
        st.objects.insert(key, v);
    }

    /// An object as it is now: `api_version` as `apps/v1`, `plural` as `deployments`.
    pub fn object(&self, api_version: &str, plural: &str, ns: &str, name: &str) -> Option<Value> {
        self.lock()
            .objects
            .get(&(api_version.into(), plural.into(), ns.into(), name.into()))
            .cloned()
    }

    /// Removes a pod, as if it finished or was evicted.
    pub fn remove_pod(&self, namespace: &str, name: &str) {
        self.lock().pods.retain(|p| {
            !(p["metadata"]["namespace"] == json!(namespace)
                && p["metadata"]["name"] == json!(name))
        });
    }

    /// Adds or replaces a ConfigMap's data, as a person or Helm would.
    pub fn put_configmap(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        let data: serde_json::Map<String, Value> = data
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        let mut st = self.lock();
        st.rv += 1;
        let v = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": st.rv.to_string()},
            "data": data,
        });
        st.configmaps
            .insert((namespace.to_owned(), name.to_owned()), v);
    }

    /// A ConfigMap as it is now.
    pub fn configmap(&self, namespace: &str, name: &str) -> Option<ConfigMap> {
        self.lock()
            .configmaps
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|v| serde_json::from_value(v.clone()).expect("stored configmaps are valid"))
    }

    /// Node changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<NodeEvent> {
        self.events.subscribe()
    }

    /// Every mutating request so far: (method, path, content type).
    pub fn requests(&self) -> Vec<(String, String, String)> {
        self.lock().requests.clone()
    }

    /// How many reads of one node asked for its metadata alone (`PartialObjectMetadata`).
    pub fn node_metadata_reads(&self) -> usize {
        self.lock().metadata_reads
    }

    /// Answers the next request matching `fault` (after its `skip`) with a 500, once.
    pub fn fail(&self, fault: Fault) {
        self.faults.push(fault);
    }

    /// Faults added with [`StandIn::fail`] that no request has met yet.
    pub fn pending_faults(&self) -> usize {
        self.faults.pending()
    }

    fn commit_node(&self, st: &mut State_, name: String, mut v: Value, kind: &'static str) {
        st.rv += 1;
        v["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        st.nodes.insert(name, v.clone());
        let ev = NodeEvent {
            kind,
            resource_version: st.rv,
            node: v,
        };
        st.history.push_back(ev.clone());
        if st.history.len() > 1000 {
            st.history.pop_front();
        }
        let _ = self.events.send(ev);
    }
}

async fn list_nodes(
    State(s): State<Shared>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let name = selector(&q, "metadata.name").map(str::to_owned);
    let matches = move |n: &Value| {
        name.as_deref()
            .is_none_or(|want| n["metadata"]["name"] == json!(want))
    };
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        return watch_nodes(s, &q, matches);
    }
    let st = s.lock();
    let items: Vec<&Value> = st.nodes.values().filter(|n| matches(n)).collect();
    axum::Json(json!({
        "apiVersion": "v1",
        "kind": "NodeList",
        "metadata": {"resourceVersion": st.rv.to_string()},
        "items": items,
    }))
    .into_response()
}

fn watch_nodes(
    s: Shared,
    q: &BTreeMap<String, String>,
    matches: impl Fn(&Value) -> bool + Send + 'static,
) -> Response {
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .unwrap_or(300u64);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    // Subscribe before reading the backlog so nothing falls between them.
    let rx = s.events.subscribe();
    let backlog: VecDeque<NodeEvent> = {
        let st = s.lock();
        if from == 0 {
            st.nodes
                .values()
                .map(|n| NodeEvent {
                    kind: "ADDED",
                    resource_version: st.rv,
                    node: n.clone(),
                })
                .collect()
        } else {
            st.history
                .iter()
                .filter(|e| e.resource_version > from)
                .cloned()
                .collect()
        }
    };
    let last = backlog.back().map_or(from, |e| e.resource_version);
    let stream = futures_util::stream::unfold(
        (rx, backlog, last, matches),
        move |(mut rx, mut backlog, mut last, matches)| async move {
            loop {
                let ev = match backlog.pop_front() {
                    Some(e) => e,
                    None => match tokio::time::timeout_at(deadline, rx.recv()).await {
                        Ok(Ok(e)) if e.resource_version > last => e,
                        Ok(Ok(_)) | Ok(Err(broadcast::error::RecvError::Lagged(_))) => continue,
                        _ => return None,
                    },
                };
                last = last.max(ev.resource_version);
                if !matches(&ev.node) {
                    continue;
                }
                let mut line =
                    serde_json::to_vec(&json!({"type": ev.kind, "object": ev.node})).expect("json");
                line.push(b'\n');
                return Some((
                    Ok::<Bytes, std::io::Error>(Bytes::from(line)),
                    (rx, backlog, last, matches),
                ));
            }
        },
    );
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// A Node; its metadata alone (`PartialObjectMetadata`) where `Accept` asks for that first.
async fn get_node(
    State(s): State<Shared>,
    Path(name): Path<String>,
    headers: axum::http::HeaderMap,
) -> Response {
    let metadata_only = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.split(',').next())
        .is_some_and(|first| first.contains("as=PartialObjectMetadata"));
    let mut st = s.lock();
    st.metadata_reads += usize::from(metadata_only);
    match st.nodes.get(&name) {
        Some(n) if metadata_only => axum::Json(serde_json::json!({
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": n["metadata"].clone(),
        }))
        .into_response(),
        Some(n) => axum::Json(n.clone()).into_response(),
        None => not_found("nodes", &name),
    }
}

/// Applies a patch to `current` by its content type; the result or an error response.
fn apply_patch(
    st: &mut State_,
    node: &str,
    current: &Value,
    content_type: &str,
    q: &BTreeMap<String, String>,
    body: &Value,
) -> Result<Value, Failure> {
    let mut next = current.clone();
    match content_type {
        "application/merge-patch+json" => merge_patch(&mut next, body),
        "application/strategic-merge-patch+json" => {
            if has_directive(body) {
                return Err(Box::new(status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    "the stand-in does not implement strategic-merge directives ($patch, $retainKeys, …)",
                )));
            }
            merge_patch(&mut next, body);
        }
        "application/apply-patch+yaml" => {
            let Some(manager) = q.get("fieldManager").filter(|m| !m.is_empty()) else {
                return Err(Box::new(status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                )));
            };
            let key = (node.to_owned(), manager.clone());
            let (old_labels, old_annotations) = st.applied.get(&key).cloned().unwrap_or_default();
            let (labels, annotations) = (keys(body, "labels"), keys(body, "annotations"));
            for (field, old, new) in [
                ("labels", &old_labels, &labels),
                ("annotations", &old_annotations, &annotations),
            ] {
                if let Some(m) = next["metadata"][field].as_object_mut() {
                    for gone in old.difference(new) {
                        m.remove(gone);
                    }
                }
            }
            let mut applied = body.clone();
            if let Some(m) = applied.as_object_mut() {
                m.remove("apiVersion");
                m.remove("kind");
            }
            merge_patch(&mut next, &applied);
            st.applied.insert(key, (labels, annotations));
        }
        other => {
            return Err(Box::new(status(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                &format!("the server does not support patch content type {other:?}"),
            )));
        }
    }
    Ok(next)
}

async fn patch_node(
    State(s): State<Shared>,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (ct, body) = match parse_body(&headers, &body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let mut st = s.lock();
    st.requests
        .push(("PATCH".into(), format!("/api/v1/nodes/{name}"), ct.clone()));
    let Some(current) = st.nodes.get(&name).cloned() else {
        return not_found("nodes", &name);
    };
    let next = match apply_patch(&mut st, &name, &current, &ct, &q, &body)
        .and_then(|next| validate::<Node>(&current, &body, &next).map(|()| next))
    {
        Ok(n) => n,
        Err(r) => return *r,
    };
    s.commit_node(&mut st, name.clone(), next, "MODIFIED");
    axum::Json(st.nodes[&name].clone()).into_response()
}

/// One page of `items` as the API server pages a list (`limit`, `continue`).
fn paged(kind: &str, items: Vec<&Value>, rv: u64, q: &BTreeMap<String, String>) -> Response {
    let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok());
    let skip = match q.get("continue").map(|c| c.parse::<usize>()) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "invalid continue token",
            );
        }
    };
    let end = limit.map_or(items.len(), |l| (skip + l.max(1)).min(items.len()));
    let page = &items[skip.min(end)..end];
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if end < items.len() {
        metadata["continue"] = json!(end.to_string());
        metadata["remainingItemCount"] = json!(items.len() - end);
    }
    let (api_version, list_kind) = match kind {
        "Workload" => ("kueue.x-k8s.io/v1beta1", "WorkloadList"),
        _ => ("v1", "PodList"),
    };
    axum::Json(json!({
        "apiVersion": api_version,
        "kind": list_kind,
        "metadata": metadata,
        "items": page,
    }))
    .into_response()
}

fn pod_list(s: &Shared, namespace: Option<&str>, q: &BTreeMap<String, String>) -> Response {
    let node = selector(q, "spec.nodeName");
    let phase = selector(q, "status.phase");
    let st = s.lock();
    let matching: Vec<&Value> = st
        .pods
        .iter()
        .filter(|p| namespace.is_none_or(|ns| p["metadata"]["namespace"] == json!(ns)))
        // An empty value matches an absent field, as the API server's selectors do
        // (`spec.nodeName=`: pods not bound to a node).
        .filter(|p| node.is_none_or(|n| p["spec"]["nodeName"].as_str().unwrap_or("") == n))
        .filter(|p| phase.is_none_or(|ph| p["status"]["phase"].as_str().unwrap_or("") == ph))
        .collect();
    paged("Pod", matching, st.rv, q)
}

async fn list_workloads(
    State(s): State<Shared>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let st = s.lock();
    if !st.kueue {
        return no_resource();
    }
    let all = st
        .objects
        .iter()
        .filter(|(k, _)| k.1 == "workloads")
        .map(|(_, v)| v)
        .collect();
    paged("Workload", all, st.rv, &q)
}

/// ResourceSlices, with `fieldSelector=spec.nodeName=…`.
async fn list_resource_slices(
    State(s): State<Shared>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let node = selector(&q, "spec.nodeName");
    let st = s.lock();
    let all = st
        .objects
        .iter()
        .filter(|(k, v)| k.1 == "resourceslices" && node.is_none_or(|n| v["spec"]["nodeName"] == n))
        .map(|(_, v)| v)
        .collect();
    paged("ResourceSlice", all, st.rv, &q)
}

/// The served kind at `/apis/{group}/{version}/…/{plural}`, or 404.
fn served(s: &Shared, group: &str, version: &str, plural: &str) -> Result<String, Failure> {
    let api_version = format!("{group}/{version}");
    let known = KINDS
        .iter()
        .any(|(av, p, _)| *av == api_version && *p == plural);
    if !known || (plural == "workloads" && !s.lock().kueue) {
        return Err(Box::new(no_resource()));
    }
    Ok(api_version)
}

async fn list_objects(
    State(s): State<Shared>,
    Path((group, version, ns, plural)): Path<(String, String, String, String)>,
) -> Response {
    let api_version = match served(&s, &group, &version, &plural) {
        Ok(a) => a,
        Err(r) => return *r,
    };
    let kind = KINDS
        .iter()
        .find(|(_, p, _)| *p == plural)
        .map_or("", |k| k.2);
    let st = s.lock();
    let items: Vec<&Value> = st
        .objects
        .iter()
        .filter(|(k, _)| k.0 == api_version && k.1 == plural && k.2 == ns)
        .map(|(_, v)| v)
        .collect();
    axum::Json(json!({
        "apiVersion": api_version,
        "kind": format!("{kind}List"),
        "metadata": {"resourceVersion": st.rv.to_string()},
        "items": items,
    }))
    .into_response()
}

async fn get_object(
    State(s): State<Shared>,
    Path((group, version, ns, plural, name)): Path<(String, String, String, String, String)>,
) -> Response {
    let api_version = match served(&s, &group, &version, &plural) {
        Ok(a) => a,
        Err(r) => return *r,
    };
    match s
        .lock()
        .objects
        .get(&(api_version, plural.clone(), ns, name.clone()))
    {
        Some(v) => axum::Json(v.clone()).into_response(),
        None => not_found(&plural, &name),
    }
}

async fn patch_object(
    State(s): State<Shared>,
    Path((group, version, ns, plural, name)): Path<(String, String, String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let api_version = match served(&s, &group, &version, &plural) {
        Ok(a) => a,
        Err(r) => return *r,
    };
    let (ct, body) = match parse_body(&headers, &body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if ct != "application/merge-patch+json" {
        return status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!("the stand-in patches {plural} with merge patches, not {ct:?}"),
        );
    }
    let mut st = s.lock();
    st.requests.push((
        "PATCH".into(),
        format!("/apis/{api_version}/namespaces/{ns}/{plural}/{name}"),
        ct,
    ));
    let key = (api_version, plural.clone(), ns, name.clone());
    let Some(current) = st.objects.get(&key).cloned() else {
        return not_found(&plural, &name);
    };
    let mut next = current.clone();
    merge_patch(&mut next, &body);
    if let Err(r) = validate::<Value>(&current, &body, &next) {
        return *r;
    }
    if let Err(e) = check_object(&plural, &next) {
        return status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &e);
    }
    st.rv += 1;
    next["metadata"]["resourceVersion"] = json!(st.rv.to_string());
    st.objects.insert(key, next.clone());
    axum::Json(next).into_response()
}

async fn get_pod(State(s): State<Shared>, Path((ns, name)): Path<(String, String)>) -> Response {
    let st = s.lock();
    let found = st
        .pods
        .iter()
        .find(|p| p["metadata"]["namespace"] == json!(ns) && p["metadata"]["name"] == json!(name));
    match found {
        Some(p) => axum::Json(p.clone()).into_response(),
        None => not_found("pods", &name),
    }
}

async fn list_pods_all(
    State(s): State<Shared>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    pod_list(&s, None, &q)
}

async fn list_pods_ns(
    State(s): State<Shared>,
    Path(ns): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    pod_list(&s, Some(&ns), &q)
}

async fn get_configmap(
    State(s): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    match s.lock().configmaps.get(&(ns, name.clone())) {
        Some(c) => axum::Json(c.clone()).into_response(),
        None => not_found("configmaps", &name),
    }
}

async fn create_configmap(
    State(s): State<Shared>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (_, mut body) = match parse_body(&headers, &body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let Some(name) = body["metadata"]["name"].as_str().map(str::to_owned) else {
        return status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "metadata.name: Required value",
        );
    };
    body["metadata"]["namespace"] = json!(ns);
    if let Err(r) = validate::<ConfigMap>(&body, &json!({}), &body) {
        return *r;
    }
    let mut st = s.lock();
    st.requests.push((
        "POST".into(),
        format!("/api/v1/namespaces/{ns}/configmaps"),
        "application/json".into(),
    ));
    if st.configmaps.contains_key(&(ns.clone(), name.clone())) {
        return status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            &format!("configmaps \"{name}\" already exists"),
        );
    }
    st.rv += 1;
    body["metadata"]["resourceVersion"] = json!(st.rv.to_string());
    st.configmaps.insert((ns, name), body.clone());
    (StatusCode::CREATED, axum::Json(body)).into_response()
}

async fn patch_configmap(
    State(s): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (ct, body) = match parse_body(&headers, &body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    if ct != "application/merge-patch+json" && ct != "application/strategic-merge-patch+json" {
        return status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!("the stand-in patches configmaps with merge patches, not {ct:?}"),
        );
    }
    let mut st = s.lock();
    st.requests.push((
        "PATCH".into(),
        format!("/api/v1/namespaces/{ns}/configmaps/{name}"),
        ct,
    ));
    let key = (ns, name.clone());
    let Some(current) = st.configmaps.get(&key).cloned() else {
        return not_found("configmaps", &name);
    };
    let mut next = current.clone();
    merge_patch(&mut next, &body);
    if let Err(r) = validate::<ConfigMap>(&current, &body, &next) {
        return *r;
    }
    st.rv += 1;
    next["metadata"]["resourceVersion"] = json!(st.rv.to_string());
    st.configmaps.insert(key, next.clone());
    axum::Json(next).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
        let mut t = json!({"a": [1, 2]});
        merge_patch(&mut t, &json!({"a": [3]}));
        assert_eq!(t, json!({"a": [3]}));
    }

    #[test]
    fn field_selectors_read_equality_terms() {
        let q = BTreeMap::from([(
            "fieldSelector".to_owned(),
            "spec.nodeName=gpu-1,status.phase=Running".to_owned(),
        )]);
        assert_eq!(selector(&q, "spec.nodeName"), Some("gpu-1"));
        assert_eq!(selector(&q, "status.phase"), Some("Running"));
        assert_eq!(selector(&q, "metadata.name"), None);
    }
}
