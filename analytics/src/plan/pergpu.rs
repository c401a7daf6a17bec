//! Per-GPU sharing: how many GPUs a pool's tenants need when each GPU's group is
//! chosen one GPU at a time — pinned by the plan (DRA claims with a device selector) or placed
//! by a scheduler within requested capacities (DRA consumable capacity, HAMi, KAI) — under
//! gpulens' own rules: a tenant's memory request is its window maximum plus the memory
//! headroom and is never shared by time (the requests on one GPU fit its memory); compute is
//! shared only where, hour by hour, the p95 demands of the tenants on one GPU add up to at
//! most one GPU; at most [`MAX_PER_GPU`] tenants on one GPU.
//!
//! - [`pack_pinned`]: first-fit decreasing by memory, each GPU's hourly sums checked; a GPU
//!   of a shared claim holds one namespace only (the claim is namespaced).
//! - [`pack_scheduled`]: the scheduler may put together any tenants whose requests fit one
//!   GPU's memory, so a pool is safe only if, in every hour, the heaviest such group (a
//!   knapsack over memory) stays within one GPU; tenants that make it unsafe get a GPU of their
//!   own (a whole-GPU request), the rest need the GPUs their requests fill.
//! - [`bound`]: no per-GPU packing needs fewer GPUs (memory, the busiest hour's compute, the
//!   tenant limit) — a true lower bound; property tests compare it with an exact search.

use std::collections::BTreeMap;

pub use super::worth::{PinnedGroup, Worth, rebase};

/// The most tenants one GPU takes (the DRA driver's consumable shares, HAMi's split count and
/// the careful packing all bound it; 4 is the careful packing's).
pub const MAX_PER_GPU: usize = 4;

/// One tenant as the per-GPU packers see it.
#[derive(Debug, Clone)]
pub struct Tenant {
    /// Its key, and the GPU it holds today (where a pinned group prefers to stay).
    pub key: String,
    pub gpu: String,
    /// Its namespace (a shared claim's group is of one).
    pub namespace: String,
    /// Memory request: bytes.
    pub memory: f64,
    /// p95 compute per hour, GPU-equivalents, by hour index (the same hours for every tenant
    /// of a pool; an hour it did not run is 0).
    pub hours: Vec<f64>,
}

impl Tenant {
    fn peak(&self) -> f64 {
        self.hours.iter().copied().fold(0.0, f64::max)
    }
}

/// One GPU's group while packing.
#[derive(Debug, Clone)]
struct Group {
    members: Vec<usize>,
    memory: f64,
    hours: Vec<f64>,
    namespace: String,
}

const EPS: f64 = 1e-9;

/// Pinned per-GPU groups: first-fit decreasing (memory, then busiest hour); each group's
/// hourly compute ≤ 1, memory ≤ `capacity`, at most [`MAX_PER_GPU`] members, and one
/// namespace when `one_namespace` (tenants pinned to a node never reach the packers: they keep
/// their GPUs). A tenant too large for any group
/// gets one of its own. Returns the groups (tenant indices).
pub fn pack_pinned(tenants: &[Tenant], capacity: f64, one_namespace: bool) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..tenants.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&tenants[a], &tenants[b]);
        y.memory
            .total_cmp(&x.memory)
            .then(y.peak().total_cmp(&x.peak()))
            .then(a.cmp(&b))
    });
    let mut groups: Vec<Group> = Vec::new();
    for i in order {
        let t = &tenants[i];
        let fits = |g: &Group| {
            g.members.len() < MAX_PER_GPU
                && g.memory + t.memory <= capacity + EPS
                && (!one_namespace || g.namespace == t.namespace)
                && g.hours
                    .iter()
                    .zip(&t.hours)
                    .all(|(a, b)| a + b <= 1.0 + EPS)
        };
        match groups.iter_mut().find(|g| fits(g)) {
            Some(g) => {
                g.members.push(i);
                g.memory += t.memory;
                for (a, b) in g.hours.iter_mut().zip(&t.hours) {
                    *a += b;
                }
            }
            None => groups.push(Group {
                members: vec![i],
                memory: t.memory,
                hours: t.hours.clone(),
                namespace: t.namespace.clone(),
            }),
        }
    }
    groups.into_iter().map(|g| g.members).collect()
}

