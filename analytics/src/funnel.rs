//! The utilization funnel: Capacity → Allocated → Active → Effective GPU-hours, waste and cost,
//! grouped by tenant, team, node, GPU model and cluster. The grouping runs in polars over one
//! row per (tenant, GPU, hour) and one per (GPU, hour).

use std::collections::HashMap;

use polars::prelude::*;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::holdings::{Holding, RowHours, signal};
use crate::input::Input;

/// One line of the funnel.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FunnelRow {
    /// What the line is about: a tenant key, team, node, model or cluster name.
    pub key: String,
    /// The node's cluster, on `by_node` lines (node names are unique only within a cluster,
    /// so nodes are grouped per cluster and node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Hours the GPUs were observed (device groupings only; tenants and teams hold no capacity).
    pub capacity_gpu_hours: Option<f64>,
    /// GPU-hours held by allocations (share × time).
    pub allocated_gpu_hours: f64,
    /// Allocated GPU-hours in which a kernel ran.
    pub active_gpu_hours: f64,
    /// SM-weighted use in GPU-equivalent hours (`sm_active` where DCGM reports it, else
    /// `gpu_util`, see `effective_signal`), each tenant-hour at most its allocation: at every
    /// scope effective ≤ allocated and waste = allocated − effective.
    pub effective_gpu_hours: f64,
    /// Allocated − Effective.
    pub waste_gpu_hours: f64,
    /// Use beyond the allocation, summed per tenant-hour: a time-sliced or MPS tenant using
    /// the time its idle neighbours' replicas leave (effective + borrowed = the use measured).
    #[serde(default)]
    pub borrowed_gpu_hours: f64,
    /// Allocated GPU-hours × price of the model.
    pub cost: f64,
    pub waste_cost: f64,
    /// Effective / Allocated (None without allocation).
    pub effective_ratio: Option<f64>,
    /// "sm_active", "gpu_util", "mixed", or "none" (nothing measurable, e.g. MIG without DCGM).
    pub effective_signal: String,
    /// Energy drawn or charged, and its emissions ([`crate::energy`]); None where no GPU of the
    /// line has energy known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<LineEnergy>,
}

/// The energy of one funnel line ([`crate::energy`] fills it in).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LineEnergy {
    /// kWh drawn (a device line) or charged (a tenant or team line).
    pub kwh: f64,
    /// Of `kwh`, charged while an allocation ran no kernel: energy spent on nothing.
    pub idle_kwh: f64,
    /// Of a device line's `kwh`, charged to no tenant; None on tenant and team lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unallocated_kwh: Option<f64>,
    /// kg CO₂e of `kwh` at the configured grid intensity; None without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub co2e_kg: Option<f64>,
}

impl LineEnergy {
    pub fn add(&mut self, o: &LineEnergy) {
        let sum = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        self.kwh += o.kwh;
        self.idle_kwh += o.idle_kwh;
        self.unallocated_kwh = sum(self.unallocated_kwh, o.unallocated_kwh);
        self.co2e_kg = sum(self.co2e_kg, o.co2e_kg);
    }
}

impl FunnelRow {
    /// Nothing observed and nothing allocated: no data for the line's range.
    pub fn is_empty(&self) -> bool {
        self.capacity_gpu_hours.unwrap_or(0.0) == 0.0 && self.allocated_gpu_hours == 0.0
    }

    /// The share (0–1) of `hours` in which the line's `gpus` were observed: its capacity over
    /// what `gpus` GPUs watched for all of `hours` would hold. 1 where it cannot be told (no
    /// capacity, no GPU, an empty range), so a caller never scales by a share it does not know.
    pub fn observed_share(&self, gpus: i64, hours: f64) -> f64 {
        match self.capacity_gpu_hours {
            Some(c) if gpus > 0 && c > 0.0 && hours > 0.0 => (c / (gpus as f64 * hours)).min(1.0),
            _ => 1.0,
        }
    }

