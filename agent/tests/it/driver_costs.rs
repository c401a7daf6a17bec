//! What the driver's calls cost, as `gpulens-agent bench` reports it on the fake NVML with
//! injected costs: each reading's cost is charged to the NVML function the bench names for it,
//! so the latency profile it prints (what a real driver charged, per function) replays on the
//! fake NVML; rare readings are read on their slower clock, and per-process utilization only
//! where processes share a GPU.

use std::collections::BTreeMap;

/// `gpulens-agent bench` on the 8-GPU, 64-process fixture with `latency` injected, every
/// reading every cycle (rare ones and per-process utilization too); its output.
fn bench(latency: &str, cycles: u32) -> String {
    bench_rare(latency, "0s", cycles)
}

/// The same, the rare readings taken every `rare_every`.
fn bench_rare(latency: &str, rare_every: &str, cycles: u32) -> String {
    let clocks = [
        "--rare-every",
        rare_every,
        "--process-utilization-every",
        rare_every,
    ];
    bench_on(
        ("h100x8-64proc-steady.json", "proc-64"),
        &clocks,
        cycles,
        latency,
    )
}

/// `gpulens-agent bench` on the fake NVML's fixture and the `/proc` fixture named by `on`, with
/// `args`, `latency` injected; its output.
fn bench_on(on: (&str, &str), args: &[&str], cycles: u32, latency: &str) -> String {
    let root = crate::root();
    let fixture = root.join("testing/fake-nvml/fixtures").join(on.0);
    let out = crate::stdout_of(
        crate::on_fake(&fixture, &["bench", "--node", "bench"])
            .args(args)
            .args(["--cycles", &cycles.to_string()])
            .arg("--proc-root")
            .arg(root.join("agent/tests/fixtures").join(on.1))
            .env("GPULENS_FAKE_NVML_LATENCY", latency),
    );
    String::from_utf8_lossy(&out).into_owned()
}

/// The per-call table: reading → (µs per call, NVML function).
fn table(text: &str) -> BTreeMap<String, (f64, String)> {
    rows(text)
        .into_iter()
        .map(|(reading, row)| (reading, (row.us, row.function)))
        .collect()
}

/// One line of the per-call table.
struct Row {
    calls: f64,
    us: f64,
    cpu_us: f64,
    function: String,
}

/// The per-call table's lines by reading: reading, calls, µs, CPU µs, share %, function.
fn rows(text: &str) -> BTreeMap<String, Row> {
    text.lines()
        .skip_while(|l| !l.contains("NVML function"))
        .skip(1)
        .map_while(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 7 && f[5] == "%").then(|| {
                let row = Row {
                    calls: f[1].parse().unwrap(),
                    us: f[2].parse().unwrap(),
                    cpu_us: f[3].parse().unwrap(),
                    function: f[6].to_owned(),
                };
                (f[0].to_owned(), row)
            })
        })
        .collect()
}

/// For every NVML function the table names, a run that charges that function alone 1 ms a call:
/// exactly the readings the table names it for cost a millisecond or more (one call each),
/// every other reading less — so the profile line, which charges each function its readings' cost,
/// replays what was measured.
#[test]
fn every_readings_cost_is_charged_to_its_nvml_function() {
    let plain = bench("", 3);
    let readings = table(&plain);
    for r in [
        "memory",
        "power",
        "compute_processes",
        "process_utilization",
        "ecc",
        "nvlink",
    ] {
        assert!(readings.contains_key(r), "{r}: {plain}");
    }
    let functions: std::collections::BTreeSet<&str> =
        readings.values().map(|(_, f)| f.as_str()).collect();
    assert!(
        !functions.contains("-"),
        "a reading without its function: {plain}"
    );
    // The fake spins for what it is told, so a charged call costs at least that; a call that
    // is not charged costs a few microseconds, more only where the test machine stalls the
    // process (hence no upper bound, and a millisecond to tell the two apart).
    for function in functions {
        let text = bench(&format!("{function}=1000"), 10);
        for (reading, (us, f)) in table(&text) {
            if f == function {
                assert!(us >= 1000.0, "{reading} under {function}: {text}");
            } else {
                assert!(us < 1000.0, "{reading} charged for {function}: {text}");
            }
        }
    }
    // The profile line charges what was measured: a millisecond or more for the one function,
    // less for the rest.
    let text = bench("nvmlDeviceGetPowerUsage=1000", 10);
    let profile = text
        .lines()
        .find_map(|l| l.split_once("GPULENS_FAKE_NVML_LATENCY=").map(|(_, p)| p))
        .unwrap_or_else(|| panic!("no profile: {text}"));
    let costs: BTreeMap<&str, u64> = profile
        .split(',')
        .map(|i| {
            // CPU, and `+` a wait where the call waited.
            let (f, us) = i.split_once('=').unwrap();
            (f, us.split('+').map(|p| p.parse::<u64>().unwrap()).sum())
        })
        .collect();
    assert!(costs["nvmlDeviceGetPowerUsage"] >= 1000, "{profile}");
    assert!(
        costs.values().filter(|us| **us >= 1000).count() == 1,
        "{profile}"
    );
}

