//! Alert rules: which conditions fire, with what labels and annotations.
//!
//! Most conditions come from the newest stored analysis: a finding that is still going on at
//! the end of the analysed window is an active condition. Three come from the collector itself:
//! how far behind a node's data arrives (ingest lag), label changes that rolled back, and the
//! notices of open reclaim cases.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use analytics::{Analysis, FindingKind};
use serde::Deserialize;

use store::NodeRecord;
use store::label_actions::{ActionState, LabelActionRecord};

/// What a rule watches: a kind of finding (every one the analysis declares), or one of the
/// collector's own conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A finding of this kind still going on at the end of the analysed window.
    Finding(FindingKind),
    /// A node's newest data arrives more than `threshold` seconds (default 300) after it was
    /// sampled.
    IngestLag,
    /// A GPU Operator label change failed and was rolled back (or could not be).
    LabelRollback,
    /// A reclaim case is open: its owner is told what will happen and how to stop it.
    ReclaimNotice,
}

impl Kind {
    /// Every kind: each finding kind, then the collector's own.
    pub fn all() -> Vec<Kind> {
        FindingKind::ALL
            .into_iter()
            .map(Kind::Finding)
            .chain([Kind::IngestLag, Kind::LabelRollback, Kind::ReclaimNotice])
            .collect()
    }

    /// The word a rule file names the kind with.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Finding(k) => k.as_str(),
            Kind::IngestLag => "ingest_lag",
            Kind::LabelRollback => "label_rollback",
            Kind::ReclaimNotice => "reclaim_notice",
        }
    }

    fn finding(self) -> Option<FindingKind> {
        match self {
            Kind::Finding(k) => Some(k),
            Kind::IngestLag | Kind::LabelRollback | Kind::ReclaimNotice => None,
        }
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Kind, D::Error> {
        let word = String::deserialize(d)?;
        Kind::all()
            .into_iter()
            .find(|k| k.as_str() == word)
            .ok_or_else(|| {
                let known: Vec<&str> = Kind::all().into_iter().map(Kind::as_str).collect();
                serde::de::Error::custom(format!(
                    "unknown alert kind {word:?}; known kinds: {}",
                    known.join(", ")
                ))
            })
    }
}

/// One rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The `alertname` label.
    pub name: String,
    pub kind: Kind,
    /// How long the condition must hold before the alert fires (pending until then).
    #[serde(
        rename = "for",
        default,
        deserialize_with = "collector_shared::settings::duration"
    )]
    pub for_: Duration,
    /// `info`, `warning` or `critical`; unset: the finding's own severity.
    #[serde(default)]
    pub severity: Option<String>,
    /// Added to every alert of the rule.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Added to every alert of the rule; `{node}`, `{gpu}`, `{tenant}`, `{team}`, `{cluster}`,
    /// `{value}` and `{summary}` are replaced.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Idle hours (idle_allocation) or seconds of lag (ingest_lag).
    #[serde(default)]
    pub threshold: Option<f64>,
}

impl Rule {
    pub fn default_for(kind: Kind) -> Rule {
        let (name, for_, severity, description) = match kind {
            Kind::Finding(k) => {
                let d = k.alert();
                (d.name, 0, d.severity, d.description)
            }
            Kind::IngestLag => (
                "GpulensIngestLag",
                300,
                Some("warning"),
                "data from {node} arrives {value} s after it was sampled",
            ),
            Kind::LabelRollback => (
                "GpulensLabelRollback",
                0,
                None,
                "a GPU Operator change on {node} failed: {summary}",
            ),
            Kind::ReclaimNotice => (
                crate::reclaim::NOTICE_ALERTNAME,
                0,
                Some("warning"),
                "{summary}",
            ),
        };
        Rule {
            name: name.into(),
            kind,
            for_: Duration::from_secs(for_),
            severity: severity.map(str::to_owned),
            labels: BTreeMap::new(),
            annotations: BTreeMap::from([("description".into(), description.into())]),
            threshold: None,
        }
    }

    fn threshold_or(&self, default: f64) -> f64 {
        self.threshold.unwrap_or(default)
    }
}

/// A condition that holds now: the alert it makes, before its state is tracked.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// Index of the rule in the rule list.
    pub rule: usize,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub value: f64,
}

/// What the rules look at.
#[derive(Debug, Default)]
pub struct Facts<'a> {
    pub analysis: Option<&'a Analysis>,
    pub nodes: &'a [NodeRecord],
    /// Label actions that finished lately, newest first.
    pub label_actions: &'a [LabelActionRecord],
    pub now_ms: i64,
    /// Label failures count for this long after they finished.
    pub keep_ms: i64,
    /// Reclaim cases whose notice stands (noticed, awaiting approval, approved).
    pub reclaim_cases: &'a [store::reclaim_cases::CaseRecord],
    /// An Alertmanager's web UI, for a silence link per alert (`[alerts] silence_url`).
    pub silence_url: Option<&'a str>,
}

