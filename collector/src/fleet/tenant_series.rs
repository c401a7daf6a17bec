//! Opt-in per-tenant series on `/metrics` (`[metrics] tenant_series = true`): each tenant
//! holding a GPU, with the share of the GPU it holds and the share it used effectively in its
//! newest sample, labelled the way Kubernetes and Slurm name it (`namespace`, `pod`,
//! `container`; `job_id`, `account`; `user`), so kube-state-metrics and cost tools can join it.
//!
//! Off by default: tenants come and go with every pod. When on, the series are bounded by the
//! tenants holding GPUs right now (at most one per whole GPU, per MIG instance, per shared
//! replica): a tenant that lets go of its GPU leaves with the GPU's next batch, and a GPU not
//! heard from in `by_node::STALE_MS` takes its tenants with it.
//!
//! The numbers are the rollups' own: the newest snapshot is aggregated by
//! [`model::rollup::aggregate`], so "effective" here means what it means in the funnel (DCGM SM
//! activity where known, else NVML utilization, split by the tenant's share of process SM time;
//! a MIG instance's activity scaled by its slice).

use std::collections::HashMap;
use std::sync::Mutex;

use model::rollup::RawRows;
use model::wire::v1::Batch;
use model::{Tenant, TenantKind};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Deserialize;

use super::by_node::ByNode;

type FGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// `[metrics]` in the collector's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Expose `gpulens_tenant_gpu_allocated_ratio` and `gpulens_tenant_gpu_effective_ratio`.
    pub tenant_series: bool,
    /// kube-state-metrics' `kube_pod_labels` labels the generated recording rules carry over
    /// onto the per-pod series (each must be exposed by kube-state-metrics'
    /// `--metric-labels-allowlist`).
    pub pod_labels: Vec<String>,
    /// Add recording rules to `gpulens alert-rules` that copy the per-GPU series under
    /// dcgm-exporter's label names (`UUID`, `Hostname`, `modelName`) for direct joins.
    pub dcgm_labels: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            tenant_series: false,
            pod_labels: vec!["label_team".into()],
            dcgm_labels: true,
        }
    }
}

impl Settings {
    /// Configuration mistakes, named.
    pub fn check(&self) -> anyhow::Result<()> {
        for l in &self.pod_labels {
            let mut chars = l.chars();
            let ok = chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok || l.starts_with("__") {
                anyhow::bail!("metrics: pod_labels: {l:?} is not a Prometheus label name");
            }
        }
        Ok(())
    }
}

/// The labels of one tenant's series. Empty values are left out of the exposition by
/// Prometheus, so a pod's series carry no `job_id` and a job's no `pod`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    cluster: String,
    node: String,
    gpu_uuid: String,
    tenant_kind: &'static str,
    namespace: String,
    pod: String,
    container: String,
    job_id: String,
    account: String,
    user: String,
}

#[derive(Debug, Clone)]
struct Reading {
    ts_ms: i64,
    labels: TenantLabels,
    allocated: f64,
    effective: Option<f64>,
}

/// A node's holders by (GPU uuid, tenant key).
type NodeReadings = HashMap<(String, String), Reading>;

/// Each GPU-holding tenant's newest shares: cluster → node → holders, so that a batch touches
/// its own node's holders only, however large the fleet.
#[derive(Debug, Default)]
pub struct TenantGauges {
    readings: Mutex<ByNode<NodeReadings>>,
}

fn labels_of(cluster: &str, node: &str, gpu: &str, t: &Tenant) -> TenantLabels {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    TenantLabels {
        cluster: cluster.to_owned(),
        node: node.to_owned(),
        gpu_uuid: gpu.to_owned(),
        tenant_kind: t.kind.as_str(),
        namespace: s(&t.namespace),
        pod: s(&t.pod),
        container: s(&t.container),
        job_id: if t.kind == TenantKind::SlurmJob {
            s(&t.job_id)
        } else {
            String::new()
        },
        account: s(&t.account),
        user: if t.kind == TenantKind::HostUser {
            s(&t.user)
        } else {
            String::new()
        },
    }
}

