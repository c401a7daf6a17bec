//! One analysis of a fleet made of its parts' analyses. The collector analyses a fleet one
//! cluster (or one part of a large cluster: [`crate::parts`]) at a time, so that it holds one
//! part's series at once (docs/analytics.md, "One cluster, and one pool, at a time").
//! Everything the analysis measures lies within a cluster, and within a part — holdings,
//! findings, a pool's plan, a step's outcome — so a part's analysis says what the whole would
//! say of its nodes; what spans parts is put together here: the funnel's lines (a cluster,
//! model, team or tenant key may be in several parts), the plan's totals and step order, the
//! nodes the MIG limitation names.

use crate::Analysis;

/// The analysis of all `parts` — analyses of disjoint sets of nodes over the same range —
/// as one analysis of them together reads; None without parts.
pub fn merge(parts: impl IntoIterator<Item = Analysis>) -> Option<Analysis> {
    let mut parts = parts.into_iter();
    let mut whole = parts.next()?;
    for p in parts {
        whole.funnel.absorb(p.funnel);
        whole.plan.pools.extend(p.plan.pools);
        whole.plan.nodes.extend(p.plan.nodes);
        match (&mut whole.plan.held_out, p.plan.held_out) {
            (Some(w), Some(o)) => w.absorb(&o),
            (w @ None, o) => *w = o,
            _ => {}
        }
        whole.findings.extend(p.findings);
        whole.recommendations.extend(p.recommendations);
        whole.outcomes.extend(p.outcomes);
        whole.rejected.extend(p.rejected);
        whole.mig_unmeasured.extend(p.mig_unmeasured);
        whole.held_out_secs += p.held_out_secs;
        for (key, name) in p.tenant_names {
            whole.tenant_names.entry(key).or_insert(name);
        }
    }
    whole.plan.sum_pools();
    whole.plan.steps = crate::recommend::step_order(&whole.recommendations);
    crate::settle(&mut whole);
    Some(whole)
}
