//! What a GPU-hour costs: a price per GPU model (`prices`, the longest key contained in the
//! model's name), overridden for part of the fleet by rules naming a cluster, a sharing mode,
//! a model, or several of them (docs/cost.md, "Prices").

use std::collections::BTreeMap;

use model::inventory::Sharing;
use serde::{Deserialize, Serialize};

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

/// The price of the most specific rule of `rules` matching a `model` GPU in `cluster` shared
/// by `sharing` (the first listed among equals); None where none matches.
pub fn rule_price(
    rules: &[PriceRule],
    cluster: &str,
    model: &str,
    sharing: Sharing,
) -> Option<f64> {
    let mut best: Option<&PriceRule> = None;
    for r in rules.iter().filter(|r| r.matches(cluster, model, sharing)) {
        if best.is_none_or(|b| r.specificity() > b.specificity()) {
            best = Some(r);
        }
    }
    best.map(|r| r.price)
}

/// Prices and the currency, checked: prices finite and not negative, a rule naming at least
/// one thing, a currency of three capital letters (ISO 4217, as FOCUS' BillingCurrency is).
pub fn check(
    prices: &BTreeMap<String, f64>,
    default_price: f64,
    rules: &[PriceRule],
    currency: &str,
) -> Result<(), String> {
    let bad = |p: f64| !p.is_finite() || p < 0.0;
    if let Some((k, p)) = prices.iter().find(|(_, p)| bad(**p)) {
        return Err(format!(
            "analytics.prices.{k:?} = {p}: a price is a finite amount of at least 0"
        ));
    }
    if bad(default_price) {
        return Err(format!(
            "analytics.default_price = {default_price}: a price is a finite amount of at least 0"
        ));
    }
    for (i, r) in rules.iter().enumerate() {
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
    if !(currency.len() == 3 && currency.bytes().all(|b| b.is_ascii_uppercase())) {
        return Err(format!(
            "analytics.currency = {currency:?}: an ISO 4217 code of three capital letters, like \"USD\" or \"EUR\""
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        cluster: Option<&str>,
        model: Option<&str>,
        sharing: Option<Sharing>,
        price: f64,
    ) -> PriceRule {
        PriceRule {
            cluster: cluster.map(Into::into),
            model: model.map(Into::into),
            sharing,
            price,
        }
    }

    #[test]
    fn the_most_specific_rule_wins() {
        let rules = [
            rule(Some("prod"), None, None, 2.0),
            rule(Some("prod"), Some("H100"), None, 2.2),
            rule(None, Some("H100"), Some(Sharing::Mig), 3.0),
            rule(Some("prod"), Some("H100"), Some(Sharing::Mig), 3.3),
        ];
        let h100 = "NVIDIA H100 80GB HBM3";
        let price = |c, m, s| rule_price(&rules, c, m, s);
        assert_eq!(price("prod", h100, Sharing::Mig), Some(3.3));
        assert_eq!(price("lab", h100, Sharing::Mig), Some(3.0));
        assert_eq!(price("prod", h100, Sharing::Exclusive), Some(2.2));
        assert_eq!(price("prod", "NVIDIA L40S", Sharing::Mps), Some(2.0));
        assert_eq!(price("lab", h100, Sharing::Exclusive), None);
    }

    #[test]
    fn bad_prices_and_currencies_are_refused_by_name() {
        let prices = BTreeMap::from([("H100".to_owned(), 2.5)]);
        assert_eq!(check(&prices, 1.0, &[], "USD"), Ok(()));
        assert!(
            check(&prices, 1.0, &[], "usd")
                .unwrap_err()
                .contains("analytics.currency")
        );
        let nothing = [rule(None, None, None, 1.0)];
        assert!(
            check(&prices, 1.0, &nothing, "EUR")
                .unwrap_err()
                .contains("price_rules[0] names no")
        );
        let nan = [rule(Some("prod"), None, None, f64::NAN)];
        assert!(
            check(&prices, 1.0, &nan, "EUR")
                .unwrap_err()
                .contains("price_rules[0].price")
        );
        let negative = BTreeMap::from([("H100".to_owned(), -1.0)]);
        assert!(
            check(&negative, 1.0, &[], "EUR")
                .unwrap_err()
                .contains("prices.\"H100\"")
        );
        assert!(
            check(&prices, f64::INFINITY, &[], "EUR")
                .unwrap_err()
                .contains("default_price")
        );
    }
}
