//! Demand forecast per pool and team: allocated, used and waiting GPU-equivalents hour by hour
//! for the weeks ahead, each with the error the same model made when it was fitted a while
//! earlier and asked about what then followed ([`accuracy`]), and for each pool when it runs
//! out of GPUs at the forecast. The model is [`seasonal`]; docs/analytics.md ("Demand
//! forecast") says it in words.

pub mod accuracy;
pub mod projection;
pub mod run_out;
pub mod seasonal;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use model::rollup::HOUR_MS;

use crate::input::{GpuRef, Waiting};
use crate::waiting::{Class, product_matches, unit_share};
pub use accuracy::Accuracy;
use model::inventory::Sharing;
pub use projection::{Point, Projection, Quantity};
pub use run_out::RunOut;
pub use seasonal::Seasonal;

/// The most weeks a forecast looks ahead.
pub const MAX_WEEKS: usize = 4;

/// One hour of a team's use of a pool, as the store sums it.
pub use model::hour_series::UseHour;

/// What a forecast is made from: the hours of use and the waiting work of the history, and
/// the fleet's GPUs now (a pool's capacity).
#[derive(Debug, Clone, Default)]
pub struct History {
    pub from_ms: i64,
    pub to_ms: i64,
    pub hours: Vec<UseHour>,
    pub waiting: Vec<Waiting>,
    pub gpus: Vec<GpuRef>,
}

/// What a forecast is of.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Scope {
    /// A pool: a cluster's GPUs of one model.
    Pool { cluster: String, model: String },
    /// A team, over every pool.
    Team { team: String },
}

impl Scope {
    pub fn label(&self) -> String {
        match self {
            Scope::Pool { cluster, model } => format!("{cluster} / {model}"),
            Scope::Team { team } => team.clone(),
        }
    }
}

/// One pool's or team's forecast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    pub scope: Scope,
    /// A pool's GPUs now; a team has none.
    pub capacity: Option<f64>,
    pub projections: Vec<Projection>,
    /// When a pool runs out of GPUs at the forecast.
    pub run_out: Option<RunOut>,
}

impl Forecast {
    pub fn projection(&self, q: Quantity) -> Option<&Projection> {
        self.projections.iter().find(|p| p.quantity == q)
    }
}

/// Every forecast of one analysis.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Forecasts {
    /// The history fitted: [from, to); the forecast starts at `to_ms` (an hour start).
    pub from_ms: i64,
    pub to_ms: i64,
    /// Hours the run-out time looks ahead (and the API at most serves).
    pub horizon_h: usize,
    pub series: Vec<Forecast>,
}

impl Forecasts {
    pub fn find(&self, scope: &Scope) -> Option<&Forecast> {
        self.series.iter().find(|f| &f.scope == scope)
    }

    /// `p`'s mean over the horizon's last day at the forecast; `None` without a model.
    pub fn at_horizon(&self, p: &Projection) -> Option<f64> {
        let points = p.points(self.to_ms + (self.horizon_h as i64 - 24) * HOUR_MS, 24);
        (!points.is_empty())
            .then(|| points.iter().map(|x| x.value).sum::<f64>() / points.len() as f64)
    }
}

/// An hourly series: value by hour start, over the observed hours.
type Hourly = BTreeMap<i64, f64>;

/// The forecasts of every pool and team in `h`, looking `weeks` weeks ahead (at most
/// [`MAX_WEEKS`]).
pub fn forecast(h: &History, weeks: usize) -> Forecasts {
    let to_ms = h.to_ms.div_euclid(HOUR_MS) * HOUR_MS;
    let horizon_h = weeks.clamp(1, MAX_WEEKS) * seasonal::WEEK_H;
    let observed: BTreeSet<i64> = h
        .hours
        .iter()
        .map(|u| u.hour_ms)
        .filter(|&t| t >= h.from_ms && t < to_ms)
        .collect();
    let mut sums: BTreeMap<Scope, [Hourly; 3]> = BTreeMap::new();
    for u in h.hours.iter().filter(|u| observed.contains(&u.hour_ms)) {
        let team = u.team.as_deref().unwrap_or(crate::funnel::NO_TEAM);
        for scope in scopes(&u.cluster, &u.model, team) {
            let s = sums.entry(scope).or_default();
            *s[0].entry(u.hour_ms).or_default() += u.allocated;
            *s[1].entry(u.hour_ms).or_default() += u.used;
        }
    }
    for (scope, hour, gpus) in waiting_hours(h, &observed) {
        *sums.entry(scope).or_default()[2].entry(hour).or_default() += gpus;
    }
    let capacity = capacities(&h.gpus);
    let series = sums
        .into_iter()
        .map(|(scope, quantities)| {
            let projections: Vec<Projection> = Quantity::ALL
                .iter()
                .zip(&quantities)
                .map(|(q, s)| project(*q, s, &observed))
                .collect();
            let capacity = match &scope {
                Scope::Pool { cluster, model } => capacity.get(&(cluster.clone(), model.clone())),
                Scope::Team { .. } => None,
            }
            .copied();
            let run_out =
                capacity.and_then(|c| run_out::run_out(&projections, c, to_ms, horizon_h));
            Forecast {
                scope,
                capacity,
                projections,
                run_out,
            }
        })
        .collect();
    Forecasts {
        from_ms: h.from_ms,
        to_ms,
        horizon_h,
        series,
    }
}