    /// The identities every line holds, whatever its scope: effective ≤ allocated, waste =
    /// allocated − effective, a share of at most 100 %, nothing negative, and waste cost at
    /// most the cost. Returns what is broken (sums are compared to a millionth of a GPU-hour
    /// per GPU-hour, float addition being what it is).
    pub fn identity_error(&self) -> Option<String> {
        let eps = 1e-6 * self.allocated_gpu_hours.max(1.0);
        let (a, e, w) = (
            self.allocated_gpu_hours,
            self.effective_gpu_hours,
            self.waste_gpu_hours,
        );
        let broken = if [a, e, w, self.borrowed_gpu_hours, self.active_gpu_hours]
            .iter()
            .any(|x| !x.is_finite() || *x < -eps)
        {
            "a quantity is negative or not finite"
        } else if e > a + eps {
            "effective exceeds allocated"
        } else if (a - e - w).abs() > eps {
            "waste is not allocated − effective"
        } else if self.active_gpu_hours > a + eps {
            "active exceeds allocated"
        } else if self.effective_ratio.is_some_and(|r| r > 1.0 + 1e-9) {
            "the effective share exceeds 100 %"
        } else if self.waste_cost > self.cost + eps * self.cost.max(1.0) {
            "waste cost exceeds the cost"
        } else {
            return None;
        };
        Some(format!(
            "{:?}: {broken} (allocated {a}, active {}, effective {e}, waste {w}, borrowed {}, share {:?})",
            self.key, self.active_gpu_hours, self.borrowed_gpu_hours, self.effective_ratio
        ))
    }
}

impl FunnelRow {
    /// Adds `other`, the same line's sums over other holdings (another cluster's part of a
    /// fleet analysed one cluster at a time): quantities add up, the share and the signal are
    /// those of the sums.
    fn add(&mut self, other: &FunnelRow) {
        self.capacity_gpu_hours = match (self.capacity_gpu_hours, other.capacity_gpu_hours) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        self.allocated_gpu_hours += other.allocated_gpu_hours;
        self.active_gpu_hours += other.active_gpu_hours;
        self.effective_gpu_hours += other.effective_gpu_hours;
        self.waste_gpu_hours += other.waste_gpu_hours;
        self.borrowed_gpu_hours += other.borrowed_gpu_hours;
        self.cost += other.cost;
        self.waste_cost += other.waste_cost;
        self.energy = match (self.energy, other.energy) {
            (Some(mut a), Some(b)) => {
                a.add(&b);
                Some(a)
            }
            (a, b) => a.or(b),
        };
        self.effective_ratio = (self.allocated_gpu_hours > 0.0)
            .then(|| self.effective_gpu_hours / self.allocated_gpu_hours);
        // What `signal` gives for the summed counts: "none" is no count at all, one signal
        // throughout stays itself, anything else is a mix.
        self.effective_signal = match (
            self.effective_signal.as_str(),
            other.effective_signal.as_str(),
        ) {
            ("none", s) | (s, "none") => s,
            (a, b) if a == b => a,
            _ => "mixed",
        }
        .to_owned();
    }
}

impl FunnelRow {
    /// How this line differs from `other` beyond float addition's last bits (a millionth of a
    /// millionth, relative): its key, cluster, signal or any of its sums. None when they agree.
    pub fn differs_from(&self, other: &FunnelRow) -> Option<String> {
        let same = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1.0);
        let sums = |r: &FunnelRow| {
            [
                r.capacity_gpu_hours.unwrap_or(-1.0),
                r.allocated_gpu_hours,
                r.active_gpu_hours,
                r.effective_gpu_hours,
                r.waste_gpu_hours,
                r.borrowed_gpu_hours,
                r.cost,
                r.waste_cost,
                r.effective_ratio.unwrap_or(-1.0),
                r.energy.map_or(-1.0, |e| e.kwh),
                r.energy.map_or(-1.0, |e| e.idle_kwh),
                r.energy.and_then(|e| e.unallocated_kwh).unwrap_or(-1.0),
                r.energy.and_then(|e| e.co2e_kg).unwrap_or(-1.0),
            ]
        };
        let alike = (&self.key, &self.cluster, &self.effective_signal)
            == (&other.key, &other.cluster, &other.effective_signal)
            && self.capacity_gpu_hours.is_some() == other.capacity_gpu_hours.is_some()
            && sums(self).iter().zip(sums(other)).all(|(a, b)| same(*a, b));
        (!alike).then(|| format!("{self:?}\n  against {other:?}"))
    }
}

