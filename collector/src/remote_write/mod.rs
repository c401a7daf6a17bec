//! `POST /api/v1/write`: a Prometheus remote-write receiver for dcgm-exporter series, so a
//! cluster that already runs dcgm-exporter gets gpulens' analysis without gpulens' agent
//! (docs/prometheus.md).
//!
//! Bodies are remote-write 1.0: a snappy-compressed (block format) protobuf `WriteRequest`.
//! `DCGM_FI_*` series become gpulens samples: the GPU by `UUID` (index `gpu`, model
//! `modelName`), the node by [`node_of`] (a `node` or `kubernetes_node` label from relabeling,
//! else dcgm-exporter's `Hostname`), MIG instances by `GPU_I_ID` /
//! `GPU_I_PROFILE`, and the pod holding the device by `pod`/`namespace`/`container`; the
//! cluster is a `cluster` label, else the token's cluster, else `default`. Other series are
//! ignored.
//!
//! One host's series arrive spread over requests (Prometheus shards by series), so samples are
//! gathered per host and timestamp and stored once a newer scrape of that host is
//! `SETTLE_MS` ahead (or nothing came for a minute), as one batch through the normal ingest
//! path, exactly once (the batch's sequence is its newest timestamp). A sample that arrives
//! after its scrape was stored is dropped and counted. Per the remote-write spec, a request
//! the collector cannot store now gets a 5xx (Prometheus retries it); a malformed or
//! unauthorised one a 4xx (Prometheus drops it).
//!
//! A 2xx means the request's series are in the store: each request's DCGM series are
//! journaled (`remote_write_journal`) before the answer; the first request or background
//! pass after a start replays the journal into the buffer, skipping the scrapes stored before
//! (each host's stream position); whenever scrapes are stored, rows whose samples are all
//! older than any scrape still waiting leave the journal. Requests are taken one at a time, so a journal row and its
//! samples in the buffer never part.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use model::dcgm::Field;
use model::wire::v1::{Batch, Limits, Snapshot};
use model::{Allocation, GpuInfo, GpuSample, MigSample, Tenant, TenantKind};

use std::sync::Arc;

use crate::fleet::LatestGpus;
use crate::ingest::IngestConfig;
use collector_shared::access::routes::{Need::*, Routes};
use collector_shared::error::ApiError;
use collector_shared::openapi::Op;
use collector_shared::shared::Shared;
use serde_json::json;

pub mod metrics;

pub use intake::remote_write::{Label, Sample, TimeSeries, WriteRequest, decode, label};
pub use metrics::{DropReason, RemoteWriteMetrics};

/// What the receiver's handler and background task need.
#[derive(Debug, Clone)]
pub struct RemoteWriteState {
    pub shared: Shared,
    /// The `[ingest]` limits, which bound remote-write bodies too.
    pub ingest: Arc<IngestConfig>,
    pub latest: Arc<LatestGpus>,
    pub remote_write: Arc<Receiver>,
}

/// The remote write routes (merged in `router.rs`).
pub fn routes() -> Routes<RemoteWriteState> {
    Routes::new().post("/api/v1/write", Agent, operation(), write)
}

fn operation() -> Op {
    Op::new("Prometheus remote write 1.0 (snappy-compressed protobuf WriteRequest): dcgm-exporter series (DCGM_FI_*) become gpulens samples, so a cluster that runs dcgm-exporter gets findings and reports without the gpulens agent (docs/prometheus.md). Other series are ignored.")
        .body(json!({"required": true, "content": {"application/x-protobuf": {}}}))
        .response(204, json!({"description": "Taken"}))
        .refusals(&[400, 401, 403, 503])
        .throttled("agent tokens")
}

/// Hosts the receiver keeps at most: a remote-write token for `*` could otherwise create a
/// node per made-up host name (120,000 of them, 2.3 GB of memory and an
/// `agent_silent` finding each). Samples of further hosts are dropped, counted and logged.
pub const MAX_HOSTS: usize = 20_000;
/// Hosts of one cluster kept at most, so that one cluster's flood (or churn) cannot take the
/// room of the others.
pub const MAX_HOSTS_PER_CLUSTER: usize = 10_000;
/// A host with nothing waiting that sent nothing for this long is forgotten (its stream
/// position is the store's: a batch stored again is a duplicate there). Autoscaled nodes come
/// and go; hosts were never forgotten, and after 10,000 every new one was dropped
/// until a restart.
pub const FORGET_MS: i64 = 3_600_000;
/// GPUs per host at most (the largest nodes have 8 to 16; MIG instances ride on their GPU).
pub const MAX_GPUS_PER_HOST: usize = 64;
/// Pods per host kept at most (each pod's allocation; the GPU samples are kept regardless).
pub const MAX_TENANTS_PER_HOST: usize = 1_024;

