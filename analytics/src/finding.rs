//! What a finding is: its kind, severity, subject, the numbers that back it and the series that
//! show it (docs/analytics.md defines each kind), with ids stable across analyses.

use crate::measure::{Measure, Measures};
use serde::{Deserialize, Serialize};

model::closed_set! {
    /// What a finding is about (docs/analytics.md defines each kind).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    pub enum FindingKind {
        IdleAllocation = "idle_allocation",
        Underutilized = "underutilized",
        ZombieProcess = "zombie_process",
        MemoryPressure = "memory_pressure",
        Interference = "interference",
        Throttling = "throttling",
        Hardware = "hardware",
        AgentSilent = "agent_silent",
        /// An applied step measured worse than replay predicted (the outcome check).
        OutcomeWorse = "outcome_worse",
        /// Work waited for GPUs while GPUs of its pool were held idle or free on other nodes.
        WaitingDemand = "waiting_demand",
    }
}

impl FindingKind {
    /// How this kind alerts unless a rule says otherwise: the `alertname`, the severity (`None`:
    /// each finding's own) and the description, whose `{node}`, `{tenant}`, `{value}` …
    /// the alert fills in. Alert rules, Prometheus rules and the rule-file generator all read
    /// it, so a new kind alerts with no other change.
    pub fn alert(self) -> AlertDefaults {
        let (name, severity, description) = match self {
            FindingKind::IdleAllocation => (
                "GpuIdleAllocation",
                None,
                "{tenant} holds a GPU on {node} it has not used for {value} hours",
            ),
            FindingKind::Underutilized => (
                "GpuUnderutilized",
                None,
                "{tenant} uses little of the GPU it holds on {node}: {value} GPU-hours wasted",
            ),
            FindingKind::ZombieProcess => (
                "GpuZombieProcess",
                Some("warning"),
                "a process no tenant owns holds GPU memory on {node}",
            ),
            FindingKind::Interference => (
                "GpuInterference",
                None,
                "a tenant sharing a GPU on {node} slows {tenant} down by {value} %",
            ),
            FindingKind::MemoryPressure => (
                "GpuMemoryPressure",
                None,
                "GPU memory on {node} is nearly full",
            ),
            FindingKind::Throttling => (
                "GpuThrottling",
                None,
                "a GPU on {node} is throttled (thermal or power)",
            ),
            FindingKind::Hardware => (
                "GpuHardwareErrors",
                Some("critical"),
                "a GPU on {node} reports XID or ECC errors: {value}",
            ),
            FindingKind::AgentSilent => (
                "GpulensAgentSilent",
                Some("critical"),
                "no data from the gpulens agent on {node}",
            ),
            FindingKind::OutcomeWorse => (
                "GpulensOutcomeWorse",
                Some("warning"),
                "a GPU Operator change on {node} turned out worse than predicted: {summary}",
            ),
            FindingKind::WaitingDemand => (
                "GpuWorkWaitingWhileIdle",
                None,
                "work waited {value} GPU-hours for GPUs: {summary}",
            ),
        };
        AlertDefaults {
            name,
            severity,
            description,
        }
    }
}

/// A finding kind's default alert ([`FindingKind::alert`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertDefaults {
    pub name: &'static str,
    pub severity: Option<&'static str>,
    pub description: &'static str,
}

model::closed_set! {
    /// How severe a finding is, least first.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    pub enum Severity {
        Info = "info",
        Warning = "warning",
        Critical = "critical",
    }
}

/// A series a UI can chart as evidence: `metric` of `entity` (the `/api/v1/series` names)
/// over a time range. What it shows, not where to fetch it: the API builds the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub label: String,
    pub metric: String,
    /// `gpu:UUID`, `tenant:KEY`, `node:NAME`.
    pub entity: String,
    /// The tenant's cluster, for tenant series: the same key (`host/1001`) names another
    /// cluster's tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    pub from_ms: i64,
    pub to_ms: i64,
}

impl Evidence {
    pub fn new(
        label: impl Into<String>,
        metric: &str,
        entity: String,
        from_ms: i64,
        to_ms: i64,
    ) -> Evidence {
        Evidence {
            label: label.into(),
            metric: metric.into(),
            entity,
            cluster: None,
            from_ms,
            to_ms,
        }
    }