/// `into`'s lines and `from`'s, those of the same key (and cluster, on node lines) summed, in
/// the order one grouping of both would give them (key, then cluster).
fn merge_lines(into: &mut Vec<FunnelRow>, from: Vec<FunnelRow>) {
    let mut lines: std::collections::BTreeMap<(String, Option<String>), FunnelRow> = into
        .drain(..)
        .map(|r| ((r.key.clone(), r.cluster.clone()), r))
        .collect();
    for r in from {
        match lines.entry((r.key.clone(), r.cluster.clone())) {
            std::collections::btree_map::Entry::Occupied(mut e) => e.get_mut().add(&r),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(r);
            }
        }
    }
    *into = lines.into_values().collect();
}

/// The funnel over one range.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Funnel {
    pub from_ms: i64,
    pub to_ms: i64,
    pub currency: String,
    pub total: FunnelRow,
    pub by_cluster: Vec<FunnelRow>,
    pub by_model: Vec<FunnelRow>,
    pub by_node: Vec<FunnelRow>,
    pub by_team: Vec<FunnelRow>,
    pub by_tenant: Vec<FunnelRow>,
}

impl Funnel {
    /// Adds the funnel of other clusters over the same range, as one funnel of all their
    /// holdings would read: a model, team or tenant key both name gets one line with the sums.
    pub fn absorb(&mut self, other: Funnel) {
        self.total.add(&other.total);
        merge_lines(&mut self.by_cluster, other.by_cluster);
        merge_lines(&mut self.by_model, other.by_model);
        merge_lines(&mut self.by_node, other.by_node);
        merge_lines(&mut self.by_team, other.by_team);
        merge_lines(&mut self.by_tenant, other.by_tenant);
    }
}

impl Funnel {
    /// Every line: the total, then each grouping's.
    pub fn lines(&self) -> impl Iterator<Item = &FunnelRow> {
        std::iter::once(&self.total).chain(
            [
                &self.by_cluster,
                &self.by_model,
                &self.by_node,
                &self.by_team,
                &self.by_tenant,
            ]
            .into_iter()
            .flatten(),
        )
    }
}

/// The team a tenant's rows are grouped under when configuration gives it none.
pub const NO_TEAM: &str = "(no team)";

/// The sums every funnel line is made of.
fn sums() -> [Expr; 9] {
    [
        col("alloc").sum(),
        col("active").sum(),
        col("eff").sum(),
        col("waste").sum(),
        col("borrowed").sum(),
        (col("alloc") * col("price")).sum().alias("cost"),
        (col("waste") * col("price")).sum().alias("waste_cost"),
        col("eff_n").sum(),
        col("eff_dcgm_n").sum(),
    ]
}

pub fn funnel(input: &Input, holdings: &[Holding], cfg: &Config) -> PolarsResult<Funnel> {
    let gpu_model: HashMap<&str, &str> = input
        .gpus
        .iter()
        .map(|g| (g.uuid.as_str(), g.model.as_str()))
        .collect();
    let model_of = |gpu: &str| gpu_model.get(gpu).copied().unwrap_or("unknown");
    let tenants = tenant_rows(input, holdings, cfg, &model_of)?;
    let gpus = gpu_rows(input, holdings, &model_of)?;
    let by = |key: &str, with_capacity: bool| grouped(&tenants, &gpus, key, with_capacity);
    Ok(Funnel {
        from_ms: input.from_ms,
        to_ms: input.to_ms,
        currency: cfg.currency.clone(),
        total: total(input, &tenants)?,
        by_cluster: by("cluster", true)?,
        by_model: by("model", true)?,
        by_node: by("node", true)?,
        by_team: by("team", false)?,
        by_tenant: by("tenant", false)?,
    })
}

/// Each tenant's team by (cluster, tenant key); a tenant without one is in [`NO_TEAM`].
pub(crate) fn teams_of(input: &Input) -> HashMap<(&str, &str), &str> {
    input
        .tenants
        .iter()
        .map(|t| {
            (
                (t.cluster.as_str(), t.key.as_str()),
                t.team.as_deref().unwrap_or(NO_TEAM),
            )
        })
        .collect()
}