/// The pod a series is attributed to: `namespace`, `pod` and `container` (default `main`),
/// read as dcgm-exporter's Kubernetes mapping writes them or, under a ServiceMonitor without
/// `honorLabels`, as Prometheus renames them (`exported_namespace`, `exported_pod`,
/// `exported_container`). `Err` when they are present but not Kubernetes names.
///
/// Without `exported_*` labels, a series of a GPU no pod holds still carries `namespace` and
/// `pod`: the scrape target's, dcgm-exporter's own pod. Those are no tenant: when `container`
/// is the exporter's container (`nvidia-dcgm-exporter` in the GPU Operator, `exporter` or
/// `dcgm-exporter` in dcgm-exporter's Helm chart) of a pod named `…dcgm…`, or `pod` is the
/// series' `Hostname` (an exporter on the pod network reports its pod's name there), the
/// series has no pod.
fn pod_labels(ls: &[Label]) -> Option<Result<(&str, &str, &str), ()>> {
    let exported = ["exported_namespace", "exported_pod"]
        .iter()
        .any(|n| label(ls, n).is_some());
    let exporter_pod = label(ls, "pod").is_some_and(|p| p.contains("dcgm"))
        && label(ls, "container").is_some_and(|c| EXPORTER_CONTAINERS.contains(&c));
    if !exported
        && (exporter_pod || label(ls, "pod").is_some_and(|p| label(ls, "Hostname") == Some(p)))
    {
        return None;
    }
    let get = |name: &str| label(ls, &format!("exported_{name}")).or_else(|| label(ls, name));
    let (ns, pod) = (get("namespace")?, get("pod")?);
    let container = get("container").unwrap_or("main");
    let names = [ns, pod, container];
    if names
        .iter()
        .all(|n| model::names::check_subdomain(n).is_ok())
    {
        Some(Ok((ns, pod, container)))
    } else {
        Some(Err(()))
    }
}

/// dcgm-exporter's container names: the GPU Operator's DaemonSet, dcgm-exporter's Helm chart.
const EXPORTER_CONTAINERS: [&str; 3] = ["nvidia-dcgm-exporter", "dcgm-exporter", "exporter"];

/// A scrape is stored once a newer one of its host is this far ahead in sample time.
pub const SETTLE_MS: i64 = 30_000;
/// …or when nothing came from its host for this long.
pub const IDLE_MS: i64 = 60_000;
/// The agent id remote-written batches are stored under.
pub const AGENT_ID: &str = "prometheus-remote-write";

#[derive(Debug, Default)]
struct Scrape {
    gpus: BTreeMap<String, GpuSample>,
    mig: BTreeMap<(String, u32), MigSample>,
    allocations: BTreeMap<(String, String, Option<u32>), f32>,
}

#[derive(Debug, Default)]
struct Host {
    scrapes: BTreeMap<i64, Scrape>,
    /// Newest timestamp stored; samples at or before it are late.
    stored_ts: Option<i64>,
    touched_ms: i64,
    inventory: BTreeMap<String, GpuInfo>,
    tenants: BTreeMap<String, Tenant>,
    /// Spacing of this host's scrapes, as seen.
    interval_ms: u32,
}

/// A label's value where it is free text a batch may hold (not too long, no control
/// characters); otherwise as if absent, rather than refuse the host's every scrape.
fn text_label<'a>(ls: &'a [Label], name: &str) -> Option<&'a str> {
    label(ls, name).filter(|v| model::wire::v1::is_text(v))
}

