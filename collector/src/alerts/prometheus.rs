//! The collector's alert rules as Prometheus alerting rules: `gpulens alert-rules` prints them
//! as a rule file or as a Prometheus Operator `PrometheusRule`, from the same [`Rule`] list the
//! collector evaluates itself (defaults plus `[alerts]` rules), so the two never drift.
//!
//! What Prometheus can see differs in one way: the series the rules read carry no tenant
//! (docs/metrics.md),
//! so a Prometheus alert names the cluster, node, GPU and severity, and the finding's tenant and
//! team are on the gpulens dashboard and in the collector's own notifications. Each finding kind
//! reads `gpulens_finding_headline` (one series per ongoing finding's GPU or node, set from the
//! same `ongoing` test the collector's rules use); ingest lag reads the ingest lag histogram
//! (fleet-wide, not per node); label rollbacks read the label action counter.

use std::collections::BTreeMap;

use analytics::FindingKind;
use serde::Serialize;

use super::rules::{Kind, Rule};

/// One Prometheus alerting rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertingRule {
    pub alert: String,
    pub expr: String,
    #[serde(rename = "for", skip_serializing_if = "Option::is_none")]
    pub for_: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// One Prometheus recording rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordingRule {
    pub record: String,
    pub expr: String,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum AnyRule {
    Alerting(AlertingRule),
    Recording(RecordingRule),
}

#[derive(Debug, Serialize)]
struct Group {
    name: &'static str,
    rules: Vec<AnyRule>,
}

#[derive(Debug, Serialize)]
struct RuleFile {
    groups: Vec<Group>,
}

/// The alerting rules' group.
pub const GROUP: &str = "gpulens";
/// The per-tenant recording rules' group (with `[metrics] tenant_series`).
pub const TENANT_GROUP: &str = "gpulens-tenants";

/// A duration in Prometheus' notation (`5m`, `90s`, `2h`).
fn duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// A label matcher value: the rule kinds are fixed words, but a threshold or name from a
/// configuration file is still quoted as PromQL wants.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The PromQL that holds while the rule's condition does.
fn expr(rule: &Rule) -> String {
    let finding = |kind: &str| format!("gpulens_finding_headline{{kind={}}}", quoted(kind));
    match rule.kind {
        Kind::Finding(FindingKind::IdleAllocation) => format!(
            "{} >= {}",
            finding("idle_allocation"),
            rule.threshold.unwrap_or(4.0)
        ),
        Kind::Finding(k) => finding(k.as_str()),
        Kind::IngestLag => format!(
            "histogram_quantile(0.99, sum by (le) (rate(gpulens_ingest_lag_seconds_bucket[10m]))) > {}",
            rule.threshold.unwrap_or(300.0)
        ),
        Kind::LabelRollback => "sum by (outcome) (increase(gpulens_label_action_runs_total{outcome=~\"rolled_back|failed\"}[1h])) > 0".to_owned(),
        Kind::ReclaimNotice => "sum by (state) (gpulens_reclaim_cases_open{state=~\"noticed|awaiting_approval|approved\"}) > 0".to_owned(),
    }
}

/// The collector's annotation template in Prometheus' template language: labels Prometheus has
/// become `{{ $labels.x }}`, the value `{{ $value }}`, and what only the collector knows (the
/// tenant, its team, the finding's summary) is named in words.
fn template(t: &str, kind: Kind) -> String {
    let value = match kind {
        // A quantile of seconds: whole seconds read best.
        Kind::IngestLag => "{{ $value | printf \"%.0f\" }}",
        _ => "{{ $value }}",
    };
    let node = match kind {
        Kind::IngestLag => "the fleet",
        Kind::LabelRollback | Kind::ReclaimNotice => "a node",
        Kind::Finding(FindingKind::WaitingDemand) => "{{ $labels.cluster }}",
        _ => "{{ $labels.node }}",
    };
    // Only the collector has the finding's summary; Prometheus says where to read it.
    let summary = match kind {
        Kind::Finding(FindingKind::OutcomeWorse) | Kind::LabelRollback => {
            "see gpulens' label actions"
        }
        Kind::ReclaimNotice => {
            "reclaim cases {{ $labels.state }}: {{ $value }}; see /api/v1/reclaim"
        }
        _ => "see the finding on gpulens' dashboard",
    };
    t.replace("{node}", node)
        .replace("{cluster}", "{{ $labels.cluster }}")
        .replace("{gpu}", "{{ $labels.gpu_uuid }}")
        .replace("{tenant}", "a tenant")
        .replace("{team}", "its team")
        .replace("{value}", value)
        .replace("{summary}", summary)
}