/// One team's use hour by hour: (hour start, allocated GPU-hours, effective GPU-hours), as the
/// funnel counts them (each tenant-hour's effective at most its allocation).
pub type TeamHours = Vec<(i64, f64, f64)>;

/// Every team's [`TeamHours`], the hours in time order: the funnel's team lines spread over
/// the hours they were spent, for a team's trend.
pub fn team_hours(
    input: &Input,
    holdings: &[Holding],
) -> std::collections::BTreeMap<String, TeamHours> {
    let team = teams_of(input);
    let mut by: HashMap<&str, std::collections::BTreeMap<i64, (f64, f64)>> = HashMap::new();
    for h in holdings {
        let t = team
            .get(&(h.cluster.as_str(), h.tenant.as_str()))
            .copied()
            .unwrap_or(NO_TEAM);
        let hours = by.entry(t).or_default();
        for (hour, a) in &h.rows {
            let r = RowHours::of(a);
            let cell = hours.entry(*hour).or_default();
            cell.0 += r.allocated;
            cell.1 += r.effective;
        }
    }
    by.into_iter()
        .map(|(t, hours)| {
            let series = hours.into_iter().map(|(h, (a, e))| (h, a, e)).collect();
            (t.to_owned(), series)
        })
        .collect()
}

/// One row per holding (a tenant on a GPU), its hours summed.
fn tenant_rows<'a>(
    input: &'a Input,
    holdings: &'a [Holding],
    cfg: &Config,
    model_of: &dyn Fn(&str) -> &'a str,
) -> PolarsResult<DataFrame> {
    let team = teams_of(input);
    let sharing: HashMap<&str, model::inventory::Sharing> = input
        .gpus
        .iter()
        .map(|g| (g.uuid.as_str(), g.sharing))
        .collect();
    let sharing_of = |gpu: &str| sharing.get(gpu).copied().unwrap_or_default();
    // One row per holding, its hours summed: every grouping key is the holding's, so the
    // group sums are the same, and the frame is a holding's size, not a tenant-hour's (two
    // million rows a week at 10,000 GPUs).
    let n = holdings.len();
    let mut c_borrowed = Vec::with_capacity(n);
    let (mut c_cluster, mut c_node, mut c_model, mut c_team, mut c_tenant) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut c_alloc, mut c_active, mut c_eff, mut c_waste, mut c_price, mut c_effn, mut c_dcgm) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for h in holdings {
        let model = model_of(&h.gpu);
        let t = team
            .get(&(h.cluster.as_str(), h.tenant.as_str()))
            .copied()
            .unwrap_or(NO_TEAM);
        let (mut alloc, mut active, mut eff, mut waste, mut borrowed) = (0.0, 0.0, 0.0, 0.0, 0.0);
        let (mut eff_n, mut dcgm_n) = (0i64, 0i64);
        for (_, a) in &h.rows {
            let r = RowHours::of(a);
            alloc += r.allocated;
            active += r.active;
            eff += r.effective;
            waste += r.allocated - r.effective;
            borrowed += r.used - r.effective;
            eff_n += i64::from(a.eff_n);
            dcgm_n += i64::from(a.eff_dcgm_n);
        }
        c_cluster.push(h.cluster.as_str());
        c_node.push(h.node.as_str());
        c_model.push(model);
        c_team.push(t);
        c_tenant.push(h.tenant.as_str());
        c_alloc.push(alloc);
        c_active.push(active);
        c_eff.push(eff);
        c_waste.push(waste);
        c_borrowed.push(borrowed);
        c_price.push(cfg.price_for(&h.cluster, model, sharing_of(&h.gpu)));
        c_effn.push(eff_n);
        c_dcgm.push(dcgm_n);
    }
    df![
        "cluster" => c_cluster, "node" => c_node, "model" => c_model, "team" => c_team,
        "tenant" => c_tenant, "alloc" => c_alloc, "active" => c_active, "eff" => c_eff,
        "waste" => c_waste, "borrowed" => c_borrowed, "price" => c_price, "eff_n" => c_effn, "eff_dcgm_n" => c_dcgm,
    ]
}