impl Host {
    /// Notes the GPU a series names in the host's inventory: its model, and its MIG instance
    /// the first time the series names one.
    fn note_gpu(&mut self, uuid: &str, ls: &[Label], gi: Option<u32>) {
        let h = self;
        let info = h
            .inventory
            .entry(uuid.to_owned())
            .or_insert_with(|| GpuInfo {
                uuid: uuid.to_owned(),
                // Labels outside the batch's domain are left out rather than refuse the
                // host's every scrape.
                index: label(ls, "gpu")
                    .and_then(|v| v.parse().ok())
                    .filter(|&i| i <= model::wire::v1::MAX_GPU_INDEX)
                    .unwrap_or(0),
                model: text_label(ls, "modelName").unwrap_or("unknown").to_owned(),
                memory_total_bytes: 0,
                pci_bus_id: label(ls, "pci_bus_id")
                    .filter(|v| model::wire::v1::is_name(v))
                    .map(str::to_owned),
                mig_enabled: false,
                sharing: model::inventory::Sharing::Exclusive,
                replicas: 1,
                mig_instances: vec![],
            });
        if let Some(m) = text_label(ls, "modelName") {
            info.model = m.to_owned();
        }
        if let (Some(gi), Some(profile)) = (gi, text_label(ls, "GPU_I_PROFILE"))
            && !info.mig_instances.iter().any(|m| m.gi_id == gi)
        {
            info.mig_enabled = true;
            info.sharing = model::inventory::Sharing::Mig;
            info.mig_instances.push(model::MigInstanceInfo {
                gi_id: gi,
                ci_id: 0,
                profile: profile.to_owned(),
                placement_start: None,
                placement_size: None,
                memory_total_bytes: 0,
                compute_slices: model::mig::compute_slices(profile),
                uuid: None,
            });
        }
    }

    /// The pod the GPU is allocated to, as a tenant key, when the receiver can keep it: labels
    /// that are not Kubernetes names, or a host full of pods, cost only the allocation — the
    /// GPU's own samples stay.
    fn keep_tenant(&mut self, pod: Option<Result<(&str, &str, &str), ()>>) -> Option<String> {
        let h = self;
        match pod {
            None => None,
            Some(Ok((ns, pod, container))) => {
                let key = Tenant::pod_name_key(ns, pod, container);
                if h.tenants.contains_key(&key) || h.tenants.len() < MAX_TENANTS_PER_HOST {
                    h.tenants.entry(key.clone()).or_insert_with(|| Tenant {
                        key: key.clone(),
                        kind: TenantKind::Pod,
                        namespace: Some(ns.to_owned()),
                        pod: Some(pod.to_owned()),
                        container: Some(container.to_owned()),
                        pod_uid: None,
                        job_id: None,
                        user: None,
                        account: None,
                        uid: None,
                    });
                    Some(key)
                } else {
                    None
                }
            }
            Some(Err(())) => None,
        }
    }
}

/// The hosts heard from, by (cluster, host), and how many each cluster has.
#[derive(Debug, Default)]
struct Hosts {
    by_key: HashMap<(String, String), Host>,
    per_cluster: HashMap<String, usize>,
    /// Drops for want of room since the last warning, and when that was.
    unwarned_drops: u64,
    warned_ms: i64,
}

impl Hosts {
    /// Whether the host of `key` is held or has room (after forgetting quiet hosts, once per
    /// request at most: `swept`); false when its cluster or the receiver is full.
    fn room_for(&mut self, key: &(String, String), now_ms: i64, swept: &mut bool) -> bool {
        if self.by_key.contains_key(key) {
            return true;
        }
        let full = |h: &Hosts| {
            h.by_key.len() >= MAX_HOSTS
                || h.per_cluster.get(&key.0).copied().unwrap_or(0) >= MAX_HOSTS_PER_CLUSTER
        };
        if full(self) && !*swept {
            *swept = true;
            self.forget_quiet(now_ms);
        }
        !full(self)
    }

    fn entry(&mut self, key: (String, String)) -> &mut Host {
        if !self.by_key.contains_key(&key) {
            *self.per_cluster.entry(key.0.clone()).or_default() += 1;
        }
        self.by_key.entry(key).or_default()
    }

    /// Forgets hosts with nothing waiting that were quiet for [`FORGET_MS`].
    fn forget_quiet(&mut self, now_ms: i64) {
        let per_cluster = &mut self.per_cluster;
        self.by_key.retain(|(cluster, _), h| {
            let keep = !h.scrapes.is_empty() || now_ms - h.touched_ms < FORGET_MS;
            if !keep && let Some(n) = per_cluster.get_mut(cluster) {
                *n -= 1;
            }
            keep
        });
        per_cluster.retain(|_, n| *n > 0);
    }
}

