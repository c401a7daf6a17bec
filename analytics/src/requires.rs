//! The order of the plan's steps: each step's `requires`, the steps that must be
//! carried out before it because they empty the GPUs it fills.

use std::collections::{BTreeSet, HashMap};

use crate::findings::Ctx;
use crate::holdings::Holding;
use crate::plan;
use crate::recommendation::{Move, Proposal, Recommendation};

/// Fills each step's `requires`: for every GPU it moves tenants onto, the steps that take
/// that GPU's present tenants away — the reclaim of a tenant, or another node's step that
/// moves it (tenants this step moves itself, or that stay, need nothing).
pub fn link_requirements(
    ctx: &Ctx,
    holdings: &[Holding],
    recommendations: &mut [Recommendation],
    reclaim_ids: &HashMap<(String, String), String>,
    moves: &HashMap<(String, String), (String, Move)>,
) {
    let uuid_of: HashMap<(&str, &str, i64), &str> = ctx
        .input
        .gpus
        .iter()
        .map(|g| {
            (
                (g.cluster.as_str(), g.node.as_str(), g.index),
                g.uuid.as_str(),
            )
        })
        .collect();
    let mut holders: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for h in holdings
        .iter()
        .filter(|h| h.total.alloc_n > 0 && plan::is_current(h, ctx.input.to_ms))
    {
        holders.entry(&h.gpu).or_default().insert(&h.tenant);
    }
    // A MIG layout or a sharing config reconfigures every GPU of its node (the workflow
    // drains it first): the steps taking that node's tenants away come first, reclaims
    // included (the demo's MIG step named one of the three reclaims it needed).
    let node_gpus = |cluster: &str, node: &str| -> Vec<&str> {
        ctx.input
            .gpus
            .iter()
            .filter(|g| g.cluster == cluster && g.node == node)
            .map(|g| g.uuid.as_str())
            .collect()
    };
    for r in recommendations.iter_mut() {
        let mut requires = BTreeSet::new();
        let mut filled: Vec<&str> = r
            .moves()
            .iter()
            .filter_map(|m| {
                uuid_of
                    .get(&(r.cluster.as_str(), m.to_node.as_str(), m.to_gpu_index))
                    .copied()
            })
            .collect();
        if matches!(
            r.proposal,
            Proposal::MigLayout { .. } | Proposal::Sharing { .. }
        ) {
            filled.extend(node_gpus(&r.cluster, &r.node));
        }
        filled.sort_unstable();
        filled.dedup();
        for gpu in &filled {
            for tenant in holders.get(gpu).into_iter().flatten() {
                let key = ((*gpu).to_owned(), (*tenant).to_owned());
                if let Some(id) = reclaim_ids.get(&key) {
                    requires.insert(id.clone());
                } else if let Some((id, _)) = moves.get(&key) {
                    requires.insert(id.clone());
                }
            }
        }
        requires.remove(&r.id);
        r.requires = requires.into_iter().collect();
    }
}
