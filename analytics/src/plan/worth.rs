//! What a per-GPU sharing mechanism would give a pool, and the fleet's sum: the
//! numbers `plan::pergpu` works out, kept apart from the packers so the plan's layout can
//! carry them.

/// What one per-GPU mechanism would give a pool.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Worth {
    pub mechanism: crate::mechanism::Mechanism,
    /// GPUs in use after a plan under this mechanism, and freed against today.
    pub gpus_after: usize,
    pub gpus_freed: usize,
    /// GPUs freed beyond the plan the pool's present mechanisms allow (negative: fewer; the
    /// fleet's sum counts only the pools where it frees more, where enabling it pays).
    pub beyond_plan: i64,
    /// No plan under this mechanism needs fewer GPUs.
    pub bound_gpus: usize,
    /// What `beyond_plan` GPUs cost per month at the configured price (0 when negative).
    pub money_per_month: f64,
    /// Tenants a scheduler-placed plan gives a GPU of their own (a placement beside them
    /// could contend).
    pub own_gpu: usize,
    /// Where a pinned mechanism puts each group of tenants sharing a GPU (groups of one
    /// included); empty for scheduler-placed mechanisms and in the fleet's sum.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<PinnedGroup>,
    /// Pools that have this mechanism (configured): 1 or 0 for a pool, their number in the
    /// fleet's sum. Where it is in place its plan is this pool's to carry out; elsewhere it
    /// is what enabling it would free.
    #[serde(default)]
    pub pools_with: usize,
    /// Pools whose plan uses it (its steps are the pool's): 1 or 0 for a pool, their number
    /// in the fleet's sum. Its `beyond_plan` there is against the plan that uses it.
    #[serde(default)]
    pub uses: usize,
    /// What a scheduler-placed mechanism asks per pod: (tenant key, memory request in bytes,
    /// whether it asks a whole GPU). Kept, as `groups`, only where the mechanism frees more.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<(String, f64, bool)>,
}

/// One GPU's group under a pinned mechanism.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PinnedGroup {
    pub node: String,
    pub gpu: String,
    /// (tenant key, memory request in bytes), largest first.
    pub tenants: Vec<(String, f64)>,
}

impl Worth {
    /// One line for people: the mechanism, what it would leave in use, what it frees beyond
    /// today's plan and what it needs.
    pub fn sentence(&self, currency: &str) -> String {
        let d = self.mechanism.declared();
        let (has, verb) = if self.uses > 0 {
            (
                format!(
                    " (in place on {}; the plan uses it on {})",
                    model::figures::count(self.pools_with as f64, "pool", "pools"),
                    self.uses
                ),
                "it frees",
            )
        } else if self.pools_with > 0 {
            (
                format!(
                    " (in place on {})",
                    model::figures::count(self.pools_with as f64, "pool", "pools")
                ),
                "its plan frees",
            )
        } else {
            (String::new(), "enabling it frees")
        };
        let gain = match self.beyond_plan {
            n if n > 0 => format!(
                "{verb} {} more than today's plan, ≈ {} a month",
                model::figures::count(n as f64, "GPU", "GPUs"),
                model::figures::money(self.money_per_month, currency)
            ),
            0 if self.uses > 0 => format!(
                "{} in all, as the plan's steps",
                model::figures::count(self.gpus_freed as f64, "GPU freed", "GPUs freed")
            ),
            0 => "frees no more than today's plan".to_owned(),
            n => format!(
                "would keep {} more in use than today's plan",
                model::figures::count(-n as f64, "GPU", "GPUs")
            ),
        };
        let own = if self.own_gpu > 0 {
            format!(
                "; {} a GPU of its own, since a placement beside it could contend",
                model::figures::count(self.own_gpu as f64, "tenant gets", "tenants get")
            )
        } else {
            String::new()
        };
        format!(
            "{}{has}: {} in use (none fewer than {}), {gain}{own}; needs {}",
            d.name,
            model::figures::count(self.gpus_after as f64, "GPU", "GPUs"),
            self.bound_gpus,
            d.needs
        )
    }
}

/// A pool's worth against the plan it now has (`plan_after` GPUs in use after it), where the
/// plan uses per-GPU mechanism `uses`: each mechanism's gain is counted again against it, and
/// the one in use keeps no objects of its own (its steps carry them).
pub fn rebase(
    worth: &mut [Worth],
    plan_after: usize,
    price_per_month: f64,
    uses: Option<crate::mechanism::Mechanism>,
) {
    for w in worth {
        w.beyond_plan = plan_after as i64 - w.gpus_after as i64;
        w.money_per_month = (w.beyond_plan.max(0) as f64 * price_per_month * 100.0).round() / 100.0;
        w.uses = usize::from(Some(w.mechanism) == uses);
        if w.beyond_plan <= 0 || w.uses > 0 {
            w.groups.clear();
            w.requests.clear();
        }
    }
}

/// The fleet's worth per mechanism: the sums of its pools'.
pub fn sum<'w>(pools: impl Iterator<Item = &'w [Worth]>) -> Vec<Worth> {
    let mut out: Vec<Worth> = Vec::new();
    for w in pools.flatten() {
        match out.iter_mut().find(|o| o.mechanism == w.mechanism) {
            Some(o) => {
                o.gpus_after += w.gpus_after;
                o.gpus_freed += w.gpus_freed;
                o.beyond_plan += w.beyond_plan.max(0);
                o.bound_gpus += w.bound_gpus;
                o.money_per_month =
                    ((o.money_per_month + w.money_per_month) * 100.0).round() / 100.0;
                o.own_gpu += w.own_gpu;
                o.pools_with += w.pools_with;
                o.uses += w.uses;
            }
            None => out.push(Worth {
                beyond_plan: w.beyond_plan.max(0),
                groups: Vec::new(),
                requests: Vec::new(),
                ..w.clone()
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanism::Mechanism;

    #[test]
    fn a_mechanism_in_place_is_said_so_and_one_to_enable_as_such() {
        let mut w = Worth {
            mechanism: Mechanism::DraConsumableCapacity,
            gpus_after: 2,
            gpus_freed: 2,
            beyond_plan: 2,
            bound_gpus: 2,
            money_per_month: 3650.0,
            own_gpu: 0,
            pools_with: 0,
            uses: 0,
            groups: Vec::new(),
            requests: Vec::new(),
        };
        let lacking = w.sentence("USD");
        assert!(
            lacking.contains("enabling it frees 2 GPUs more"),
            "{lacking}"
        );
        w.pools_with = 1;
        let has = w.sentence("USD");
        assert!(
            has.contains("(in place on 1 pool)") && has.contains("its plan frees 2 GPUs more"),
            "{has}"
        );
        let fleet = sum([std::slice::from_ref(&w), std::slice::from_ref(&w)].into_iter());
        assert_eq!(fleet[0].pools_with, 2);
    }
}
