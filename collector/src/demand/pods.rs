//! Pending pods as waiting work: what GPU resources a pod asks for, what product, since when
//! and why it waits. Pure: the pod comes from the Kubernetes API (untrusted), every field that
//! is stored is checked against its documented domain (docs/demand.md) first.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use store::waiting::WaitingRecord;

/// The node label GPU Feature Discovery sets to the GPU product; a pod that names it in its
/// node selector (or a required node affinity `In` with one value) waits for that product.
pub const PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// Most units of one resource a pod is believed to ask for.
pub const MAX_COUNT: i64 = 1_024;
/// The scheduler's message is kept to this many characters.
pub const MAX_MESSAGE: usize = 512;
const MAX_REASON: usize = 64;
const MAX_RESOURCE: usize = 63;

/// Whether `name` is a GPU resource waiting demand counts: `nvidia.com/gpu`,
/// `nvidia.com/gpu.shared` or a MIG profile `nvidia.com/mig-<n>g.<m>gb[+…]`.
pub fn gpu_resource(name: &str) -> bool {
    if name.len() > MAX_RESOURCE {
        return false;
    }
    name == analytics::waiting::WHOLE_GPU
        || name == analytics::waiting::SHARED_GPU
        || name
            .strip_prefix(analytics::waiting::MIG_PREFIX)
            .is_some_and(|p| {
                model::mig::compute_slices(p).is_some()
                    && p.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'+' || b == b'-')
            })
}

/// Whole units of a quantity: extended resources are integers (`"2"`); anything else is
/// refused rather than guessed.
fn units(q: &Quantity) -> Option<i64> {
    q.0.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| (0..=MAX_COUNT).contains(n))
}

/// A container's GPU units by resource: limits (extended resources must set them; requests
/// equal them when given).
fn container_gpus(c: &Container) -> Result<BTreeMap<String, i64>, String> {
    let mut out = BTreeMap::new();
    let Some(res) = &c.resources else {
        return Ok(out);
    };
    for map in [&res.limits, &res.requests].into_iter().flatten() {
        for (name, q) in map.iter().filter(|(n, _)| n.starts_with("nvidia.com/")) {
            if !gpu_resource(name) {
                continue;
            }
            let n = units(q).ok_or_else(|| {
                format!("container {:?} asks for {name} = {:?}: not a whole number from 0 to {MAX_COUNT}", c.name, q.0)
            })?;
            let e = out.entry(name.clone()).or_insert(0);
            *e = (*e).max(n);
        }
    }
    Ok(out)
}

/// What a pod asks for: the sum over its containers, or the most one init container asks for
/// when that is more (init containers run one at a time, before the others).
pub fn requested(pod: &Pod) -> Result<BTreeMap<String, i64>, String> {
    pod.spec.as_ref().map_or(Ok(BTreeMap::new()), requested_by)
}

