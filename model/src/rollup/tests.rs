use super::*;

fn raw(ts: i64, util: f32) -> RawGpu {
    RawGpu {
        gpu_uuid: "G".into(),
        ts,
        interval_ms: 1000,
        gpu_util: Some(util),
        ..RawGpu::default()
    }
}

#[test]
fn histogram_quantiles_are_within_half_a_bin() {
    let mut h = Hist::default();
    let values: Vec<f32> = (0..1000).map(|i| i as f32 / 1000.0).collect();
    values.iter().for_each(|&v| h.add(v));
    let p95 = h.quantile(0.95, Some(0.999)).unwrap();
    assert!((p95 - 0.95).abs() <= 0.025, "{p95}");
    assert_eq!(Hist::from_bytes(&h.to_bytes()), h);
    assert_eq!(Hist::default().quantile(0.95, None), None);
    let mut one = Hist::default();
    one.add(1.0);
    assert_eq!(one.quantile(0.5, Some(1.0)), Some(0.975));
}

#[test]
fn minutes_merge_into_hours_exactly() {
    let rows: Vec<RawGpu> = (0..7200)
        .map(|s| raw(s * 1000, (s % 10) as f32 / 10.0))
        .collect();
    let minutes = aggregate(MINUTE_MS, &rows, &[], &[], &[]);
    assert_eq!(minutes.gpus.len(), 120);
    let hours = to_hours(&minutes);
    let direct = aggregate(HOUR_MS, &rows, &[], &[], &[]);
    assert_eq!(hours.gpus.len(), 2);
    for (k, v) in &direct.gpus {
        let merged = &hours.gpus[k];
        assert_eq!(merged.samples, v.samples);
        assert!((merged.gpu_util.sum - v.gpu_util.sum).abs() < 1e-6);
        assert_eq!(merged.gpu_util_hist, v.gpu_util_hist);
        assert_eq!(merged.busy_n, 3240);
    }
}

#[test]
fn each_dcgm_field_is_averaged_over_the_samples_that_have_it() {
    // dcgm-exporter's default counters: tensor and DRAM activity, no SM activity.
    let with = |ts, ratios: &[(Ratio, f32)]| {
        let mut r = raw(ts, 0.5);
        for (ratio, v) in ratios {
            *r.ratios.get_mut(*ratio) = Some(*v);
        }
        r
    };
    use Ratio::{DramActive, SmActive, SmOccupancy, TensorActive};
    let exporter = with(0, &[(TensorActive, 0.9), (DramActive, 0.4)]);
    // The agent with DCGM: all of them; NVML alone: none.
    let agent = with(
        1000,
        &[
            (SmActive, 0.6),
            (SmOccupancy, 0.3),
            (TensorActive, 0.1),
            (DramActive, 0.2),
        ],
    );
    let mut a = GpuAgg::default();
    for r in [&exporter, &agent, &raw(2000, 0.5)] {
        a.add(r, 0.0);
    }
    let r = |ratio| a.ratios.get(ratio);
    assert_eq!(
        (
            r(SmActive).n,
            r(SmOccupancy).n,
            r(TensorActive).n,
            r(DramActive).n
        ),
        (1, 1, 2, 2)
    );
    assert!((r(TensorActive).mean().unwrap() - 0.5).abs() < 1e-6);
    assert!((r(DramActive).mean().unwrap() - 0.3).abs() < 1e-6);
    assert!((r(SmOccupancy).sum - 0.3).abs() < 1e-6);
    assert_eq!(r(SmActive).max, Some(0.6), "SM activity keeps its peak");
    assert_eq!(r(DramActive).max, None, "a mean keeps no peak");
    let mut merged = GpuAgg::default();
    merged.merge(&a);
    merged.merge(&a);
    let m = |ratio| merged.ratios.get(ratio).n;
    assert_eq!((m(TensorActive), m(DramActive)), (4, 4));
}

