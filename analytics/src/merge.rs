//! One analysis of a fleet made of its clusters' analyses. The collector analyses a fleet one
//! cluster at a time, so that it holds one cluster's series at once (docs/analytics.md, "One
//! cluster at a time"). Everything the analysis measures lies within a cluster — holdings,
//! findings, a pool's plan, a step's outcome — so a cluster's part says what the whole would
//! say of it; what spans clusters is put together here: the funnel's lines (a model, team or
//! tenant key may be in several clusters), the plan's totals and step order, the nodes the MIG
//! limitation names.

use crate::Analysis;

/// The analysis of all `parts` — analyses of disjoint sets of clusters over the same range —
/// as one analysis of them together reads; None without parts.
pub fn merge(parts: impl IntoIterator<Item = Analysis>) -> Option<Analysis> {
    let mut parts = parts.into_iter();
    let mut whole = parts.next()?;
    for p in parts {
        whole.funnel.absorb(p.funnel);
        whole.plan.pools.extend(p.plan.pools);
        whole.plan.nodes.extend(p.plan.nodes);
        whole.findings.extend(p.findings);
        whole.recommendations.extend(p.recommendations);
        whole.outcomes.extend(p.outcomes);
        whole.rejected.extend(p.rejected);
        whole.mig_unmeasured.extend(p.mig_unmeasured);
        for (key, name) in p.tenant_names {
            whole.tenant_names.entry(key).or_insert(name);
        }
    }
    whole.plan.sum_pools();
    whole.plan.steps = crate::recommend::step_order(&whole.recommendations);
    crate::settle(&mut whole);
    Some(whole)
}