/// The pool and the team an hour of use counts toward.
fn scopes(cluster: &str, model: &str, team: &str) -> [Scope; 2] {
    [
        Scope::Pool {
            cluster: cluster.to_owned(),
            model: model.to_owned(),
        },
        Scope::Team {
            team: team.to_owned(),
        },
    ]
}

/// GPUs per pool (cluster, model) now.
fn capacities(gpus: &[GpuRef]) -> BTreeMap<(String, String), f64> {
    let mut c: BTreeMap<(String, String), f64> = BTreeMap::new();
    for g in gpus {
        *c.entry((g.cluster.clone(), g.model.clone())).or_default() += 1.0;
    }
    c
}

/// Waiting work as GPU-equivalents by scope and observed hour: a waiting unit counts its
/// GPU-equivalents ([`unit_share`]) for the part of each hour it waited. Work that names a GPU
/// product counts toward the pools of that product; work that names none toward the pools of
/// its cluster that serve its resource, split by their GPU counts.
fn waiting_hours<'a>(
    h: &'a History,
    observed: &'a BTreeSet<i64>,
) -> impl Iterator<Item = (Scope, i64, f64)> + 'a {
    // The fleet's GPUs counted once by (cluster, model, sharing), and each cluster's most
    // replicas: what every waiting item is matched against.
    let mut kinds: BTreeMap<(&str, &str, Sharing), f64> = BTreeMap::new();
    let mut replicas: BTreeMap<&str, i64> = BTreeMap::new();
    for g in &h.gpus {
        *kinds.entry((&g.cluster, &g.model, g.sharing)).or_default() += 1.0;
        let r = replicas.entry(&g.cluster).or_insert(1);
        *r = (*r).max(g.replicas);
    }
    h.waiting.iter().flat_map(move |w| {
        let replicas = replicas.get(w.cluster.as_str()).copied().unwrap_or(1);
        let unit = unit_share(&w.resource, replicas).unwrap_or(0.0) * w.count as f64;
        let pools = pools_for(w, &kinds);
        let first = w.from_ms.div_euclid(HOUR_MS) * HOUR_MS;
        let to = w.to_ms.max(w.from_ms + 1);
        let team = Scope::Team {
            team: w.team.clone(),
        };
        let mut out = Vec::new();
        for &t in observed.range(first..to) {
            let inside = (to.min(t + HOUR_MS) - w.from_ms.max(t)).max(0);
            let gpus = unit * inside as f64 / HOUR_MS as f64;
            out.push((team.clone(), t, gpus));
            for (pool, part) in &pools {
                out.push((pool.clone(), t, gpus * part));
            }
        }
        out
    })
}

/// The pools a waiting item counts toward, with the part of it each takes, from the fleet's
/// GPUs counted by (cluster, model, sharing).
fn pools_for(w: &Waiting, kinds: &BTreeMap<(&str, &str, Sharing), f64>) -> Vec<(Scope, f64)> {
    let Some(class) = Class::of(&w.resource) else {
        return Vec::new();
    };
    let mut counts: BTreeMap<&str, f64> = BTreeMap::new();
    for (&(cluster, model, sharing), n) in kinds {
        if cluster == w.cluster
            && class.served_by(sharing)
            && w.product
                .as_deref()
                .is_none_or(|p| product_matches(model, p))
        {
            *counts.entry(model).or_default() += n;
        }
    }
    let total: f64 = counts.values().sum();
    counts
        .into_iter()
        .map(|(model, n)| {
            let pool = Scope::Pool {
                cluster: w.cluster.clone(),
                model: model.to_owned(),
            };
            (pool, n / total)
        })
        .collect()
}

/// One quantity's projection from its hourly sums (zero where an observed hour has none).
fn project(quantity: Quantity, sums: &Hourly, observed: &BTreeSet<i64>) -> Projection {
    let points: Vec<(i64, f64)> = observed
        .iter()
        .map(|t| (*t, sums.get(t).copied().unwrap_or(0.0)))
        .collect();
    let last_day: Vec<f64> = points.iter().rev().take(24).map(|p| p.1).collect();
    let recent = if last_day.is_empty() {
        0.0
    } else {
        last_day.iter().sum::<f64>() / last_day.len() as f64
    };
    let span_h = match (observed.first(), observed.last()) {
        (Some(a), Some(b)) => ((b - a) / HOUR_MS) as usize + 1,
        _ => 0,
    };
    let Some(period) = seasonal::season_for(span_h) else {
        return Projection {
            quantity,
            recent,
            model: None,
            accuracy: None,
            note: Some(format!(
                "too little history: {span_h} hours seen, a forecast needs two days"
            )),
        };
    };
    let model = Seasonal::fit(&points, period);
    let (accuracy, note) = match accuracy::backtest(&points, span_h) {
        Ok(a) => (Some(a), None),
        Err(why) => (None, Some(why)),
    };
    Projection {
        quantity,
        recent,
        model,
        accuracy,
        note,
    }
}

#[cfg(test)]
mod tests;