/// What a pod of this spec asks for (see [`requested`]).
pub fn requested_by(spec: &PodSpec) -> Result<BTreeMap<String, i64>, String> {
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    for c in &spec.containers {
        for (r, n) in container_gpus(c)? {
            let t = total.entry(r).or_insert(0);
            *t = (*t + n).min(MAX_COUNT);
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (r, n) in container_gpus(c)? {
            let t = total.entry(r).or_insert(0);
            *t = (*t).max(n);
        }
    }
    total.retain(|_, n| *n > 0);
    Ok(total)
}

/// The GPU product a pod asks for through its node selector or a required node affinity term
/// `nvidia.com/gpu.product In [one value]`; `None` when it names none or several.
pub fn product(pod: &Pod) -> Option<String> {
    product_of(pod.spec.as_ref()?)
}

/// The GPU product a pod of this spec asks for (see [`product`]).
pub fn product_of(spec: &PodSpec) -> Option<String> {
    let from_selector = spec
        .node_selector
        .as_ref()
        .and_then(|s| s.get(PRODUCT_LABEL))
        .cloned();
    let from_affinity = || {
        let terms = &spec
            .affinity
            .as_ref()?
            .node_affinity
            .as_ref()?
            .required_during_scheduling_ignored_during_execution
            .as_ref()?
            .node_selector_terms;
        // Terms are ORed: only one term naming one product says which product.
        let [term] = terms.as_slice() else {
            return None;
        };
        term.match_expressions.iter().flatten().find_map(|e| {
            match (
                e.key == PRODUCT_LABEL,
                e.operator.as_str(),
                e.values.as_deref(),
            ) {
                (true, "In", Some([one])) => Some(one.clone()),
                _ => None,
            }
        })
    };
    from_selector
        .or_else(from_affinity)
        .filter(|p| label_value(p))
}

/// Checks a namespace name: a DNS-1123 label.
pub fn check_namespace(namespace: &str) -> Result<(), String> {
    model::names::check_subdomain(namespace)
        .and_then(|()| {
            (namespace.len() <= 63 && !namespace.contains('.'))
                .then_some(())
                .ok_or_else(|| "is not a DNS-1123 label".to_owned())
        })
        .map_err(|why| format!("namespace {namespace:?} {why}"))
}

/// Checks an object's namespace, name and uid against their domains.
pub fn check_identity(namespace: &str, name: &str, uid: &str) -> Result<(), String> {
    check_namespace(namespace)?;
    model::names::check_subdomain(name).map_err(|why| format!("name {why}"))?;
    if uid.is_empty()
        || uid.len() > 64
        || !uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(format!("{namespace}/{name} has no usable uid ({uid:?})"));
    }
    Ok(())
}

/// What one waiting object says of itself; [`Waiter::records`] makes its rows, one per resource.
pub struct Waiter<'a> {
    pub source: &'static str,
    pub uid: String,
    pub namespace: &'a str,
    pub name: &'a str,
    pub product: Option<String>,
    pub reason: String,
    pub message: String,
    pub since_ms: i64,
}

impl Waiter<'_> {
    pub fn records(
        self,
        wants: BTreeMap<String, i64>,
        cluster: &str,
        team_of: &dyn Fn(&str) -> String,
        now_ms: i64,
    ) -> Vec<WaitingRecord> {
        let team = team_of(self.namespace);
        wants
            .into_iter()
            .map(|(resource, count)| WaitingRecord {
                cluster: cluster.to_owned(),
                source: self.source.into(),
                uid: self.uid.clone(),
                scope: self.namespace.to_owned(),
                team: team.clone(),
                name: self.name.to_owned(),
                resource,
                count,
                product: self.product.clone(),
                reason: self.reason.clone(),
                message: self.message.clone(),
                since_ms: self.since_ms,
                first_seen_ms: now_ms,
                last_seen_ms: now_ms,
            })
            .collect()
    }
}

/// An object's namespace, name and uid, checked against their domains (`what` names it in
/// the refusal).
pub fn identity<'m>(
    meta: &'m k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    what: &str,
) -> Result<(&'m str, &'m str, &'m str), String> {
    let namespace = meta.namespace.as_deref().unwrap_or("");
    let name = meta.name.as_deref().unwrap_or("");
    let uid = meta.uid.as_deref().unwrap_or("");
    check_identity(namespace, name, uid).map_err(|why| format!("{what} {why}"))?;
    Ok((namespace, name, uid))
}

/// A scheduler's (or Kueue's) reason, when it is one word; and its message, clipped.
pub fn reason_and_message(reason: Option<&str>, message: Option<&str>) -> (String, String) {
    let reason = reason
        .filter(|r| r.len() <= MAX_REASON && r.bytes().all(|b| b.is_ascii_alphanumeric()))
        .unwrap_or("")
        .to_owned();
    (reason, clipped(message.unwrap_or(""), MAX_MESSAGE))
}

/// A Kubernetes label value: at most 63 characters, alphanumerics, `-`, `_`, `.`, starting and
/// ending with an alphanumeric.
fn label_value(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && v.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && v.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}