    /// A tenant's series, qualified by its cluster.
    pub fn tenant(
        label: impl Into<String>,
        metric: &str,
        cluster: &str,
        key: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Evidence {
        Evidence {
            cluster: Some(cluster.into()),
            ..Evidence::new(label, metric, format!("tenant:{key}"), from_ms, to_ms)
        }
    }
}

/// One finding.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finding {
    /// Stable across runs for the same kind, subject and window start.
    pub id: String,
    pub kind: FindingKind,
    pub severity: Severity,
    pub cluster: String,
    pub node: String,
    pub gpu: Option<String>,
    /// Tenant keys; for interference the victim first, then the aggressor.
    pub tenants: Vec<String>,
    pub team: Option<String>,
    /// waiting_demand: the GPU pool the work waited for (a product name, or "any GPU").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    pub from_ms: i64,
    pub to_ms: i64,
    /// The signal the finding rests on.
    pub signal: String,
    /// Why an underutilized holding cannot simply shrink, and what it could share instead:
    /// `fits_smaller`, `memory_bound`, `compute_bound` or `no_data` (docs/analytics.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub summary: String,
    /// Numbers behind the finding, by name.
    #[serde(deserialize_with = "crate::measure::known")]
    pub metrics: Measures,
    pub evidence: Vec<Evidence>,
    /// waiting_demand: hour by hour, what waited and what of its pool was held idle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub demand_hours: Vec<DemandHour>,
}

/// One hour of a waiting_demand finding, as hour means in GPUs: the GPUs the team's work
/// waited for, and the GPUs of its pool held idle meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DemandHour {
    pub hour_ms: i64,
    pub waiting_gpus: f64,
    pub idle_gpus: f64,
}

/// A number rounded to tenths: how a finding's headline is reported, so every place that
/// shows it (alert value, finding page) rounds it once, the same way.
pub fn tenths(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

impl Finding {
    /// The tenant the finding is about: its first. None for waiting demand, which is about a
    /// team's waiting work (no tenant yet); its tenants are the idle holders it names.
    pub fn subject_tenant(&self) -> Option<&String> {
        self.tenants
            .first()
            .filter(|_| self.kind != FindingKind::WaitingDemand)
    }

    /// The one number that says how big the finding is, with its unit: what an alert's
    /// `value` carries and what pages quote, so both say the same. Idle: the hours idle in
    /// runs; underutilized: the GPU-hours wasted; interference: the victim's slowdown in
    /// percent; hardware: the error events; waiting demand: the GPU-hours waited; otherwise the hours the finding spans.
    pub fn headline(&self) -> (f64, &'static str) {
        let m = |k: Measure| self.metrics.get(&k).copied();
        let span = (self.to_ms - self.from_ms) as f64 / 3_600_000.0;
        let (v, unit) = match self.kind {
            FindingKind::IdleAllocation => (m(Measure::IdleHoursInRuns).unwrap_or(span), "h"),
            FindingKind::Underutilized => (m(Measure::WastedGpuHours).unwrap_or(span), "GPU-h"),
            FindingKind::WaitingDemand => (m(Measure::WaitingGpuHours).unwrap_or(span), "GPU-h"),
            FindingKind::Interference => (m(Measure::RateDrop).map_or(span, |r| r * 100.0), "%"),
            FindingKind::Hardware => (
                m(Measure::XidErrors).unwrap_or(0.0)
                    + m(Measure::EccUncorrected).unwrap_or(0.0)
                    + m(Measure::RetiredPages).unwrap_or(0.0)
                    + m(Measure::RemappedRows).unwrap_or(0.0),
                "errors",
            ),
            _ => (span, "h"),
        };
        (tenths(v), unit)
    }
}

pub fn finding_id(kind: FindingKind, subject: &str, from_ms: i64) -> String {
    stable_id(kind.as_str(), &[subject.as_bytes(), &from_ms.to_le_bytes()])
}

/// `<kind>-<hash>`: the same for the same kind and parts in every run. FNV-1a: short, stable,
/// no dependency.
pub fn stable_id(kind: &str, parts: &[&[u8]]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in kind
        .as_bytes()
        .iter()
        .chain(parts.iter().flat_map(|p| p.iter()))
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{kind}-{h:016x}")
}

/// An interference incident's contended time, in one unit wherever it is shown (the finding,
/// its separation step, its alert and the weekly report's "Contended hours").
pub fn contended_hours(h: f64) -> String {
    if h >= 10.0 {
        format!("{h:.0} contended hours")
    } else {
        format!("{h:.1} contended hours")
    }
}

pub fn hours(s: f64) -> String {
    if s >= 86_400.0 * 2.0 {
        format!("{:.1} days", s / 86_400.0)
    } else if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.0} min", s / 60.0)
    }
}

pub const GIB: f64 = (1u64 << 30) as f64;

pub fn gib(bytes: f64) -> f64 {
    bytes / GIB
}
