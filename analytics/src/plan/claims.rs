//! What a pinned per-GPU plan asks of the cluster (issue 73): Kubernetes DRA ResourceClaims
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
            let n = name(key);
            let mut parts = n.split('/');
            let ns = parts.next().unwrap_or_default().to_owned();
            let pod = parts.next().unwrap_or_default().to_owned();
            (ns, pod, *memory)
        })
        .collect();
    let gpu_label = dns_label(&g.gpu);
    match m {
        Mechanism::DraSharedClaim => {
            let ns = dns_label(&pods[0].0);
            vec![Claim {
                object: json!({
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": dns_label(&format!("gpulens-shared-{gpu_label}")), "namespace": ns,
                                 "labels": {"app.kubernetes.io/managed-by": "gpulens"}},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                        "deviceClassName": "gpu.nvidia.com", "count": 1, "selectors": selector}}]}},
                }),
                pods: pods.iter().map(|(ns, pod, _)| format!("{ns}/{pod}")).collect(),
            }]
        }
        Mechanism::DraConsumableCapacity => pods
            .iter()
            .map(|(ns, pod, memory)| {
                let mib = (memory / (1u64 << 20) as f64).ceil() as u64;
                Claim {
                    object: json!({
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceClaim",
                        "metadata": {"name": dns_label(&format!("gpulens-{pod}")), "namespace": dns_label(ns),
                                     "labels": {"app.kubernetes.io/managed-by": "gpulens"}},
                        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                            "deviceClassName": "gpu.nvidia.com", "count": 1, "selectors": selector,
                            "capacity": {"requests": {"memory": format!("{mib}Mi")}}}}]}},
                    }),
                    pods: vec![format!("{ns}/{pod}")],
                }
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The claims as one YAML stream, each with the pod-spec change its pods need.
pub fn yaml(claims: &[Claim]) -> String {
    let mut out = String::new();
    for c in claims {
        let name = c.object["metadata"]["name"].as_str().unwrap_or_default();
        out.push_str("---\n");
        for pod in &c.pods {
            out.push_str(&format!(
                "# {pod}: in the pod template, spec.resourceClaims: [{{name: gpu, resourceClaimName: {name}}}]\n#   and in the container, resources.claims: [{{name: gpu}}] in place of nvidia.com/gpu: 1\n"
            ));
        }
        out.push_str(&serde_yaml::to_string(&c.object).unwrap_or_default());
    }
    out
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
}
