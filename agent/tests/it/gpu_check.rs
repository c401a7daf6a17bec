//! The real-GPU check's own logic (tests/gpu/check.sh), before any GPU is seen: the agent on
//! the fake NVML with a fixture holding a real H100 capture's readings, against that capture
//! replayed as nvidia-smi. Everything both report agrees; a fixture changed in two fields
//! gives DIFFER for exactly those two, and exit status 1; the driver's measured costs are
//! replayed on the fake NVML at the bar's shape.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn gpu_dir() -> PathBuf {
    crate::root().join("tests/gpu")
}

/// Runs check.sh with `fixture`; its exit status and report.json.
fn check(fixture: &Path, out: &Path) -> (Option<i32>, Value) {
    let data = gpu_dir().join("testdata");
    let status = Command::new("bash")
        .arg(gpu_dir().join("check.sh"))
        .arg(out)
        .env("GPU_CHECK_AGENT", env!("CARGO_BIN_EXE_gpulens-agent"))
        // The load never runs here (no driver): the fixture's busy process stands in for it.
        .env("GPU_CHECK_LOAD", "/bin/true")
        .env("GPU_CHECK_EXPECT_PID", "11345")
        .env("GPU_CHECK_EXPECT_MIB", "15000")
        .env("GPU_CHECK_FOOTPRINT_SECONDS", "3")
        .env("GPU_CHECK_NVIDIA_SMI", data.join("fake-nvidia-smi"))
        .env("GPULENS_NVML_LIB", crate::fake_nvml())
        .env("GPU_CHECK_FAKE_NVML", crate::fake_nvml())
        .env("GPULENS_FAKE_NVML_FIXTURE", fixture)
        .env("GPULENS_LOG", "warn")
        .output()
        .unwrap();
    let report = std::fs::read_to_string(out.join("report.json")).unwrap_or_else(|e| {
        panic!(
            "no report ({e}); check.sh said:\n{}\n{}",
            String::from_utf8_lossy(&status.stdout),
            String::from_utf8_lossy(&status.stderr)
        )
    });
    (status.status.code(), serde_json::from_str(&report).unwrap())
}

fn results(report: &Value, round: &str) -> Vec<(String, String)> {
    report[round][0]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["field"].as_str().unwrap().to_owned(),
                f["result"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn the_gpu_check_agrees_with_a_recorded_h100_and_catches_a_disagreement() {
    if Command::new("python3").arg("--version").output().is_err() {
        assert!(
            std::env::var("CI").is_err(),
            "python3 is needed for tests/gpu/check.py"
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("gpulens-gpu-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let fixture = gpu_dir().join("testdata/h100-load.fake-nvml.json");

    let (code, report) = check(&fixture, &dir.join("same"));
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["machine"]["driver"], "590.48.01");
    assert_eq!(report["machine"]["gpus"][0], "NVIDIA H100 80GB HBM3");
    for round in ["idle", "load"] {
        for (field, result) in results(&report, round) {
            let want = if field.starts_with("pcie") {
                // The capture has no `dmon -s t`: the replay refuses it.
                "only the agent reports it"
            } else {
                "agree"
            };
            assert_eq!(result, want, "{round} {field}");
        }
    }
    assert_eq!(
        report["process"]["result"], "agree",
        "{:#}",
        report["process"]
    );
    assert_eq!(report["process"]["checks"].as_array().unwrap().len(), 5);
    assert!(
        report["mig"].is_null(),
        "the capture's GPU is not in MIG mode"
    );
    let fp = &report["footprint"];
    assert!(fp["batches_received"].as_u64().unwrap() >= 1, "{fp:#}");
    assert!(fp["rss_mib_max"].as_f64().unwrap() > 0.0, "{fp:#}");
    // Where the resident memory sits, by mapping: the agent's own binary and the NVML library
    // it loaded (here the fake) are among the largest, each counted once with all its parts.
    let by_mapping: Vec<(&str, u64)> = fp["rss_by_mapping"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["mapping"].as_str().unwrap(),
                m["rss_kib"].as_u64().unwrap(),
            )
        })
        .collect();
    for name in ["gpulens-agent", "libfake_nvml.so"] {
        assert_eq!(
            by_mapping
                .iter()
                .filter(|(m, kib)| *m == name && *kib > 0)
                .count(),
            1,
            "{name}: {by_mapping:?}"
        );
    }
    assert!(
        by_mapping.windows(2).all(|w| w[0].1 >= w[1].1) && by_mapping.len() <= 8,
        "{by_mapping:?}"
    );
    // The bench's per-call table, kept as records (what a real driver's calls cost goes into
    // docs/gpu-checks/ with the report): every reading the cycle takes each second is there.
    let calls = report["bench"]["calls"].as_array().unwrap();
    let readings: Vec<&str> = calls
        .iter()
        .map(|c| c["reading"].as_str().unwrap())
        .collect();
    for reading in ["memory", "utilization", "power", "compute_processes"] {
        assert!(readings.contains(&reading), "{reading}: {readings:?}");
    }
    assert!(
        calls
            .iter()
            .all(|c| c["us_per_call"].as_f64().unwrap() >= 0.0
                && c["calls_per_cycle"].as_f64().unwrap() > 0.0),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .all(|c| c["nvml_function"].as_str().unwrap().starts_with("nvml")),
        "{calls:?}"
    );
    // The driver's costs replayed at the bar's shape: the fake NVML with 8 GPUs and 64
    // processes, each function charged what the bench measured on the "driver" here.
    let replay = &report["fake_with_these_costs"];
    assert_eq!(replay["gpus"], 8, "{replay:#}");
    assert!(
        replay["cpu_ms_per_cycle"].as_f64().unwrap() > 0.0,
        "{replay:#}"
    );
    assert!(
        replay["core_percent_at_1hz"].as_f64().is_some(),
        "{replay:#}"
    );
    assert!(
        replay["profile"]
            .as_str()
            .unwrap()
            .contains("nvmlDeviceGetPowerUsage="),
        "{replay:#}"
    );
    let text = std::fs::read_to_string(dir.join("same/report.txt")).unwrap();
    assert!(
        text.contains("[bench on the fake NVML, 8 GPUs x 64 processes"),
        "{text}"
    );
    assert!(text.contains("summary: 33 agree, 0 differ"), "{text}");
    assert!(
        text.contains("[bench] driver calls per cycle, the costliest first"),
        "{text}"
    );
    assert!(dir.join("same/raw.tar.gz").exists());

    // Memory used 1 GiB off and 10 °C hotter: exactly those two differ.
    let mut f: Value = serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    let d = &mut f["devices"][0];
    d["memory_used"] = (d["memory_used"].as_u64().unwrap() + (1 << 30)).into();
    d["temp_c"] = (d["temp_c"].as_u64().unwrap() + 10).into();
    std::fs::create_dir_all(&dir).unwrap();
    let changed = dir.join("changed.json");
    std::fs::write(&changed, f.to_string()).unwrap();
    let (code, report) = check(&changed, &dir.join("changed"));
    assert_eq!(code, Some(1));
    let differ: Vec<String> = results(&report, "load")
        .into_iter()
        .filter(|(_, r)| r == "DIFFER")
        .map(|(f, _)| f)
        .collect();
    assert_eq!(differ, ["memory_used_mib", "temperature_c"]);
    let _ = std::fs::remove_dir_all(&dir);
}