/// `s` cut to `max` characters, control characters made spaces.
fn clipped(s: &str, max: usize) -> String {
    s.chars()
        .take(max)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The waiting records of one pending pod (none when it asks for no GPU or is bound to a
/// node); `Err` says why it was refused.
pub fn waiting_of(
    pod: &Pod,
    cluster: &str,
    team_of: &dyn Fn(&str) -> String,
    now_ms: i64,
) -> Result<Vec<WaitingRecord>, String> {
    if pod.spec.as_ref().is_some_and(|s| s.node_name.is_some()) {
        return Ok(Vec::new());
    }
    let wants = requested(pod)?;
    if wants.is_empty() {
        return Ok(Vec::new());
    }
    let meta = &pod.metadata;
    let (namespace, name, uid) = identity(meta, "pod")?;
    let scheduled = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    let (reason, message) = reason_and_message(
        scheduled.and_then(|c| c.reason.as_deref()),
        scheduled.and_then(|c| c.message.as_deref()),
    );
    let waiter = Waiter {
        source: "pod",
        uid: uid.to_owned(),
        namespace,
        name,
        product: product(pod),
        reason,
        message,
        since_ms: meta
            .creation_timestamp
            .as_ref()
            .map_or(now_ms, |t| t.0.as_millisecond())
            .min(now_ms),
    };
    Ok(waiter.records(wants, cluster, team_of, now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn pending(containers: serde_json::Value) -> Pod {
        pod(json!({
            "metadata": {"name": "train-0", "namespace": "ml", "uid": "5f0c-11",
                         "creationTimestamp": "2026-11-20T10:00:00Z"},
            "spec": {"containers": containers,
                     "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."}]}
        }))
    }

    fn team(ns: &str) -> String {
        format!("team-{ns}")
    }

    #[test]
    fn a_pending_pod_waits_for_the_sum_of_its_containers() {
        let p = pending(json!([
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "4"}}},
            {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1"},
                                        "requests": {"nvidia.com/gpu": "1"}}},
            {"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "3"}}},
        ]));
        let created = 1_795_168_800_000; // 2026-11-20T10:00:00Z
        let now = created + 3_600_000;
        let w = waiting_of(&p, "c1", &team, now).unwrap();
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!((w[0].resource.as_str(), w[0].count), ("nvidia.com/gpu", 3));
        assert_eq!(
            (w[1].resource.as_str(), w[1].count),
            ("nvidia.com/mig-1g.10gb", 3)
        );
        assert_eq!(w[0].team, "team-ml");
        assert_eq!(w[0].product.as_deref(), Some("NVIDIA-H100-80GB-HBM3"));
        assert_eq!(w[0].reason, "Unschedulable");
        assert_eq!(w[0].since_ms, created, "it waits since it was made");
        assert_eq!((w[0].first_seen_ms, w[0].last_seen_ms), (now, now));
        // A creation time in the future (a skewed clock) is read as now.
        assert_eq!(
            waiting_of(&p, "c1", &team, created - 1).unwrap()[0].since_ms,
            created - 1
        );
        assert!(w[0].message.contains("Insufficient"));
    }

    #[test]
    fn init_containers_count_when_they_ask_for_more() {
        let mut p = pending(json!([
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ]));
        p.spec.as_mut().unwrap().init_containers = Some(vec![
            serde_json::from_value(
                json!({"name": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}}),
            )
            .unwrap(),
        ]);
        assert_eq!(requested(&p).unwrap()["nvidia.com/gpu"], 4);
    }

    #[test]
    fn pods_without_gpus_or_bound_to_a_node_do_not_wait_for_gpus() {
        let p = pending(json!([{"name": "a", "resources": {"limits": {"cpu": "1"}}}]));
        assert!(waiting_of(&p, "c1", &team, 0).unwrap().is_empty());
        let mut p =
            pending(json!([{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]));
        p.spec.as_mut().unwrap().node_name = Some("n1".into());
        assert!(waiting_of(&p, "c1", &team, 0).unwrap().is_empty());
    }

    #[test]
    fn hostile_fields_are_refused_or_clipped() {
        let bad_count = pending(json!([
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1e9"}}}
        ]));
        assert!(
            waiting_of(&bad_count, "c1", &team, 0)
                .unwrap_err()
                .contains("whole number")
        );
        let mut bad_ns =
            pending(json!([{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]));
        bad_ns.metadata.namespace = Some("ml/../x".into());
        assert!(
            waiting_of(&bad_ns, "c1", &team, 0)
                .unwrap_err()
                .contains("namespace")
        );
        let mut long =
            pending(json!([{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]));
        let cond = &mut long.status.as_mut().unwrap().conditions.as_mut().unwrap()[0];
        cond.message = Some(format!("{}\u{7}", "x".repeat(5000)));
        cond.reason = Some("<script>".into());
        long.spec.as_mut().unwrap().node_selector =
            Some([(PRODUCT_LABEL.to_owned(), "a b".to_owned())].into());
        let w = waiting_of(&long, "c1", &team, 0).unwrap();
        assert_eq!(w[0].message.chars().count(), MAX_MESSAGE);
        assert_eq!(w[0].reason, "", "a reason that is not a word is dropped");
        assert_eq!(
            w[0].product, None,
            "a product that is not a label value is dropped"
        );
        // Unknown resources under nvidia.com/ are not GPUs this counts.
        assert!(!gpu_resource("nvidia.com/gpu-evil"));
        assert!(!gpu_resource("nvidia.com/mig-x"));
        assert!(gpu_resource("nvidia.com/mig-3g.40gb"));
    }

    #[test]
    fn a_required_affinity_naming_one_product_is_the_product() {
        let mut p =
            pending(json!([{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]));
        let spec = p.spec.as_mut().unwrap();
        spec.node_selector = None;
        spec.affinity = Some(
            serde_json::from_value(json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}]}]}}}))
            .unwrap(),
        );
        assert_eq!(product(&p).as_deref(), Some("NVIDIA-A100-SXM4-80GB"));
    }
}

