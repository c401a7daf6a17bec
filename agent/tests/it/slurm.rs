//! A Slurm job that holds a GPU and runs nothing on it is seen: its allocation comes from the
//! job's cgroup (the fake NVML serves the GPUs, a scratch cgroup tree stands for the node's).

use serde_json::Value;

use super::{on_fake, root, stdout_of};

#[test]
fn a_slurm_job_holding_a_gpu_without_a_process_gets_its_allocation() {
    let scratch = agent::scratch::fresh_dir("slurm-e2e").unwrap();
    // Job 884213 (the fixture process 4102's job) holds GPU 2, on which nothing runs; as
    // slurmstepd leaves it on a cgroup v1 node with ConstrainDevices=yes.
    let job = scratch.join("devices/slurm/uid_5001/job_884213");
    std::fs::create_dir_all(job.join("step_batch")).unwrap();
    std::fs::write(
        job.join("devices.list"),
        "c 1:3 rwm\nc 195:255 rwm\nc 195:2 rwm\n",
    )
    .unwrap();
    std::fs::write(job.join("step_batch/cgroup.procs"), "4102\n").unwrap();
    let run = |extra: &[&str]| -> Value {
        serde_json::from_slice(&agent_sample(&scratch, "json", extra)).unwrap()
    };
    let run_table =
        |scratch: &std::path::Path| String::from_utf8(agent_sample(scratch, "table", &[])).unwrap();
    // slurmctld's word on the job's account: a stand-in squeue, as squeue answers.
    let squeue = scratch.join("squeue");
    let answer = serde_json::json!({"jobs": [{"job_id": 884213, "account": "physics",
        "user_name": "mkoch", "job_state": ["RUNNING"], "nodes": "gpu-7",
        "gres_detail": ["gpu:1(IDX:2)"]}]});
    std::fs::write(
        &squeue,
        format!("#!/bin/sh\n[ \"$3\" = 884213 ] && echo '{answer}' && exit 0\nexit 1\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&squeue, std::fs::Permissions::from_mode(0o755)).unwrap();
    let squeue = squeue.to_str().unwrap();
    let v = run(&["--slurm-squeue", squeue]);
    let allocations = v["snapshot"]["allocations"].as_array().unwrap();
    let held: Vec<&Value> = allocations
        .iter()
        .filter(|a| a["tenant"] == "slurm/884213")
        .collect();
    assert_eq!(held.len(), 1, "{allocations:?}");
    assert_eq!(
        held[0]["gpu_uuid"],
        "GPU-a1b2c3d4-0000-4000-8000-00000000a101"
    );
    assert_eq!(held[0]["share"], 1.0);
    assert!(
        v["snapshot"]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["gpu_uuid"] != held[0]["gpu_uuid"]),
        "nothing runs on the held GPU"
    );
    let tenant = v["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["key"] == "slurm/884213")
        .expect("the job is a tenant");
    assert_eq!(tenant["kind"], "slurm_job");
    assert_eq!(tenant["user"], "mkoch");
    assert_eq!(
        tenant["account"], "physics",
        "slurmctld's account, not the task's environment's"
    );
    // Without a squeue, the task's environment is all there is.
    let v = run(&["--slurm-squeue", "no-such-squeue"]);
    let account = |v: &Value| {
        v["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["key"] == "slurm/884213")
            .map(|t| t["account"].clone())
    };
    assert_eq!(account(&v), Some(Value::from("climate")));
    // The table for people shows the holding, and that nothing of the job runs there.
    let table = run_table(&scratch);
    let line = table
        .lines()
        .find(|l| l.contains("[slurm/884213]"))
        .unwrap_or_else(|| panic!("no holder line:\n{table}"));
    assert!(
        line.starts_with("2 ") && line.contains(" 1.00 ") && line.contains(" none "),
        "{line}"
    );
    // Told not to read Slurm, the agent shows no holding.
    let v = run(&["--no-slurm"]);
    assert!(
        v["snapshot"]["allocations"]
            .as_array()
            .is_none_or(|a| a.iter().all(|a| a["tenant"] != "slurm/884213")),
        "{v}"
    );
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// `gpulens-agent sample --once` on the fake NVML's `k8s-node.json` with the cgroup tree at
/// `cgroups` (and no kubelet): its standard output.
fn agent_sample(cgroups: &std::path::Path, format: &str, extra: &[&str]) -> Vec<u8> {
    stdout_of(
        on_fake(
            &root().join("testing/fake-nvml/fixtures/k8s-node.json"),
            &["sample", "--once", "--node", "gpu-7", "--format", format],
        )
        .arg("--proc-root")
        .arg(root().join("agent/tests/fixtures/proc"))
        .arg("--passwd")
        .arg(root().join("agent/tests/fixtures/passwd"))
        .arg("--pod-resources-socket")
        .arg(cgroups.join("no-kubelet.sock"))
        .arg("--cgroup-root")
        .arg(cgroups)
        .args(extra),
    )
}