#[test]
fn tenants_get_allocation_and_use() {
    let rows = vec![raw(0, 0.5), raw(1000, 0.0)];
    let allocs = vec![
        RawAllocation {
            gpu_uuid: "G".into(),
            ts: 0,
            tenant_key: "t".into(),
            gi_id: None,
            share: 0.25,
        },
        RawAllocation {
            gpu_uuid: "G".into(),
            ts: 1000,
            tenant_key: "t".into(),
            gi_id: None,
            share: 0.25,
        },
    ];
    let procs = vec![RawProcess {
        gpu_uuid: "G".into(),
        ts: 0,
        tenant_key: Some("t".into()),
        gi_id: None,
        sm_util: Some(0.5),
        mem_used_bytes: Some(100),
    }];
    let r = aggregate(MINUTE_MS, &rows, &allocs, &procs, &[]);
    let t = &r.tenants[&("G".to_string(), "t".to_string(), 0)];
    assert_eq!((t.samples, t.alloc_n, t.present_n, t.busy_n), (2, 2, 1, 1));
    assert!((t.alloc_share_sum - 0.5).abs() < 1e-9);
    assert_eq!(t.mem_used.max, Some(100));
    let g = &r.gpus[&("G".to_string(), 0)];
    assert!((g.alloc_share_sum - 0.5).abs() < 1e-9);
    assert_eq!(g.busy_n, 1);
}

fn alloc(ts: i64, tenant: &str, gi: Option<i32>, share: f32) -> RawAllocation {
    RawAllocation {
        gpu_uuid: "G".into(),
        ts,
        tenant_key: tenant.into(),
        gi_id: gi,
        share,
    }
}

fn process(ts: i64, tenant: &str, gi: Option<i32>, sm: Option<f32>) -> RawProcess {
    RawProcess {
        gpu_uuid: "G".into(),
        ts,
        tenant_key: Some(tenant.into()),
        gi_id: gi,
        sm_util: sm,
        mem_used_bytes: Some(1 << 30),
    }
}

#[test]
fn idle_runs_chain_across_minutes_and_break_on_work() {
    // 1 Hz for two hours: busy for the first 10 minutes, idle for 40, busy for 1 minute,
    // idle until the end (69 minutes, across the hour boundary).
    let busy = |s: i64| s < 600 || (3000..3060).contains(&s);
    let rows: Vec<RawGpu> = (0..7200)
        .map(|s| raw(s * 1000, if busy(s) { 0.9 } else { 0.0 }))
        .collect();
    let allocs: Vec<_> = (0..7200).map(|s| alloc(s * 1000, "t", None, 1.0)).collect();
    let procs: Vec<_> = (0..7200)
        .map(|s| process(s * 1000, "t", None, Some(if busy(s) { 0.9 } else { 0.0 })))
        .collect();
    let minutes = aggregate(MINUTE_MS, &rows, &allocs, &procs, &[]);
    let hours = to_hours(&minutes);
    let h0 = &hours.tenants[&("G".to_string(), "t".to_string(), 0)];
    let h1 = &hours.tenants[&("G".to_string(), "t".to_string(), HOUR_MS)];
    assert_eq!(h0.idle_max_s, 2400.0);
    assert_eq!(h0.idle_lead_s, 0.0);
    assert_eq!(h0.idle_trail_s, 540.0);
    assert!(h1.all_idle());
    assert_eq!((h0.active_n, h0.idle_n), (660, 2940));
    // Chained, the two hours hold one 69-minute run.
    let mut both = h0.clone();
    both.merge_next(h1, true);
    assert_eq!(both.idle_max_s, 540.0 + 3600.0);
    // A gap between them breaks it.
    let mut gap = h0.clone();
    gap.merge_next(h1, false);
    assert_eq!(gap.idle_max_s, 3600.0);
    // Effective use rests on gpu_util here (no DCGM).
    assert_eq!((h0.eff_n, h0.eff_dcgm_n), (3600, 0));
    assert!((h0.eff_sum - 660.0 * 0.9).abs() < 1e-3, "{}", h0.eff_sum);
}