/// GPUs a scheduler-placed pool needs: the tenants that keep any placement safe share GPUs
/// by their memory requests (first-fit decreasing); the others each get a GPU of their own.
/// Returns (GPUs, how many tenants got a GPU of their own).
pub fn pack_scheduled(tenants: &[Tenant], capacity: f64) -> (usize, usize) {
    let alone = scheduled_alone(tenants, capacity);
    (
        fill(tenants, &alone, capacity).len() + alone.len(),
        alone.len(),
    )
}

/// The groups a scheduler that packs (HAMi's and KAI's binpack) is expected to make of a
/// scheduler-placed pool: each tenant that must run alone on a GPU of its own, the rest by
/// their memory requests (first-fit decreasing). Any other placement within the requests is
/// as safe ([`scheduled_alone`]); this one is what the plan counts as freed.
pub fn scheduled_groups(tenants: &[Tenant], capacity: f64) -> (Vec<Vec<usize>>, Vec<usize>) {
    let alone = scheduled_alone(tenants, capacity);
    let mut groups: Vec<Vec<usize>> = alone.iter().map(|&i| vec![i]).collect();
    groups.extend(fill(tenants, &alone, capacity));
    (groups, alone)
}

/// The tenants not `alone`, grouped by their memory requests (first-fit decreasing, at most
/// [`MAX_PER_GPU`] per GPU).
fn fill(tenants: &[Tenant], alone: &[usize], capacity: f64) -> Vec<Vec<usize>> {
    let mut shared: Vec<usize> = (0..tenants.len()).filter(|i| !alone.contains(i)).collect();
    shared.sort_by(|&a, &b| {
        tenants[b]
            .memory
            .total_cmp(&tenants[a].memory)
            .then(a.cmp(&b))
    });
    let mut bins: Vec<(f64, Vec<usize>)> = Vec::new();
    for i in shared {
        let m = tenants[i].memory;
        match bins
            .iter_mut()
            .find(|(used, members)| members.len() < MAX_PER_GPU && used + m <= capacity + EPS)
        {
            Some(b) => {
                b.0 += m;
                b.1.push(i);
            }
            None => bins.push((m, vec![i])),
        }
    }
    bins.into_iter().map(|(_, members)| members).collect()
}

/// The tenants a scheduler-placed pool must give a GPU of their own (a whole-GPU request).
pub fn scheduled_alone(tenants: &[Tenant], capacity: f64) -> Vec<usize> {
    let mut shared: Vec<usize> = (0..tenants.len()).collect();
    let hours = tenants.first().map_or(0, |t| t.hours.len());
    let mut open: Vec<usize> = (0..hours).collect();
    let mut alone = Vec::new();
    // One at a time, the tenant heaviest in the most unsafe hours leaves (its own GPU),
    // until every hour is safe; a removal only lightens, so a safe hour is not checked again.
    loop {
        open.retain(|&h| unsafe_hour(tenants, &shared, capacity, h));
        let mut heaviest: BTreeMap<usize, usize> = BTreeMap::new();
        for &h in &open {
            if let Some(i) = shared.iter().copied().max_by(|&a, &b| {
                tenants[a].hours[h]
                    .total_cmp(&tenants[b].hours[h])
                    .then(b.cmp(&a))
            }) {
                *heaviest.entry(i).or_default() += 1;
            }
        }
        let Some((&leaving, _)) = heaviest
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        else {
            break;
        };
        shared.retain(|&i| i != leaving);
        alone.push(leaving);
    }
    alone
}

/// The most members for which the knapsack decides an hour; past it the hour is judged by its
/// [`MAX_PER_GPU`] largest demands alone (as if every group fit in memory: never less safe).
pub const KNAPSACK_MAX: usize = 64;

