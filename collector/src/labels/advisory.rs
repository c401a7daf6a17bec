//! Advisory labels: what the latest analysis says about each node, as `gpulens.io/…` labels.
//! They describe; they change nothing on the node.

use std::collections::BTreeMap;

use analytics::Analysis;
use analytics::recommend::Proposal;
use model::labels::{
    ANALYZED_AT, RECOMMENDED_DEVICE_PLUGIN_CONFIG, RECOMMENDED_MIG_CONFIG, RECOMMENDED_SHARING,
    UTILIZATION_CLASS, to_value,
};

/// Effective use over capacity below which a node is `idle`, `low`, `medium`; `high` above.
const CLASSES: [(f64, &str); 3] = [(0.05, "idle"), (0.30, "low"), (0.60, "medium")];

/// The utilization class of effective over capacity GPU-hours.
pub fn utilization_class(effective: f64, capacity: Option<f64>, signal: &str) -> &'static str {
    match capacity {
        Some(c) if c > 0.0 && signal != "none" => {
            let r = effective / c;
            CLASSES
                .iter()
                .find(|(limit, _)| r < *limit)
                .map_or("high", |(_, name)| name)
        }
        _ => "unknown",
    }
}

/// The device plugin config name gpulens proposes for a sharing mode and replica count.
pub fn device_plugin_config_name(mode: model::inventory::Sharing, replicas: u32) -> String {
    to_value(&format!(
        "gpulens-{}-x{replicas}",
        mode.as_str().replace('_', "-")
    ))
}

/// `YYYYMMDDTHHMMSSZ` (label values cannot hold `:`).
pub fn compact_time(ms: i64) -> String {
    model::time::rfc3339(ms)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(15)
        .collect::<String>()
        + "Z"
}

/// A node: its cluster and its name (node names are unique only within a cluster).
pub type NodeKey = (String, String);

/// One node's labels, key to value.
pub type NodeLabels = BTreeMap<String, String>;

/// Advisory labels per (cluster, node).
pub fn labels(a: &Analysis, generated_ms: i64) -> BTreeMap<NodeKey, NodeLabels> {
    let mut out: BTreeMap<NodeKey, NodeLabels> = BTreeMap::new();
    for row in &a.funnel.by_node {
        let cluster = row.cluster.clone().unwrap_or_else(|| "default".into());
        let l = out.entry((cluster, row.key.clone())).or_default();
        l.insert(
            UTILIZATION_CLASS.into(),
            utilization_class(
                row.effective_gpu_hours,
                row.capacity_gpu_hours,
                &row.effective_signal,
            )
            .into(),
        );
        l.insert(RECOMMENDED_SHARING.into(), "keep".into());
        l.insert(ANALYZED_AT.into(), compact_time(generated_ms));
    }
    for r in &a.recommendations {
        let l = out.entry((r.cluster.clone(), r.node.clone())).or_default();
        match &r.proposal {
            Proposal::MigLayout { config_name, .. } => {
                l.insert(RECOMMENDED_SHARING.into(), "mig".into());
                l.insert(RECOMMENDED_MIG_CONFIG.into(), config_name.clone());
            }
            Proposal::Sharing { mode, replicas, .. } => {
                l.insert(
                    RECOMMENDED_SHARING.into(),
                    to_value(&mode.as_str().replace('_', "-")),
                );
                l.insert(
                    RECOMMENDED_DEVICE_PLUGIN_CONFIG.into(),
                    device_plugin_config_name(*mode, *replicas),
                );
            }
            Proposal::PerGpu { mechanism, .. } => {
                l.insert(
                    RECOMMENDED_SHARING.into(),
                    to_value(&mechanism.as_str().replace('_', "-")),
                );
            }
            _ => {}
        }
        l.entry(ANALYZED_AT.into())
            .or_insert_with(|| compact_time(generated_ms));
    }
    out
}

/// The advisory labels of one cluster's nodes, by node name: what a label writer bound to
/// `cluster` may write. With no cluster configured, the analysis must cover exactly one
/// cluster (else the writer could label a same-named node of another cluster), and that one is
/// taken.
pub fn for_cluster(
    all: BTreeMap<NodeKey, NodeLabels>,
    cluster: Option<&str>,
) -> Result<(String, BTreeMap<String, NodeLabels>), String> {
    let cluster = match cluster {
        Some(c) => c.to_owned(),
        None => {
            let clusters: std::collections::BTreeSet<&str> =
                all.keys().map(|(c, _)| c.as_str()).collect();
            match clusters.len() {
                0 => return Ok((String::new(), BTreeMap::new())),
                1 => clusters.into_iter().next().unwrap_or_default().to_owned(),
                _ => {
                    return Err(format!(
                        "the analysis covers clusters {}; set [labels] cluster to the one this collector's Kubernetes API serves",
                        clusters.into_iter().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
    };
    let nodes = all
        .into_iter()
        .filter(|((c, _), _)| *c == cluster)
        .map(|((_, n), l)| (n, l))
        .collect();
    Ok((cluster, nodes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_effective_share_of_capacity() {
        assert_eq!(utilization_class(0.0, Some(100.0), "gpu_util"), "idle");
        assert_eq!(utilization_class(20.0, Some(100.0), "gpu_util"), "low");
        assert_eq!(utilization_class(45.0, Some(100.0), "sm_active"), "medium");
        assert_eq!(utilization_class(90.0, Some(100.0), "sm_active"), "high");
        assert_eq!(utilization_class(0.0, Some(100.0), "none"), "unknown");
        assert_eq!(utilization_class(1.0, None, "gpu_util"), "unknown");
    }

    /// Batches sent for `gpu-h100-01` in another cluster flipped this cluster's
    /// node's label, because labels were planned by node name only.
    #[test]
    fn a_writer_gets_only_its_own_clusters_nodes() {
        let l = |v: &str| BTreeMap::from([(UTILIZATION_CLASS.to_owned(), v.to_owned())]);
        let all = BTreeMap::from([
            (("east".to_owned(), "gpu-h100-01".to_owned()), l("idle")),
            (("west".to_owned(), "gpu-h100-01".to_owned()), l("high")),
        ]);
        let (c, west) = for_cluster(all.clone(), Some("west")).unwrap();
        assert_eq!(c, "west");
        assert_eq!(west.len(), 1);
        assert_eq!(west["gpu-h100-01"][UTILIZATION_CLASS], "high");
        let e = for_cluster(all.clone(), None).unwrap_err();
        assert!(
            e.contains("east, west") && e.contains("[labels] cluster"),
            "{e}"
        );
        let one = BTreeMap::from([(("east".to_owned(), "n".to_owned()), l("low"))]);
        assert_eq!(for_cluster(one, None).unwrap().0, "east");
    }

    #[test]
    fn values_are_valid_label_values() {
        let t = compact_time(1_763_726_400_000);
        assert_eq!(t, "20251121T120000Z");
        model::labels::check_value(ANALYZED_AT, &t).unwrap();
        let n = device_plugin_config_name(model::inventory::Sharing::TimeSlicing, 4);
        assert_eq!(n, "gpulens-time-slicing-x4");
        model::labels::check_value(RECOMMENDED_DEVICE_PLUGIN_CONFIG, &n).unwrap();
    }
}
