//! gpulens analytics: from rollups to the utilization funnel, findings with evidence, and
//! sharing recommendations checked by replaying recorded demand. No IO: the collector reads
//! its store into an [`Input`] and serves the [`Analysis`]. This is the only crate that
//! depends on polars (the funnel's group-bys).
//!
//! Every definition, threshold and formula is in docs/analytics.md.

pub mod ahead;
pub mod carbon;
pub mod config;
pub mod disrupts;
pub mod energy;
pub mod finding;
pub mod findings;
pub mod focus;
pub mod forecast;
pub mod freed;
pub mod funnel;
pub mod held_out;
pub mod holdings;
pub mod input;
pub mod interference;
pub mod measure;
pub mod mechanism;
pub mod merge;
pub mod mig;
pub mod need;
pub mod outcome;
pub mod parts;
pub mod plan;
pub mod prices;
pub mod recommend;
pub mod recommendation;
pub mod replay;
pub mod requires;
pub mod steps;
pub mod underutilized;
pub mod waiting;

use model::inventory::Sharing;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use config::Config;
pub use findings::{DemandHour, Evidence, Finding, FindingKind, Severity};
pub use funnel::{Funnel, FunnelRow};
pub use input::{Input, PairHour};
pub use interference::{MinuteRange, minute_ranges, pair_thresholds};
pub use measure::{Measure, Measures};
pub use merge::merge;
pub use outcome::{Outcome, Verdict};
pub use plan::FleetPlan;
pub use recommend::{Proposal, RecKind, Recommendation, Rejected};
pub use replay::Replay;

/// Everything one analysis produces.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Analysis {
    pub from_ms: i64,
    pub to_ms: i64,
    pub generated_ms: i64,
    pub funnel: Funnel,
    /// The fleet plan: one consistent set of steps, its totals and the bound.
    #[serde(default)]
    pub plan: FleetPlan,
    pub findings: Vec<Finding>,
    pub recommendations: Vec<Recommendation>,
    /// The outcome check of every applied step whose change the window covers.
    #[serde(default)]
    pub outcomes: Vec<Outcome>,
    /// Proposals replay turned down, with the reason.
    pub rejected: Vec<Rejected>,
    /// Demand forecast per pool and team, made from a longer history than the window (the
    /// collector adds it after the analysis: [`forecast::forecast`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<forecast::Forecasts>,
    /// What the analysis could not measure (e.g. MIG compute without DCGM), worded from the
    /// fields below.
    pub limitations: Vec<String>,
    /// The nodes whose MIG instances had samples but no measure of use (the first
    /// limitation names them); kept apart so that clusters' analyses merge. Not stored.
    #[serde(skip)]
    pub mig_unmeasured: std::collections::BTreeSet<String>,
    /// Seconds the held-out replay took (the twin plan and its replay), summed over the parts
    /// analysed: what `gpulens bench analyze` reports apart. Not stored.
    #[serde(skip)]
    pub held_out_secs: f64,
    /// Display names (`namespace/pod/container`, `job 123 (user)`, …) of the tenant keys the
    /// findings and recommendations name.
    #[serde(default)]
    pub tenant_names: BTreeMap<String, String>,
}

/// A finding still going on when its analysis window ends (hour rollups: the last hour may be
/// partial).
const ONGOING_SLACK_MS: i64 = 2 * 3_600_000;

impl Analysis {
    /// Whether a finding is a condition that holds now: it is still going on when the window
    /// ends. Hardware errors stay a condition while the window holds them: a GPU that fell off
    /// the bus two days ago is still suspect until someone acts. The collector's alerts, the
    /// `gpulens_finding_headline` series and the reclaim loop all ask this.
    pub fn ongoing(&self, f: &Finding) -> bool {
        f.kind == FindingKind::Hardware || f.to_ms + ONGOING_SLACK_MS >= self.to_ms
    }
}

/// Errors: only the funnel's dataframe work can fail.
#[derive(Debug)]
pub struct AnalysisError(pub String);

impl std::fmt::Display for AnalysisError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "analysis failed: {}", self.0)
    }
}

impl std::error::Error for AnalysisError {}