impl TenantGauges {
    /// Replaces the tenants of every GPU in the batch's newest snapshot.
    pub fn record(&self, b: &Batch) {
        let Some(snap) = b.snapshots.iter().max_by_key(|s| s.ts) else {
            return;
        };
        let mut raw = RawRows::default();
        raw.push(snap, b.interval_ms as i32);
        let rollup = raw.aggregate(model::rollup::MINUTE_MS);
        let info: HashMap<&str, &Tenant> = b.tenants.iter().map(|t| (t.key.as_str(), t)).collect();
        let mut nodes = self.readings.lock().expect("tenant gauges");
        let map = nodes.node_mut(&b.cluster, &b.node);
        let previous: NodeReadings = map
            .extract_if(|(gpu, _), _| snap.gpus.iter().any(|g| g.gpu_uuid == *gpu))
            .collect();
        for ((gpu, tenant, _), agg) in &rollup.tenants {
            if agg.alloc_n == 0 {
                continue; // ran a process without holding the GPU: not a holder
            }
            let key = (gpu.clone(), tenant.clone());
            // A batch names the tenants its snapshots use; a tenant it leaves out keeps the
            // labels it had.
            let labels = match info.get(tenant.as_str()) {
                Some(t) => labels_of(&b.cluster, &b.node, gpu, t),
                None => match previous.get(&key) {
                    Some(r) => r.labels.clone(),
                    None => continue,
                },
            };
            let n = f64::from(agg.samples.max(1));
            map.insert(
                key,
                Reading {
                    ts_ms: snap.ts,
                    labels,
                    allocated: (agg.alloc_share_sum / n).min(1.0),
                    effective: (agg.eff_n > 0)
                        .then(|| (agg.eff_sum / f64::from(agg.eff_n)).clamp(0.0, 1.0)),
                },
            );
        }
    }