/// Whether a finding is a condition that holds now ([`Analysis::ongoing`]).
pub fn ongoing(a: &Analysis, f: &analytics::Finding) -> bool {
    a.ongoing(f)
}

/// Nodes not heard from in this long are the agent-silent rule's, not ingest lag's.
const RECENT_MS: i64 = 3_600_000;

struct Subject<'a> {
    cluster: &'a str,
    node: &'a str,
    gpu: Option<&'a str>,
    tenant: Option<&'a str>,
    /// The tenant's display name, for annotations (the label keeps the stable key).
    tenant_name: Option<&'a str>,
    team: Option<&'a str>,
    summary: &'a str,
}

impl<'a> Subject<'a> {
    /// A condition of a whole node: no GPU, tenant or team.
    fn node(cluster: &'a str, node: &'a str, summary: &'a str) -> Subject<'a> {
        Subject {
            cluster,
            node,
            gpu: None,
            tenant: None,
            tenant_name: None,
            team: None,
            summary,
        }
    }
}

fn condition(i: usize, rule: &Rule, severity: &str, s: &Subject, value: f64) -> Condition {
    let mut labels = BTreeMap::from([
        ("alertname".to_owned(), rule.name.clone()),
        ("severity".to_owned(), severity.to_owned()),
        ("cluster".to_owned(), s.cluster.to_owned()),
        ("node".to_owned(), s.node.to_owned()),
    ]);
    for (k, v) in [("gpu_uuid", s.gpu), ("tenant", s.tenant), ("team", s.team)] {
        if let Some(v) = v {
            labels.insert(k.into(), v.into());
        }
    }
    for (k, v) in &rule.labels {
        labels.insert(k.clone(), v.clone());
    }
    // The number as the dashboard shows it (web::format::num), so a description and the
    // finding's page read the same.
    let shown = if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        web::format::num(value)
    };
    let fill = |t: &str| {
        t.replace("{node}", s.node)
            .replace("{cluster}", s.cluster)
            .replace("{gpu}", s.gpu.unwrap_or("-"))
            .replace("{tenant}", s.tenant_name.or(s.tenant).unwrap_or("-"))
            .replace("{team}", s.team.unwrap_or("-"))
            .replace("{value}", &shown)
            .replace("{summary}", s.summary)
    };
    let mut annotations = BTreeMap::from([("summary".to_owned(), s.summary.to_owned())]);
    for (k, v) in &rule.annotations {
        annotations.insert(k.clone(), fill(v));
    }
    Condition {
        rule: i,
        labels,
        annotations,
        value,
    }
}

/// Where a finding's alert leads: the finding's page, the plan step that answers it (from
/// `answered`: finding id → step id, [`answering_steps`]), and when the condition began
/// (annotations `finding`, `step`, `began`; paths under the dashboard, made whole with
/// `external_url` in notifications).
fn leads_to(c: &mut Condition, answered: &HashMap<&str, &str>, f: &analytics::Finding) {
    c.annotations.insert(
        "finding".into(),
        format!("/findings/{}", web::format::enc(&f.id)),
    );
    c.annotations
        .insert("began".into(), model::time::rfc3339(f.from_ms));
    if let Some(step) = answered.get(f.id.as_str()) {
        c.annotations.insert(
            "step".into(),
            format!("/recommendations/{}", web::format::enc(step)),
        );
    }
}

/// The step answering each finding (the first that names it): read once per evaluation, not
/// once per alert.
fn answering_steps(a: &Analysis) -> HashMap<&str, &str> {
    let mut out = HashMap::new();
    for r in &a.recommendations {
        for f in &r.findings {
            out.entry(f.as_str()).or_insert(r.id.as_str());
        }
    }
    out
}

/// A link that opens a new silence in the Alertmanager UI at `base` matching these labels
/// exactly (Alertmanager's `#/silences/new?filter={…}`).
pub fn silence_link(base: &str, labels: &BTreeMap<String, String>) -> String {
    let matchers: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    let filter = format!("{{{}}}", matchers.join(","));
    format!(
        "{}/#/silences/new?filter={}",
        base.trim_end_matches('/'),
        web::format::enc(&filter)
    )
}

/// Every condition that holds now, by rule.
pub fn evaluate(rules: &[Rule], facts: &Facts) -> Vec<Condition> {
    let mut out = evaluate_rules(rules, facts);
    if let Some(base) = facts.silence_url {
        for c in &mut out {
            let link = silence_link(base, &c.labels);
            c.annotations.insert("silence".into(), link);
        }
    }
    out
}

