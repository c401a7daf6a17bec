use crate::measure::Measure;
use model::rollup::{HOUR_MS, TenantAgg};

use super::*;
use crate::config::Config;
use crate::holdings::holdings;
use crate::input::{GpuRef, Input, TenantRef, TenantSeries, Waiting};

const H: i64 = HOUR_MS;
const H100: &str = "NVIDIA H100 80GB HBM3";

fn gpu(node: &str, index: i64) -> GpuRef {
    GpuRef {
        cluster: "c1".into(),
        node: node.into(),
        uuid: format!("GPU-{node}-{index}"),
        index,
        model: H100.into(),
        memory_total_bytes: 80 << 30,
        sharing: model::inventory::Sharing::Exclusive,
        replicas: 1,
        mig: Vec::new(),
    }
}

/// One allocated hour of a whole GPU: idle throughout, or busy throughout.
fn hour(idle: bool) -> TenantAgg {
    TenantAgg {
        samples: 60,
        covered_s: 3600.0,
        alloc_n: 60,
        alloc_share_sum: 60.0,
        present_n: 60,
        idle_lead_s: if idle { 3600.0 } else { 0.0 },
        idle_trail_s: if idle { 3600.0 } else { 0.0 },
        idle_max_s: if idle { 3600.0 } else { 0.0 },
        idle_n: if idle { 60 } else { 0 },
        active_n: if idle { 0 } else { 60 },
        ..TenantAgg::default()
    }
}

fn hold(input: &mut Input, tenant: &str, node: &str, index: i64, idle: bool) {
    input.tenants.push(TenantRef {
        cluster: "c1".into(),
        key: tenant.into(),
        kind: "pod".into(),
        name: format!("cv/{tenant}"),
        team: Some("cv".into()),
        nodes: vec![node.into()],
    });
    let mut series = TenantSeries {
        cluster: "c1".into(),
        node: node.into(),
        gpu: format!("GPU-{node}-{index}"),
        tenant: tenant.into(),
        ..TenantSeries::default()
    };
    for h in 0..10 {
        series.push(h * H, &hour(idle));
    }
    input.tenant_hours.push(series);
}

fn pod(name: &str, resource: &str, count: i64, from: i64, to: i64) -> Waiting {
    Waiting {
        cluster: "c1".into(),
        source: "pod".into(),
        name: format!("ml/{name}"),
        team: "ml".into(),
        resource: resource.into(),
        count,
        product: Some("NVIDIA-H100-80GB-HBM3".into()),
        reason: "Unschedulable".into(),
        message: "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.".into(),
        from_ms: from,
        to_ms: to,
    }
}

/// Two nodes of four H100s. On n1 `idle-a` holds GPU 0 with no kernel, `busy-b` and `busy-c`
/// use GPUs 1 and 2; on n2 three busy tenants hold GPUs 0–2. One GPU is free on each node.
fn fleet() -> Input {
    let mut input = Input {
        from_ms: 0,
        to_ms: 10 * H,
        now_ms: 10 * H,
        gpus: (0..4).flat_map(|i| [gpu("n1", i), gpu("n2", i)]).collect(),
        ..Input::default()
    };
    hold(&mut input, "idle-a", "n1", 0, true);
    hold(&mut input, "busy-b", "n1", 1, false);
    hold(&mut input, "busy-c", "n1", 2, false);
    for i in 0..3 {
        hold(&mut input, &format!("busy-n2-{i}"), "n2", i, false);
    }
    input
}

fn run(input: &Input) -> Vec<Finding> {
    let cfg = Config::default();
    let ctx = Ctx::new(input, &cfg);
    waiting_demand(&ctx, &holdings(input))
}

#[test]
fn waiting_work_is_set_against_idle_holdings_and_fragmentation_hour_by_hour() {
    let mut input = fleet();
    // Two GPUs wanted on one node from 2h to 6h: 8 GPU-hours. Each of those hours one GPU was
    // held idle (4 reclaimable GPU-hours), and two were free, one per node (fragmentation).
    // Half an hour of a one-GPU pod (6h to 6h30): 0.5 GPU-hours, 0.5 reclaimable, not
    // fragmented (one free GPU is enough).
    input.waiting = vec![
        pod("train", WHOLE_GPU, 2, 2 * H, 6 * H),
        pod("eval", WHOLE_GPU, 1, 6 * H, 6 * H + H / 2),
    ];
    let found = run(&input);
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    let m = |k: &str| f.metrics[&Measure::parse(k).expect("a measure")];
    assert_eq!(f.kind, FindingKind::WaitingDemand);
    assert_eq!(f.team.as_deref(), Some("ml"));
    assert_eq!(m("waiting_gpu_hours"), 8.5);
    assert_eq!(m("waiting_items"), 2.0);
    assert_eq!(m("waiting_gpus_peak"), 2.0);
    assert_eq!(
        m("idle_held_gpu_hours"),
        5.0,
        "idle-a in the five hours something waited"
    );
    assert_eq!(m("reclaimable_gpu_hours"), 4.5);
    assert_eq!(m("fragmented_gpu_hours"), 8.0);
    assert_eq!(m("reclaimable_cost"), 4.5 * 2.5);
    assert_eq!(
        f.tenants,
        ["idle-a"],
        "the idle holder is named, the busy ones are not"
    );
    assert_eq!((f.from_ms, f.to_ms), (2 * H, 7 * H));
    assert_eq!(f.severity, Severity::Warning);
    assert!(
        f.summary.contains("cv/idle-a on GPU 0 of n1"),
        "{}",
        f.summary
    );
    assert!(f.summary.contains("fragmentation"), "{}", f.summary);
    assert_eq!(f.headline(), (8.5, "GPU-h"));
}