impl Rule {
    /// This rule as a Prometheus alerting rule.
    pub fn prometheus(&self) -> AlertingRule {
        let mut labels = self.labels.clone();
        if let Some(s) = &self.severity {
            labels.insert("severity".into(), s.clone());
        } else if matches!(self.kind, Kind::IngestLag | Kind::LabelRollback) {
            // The collector's own default for these (the finding kinds carry theirs as a label).
            labels.insert("severity".into(), "warning".into());
        }
        let mut annotations: BTreeMap<String, String> = self
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), template(v, self.kind)))
            .collect();
        annotations
            .entry("summary".into())
            .or_insert_with(|| match self.kind {
                Kind::IngestLag => "agents' data reaches the gpulens collector late: see \
                 gpulens_ingest_lag_seconds and the collector's /healthz/tasks"
                    .to_owned(),
                Kind::LabelRollback => "a GPU Operator change failed: the gpulens dashboard's \
                 label actions page has the failed step and the rollback"
                    .to_owned(),
                Kind::ReclaimNotice => "idle holdings a reclaim policy took up: gpulens notified \
                 their owners; /api/v1/reclaim lists each case, its grace and what will be done"
                    .to_owned(),
                Kind::Finding(FindingKind::WaitingDemand) => "{{ $labels.cluster }}: work waits \
                 for GPUs while GPUs of its pool are held idle; the gpulens dashboard's findings \
                 page names the team, the pool and the idle holders"
                    .to_owned(),
                _ => "{{ $labels.node }}{{ with $labels.gpu_uuid }} GPU {{ . }}{{ end }}: the gpulens \
                 dashboard's findings page names the tenant and shows the evidence"
                    .to_owned(),
            });
        AlertingRule {
            alert: self.name.clone(),
            expr: expr(self),
            for_: (!self.for_.is_zero()).then(|| duration(self.for_)),
            labels,
            annotations,
        }
    }
}

/// Names Prometheus would refuse, named: an alert name must be a metric name and a label key a
/// label name (the collector's own rule names also allow `-`).
pub fn check(rules: &[Rule]) -> anyhow::Result<()> {
    let name_ok = |s: &str, colon: bool| {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
    };
    for r in rules {
        if !name_ok(&r.name, true) {
            anyhow::bail!(
                "alert rule {:?} is not a valid Prometheus alert name (letters, digits, _ and :, \
                 not starting with a digit); rename it in [[alerts.rules]]",
                r.name
            );
        }
        for k in r.labels.keys() {
            if !name_ok(k, false) {
                anyhow::bail!(
                    "alert rule {:?}: label {k:?} is not a valid Prometheus label name",
                    r.name
                );
            }
        }
    }
    Ok(())
}

/// The per-tenant series with their own `namespace`, `pod` and `container` whichever way
/// Prometheus stored them: as sent (`honorLabels: true`), or renamed `exported_*` because a
/// ServiceMonitor's target labels took those names (the default of the Prometheus Operator).
fn tenant_pods(metric: &str) -> String {
    let mut expr = format!("{metric}{{tenant_kind=\"pod\"}}");
    for label in ["namespace", "pod", "container"] {
        expr =
            format!("label_replace({expr}, \"{label}\", \"$1\", \"exported_{label}\", \"(.+)\")");
    }
    expr
}

/// Recording rules over the per-tenant series (`[metrics] tenant_series`): GPU shares per
/// namespace, and per pod with the pod's labels from kube-state-metrics (`kube_pod_labels`,
/// joined on namespace and pod) named in `pod_labels`. They read the tenant's labels whether
/// or not the scrape honoured them (`tenant_pods`).
pub fn tenant_recording_rules(pod_labels: &[String]) -> Vec<RecordingRule> {
    let mut out = Vec::new();
    for (what, metric) in [
        ("allocated", "gpulens_tenant_gpu_allocated_ratio"),
        ("effective", "gpulens_tenant_gpu_effective_ratio"),
    ] {
        let pods = tenant_pods(metric);
        out.push(RecordingRule {
            record: format!("namespace:gpulens_gpu_{what}:sum"),
            expr: format!("sum by (cluster, namespace) ({pods})"),
        });
        let labels = pod_labels.join(", ");
        out.push(RecordingRule {
            record: format!("pod:gpulens_gpu_{what}:with_pod_labels"),
            expr: format!(
                "sum by (cluster, namespace, pod) ({pods}) \
                 * on (namespace, pod) group_left({labels}) \
                 max by (namespace, pod, {labels}) (kube_pod_labels)"
            ),
        });
    }
    out
}

/// The per-GPU recording rules' group (`[metrics] dcgm_labels`).
pub const DCGM_LABELS_GROUP: &str = "gpulens-dcgm-labels";