/// Samples gathered per (cluster, host) until their scrape is complete.
#[derive(Debug, Default)]
pub struct Receiver {
    hosts: Mutex<Hosts>,
    /// Held while a request is taken; true once the journal has been replayed.
    replayed: tokio::sync::Mutex<bool>,
    pub metrics: RemoteWriteMetrics,
}

impl Receiver {
    /// A receiver whose counters are `metrics` (registered on the collector's registry).
    pub fn with_metrics(metrics: RemoteWriteMetrics) -> Receiver {
        Receiver {
            metrics,
            ..Receiver::default()
        }
    }
}

/// How far ahead of the collector's clock a sample may be dated (as for ingest).
const MAX_FUTURE_MS: i64 = 5 * 60 * 1000;

/// The node a series is from. A `node` or `kubernetes_node` label (what a scrape's relabeling
/// of `__meta_kubernetes_pod_node_name` writes) wins; else dcgm-exporter's `Hostname` (or
/// `hostname`), which is the node's name only when the exporter runs with `NODE_NAME` set (the
/// GPU Operator sets it) or on the host network. Without `NODE_NAME`, `Hostname` is the
/// exporter's pod name: such a series names no node and is ignored (and logged once), so
/// findings never land on a node that does not exist.
pub fn node_of(ls: &[Label]) -> Option<&str> {
    if let Some(n) = label(ls, "node").or_else(|| label(ls, "kubernetes_node")) {
        return Some(n);
    }
    let host = label(ls, "Hostname").or_else(|| label(ls, "hostname"))?;
    if exporter_pod_name(host) {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            tracing::warn!(
                hostname = host,
                "dcgm-exporter reports its pod name as Hostname: set NODE_NAME on the exporter \
                 (env from spec.nodeName) or relabel __meta_kubernetes_pod_node_name to `node`; \
                 its series are ignored until then"
            );
        });
        return None;
    }
    Some(host)
}

