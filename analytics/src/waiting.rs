//! waiting_demand: work that waited for GPUs set against the GPUs of its pool that were held
//! idle or free at the same time (docs/analytics.md defines every quantity).
//!
//! Per cluster, pool (the GPU product the work asks for, or every GPU of the cluster when it
//! names none) and waiting team, hour by hour over the window:
//! - *waiting*: the GPU-equivalents waiting × the part of the hour they waited;
//! - *idle held*: GPU-equivalents held by holdings in an idle run (the idle_allocation rule);
//! - *reclaimable*: `min(waiting, idle held)` — the waiting work reclaiming the idle holdings
//!   would have let run;
//! - *fragmented*: a pod asking for k whole GPUs while the pool had k free GPUs in total but no
//!   node with k free.

use crate::measure::Measure;
use model::inventory::Sharing;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use model::rollup::HOUR_MS;

use crate::finding::{DemandHour, Evidence, Finding, FindingKind, Severity, finding_id};
use crate::findings::{Ctx, activity_evidence};
use crate::holdings::{Holding, idle_runs};
use crate::input::{GpuRef, Waiting};

/// The whole-GPU resource of the NVIDIA device plugin.
pub const WHOLE_GPU: &str = "nvidia.com/gpu";
/// The time-sliced resource the device plugin advertises with `renameByDefault`.
pub const SHARED_GPU: &str = "nvidia.com/gpu.shared";
/// The prefix of the MIG resources (`mixed` strategy): `nvidia.com/mig-1g.10gb`.
pub const MIG_PREFIX: &str = "nvidia.com/mig-";

/// Idle holdings a finding names, the largest first.
const NAMED_HOLDERS: usize = 5;

/// GPU-equivalents one unit of `resource` stands for: a whole GPU 1, a MIG instance its
/// compute slices of seven, a time-slice replica 1/`replicas` (the most replicas any
/// time-sliced GPU of the cluster advertises). `None`: not a GPU resource.
pub fn unit_share(resource: &str, replicas: i64) -> Option<f64> {
    Some(match Class::of(resource)? {
        Class::Whole => 1.0,
        Class::Shared => 1.0 / replicas.max(1) as f64,
        Class::Mig => f64::from(model::mig::slice_share(model::mig::compute_slices(
            resource.strip_prefix(MIG_PREFIX)?,
        ))),
    })
}

/// The kind of GPU a resource is served by: reclaiming a MIG slice frees nothing for a pod
/// that wants whole GPUs, so each waits on its own GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// `nvidia.com/gpu`: GPUs not split by MIG (the device plugin advertises time-slice and
    /// MPS replicas under this name too unless it renames them).
    Whole,
    /// `nvidia.com/gpu.shared`: time-sliced or MPS GPUs.
    Shared,
    /// `nvidia.com/mig-…`: GPUs split by MIG.
    Mig,
}

impl Class {
    pub fn of(resource: &str) -> Option<Class> {
        if resource == WHOLE_GPU {
            Some(Class::Whole)
        } else if resource == SHARED_GPU {
            Some(Class::Shared)
        } else {
            resource.strip_prefix(MIG_PREFIX).map(|_| Class::Mig)
        }
    }

    /// Whether a GPU in `sharing` mode serves this class.
    pub fn served_by(self, sharing: Sharing) -> bool {
        match self {
            Class::Whole => sharing != Sharing::Mig,
            Class::Shared => sharing.by_time(),
            Class::Mig => sharing == Sharing::Mig,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Class::Whole => "whole GPUs",
            Class::Shared => "shared GPUs",
            Class::Mig => "MIG instances",
        }
    }
}

/// Whether a GPU of NVML product `model` is the product a `nvidia.com/gpu.product` label value
/// names. GPU Feature Discovery writes the product with dashes for spaces and may add
/// `-SHARED` (time-slicing, `renameByDefault`) or `-MIG-<profile>` (the `single` strategy).
pub fn product_matches(model: &str, product: &str) -> bool {
    let label = model.trim().replace(' ', "-");
    let wanted = product
        .strip_suffix("-SHARED")
        .unwrap_or(product)
        .split("-MIG-")
        .next()
        .unwrap_or(product);
    label.eq_ignore_ascii_case(wanted)
}