#[test]
fn mig_tenants_use_dcgm_and_shared_tenants_split_the_device() {
    // MIG: a 3g instance (share 3/7) at 50 % SM activity; a 1g instance with no process.
    let mut g = raw(0, 0.0);
    g.gpu_util = None;
    let allocs = vec![
        alloc(0, "big", Some(1), 3.0 / 7.0),
        alloc(0, "small", Some(2), 1.0 / 7.0),
    ];
    let procs = vec![process(0, "big", Some(1), None)];
    let mig = vec![RawMig {
        gpu_uuid: "G".into(),
        ts: 0,
        gi_id: 1,
        sm_active: Some(0.5),
    }];
    let r = aggregate(MINUTE_MS, &[g.clone()], &allocs, &procs, &mig);
    let big = &r.tenants[&("G".to_string(), "big".to_string(), 0)];
    assert!((big.eff_sum - 0.5 * 3.0 / 7.0).abs() < 1e-6);
    assert_eq!((big.eff_dcgm_n, big.active_n, big.idle_n), (1, 1, 0));
    let small = &r.tenants[&("G".to_string(), "small".to_string(), 0)];
    assert_eq!((small.active_n, small.idle_n), (0, 1));
    // Without DCGM, a MIG tenant with a process is neither active nor idle: unknown.
    let r = aggregate(MINUTE_MS, &[g], &allocs, &procs, &[]);
    let big = &r.tenants[&("G".to_string(), "big".to_string(), 0)];
    assert_eq!((big.eff_n, big.active_n, big.idle_n), (0, 0, 0));

    // Time-slicing: sm_active 0.6 split 3:1 by process SM time.
    let mut g = raw(0, 1.0);
    *g.ratios.get_mut(Ratio::SmActive) = Some(0.6);
    let allocs = vec![alloc(0, "a", None, 0.5), alloc(0, "b", None, 0.5)];
    let procs = vec![
        process(0, "a", None, Some(0.75)),
        process(0, "b", None, Some(0.25)),
    ];
    let r = aggregate(MINUTE_MS, &[g], &allocs, &procs, &[]);
    let a = &r.tenants[&("G".to_string(), "a".to_string(), 0)];
    assert!((a.eff_sum - 0.45).abs() < 1e-6, "{}", a.eff_sum);
    assert_eq!(a.eff_dcgm_n, 1);
}

/// A snapshot sent again in a later batch (same GPU, same `ts`) is one moment: the rollups
/// are those of the snapshot sent once, where they used to add the copies (two tenants' shares
/// summing to 2 GPUs, memory doubled, an extra second covered).
#[test]
fn a_moment_sent_twice_counts_once() {
    let seconds = 0..10i64;
    let gpu = |s: i64| {
        let mut g = raw(s * 1000, 0.8);
        *g.ratios.get_mut(Ratio::SmActive) = Some(0.6);
        g
    };
    let allocs = |s: i64| {
        [
            alloc(s * 1000, "a", None, 0.5),
            alloc(s * 1000, "b", None, 0.5),
        ]
    };
    let procs = |s: i64| {
        [
            process(s * 1000, "a", None, Some(0.75)),
            process(s * 1000, "b", None, Some(0.25)),
        ]
    };
    let once = aggregate(
        MINUTE_MS,
        &seconds.clone().map(gpu).collect::<Vec<_>>(),
        &seconds.clone().flat_map(allocs).collect::<Vec<_>>(),
        &seconds.clone().flat_map(procs).collect::<Vec<_>>(),
        &[],
    );
    // Second 5 arrives twice, its copy after the rest.
    let twice = aggregate(
        MINUTE_MS,
        &seconds.clone().chain([5]).map(gpu).collect::<Vec<_>>(),
        &seconds
            .clone()
            .chain([5])
            .flat_map(allocs)
            .collect::<Vec<_>>(),
        &seconds
            .clone()
            .chain([5])
            .flat_map(procs)
            .collect::<Vec<_>>(),
        &[],
    );
    assert_eq!(twice.gpus, once.gpus);
    assert_eq!(twice.tenants, once.tenants);
    let a = &once.tenants[&("G".to_string(), "a".to_string(), 0)];
    assert_eq!((a.samples, a.alloc_n, a.processes_max), (10, 10, 1));
    assert_eq!(a.mem_used.max, Some(1 << 30));
}

