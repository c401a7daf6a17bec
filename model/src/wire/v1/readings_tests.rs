use super::*;
use crate::wire::v1::tests::field_names;
use crate::wire::v1::{Batch, Limits};
use crate::{GpuSample, MigSample, ProcessSample};

const NOW: i64 = 1_800_000_000_000;

/// A snapshot whose every reading lies outside its domain, beside one GPU and process whose
/// readings are all fine.
fn snapshot_of_a_gpu_in_trouble() -> Snapshot {
    let bad = GpuSample {
        gpu_uuid: "GPU-bad".into(),
        gpu_util: Some(42_949_672.0),
        mem_util: Some(f32::NAN),
        enc_util: Some(-0.5),
        dec_util: Some(1.5),
        mem_used_bytes: Some(-616),
        mem_total_bytes: Some(MAX_MEMORY_BYTES + 1),
        power_w: Some(4_294_967.5),
        energy_j: Some(f64::INFINITY),
        temp_c: Some(4_294_967_300.0),
        sm_clock_mhz: Some(-1),
        mem_clock_mhz: Some(i32::MAX),
        throttle_reasons: Some(i64::MIN),
        pcie_rx_bytes_per_s: Some(-1),
        pcie_tx_bytes_per_s: Some(-2),
        nvlink_rx_bytes_per_s: Some(-3),
        nvlink_tx_bytes_per_s: Some(-4),
        ecc_corrected: Some(-1),
        ecc_uncorrected: Some(-1),
        retired_pages: Some(-1),
        remapped_rows: Some(-1),
        sm_active: Some(2.0),
        sm_occupancy: Some(f32::INFINITY),
        dram_active: Some(-1.0),
        tensor_active: Some(f32::NAN),
        gr_engine_active: Some(1.01),
        #[cfg(feature = "dummy-field")]
        dummy_active: Some(7.0),
    };
    let good = GpuSample {
        gpu_uuid: "GPU-good".into(),
        gpu_util: Some(0.97),
        mem_used_bytes: Some(70 << 30),
        mem_total_bytes: Some(80 << 30),
        power_w: Some(612.5),
        temp_c: Some(-10.0),
        energy_j: Some(9.0e5),
        sm_clock_mhz: Some(1980),
        ecc_corrected: Some(0),
        sm_active: Some(1.0),
        ..GpuSample::default()
    };
    Snapshot {
        ts: NOW,
        gpus: vec![bad, good],
        mig: vec![MigSample {
            gpu_uuid: "GPU-bad".into(),
            gi_id: 1,
            ci_id: 0,
            mem_used_bytes: Some(i64::MAX),
            mem_total_bytes: Some(20 << 30),
            sm_active: Some(3.0),
            ..MigSample::default()
        }],
        processes: vec![
            ProcessSample {
                gpu_uuid: "GPU-bad".into(),
                pid: 7,
                start_time: NOW - 1000,
                sm_util: Some(100.0),
                mem_util: Some(0.25),
                enc_util: Some(-1.0),
                dec_util: Some(f32::NAN),
                mem_used_bytes: Some(-616),
                ..ProcessSample::default()
            },
            ProcessSample {
                gpu_uuid: "GPU-good".into(),
                pid: 8,
                start_time: NOW - 1000,
                sm_util: Some(0.5),
                mem_used_bytes: Some(1 << 30),
                ..ProcessSample::default()
            },
        ],
        ..Snapshot::default()
    }
}

/// The wire tests' valid batch, holding `snapshot` alone.
fn batch_of(snapshot: Snapshot) -> Batch {
    Batch {
        snapshots: vec![snapshot],
        ..crate::wire::v1::tests::batch()
    }
}