/// GPU-equivalents as a summary says them: tenths, hundredths below one.
fn gpus_text(x: f64) -> String {
    if x < 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.1}")
    }
}

/// One pool's GPUs: by node, and the set of them.
struct Pool<'a> {
    label: String,
    /// The product label value it stands for (`None`: every GPU of the cluster).
    product: Option<&'a str>,
    class: Class,
    by_node: BTreeMap<&'a str, Vec<&'a str>>,
    gpus: HashSet<&'a str>,
}

impl<'a> Pool<'a> {
    fn of(cluster: &str, product: Option<&'a str>, class: Class, gpus: &'a [GpuRef]) -> Pool<'a> {
        let mut by_node: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let mut models = Vec::new();
        for g in gpus
            .iter()
            .filter(|g| g.cluster == cluster && class.served_by(g.sharing))
        {
            if product.is_none_or(|p| product_matches(&g.model, p)) {
                by_node.entry(&g.node).or_default().push(&g.uuid);
                models.push(g.model.as_str());
            }
        }
        let label = match product {
            None => format!("any GPU ({})", class.label()),
            Some(p) => format!("{} ({})", models.first().map_or(p, |m| *m), class.label()),
        };
        let gpus = by_node.values().flatten().copied().collect();
        Pool {
            label,
            product,
            class,
            by_node,
            gpus,
        }
    }
}

/// What one team's waiting work in one pool adds up to.
#[derive(Default)]
struct Tally<'a> {
    items: Vec<&'a Waiting>,
    /// Hour → GPU-hours waited in it.
    waiting: BTreeMap<i64, f64>,
    /// GPU-hours waited by pods that could not fit on one node though enough GPUs were free.
    fragmented: f64,
    peak_gpus: f64,
}

/// The hours of `[from, to)`: (hour start, the part of `[from, to)` inside it, in hours).
fn hours_of(from: i64, to: i64) -> impl Iterator<Item = (i64, f64)> {
    let first = from.div_euclid(HOUR_MS) * HOUR_MS;
    (0..)
        .map(move |i| first + i * HOUR_MS)
        .take_while(move |h| *h < to)
        .map(move |h| {
            let inside = (to.min(h + HOUR_MS) - from.max(h)).max(0);
            (h, inside as f64 / HOUR_MS as f64)
        })
}

/// Idle GPU-hours by hour and by holding, of the holdings in idle runs (the same runs
/// idle_allocation reports), clipped to the window.
fn idle_by_hour<'h>(ctx: &Ctx, holdings: &'h [Holding]) -> Vec<(&'h Holding, BTreeMap<i64, f64>)> {
    let min_s = ctx.cfg.idle_min.as_secs_f64();
    let (from, to) = (ctx.input.from_ms, ctx.input.to_ms);
    holdings
        .iter()
        .filter(|h| h.total.alloc_n > 0)
        .filter_map(|h| {
            let share = h.share();
            let mut by_hour: BTreeMap<i64, f64> = BTreeMap::new();
            for run in idle_runs(&h.rows, HOUR_MS, min_s) {
                for (hour, part) in hours_of(run.from_ms.max(from), run.to_ms.min(to)) {
                    *by_hour.entry(hour).or_default() += part * share;
                }
            }
            (!by_hour.is_empty()).then_some((h, by_hour))
        })
        .collect()
}

/// GPUs with an allocation in each hour (a GPU anyone holds is not free).
fn allocated_by_hour(holdings: &[Holding]) -> HashMap<i64, HashSet<&str>> {
    let mut m: HashMap<i64, HashSet<&str>> = HashMap::new();
    for h in holdings {
        for (hour, a) in &h.rows {
            if a.alloc_n > 0 {
                m.entry(*hour).or_default().insert(h.gpu.as_str());
            }
        }
    }
    m
}

