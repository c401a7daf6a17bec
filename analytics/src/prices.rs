//! What a GPU-hour costs: a price per GPU model (`prices`, the longest key contained in the
//! model's name), overridden for part of the fleet by rules naming a cluster, a sharing mode,
//! a model, or several of them (docs/cost.md, "Prices").

use model::inventory::Sharing;
use serde::{Deserialize, Serialize};

use crate::config::Config;

/// A price for the GPUs a rule names: every field given must match (`model` as a part of the
/// model's name, as `prices` keys do).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing: Option<Sharing>,
    /// Per GPU-hour, in the configured currency.
    pub price: f64,
}

impl PriceRule {
    fn matches(&self, cluster: &str, model: &str, sharing: Sharing) -> bool {
        self.cluster.as_deref().is_none_or(|c| c == cluster)
            && self.model.as_deref().is_none_or(|m| model.contains(m))
            && self.sharing.is_none_or(|s| s == sharing)
    }

    /// How specific the rule is: the fields it names, then the length of its model part.
    fn specificity(&self) -> (usize, usize) {
        let named = [
            self.cluster.is_some(),
            self.model.is_some(),
            self.sharing.is_some(),
        ];
        (
            named.iter().filter(|n| **n).count(),
            self.model.as_deref().map_or(0, str::len),
        )
    }
}

impl Config {
    /// The price of a GPU-hour of a `model` GPU in `cluster`, shared by `sharing`: the most
    /// specific rule that matches (the first listed among equals), else the model's price.
    pub fn price_for(&self, cluster: &str, model: &str, sharing: Sharing) -> f64 {
        let mut best: Option<&PriceRule> = None;
        for r in self
            .price_rules
            .iter()
            .filter(|r| r.matches(cluster, model, sharing))
        {
            if best.is_none_or(|b| r.specificity() > b.specificity()) {
                best = Some(r);
            }
        }
        best.map_or_else(|| self.price_of(model), |r| r.price)
    }

    /// Prices and the currency, checked: prices finite and not negative, a rule naming at
    /// least one thing, a currency of three capital letters (ISO 4217, as FOCUS'
    /// BillingCurrency is).
    pub fn check_prices(&self) -> Result<(), String> {
        let bad = |p: f64| !p.is_finite() || p < 0.0;
        if let Some((k, p)) = self.prices.iter().find(|(_, p)| bad(**p)) {
            return Err(format!(
                "analytics.prices.{k:?} = {p}: a price is a finite amount of at least 0"
            ));
        }
        if bad(self.default_price) {
            return Err(format!(
                "analytics.default_price = {}: a price is a finite amount of at least 0",
                self.default_price
            ));
        }
        for (i, r) in self.price_rules.iter().enumerate() {
            if bad(r.price) {
                return Err(format!(
                    "analytics.price_rules[{i}].price = {}: a price is a finite amount of at least 0",
                    r.price
                ));
            }
            if r.specificity().0 == 0 {
                return Err(format!(
                    "analytics.price_rules[{i}] names no cluster, model or sharing; set default_price for every GPU instead"
                ));
            }
        }
        if !(self.currency.len() == 3 && self.currency.bytes().all(|b| b.is_ascii_uppercase())) {
            return Err(format!(
                "analytics.currency = {:?}: an ISO 4217 code of three capital letters, like \"USD\" or \"EUR\"",
                self.currency
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_specific_rule_wins_and_the_model_price_stands_in() {
        let rule = |cluster: Option<&str>, model: Option<&str>, sharing, price| PriceRule {
            cluster: cluster.map(Into::into),
            model: model.map(Into::into),
            sharing,
            price,
        };
        let cfg = Config {
            price_rules: vec![
                rule(Some("prod"), None, None, 2.0),
                rule(Some("prod"), Some("H100"), None, 2.2),
                rule(None, Some("H100"), Some(Sharing::Mig), 3.0),
                rule(Some("prod"), Some("H100"), Some(Sharing::Mig), 3.3),
            ],
            ..Config::default()
        };
        let h100 = "NVIDIA H100 80GB HBM3";
        assert_eq!(cfg.price_for("prod", h100, Sharing::Mig), 3.3);
        assert_eq!(cfg.price_for("lab", h100, Sharing::Mig), 3.0);
        assert_eq!(cfg.price_for("prod", h100, Sharing::Exclusive), 2.2);
        assert_eq!(cfg.price_for("prod", "NVIDIA L40S", Sharing::Mps), 2.0);
        // No rule: the model's price, then the default.
        assert_eq!(cfg.price_for("lab", h100, Sharing::Exclusive), 2.5);
        assert_eq!(cfg.price_for("lab", "Tesla T4", Sharing::Exclusive), 1.0);
    }

    #[test]
    fn bad_prices_and_currencies_are_refused_by_name() {
        let mut cfg = Config::default();
        assert_eq!(cfg.check_prices(), Ok(()));
        cfg.currency = "usd".into();
        assert!(
            cfg.check_prices()
                .unwrap_err()
                .contains("analytics.currency")
        );
        cfg.currency = "EUR".into();
        cfg.price_rules.push(PriceRule {
            cluster: None,
            model: None,
            sharing: None,
            price: 1.0,
        });
        assert!(
            cfg.check_prices()
                .unwrap_err()
                .contains("price_rules[0] names no")
        );
        cfg.price_rules[0].cluster = Some("prod".into());
        cfg.price_rules[0].price = f64::NAN;
        assert!(
            cfg.check_prices()
                .unwrap_err()
                .contains("price_rules[0].price")
        );
        cfg.price_rules.clear();
        cfg.prices.insert("H100".into(), -1.0);
        assert!(cfg.check_prices().unwrap_err().contains("prices.\"H100\""));
    }
}
