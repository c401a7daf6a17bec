//! Injected call costs: `GPULENS_FAKE_NVML_LATENCY` names NVML functions and what one call of
//! each costs, in microseconds — `nvmlDeviceGetTotalEccErrors=800,nvmlDeviceGetFieldValues=1500,*=40`
//! (`*`: every function not named) — so that an agent measured on the fake pays what a real
//! driver charges, and `gpulens-agent bench`'s per-call table and a slower clock for rare
//! readings can be tested here. The time is spent spinning, on the caller's thread, as a
//! driver's ioctl spends the caller's CPU. Unset: no cost added.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[derive(Debug, Default, PartialEq)]
struct Costs {
    by_name: HashMap<String, Duration>,
    other: Duration,
}

static COSTS: OnceLock<Costs> = OnceLock::new();

fn costs() -> &'static Costs {
    COSTS.get_or_init(|| {
        let text = std::env::var("GPULENS_FAKE_NVML_LATENCY").unwrap_or_default();
        parse(&text).unwrap_or_else(|e| {
            eprintln!("fake NVML: GPULENS_FAKE_NVML_LATENCY: {e}; no latency injected");
            Costs::default()
        })
    })
}

/// Spends what one call of `function` costs.
pub(crate) fn spend(function: &str) {
    let c = costs();
    let d = c.by_name.get(function).copied().unwrap_or(c.other);
    if d.is_zero() {
        return;
    }
    let started = Instant::now();
    while started.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn parse(text: &str) -> Result<Costs, String> {
    let mut costs = Costs::default();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, us) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?} is not function=microseconds"))?;
        let us: u64 = us
            .trim()
            .parse()
            .ok()
            .filter(|v| *v <= 1_000_000)
            .ok_or_else(|| format!("{item:?}: microseconds from 0 to 1000000"))?;
        let d = Duration::from_micros(us);
        match name.trim() {
            "*" => costs.other = d,
            n if n.starts_with("nvml") => {
                costs.by_name.insert(n.to_owned(), d);
            }
            n => return Err(format!("{n:?} is not an NVML function name")),
        }
    }
    Ok(costs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_parses_and_mistakes_are_named() {
        let c = parse("nvmlDeviceGetTotalEccErrors=800, *=40").unwrap();
        assert_eq!(
            c.by_name["nvmlDeviceGetTotalEccErrors"],
            Duration::from_micros(800)
        );
        assert_eq!(c.other, Duration::from_micros(40));
        assert_eq!(parse("").unwrap(), Costs::default());
        assert!(parse("ecc=5").unwrap_err().contains("not an NVML function"));
        assert!(
            parse("nvmlInit_v2")
                .unwrap_err()
                .contains("function=microseconds")
        );
        assert!(
            parse("nvmlInit_v2=-3")
                .unwrap_err()
                .contains("microseconds")
        );
    }
}