    /// Registers the two families with this collector's fresh readings.
    pub fn encode(&self, reg: &mut Registry, now_ms: i64) {
        let allocated = Family::<TenantLabels, FGauge>::default();
        let effective = Family::<TenantLabels, FGauge>::default();
        reg.register(
            "tenant_gpu_allocated_ratio",
            "Share of the GPU each tenant holds in its newest sample: 1 for a whole GPU, the slice for a MIG instance, 1/replicas for a shared replica (opt-in: [metrics] tenant_series)",
            allocated.clone(),
        );
        reg.register(
            "tenant_gpu_effective_ratio",
            "Share of the whole GPU each tenant used effectively in its newest sample, as the funnel counts it; absent where unmeasurable (opt-in: [metrics] tenant_series)",
            effective.clone(),
        );
        let mut nodes = self.readings.lock().expect("tenant gauges");
        nodes.retain(|_, _, holders| {
            holders.retain(|_, r| now_ms - r.ts_ms <= super::by_node::STALE_MS);
            !holders.is_empty()
        });
        for r in nodes.values().flat_map(HashMap::values) {
            allocated.get_or_create(&r.labels).set(r.allocated);
            if let Some(e) = r.effective {
                effective.get_or_create(&r.labels).set(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn batch(ts: i64, holders: bool) -> Batch {
        let mut allocations = vec![json!({"gpu_uuid": "GPU-b", "tenant": "job:77", "share": 1.0})];
        if holders {
            allocations.push(
                json!({"gpu_uuid": "GPU-a", "tenant": "pod:u1/main", "share": 0.5, "replica": 0}),
            );
            allocations.push(
                json!({"gpu_uuid": "GPU-a", "tenant": "pod:u2/main", "share": 0.5, "replica": 1}),
            );
        }
        serde_json::from_value(json!({
            "version": 1, "cluster": "prod", "node": "n1", "agent_id": "a", "seq": 1,
            "interval_ms": 1000,
            "tenants": [
                {"key": "pod:u1/main", "kind": "pod", "namespace": "search", "pod": "ranker-0", "container": "main", "pod_uid": "u1"},
                {"key": "pod:u2/main", "kind": "pod", "namespace": "ads", "pod": "ctr-0", "container": "main", "pod_uid": "u2"},
                {"key": "job:77", "kind": "slurm_job", "job_id": "77", "account": "physics", "user": "ada"}
            ],
            "snapshots": [{
                "ts": ts,
                "gpus": [
                    {"gpu_uuid": "GPU-a", "gpu_util": 0.9, "sm_active": 0.8},
                    {"gpu_uuid": "GPU-b", "gpu_util": 0.0}
                ],
                "processes": [
                    {"gpu_uuid": "GPU-a", "pid": 10, "start_time": 1, "tenant": "pod:u1/main", "sm_util": 0.6},
                    {"gpu_uuid": "GPU-a", "pid": 11, "start_time": 1, "tenant": "pod:u2/main", "sm_util": 0.2}
                ],
                "allocations": allocations
            }]
        }))
        .unwrap()
    }

    fn scrape(g: &TenantGauges, now: i64) -> String {
        let mut reg = Registry::with_prefix("gpulens");
        g.encode(&mut reg, now);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        out
    }

    fn value(text: &str, metric: &str, needle: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(metric) && l.contains(needle))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
    }

    #[test]
    fn holders_carry_their_kubernetes_and_slurm_names_and_the_funnels_shares() {
        let g = TenantGauges::default();
        let now = 1_800_000_000_000;
        g.record(&batch(now, true));
        let t = scrape(&g, now);
        let alloc = "gpulens_tenant_gpu_allocated_ratio{";
        let eff = "gpulens_tenant_gpu_effective_ratio{";
        assert_eq!(value(&t, alloc, "pod=\"ranker-0\""), Some(0.5), "{t}");
        assert_eq!(value(&t, alloc, "job_id=\"77\""), Some(1.0), "{t}");
        assert!(
            t.contains("namespace=\"search\",pod=\"ranker-0\",container=\"main\""),
            "{t}"
        );
        assert!(t.contains("account=\"physics\""), "{t}");
        assert!(
            !t.contains("user=\"ada\""),
            "a Slurm job is named by job and account: {t}"
        );
        // The device's SM activity split by process SM time: 0.8 × 0.6/0.8 and 0.8 × 0.2/0.8.
        let ranker = value(&t, eff, "pod=\"ranker-0\"").unwrap();
        let ctr = value(&t, eff, "pod=\"ctr-0\"").unwrap();
        assert!(
            (ranker - 0.6).abs() < 1e-6 && (ctr - 0.2).abs() < 1e-6,
            "{t}"
        );
        assert_eq!(
            value(&t, eff, "job_id=\"77\""),
            Some(0.0),
            "an idle holder used nothing"
        );

        // Another node's batch, with GPUs of the same uuids, leaves this node's holders be.
        let mut other = batch(now + 500, false);
        other.node = "n2".into();
        g.record(&other);
        let t = scrape(&g, now + 500);
        assert_eq!(value(&t, alloc, "pod=\"ranker-0\""), Some(0.5), "{t}");
        assert_eq!(value(&t, alloc, "node=\"n2\""), Some(1.0), "{t}");

        // Tenants that let go leave with the GPU's next batch; a silent GPU takes its own.
        g.record(&batch(now + 1000, false));
        let t = scrape(&g, now + 1000);
        assert_eq!(value(&t, alloc, "pod=\"ranker-0\""), None, "{t}");
        assert_eq!(value(&t, alloc, "job_id=\"77\""), Some(1.0));
        let t = scrape(&g, now + 1000 + super::super::by_node::STALE_MS + 1);
        assert_eq!(value(&t, alloc, "job_id=\"77\""), None, "{t}");
    }

    #[test]
    fn pod_labels_must_be_prometheus_label_names() {
        let mut s = Settings::default();
        s.check().unwrap();
        s.pod_labels = vec!["label_team".into(), "bad-name".into()];
        assert!(s.check().unwrap_err().to_string().contains("bad-name"));
    }
}