/// Hostile pods and Workloads, many at once: random values of random types put into every
/// field the parsers read (and some they do not), from a fixed seed. Whatever comes in, a
/// parser refuses it or returns records inside the documented domain — it never panics.
#[cfg(test)]
pub(crate) mod hostile {
    use serde_json::{Value, json};

    use super::*;
    use crate::demand::kueue;

    /// xorshift64*: a fixed, dependency-free stream of numbers.
    pub(crate) struct Rng(pub u64);

    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// A value that a careless parser would trip on.
        pub(crate) fn value(&mut self) -> Value {
            const TEXT: [&str; 12] = [
                "",
                "1",
                "-1",
                "1e9",
                "2.5",
                "1024",
                "1025",
                "nvidia.com/gpu",
                "ml/../x",
                "a\u{0}b\u{7}",
                "NVIDIA-H100-80GB-HBM3",
                "9223372036854775807",
            ];
            match self.below(7) {
                0 => Value::Null,
                1 => json!(TEXT[self.below(TEXT.len() as u64) as usize]),
                2 => json!(self.next() as i64),
                3 => json!("x".repeat(self.below(5000) as usize)),
                4 => json!([self.below(3)]),
                5 => json!({"k": "v"}),
                _ => json!((self.below(4000) as i64) - 2),
            }
        }
    }

    /// `v` with the value at `path` replaced (objects made where the path needs them).
    fn set(v: &mut Value, path: &[&str], new: Value) {
        let mut at = v;
        for (i, key) in path.iter().enumerate() {
            if i + 1 == path.len() {
                if let Some(o) = at.as_object_mut() {
                    o.insert((*key).to_owned(), new);
                }
                return;
            }
            if !at.get(*key).is_some_and(Value::is_object) {
                if let Some(o) = at.as_object_mut() {
                    o.insert((*key).to_owned(), json!({}));
                } else {
                    return;
                }
            }
            at = at.get_mut(*key).expect("just made");
        }
    }

    fn in_domain(r: &WaitingRecord, now: i64) {
        assert!(gpu_resource(&r.resource), "{r:?}");
        assert!((1..=MAX_COUNT).contains(&r.count), "{r:?}");
        assert!(
            r.message.chars().count() <= MAX_MESSAGE && !r.message.chars().any(char::is_control)
        );
        assert!(r.reason.len() <= 64 && r.reason.bytes().all(|b| b.is_ascii_alphanumeric()));
        assert!(r.since_ms <= now);
        check_identity(&r.scope, &r.name, r.uid.split('@').next().unwrap()).unwrap();
        if let Some(p) = &r.product {
            assert!(label_value(p), "{p:?}");
        }
    }

    const POD_FIELDS: &[&[&str]] = &[
        &["metadata", "name"],
        &["metadata", "namespace"],
        &["metadata", "uid"],
        &["metadata", "creationTimestamp"],
        &["spec", "nodeName"],
        &["spec", "nodeSelector", PRODUCT_LABEL],
        &["status", "phase"],
    ];

    fn pod_base() -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "ml", "uid": "u-1", "creationTimestamp": "2026-11-20T10:00:00Z"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}]}
        })
    }

    #[test]
    fn hostile_pods_and_workloads_are_refused_or_kept_inside_the_domain() {
        let mut rng = Rng(0x5eed_1234_abcd_0042);
        let now = 1_800_000_000_000;
        let team = |ns: &str| ns.to_owned();
        let (mut kept, mut refused, mut unreadable) = (0, 0, 0);
        for _ in 0..4_000 {
            let mut v = pod_base();
            for _ in 0..=rng.below(4) {
                let value = rng.value();
                match rng.below(4) {
                    0 => {
                        let f = POD_FIELDS[rng.below(POD_FIELDS.len() as u64) as usize];
                        set(&mut v, f, value);
                    }
                    1 => {
                        let r = [
                            "nvidia.com/gpu",
                            "nvidia.com/mig-3g.40gb",
                            "nvidia.com/gpu.shared",
                            "nvidia.com/x",
                        ][rng.below(4) as usize];
                        v["spec"]["containers"][0]["resources"]["limits"][r] = value;
                    }
                    2 => {
                        v["status"]["conditions"][0]
                            [["reason", "message", "type"][rng.below(3) as usize]] = value;
                    }
                    _ => {
                        v["spec"]["initContainers"] = json!([{"name": "i", "resources": {"requests": {"nvidia.com/gpu": value}}}])
                    }
                }
            }
            let Ok(pod) = serde_json::from_value::<Pod>(v) else {
                unreadable += 1;
                continue;
            };
            match waiting_of(&pod, "c1", &team, now) {
                Ok(records) => {
                    kept += records.len();
                    records.iter().for_each(|r| in_domain(r, now));
                }
                Err(_) => refused += 1,
            }
        }
        for _ in 0..2_000 {
            let mut v = json!({
                "metadata": {"name": "w", "namespace": "ml", "uid": "w-1", "creationTimestamp": "2026-11-20T10:00:00Z"},
                "spec": {"podSets": [{"name": "main", "count": 2, "template": {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}]},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "m", "lastTransitionTime": "2026-11-20T10:00:00Z"}]}
            });
            for _ in 0..=rng.below(3) {
                let value = rng.value();
                match rng.below(4) {
                    0 => v["spec"]["podSets"][0]["count"] = value,
                    1 => {
                        v["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]
                            ["limits"]["nvidia.com/gpu"] = value
                    }
                    2 => {
                        v["status"]["conditions"][0][[
                            "reason",
                            "message",
                            "status",
                            "lastTransitionTime",
                        ][rng.below(4) as usize]] = value
                    }
                    _ => set(
                        &mut v,
                        &[
                            "metadata",
                            ["name", "namespace", "uid"][rng.below(3) as usize],
                        ],
                        value,
                    ),
                }
            }
            let Ok(w) = serde_json::from_value::<kueue::Workload>(v) else {
                unreadable += 1;
                continue;
            };
            match kueue::waiting_of(&w, "c1", &team, now) {
                Ok(records) => {
                    kept += records.len();
                    records.iter().for_each(|r| in_domain(r, now));
                }
                Err(_) => refused += 1,
            }
        }
        // Each way out was taken many times: the mutations reach the checks.
        assert!(
            kept > 200 && refused > 500 && unreadable > 100,
            "kept {kept}, refused {refused}, unreadable {unreadable}"
        );
    }
}