/// Whether some placement within the requests exceeds one GPU of compute in hour `h`. An
/// hour whose [`MAX_PER_GPU`] largest demands add up to one GPU at most is safe without the
/// knapsack.
fn unsafe_hour(tenants: &[Tenant], members: &[usize], capacity: f64, h: usize) -> bool {
    let mut top = [0.0_f64; MAX_PER_GPU];
    for &i in members {
        let v = tenants[i].hours[h];
        if v > top[MAX_PER_GPU - 1] {
            top[MAX_PER_GPU - 1] = v;
            top.sort_by(|a, b| b.total_cmp(a));
        }
    }
    top.iter().sum::<f64>() > 1.0 + EPS
        && (members.len() > KNAPSACK_MAX
            || heaviest_group(tenants, members, capacity, h) > 1.0 + EPS)
}

/// The most compute in hour `h` that tenants whose memory requests fit one GPU together (and
/// at most [`MAX_PER_GPU`] of them) can bring: a knapsack over memory in 1/256ths of the GPU,
/// each request rounded down (never an underestimate).
fn heaviest_group(tenants: &[Tenant], members: &[usize], capacity: f64, h: usize) -> f64 {
    const UNITS: usize = 256;
    let unit = capacity / UNITS as f64;
    // best[k][m]: the most compute of k tenants using m units.
    let mut best = vec![vec![f64::NEG_INFINITY; UNITS + 1]; MAX_PER_GPU + 1];
    best[0][0] = 0.0;
    for &i in members {
        let t = &tenants[i];
        // Rounded down: more groups fit than really do, so the heaviest is never missed.
        let w = (t.memory / unit).floor() as usize;
        if w > UNITS || t.hours[h] <= 0.0 {
            continue;
        }
        for k in (0..MAX_PER_GPU).rev() {
            for m in (0..=UNITS - w).rev() {
                if best[k][m] > f64::NEG_INFINITY {
                    let v = best[k][m] + t.hours[h];
                    if v > best[k + 1][m + w] {
                        best[k + 1][m + w] = v;
                    }
                }
            }
        }
    }
    best.iter().flatten().copied().fold(0.0, f64::max)
}

/// No per-GPU packing of `tenants` needs fewer GPUs than this.
pub fn bound(tenants: &[Tenant], capacity: f64) -> usize {
    if tenants.is_empty() {
        return 0;
    }
    let memory: f64 = tenants.iter().map(|t| t.memory).sum();
    let hours = tenants[0].hours.len();
    let busiest = (0..hours)
        .map(|h| tenants.iter().map(|t| t.hours[h]).sum::<f64>())
        .fold(0.0, f64::max);
    let by = |x: f64| (x - 1e-6).ceil().max(1.0) as usize;
    // Tenants over half a GPU's memory (or compute in one hour) never meet: one GPU each.
    let big = tenants
        .iter()
        .filter(|t| t.memory > capacity / 2.0 + EPS)
        .count();
    by(memory / capacity)
        .max(by(busiest))
        .max(tenants.len().div_ceil(MAX_PER_GPU))
        .max(big)
}

/// The hours of a pool's tenants as one index: every tenant's hourly values over the same
/// sorted hours (0 where it did not run).
pub fn align(hours: &[Vec<(i64, f64)>]) -> Vec<Vec<f64>> {
    let mut index: BTreeMap<i64, usize> = BTreeMap::new();
    for (h, _) in hours.iter().flatten() {
        index.entry(*h).or_default();
    }
    for (i, v) in index.values_mut().enumerate() {
        *v = i;
    }
    hours
        .iter()
        .map(|hs| {
            let mut row = vec![0.0_f64; index.len()];
            for (h, v) in hs {
                row[index[h]] = row[index[h]].max(*v);
            }
            row
        })
        .collect()
}

