//! What a pinned per-GPU plan asks of the cluster: Kubernetes DRA ResourceClaims
//! (`resource.k8s.io/v1`, Kubernetes ≥ 1.34) for each GPU's group, pinned to the GPU by a CEL
//! selector on the NVIDIA DRA driver's `uuid` attribute (device class `gpu.nvidia.com`), and the
//! pod-spec change each workload needs. A shared claim is one per group, in the group's one
//! namespace, referenced by every pod of it; with consumable capacity each pod has its own
//! claim in its own namespace, requesting its memory from the device's capacity.

use serde_json::{Value, json};

use crate::mechanism::Mechanism;
use crate::plan::pergpu::PinnedGroup;

/// A DNS-1123 label from free text: lower case, `-` for anything else, at most 63 characters.
pub fn dns_label(text: &str) -> String {
    let mut s: String = text
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    s.truncate(63);
    let s = s.trim_matches('-');
    if s.is_empty() {
        "gpu".to_owned()
    } else {
        s.to_owned()
    }
}

/// One claim to create, the pods that reference it and how.
#[derive(Debug, Clone)]
pub struct Claim {
    pub object: Value,
    /// "namespace/pod" of each pod that references it.
    pub pods: Vec<String>,
}

/// A tenant's `namespace/pod/container` name in its parts (empty where one is missing).
fn parts(name: &str) -> (String, String, String) {
    let mut p = name.split('/').map(str::to_owned);
    (
        p.next().unwrap_or_default(),
        p.next().unwrap_or_default(),
        p.next().unwrap_or_default(),
    )
}

/// Bytes as whole MiB, rounded up (what a memory request asks).
fn mib(bytes: f64) -> u64 {
    (bytes / (1u64 << 20) as f64).ceil() as u64
}

/// A `resource.k8s.io/v1` ResourceClaim gpulens manages: `name` in `namespace` (both made DNS
/// labels), one request named `gpu` of exactly `exactly` (its device class, count, selectors,
/// capacity).
fn claim_object(namespace: &str, name: &str, exactly: Value) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": dns_label(name), "namespace": dns_label(namespace),
                     "labels": {"app.kubernetes.io/managed-by": "gpulens"}},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    })
}

