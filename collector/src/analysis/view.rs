//! The API's view of an analysis: what `/api/v1/findings` and `/api/v1/recommendations` answer,
//! converted from the analytics' domain types here and nowhere else. A field renamed in the
//! analytics is a compile error in this file, not a silent change of the API; the links the
//! API offers (an evidence series' `/api/v1/series` request) are built here, from what the
//! evidence shows.
//!
//! The nested value types (a proposal, its moves and replay; the plan's, funnel's and
//! outcomes' rows) are served in their serde form, which the stored analysis' golden files
//! (`collector-shared/tests/data/stored-analysis/`) hold still: renaming one fails that test.

use analytics::{Evidence, Finding, FindingKind, RecKind, Recommendation, Severity};
use analytics::{Proposal, Replay};
use serde::Serialize;
use web::format::enc;

/// A series that shows a finding, with the request that returns it.
#[derive(Debug, Clone, Serialize)]
pub struct EvidenceView {
    pub label: String,
    pub metric: String,
    pub entity: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    pub from_ms: i64,
    pub to_ms: i64,
    /// The `/api/v1/series` request that returns the series.
    pub href: String,
}

impl From<&Evidence> for EvidenceView {
    fn from(e: &Evidence) -> EvidenceView {
        EvidenceView {
            href: series_href(e),
            label: e.label.clone(),
            metric: e.metric.clone(),
            entity: e.entity.clone(),
            cluster: e.cluster.clone(),
            from_ms: e.from_ms,
            to_ms: e.to_ms,
        }
    }
}

/// The `/api/v1/series` request for an evidence series: its metric, entity (and the tenant's
/// cluster) over its range, every value percent-encoded.
pub fn series_href(e: &Evidence) -> String {
    let mut href = format!(
        "/api/v1/series?metric={}&entity={}&from={}&to={}",
        enc(&e.metric),
        enc(&e.entity),
        e.from_ms,
        e.to_ms
    );
    if let Some(c) = &e.cluster {
        href.push_str("&cluster=");
        href.push_str(&enc(c));
    }
    href
}

fn evidence(list: &[Evidence]) -> Vec<EvidenceView> {
    list.iter().map(EvidenceView::from).collect()
}

/// One finding as the API serves it (docs/analytics.md defines each kind).
#[derive(Debug, Clone, Serialize)]
pub struct FindingView {
    pub id: String,
    pub kind: FindingKind,
    pub severity: Severity,
    pub cluster: String,
    pub node: String,
    pub gpu: Option<String>,
    pub tenants: Vec<String>,
    pub team: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    pub from_ms: i64,
    pub to_ms: i64,
    pub signal: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub summary: String,
    pub metrics: analytics::Measures,
    pub evidence: Vec<EvidenceView>,
}

impl From<&Finding> for FindingView {
    fn from(f: &Finding) -> FindingView {
        FindingView {
            id: f.id.clone(),
            kind: f.kind,
            severity: f.severity,
            cluster: f.cluster.clone(),
            node: f.node.clone(),
            gpu: f.gpu.clone(),
            tenants: f.tenants.clone(),
            team: f.team.clone(),
            pool: f.pool.clone(),
            from_ms: f.from_ms,
            to_ms: f.to_ms,
            signal: f.signal.clone(),
            reason: f.reason.clone(),
            summary: f.summary.clone(),
            metrics: f.metrics.clone(),
            evidence: evidence(&f.evidence),
        }
    }
}

/// One step of the plan as the API serves it.
#[derive(Debug, Clone, Serialize)]
pub struct RecommendationView {
    pub id: String,
    pub kind: RecKind,
    pub cluster: String,
    pub node: String,
    pub gpus: Vec<String>,
    pub tenants: Vec<String>,
    pub team: Option<String>,
    pub summary: String,
    pub confidence: f64,
    pub findings: Vec<String>,
    pub proposal: Proposal,
    pub replay: Replay,
    pub evidence: Vec<EvidenceView>,
    pub requires: Vec<String>,
    /// Waiting work the step serves.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub serves: Vec<analytics::recommend::Served>,
    /// What carrying it out interrupts, and each move's pod-spec change.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interrupts: Vec<analytics::disrupts::Interrupted>,
    /// Its twin's result on the window's most recent hours, which the plan it came from did
    /// not see (docs/analytics.md, "Held-out replay").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_out: Option<analytics::held_out::HeldOut>,
    /// Whether its tenants' memory trends outgrow it in the days ahead (docs/analytics.md,
    /// "The days ahead").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ahead: Option<analytics::ahead::Ahead>,
}

impl From<&Recommendation> for RecommendationView {
    fn from(r: &Recommendation) -> RecommendationView {
        RecommendationView {
            id: r.id.clone(),
            kind: r.kind,
            cluster: r.cluster.clone(),
            node: r.node.clone(),
            gpus: r.gpus.clone(),
            tenants: r.tenants.clone(),
            team: r.team.clone(),
            summary: r.summary.clone(),
            confidence: r.confidence,
            findings: r.findings.clone(),
            proposal: r.proposal.clone(),
            replay: r.replay.clone(),
            evidence: evidence(&r.evidence),
            requires: r.requires.clone(),
            serves: r.serves.clone(),
            held_out: r.held_out.clone(),
            ahead: r.ahead.clone(),
            interrupts: r.interrupts.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_evidence_link_names_the_series_and_escapes_every_value() {
        let e = Evidence::tenant("victim", "sm_util", "eu west&1", "pod:ns/a b", 10, 20);
        assert_eq!(
            series_href(&e),
            "/api/v1/series?metric=sm_util&entity=tenant%3Apod%3Ans%2Fa%20b&from=10&to=20&cluster=eu%20west%261"
        );
        let g = Evidence::new("GPU utilization", "gpu_util", "gpu:GPU-1".into(), 1, 2);
        assert_eq!(
            series_href(&g),
            "/api/v1/series?metric=gpu_util&entity=gpu%3AGPU-1&from=1&to=2"
        );
    }
}
