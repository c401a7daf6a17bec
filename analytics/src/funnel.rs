//! The utilization funnel: Capacity → Allocated → Active → Effective GPU-hours, waste and cost,
//! grouped by tenant, team, node, GPU model and cluster. The grouping runs in polars over one
//! row per (tenant, GPU, hour) and one per (GPU, hour).

use std::collections::HashMap;

use polars::prelude::*;
use serde::{Deserialize, Serialize};

use crate::Config;
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
    /// SM-weighted use in GPU-equivalent hours: `sm_active` where DCGM reports it, else
    /// `gpu_util` (see `effective_signal`).
    pub effective_gpu_hours: f64,
    /// Allocated − Effective, summed per tenant-hour (never negative per hour).
    pub waste_gpu_hours: f64,
    /// Allocated GPU-hours × price of the model.
    pub cost: f64,
    pub waste_cost: f64,
    /// Effective / Allocated (None without allocation).
    pub effective_ratio: Option<f64>,
    /// "sm_active", "gpu_util", "mixed", or "none" (nothing measurable, e.g. MIG without DCGM).
    pub effective_signal: String,
}

impl FunnelRow {
    /// Nothing observed and nothing allocated: no data for the line's range.
    pub fn is_empty(&self) -> bool {
        self.capacity_gpu_hours.unwrap_or(0.0) == 0.0 && self.allocated_gpu_hours == 0.0
    }
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

/// The team a tenant's rows are grouped under when configuration gives it none.
pub const NO_TEAM: &str = "(no team)";

/// The sums every funnel line is made of.
fn sums() -> [Expr; 8] {
    [
        col("alloc").sum(),
        col("active").sum(),
        col("eff").sum(),
        col("waste").sum(),
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
    let team: HashMap<(&str, &str), &str> = input
        .tenants
        .iter()
        .map(|t| {
            (
                (t.cluster.as_str(), t.key.as_str()),
                t.team.as_deref().unwrap_or(NO_TEAM),
            )
        })
        .collect();
    let model_of = |gpu: &str| gpu_model.get(gpu).copied().unwrap_or("unknown");

    // One row per (tenant, GPU, hour).
    let n: usize = holdings.iter().map(|h| h.rows.len()).sum();
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
        let price = cfg.price_of(model);
        let t = team
            .get(&(h.cluster.as_str(), h.tenant.as_str()))
            .copied()
            .unwrap_or(NO_TEAM);
        for (_, a) in &h.rows {
            let r = RowHours::of(a);
            c_cluster.push(h.cluster.as_str());
            c_node.push(h.node.as_str());
            c_model.push(model);
            c_team.push(t);
            c_tenant.push(h.tenant.as_str());
            c_alloc.push(r.allocated);
            c_active.push(r.active);
            c_eff.push(r.effective);
            c_waste.push((r.allocated - r.effective).max(0.0));
            c_price.push(price);
            c_effn.push(i64::from(a.eff_n));
            c_dcgm.push(i64::from(a.eff_dcgm_n));
        }
    }
    let tenants = df![
        "cluster" => c_cluster, "node" => c_node, "model" => c_model, "team" => c_team,
        "tenant" => c_tenant, "alloc" => c_alloc, "active" => c_active, "eff" => c_eff,
        "waste" => c_waste, "price" => c_price, "eff_n" => c_effn, "eff_dcgm_n" => c_dcgm,
    ]?;

    // One row per (GPU, hour): capacity.
    let (mut g_cluster, mut g_node, mut g_model, mut g_cap) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in &input.gpu_hours {
        g_cluster.push(r.cluster.as_str());
        g_node.push(r.node.as_str());
        g_model.push(model_of(&r.gpu));
        g_cap.push(r.agg.covered_s / 3600.0);
    }
    let gpus =
        df!["cluster" => g_cluster, "node" => g_node, "model" => g_model, "capacity" => g_cap]?;

    // Nodes are grouped per (cluster, node): the same node name in two clusters is two nodes.
    let by = |key: &str, with_capacity: bool| -> PolarsResult<Vec<FunnelRow>> {
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
    };
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
        cost: 0.0,
        waste_cost: 0.0,
        effective_ratio: None,
        effective_signal: "none".into(),
    });
    total.capacity_gpu_hours = Some(
        input
            .gpu_hours
            .iter()
            .map(|r| r.agg.covered_s / 3600.0)
            .sum(),
    );
    Ok(Funnel {
        from_ms: input.from_ms,
        to_ms: input.to_ms,
        currency: cfg.currency.clone(),
        total,
        by_cluster: by("cluster", true)?,
        by_model: by("model", true)?,
        by_node: by("node", true)?,
        by_team: by("team", false)?,
        by_tenant: by("tenant", false)?,
    })
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
                cost: cost[i].unwrap_or(0.0),
                waste_cost: waste_cost[i].unwrap_or(0.0),
                effective_ratio: (allocated > 0.0).then(|| effective / allocated),
                effective_signal: signal(n as i64, d as i64).into(),
            }
        })
        .collect())
}
