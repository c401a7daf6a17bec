//! In-process cycles on the fake NVML's `k8s-node.json` (an A100 two pod processes share) with
//! a `/proc` of the test's own: what `/proc` says of a process's owner is read when the process
//! is first seen, again a minute later, and at once for a pid used again by a new process; the
//! two processes' shares between reads of NVML's per-process utilization are the device's own
//! utilization split as last read. One test only: the fake's state is per process.

use agent::backend::GpuBackend;

const T0: i64 = 1_800_000_000_000;

#[test]
fn owners_are_read_once_a_minute_or_for_a_new_process_and_shares_split_the_device() {
    let proc = agent::scratch::fresh_dir("owners").unwrap();
    copy_dir(&crate::root().join("agent/tests/fixtures/proc"), &proc);
    let fixture = crate::root().join("testing/fake-nvml/fixtures/k8s-node.json");
    // SAFETY: set before NVML starts and before any other thread of this test reads the
    // environment; nextest runs each test in a process of its own.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("GPULENS_FAKE_NVML_FIXTURE", &fixture)
    };
    let procfs = agent::attribution::ProcFs::new(proc.as_path(), None);
    let mut b = agent::nvml::NvmlBackend::open(&crate::fake_nvml(), "c", "n", procfs).unwrap();
    let tenant_of = |snap: &model::wire::v1::Snapshot, pid: u32| {
        let p = snap.processes.iter().find(|p| p.pid == pid).unwrap();
        (p.tenant.clone().unwrap(), p.sm_util.unwrap())
    };
    let (first, _) = b.sample(T0).unwrap();
    let (pod, sm) = tenant_of(&first, 4101);
    assert!(pod.starts_with("pod/"), "{pod}");
    assert_eq!(sm, 0.61, "the first cycle reads NVML's shares");

    // 4101 moves to a host cgroup (no pod): seen only once the minute has passed.
    std::fs::write(proc.as_path().join("4101/cgroup"), "0::/user.slice\n").unwrap();
    let (snap, _) = b.sample(T0 + 1_000).unwrap();
    let (still, sm) = tenant_of(&snap, 4101);
    assert_eq!(still, pod, "read a second ago");
    // Between reads: the device's 88 % split 61 : 27, as last read.
    assert!((sm - 0.61).abs() < 1e-6, "{sm}");
    let (later, _) = b.sample(T0 + 61_000).unwrap();
    assert!(
        tenant_of(&later, 4101).0.starts_with("host/"),
        "read again after a minute"
    );

    // Pid 4104 is used again by a new process (another start time, another pod): at once.
    let before = tenant_of(&later, 4104).0;
    let stat = std::fs::read_to_string(proc.as_path().join("4104/stat")).unwrap();
    std::fs::write(
        proc.as_path().join("4104/stat"),
        stat.replace(" 360000 ", " 960000 "),
    )
    .unwrap();
    std::fs::write(
        proc.as_path().join("4104/cgroup"),
        "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podc0c0c0c0_1111_4222_8333_444455556666.slice/cri-containerd-0000000000000000000000000000000000000000000000000000000000002009.scope\n",
    )
    .unwrap();
    let (snap, _) = b.sample(T0 + 62_000).unwrap();
    let after = tenant_of(&snap, 4104).0;
    assert_ne!(
        after, before,
        "a new process under the old pid is read at once"
    );
    assert!(after.contains("c0c0c0c0"), "{after}");
    let _ = std::fs::remove_dir_all(&proc);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}