#[test]
fn work_that_waits_for_another_product_or_outside_the_window_counts_apart() {
    let mut input = fleet();
    let mut a100 = pod("a100-job", WHOLE_GPU, 1, 0, 4 * H);
    a100.product = Some("NVIDIA-A100-SXM4-80GB".into());
    // Waited from before the window: only its part inside counts.
    let early = pod("early", WHOLE_GPU, 1, -5 * H, 2 * H);
    input.waiting = vec![a100, early];
    let found = run(&input);
    assert_eq!(found.len(), 2, "{found:#?}");
    let by_pool: BTreeMap<&str, &Finding> = found
        .iter()
        .map(|f| (if f.tenants.is_empty() { "a100" } else { "h100" }, f))
        .collect();
    let a = by_pool["a100"];
    assert_eq!(a.metrics[&Measure::WaitingGpuHours], 4.0);
    assert_eq!(
        a.metrics[&Measure::IdleHeldGpuHours],
        0.0,
        "no A100 in the fleet holds anything"
    );
    assert_eq!(a.severity, Severity::Info);
    assert!(
        a.summary.contains("no GPU of the pool was held idle"),
        "{}",
        a.summary
    );
    let h = by_pool["h100"];
    assert_eq!(h.metrics[&Measure::WaitingGpuHours], 2.0);
    assert_eq!(h.metrics[&Measure::ReclaimableGpuHours], 2.0);
    assert_ne!(a.id, h.id);
}

#[test]
fn units_of_shared_and_mig_resources_are_gpu_equivalents() {
    assert_eq!(unit_share(WHOLE_GPU, 4), Some(1.0));
    assert_eq!(unit_share(SHARED_GPU, 4), Some(0.25));
    assert_eq!(unit_share(SHARED_GPU, 0), Some(1.0));
    assert!((unit_share("nvidia.com/mig-3g.40gb", 1).unwrap() - 3.0 / 7.0).abs() < 1e-6);
    assert_eq!(unit_share("example.com/fpga", 1), None);
    let mut input = fleet();
    input.waiting = vec![pod("small", "nvidia.com/mig-1g.10gb", 7, 0, 2 * H)];
    let found = run(&input);
    assert!((found[0].metrics[&Measure::WaitingGpuHours] - 2.0).abs() < 1e-6);
    // Below the threshold (one GPU-hour) nothing is reported.
    input.waiting = vec![pod("tiny", WHOLE_GPU, 1, 0, H / 2)];
    assert!(run(&input).is_empty());
}

#[test]
fn product_labels_match_nvml_names_with_their_suffixes() {
    assert!(product_matches(H100, "NVIDIA-H100-80GB-HBM3"));
    assert!(product_matches(H100, "NVIDIA-H100-80GB-HBM3-SHARED"));
    assert!(product_matches(H100, "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"));
    assert!(!product_matches(H100, "NVIDIA-H100-NVL"));
    assert!(!product_matches(
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA-H100-80GB-HBM3"
    ));
}

#[test]
fn an_idle_mig_slice_is_no_supply_for_whole_gpus_and_the_reverse() {
    let mut input = fleet();
    // idle-a's GPU is split by MIG: its idle holding serves MIG requests only.
    input
        .gpus
        .iter_mut()
        .find(|g| g.uuid == "GPU-n1-0")
        .unwrap()
        .sharing = model::inventory::Sharing::Mig;
    input.waiting = vec![
        pod("whole", WHOLE_GPU, 1, 0, 2 * H),
        pod("slice", "nvidia.com/mig-1g.10gb", 7, 0, 2 * H),
    ];
    let found = run(&input);
    assert_eq!(found.len(), 2, "{found:#?}");
    let whole = found
        .iter()
        .find(|f| f.pool.as_deref().unwrap().contains("whole"))
        .unwrap();
    let mig = found
        .iter()
        .find(|f| f.pool.as_deref().unwrap().contains("MIG"))
        .unwrap();
    assert_eq!(whole.metrics[&Measure::IdleHeldGpuHours], 0.0);
    assert!(whole.tenants.is_empty());
    assert_eq!(mig.metrics[&Measure::IdleHeldGpuHours], 2.0);
    assert_eq!(mig.tenants, ["idle-a"]);
    assert_eq!(
        whole.pool.as_deref(),
        Some("NVIDIA H100 80GB HBM3 (whole GPUs)")
    );
}
