//! A GPU in trouble answering NVML with values no GPU can have: the agent sends those readings
//! as absent and the rest as they are, so the collector takes the batch instead of refusing
//! it with every other GPU's readings of the node.

use model::wire::v1::{Batch, Limits, Snapshot};
use serde_json::Value;

use super::{root, sample_at};

/// The fake NVML fixture `name` as `edit` leaves it, written to a scratch file named by `tag`.
fn edited_fixture(name: &str, tag: &str, edit: impl FnOnce(&mut Value)) -> std::path::PathBuf {
    let original = root().join("testing/fake-nvml/fixtures").join(name);
    let mut f: Value = serde_json::from_slice(&std::fs::read(original).unwrap()).unwrap();
    edit(&mut f);
    let path =
        std::env::temp_dir().join(format!("gpulens-trouble-{tag}-{}.json", std::process::id()));
    std::fs::write(&path, serde_json::to_vec(&f).unwrap()).unwrap();
    path
}

/// The steady 8-GPU fixture with GPU 3 answering the largest values NVML's types hold, its
/// first process too, a second process with a pid no Linux has, and a name with a control
/// character.
fn fixture_with_a_gpu_in_trouble(tag: &str) -> std::path::PathBuf {
    edited_fixture("h100x8-64proc-steady.json", tag, |f| {
        let d = &mut f["devices"][3];
        d["temp_c"] = u32::MAX.into();
        d["power_mw"] = u32::MAX.into();
        d["sm_clock_mhz"] = u32::MAX.into();
        d["memory_used"] = u64::MAX.into();
        d["memory_total"] = u64::MAX.into();
        d["remapped_rows"] = serde_json::json!([u32::MAX, 5]);
        d["name"] = "NVIDIA\u{7}H100".into();
        d["processes"][0]["used_memory"] = (u64::MAX - 1).into();
        // NVML structures of another version read as this one's: a pid no Linux has.
        d["processes"][1]["pid"] = u32::MAX.into();
    })
}

/// The batch a running agent would send of the cycle `sample --format json` printed passes the
/// collector's checks.
fn passes_the_collectors_checks(v: &Value) {
    let snapshot: Snapshot = serde_json::from_value(v["snapshot"].clone()).unwrap();
    let batch = Batch {
        version: 1,
        cluster: "lab".into(),
        node: "gpu-7".into(),
        agent_id: "test".into(),
        seq: 1,
        agent_version: None,
        interval_ms: 1000,
        inventory: Some(serde_json::from_value(v["inventory"].clone()).unwrap()),
        tenants: serde_json::from_value(v["tenants"].clone()).unwrap(),
        snapshots: vec![snapshot.clone()],
    };
    batch.validate(&Limits::default(), snapshot.ts).unwrap();
}