/// Whether a pod asking for `k` whole GPUs meets fragmentation in `hour`: the pool has `k`
/// free GPUs in total but no node has `k` free.
fn fragmented(pool: &Pool, allocated: Option<&HashSet<&str>>, k: i64) -> bool {
    if k < 2 {
        return false;
    }
    let free = |gpus: &Vec<&str>| {
        gpus.iter()
            .filter(|g| allocated.is_none_or(|a| !a.contains(**g)))
            .count() as i64
    };
    let per_node: Vec<i64> = pool.by_node.values().map(free).collect();
    per_node.iter().sum::<i64>() >= k && per_node.iter().all(|&f| f < k)
}

/// The waiting_demand findings of the window.
pub fn waiting_demand(ctx: &Ctx, holdings: &[Holding]) -> Vec<Finding> {
    let input = ctx.input;
    if input.waiting.is_empty() {
        return Vec::new();
    }
    let (from, to) = (input.from_ms, input.to_ms);
    let replicas: HashMap<&str, i64> = input
        .gpus
        .iter()
        .filter(|g| g.sharing == Sharing::TimeSlicing)
        .fold(HashMap::new(), |mut m, g| {
            let r = m.entry(g.cluster.as_str()).or_insert(1);
            *r = (*r).max(g.replicas);
            m
        });
    let allocated = allocated_by_hour(holdings);
    let mut pools: BTreeMap<(&str, Option<&str>, Class), Pool> = BTreeMap::new();
    let mut tallies: BTreeMap<(&str, Option<&str>, Class, &str), Tally> = BTreeMap::new();
    for w in &input.waiting {
        let replicas = replicas.get(w.cluster.as_str()).copied().unwrap_or(1);
        let (Some(unit), Some(class)) = (unit_share(&w.resource, replicas), Class::of(&w.resource))
        else {
            continue;
        };
        let gpus = unit * w.count.max(0) as f64;
        let (w_from, w_to) = (w.from_ms.max(from), w.to_ms.min(to));
        if gpus <= 0.0 || w_to <= w_from {
            continue;
        }
        let product = w.product.as_deref();
        let pool = pools
            .entry((&w.cluster, product, class))
            .or_insert_with(|| Pool::of(&w.cluster, product, class, &input.gpus));
        let t = tallies
            .entry((&w.cluster, product, class, &w.team))
            .or_default();
        t.items.push(w);
        t.peak_gpus = t.peak_gpus.max(gpus);
        for (hour, part) in hours_of(w_from, w_to) {
            *t.waiting.entry(hour).or_default() += gpus * part;
            if w.resource == WHOLE_GPU && fragmented(pool, allocated.get(&hour), w.count) {
                t.fragmented += gpus * part;
            }
        }
    }
    let idle = idle_by_hour(ctx, holdings);
    tallies
        .into_iter()
        .filter_map(|((cluster, product, class, team), t)| {
            let pool = &pools[&(cluster, product, class)];
            finding(ctx, pool, cluster, team, &t, &idle)
        })
        .collect()
}