#[test]
fn readings_outside_their_domain_are_cleared_and_the_batch_then_passes() {
    let mut s = snapshot_of_a_gpu_in_trouble();
    assert!(
        batch_of(s.clone())
            .validate(&Limits::default(), NOW)
            .is_err()
    );
    let before = s.clone();
    let cleared = s.clear_out_of_domain();
    batch_of(s.clone())
        .validate(&Limits::default(), NOW)
        .unwrap();
    // Every reading of the GPU in trouble, its MIG row's bad two and its process's bad four.
    let gpu_readings = GPU.len() + profiling::COUNT;
    assert_eq!(cleared.len(), gpu_readings + 2 + 4, "{cleared:#?}");
    assert!(cleared.iter().all(|c| c.gpu_uuid == "GPU-bad"));
    assert_eq!(
        s.gpus[0],
        GpuSample {
            gpu_uuid: "GPU-bad".into(),
            ..GpuSample::default()
        }
    );
    // What was fine stays as it was: the other GPU and process whole, the MIG row's total
    // and the process's memory utilization.
    assert_eq!(s.gpus[1], before.gpus[1]);
    assert_eq!(s.processes[1], before.processes[1]);
    assert_eq!(s.mig[0].mem_total_bytes, Some(20 << 30));
    assert_eq!(s.processes[0].mem_util, Some(0.25));
    let said = |reading: &str| {
        cleared
            .iter()
            .find(|c| c.reading == reading)
            .map(|c| c.value.as_str())
    };
    assert_eq!(said("temp_c"), Some("4294967300"));
    assert_eq!(said("mem_used_bytes"), Some("-616"));
    assert_eq!(
        said("mig.mem_used_bytes"),
        Some(i64::MAX.to_string().as_str())
    );
    assert_eq!(said("mig.sm_active"), Some("3"));
    assert_eq!(said("processes.dec_util"), Some("NaN"));
    // Clearing again finds nothing.
    assert!(s.clear_out_of_domain().is_empty());
}

#[test]
fn the_bounds_themselves_are_inside() {
    let mut s = Snapshot {
        ts: NOW,
        gpus: vec![GpuSample {
            gpu_uuid: "GPU-edge".into(),
            gpu_util: Some(0.0),
            mem_util: Some(1.0),
            mem_used_bytes: Some(MAX_MEMORY_BYTES),
            mem_total_bytes: Some(0),
            power_w: Some(MAX_POWER_W as f32),
            temp_c: Some(MIN_TEMP_C as f32),
            energy_j: Some(0.0),
            throttle_reasons: Some(i64::MAX),
            sm_clock_mhz: Some(MAX_CLOCK_MHZ as i32),
            mem_clock_mhz: Some(0),
            ..GpuSample::default()
        }],
        ..Snapshot::default()
    };
    assert!(s.clear_out_of_domain().is_empty());
    batch_of(s).validate(&Limits::default(), NOW).unwrap();
}

/// A reading added to a sample and not to its table here would go unchecked by validation and
/// uncleared for producers: every field is either an identity or a reading with a domain.
#[test]
fn every_field_of_a_sample_is_an_identity_or_a_reading_with_a_domain() {
    fn uncovered<R>(
        fields: &[&str],
        identity: &[&str],
        table: &[Reading<R>],
        with_ratios: bool,
    ) -> Vec<String> {
        fields
            .iter()
            .filter(|f| !identity.contains(f))
            .filter(|f| !table.iter().any(|r| r.name == **f))
            .filter(|f| !(with_ratios && profiling::Ratio::parse(f).is_some()))
            .map(|f| f.to_string())
            .collect()
    }
    let gpu = field_names::<GpuSample>();
    assert!(gpu.contains(&"temp_c"), "{gpu:?}");
    assert_eq!(
        uncovered(gpu, &["gpu_uuid"], GPU, true),
        Vec::<String>::new()
    );
    let mig = field_names::<MigSample>();
    let mig_identity = ["gpu_uuid", "gi_id", "ci_id"];
    assert_eq!(
        uncovered(mig, &mig_identity, MIG, true),
        Vec::<String>::new()
    );
    let process = field_names::<ProcessSample>();
    let process_identity = [
        "gpu_uuid",
        "pid",
        "start_time",
        "kind",
        "gi_id",
        "ci_id",
        "tenant",
    ];
    assert_eq!(
        uncovered(process, &process_identity, PROCESS, false),
        Vec::<String>::new()
    );
}