#[test]
fn readings_no_gpu_can_have_are_sent_absent_and_the_batch_is_accepted() {
    let fixture = fixture_with_a_gpu_in_trouble("sample");
    let (ok, stdout, log) = sample_at(&fixture, "json");
    std::fs::remove_file(&fixture).unwrap();
    // Rows remapped past u32 once panicked the agent (an overflow adding NVML's two counts).
    assert!(ok, "{log}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let snapshot: Snapshot = serde_json::from_value(v["snapshot"].clone()).unwrap();
    // The batch a running agent would send of this cycle passes the collector's checks.
    passes_the_collectors_checks(&v);
    let (sick, well) = (&snapshot.gpus[3], &snapshot.gpus[2]);
    assert!(sick.gpu_uuid.ends_with("0003"), "{}", sick.gpu_uuid);
    for (reading, value) in [
        ("temp_c", sick.temp_c.map(f64::from)),
        ("power_w", sick.power_w.map(f64::from)),
        ("sm_clock_mhz", sick.sm_clock_mhz.map(f64::from)),
        ("mem_used_bytes", sick.mem_used_bytes.map(|b| b as f64)),
        ("mem_total_bytes", sick.mem_total_bytes.map(|b| b as f64)),
    ] {
        assert_eq!(value, None, "{reading} of the GPU in trouble is absent");
        assert!(
            log.contains(&format!("reading={reading} ")),
            "{reading} is logged: {log}"
        );
    }
    // What it answered within reason stays, and every other GPU is whole.
    assert_eq!(sick.gpu_util, Some(0.97));
    assert_eq!(sick.mem_clock_mhz, Some(2619));
    assert!(well.temp_c.is_some() && well.power_w.is_some() && well.mem_used_bytes.is_some());
    let sick_process = snapshot
        .processes
        .iter()
        .find(|p| p.gpu_uuid == sick.gpu_uuid)
        .unwrap();
    assert_eq!(sick_process.mem_used_bytes, None);
    assert!(log.contains("reading=processes.mem_used_bytes "), "{log}");
    // The process with the impossible pid is left out; the GPU's other six stay.
    let on_sick: Vec<u32> = snapshot
        .processes
        .iter()
        .filter(|p| p.gpu_uuid == sick.gpu_uuid)
        .map(|p| p.pid)
        .collect();
    assert_eq!(on_sick.len(), 7, "{on_sick:?}");
    assert!(!on_sick.contains(&u32::MAX));
    assert!(
        log.contains("rows=processes why=pid 4294967295 past Linux's largest"),
        "{log}"
    );
    // The inventory has no absent fields: the name and size read as unknown.
    let inventory = &v["inventory"][3];
    assert_eq!(inventory["model"], "unknown");
    assert_eq!(inventory["memory_total_bytes"], 0);
    assert_eq!(v["inventory"][2]["model"], "NVIDIA H100 80GB HBM3");
}

/// MIG answers of another structure version: a GPU instance id of 5,000 and a placement
/// starting at slice 4,294,967,295. The instance is left out of the inventory, the placement
/// unknown, and the batch is taken.
#[test]
fn mig_ids_and_placements_the_wire_cannot_hold_are_left_out() {
    let path = edited_fixture("h100-mig.json", "mig", |f| {
        f["devices"][0]["mig"][3]["gi_id"] = 5000.into();
        f["devices"][0]["mig"][2]["placement"] = serde_json::json!([u32::MAX, 1]);
    });
    let (ok, stdout, log) = sample_at(&path, "json");
    std::fs::remove_file(&path).unwrap();
    assert!(ok, "{log}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    passes_the_collectors_checks(&v);
    let instances = v["inventory"][0]["mig_instances"].as_array().unwrap();
    let ids: Vec<u64> = instances
        .iter()
        .map(|m| m["gi_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [2, 3, 9], "{instances:?}");
    assert!(
        instances[2]["placement_start"].is_null(),
        "{}",
        instances[2]
    );
    assert_eq!(instances[0]["placement_start"], 4);
    assert!(log.contains("past what the wire holds"), "{log}");
}

/// What users write themselves: a Slurm task that rewrote its job's account and user in its
/// environment (there is no squeue on this node to ask instead), and the job user's name in
/// /etc/passwd holding an escape sequence. The batch is taken: the job keeps its tenant and its
/// process without those values, and the rest is whole.
#[test]
fn tenant_values_users_write_themselves_cost_only_those_values() {
    let scratch = agent::scratch::fresh_dir("tenant-values").unwrap();
    let fixtures = root().join("agent/tests/fixtures");
    let proc_root = scratch.join("proc");
    let copy = std::process::Command::new("cp")
        .arg("-r")
        .arg(fixtures.join("proc"))
        .arg(&proc_root)
        .status()
        .unwrap();
    assert!(copy.success());
    let long = "x".repeat(300);
    std::fs::write(
        proc_root.join("4102/environ"),
        format!("SLURM_JOB_ID=884213\0SLURM_JOB_ACCOUNT=climate\nrm -rf\0SLURM_JOB_USER={long}\0"),
    )
    .unwrap();
    let passwd = scratch.join("passwd");
    let names = std::fs::read_to_string(fixtures.join("passwd"))
        .unwrap()
        .replace("mkoch:", "mk\u{1b}[2Joch:");
    std::fs::write(&passwd, names).unwrap();
    let fixture = root().join("testing/fake-nvml/fixtures/h100-mig.json");
    let (ok, stdout, log) = super::sample_on(&fixture, "json", &proc_root, &passwd);
    std::fs::remove_dir_all(&scratch).unwrap();
    assert!(ok, "{log}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    passes_the_collectors_checks(&v);
    let tenant = |key: &str| {
        v["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["key"] == key)
            .unwrap_or_else(|| panic!("no tenant {key}: {v}"))
            .clone()
    };
    let job = tenant("slurm/884213");
    assert_eq!(job["job_id"], "884213");
    assert_eq!(job.get("account"), None, "{job}");
    assert_eq!(job.get("user"), None, "{job}");
    assert_eq!(job["uid"], 5001);
    let attributed = |pid: u64| {
        v["snapshot"]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("no process {pid}"))["tenant"]
            .clone()
    };
    assert_eq!(attributed(4102), "slurm/884213");
    assert!(attributed(4101).as_str().unwrap().starts_with("pod/"));
    assert!(
        log.contains("took out a tenant value") && log.contains("field=\"user\""),
        "{log}"
    );
}

/// A running agent on the GPU in trouble ships to a stand-in that checks batches as the
/// collector does: every batch is taken, none refused and dropped, and the agent's /metrics
/// count what it took out. Before the take-out every one of these batches was refused.
#[test]
fn a_running_agent_on_a_gpu_in_trouble_has_every_batch_taken() {
    use agent::bench::standin::Receiver;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use crate::delivery::{Proc, free_port, wait_until};

    let fixture = fixture_with_a_gpu_in_trouble("run");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let rx = rt.block_on(Receiver::start(0)).unwrap();
    let work = agent::scratch::fresh_dir("trouble-run").unwrap();
    let port = free_port();
    let _agent = Proc(
        Command::new(env!("CARGO_BIN_EXE_gpulens-agent"))
            .args(["run", "--node", "gpu-7", "--cluster", "lab", "--no-slurm"])
            .arg("--nvml-lib")
            .arg(super::fake_nvml())
            .arg("--proc-root")
            .arg(root().join("agent/tests/fixtures/proc"))
            .arg("--passwd")
            .arg(root().join("agent/tests/fixtures/passwd"))
            .args(["--collector", &rx.url(), "--token", "t", "--interval", "1s"])
            .args(["--spool-min-free-percent", "0"])
            .arg("--state-dir")
            .arg(&work)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("GPULENS_FAKE_NVML_FIXTURE", &fixture)
            .env("GPULENS_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until("three batches taken", Duration::from_secs(30), || {
        rx.arrivals().len() >= 3
    });
    let mut text = String::new();
    wait_until("the agent's metrics", Duration::from_secs(10), || {
        text = crate::metrics::get(port, "/metrics", "text/plain").unwrap_or_default();
        text.contains("gpulens_agent_batches_sent_total")
    });
    std::fs::remove_file(&fixture).unwrap();
    let sample = |prefix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        sample("gpulens_agent_batches_dropped_total{reason=\"rejected\"}"),
        0.0,
        "{text}"
    );
    let sick = "GPU-8c0f0003-2b6e-4d7a-9f15-7e3a1c5d0003";
    assert!(
        sample(&format!(
            "gpulens_agent_readings_out_of_domain_total{{gpu_uuid=\"{sick}\",reading=\"temp_c\"}}"
        )) >= 1.0,
        "{text}"
    );
    assert!(
        sample(&format!(
            "gpulens_agent_rows_dropped_total{{gpu_uuid=\"{sick}\",rows=\"processes\"}}"
        )) >= 1.0,
        "{text}"
    );
    std::fs::remove_dir_all(&work).unwrap();
}
