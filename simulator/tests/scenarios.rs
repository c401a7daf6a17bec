//! Every scenario shipped in scenarios/ and every TOML example in docs/scenarios.md parses,
//! validates and produces valid batches; the simulated fleet's utilization looks like the real
//! fleets in tests/fixtures (copied from shared/reference/utilization-cdfs).

use std::path::Path;

use model::wire::v1::Limits;
use simulator::{Fleet, Scenario};

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn check(name: &str, text: &str) -> Fleet {
    let scenario = Scenario::from_toml(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let fleet = Fleet::new(scenario);
    let now = 1_800_000_000_000;
    for node in 0..fleet.nodes.len() {
        fleet
            .batch(node, "t", 1, &[now - 60_000, now], 60_000)
            .validate(&Limits::default(), now)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    fleet
}

#[test]
fn shipped_scenarios_are_valid() {
    let mut n = 0;
    for entry in std::fs::read_dir(root().join("scenarios")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            check(
                &path.display().to_string(),
                &std::fs::read_to_string(&path).unwrap(),
            );
            n += 1;
        }
    }
    assert!(n >= 3, "at least three example scenarios");
}

#[test]
fn the_examples_in_the_docs_are_valid() {
    let doc = std::fs::read_to_string(root().join("docs/scenarios.md")).unwrap();
    let mut blocks = 0;
    let mut rest = doc.as_str();
    while let Some(start) = rest.find("```toml\n") {
        let body = &rest[start + 8..];
        let end = body.find("```").unwrap();
        check(&format!("docs/scenarios.md block {blocks}"), &body[..end]);
        blocks += 1;
        rest = &body[end + 3..];
    }
    assert!(blocks >= 1);
}

/// The value of a quantile curve (percentile, value) at a percentile.
fn curve_at(file: &str, percentile: f64) -> f64 {
    let path = root().join("tests/fixtures/utilization-cdfs").join(file);
    let text = std::fs::read_to_string(path).unwrap();
    let mut best = (f64::MAX, 0.0);
    for line in text.lines().skip(1) {
        let (p, v) = line.split_once(',').unwrap();
        let (p, v): (f64, f64) = (p.parse().unwrap(), v.parse().unwrap());
        if (p - percentile).abs() < best.0 {
            best = ((p - percentile).abs(), v);
        }
    }
    best.1
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[test]
fn the_default_fleet_looks_like_real_fleets() {
    let text = std::fs::read_to_string(root().join("scenarios/k8s-mixed.toml")).unwrap();
    let fleet = check("k8s-mixed", &text);
    // A week at one sample every 5 minutes.
    let start = 1_800_000_000_000;
    let (mut util, mut busy_util, mut busy_sm) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..(7 * 288) {
        let ts = start + i * 300_000;
        for node in 0..fleet.nodes.len() {
            let (snap, _) = fleet.snapshot(node, ts);
            for g in &snap.gpus {
                let Some(u) = g.gpu_util else { continue };
                util.push(f64::from(u));
                if u > 0.9
                    && let Some(sm) = g.sm_active
                {
                    busy_util.push(f64::from(u));
                    busy_sm.push(f64::from(sm));
                }
            }
        }
    }
    // Philly: about a third of GPU-minutes at 0 %. Ours: a sizeable idle share, not all of it.
    assert_eq!(
        curve_at("cdf_philly_gpu_util.csv", 30.0),
        0.0,
        "fixture: Philly's 30th percentile is 0"
    );
    let zero_share = util.iter().filter(|u| **u == 0.0).count() as f64 / util.len() as f64;
    assert!(
        (0.15..=0.6).contains(&zero_share),
        "share of samples at 0: {zero_share}"
    );
    // Seren: NVML reads ~99 % while the median SM_ACTIVE is about half. Busy GPUs here too.
    let (seren_util, seren_sm) = (
        curve_at("cdf_seren_DCGM_GPU_UTIL.csv", 50.0),
        curve_at("cdf_seren_SM_ACTIVE.csv", 50.0),
    );
    assert!(
        seren_util - seren_sm > 30.0,
        "fixture: the NVML/SM gap ({seren_util} vs {seren_sm})"
    );
    let gap = median(&mut busy_util) - median(&mut busy_sm);
    assert!(
        gap > 0.25,
        "busy GPUs must keep fewer SMs busy than NVML says; gap {gap}"
    );
}