/// The claims a group needs under `mechanism` (none for a mechanism that is not pinned, and
/// none for a group of one: it keeps its GPU as it is). `name` gives a tenant key's
/// `namespace/pod/container` name.
pub fn resource_claims(m: Mechanism, g: &PinnedGroup, name: &dyn Fn(&str) -> String) -> Vec<Claim> {
    if g.tenants.len() < 2 {
        return Vec::new();
    }
    let selector = json!([{"cel": {"expression": format!(
        "device.attributes[\"gpu.nvidia.com\"].uuid == \"{}\"", g.gpu
    )}}]);
    let pods: Vec<(String, String, f64)> = g
        .tenants
        .iter()
        .map(|(key, memory)| {
            let (ns, pod, _) = parts(&name(key));
            (ns, pod, *memory)
        })
        .collect();
    match m {
        Mechanism::DraSharedClaim => vec![Claim {
            object: claim_object(
                &pods[0].0,
                &format!("gpulens-shared-{}", dns_label(&g.gpu)),
                json!({"deviceClassName": "gpu.nvidia.com", "count": 1, "selectors": selector}),
            ),
            pods: pods
                .iter()
                .map(|(ns, pod, _)| format!("{ns}/{pod}"))
                .collect(),
        }],
        Mechanism::DraConsumableCapacity => pods
            .iter()
            .map(|(ns, pod, memory)| Claim {
                object: claim_object(
                    ns,
                    &format!("gpulens-{pod}"),
                    json!({"deviceClassName": "gpu.nvidia.com", "count": 1, "selectors": selector,
                           "capacity": {"requests": {"memory": format!("{}Mi", mib(*memory))}}}),
                ),
                pods: vec![format!("{ns}/{pod}")],
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The claims that carve each MIG move of a step at allocation (DRA DynamicMIG): one per pod,
/// in its namespace, for a device of class `mig.nvidia.com` of the move's profile on the GPU it
/// moves to (the driver's `profile` and `parentUUID` attributes). `uuid_of` gives a GPU index's
/// UUID on the step's node.
pub fn mig_claims<'a>(
    moves: &[crate::recommendation::Move],
    uuid_of: &dyn Fn(i64) -> &'a str,
    name: &dyn Fn(&str) -> String,
) -> Vec<Claim> {
    moves
        .iter()
        .filter_map(|m| {
            let crate::recommendation::Target::Mig { profile, .. } = &m.target else {
                return None;
            };
            let (ns, pod, _) = parts(&name(&m.tenant));
            let expression = format!(
                "device.attributes[\"gpu.nvidia.com\"].profile == \"{profile}\" && device.attributes[\"gpu.nvidia.com\"].parentUUID == \"{}\"",
                uuid_of(m.to_gpu_index)
            );
            Some(Claim {
                object: claim_object(
                    &ns,
                    &format!("gpulens-{pod}"),
                    json!({"deviceClassName": "mig.nvidia.com", "count": 1,
                           "selectors": [{"cel": {"expression": expression}}]}),
                ),
                pods: vec![format!("{ns}/{pod}")],
            })
        })
        .collect()
}

/// The claims as one YAML stream, each with the pod-spec change its pods need.
pub fn yaml(claims: &[Claim]) -> String {
    let mut out = String::new();
    for c in claims {
        let name = c.object["metadata"]["name"].as_str().unwrap_or_default();
        out.push_str("---\n");
        for pod in &c.pods {
            out.push_str(&format!(
                "# {pod}: in the pod template, spec.resourceClaims: [{{name: gpu, resourceClaimName: {name}}}]\n#   and in the container, resources.claims: [{{name: gpu}}] in place of its nvidia.com/gpu or nvidia.com/mig-* limit\n"
            ));
        }
        out.push_str(&serde_yaml::to_string(&c.object).unwrap_or_default());
    }
    out
}

/// What a scheduler-placed mechanism asks of each pod, as YAML to merge into its pod template:
/// DRA consumable capacity a claim per pod requesting its memory (no selector: the scheduler
/// places it), HAMi `nvidia.com/gpumem` (MiB) beside `nvidia.com/gpu: 1` with its `binpack`
/// policies for GPUs and nodes (HAMi spreads pods over GPUs by default, which frees none), KAI
/// the `gpu-memory` annotation (MiB) and `schedulerName: kai-scheduler` (KAI packs GPUs by
/// default). A pod that must run alone keeps its whole-GPU request. Returns (how many pods
/// change, the YAML).
pub fn scheduled_requests(
    m: Mechanism,
    requests: &[(String, f64, bool)],
    name: &dyn Fn(&str) -> String,
) -> (usize, String) {
    let mut out = String::new();
    let mut changed = 0;
    for (key, memory, alone) in requests {
        let (ns, pod, container) = parts(&name(key));
        let container = if container.is_empty() {
            "<its container>"
        } else {
            container.as_str()
        };
        if *alone {
            out.push_str(&format!(
                "# {ns}/{pod}: keeps nvidia.com/gpu: 1 (a whole GPU: beside it a placement could contend)\n"
            ));
            continue;
        }
        let mib = mib(*memory);
        let doc = match m {
            Mechanism::DraConsumableScheduled => claim_object(
                &ns,
                &format!("gpulens-{pod}"),
                json!({"deviceClassName": "gpu.nvidia.com", "count": 1,
                       "capacity": {"requests": {"memory": format!("{mib}Mi")}}}),
            ),
            Mechanism::Hami => json!({
                "metadata": {"annotations": {
                    "hami.io/gpu-scheduler-policy": "binpack",
                    "hami.io/node-scheduler-policy": "binpack"}},
                "spec": {"containers": [{"name": container, "resources": {"limits": {
                    "nvidia.com/gpu": 1, "nvidia.com/gpumem": mib}}}]},
            }),
            Mechanism::KaiFractions => json!({
                "metadata": {"annotations": {"gpu-memory": mib.to_string()}},
                "spec": {"schedulerName": "kai-scheduler"},
            }),
            _ => continue,
        };
        changed += 1;
        let place = match m {
            Mechanism::DraConsumableScheduled => {
                "a claim its pod template references (spec.resourceClaims, resources.claims)"
            }
            Mechanism::Hami => "its pod template (the limits replace nvidia.com/gpu: 1 alone)",
            _ => "its pod template",
        };
        out.push_str(&format!("---\n# {ns}/{pod}: {place}\n"));
        out.push_str(&serde_yaml::to_string(&doc).unwrap_or_default());
    }
    (changed, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_pin_the_group_to_its_gpu_and_names_are_dns_labels() {
        let g = PinnedGroup {
            node: "n1".into(),
            gpu: "GPU-1a2B".into(),
            tenants: vec![
                ("k1".into(), 11.0 * (1u64 << 30) as f64),
                ("k2".into(), 5.5e9),
            ],
        };
        let name = |k: &str| {
            if k == "k1" {
                "api/Day_1/main".to_owned()
            } else {
                "web/night-2/main".to_owned()
            }
        };
        let shared = resource_claims(Mechanism::DraSharedClaim, &g, &name);
        assert_eq!(shared.len(), 1);
        assert_eq!(
            shared[0].object["metadata"]["name"],
            "gpulens-shared-gpu-1a2b"
        );
        assert_eq!(shared[0].pods, ["api/Day_1", "web/night-2"]);
        let each = resource_claims(Mechanism::DraConsumableCapacity, &g, &name);
        assert_eq!(each.len(), 2);
        assert_eq!(each[0].object["metadata"]["name"], "gpulens-day-1");
        let req = &each[0].object["spec"]["devices"]["requests"][0]["exactly"];
        assert_eq!(req["capacity"]["requests"]["memory"], "11264Mi");
        assert!(
            req["selectors"][0]["cel"]["expression"]
                .as_str()
                .unwrap()
                .contains("\"GPU-1a2B\"")
        );
        let text = yaml(&each);
        assert!(
            text.contains("resourceClaimName: gpulens-day-1")
                && text.contains("kind: ResourceClaim")
        );
        assert!(resource_claims(Mechanism::Hami, &g, &name).is_empty());
        assert_eq!(dns_label("--A b--"), "a-b");
    }

    #[test]
    fn a_scheduler_gets_memory_requests_and_a_lone_pod_keeps_its_gpu() {
        let name = |k: &str| format!("ns-{k}/pod-{k}/main");
        let reqs = vec![
            ("a".to_owned(), 11.0 * (1u64 << 30) as f64, false),
            ("b".to_owned(), 1e9, true),
        ];
        let (n, hami) = scheduled_requests(Mechanism::Hami, &reqs, &name);
        assert_eq!(n, 1);
        assert!(
            hami.contains("nvidia.com/gpumem: 11264")
                && hami.contains("name: main")
                && hami.contains("hami.io/gpu-scheduler-policy: binpack")
                && hami.contains("ns-b/pod-b: keeps nvidia.com/gpu: 1"),
            "{hami}"
        );
        let (_, kai) = scheduled_requests(Mechanism::KaiFractions, &reqs, &name);
        assert!(
            kai.contains("gpu-memory: '11264'") && kai.contains("schedulerName: kai-scheduler"),
            "{kai}"
        );
        let (_, dra) = scheduled_requests(Mechanism::DraConsumableScheduled, &reqs, &name);
        assert!(
            dra.contains("memory: 11264Mi") && !dra.contains("selectors"),
            "{dra}"
        );
    }
}