/// The tenants of a pool that a per-GPU mechanism could place (pods holding one GPU, sized
/// by the packer), and the GPUs that stay as they are (every other live tenant's).
pub(super) fn movable(
    ctx: &crate::findings::Ctx,
    pool: &super::PoolLayout,
) -> (Vec<Tenant>, usize) {
    let cfg = ctx.cfg;
    let (items, fixed) = &pool.sized;
    let mut staying: std::collections::BTreeSet<&str> = fixed.clone();
    let mut hours = Vec::new();
    let mut who = Vec::new();
    for it in items {
        if it.pin.is_some() {
            staying.insert(it.h.gpu.as_str());
            continue;
        }
        let peak = it.hours.iter().map(|h| h.2).fold(0.0, f64::max);
        let memory = if peak > 0.0 {
            peak * (1.0 + cfg.memory_headroom)
        } else {
            it.memory
        };
        let name = ctx.name(&it.h.cluster, &it.h.tenant);
        who.push((
            name.split('/').next().unwrap_or("").to_owned(),
            memory,
            it.h.tenant.clone(),
            it.h.gpu.clone(),
        ));
        hours.push(it.hours.iter().map(|h| (h.0, h.1)).collect::<Vec<_>>());
    }
    let tenants = align(&hours)
        .into_iter()
        .zip(who)
        .map(|(hours, (namespace, memory, key, gpu))| Tenant {
            key,
            gpu,
            namespace,
            memory,
            hours,
        })
        .collect();
    (tenants, staying.len())
}

/// Per per-GPU mechanism, what a plan under it would leave in use in `pool`, against
/// `plan_after` (the GPUs the pool's plan leaves in use today).
/// `held` GPUs (held for repair) stay counted in use under every mechanism, as in the plan.
/// What pool `pool` has in place: the configured mechanisms and those seen on its nodes
/// (each with how many of the pool's nodes it was seen on).
pub fn in_place(
    ctx: &crate::findings::Ctx,
    pool: &super::PoolLayout,
) -> (
    Vec<crate::mechanism::Mechanism>,
    Vec<(crate::mechanism::Mechanism, usize)>,
) {
    let mut seen: std::collections::BTreeMap<crate::mechanism::Mechanism, usize> =
        Default::default();
    for n in ctx
        .input
        .nodes
        .iter()
        .filter(|n| n.cluster == pool.cluster && pool.nodes.iter().any(|p| p.node == n.node))
    {
        for m in &n.mechanisms {
            *seen.entry(*m).or_default() += 1;
        }
    }
    let mut has = ctx.cfg.mechanisms_of(pool.cluster, pool.model);
    has.extend(seen.keys().copied());
    has.sort();
    has.dedup();
    (has, seen.into_iter().collect())
}

/// What each per-GPU mechanism would give `pool` (`in_use` GPUs today, `plan_after` after the
/// plan, `held` held for repair), where it `has` some of them in place ([`in_place`]).
pub fn worth(
    ctx: &crate::findings::Ctx,
    pool: &super::PoolLayout,
    in_use: usize,
    plan_after: usize,
    held: usize,
    has: &[crate::mechanism::Mechanism],
) -> Vec<Worth> {
    use crate::mechanism::{Chooser, Mechanism};
    let (tenants, staying) = movable(ctx, pool);
    // GPUs held for repair, and those the plan keeps for waiting work, stay under any
    // mechanism.
    let staying = staying + held + pool.kept_for_waiting().len();
    let capacity = pool.memory_total;
    let floor = staying + bound(&tenants, capacity);
    let price = pool.price_per_month(ctx.cfg);
    // Every scheduler-placed mechanism is judged by the same rule: worked out once.
    let mut scheduled: Option<(Vec<Vec<usize>>, Vec<usize>)> = None;
    Mechanism::PER_GPU
        .into_iter()
        .map(|m| {
            let d = m.declared();
            let (gpus, own, mut groups, mut requests) = match d.chooser {
                Chooser::SchedulerWithinLimits => {
                    let (groups, alone) =
                        scheduled.get_or_insert_with(|| scheduled_groups(&tenants, capacity));
                    let (gpus, own) = (groups.len(), alone.len());
                    let requests = tenants
                        .iter()
                        .enumerate()
                        .map(|(i, t)| (t.key.clone(), t.memory, alone.contains(&i)))
                        .collect();
                    (gpus, own, Vec::new(), requests)
                }
                _ => {
                    let groups = pack_pinned(&tenants, capacity, d.one_namespace);
                    (
                        groups.len(),
                        0,
                        place_groups(pool, &tenants, &groups),
                        Vec::new(),
                    )
                }
            };
            let after = staying + gpus;
            let beyond = plan_after as i64 - after as i64;
            if beyond <= 0 {
                groups.clear();
                requests.clear();
            }
            Worth {
                mechanism: m,
                gpus_after: after,
                gpus_freed: in_use.saturating_sub(after),
                beyond_plan: beyond,
                bound_gpus: floor,
                money_per_month: (beyond.max(0) as f64 * price * 100.0).round() / 100.0,
                own_gpu: own,
                pools_with: usize::from(has.contains(&m)),
                uses: 0,
                groups,
                requests,
            }
        })
        .collect()
}