/// The pool's idle holdings in the hours a team's work waited: GPU-hours by hour, and by
/// holding (most first).
fn idle_beside<'h>(
    pool: &Pool,
    cluster: &str,
    t: &Tally,
    idle: &'h [(&'h Holding, BTreeMap<i64, f64>)],
) -> (BTreeMap<i64, f64>, Vec<(&'h Holding, f64)>) {
    let mut in_hour: BTreeMap<i64, f64> = BTreeMap::new();
    let mut by_holder: Vec<(&Holding, f64)> = Vec::new();
    for (h, hours) in idle
        .iter()
        .filter(|(h, _)| h.cluster == cluster && pool.gpus.contains(h.gpu.as_str()))
    {
        let during: f64 = hours
            .iter()
            .filter(|(hour, _)| t.waiting.contains_key(hour))
            .map(|(hour, v)| {
                *in_hour.entry(*hour).or_default() += v;
                v
            })
            .sum();
        if during > 0.0 {
            by_holder.push((h, during));
        }
    }
    by_holder.sort_by(|a, b| {
        b.1.total_cmp(&a.1).then_with(|| {
            (&a.0.node, &a.0.gpu, &a.0.tenant).cmp(&(&b.0.node, &b.0.gpu, &b.0.tenant))
        })
    });
    (in_hour, by_holder)
}

/// What a team's waiting work in a pool adds up to, in GPU-hours (and money).
struct Figures {
    waited: f64,
    peak: f64,
    idle_held: f64,
    reclaimable: f64,
    cost: f64,
}

/// The finding's summary: what waited, what was idle meanwhile and who held it, fragmentation,
/// and the scheduler's reasons.
fn summary(
    ctx: &Ctx,
    pool: &Pool,
    team: &str,
    t: &Tally,
    n: &Figures,
    named: &[&(&Holding, f64)],
) -> String {
    let what = match t.items.as_slice() {
        [one] => format!("{} ({})", one.name, one.resource),
        items => {
            let pods = items.iter().filter(|w| w.source == "pod").count();
            let plural =
                |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
            match (pods, items.len() - pods) {
                (p, 0) => plural(p, "pod"),
                (0, o) => plural(o, "Kueue workload"),
                (p, o) => format!("{} and {}", plural(p, "pod"), plural(o, "Kueue workload")),
            }
        }
    };
    let mut s = format!(
        "team {team}: {what} waited {:.1} GPU-hours for {} (up to {} GPUs at once)",
        n.waited,
        pool.label,
        gpus_text(n.peak)
    );
    if n.idle_held > 0.0 {
        let holders: Vec<String> = named
            .iter()
            .map(|(h, _)| {
                format!(
                    "{} on {}",
                    ctx.name(&h.cluster, &h.tenant),
                    ctx.gpu_label(&h.gpu)
                )
            })
            .collect();
        s.push_str(&format!(
            " while the pool's GPUs were held idle for {:.1} GPU-hours in those hours; reclaiming {} would have let {:.1} GPU-hours run ({:.0} {})",
            n.idle_held,
            holders.join(", "),
            n.reclaimable,
            n.cost,
            ctx.cfg.currency
        ));
    } else {
        s.push_str("; no GPU of the pool was held idle meanwhile");
    }
    if t.fragmented > 0.0 {
        s.push_str(&format!(
            "; {:.1} GPU-hours waited while enough GPUs were free in total but not on one node (fragmentation)",
            t.fragmented
        ));
    }
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for w in &t.items {
        let r = if w.reason.is_empty() {
            "no reason given"
        } else {
            w.reason.as_str()
        };
        *reasons.entry(r).or_default() += 1;
    }
    let reasons: Vec<String> = reasons.iter().map(|(r, k)| format!("{r} ×{k}")).collect();
    s.push_str(&format!("; scheduler: {}", reasons.join(", ")));
    s
}

fn finding(
    ctx: &Ctx,
    pool: &Pool,
    cluster: &str,
    team: &str,
    t: &Tally,
    idle: &[(&Holding, BTreeMap<i64, f64>)],
) -> Option<Finding> {
    let waited: f64 = t.waiting.values().sum();
    if waited < ctx.cfg.waiting_min_gpu_hours || waited <= 0.0 {
        return None;
    }
    let (idle_in_hour, by_holder) = idle_beside(pool, cluster, t, idle);
    let reclaimable: f64 = t
        .waiting
        .iter()
        .map(|(hour, w)| w.min(idle_in_hour.get(hour).copied().unwrap_or(0.0)))
        .sum();
    let n = Figures {
        waited,
        peak: t.waiting.values().fold(0.0, |a: f64, b| a.max(*b)),
        idle_held: idle_in_hour.values().sum(),
        reclaimable,
        cost: reclaimable * ctx.cfg.price_of(&pool.label),
    };
    let named: Vec<&(&Holding, f64)> = by_holder.iter().take(NAMED_HOLDERS).collect();
    let first = t
        .waiting
        .keys()
        .next()
        .copied()
        .unwrap_or(ctx.input.from_ms);
    let last = t
        .waiting
        .keys()
        .next_back()
        .map_or(ctx.input.to_ms, |h| h + HOUR_MS)
        .min(ctx.input.to_ms);
    let severity = if n.reclaimable >= 24.0 {
        Severity::Critical
    } else if n.reclaimable >= 1.0 || t.fragmented >= 1.0 {
        Severity::Warning
    } else {
        Severity::Info
    };
    let subject = format!(
        "{cluster}/{}/{}/{team}",
        pool.product.unwrap_or("*"),
        pool.class.label()
    );
    let metrics = BTreeMap::from([
        (Measure::WaitingGpuHours, n.waited),
        (Measure::WaitingItems, t.items.len() as f64),
        (Measure::WaitingGpusPeak, n.peak),
        (Measure::LargestRequestGpus, t.peak_gpus),
        (Measure::IdleHeldGpuHours, n.idle_held),
        (Measure::ReclaimableGpuHours, n.reclaimable),
        (Measure::ReclaimableCost, n.cost),
        (Measure::FragmentedGpuHours, t.fragmented),
        (Measure::IdleHoldings, by_holder.len() as f64),
    ]);
    Some(Finding {
        id: finding_id(FindingKind::WaitingDemand, &subject, ctx.input.from_ms),
        kind: FindingKind::WaitingDemand,
        severity,
        cluster: cluster.to_owned(),
        node: String::new(),
        gpu: None,
        tenants: named.iter().map(|(h, _)| h.tenant.clone()).collect(),
        team: Some(team.to_owned()),
        pool: Some(pool.label.clone()),
        from_ms: first,
        to_ms: last,
        signal:
            "GPU requests of pending pods and unadmitted Kueue workloads (Kubernetes API) against idle holdings (kernel activity)"
                .into(),
        reason: None,
        summary: summary(ctx, pool, team, t, &n, &named),
        metrics,
        evidence: evidence(ctx, pool, cluster, &named, first, last),
        demand_hours: t
            .waiting
            .iter()
            .map(|(hour, w)| DemandHour {
                hour_ms: *hour,
                waiting_gpus: *w,
                idle_gpus: idle_in_hour.get(hour).copied().unwrap_or(0.0),
            })
            .collect(),
    })
}

/// What a waiting_demand finding charts: its idle holders' activity, or — when no GPU of the
/// pool was held idle — how busy the pool's nodes were while the work waited.
fn evidence(
    ctx: &Ctx,
    pool: &Pool,
    cluster: &str,
    named: &[&(&Holding, f64)],
    first: i64,
    last: i64,
) -> Vec<Evidence> {
    if named.is_empty() {
        // A pool of no GPU yet (work waiting for MIG instances where no GPU runs MIG): the
        // nodes of its product.
        let nodes: BTreeSet<&str> = if pool.by_node.is_empty() {
            ctx.input
                .gpus
                .iter()
                .filter(|g| g.cluster == cluster)
                .filter(|g| pool.product.is_none_or(|p| product_matches(&g.model, p)))
                .map(|g| g.node.as_str())
                .collect()
        } else {
            pool.by_node.keys().copied().collect()
        };
        return nodes
            .into_iter()
            .take(NAMED_HOLDERS)
            .map(|node| {
                Evidence::new(
                    format!("{node} — GPU utilization while the work waited"),
                    "gpu_util",
                    format!("node:{node}"),
                    first,
                    last,
                )
            })
            .collect();
    }
    named
        .iter()
        .map(|(h, _)| Evidence {
            label: format!("{} — idle holder", ctx.name(&h.cluster, &h.tenant)),
            ..activity_evidence(h, first, last)
        })
        .collect()
}

#[cfg(test)]
mod tests;
