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
pub fn device_plugin_config_name(mode: &str, replicas: u32) -> String {
    to_value(&format!("gpulens-{}-x{replicas}", mode.replace('_', "-")))
}

/// `YYYYMMDDTHHMMSSZ` (label values cannot hold `:`).
pub fn compact_time(ms: i64) -> String {
    crate::api::rfc3339(ms)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(15)
        .collect::<String>()
        + "Z"
}

/// Advisory labels per node name.
pub fn labels(a: &Analysis, generated_ms: i64) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for row in &a.funnel.by_node {
        let l = out.entry(row.key.clone()).or_default();
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
        let l = out.entry(r.node.clone()).or_default();
        match &r.proposal {
            Proposal::MigLayout { config_name, .. } => {
                l.insert(RECOMMENDED_SHARING.into(), "mig".into());
                l.insert(RECOMMENDED_MIG_CONFIG.into(), config_name.clone());
            }
            Proposal::Sharing { mode, replicas, .. } => {
                l.insert(
                    RECOMMENDED_SHARING.into(),
                    to_value(&mode.replace('_', "-")),
                );
                l.insert(
                    RECOMMENDED_DEVICE_PLUGIN_CONFIG.into(),
                    device_plugin_config_name(mode, *replicas),
                );
            }
            _ => {}
        }
        l.entry(ANALYZED_AT.into())
            .or_insert_with(|| compact_time(generated_ms));
    }
    out
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

    #[test]
    fn values_are_valid_label_values() {
        let t = compact_time(1_763_726_400_000);
        assert_eq!(t, "20251121T120000Z");
        model::labels::check_value(ANALYZED_AT, &t).unwrap();
        let n = device_plugin_config_name("time_slicing", 4);
        assert_eq!(n, "gpulens-time-slicing-x4");
        model::labels::check_value(RECOMMENDED_DEVICE_PLUGIN_CONFIG, &n).unwrap();
    }
}
