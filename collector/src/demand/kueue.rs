//! Kueue Workloads that are not admitted, as waiting work. Kueue keeps a queued Job suspended
//! (no pods) until it admits its Workload, so such work is invisible as pending pods: its
//! Workload says what it asks for — each pod set's template × its count — and why it waits
//! (the `QuotaReserved` condition). Pure, like [`super::pods`]; every stored field is checked.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::Deserialize;
use store::waiting::WaitingRecord;

use super::pods::{MAX_COUNT, Waiter, identity, product_of, reason_and_message, requested_by};

/// Kueue's API group, version and the Workload plural.
pub const GROUP: &str = "kueue.x-k8s.io";
pub const VERSION: &str = "v1beta1";
pub const PLURAL: &str = "workloads";

/// Most pod sets a Workload may have (Kueue's own limit is 8).
const MAX_POD_SETS: usize = 8;

/// The part of a Workload waiting demand reads.
#[derive(Debug, Deserialize)]
pub struct Workload {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: WorkloadSpec,
    #[serde(default)]
    pub status: Option<WorkloadStatus>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    #[serde(default)]
    pub pod_sets: Vec<PodSet>,
    /// `false`: deactivated; it does not wait for anything.
    #[serde(default)]
    pub active: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub struct PodSet {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub count: i64,
    pub template: PodTemplateSpec,
}

#[derive(Debug, Default, Deserialize)]
pub struct WorkloadStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

impl Workload {
    fn condition(&self, kind: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == kind)
    }

    fn is_true(&self, kind: &str) -> bool {
        self.condition(kind).is_some_and(|c| c.status == "True")
    }

    /// Whether it waits: active, neither admitted nor finished.
    pub fn waiting(&self) -> bool {
        self.spec.active != Some(false) && !self.is_true("Admitted") && !self.is_true("Finished")
    }
}