/// The fleet plan and its steps alone (holdings, then the recommendations with their replays),
/// for `gpulens bench analyze` to time the plan apart from the rest of the analysis.
pub fn plan_only(input: &Input, cfg: &Config) -> FleetPlan {
    let holdings = holdings::holdings(input);
    let ctx = findings::Ctx::new(input, cfg);
    recommend::recommend(&ctx, &holdings, &[]).plan
}

/// Runs the whole analysis over `input`.
pub fn analyze(input: &Input, cfg: &Config) -> Result<Analysis, AnalysisError> {
    let started = std::time::Instant::now();
    let twin = held_out_twin(input, cfg);
    let held_out_secs = started.elapsed().as_secs_f64();
    let mut a = analyze_with(input, holdings::holdings(input), cfg)?;
    held_out::apply(twin, &mut a.recommendations, &mut a.plan);
    a.held_out_secs = held_out_secs;
    Ok(a)
}

/// The plan made without the window's most recent part, replayed on that part
/// ([`held_out`]).
fn held_out_twin(input: &Input, cfg: &Config) -> held_out::Twin {
    let (fitted, unseen, score) = match held_out::split(input, cfg) {
        Ok(parts) => parts,
        Err(twin) => return twin,
    };
    let quiet = held_out::twin_config(cfg);
    let holdings = holdings::holdings(&fitted);
    match analyze_with(&fitted, holdings, &quiet) {
        Ok(twin) => held_out::judge(&twin.recommendations, &unseen, cfg, score),
        Err(e) => held_out::Twin::without(held_out::Score {
            note: Some(format!("the plan without the held-out part failed: {e}")),
            ..score
        }),
    }
}

/// [`analyze`], taking the input: its tenant series become the holdings without a copy, so a
/// large fleet's tenant-hours are held once. The same analysis.
pub fn analyze_owned(mut input: Input, cfg: &Config) -> Result<Analysis, AnalysisError> {
    let started = std::time::Instant::now();
    let twin = held_out_twin(&input, cfg);
    let held_out_secs = started.elapsed().as_secs_f64();
    let holdings = holdings::take_holdings(&mut input);
    let mut a = analyze_with(&input, holdings, cfg)?;
    held_out::apply(twin, &mut a.recommendations, &mut a.plan);
    a.held_out_secs = held_out_secs;
    Ok(a)
}

/// The analysis of `input` whose holdings are `holdings` (the input's tenant series need not
/// be there any more).
fn analyze_with(
    input: &Input,
    holdings: Vec<holdings::Holding>,
    cfg: &Config,
) -> Result<Analysis, AnalysisError> {
    let mut funnel =
        funnel::funnel(input, &holdings, cfg).map_err(|e| AnalysisError(e.to_string()))?;
    energy::fill(&mut funnel, input, &holdings, cfg);
    let ctx = findings::Ctx::new(input, cfg);
    let mut found: Vec<Finding> = holdings
        .iter()
        .filter(|h| h.total.alloc_n > 0)
        .filter_map(|h| findings::idle_allocation(&ctx, h))
        .collect();
    found.extend(interference::interference(&ctx));
    found.extend(findings::zombies(&ctx));
    found.extend(findings::memory_pressure(&ctx, &holdings));
    found.extend(findings::throttling(&ctx, &holdings));
    found.extend(findings::hardware(&ctx));
    found.extend(findings::agent_silent(&ctx));
    found.extend(waiting::waiting_demand(&ctx, &holdings));
    let rec = recommend::recommend(&ctx, &holdings, &found);
    found.extend(rec.underutilized);
    let outcomes = outcome::check(&ctx, &holdings);
    found.extend(outcome::findings(&ctx, &outcomes));
    let mut rejected = rec.rejected;
    for r in &mut rejected {
        r.reason = ctx.with_names(&r.cluster, &r.reason);
    }
    let mut recommendations = rec.recommendations;
    if !cfg.ahead.is_zero() {
        let days = cfg.ahead.as_secs_f64() / 86_400.0;
        ahead::check(input, &holdings, &mut recommendations, cfg, days);
    }
    let mut tenant_names = BTreeMap::new();
    for (cluster, key) in found
        .iter()
        .flat_map(|f| f.tenants.iter().map(move |t| (&f.cluster, t)))
        .chain(recommendations.iter().flat_map(|r| {
            r.tenants
                .iter()
                .chain(r.interrupts.iter().map(|i| &i.tenant))
                .map(move |t| (&r.cluster, t))
        }))
        .chain(
            rejected
                .iter()
                .flat_map(|r| r.tenants.iter().map(move |t| (&r.cluster, t))),
        )
        .chain(outcomes.iter().flat_map(|o| {
            o.tenants
                .iter()
                .flat_map(|t| std::iter::once(&t.tenant).chain(&t.tenants_after))
                .map(move |t| (&o.cluster, t))
        }))
    {
        tenant_names
            .entry(key.clone())
            .or_insert_with(|| ctx.name(cluster, key));
    }
    let mut analysis = Analysis {
        plan: rec.plan,
        outcomes,
        tenant_names,
        from_ms: input.from_ms,
        to_ms: input.to_ms,
        generated_ms: input.now_ms,
        funnel,
        findings: found,
        recommendations,
        rejected,
        forecast: None,
        limitations: Vec::new(),
        mig_unmeasured: mig_unmeasured(input, &holdings),
        held_out_secs: 0.0,
    };
    settle(&mut analysis);
    Ok(analysis)
}