/// dcgm-exporter's pod names as its DaemonSets make them (the GPU Operator's and the exporter's
/// own chart): `nvidia-dcgm-exporter-<5 chars>` or `dcgm-exporter-<5 chars>`.
fn exporter_pod_name(host: &str) -> bool {
    ["nvidia-dcgm-exporter-", "dcgm-exporter-"].iter().any(|p| {
        host.strip_prefix(p).is_some_and(|suffix| {
            suffix.len() == 5
                && suffix
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
    })
}

/// A series gpulens reads: a DCGM field of a node's GPU, or of one of its MIG instances. Its
/// name, node, GPU UUID and GPU instance. A node that is not a DNS-1123 subdomain (what ingest
/// requires of node names) is not a node, a `UUID` that is not a name is no GPU, and a
/// `GPU_I_ID` that is no MIG id (past [`model::wire::v1::MAX_MIG_ID`], or no number) is no
/// instance — nor the whole GPU.
fn dcgm_series(ls: &[Label]) -> Option<(Field, &str, &str, Option<u32>)> {
    let name = label(ls, "__name__").and_then(Field::parse)?;
    let host = node_of(ls)?;
    model::names::check_subdomain(host).ok()?;
    let uuid = label(ls, "UUID").filter(|u| model::wire::v1::is_name(u))?;
    let gi = match label(ls, "GPU_I_ID") {
        None => None,
        Some(v) => Some(
            v.parse::<u32>()
                .ok()
                .filter(|&gi| gi <= model::wire::v1::MAX_MIG_ID)?,
        ),
    };
    Some((name, host, uuid, gi))
}

/// Puts one DCGM field's value into a scrape (`model::dcgm::Field`: the field table the agent
/// reads dcgm-exporter with too); false when the field says nothing about its target.
fn apply(scrape: &mut Scrape, field: Field, uuid: &str, gi: Option<u32>, v: f64) -> bool {
    match gi {
        Some(gi) => field.apply_mig(
            scrape
                .mig
                .entry((uuid.to_owned(), gi))
                .or_insert_with(|| MigSample {
                    gpu_uuid: uuid.to_owned(),
                    gi_id: gi,
                    ..MigSample::default()
                }),
            v,
        ),
        None => field.apply_gpu(
            scrape
                .gpus
                .entry(uuid.to_owned())
                .or_insert_with(|| GpuSample {
                    gpu_uuid: uuid.to_owned(),
                    ..GpuSample::default()
                }),
            v,
        ),
    }
}

impl Receiver {
    /// Takes a decoded request's DCGM samples; returns how many were taken.
    /// `window`: the sample times accepted (the raw retention back, five minutes ahead).
    fn take(
        &self,
        req: &WriteRequest,
        cluster_of: impl Fn(&[Label]) -> String,
        now_ms: i64,
        window: (i64, i64),
        replaying: bool,
    ) -> usize {
        // A replayed request was counted when it first arrived (by this process or the one
        // before it); its drops are not counted again.
        let drop = |reason, n| {
            if !replaying {
                self.metrics.drop_n(reason, n)
            }
        };
        let mut hosts = self.hosts.lock().expect("remote-write hosts");
        let mut taken = 0;
        let mut swept = false;
        let mut no_room = 0u64;
        for ts in &req.timeseries {
            let ls = &ts.labels;
            let series = dcgm_series(ls).and_then(|(name, host, uuid, gi)| {
                // A cluster that is not a DNS-1123 subdomain is no cluster, as for ingest.
                let cluster = cluster_of(ls);
                model::names::check_subdomain(&cluster).ok()?;
                Some((name, (cluster, host.to_owned()), uuid, gi))
            });
            let Some((name, key, uuid, gi)) = series else {
                if !replaying {
                    self.metrics.ignored_series.inc();
                }
                continue;
            };
            if !hosts.room_for(&key, now_ms, &mut swept) {
                drop(DropReason::TooManyHosts, ts.samples.len());
                no_room += ts.samples.len() as u64;
                continue;
            }
            let h = hosts.entry(key);
            if !h.inventory.contains_key(uuid) && h.inventory.len() >= MAX_GPUS_PER_HOST {
                drop(DropReason::TooManyGpus, ts.samples.len());
                continue;
            }
            h.touched_ms = now_ms;
            h.note_gpu(uuid, ls, gi);
            let pod = pod_labels(ls);
            let tenant = h.keep_tenant(pod);
            if pod.is_some() && tenant.is_none() {
                drop(DropReason::BadTenant, ts.samples.len());
            }
            for s in &ts.samples {
                // Each sample on its own: a bad one is dropped and counted, never its
                // neighbours, and none can move the host's clock.
                if !name.accepts(s.value) {
                    drop(DropReason::OutOfDomain, 1);
                    continue;
                }
                if s.timestamp < window.0 || s.timestamp > window.1 {
                    drop(DropReason::OutOfWindow, 1);
                    continue;
                }
                if h.stored_ts.is_some_and(|t| s.timestamp <= t) {
                    drop(DropReason::Late, 1);
                    continue;
                }
                let scrape = h.scrapes.entry(s.timestamp).or_default();
                if apply(scrape, name, uuid, gi, s.value) {
                    taken += 1;
                }
                if let Some(key) = &tenant {
                    let share = gi.map_or(1.0, |_| {
                        model::mig::slice_share(model::mig::compute_slices(
                            label(ls, "GPU_I_PROFILE").unwrap_or(""),
                        ))
                    });
                    scrape
                        .allocations
                        .insert((uuid.to_owned(), key.clone(), gi), share);
                }
            }
        }
        // Drops for want of room are logged, at most once a minute with their count.
        hosts.unwarned_drops += no_room;
        if !replaying && hosts.unwarned_drops > 0 && now_ms - hosts.warned_ms >= 60_000 {
            tracing::warn!(
                samples = hosts.unwarned_drops,
                hosts = hosts.by_key.len(),
                max_hosts = MAX_HOSTS,
                max_hosts_per_cluster = MAX_HOSTS_PER_CLUSTER,
                "remote write dropped samples of hosts beyond the receiver's bounds \
                 (gpulens_remote_write_dropped_samples_total{{reason=\"too_many_hosts\"}}); quiet \
                 hosts are forgotten after an hour"
            );
            hosts.unwarned_drops = 0;
            hosts.warned_ms = now_ms;
        }
        taken
    }

    /// Batches of every scrape that is complete now, oldest first per host. Nothing leaves
    /// the buffer until [`Receiver::stored`] confirms it.
    fn ready(&self, now_ms: i64) -> Vec<Batch> {
        let mut hosts = self.hosts.lock().expect("remote-write hosts");
        hosts.forget_quiet(now_ms);
        let mut out = Vec::new();
        for ((cluster, node), h) in hosts.by_key.iter_mut() {
            let Some(newest) = h.scrapes.keys().next_back().copied() else {
                continue;
            };
            let idle = now_ms - h.touched_ms >= IDLE_MS;
            let due: Vec<i64> = h
                .scrapes
                .keys()
                .copied()
                .filter(|t| idle || *t <= newest - SETTLE_MS)
                .collect();
            if due.is_empty() {
                continue;
            }
            let times: Vec<i64> = h.scrapes.keys().copied().collect();
            if let Some(step) = times.windows(2).map(|w| w[1] - w[0]).min() {
                h.interval_ms = step.clamp(1000, 3_600_000) as u32;
            }
            let mut snapshots = Vec::new();
            for t in &due {
                let s = &h.scrapes[t];
                let mut gpus: Vec<GpuSample> = s.gpus.values().cloned().collect();
                for g in &mut gpus {
                    // FB_FREE was stored as the total so far: used + free.
                    if let (Some(free), Some(used)) = (g.mem_total_bytes, g.mem_used_bytes) {
                        g.mem_total_bytes = Some(free + used);
                    }
                }
                snapshots.push(Snapshot {
                    ts: *t,
                    gpus,
                    mig: s.mig.values().cloned().collect(),
                    processes: vec![],
                    allocations: s
                        .allocations
                        .iter()
                        .map(|((gpu, tenant, gi), share)| Allocation {
                            gpu_uuid: gpu.clone(),
                            tenant: tenant.clone(),
                            gi_id: *gi,
                            ci_id: gi.map(|_| 0),
                            replica: None,
                            share: *share,
                        })
                        .collect(),
                    events: vec![],
                });
            }
            let mut inventory: Vec<GpuInfo> = h.inventory.values().cloned().collect();
            for i in &mut inventory {
                if let Some(total) = snapshots
                    .iter()
                    .rev()
                    .flat_map(|s| s.gpus.iter())
                    .find(|g| g.gpu_uuid == i.uuid)
                    .and_then(|g| g.mem_total_bytes)
                {
                    i.memory_total_bytes = total;
                }
            }
            out.push(Batch {
                version: 1,
                cluster: cluster.clone(),
                node: node.clone(),
                agent_id: AGENT_ID.into(),
                seq: *due.last().expect("non-empty") as u64,
                agent_version: Some(format!(
                    "gpulens-remote-write/{}",
                    env!("CARGO_PKG_VERSION")
                )),
                interval_ms: if h.interval_ms == 0 {
                    15_000
                } else {
                    h.interval_ms
                },
                inventory: Some(inventory),
                tenants: h.tenants.values().cloned().collect(),
                snapshots,
            });
        }
        out
    }

    /// Takes up where the store left off: each host's newest stored scrape, so that replayed
    /// samples of scrapes stored before are not stored again.
    fn resume(&self, positions: &[(String, String, i64)]) {
        let mut hosts = self.hosts.lock().expect("remote-write hosts");
        for (cluster, node, seq) in positions {
            let h = hosts.entry((cluster.clone(), node.clone()));
            h.stored_ts = Some(h.stored_ts.map_or(*seq, |t| t.max(*seq)));
        }
    }

    /// The oldest scrape still waiting, of any host (None: nothing waits).
    fn oldest_waiting(&self) -> Option<i64> {
        let hosts = self.hosts.lock().expect("remote-write hosts");
        hosts
            .by_key
            .values()
            .filter_map(|h| h.scrapes.keys().next().copied())
            .min()
    }

    /// Forgets what a stored batch held.
    fn stored(&self, b: &Batch) {
        let mut hosts = self.hosts.lock().expect("remote-write hosts");
        if let Some(h) = hosts.by_key.get_mut(&(b.cluster.clone(), b.node.clone())) {
            let upto = b.seq as i64;
            h.scrapes.retain(|t, _| *t > upto);
            h.stored_ts = Some(h.stored_ts.map_or(upto, |t| t.max(upto)));
        }
    }
}

/// The series of a request gpulens reads (DCGM fields of a host's GPU), each with its cluster
/// in a `cluster` label, and the newest sample time among them; None when there are none.
/// Only samples inside `window` are kept, so no row waits in the journal for a date that
/// never comes.
fn journal_form(
    req: &WriteRequest,
    default_cluster: &str,
    window: (i64, i64),
) -> Option<(WriteRequest, i64)> {
    let timeseries: Vec<TimeSeries> = req
        .timeseries
        .iter()
        .filter(|ts| dcgm_series(&ts.labels).is_some())
        .map(|ts| {
            let mut ts = ts.clone();
            ts.samples
                .retain(|s| s.timestamp >= window.0 && s.timestamp <= window.1);
            ts
        })
        .filter(|ts| !ts.samples.is_empty())
        .map(|mut ts| {
            if label(&ts.labels, "cluster").is_none() {
                ts.labels.retain(|l| l.name != "cluster");
                ts.labels.push(Label {
                    name: "cluster".into(),
                    value: default_cluster.to_owned(),
                });
            }
            ts
        })
        .collect();
    let newest = timeseries
        .iter()
        .flat_map(|ts| ts.samples.iter().map(|s| s.timestamp))
        .max()?;
    Some((WriteRequest { timeseries }, newest))
}

fn cluster_label(ls: &[Label]) -> String {
    label(ls, "cluster").unwrap_or("default").to_owned()
}

/// After a start, takes the journaled requests back into the buffer (once).
async fn replay(
    state: &RemoteWriteState,
    replayed: &mut bool,
    now: i64,
) -> Result<(), store::StoreError> {
    if *replayed {
        return Ok(());
    }
    let rw = &state.remote_write;
    rw.resume(&state.shared.store.stream_positions(AGENT_ID).await?);
    let rows = state.shared.store.remote_write_journal().await?;
    for (received, body) in &rows {
        match decode(body, usize::MAX) {
            Ok(r) => {
                // A host is quiet since its data last arrived, not since the replay.
                rw.take(
                    &r,
                    cluster_label,
                    (*received).min(now),
                    sample_window(state, *received),
                    true,
                );
            }
            Err(e) => {
                tracing::error!(error = %e, "a remote-write journal row cannot be read; skipped")
            }
        }
    }
    if !rows.is_empty() {
        tracing::info!(requests = rows.len(), "remote-write journal replayed");
    }
    *replayed = true;
    Ok(())
}

/// Stores every complete scrape, then drops the journal rows nothing waits for any more
/// (only a stored scrape frees rows, so a call that stores none touches no row).
async fn store_complete(state: &RemoteWriteState, now: i64) -> Result<(), store::StoreError> {
    let limits = Limits {
        max_age_ms: i64::MAX / 4,
        ..Limits::default()
    };
    let complete = state.remote_write.ready(now);
    if complete.is_empty() {
        return Ok(());
    }
    for b in complete {
        if let Err(e) = b.validate(&limits, now) {
            // A scrape gpulens cannot represent: drop it rather than block the host.
            tracing::warn!(node = %b.node, error = %e, "remote-written scrape not stored");
            state.remote_write.metrics.scrapes_refused.inc();
            state.remote_write.stored(&b);
            continue;
        }
        state
            .shared
            .store
            .ingest(&b, now, &|t| state.shared.teams.team_of(t))
            .await?;
        state.latest.record(&b);
        state.remote_write.stored(&b);
        state.remote_write.metrics.scrapes_stored.inc();
    }
    state
        .shared
        .store
        .prune_remote_write_journal(state.remote_write.oldest_waiting())
        .await?;
    Ok(())
}

/// The background part (the collector's jobs pass): replays the journal after a start and
/// stores the scrapes of hosts that went quiet, when no request comes to do it.
pub async fn settle(state: &RemoteWriteState) -> Result<(), store::StoreError> {
    let mut replayed = state.remote_write.replayed.lock().await;
    let now = model::time::now_ms();
    replay(state, &mut replayed, now).await?;
    store_complete(state, now).await
}

/// Settling as a background task, every `every`: scrapes of hosts that went quiet are stored
/// even when no request comes to do it.
pub fn task(
    state: RemoteWriteState,
    every: std::time::Duration,
) -> Arc<dyn collector_shared::tasks::Task> {
    collector_shared::tasks::Periodic::task("remote_write_settle", every, move || {
        let state = state.clone();
        Box::pin(async move { Ok(settle(&state).await?) })
    })
}

/// The sample times accepted at `at`: the raw retention back, five minutes ahead.
fn sample_window(state: &RemoteWriteState, at: i64) -> (i64, i64) {
    let raw = model::time::millis(state.shared.retention.raw);
    (at.saturating_sub(raw), at.saturating_add(MAX_FUTURE_MS))
}

/// Remote write 1.0 only. A 2.0 body (`proto=io.prometheus.write.v2.Request`, or a
/// `X-Prometheus-Remote-Write-Version` of 2.x) would decode as an empty 1.0 message and be
/// acknowledged with its data lost; it is refused with 415, which tells a 2.0 sender to fall
/// back to 1.0 (the spec's negotiation).
fn check_protocol(headers: &HeaderMap) -> Result<(), ApiError> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ct) = text(header::CONTENT_TYPE.as_str()) {
        let mut parts = ct.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let proto = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("proto"))
            .map(|(_, v)| v.trim().trim_matches('"').to_owned());
        if media != "application/x-protobuf"
            || proto
                .as_deref()
                .is_some_and(|p| p != "prometheus.WriteRequest")
        {
            return Err(ApiError::UnsupportedMediaType(format!(
                "this receiver speaks remote write 1.0 (Content-Type application/x-protobuf, proto=prometheus.WriteRequest), not {ct:?}"
            )));
        }
    }
    if let Some(v) = text("x-prometheus-remote-write-version")
        && !v.trim().starts_with("0.1")
        && !v.trim().starts_with("1.")
    {
        return Err(ApiError::UnsupportedMediaType(format!(
            "this receiver speaks remote write 1.0 (X-Prometheus-Remote-Write-Version 0.1.0), not {v:?}"
        )));
    }
    Ok(())
}