/// One row per GPU series: its capacity, the hours summed.
fn gpu_rows<'a>(
    input: &'a Input,
    holdings: &'a [Holding],
    model_of: &dyn Fn(&str) -> &'a str,
) -> PolarsResult<DataFrame> {
    let (mut g_cluster, mut g_node, mut g_model, mut g_cap) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for s in &input.gpu_hours {
        g_cluster.push(s.cluster.as_str());
        g_node.push(s.node.as_str());
        g_model.push(model_of(&s.gpu));
        g_cap.push(
            s.hours
                .iter()
                .map(|(_, agg)| agg.covered_s / 3600.0)
                .sum::<f64>(),
        );
    }
    // The capacity side of a device line lists every GPU its tenants' rows name too (with no
    // capacity of their own when the GPU has no rollups in the range), so that every tenant
    // row lands in exactly one line of each grouping.
    for h in holdings {
        g_cluster.push(h.cluster.as_str());
        g_node.push(h.node.as_str());
        g_model.push(model_of(&h.gpu));
        g_cap.push(0.0);
    }
    df!["cluster" => g_cluster, "node" => g_node, "model" => g_model, "capacity" => g_cap]
}

/// The funnel grouped by `key`; device groupings (`with_capacity`) join the GPUs' capacity.
/// Nodes are grouped per (cluster, node): the same node name in two clusters is two nodes.
fn grouped(
    tenants: &DataFrame,
    gpus: &DataFrame,
    key: &str,
    with_capacity: bool,
) -> PolarsResult<Vec<FunnelRow>> {
    let keys: Vec<Expr> = if key == "node" {
        vec![col("cluster"), col("node")]
    } else {
        vec![col(key)]
    };
    let sums = tenants.clone().lazy().group_by(keys.clone()).agg(sums());
    let joined = if with_capacity {
        let cap = gpus
            .clone()
            .lazy()
            .group_by(keys.clone())
            .agg([col("capacity").sum()]);
        cap.join(
            sums,
            keys.clone(),
            keys.clone(),
            JoinArgs::new(JoinType::Left),
        )
    } else {
        sums.with_column(lit(NULL).cast(DataType::Float64).alias("capacity"))
    };
    let sort: Vec<PlSmallStr> = if key == "node" {
        vec!["node".into(), "cluster".into()]
    } else {
        vec![key.into()]
    };
    let df = joined
        .sort(sort, SortMultipleOptions::default())
        .collect()?;
    let mut out = rows(&df, key)?;
    if key == "node" {
        let clusters = df.column("cluster")?.str()?.clone();
        for (i, r) in out.iter_mut().enumerate() {
            r.cluster = clusters.get(i).map(str::to_owned);
        }
    }
    Ok(out)
}

/// The whole funnel on one line, with the capacity of every GPU observed.
fn total(input: &Input, tenants: &DataFrame) -> PolarsResult<FunnelRow> {
    let total_df = tenants
        .clone()
        .lazy()
        .with_column(lit("all").alias("all"))
        .group_by([col("all")])
        .agg(sums())
        .with_column(lit(NULL).cast(DataType::Float64).alias("capacity"))
        .collect()?;
    let mut total = rows(&total_df, "all")?.pop().unwrap_or_else(|| FunnelRow {
        key: "all".into(),
        cluster: None,
        capacity_gpu_hours: None,
        allocated_gpu_hours: 0.0,
        active_gpu_hours: 0.0,
        effective_gpu_hours: 0.0,
        waste_gpu_hours: 0.0,
        borrowed_gpu_hours: 0.0,
        cost: 0.0,
        waste_cost: 0.0,
        effective_ratio: None,
        effective_signal: "none".into(),
        energy: None,
    });
    total.capacity_gpu_hours = Some(
        input
            .gpu_hours
            .iter()
            .flat_map(|s| &s.hours)
            .map(|(_, agg)| agg.covered_s / 3600.0)
            .sum(),
    );
    Ok(total)
}