/// Puts an analysis' lists in their order and words its limitations: the last step of an
/// analysis, and of one merged from its clusters' ([`merge::merge`]), so both read the same.
fn settle(a: &mut Analysis) {
    // Within a severity, the costliest waste first (findings without a cost keep their order).
    let cost = |f: &Finding| f.metrics.get(&Measure::WastedCost).copied().unwrap_or(0.0);
    a.findings.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(cost(b).total_cmp(&cost(a)))
            .then(a.kind.cmp(&b.kind))
            .then(a.node.cmp(&b.node))
            .then(a.id.cmp(&b.id))
    });
    // The plan's steps in the order they can be carried out (`plan.steps`), then the advice
    // beside the plan, most GPUs freed first.
    let at: std::collections::HashMap<&str, usize> = a
        .plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    let place = |r: &Recommendation| at.get(r.id.as_str()).copied().unwrap_or(usize::MAX);
    a.recommendations.sort_by(|x, y| {
        place(x)
            .cmp(&place(y))
            .then(y.replay.gpus_freed.total_cmp(&x.replay.gpus_freed))
            .then(x.kind.cmp(&y.kind))
            .then(x.id.cmp(&y.id))
    });
    // By where they are: a cluster analysed in parts lists them as it would whole.
    a.rejected.sort_by(|a, b| {
        (&a.cluster, &a.node, a.kind.as_str(), &a.tenants, &a.reason).cmp(&(
            &b.cluster,
            &b.node,
            b.kind.as_str(),
            &b.tenants,
            &b.reason,
        ))
    });
    a.outcomes
        .sort_by(|a, b| (&a.cluster, a.action).cmp(&(&b.cluster, b.action)));
    a.limitations = limitations(&a.mig_unmeasured);
}

/// The MIG nodes whose instances' use the window holds no measure of.
fn mig_unmeasured(
    input: &Input,
    holdings: &[holdings::Holding],
) -> std::collections::BTreeSet<String> {
    let mig_node: std::collections::HashMap<&str, &str> = input
        .gpus
        .iter()
        .filter(|g| g.sharing == Sharing::Mig)
        .map(|g| (g.uuid.as_str(), g.node.as_str()))
        .collect();
    holdings
        .iter()
        .filter(|h| h.total.samples > 0 && h.total.eff_n == 0)
        .filter_map(|h| mig_node.get(h.gpu.as_str()).map(|n| (*n).to_owned()))
        .collect()
}

fn limitations(mig_unmeasured: &std::collections::BTreeSet<String>) -> Vec<String> {
    if mig_unmeasured.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "MIG instances on {} are not measurable without DCGM: NVML reports no per-instance utilization, so their effective use, idle time and right-sizing are unknown (not zero)",
        mig_unmeasured
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    )]
}
