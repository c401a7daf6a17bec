//! Work still waiting for GPUs when the window ends, placed in the plan before anything is
//! counted as freed: a layout never removes the MIG profile or the GPUs a pending
//! pod of its pool asks for, and the GPUs the plan empties serve that work first.
//!
//! A wait belongs to the pool it can run on: its product (`nvidia.com/gpu.product` selector)
//! names the model; a MIG resource needs a model whose MIG family has that profile; a wait
//! naming no product goes to the first such pool of its cluster (pools in model order), so it
//! is counted once. The packer keeps room for them (`pack::reserve`).

use crate::input::{Input, Waiting};
use crate::mig::{MigFamily, Profile};
use crate::waiting::{Class, MIG_PREFIX, product_matches};
use model::rollup::HOUR_MS;

/// How near the end of the window something must have been seen to count as going on now:
/// a holding still running (`is_current`), work still waiting.
pub const NOW_MS: i64 = 2 * HOUR_MS;

/// What a waiting pod asks its pool for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ask {
    /// Whole GPUs (`nvidia.com/gpu`).
    Gpus(u32),
    /// MIG instances of one profile (`nvidia.com/mig-<profile>`).
    Mig(&'static Profile, u32),
    /// Time-slice or MPS replicas (`nvidia.com/gpu.shared`): one GPU is kept for every
    /// `max_replicas` of them.
    Shared(u32),
}

/// A pod waiting when the window ends, and what it asks for.
#[derive(Debug, Clone)]
pub struct Wait<'a> {
    pub w: &'a Waiting,
    pub ask: Ask,
}

impl Wait<'_> {
    /// How a step names it: `notebooks/jupyter-carol (1 × nvidia.com/mig-1g.10gb)`.
    pub fn label(&self) -> String {
        format!("{} ({} × {})", self.w.name, self.w.count, self.w.resource)
    }
}

/// Whether `w` was still waiting at the end of the window: seen waiting in its last two
/// hours, as a holding that still runs (`is_current`).
pub fn still_waiting(w: &Waiting, to_ms: i64) -> bool {
    w.to_ms + NOW_MS > to_ms
}

/// What `w` asks of a pool of `model` (MIG family `family`), or None when that pool cannot
/// serve it.
pub fn ask_of(w: &Waiting, model: &str, family: Option<&'static MigFamily>) -> Option<Ask> {
    if w.product
        .as_deref()
        .is_some_and(|p| !product_matches(model, p))
    {
        return None;
    }
    let count = u32::try_from(w.count).ok().filter(|&c| c > 0)?;
    Some(match Class::of(&w.resource)? {
        Class::Whole => Ask::Gpus(count),
        Class::Shared => Ask::Shared(count),
        Class::Mig => {
            let name = w.resource.strip_prefix(MIG_PREFIX)?;
            Ask::Mig(family?.profile(name)?, count)
        }
    })
}

/// The waits of pool (`cluster`, `model`): still waiting, servable by the pool, and — for a
/// wait naming no product — not servable by a pool of the cluster that comes first in
/// `models` (the cluster's pool models in order).
pub fn pending<'a>(
    input: &'a Input,
    cluster: &str,
    model: &str,
    family: Option<&'static MigFamily>,
    models: &[&str],
) -> Vec<Wait<'a>> {
    input
        .waiting
        .iter()
        .filter(|w| w.cluster == cluster && still_waiting(w, input.to_ms))
        .filter_map(|w| {
            let ask = ask_of(w, model, family)?;
            let earlier = w.product.is_none()
                && models
                    .iter()
                    .take_while(|m| **m != model)
                    .any(|m| ask_of(w, m, crate::mig::family(m)).is_some());
            (!earlier).then_some(Wait { w, ask })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(resource: &str, product: Option<&str>, to_ms: i64) -> Waiting {
        Waiting {
            cluster: "c".into(),
            source: "pod".into(),
            name: "ns/p".into(),
            team: "ns".into(),
            resource: resource.into(),
            count: 1,
            product: product.map(str::to_owned),
            reason: String::new(),
            message: String::new(),
            from_ms: 0,
            to_ms,
        }
    }

    #[test]
    fn a_wait_belongs_to_the_pool_that_can_serve_it_once() {
        let h100 = "NVIDIA H100 80GB HBM3";
        let l40s = "NVIDIA L40S";
        let mig = waiting("nvidia.com/mig-1g.10gb", None, 10 * HOUR_MS);
        assert!(matches!(
            ask_of(&mig, h100, crate::mig::family(h100)),
            Some(Ask::Mig(p, 1)) if p.name == "1g.10gb"
        ));
        assert_eq!(ask_of(&mig, l40s, crate::mig::family(l40s)), None);
        let whole = waiting("nvidia.com/gpu", Some("NVIDIA-L40S"), 10 * HOUR_MS);
        assert_eq!(ask_of(&whole, h100, None), None);
        assert_eq!(ask_of(&whole, l40s, None), Some(Ask::Gpus(1)));
        // No product: the first pool of the cluster that can serve it, and only that one.
        let mut input = Input {
            to_ms: 10 * HOUR_MS,
            ..Input::default()
        };
        input
            .waiting
            .push(waiting("nvidia.com/gpu", None, 10 * HOUR_MS));
        let models = [h100, l40s];
        assert_eq!(pending(&input, "c", h100, None, &models).len(), 1);
        assert_eq!(pending(&input, "c", l40s, None, &models).len(), 0);
        // Work that stopped waiting before the last two hours is not pending.
        input.waiting[0].to_ms = 7 * HOUR_MS;
        assert_eq!(pending(&input, "c", h100, None, &models).len(), 0);
    }
}