fn rows(df: &DataFrame, key: &str) -> PolarsResult<Vec<FunnelRow>> {
    let keys = df.column(key)?.str()?.clone();
    let f = |name: &str| -> PolarsResult<Vec<Option<f64>>> {
        Ok(df
            .column(name)?
            .cast(&DataType::Float64)?
            .f64()?
            .iter()
            .collect())
    };
    let (cap, alloc, active, eff, waste, cost, waste_cost, effn, dcgm) = (
        f("capacity")?,
        f("alloc")?,
        f("active")?,
        f("eff")?,
        f("waste")?,
        f("cost")?,
        f("waste_cost")?,
        f("eff_n")?,
        f("eff_dcgm_n")?,
    );
    let borrowed = f("borrowed")?;
    Ok((0..df.height())
        .map(|i| {
            let allocated = alloc[i].unwrap_or(0.0);
            let effective = eff[i].unwrap_or(0.0);
            let (n, d) = (effn[i].unwrap_or(0.0), dcgm[i].unwrap_or(0.0));
            FunnelRow {
                key: keys.get(i).unwrap_or_default().to_owned(),
                cluster: None,
                capacity_gpu_hours: cap[i],
                allocated_gpu_hours: allocated,
                active_gpu_hours: active[i].unwrap_or(0.0),
                effective_gpu_hours: effective,
                waste_gpu_hours: waste[i].unwrap_or(0.0),
                borrowed_gpu_hours: borrowed[i].unwrap_or(0.0),
                cost: cost[i].unwrap_or(0.0),
                waste_cost: waste_cost[i].unwrap_or(0.0),
                effective_ratio: (allocated > 0.0).then(|| effective / allocated),
                effective_signal: signal(n as i64, d as i64).into(),
                energy: None,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use model::hour_series::TenantHour;
    use model::rollup::TenantAgg;

    use super::*;
    use crate::holdings::RowHours;
    use crate::input::{GpuRef, TenantRef};

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Random fleets — whole, MIG and time-sliced GPUs, tenants using less than, all of or
    /// (on shared GPUs) more than their allocation, hours partly covered, some without a
    /// measurable signal — hold the identities at every scope: tenant, team, node, model,
    /// cluster, fleet, and per GPU (a MIG instance is one tenant's holding on its GPU).
    #[test]
    fn every_scope_adds_up() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        for case in 0..200 {
            let mut input = Input::default();
            let mut holdings = Vec::new();
            let gpus = 1 + (rng.next() * 12.0) as usize;
            for g in 0..gpus {
                use model::inventory::Sharing;
                let sharing = [
                    Sharing::Exclusive,
                    Sharing::Mig,
                    Sharing::TimeSlicing,
                    Sharing::Mps,
                ][(rng.next() * 4.0) as usize];
                let node = format!("n{}", g / 4);
                let uuid = format!("GPU-{case}-{g}");
                input.gpus.push(GpuRef {
                    cluster: ["a", "b"][g % 2].into(),
                    node: node.clone(),
                    uuid: uuid.clone(),
                    index: g as i64,
                    model: ["NVIDIA H100 80GB HBM3", "NVIDIA L40S"][g % 2].into(),
                    memory_total_bytes: 80 << 30,
                    sharing,
                    replicas: 4,
                    mig: Vec::new(),
                });
                let (tenants, share) = match sharing {
                    Sharing::Exclusive => (1, 1.0),
                    Sharing::Mig => (3, 2.0 / 7.0),
                    _ => (1 + (rng.next() * 4.0) as usize, 0.25),
                };
                for t in 0..tenants {
                    let tenant = format!("t{}", (rng.next() * 9.0) as usize + 10 * t);
                    let rows: Vec<(i64, TenantHour)> = (0..1 + (rng.next() * 30.0) as i64)
                        .map(|hour| {
                            let samples = 1 + (rng.next() * 3600.0) as i32;
                            let alloc_n = (samples as f64 * rng.next().max(0.2)) as i32;
                            // Up to the whole GPU per sample: a replica may use what its
                            // neighbours leave.
                            let use_per_sample =
                                if matches!(sharing, Sharing::Exclusive | Sharing::Mig) {
                                    share * rng.next()
                                } else {
                                    rng.next()
                                };
                            let measured = rng.next() > 0.1;
                            let agg = TenantHour {
                                samples,
                                covered_s: 3600.0 * rng.next().max(0.05),
                                alloc_n,
                                alloc_share_sum: f64::from(alloc_n) * share,
                                active_n: (f64::from(samples) * rng.next()) as i32,
                                eff_n: if measured { samples } else { 0 },
                                eff_sum: if measured {
                                    f64::from(samples) * use_per_sample
                                } else {
                                    0.0
                                },
                                ..TenantHour::default()
                            };
                            (hour * 3_600_000, agg)
                        })
                        .collect();
                    holdings.push(Holding {
                        cluster: ["a", "b"][g % 2].into(),
                        node: node.clone(),
                        gpu: uuid.clone(),
                        tenant: tenant.clone(),
                        total: TenantAgg::default(),
                        rows,
                    });
                    input.tenants.push(TenantRef {
                        cluster: ["a", "b"][g % 2].into(),
                        key: tenant,
                        kind: "pod".into(),
                        name: String::new(),
                        team: (rng.next() > 0.3).then(|| format!("team{}", g % 3)),
                        nodes: Vec::new(),
                    });
                }
            }
            let f = funnel(&input, &holdings, &Config::default()).unwrap();
            let scopes = [
                &f.by_cluster,
                &f.by_model,
                &f.by_node,
                &f.by_team,
                &f.by_tenant,
            ];
            for row in scopes.iter().flat_map(|s| s.iter()).chain([&f.total]) {
                assert_eq!(row.identity_error(), None, "case {case}");
            }
            // Per GPU (and so per MIG instance: one holding each), from the same rows.
            let mut per_gpu: BTreeMap<&str, FunnelRow> = BTreeMap::new();
            for h in &holdings {
                let g = per_gpu.entry(h.gpu.as_str()).or_default();
                for (_, a) in &h.rows {
                    let r = RowHours::of(a);
                    g.allocated_gpu_hours += r.allocated;
                    g.active_gpu_hours += r.active;
                    g.effective_gpu_hours += r.effective;
                    g.waste_gpu_hours += r.allocated - r.effective;
                    g.borrowed_gpu_hours += r.used - r.effective;
                }
                assert!(g.identity_error().is_none(), "case {case}: {g:?}");
            }
            // Every scope partitions the same rows: its lines sum to the fleet's.
            for (k, scope) in scopes.iter().enumerate() {
                let sum: f64 = scope.iter().map(|r| r.waste_gpu_hours).sum();
                assert!(
                    (sum - f.total.waste_gpu_hours).abs()
                        < 1e-6 * f.total.allocated_gpu_hours.max(1.0),
                    "case {case}, scope {k}: {sum} against {}",
                    f.total.waste_gpu_hours
                );
            }
            // One cluster's funnel absorbing the other's reads as the fleet's (how the
            // collector puts together a fleet analysed one cluster at a time).
            let part = |c: &str| {
                let input = Input {
                    gpus: input
                        .gpus
                        .iter()
                        .filter(|g| g.cluster == c)
                        .cloned()
                        .collect(),
                    tenants: input
                        .tenants
                        .iter()
                        .filter(|t| t.cluster == c)
                        .cloned()
                        .collect(),
                    ..Input::default()
                };
                let hs: Vec<Holding> = holdings
                    .iter()
                    .filter(|h| h.cluster == c)
                    .cloned()
                    .collect();
                funnel(&input, &hs, &Config::default()).unwrap()
            };
            let mut merged = part("a");
            merged.absorb(part("b"));
            assert_eq!(f.lines().count(), merged.lines().count(), "case {case}");
            for (w, m) in f.lines().zip(merged.lines()) {
                assert_eq!(w.differs_from(m), None, "case {case}");
            }
        }
    }

    #[test]
    fn a_broken_line_is_named() {
        let row = FunnelRow {
            key: "t".into(),
            allocated_gpu_hours: 10.0,
            effective_gpu_hours: 12.0,
            waste_gpu_hours: 0.0,
            effective_ratio: Some(1.2),
            ..FunnelRow::default()
        };
        assert!(
            row.identity_error()
                .unwrap()
                .contains("effective exceeds allocated")
        );
        let row = FunnelRow {
            effective_gpu_hours: 4.0,
            effective_ratio: Some(0.4),
            ..row
        };
        assert!(
            row.identity_error()
                .unwrap()
                .contains("waste is not allocated − effective")
        );
    }
}
