//! Figures as people read them: one rounding per quantity, shared by the analysis' summaries,
//! the dashboard's tables and chart legends and the reports, so that one number reads alike
//! wherever it is shown (the API keeps the unrounded value).

/// `x` rounded to `decimals`, halves away from zero (0.125 → 0.13) as people round. A float
/// that stands for a half is often stored a hair below it (0.075 is 0.07499…), so the rounding
/// looks a billionth of a unit past it.
pub fn round(x: f64, decimals: i32) -> f64 {
    let f = 10f64.powi(decimals);
    (x * f + x.signum() * 1e-9).round() / f
}

/// A count of hours or GPU-hours to a tenth, as an alert's value carries it, shown with the
/// precision its size deserves: `1,234`, `148`, `47.9`, `0.42`; nothing at all is `0`, apart
/// from a little that rounds to `0.00`. The dashboard's numbers (`web::format::num`) and the
/// analysis' summaries print through it.
pub fn quantity(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if a >= 1000.0 {
        let s = format!("{:.0}", round(a, 0));
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if x < 0.0 { format!("-{out}") } else { out }
    } else if a >= 100.0 {
        format!("{:.0}", round(x, 0))
    } else if a >= 1.0 {
        format!("{:.1}", round(x, 1))
    } else {
        format!("{:.2}", round(x, 2) + 0.0)
    }
}

/// Money as every page, summary and report shows it: whole units, grouped, with the currency
/// (`1,463 USD`). CSV keeps cents.
pub fn money(x: f64, currency: &str) -> String {
    let whole = round(x, 0) + 0.0;
    if whole.abs() >= 1000.0 {
        format!("{} {currency}", quantity(whole))
    } else {
        format!("{whole:.0} {currency}")
    }
}

/// A count with its noun, the singular for exactly one: `1 GPU`, `3 GPUs`, `0 hours`. A
/// fractional count is rounded to a whole first, as it is shown.
pub fn count(n: f64, one: &str, many: &str) -> String {
    let n = round(n, 0) + 0.0;
    format!("{n:.0} {}", if n == 1.0 { one } else { many })
}

/// A share of a GPU: `0.13 GPU`.
pub fn gpu(x: f64) -> String {
    format!("{:.2} GPU", round(x, 2))
}

/// A 0–1 ratio as a whole percent: `13 %`.
pub fn percent(ratio: f64) -> String {
    format!("{:.0} %", round(ratio * 100.0, 0))
}

/// Gibibytes with one decimal: `6.0 GiB`.
pub fn gib(x: f64) -> String {
    format!("{:.1} GiB", round(x, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_takes_the_singular_for_exactly_one() {
        assert_eq!(count(1.0, "GPU", "GPUs"), "1 GPU");
        assert_eq!(count(0.0, "GPU", "GPUs"), "0 GPUs");
        assert_eq!(count(2.0, "hour", "hours"), "2 hours");
        assert_eq!(count(0.6, "GPU", "GPUs"), "1 GPU");
        assert_eq!(count(1.5, "GPU", "GPUs"), "2 GPUs");
        assert_eq!(count(-0.2, "GPU", "GPUs"), "0 GPUs");
    }

    #[test]
    fn nothing_is_a_plain_zero_and_a_little_is_not() {
        assert_eq!(quantity(0.0), "0");
        assert_eq!(quantity(-0.0), "0");
        assert_eq!(quantity(0.004), "0.00");
        assert_eq!(quantity(-0.004), "0.00");
        assert_eq!(quantity(0.005), "0.01");
    }

    #[test]
    fn halves_round_away_from_zero_whatever_the_float_stores() {
        assert_eq!(money(34.4, "USD"), "34 USD");
        assert_eq!(money(0.4, "USD"), "0 USD");
        assert_eq!(money(1462.5, "EUR"), "1,463 EUR");
        assert_eq!(quantity(47.94), "47.9");
        assert_eq!(quantity(47.95), "48.0");
        assert_eq!(quantity(148.5), "149");
        assert_eq!(quantity(12_345.6), "12,346");
        assert_eq!(quantity(0.125), "0.13");
        assert_eq!(gpu(0.125), "0.13 GPU");
        assert_eq!(gpu(0.075), "0.08 GPU");
        assert_eq!(gpu(0.425), "0.43 GPU");
        assert_eq!(gpu(0.124), "0.12 GPU");
        assert_eq!(percent(0.125), "13 %");
        assert_eq!(percent(0.005), "1 %");
        assert_eq!(gib(6.05), "6.1 GiB");
        assert_eq!(round(-0.125, 2), -0.13);
        assert_eq!(round(2.0, 2), 2.0);
    }
}