/// An injected cost for ECC reads shows in the per-call table, and the rare readings' slower
/// clock reads ECC 2 × 8 times every 30 cycles instead of every cycle.
#[test]
fn injected_call_costs_show_in_the_bench_and_rare_readings_run_on_a_slower_clock() {
    let ecc = |rare_every: &str| {
        let text = bench_rare("nvmlDeviceGetTotalEccErrors=3000", rare_every, 60);
        let (us, _) = table(&text)
            .remove("ecc")
            .unwrap_or_else(|| panic!("no ecc line: {text}"));
        let calls = rows(&text)["ecc"].calls;
        (calls, us, text)
    };
    let (calls, us, text) = ecc("30s");
    // The table's cycles, 80..140 at 1 s: read again at cycles 90 and 120, 16 calls each.
    assert!((calls - 32.0 / 60.0).abs() < 0.01, "{text}");
    assert!(us >= 3000.0, "{text}");
    let first = text
        .lines()
        .skip_while(|l| !l.contains("NVML function"))
        .nth(1)
        .unwrap();
    assert!(
        first.trim_start().starts_with("ecc "),
        "the costliest first: {text}"
    );
    let (calls, _, text) = ecc("0s");
    assert_eq!(calls, 16.0, "{text}");
}

/// `gpulens-agent bench` on `k8s-node.json` — a MIG GPU, an A100 two processes share, an idle
/// A100 — with per-process utilization read every `every` and `latency` injected.
fn bench_node(every: &str, latency: &str) -> BTreeMap<String, Row> {
    rows(&bench_node_text(every, latency))
}

/// The same, its whole output.
fn bench_node_text(every: &str, latency: &str) -> String {
    let args = ["--process-utilization-every", every];
    bench_on(("k8s-node.json", "proc"), &args, 60, latency)
}

/// Per-process utilization is asked only of the GPU two processes share (never of the MIG GPU
/// nor of the idle one), every 10 s by default; the PCIe byte counters are read on the rare
/// clock (30 s), and the PCIe window (20 ms a direction) only at the first read, before the
/// counters have a rate; the energy counter every sample while it is cheap, every 10 minutes
/// once it costs more than 100 µs.
#[test]
fn costly_readings_are_asked_only_as_often_as_their_answers_need() {
    let every = |every: &str| bench_node(every, "")["process_utilization"].calls;
    // 60 cycles at 1 s: reads at 20, 30, …, 70 — 6 of one GPU.
    assert_eq!(every("10s"), 0.1);
    assert_eq!(every("0s"), 1.0);
    let t = bench_node("10s", "");
    assert_eq!(t["energy"].calls, 3.0, "cheap: every GPU, every cycle");
    assert_eq!(t["pcie_bytes"].calls, 0.1, "3 GPUs at cycles 30 and 60");
    assert!(!t.contains_key("pcie_rx") && !t.contains_key("pcie_tx"));
    let text = bench_node_text("10s", "nvmlDeviceGetTotalEnergyConsumption=300");
    assert!(
        !rows(&text).contains_key("energy"),
        "costly: read in the first cycles, next after 10 minutes: {text}"
    );
    // The replay still charges it: the warm-up read it.
    let profile = text
        .split_once("GPULENS_FAKE_NVML_LATENCY=")
        .map(|(_, p)| p.trim())
        .unwrap_or_else(|| panic!("no profile: {text}"));
    let energy = profile
        .split(',')
        .find_map(|i| i.strip_prefix("nvmlDeviceGetTotalEnergyConsumption="))
        .unwrap_or_else(|| panic!("energy not charged: {profile}"));
    // CPU, and `+` a wait where the machine stalled the call.
    let charged: u64 = energy.split('+').map(|p| p.parse::<u64>().unwrap()).sum();
    assert!(charged >= 300, "{profile}");
    // The CPU column shows what the call spent, the wall column what it took with its wait.
    let t = bench_node("10s", "nvmlDeviceGetTemperature=300+3000");
    let c = &t["temperature"];
    assert!(
        c.us >= 3300.0 && c.cpu_us >= 300.0 && c.cpu_us < 3000.0,
        "{} {}",
        c.us,
        c.cpu_us
    );
}