pub async fn write(
    State(state): State<RemoteWriteState>,
    caller: collector_shared::access::Caller,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<StatusCode, ApiError> {
    let cred = state
        .shared
        .auth
        .check_headers(&headers, caller.addr)
        .await?;
    check_protocol(&headers)?;
    if let Some(enc) = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        && enc != "snappy"
    {
        return Err(ApiError::BadRequest(format!(
            "Content-Encoding must be snappy (remote write 1.0), not {enc:?}"
        )));
    }
    // Read only after the token and the protocol are checked, and never past the limit: a
    // larger body is a JSON 413 naming it (Prometheus drops the request and counts it).
    let max_body = state.ingest.max_body_bytes;
    let body = axum::body::to_bytes(body, max_body).await.map_err(|e| {
        collector_shared::request_limits::body_refusal(&e, || {
            format!(
                "the remote-write body exceeds {max_body} bytes (`[ingest] max_body_bytes`); lower Prometheus' `queue_config.max_samples_per_send`"
            )
        })
    })?;
    let req = decode(&body, state.ingest.max_decoded_bytes).map_err(ApiError::BadRequest)?;
    let default_cluster = collector_shared::agent_auth::Auth::cluster(&cred)
        .unwrap_or("default")
        .to_owned();
    // Every host the request names must be one the token may send for.
    for ts in &req.timeseries {
        if let Some(host) = node_of(&ts.labels) {
            let cluster = label(&ts.labels, "cluster").unwrap_or(&default_cluster);
            collector_shared::agent_auth::Auth::authorize(&cred, cluster, host)?;
        }
    }
    let sent = req.timeseries.len();
    let now = model::time::now_ms();
    let window = sample_window(&state, now);
    let taken = journal_form(&req, &default_cluster, window);
    let rw = &state.remote_write;
    let mut replayed = rw.replayed.lock().await;
    replay(&state, &mut replayed, now).await?;
    let mut kept = 0;
    if let Some((r, newest)) = &taken {
        let body = intake::remote_write::encode(r)
            .map_err(|e| ApiError::Internal(format!("the journal row: {e}")))?;
        state
            .shared
            .store
            .journal_remote_write(now, *newest, &body)
            .await?;
        rw.take(r, cluster_label, now, window, false);
        kept = r.timeseries.len();
    }
    rw.metrics.ignored_series.inc_by((sent - kept) as u64);
    store_complete(&state, now).await?;
    drop(replayed);
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests;