/// Each pinned group on its own GPU of the pool: the present GPU of its largest member that
/// is still free, else of another member, else the first free GPU in use today (GPUs that
/// stay as they are and those kept for waiting work are taken).
pub(super) fn place_groups(
    pool: &super::PoolLayout,
    tenants: &[Tenant],
    groups: &[Vec<usize>],
) -> Vec<PinnedGroup> {
    let node_of: std::collections::HashMap<&str, &str> = pool
        .nodes
        .iter()
        .flat_map(|n| n.gpus.iter().map(move |g| (g.uuid.as_str(), n.node)))
        .collect();
    let mut taken: std::collections::BTreeSet<&str> = pool.sized.1.clone();
    for it in pool.sized.0.iter().filter(|it| it.pin.is_some()) {
        taken.insert(it.h.gpu.as_str());
    }
    taken.extend(pool.kept_for_waiting().iter().map(|k| k.0));
    // A GPU with unrecovered hardware errors takes no group.
    for n in &pool.nodes {
        for (g, p) in n.gpus.iter().zip(&n.placed) {
            if *p == Some(super::Placed::Faulty) {
                taken.insert(g.uuid.as_str());
            }
        }
    }
    let mut out = Vec::with_capacity(groups.len());
    for g in groups {
        let mut members = g.clone();
        members.sort_by(|&a, &b| tenants[b].memory.total_cmp(&tenants[a].memory));
        let gpu = members
            .iter()
            .map(|&i| tenants[i].gpu.as_str())
            .find(|u| !taken.contains(u))
            .or_else(|| pool.in_use.iter().copied().find(|u| !taken.contains(u)))
            .or_else(|| {
                pool.nodes
                    .iter()
                    .flat_map(|n| n.gpus.iter().map(|g| g.uuid.as_str()))
                    .find(|u| !taken.contains(u))
            });
        let Some(gpu) = gpu else { continue };
        taken.insert(gpu);
        out.push(PinnedGroup {
            node: node_of.get(gpu).copied().unwrap_or_default().to_owned(),
            gpu: gpu.to_owned(),
            tenants: members
                .iter()
                .map(|&i| (tenants[i].key.clone(), tenants[i].memory))
                .collect(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = (1u64 << 30) as f64;

    fn t(ns: &str, mem_gib: f64, hours: &[f64]) -> Tenant {
        Tenant {
            key: String::new(),
            gpu: String::new(),
            namespace: ns.into(),
            memory: mem_gib * GIB,
            hours: hours.to_vec(),
        }
    }

    /// Whether `group` may share one GPU under the rules.
    fn valid(tenants: &[Tenant], group: &[usize], cap: f64, one_ns: bool) -> bool {
        let hours = tenants[0].hours.len();
        group.len() <= MAX_PER_GPU
            && group.iter().map(|&i| tenants[i].memory).sum::<f64>() <= cap + EPS
            && (0..hours)
                .all(|h| group.iter().map(|&i| tenants[i].hours[h]).sum::<f64>() <= 1.0 + EPS)
            && (!one_ns
                || group
                    .iter()
                    .all(|&i| tenants[i].namespace == tenants[group[0]].namespace))
    }

    /// The fewest groups of an exact search over every partition.
    fn exact(tenants: &[Tenant], cap: f64, one_ns: bool) -> usize {
        fn go(
            i: usize,
            t: &[Tenant],
            groups: &mut Vec<Vec<usize>>,
            best: &mut usize,
            cap: f64,
            ns: bool,
        ) {
            if groups.len() >= *best {
                return;
            }
            if i == t.len() {
                *best = groups.len();
                return;
            }
            for g in 0..groups.len() {
                groups[g].push(i);
                if valid(t, &groups[g], cap, ns) {
                    go(i + 1, t, groups, best, cap, ns);
                }
                groups[g].pop();
            }
            groups.push(vec![i]);
            go(i + 1, t, groups, best, cap, ns);
            groups.pop();
        }
        let mut best = usize::MAX;
        go(0, tenants, &mut Vec::new(), &mut best, cap, one_ns);
        best
    }

    /// A small deterministic generator (xorshift), so a failing seed can be named.
    fn fleet(seed: u64) -> Vec<Tenant> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 10_000) as f64 / 10_000.0
        };
        let n = 2 + (next() * 6.0) as usize;
        (0..n)
            .map(|_| {
                let heavy = next() < 0.2;
                let mem = if heavy {
                    30.0 + next() * 50.0
                } else {
                    2.0 + next() * 28.0
                };
                let hours: Vec<f64> = (0..6)
                    .map(|_| {
                        if heavy {
                            0.5 + next() * 0.5
                        } else {
                            next() * 0.45
                        }
                    })
                    .collect();
                t(if next() < 0.5 { "a" } else { "b" }, mem, &hours)
            })
            .collect()
    }

    #[test]
    fn the_bound_never_exceeds_an_exact_search_and_the_packers_hold_the_rules() {
        let cap = 80.0 * GIB;
        for seed in 1..=300 {
            let tenants = fleet(seed);
            for one_ns in [false, true] {
                let best = exact(&tenants, cap, one_ns);
                assert!(
                    bound(&tenants, cap) <= best,
                    "seed {seed}: bound above exact {best}"
                );
                let groups = pack_pinned(&tenants, cap, one_ns);
                assert!(groups.len() >= best, "seed {seed}");
                let mut seen: Vec<usize> = groups.iter().flatten().copied().collect();
                seen.sort_unstable();
                assert_eq!(seen, (0..tenants.len()).collect::<Vec<_>>(), "seed {seed}");
                for g in &groups {
                    assert!(valid(&tenants, g, cap, one_ns), "seed {seed}: {g:?}");
                }
            }
            let (gpus, own) = pack_scheduled(&tenants, cap);
            assert!(gpus >= exact(&tenants, cap, false), "seed {seed}");
            assert!(own <= tenants.len());
        }
    }

    #[test]
    fn complementary_tenants_share_one_gpu_and_a_namespace_splits_a_shared_claim() {
        let cap = 80.0 * GIB;
        // A day-time and a night-time service: their p95s never add past one GPU.
        let day = [0.8, 0.8, 0.1, 0.1];
        let night = [0.1, 0.1, 0.8, 0.8];
        let tenants = vec![t("a", 20.0, &day), t("b", 20.0, &night)];
        assert_eq!(
            pack_pinned(&tenants, cap, false).len(),
            1,
            "consumable capacity"
        );
        assert_eq!(
            pack_pinned(&tenants, cap, true).len(),
            2,
            "one claim, one namespace"
        );
        assert_eq!(bound(&tenants, cap), 1);
        // A scheduler may put the two day-time peaks together: unsafe unless one is alone.
        let three = vec![t("a", 20.0, &day), t("a", 20.0, &day), t("b", 20.0, &night)];
        let (gpus, own) = pack_scheduled(&three, cap);
        assert_eq!((gpus, own), (2, 1));
        assert_eq!(pack_pinned(&three, cap, false).len(), 2);
        // Memory is never shared by time: two 50 GiB tenants never meet.
        let big = vec![t("a", 50.0, &[0.1]), t("a", 50.0, &[0.1])];
        assert_eq!(pack_pinned(&big, cap, false).len(), 2);
        assert_eq!(bound(&big, cap), 2);
    }
}
