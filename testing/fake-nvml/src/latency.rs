//! Injected call costs: `GPULENS_FAKE_NVML_LATENCY` names NVML functions and what one call of
//! each costs, in microseconds — `nvmlDeviceGetTotalEccErrors=800,nvmlDeviceGetFieldValues=1500,*=40`
//! (`*`: every function not named) — so that an agent measured on the fake pays what a real
//! driver charges, and `gpulens-agent bench`'s per-call table and a slower clock for rare
//! readings can be tested here. The time is spent spinning, on the caller's thread, as a
//! driver's ioctl spends the caller's CPU; `function=CPU+WAIT` spins CPU microseconds and then
//! sleeps WAIT more, as a driver does that watches a counter for a window
//! (`nvmlDeviceGetPcieThroughput=1000+20000`: 1 ms of CPU in 21 ms on an H200). Unset: no cost
//! added.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What one call costs: CPU spent spinning, then a wait.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Cost {
    cpu: Duration,
    wait: Duration,
}

#[derive(Debug, Default, PartialEq)]
struct Costs {
    by_name: HashMap<String, Cost>,
    other: Cost,
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
    let cost = c.by_name.get(function).copied().unwrap_or(c.other);
    if !cost.cpu.is_zero() {
        let started = Instant::now();
        while started.elapsed() < cost.cpu {
            std::hint::spin_loop();
        }
    }
    if !cost.wait.is_zero() {
        std::thread::sleep(cost.wait);
    }
}

fn parse(text: &str) -> Result<Costs, String> {
    let mut costs = Costs::default();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, us) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?} is not function=microseconds"))?;
        let micros = |text: &str| -> Result<Duration, String> {
            text.trim()
                .parse()
                .ok()
                .filter(|v| *v <= 1_000_000)
                .map(Duration::from_micros)
                .ok_or_else(|| format!("{item:?}: microseconds from 0 to 1000000"))
        };
        let d = match us.split_once('+') {
            Some((cpu, wait)) => Cost {
                cpu: micros(cpu)?,
                wait: micros(wait)?,
            },
            None => Cost {
                cpu: micros(us)?,
                wait: Duration::ZERO,
            },
        };
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
        let us = Duration::from_micros;
        let c =
            parse("nvmlDeviceGetTotalEccErrors=800, nvmlDeviceGetPcieThroughput=1000+20000, *=40")
                .unwrap();
        assert_eq!(c.by_name["nvmlDeviceGetTotalEccErrors"].cpu, us(800));
        let pcie = c.by_name["nvmlDeviceGetPcieThroughput"];
        assert_eq!((pcie.cpu, pcie.wait), (us(1000), us(20_000)));
        assert_eq!((c.other.cpu, c.other.wait), (us(40), Duration::ZERO));
        assert!(
            parse("nvmlInit_v2=5+")
                .unwrap_err()
                .contains("microseconds")
        );
        assert!(
            parse("nvmlInit_v2=5+2000000")
                .unwrap_err()
                .contains("microseconds")
        );
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