fn evaluate_rules(rules: &[Rule], facts: &Facts) -> Vec<Condition> {
    let mut out = Vec::new();
    let answered = facts.analysis.map(answering_steps).unwrap_or_default();
    for (i, rule) in rules.iter().enumerate() {
        if let Some(kind) = rule.kind.finding() {
            let Some(a) = facts.analysis else { continue };
            for f in a.findings.iter().filter(|f| f.kind == kind) {
                if !ongoing(a, f) {
                    continue;
                }
                let (value, _) = f.headline();
                if rule.kind == Kind::Finding(FindingKind::IdleAllocation)
                    && value < rule.threshold_or(4.0)
                {
                    continue;
                }
                let severity = rule
                    .severity
                    .clone()
                    .unwrap_or_else(|| f.severity.as_str().to_owned());
                // Waiting demand has none: its alert names cluster and team (docs/alerts.md).
                let tenant = f.subject_tenant();
                let s = Subject {
                    cluster: &f.cluster,
                    node: &f.node,
                    gpu: f.gpu.as_deref(),
                    tenant: tenant.map(String::as_str),
                    tenant_name: tenant
                        .and_then(|k| a.tenant_names.get(k))
                        .map(String::as_str),
                    team: f.team.as_deref(),
                    summary: &f.summary,
                };
                let mut c = condition(i, rule, &severity, &s, value);
                if kind == FindingKind::Interference
                    && let Some(aggressor) = f.tenants.get(1)
                {
                    c.labels.insert("aggressor".into(), aggressor.clone());
                }
                leads_to(&mut c, &answered, f);
                out.push(c);
            }
            continue;
        }
        match rule.kind {
            Kind::IngestLag => {
                let limit = rule.threshold_or(300.0);
                for n in facts.nodes {
                    let Some(sample) = n.last_sample_ms else {
                        continue;
                    };
                    if facts.now_ms - n.last_seen_ms > RECENT_MS {
                        continue;
                    }
                    let lag = (n.last_seen_ms - sample) as f64 / 1000.0;
                    if lag > limit {
                        let summary = format!(
                            "the newest data from {} was {lag:.0} s old when it arrived",
                            n.node
                        );
                        let s = Subject::node(&n.cluster, &n.node, &summary);
                        let severity = rule.severity.as_deref().unwrap_or("warning");
                        out.push(condition(i, rule, severity, &s, lag.round()));
                    }
                }
            }
            Kind::LabelRollback => {
                let mut seen = std::collections::BTreeSet::new();
                for a in facts.label_actions {
                    let Some(done) = a.finished_ms else { continue };
                    // The newest finished action of each node and label decides.
                    if !seen.insert((a.node.as_str(), a.label.as_str()))
                        || facts.now_ms - done > facts.keep_ms
                        || !matches!(a.state, ActionState::RolledBack | ActionState::Failed)
                    {
                        continue;
                    }
                    let summary = format!(
                        "{}={} {} (action {}): {}",
                        a.label,
                        a.value,
                        a.state.as_str().replace('_', " "),
                        a.id,
                        a.outcome.as_deref().unwrap_or("no reason recorded")
                    );
                    let s = Subject::node("", &a.node, &summary);
                    let severity =
                        rule.severity
                            .as_deref()
                            .unwrap_or(if a.state == ActionState::Failed {
                                "critical"
                            } else {
                                "warning"
                            });
                    let mut c = condition(i, rule, severity, &s, 1.0);
                    c.labels.remove("cluster");
                    c.labels.insert("label".into(), a.label.clone());
                    c.labels.insert("action".into(), a.id.to_string());
                    out.push(c);
                }
            }
            Kind::ReclaimNotice => out.extend(reclaim_notices(i, rule, facts.reclaim_cases)),
            _ => {}
        }
    }
    out
}

/// The notices of open reclaim cases, one alert each, with the case's labels.
fn reclaim_notices(
    i: usize,
    rule: &Rule,
    cases: &[store::reclaim_cases::CaseRecord],
) -> Vec<Condition> {
    cases
        .iter()
        .map(|case| {
            let summary = crate::reclaim::notice_summary(case);
            let k = &case.case;
            let s = Subject {
                cluster: &k.cluster,
                node: &k.node,
                gpu: Some(&k.gpu),
                tenant: Some(&k.tenant),
                tenant_name: Some(&k.tenant_name),
                team: Some(&k.team),
                summary: &summary,
            };
            let severity = rule.severity.as_deref().unwrap_or("warning");
            let mut c = condition(i, rule, severity, &s, k.idle_hours.round());
            for (key, v) in crate::reclaim::notice_labels(case.id, &case.case) {
                c.labels.entry(key).or_insert(v);
            }
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_declared_finding_kind_has_a_default_rule_with_its_own_name() {
        let rules: Vec<Rule> = Kind::all().into_iter().map(Rule::default_for).collect();
        for k in FindingKind::ALL {
            assert!(
                rules.iter().any(|r| r.kind == Kind::Finding(k)),
                "{} has no alert rule",
                k.as_str()
            );
        }
        let names: std::collections::BTreeSet<&str> =
            rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names.len(), rules.len(), "two rules share an alertname");
        let kind: Kind = serde_json::from_str("\"zombie_process\"").unwrap();
        assert_eq!(kind, Kind::Finding(FindingKind::ZombieProcess));
        let err = serde_json::from_str::<Kind>("\"zombie\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("known kinds: idle_allocation"), "{err}");
    }
}