#[test]
fn a_gpus_energy_comes_from_its_counter_and_is_charged_by_use_then_by_allocation() {
    // Two tenants time-slice a GPU drawing 200 J a second by its counter (its power reading
    // says 300 W: the counter wins): for 60 s A works at 0.3, B at 0.1; for 60 s nobody works
    // and both hold a quarter; for 60 s the GPU is unallocated.
    let mut gpus = Vec::new();
    let (mut allocs, mut procs) = (Vec::new(), Vec::new());
    for s in 0..180i64 {
        let ts = s * 1000;
        let busy = s < 60;
        gpus.push(RawGpu {
            energy_j: Some(1_000_000.0 + 200.0 * s as f64),
            power_w: Some(300.0),
            ..raw(ts, if busy { 0.4 } else { 0.0 })
        });
        if s < 120 {
            for (t, sm) in [("A", 0.3), ("B", 0.1)] {
                allocs.push(RawAllocation {
                    gpu_uuid: "G".into(),
                    ..alloc(ts, t, None, 0.25)
                });
                procs.push(RawProcess {
                    gpu_uuid: "G".into(),
                    ..process(ts, t, None, Some(if busy { sm } else { 0.0 }))
                });
            }
        }
    }
    let r = aggregate(HOUR_MS, &gpus, &allocs, &procs, &[]);
    let g = &r.gpus[&("G".to_owned(), 0)];
    // The first sample has no counter before it: its power reading stands in.
    assert_eq!(g.energy_n, 180);
    assert!(
        (g.energy_j - (300.0 + 179.0 * 200.0)).abs() < 1e-6,
        "{}",
        g.energy_j
    );
    let t = |k: &str| &r.tenants[&("G".to_owned(), k.to_owned(), 0)];
    let (a, b) = (t("A"), t("B"));
    // Used: A 3/4 and B 1/4 of the first minute (the first second at 300 J); idle: a quarter
    // each of the second minute, charged as idle energy.
    let first = 300.0 + 59.0 * 200.0;
    assert!(
        (a.energy_j - (first * 0.75 + 60.0 * 200.0 * 0.25)).abs() < 1e-3,
        "{}",
        a.energy_j
    );
    assert!(
        (b.energy_j - (first * 0.25 + 60.0 * 200.0 * 0.25)).abs() < 1e-3,
        "{}",
        b.energy_j
    );
    assert!((a.idle_energy_j - 3000.0).abs() < 1e-6 && (b.idle_energy_j - 3000.0).abs() < 1e-6);
    // The rest — half the idle minute, the unallocated minute — stays with the pool.
    let pool = g.energy_j - a.energy_j - b.energy_j;
    assert!((pool - (6000.0 + 12_000.0)).abs() < 1e-3, "{pool}");
    // Minutes merge into the hour's sums.
    let hours = to_hours(&aggregate(MINUTE_MS, &gpus, &allocs, &procs, &[]));
    let h = &hours.tenants[&("G".to_owned(), "A".to_owned(), 0)];
    // One pass over the three minutes reads every rise, minute buckets or an hour's.
    assert!(
        (h.energy_j - a.energy_j).abs() < 1e-6,
        "{} {}",
        h.energy_j,
        a.energy_j
    );
}
