//! The analysis' thresholds and prices: defaults documented in docs/analytics.md, overridden
//! by the collector's `[analytics]` table.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Thresholds and prices. Defaults are documented in docs/analytics.md; the collector reads
/// overrides from the `[analytics]` table of its configuration file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// idle_allocation: allocated with no kernel for at least this long.
    #[serde(with = "duration_text")]
    pub idle_min: Duration,
    /// Holdings with fewer allocated GPU-hours are not judged (underutilized, reclaim).
    pub min_alloc_hours: f64,
    /// underutilized: effective / allocated below this, and a smaller slice fits.
    pub underutilized_ratio: f64,
    /// reclaim: idle for at least this share of the allocated time.
    pub reclaim_idle_share: f64,
    /// Right-sizing headroom over p99 memory and p95 compute.
    pub memory_headroom: f64,
    pub compute_headroom: f64,
    /// The most time-slice replicas a right-size may propose.
    pub max_replicas: u32,
    /// interference: device saturated at this gpu_util (mean over a minute).
    pub saturation: f64,
    /// interference on MIG: memory bandwidth saturated at this mean dram_active.
    pub mig_bandwidth_saturation: f64,
    /// interference: least rate drop, and least time in each of the two states compared.
    pub interference_min_drop: f64,
    #[serde(with = "duration_text")]
    pub interference_min: Duration,
    /// memory_pressure: peak memory at this share of the total …
    pub memory_pressure: f64,
    /// … (and throttling) in at least this many hours.
    pub pressure_min_hours: f64,
    /// throttling: share of samples with a thermal or power reason in an hour.
    pub throttle_share: f64,
    #[serde(with = "duration_text")]
    pub zombie_min: Duration,
    #[serde(with = "duration_text")]
    pub silent_after: Duration,
    /// waiting_demand: a team's waiting work in a pool is reported from this many GPU-hours.
    pub waiting_min_gpu_hours: f64,
    /// Replay: extra contended tenant-hours allowed, as a share of the hours replayed.
    pub replay_tolerance: f64,
    /// Held-out replay: the plan is also made from the window without its most recent part of
    /// this length, and each of its steps replayed on that part ([`crate::held_out`]); 0
    /// turns it off. A window shorter than twice this has too little history for it.
    #[serde(with = "duration_text")]
    pub held_out: Duration,
    /// Demand forecast: the history each forecast is fitted to (hour rollups before the
    /// window's end; four weeks give a weekly season and a week-ahead backtest), and how many
    /// weeks ahead it looks (1–4; a pool's run-out time looks this far) ([`crate::forecast`]).
    /// A history of 0 turns the forecast off.
    #[serde(with = "duration_text")]
    pub forecast_history: Duration,
    /// How far ahead a step is checked against its tenants' memory trends ([`crate::ahead`]);
    /// 0 turns the check off.
    #[serde(with = "duration_text")]
    pub ahead: Duration,
    pub forecast_weeks: usize,
    /// Price per GPU-hour by model: the longest key contained in the model name wins
    /// (e.g. "H100" = 2.49). Models without a match cost `default_price`.
    pub prices: BTreeMap<String, f64>,
    pub default_price: f64,
    /// Prices for part of the fleet (a cluster, a sharing mode, a model, or several), the most
    /// specific matching rule over `prices` ([`crate::prices`]).
    pub price_rules: Vec<crate::prices::PriceRule>,
    /// ISO 4217 code of the prices' currency.
    pub currency: String,
    /// Grid carbon intensity for emissions ([`crate::carbon`]); none set, none reported.
    pub carbon: crate::carbon::Carbon,
    /// The per-GPU sharing mechanisms each cluster or pool has, beyond the device plugin and
    /// MIG (which every pool is assumed to have): keyed by cluster (`"prod"`) or cluster and
    /// a part of the model name (`"prod/H100"`); the longest key that matches wins. What a
    /// pool has is said as such on the plan; what it lacks, as what enabling it would free.
    pub mechanisms: BTreeMap<String, Vec<crate::mechanism::Mechanism>>,
    /// How the collector reads a large cluster: one of more GPUs than this is read and
    /// analysed in parts that share nothing (pools, unless tenants or waiting work tie them;
    /// [`crate::parts`]), packed into reads of at most this many GPUs, so its memory follows
    /// the larger of this and its largest part. Each read scans the cluster's hour rows, so
    /// fewer, larger reads are faster. The analysis is the same either way.
    pub part_gpus: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            idle_min: Duration::from_secs(30 * 60),
            min_alloc_hours: 4.0,
            underutilized_ratio: 0.5,
            reclaim_idle_share: 0.9,
            memory_headroom: 0.10,
            compute_headroom: 0.25,
            max_replicas: 8,
            saturation: model::pair_hours::PairThresholds::default().saturation,
            mig_bandwidth_saturation: model::pair_hours::PairThresholds::default()
                .mig_bandwidth_saturation,
            interference_min_drop: 0.2,
            interference_min: Duration::from_secs(30 * 60),
            memory_pressure: 0.95,
            pressure_min_hours: 1.0,
            throttle_share: 0.2,
            zombie_min: Duration::from_secs(10 * 60),
            silent_after: Duration::from_secs(5 * 60),
            waiting_min_gpu_hours: 1.0,
            replay_tolerance: 0.01,
            held_out: Duration::from_secs(24 * 3600),
            forecast_history: Duration::from_secs(28 * 86_400),
            forecast_weeks: 4,
            ahead: Duration::from_secs(7 * 86_400),
            part_gpus: 10_000,
            prices: BTreeMap::from([
                ("H200".into(), 3.50),
                ("H100".into(), 2.50),
                ("A100".into(), 1.60),
                ("L40S".into(), 1.00),
                ("A10G".into(), 0.75),
            ]),
            default_price: 1.00,
            price_rules: Vec::new(),
            currency: "USD".into(),
            carbon: crate::carbon::Carbon::default(),
            mechanisms: BTreeMap::new(),
        }
    }
}