/// The waiting records of one Workload (none when it is admitted, finished, deactivated or
/// asks for no GPU); `Err` says why it was refused.
pub fn waiting_of(
    w: &Workload,
    cluster: &str,
    team_of: &dyn Fn(&str) -> String,
    now_ms: i64,
) -> Result<Vec<WaitingRecord>, String> {
    if !w.waiting() {
        return Ok(Vec::new());
    }
    if w.spec.pod_sets.len() > MAX_POD_SETS {
        return Err(format!(
            "workload has {} pod sets; at most {MAX_POD_SETS}",
            w.spec.pod_sets.len()
        ));
    }
    let mut wants: std::collections::BTreeMap<String, i64> = Default::default();
    let mut product = None;
    for set in &w.spec.pod_sets {
        if !(0..=MAX_COUNT).contains(&set.count) {
            return Err(format!(
                "pod set {:?} has count {}: not from 0 to {MAX_COUNT}",
                set.name, set.count
            ));
        }
        let Some(spec) = &set.template.spec else {
            continue;
        };
        let per_pod = requested_by(spec)?;
        if !per_pod.is_empty() {
            product = product.or_else(|| product_of(spec));
        }
        for (r, n) in per_pod {
            let t = wants.entry(r).or_insert(0);
            *t = (*t + n * set.count).min(MAX_COUNT);
        }
    }
    wants.retain(|_, n| *n > 0);
    if wants.is_empty() {
        return Ok(Vec::new());
    }
    let meta = &w.metadata;
    let (namespace, name, uid) = identity(meta, "workload")?;
    let why = w.condition("QuotaReserved").filter(|c| c.status != "True");
    // A Workload waits again after an eviction or preemption: its wait began when it lost its
    // quota (the condition's transition), not when it was made, and each wait is an episode
    // of its own (the uid carries its start), so the time it ran is never counted as waiting.
    let since = why
        .map(|c| c.last_transition_time.0.as_millisecond())
        .or_else(|| {
            meta.creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond())
        })
        .unwrap_or(now_ms)
        .min(now_ms);
    let (reason, message) = reason_and_message(
        why.map(|c| c.reason.as_str()).or(Some("Pending")),
        why.map(|c| c.message.as_str()),
    );
    let waiter = Waiter {
        source: "kueue_workload",
        uid: format!("{uid}@{since}"),
        namespace,
        name,
        product,
        reason,
        message,
        since_ms: since,
    };
    Ok(waiter.records(wants, cluster, team_of, now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Workload as Kueue writes it for a Job of 3 pods with 2 GPUs each that found no quota.
    pub fn queued(admitted: bool) -> serde_json::Value {
        let mut conditions = vec![json!({
            "type": "QuotaReserved", "status": if admitted { "True" } else { "False" },
            "reason": "Pending", "lastTransitionTime": "2026-11-20T10:00:00Z",
            "message": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 4 more needed"
        })];
        if admitted {
            conditions.push(json!({"type": "Admitted", "status": "True", "reason": "Admitted",
                "message": "The workload is admitted", "lastTransitionTime": "2026-11-20T11:00:00Z"}));
        }
        json!({
            "metadata": {"name": "job-train-3f2a1", "namespace": "ml", "uid": "9b1c-77",
                         "creationTimestamp": "2026-11-20T10:00:00Z"},
            "spec": {"queueName": "ml-queue", "podSets": [{
                "name": "main", "count": 3,
                "template": {"spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                    "containers": [{"name": "trainer", "image": "trainer:1",
                        "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"cpu": "8"}}}]}}}]},
            "status": {"conditions": conditions}
        })
    }

    fn team(ns: &str) -> String {
        format!("team-{ns}")
    }

    #[test]
    fn a_workload_without_quota_waits_for_its_pod_sets_gpus() {
        let w: Workload = serde_json::from_value(queued(false)).unwrap();
        let r = waiting_of(&w, "c1", &team, 1_800_000_000_000).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].resource.as_str(), r[0].count), ("nvidia.com/gpu", 6));
        assert_eq!(r[0].source, "kueue_workload");
        assert_eq!(r[0].reason, "Pending");
        assert!(r[0].message.contains("insufficient unused quota"));
        assert_eq!(r[0].product.as_deref(), Some("NVIDIA-H100-80GB-HBM3"));
        assert_eq!(r[0].since_ms, 1_795_168_800_000);
        assert_eq!(r[0].uid, "9b1c-77@1795168800000");
        assert_eq!(r[0].team, "team-ml");
    }

    /// Preempted after it ran: it waits again from when it lost its quota, as a new episode.
    #[test]
    fn a_workload_that_waits_again_is_a_new_episode_from_its_eviction() {
        let mut v = queued(false);
        v["status"]["conditions"][0]["lastTransitionTime"] = json!("2026-11-21T10:00:00Z");
        let w: Workload = serde_json::from_value(v).unwrap();
        let r = waiting_of(&w, "c1", &team, 1_800_000_000_000).unwrap();
        assert_eq!(r[0].since_ms, 1_795_168_800_000 + 86_400_000);
        assert_ne!(r[0].uid, "9b1c-77@1795168800000");
    }

    #[test]
    fn admitted_finished_or_deactivated_workloads_do_not_wait() {
        let admitted: Workload = serde_json::from_value(queued(true)).unwrap();
        assert!(waiting_of(&admitted, "c1", &team, 0).unwrap().is_empty());
        let mut v = queued(false);
        v["spec"]["active"] = json!(false);
        let off: Workload = serde_json::from_value(v).unwrap();
        assert!(waiting_of(&off, "c1", &team, 0).unwrap().is_empty());
        let mut v = queued(false);
        v["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "Finished", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": "2026-11-20T12:00:00Z"}));
        let done: Workload = serde_json::from_value(v).unwrap();
        assert!(waiting_of(&done, "c1", &team, 0).unwrap().is_empty());
    }

    #[test]
    fn hostile_workloads_are_refused() {
        let mut v = queued(false);
        v["spec"]["podSets"][0]["count"] = json!(1_000_000);
        let w: Workload = serde_json::from_value(v).unwrap();
        assert!(
            waiting_of(&w, "c1", &team, 0)
                .unwrap_err()
                .contains("count")
        );
        let mut v = queued(false);
        v["metadata"]["namespace"] = json!("ML");
        let w: Workload = serde_json::from_value(v).unwrap();
        assert!(
            waiting_of(&w, "c1", &team, 0)
                .unwrap_err()
                .contains("namespace")
        );
        let mut v = queued(false);
        v["spec"]["podSets"] = json!(vec![queued(false)["spec"]["podSets"][0].clone(); 9]);
        let w: Workload = serde_json::from_value(v).unwrap();
        assert!(
            waiting_of(&w, "c1", &team, 0)
                .unwrap_err()
                .contains("pod sets")
        );
    }
}
