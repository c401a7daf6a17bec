//! Which per-GPU sharing mechanisms each node has in place, as the API server shows them
//!, read by the demand poll beside pending pods:
//!
//! - NVIDIA's DRA driver (`gpu.nvidia.com`) publishes the node's GPUs in ResourceSlices
//!   (`resource.k8s.io/v1`, `spec.nodeName`): claims can then pin a GPU
//!   (`dra_shared_claim`); a device with `allowMultipleAllocations: true` takes several claims
//!   by consumable capacity (`dra_consumable_capacity`, pinned or placed by the scheduler:
//!   `dra_consumable_scheduled`).
//! - HAMi's device plugin registers the node's GPUs in the node annotation
//!   `hami.io/node-nvidia-register` (`hami`).
//!
//! KAI Scheduler leaves no mark on a node; it is configured (`[analytics.mechanisms]`).

use std::collections::BTreeSet;

use analytics::mechanism::Mechanism;
use model::names::{HAMI_NODE_REGISTER, NVIDIA_DRA_DRIVER, check_subdomain};
use serde_json::Value;

/// (node, mechanism) pairs the ResourceSlices and nodes show, each once, in order.
pub fn seen(slices: &[Value], nodes: &[Value]) -> Vec<(String, Mechanism)> {
    let mut out: BTreeSet<(String, Mechanism)> = BTreeSet::new();
    for s in slices
        .iter()
        .filter(|s| s["spec"]["driver"] == NVIDIA_DRA_DRIVER)
    {
        let Some(node) = s["spec"]["nodeName"]
            .as_str()
            .filter(|n| check_subdomain(n).is_ok())
        else {
            continue;
        };
        let devices = s["spec"]["devices"].as_array();
        if devices.is_none_or(|d| d.is_empty()) {
            continue;
        }
        out.insert((node.to_owned(), Mechanism::DraSharedClaim));
        if devices
            .into_iter()
            .flatten()
            .any(|d| d["allowMultipleAllocations"] == true)
        {
            out.insert((node.to_owned(), Mechanism::DraConsumableCapacity));
            out.insert((node.to_owned(), Mechanism::DraConsumableScheduled));
        }
    }
    for n in nodes {
        let Some(name) = n["metadata"]["name"]
            .as_str()
            .filter(|n| check_subdomain(n).is_ok())
        else {
            continue;
        };
        if n["metadata"]["annotations"][HAMI_NODE_REGISTER]
            .as_str()
            .is_some_and(|v| !v.trim().is_empty())
        {
            out.insert((name.to_owned(), Mechanism::Hami));
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slices_and_node_annotations_say_what_a_node_has() {
        let slice = |node: &str, multiple: bool| {
            json!({"spec": {"driver": NVIDIA_DRA_DRIVER, "nodeName": node,
                "pool": {"name": node},
                "devices": [{"name": "gpu-0", "allowMultipleAllocations": multiple}]}})
        };
        let other = json!({"spec": {"driver": "example.com/nic", "nodeName": "n3",
            "devices": [{"name": "nic-0"}]}});
        let hami = json!({"metadata": {"name": "n4", "annotations": {
            HAMI_NODE_REGISTER: "GPU-x,10,81920,100,NVIDIA-H100,0,true:"}}});
        let plain = json!({"metadata": {"name": "n5"}});
        let bad = json!({"spec": {"driver": NVIDIA_DRA_DRIVER, "nodeName": "N/../x",
            "devices": [{"name": "gpu-0"}]}});
        let got = seen(
            &[slice("n1", false), slice("n2", true), other, bad],
            &[hami, plain],
        );
        assert_eq!(
            got,
            [
                ("n1".to_owned(), Mechanism::DraSharedClaim),
                ("n2".to_owned(), Mechanism::DraSharedClaim),
                ("n2".to_owned(), Mechanism::DraConsumableCapacity),
                ("n2".to_owned(), Mechanism::DraConsumableScheduled),
                ("n4".to_owned(), Mechanism::Hami),
            ]
        );
        assert_eq!(
            Mechanism::DraConsumableCapacity.as_str(),
            "dra_consumable_capacity"
        );
    }
}