impl Config {
    /// The per-GPU mechanisms pool (`cluster`, `model`) has, as configured (`mechanisms`).
    pub fn mechanisms_of(&self, cluster: &str, model: &str) -> Vec<crate::mechanism::Mechanism> {
        self.mechanisms
            .iter()
            .filter(|(k, _)| match k.split_once('/') {
                None => k.as_str() == cluster,
                Some((c, m)) => c == cluster && !m.is_empty() && model.contains(m),
            })
            .max_by_key(|(k, _)| k.len())
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    /// The price of a GPU-hour of a `model` GPU in `cluster`, shared by `sharing`: the most
    /// specific price rule that matches ([`crate::prices`]), else the model's price.
    pub fn price_for(&self, cluster: &str, model: &str, sharing: model::inventory::Sharing) -> f64 {
        crate::prices::rule_price(&self.price_rules, cluster, model, sharing)
            .unwrap_or_else(|| self.price_of(model))
    }

    /// The prices and the currency, checked ([`crate::prices::check`]).
    pub fn check_prices(&self) -> Result<(), String> {
        crate::prices::check(
            &self.prices,
            self.default_price,
            &self.price_rules,
            &self.currency,
        )
    }

    pub fn price_of(&self, model: &str) -> f64 {
        self.prices
            .iter()
            .filter(|(k, _)| model.contains(k.as_str()))
            .max_by_key(|(k, _)| k.len())
            .map_or(self.default_price, |(_, v)| *v)
    }
}

/// Durations in configuration files as text: "30m", "2h", "90s" (model::time's forms).
mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&model::time::format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        model::time::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanism::Mechanism;

    /// What a pool has: its cluster's entry, or a longer one naming part of its model; an
    /// unknown mechanism name is refused, naming the known ones.
    #[test]
    fn a_pool_has_what_its_longest_matching_key_says() {
        let cfg: Config = serde_json::from_value(serde_json::json!({"mechanisms": {
            "prod": ["dra_consumable_capacity"],
            "prod/H100": ["hami", "kai_fractions"],
            "prod/": ["dra_shared_claim"],
        }}))
        .unwrap();
        assert_eq!(
            cfg.mechanisms_of("prod", "NVIDIA H100 80GB HBM3"),
            [Mechanism::Hami, Mechanism::KaiFractions]
        );
        assert_eq!(
            cfg.mechanisms_of("prod", "NVIDIA L40S"),
            [Mechanism::DraConsumableCapacity]
        );
        assert!(cfg.mechanisms_of("lab", "NVIDIA H100 80GB HBM3").is_empty());
        let e =
            serde_json::from_value::<Config>(serde_json::json!({"mechanisms": {"prod": ["mig"]}}))
                .unwrap_err()
                .to_string();
        assert!(e.contains("dra_consumable_capacity"), "{e}");
    }
}