/// The per-GPU series under dcgm-exporter's label names as well (`UUID`, `Hostname`,
/// `modelName`), recorded as `gpu:<metric>:dcgm_labels`, so that they join dcgm-exporter's
/// series with `on (UUID)` (or `on (Hostname)`) and no `label_replace` of the user's own.
pub fn dcgm_label_rules() -> Vec<RecordingRule> {
    [
        "gpulens_fleet_gpu_utilization_ratio",
        "gpulens_fleet_gpu_sm_active_ratio",
        "gpulens_fleet_gpu_allocated_ratio",
        "gpulens_fleet_gpu_memory_used_bytes",
        "gpulens_fleet_gpu_memory_total_bytes",
    ]
    .into_iter()
    .map(|metric| {
        let mut expr = metric.to_owned();
        for (to, from) in [
            ("UUID", "gpu_uuid"),
            ("Hostname", "node"),
            ("modelName", "gpu_model"),
        ] {
            expr = format!("label_replace({expr}, \"{to}\", \"$1\", \"{from}\", \"(.+)\")");
        }
        RecordingRule {
            record: format!("gpu:{metric}:dcgm_labels"),
            expr,
        }
    })
    .collect()
}

/// Which groups a rule file holds.
#[derive(Debug, Clone, Copy)]
pub struct Selection<'a> {
    /// The alerting rules.
    pub alerts: bool,
    /// The tenant recording rules, with these pod labels joined.
    pub tenants: Option<&'a [String]>,
    /// The dcgm-exporter label recording rules.
    pub dcgm_labels: bool,
}

fn groups(rules: &[Rule], which: Selection) -> RuleFile {
    let mut groups = Vec::new();
    if which.alerts {
        groups.push(Group {
            name: GROUP,
            rules: rules
                .iter()
                .map(|r| AnyRule::Alerting(r.prometheus()))
                .collect(),
        });
    }
    if which.dcgm_labels {
        groups.push(Group {
            name: DCGM_LABELS_GROUP,
            rules: dcgm_label_rules()
                .into_iter()
                .map(AnyRule::Recording)
                .collect(),
        });
    }
    if let Some(pod_labels) = which.tenants {
        groups.push(Group {
            name: TENANT_GROUP,
            rules: tenant_recording_rules(pod_labels)
                .into_iter()
                .map(AnyRule::Recording)
                .collect(),
        });
    }
    RuleFile { groups }
}

/// A Prometheus rule file (`rule_files:` in prometheus.yml; `promtool check rules` reads it).
pub fn rule_file(rules: &[Rule], which: Selection) -> String {
    serde_yaml::to_string(&groups(rules, which)).expect("rule file serializes")
}

/// A Prometheus Operator `PrometheusRule` object holding the same groups.
pub fn prometheus_rule(rules: &[Rule], which: Selection, namespace: &str) -> String {
    #[derive(Serialize)]
    struct Meta<'a> {
        name: &'static str,
        namespace: &'a str,
        labels: BTreeMap<&'static str, &'static str>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Object<'a> {
        api_version: &'static str,
        kind: &'static str,
        metadata: Meta<'a>,
        spec: RuleFile,
    }
    let object = Object {
        api_version: "monitoring.coreos.com/v1",
        kind: "PrometheusRule",
        metadata: Meta {
            name: "gpulens",
            namespace,
            labels: BTreeMap::from([("app.kubernetes.io/part-of", "gpulens")]),
        },
        spec: groups(rules, which),
    };
    serde_yaml::to_string(&object).expect("PrometheusRule serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_rule_translates_with_its_threshold_duration_and_severity() {
        let rules: Vec<Rule> = Kind::all().into_iter().map(Rule::default_for).collect();
        let p: Vec<AlertingRule> = rules.iter().map(Rule::prometheus).collect();
        let idle = p.iter().find(|r| r.alert == "GpuIdleAllocation").unwrap();
        assert_eq!(
            idle.expr,
            "gpulens_finding_headline{kind=\"idle_allocation\"} >= 4"
        );
        assert_eq!(
            idle.annotations["description"],
            "a tenant holds a GPU on {{ $labels.node }} it has not used for {{ $value }} hours"
        );
        assert!(
            !idle.labels.contains_key("severity"),
            "the finding's own severity label passes through"
        );
        let lag = p.iter().find(|r| r.alert == "GpulensIngestLag").unwrap();
        assert_eq!(lag.for_.as_deref(), Some("5m"));
        assert!(lag.expr.ends_with("> 300"));
        let hw = p.iter().find(|r| r.alert == "GpuHardwareErrors").unwrap();
        assert_eq!(hw.labels["severity"], "critical");
        for r in &p {
            assert!(
                !r.annotations
                    .values()
                    .any(|a| a.contains('{') && !a.contains("{{")),
                "{}: a collector placeholder left untranslated",
                r.alert
            );
        }
    }

    #[test]
    fn a_configured_rule_keeps_its_name_labels_and_threshold() {
        let mut r = Rule::default_for(Kind::Finding(FindingKind::IdleAllocation));
        r.name = "TeamIdle".into();
        r.threshold = Some(8.5);
        r.for_ = std::time::Duration::from_secs(90);
        r.labels.insert("team_channel".into(), "#gpu".into());
        let p = r.prometheus();
        assert_eq!(p.alert, "TeamIdle");
        assert!(p.expr.ends_with(">= 8.5"));
        assert_eq!(p.for_.as_deref(), Some("90s"));
        assert_eq!(p.labels["team_channel"], "#gpu");
    }
}
