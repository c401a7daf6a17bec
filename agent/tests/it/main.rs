//! The agent against the fake NVML stand-in (built from testing/fake-nvml/ in this workspace) and a
//! fixture proc tree: the real nvml-wrapper code path runs, only the driver is fake.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The fake libnvidia-ml.so, next to this test's own build output.
fn fake_nvml() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let lib = dir.join("libfake_nvml.so");
    assert!(
        lib.exists(),
        "{} is missing: build the workspace (cargo build -p fake-nvml)",
        lib.display()
    );
    lib
}

/// `gpulens-agent` with `args` (a subcommand and its options) on the fake NVML serving the
/// fixture at `fixture`, logging warnings only; the caller adds the rest.
pub(crate) fn on_fake(fixture: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpulens-agent"));
    cmd.args(args)
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .env("GPULENS_FAKE_NVML_FIXTURE", fixture)
        .env("GPULENS_LOG", "warn");
    cmd
}

/// The standard output of `cmd`, which must succeed (its log shown where it does not).
pub(crate) fn stdout_of(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn sample(fixture: &str, format: &str) -> (bool, String, String) {
    sample_at(
        &root().join("testing/fake-nvml/fixtures").join(fixture),
        format,
    )
}

/// `gpulens-agent sample --once` of node `gpu-7` in cluster `lab` on the fake NVML serving
/// the fixture at `fixture`: whether it succeeded, its standard output and its log.
pub(crate) fn sample_at(fixture: &Path, format: &str) -> (bool, String, String) {
    sample_on(
        fixture,
        format,
        &root().join("agent/tests/fixtures/proc"),
        &root().join("agent/tests/fixtures/passwd"),
    )
}

/// The same on the proc tree at `proc_root` with the user names of `passwd`.
pub(crate) fn sample_on(
    fixture: &Path,
    format: &str,
    proc_root: &Path,
    passwd: &Path,
) -> (bool, String, String) {
    let out = on_fake(
        fixture,
        &[
            "sample",
            "--once",
            "--node",
            "gpu-7",
            "--cluster",
            "lab",
            "--format",
            format,
        ],
    )
    .arg("--proc-root")
    .arg(proc_root)
    .arg("--passwd")
    .arg(passwd)
    .output()
    .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn sample_once_shows_mig_instances_and_processes_with_their_tenants() {
    let (ok, stdout, stderr) = sample("h100-mig.json", "json");
    assert!(ok, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (v["cluster"].as_str(), v["node"].as_str()),
        (Some("lab"), Some("gpu-7"))
    );
    let gpu = &v["inventory"][0];
    assert_eq!(gpu["mig_enabled"], true);
    let ids: Vec<(u64, &str)> = gpu["mig_instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["gi_id"].as_u64().unwrap(), m["profile"].as_str().unwrap()))
        .collect();
    assert_eq!(
        ids,
        [
            (2, "3g.40gb"),
            (3, "2g.20gb"),
            (9, "1g.10gb"),
            (10, "1g.10gb")
        ]
    );
    assert_eq!(gpu["mig_instances"][0]["compute_slices"], 3);
    let placements: Vec<(u64, u64)> = gpu["mig_instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["placement_start"].as_u64().unwrap(),
                m["placement_size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        placements,
        [(4, 4), (0, 2), (2, 1), (3, 1)],
        "from NVML's GPU-instance enumeration"
    );
    let snap = &v["snapshot"];
    // NVML has no utilization under MIG: absent, never 0.
    assert!(
        snap["gpus"][0].get("gpu_util").is_none(),
        "{}",
        snap["gpus"][0]
    );
    assert_eq!(snap["gpus"][0]["power_w"], 98.0);
    // The energy counter (mJ in NVML, J on the wire): the fixture's reading at load plus what
    // its 98 W drew since, which a one-shot sample keeps within a minute.
    let energy = snap["gpus"][0]["energy_j"].as_f64().unwrap();
    assert!(
        (123_456.789..123_456.789 + 98.0 * 60.0).contains(&energy),
        "{energy}"
    );
    assert_eq!(snap["mig"].as_array().unwrap().len(), 4);
    let procs = snap["processes"].as_array().unwrap();
    let p = |pid: u64| procs.iter().find(|p| p["pid"] == pid).unwrap();
    assert_eq!(
        (p(4101)["gi_id"].as_u64(), p(4101)["ci_id"].as_u64()),
        (Some(2), Some(0))
    );
    assert!(p(4101).get("sm_util").is_none());
    assert_eq!(
        p(4101)["tenant"],
        "pod/7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f/9f8e7d6c5b4a"
    );
    assert_eq!(p(4102)["tenant"], "slurm/884213");
    // Start time from /proc: boot 1795200000 s + 360000 ticks of 10 ms.
    assert_eq!(p(4102)["start_time"], 1_795_203_600_000i64);
    let tenants = v["tenants"].as_array().unwrap();
    let slurm = tenants.iter().find(|t| t["kind"] == "slurm_job").unwrap();
    assert_eq!(
        (slurm["user"].as_str(), slurm["uid"].as_u64()),
        (Some("mkoch"), Some(5001))
    );

    let (ok, table, _) = sample("h100-mig.json", "table");
    assert!(ok);
    assert!(table.contains("MIG 3g.40gb    GI 2   CI 0"), "{table}");
    assert!(table.contains("not measurable without DCGM"), "{table}");
    assert!(table.contains("job 884213 (mkoch)"), "{table}");
}

#[test]
fn unsupported_readings_are_absent_not_zero_and_reported_once() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpulens-agent"))
        .args(["sample", "--once", "--node", "ws", "--format", "json"])
        .arg("--nvml-lib")
        .arg(fake_nvml())
        .arg("--proc-root")
        .arg(root().join("agent/tests/fixtures/proc"))
        .env(
            "GPULENS_FAKE_NVML_FIXTURE",
            root().join("testing/fake-nvml/fixtures/rtx3090-unsupported.json"),
        )
        .env("GPULENS_LOG", "info")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let g = &v["snapshot"]["gpus"][0];
    assert_eq!(g["gpu_util"], 0.35);
    for absent in [
        "power_w",
        "energy_j",
        "ecc_corrected",
        "pcie_rx_bytes_per_s",
        "enc_util",
    ] {
        assert!(g.get(absent).is_none(), "{absent} should be absent: {g}");
    }
    let p = &v["snapshot"]["processes"][0];
    assert!(
        p.get("sm_util").is_none(),
        "per-process utilization is unsupported: {p}"
    );
    assert_eq!(p["tenant"], "host/1002");
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(log.matches("field=\"power\"").count(), 1, "{log}");
    assert!(!log.contains("ERROR"), "{log}");
}

#[test]
fn a_missing_driver_is_a_clear_start_up_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpulens-agent"))
        .args([
            "sample",
            "--once",
            "--node",
            "n",
            "--nvml-lib",
            "/nonexistent/libnvidia-ml.so.1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot load the NVIDIA management library")
            && err.contains("Is the NVIDIA driver installed"),
        "{err}"
    );
}

/// In-process, several cycles: 8 GPUs with 64 processes; one GPU falls off the bus; an XID
/// error arrives through the event set. One test only: the fake's state is per process.
#[test]
fn eight_gpus_a_lost_gpu_and_an_xid_event() {
    use agent::backend::GpuBackend;
    let fixture = root().join("testing/fake-nvml/fixtures/h100x8-64proc.json");
    // SAFETY: set before NVML starts and before any other thread of this test reads the
    // environment; nextest runs each test in a process of its own.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("GPULENS_FAKE_NVML_FIXTURE", &fixture)
    };
    let procfs = agent::attribution::ProcFs::new(&root().join("agent/tests/fixtures/proc"), None);
    let mut b = agent::nvml::NvmlBackend::open(&fake_nvml(), "c", "n", procfs).unwrap();
    // The rare readings (NVLink among them) every cycle, as `--rare-every 0s` reads them.
    b.set_rare_every(std::time::Duration::ZERO);
    assert_eq!(b.inventory().len(), 8);
    let mut gpu_counts = Vec::new();
    let mut lost_events = 0;
    let mut xids = Vec::new();
    for i in 0..6 {
        let (snap, _) = b.sample(1_800_000_000_000 + i * 1000).unwrap();
        if i == 0 {
            assert_eq!(snap.processes.len(), 64);
            assert!(
                snap.processes.iter().all(|p| p.sm_util == Some(0.12)),
                "per-process SM shares"
            );
            let capped = snap.gpus.iter().find(|g| g.throttle_reasons == Some(4));
            assert!(capped.is_some(), "GPU 5 reports the SW power cap");
            assert_eq!(snap.gpus[0].pcie_rx_bytes_per_s, Some(1_200_000 * 1024));
            assert_eq!(snap.gpus[0].remapped_rows, Some(0));
            assert_eq!(
                snap.gpus[0].retired_pages, None,
                "H100s remap rows; page retirement is not supported"
            );
            assert_eq!(
                snap.gpus[0].nvlink_tx_bytes_per_s, None,
                "a rate needs two readings"
            );
        }
        if i == 1 {
            // ~20 GB/s each way from the counters' growth between the two cycles.
            let tx = snap.gpus[0].nvlink_tx_bytes_per_s.unwrap() as f64;
            assert!((tx / 20e9 - 1.0).abs() < 0.1, "nvlink tx {tx}");
        }
        gpu_counts.push(snap.gpus.len());
        lost_events += snap.events.iter().filter(|e| e.kind == "gpu_lost").count();
        xids.extend(
            snap.events
                .iter()
                .filter(|e| e.kind == "xid")
                .map(|e| e.code),
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        gpu_counts,
        [8, 8, 8, 7, 7, 7],
        "GPU 6 is sampled three times, then lost"
    );
    assert_eq!(lost_events, 1, "the loss is reported once");
    assert_eq!(b.inventory().len(), 7);
    assert_eq!(xids, [79], "one XID 79 from GPU 2");
}

mod delivery;
mod driver_costs;
mod gpu_check;
mod kubelet;
mod listener;
mod metrics;
mod nfd;
mod out_of_domain;
mod outages;
mod owners;
mod simulated_grants;
mod slurm;

/// `--log-format json`: the agent's stop reason is one JSON line, and a token file that cannot
/// be read is named without echoing any token.
#[test]
fn the_agent_logs_json_and_names_a_missing_token_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpulens-agent"))
        .args([
            "--log-format",
            "json",
            "run",
            "--collector",
            "http://127.0.0.1:9",
        ])
        .args(["--token-file", "/nonexistent/gpulens-token"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8(out.stderr).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    assert_eq!(last["level"], "ERROR");
    assert!(
        last["error"]
            .as_str()
            .unwrap()
            .contains("--token-file /nonexistent/gpulens-token"),
        "{last}"
    );
    // Both a token and a token file is a usage error.
    let out = Command::new(env!("CARGO_BIN_EXE_gpulens-agent"))
        .args(["run", "--collector", "http://127.0.0.1:9", "--token", "t"])
        .args(["--token-file", "/x"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}
