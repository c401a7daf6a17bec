use serde::de::{self, Visitor};

use super::*;
use crate::{Allocation, GpuSample, MigSample, ProcessSample, Tenant};

const NOW: i64 = 1_800_000_000_000;

/// Found by the HTTP robustness test: two processes of one tenant reporting
/// `i64::MAX` bytes were stored, and every rollup pass then panicked adding them.
#[test]
fn memory_is_bounded_by_what_a_gpu_can_hold() {
    let mut b = batch();
    b.snapshots[0].processes[0].mem_used_bytes = Some(i64::MAX);
    let e = b.validate(&Limits::default(), NOW).unwrap_err();
    assert!(e.0.contains("processes[0].mem_used_bytes"), "{e}");
    let mut b = batch();
    b.snapshots[0].gpus[0].mem_total_bytes = Some(MAX_MEMORY_BYTES + 1);
    assert!(b.validate(&Limits::default(), NOW).is_err());
    let mut b = batch();
    b.snapshots[0].gpus[0].mem_total_bytes = Some(80 << 30);
    b.validate(&Limits::default(), NOW).unwrap();
}

/// The batch's tenant holding its GPU whole.
fn whole_gpu_of_alice() -> Allocation {
    Allocation {
        gpu_uuid: "GPU-1".into(),
        tenant: "host/1000".into(),
        gi_id: None,
        ci_id: None,
        replica: None,
        share: 1.0,
    }
}

pub(super) fn batch() -> Batch {
    Batch {
        version: 1,
        cluster: "c".into(),
        node: "n1".into(),
        agent_id: "a".into(),
        seq: 1,
        agent_version: None,
        interval_ms: 1000,
        inventory: None,
        tenants: vec![Tenant {
            key: "host/1000".into(),
            kind: crate::TenantKind::HostUser,
            namespace: None,
            pod: None,
            container: None,
            pod_uid: None,
            job_id: None,
            user: Some("alice".into()),
            account: None,
            uid: Some(1000),
        }],
        snapshots: vec![Snapshot {
            ts: NOW,
            gpus: vec![GpuSample {
                gpu_uuid: "GPU-1".into(),
                gpu_util: Some(0.5),
                ..Default::default()
            }],
            processes: vec![ProcessSample {
                gpu_uuid: "GPU-1".into(),
                pid: 10,
                start_time: NOW - 1000,
                tenant: Some("host/1000".into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[test]
fn a_valid_batch_passes() {
    batch().validate(&Limits::default(), NOW).unwrap();
}

#[test]
fn errors_name_the_field_and_value() {
    let mut b = batch();
    b.snapshots[0].gpus[0].gpu_util = Some(57.0);
    let err = b.validate(&Limits::default(), NOW).unwrap_err();
    assert_eq!(
        err.0,
        "snapshots[0].gpus[0].gpu_util is a ratio between 0 and 1, got 57"
    );

    let mut b = batch();
    b.snapshots[0].processes[0].tenant = Some("pod/x/y".into());
    let err = b.validate(&Limits::default(), NOW).unwrap_err();
    assert!(err.0.contains("is not among the batch's tenants"), "{err}");

    let mut b = batch();
    b.snapshots[0].ts = NOW + 3_600_000;
    let err = b.validate(&Limits::default(), NOW).unwrap_err();
    assert!(err.0.starts_with("snapshots[0].ts"), "{err}");

    let mut b = batch();
    b.version = 2;
    assert!(
        b.validate(&Limits::default(), NOW)
            .unwrap_err()
            .0
            .contains("version 2")
    );

    let mut b = batch();
    b.node = "has space".into();
    assert!(
        b.validate(&Limits::default(), NOW)
            .unwrap_err()
            .0
            .contains("not a DNS-1123 subdomain")
    );
    // A node name that steered label writes to another node.
    let mut b = batch();
    b.node = "gpu-a?x=1".into();
    let err = b.validate(&Limits::default(), NOW).unwrap_err().0;
    assert!(
        err.starts_with("node \"gpu-a?x=1\" is not a DNS-1123"),
        "{err}"
    );
}

/// Values no GPU reports were stored, and a MIG id of 2^31 or more (a valid
/// u32) stopped every rollup pass when read back from the store's 32-bit column.
#[test]
fn values_outside_their_domain_are_refused_by_name() {
    type Mutation = Box<dyn Fn(&mut Batch)>;
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "processes[0].gi_id 2147483648 is not a MIG instance id",
            Box::new(|b| b.snapshots[0].processes[0].gi_id = Some(1 << 31)),
        ),
        (
            "mig[0].gi_id 4294967295",
            Box::new(|b| {
                b.snapshots[0].mig.push(MigSample {
                    gpu_uuid: "GPU-1".into(),
                    gi_id: u32::MAX,
                    ..Default::default()
                })
            }),
        ),
        (
            "allocations[0].ci_id",
            Box::new(|b| {
                b.snapshots[0].allocations.push(Allocation {
                    gpu_uuid: "GPU-1".into(),
                    tenant: "host/1000".into(),
                    gi_id: Some(1),
                    ci_id: Some(1 << 31),
                    replica: None,
                    share: 0.5,
                })
            }),
        ),
        (
            "gpus[0].sm_clock_mhz must be between 0 and 100000, got -1",
            Box::new(|b| b.snapshots[0].gpus[0].sm_clock_mhz = Some(-1)),
        ),
        (
            // A driver's 4294967295 MHz, saturated into the wire's 32 bits.
            "gpus[0].mem_clock_mhz must be between 0 and 100000, got 2147483647",
            Box::new(|b| b.snapshots[0].gpus[0].mem_clock_mhz = Some(i32::MAX)),
        ),
        (
            "gpus[0].retired_pages must not be negative",
            Box::new(|b| b.snapshots[0].gpus[0].retired_pages = Some(-5)),
        ),
        (
            "gpus[0].remapped_rows must not be negative",
            Box::new(|b| b.snapshots[0].gpus[0].remapped_rows = Some(i32::MIN)),
        ),
        (
            "gpus[0].throttle_reasons must not be negative",
            Box::new(|b| b.snapshots[0].gpus[0].throttle_reasons = Some(-1)),
        ),
        (
            "mig[0].mem_used_bytes must be between 0 and",
            Box::new(|b| {
                b.snapshots[0].mig.push(MigSample {
                    gpu_uuid: "GPU-1".into(),
                    mem_used_bytes: Some(-1),
                    ..Default::default()
                })
            }),
        ),
        (
            "processes[0].start_time -9223372036854775808",
            Box::new(|b| b.snapshots[0].processes[0].start_time = i64::MIN),
        ),
        (
            "processes[0].start_time 9223372036854775807",
            Box::new(|b| b.snapshots[0].processes[0].start_time = i64::MAX),
        ),
        (
            "processes[0].pid",
            Box::new(|b| b.snapshots[0].processes[0].pid = u32::MAX),
        ),
        (
            "processes[1].gpu_uuid (pid 10, started",
            Box::new(|b| {
                let p = b.snapshots[0].processes[0].clone();
                b.snapshots[0].processes.push(p)
            }),
        ),
        (
            "mig[1].gpu_uuid (GPU-1, 1, 0) appears twice",
            Box::new(|b| {
                let m = MigSample {
                    gpu_uuid: "GPU-1".into(),
                    gi_id: 1,
                    ..Default::default()
                };
                b.snapshots[0].mig.push(m.clone());
                b.snapshots[0].mig.push(m);
            }),
        ),
        (
            "allocations[1].gpu_uuid (GPU-1, host/1000) appears twice",
            Box::new(|b| {
                let a = whole_gpu_of_alice();
                b.snapshots[0].allocations.push(a.clone());
                b.snapshots[0].allocations.push(a);
            }),
        ),
    ];
    for (expected, mutate) in cases {
        let mut b = batch();
        mutate(&mut b);
        let err = b.validate(&Limits::default(), NOW).unwrap_err();
        assert!(err.0.contains(expected), "{expected:?} not in {:?}", err.0);
    }
}

/// A 1.2 MB request stored 200,000 GPUs and 800,000 MIG instances and answered
/// `"rows":0`; the inventory now counts toward the row limit.
#[test]
fn the_inventory_counts_toward_the_row_limit() {
    let mut b = batch();
    b.inventory = Some(
        (0..3)
            .map(|i| crate::GpuInfo {
                uuid: format!("GPU-{i}"),
                mig_instances: (0..4)
                    .map(|gi| {
                        serde_json::from_value(serde_json::json!({
                            "gi_id": gi, "ci_id": 0, "profile": "1g.10gb",
                            "memory_total_bytes": 1
                        }))
                        .unwrap()
                    })
                    .collect(),
                ..serde_json::from_str(
                    r#"{"uuid":"x","index":0,"model":"m","memory_total_bytes":1}"#,
                )
                .unwrap()
            })
            .collect(),
    );
    // 2 snapshot rows + 3 GPUs + 12 MIG instances.
    assert_eq!(b.row_count(), 17);
    let limits = Limits {
        max_rows: 16,
        ..Limits::default()
    };
    let err = b.validate(&limits, NOW).unwrap_err().0;
    assert_eq!(err, "batch has 17 rows; the limit is 16");
}

/// A MIG instance's memory and placement reach the store and the node page's "slices a–b":
/// a negative size or a placement past the GPU's slices is refused by name.
#[test]
fn mig_instances_are_checked_by_name() {
    let with = |m: serde_json::Value| {
        let mut b = batch();
        let mut g: crate::GpuInfo = serde_json::from_str(
            r#"{"uuid":"GPU-1","index":0,"model":"m","memory_total_bytes":1,"mig_enabled":true}"#,
        )
        .unwrap();
        g.mig_instances = vec![serde_json::from_value(m).unwrap()];
        b.inventory = Some(vec![g]);
        b.validate(&Limits::default(), NOW).map_err(|e| e.0)
    };
    let ok = serde_json::json!({"gi_id": 1, "ci_id": 0, "profile": "3g.40gb",
        "placement_start": 4, "placement_size": 4, "memory_total_bytes": 40_u64 << 30,
        "compute_slices": 3});
    with(ok.clone()).unwrap();
    // The GPU itself: the plan sizes time-slicing and MIG by its memory.
    let mut b = batch();
    b.inventory =
        Some(vec![serde_json::from_str(
        r#"{"uuid":"GPU-1","index":0,"model":"m","memory_total_bytes":9223372036854775807}"#,
    )
    .unwrap()]);
    let err = b.validate(&Limits::default(), NOW).unwrap_err().0;
    assert!(
        err.starts_with("inventory[0].memory_total_bytes must be between 0 and"),
        "{err}"
    );
    // Its index and replicas go to 32-bit columns; its PCI bus id and MIG UUIDs are names.
    for (gpu, expected) in [
        (
            r#""index":4294967295"#,
            "inventory[0].index 4294967295 is not a GPU index (0 to 1023)",
        ),
        (
            r#""index":0,"replicas":4294967295"#,
            "inventory[0].replicas must be between 1 and 1024, got 4294967295",
        ),
        (
            r#""index":0,"replicas":0"#,
            "inventory[0].replicas must be between 1 and 1024, got 0",
        ),
        (
            r#""index":0,"pci_bus_id":"00000000:17:00.0\u0000""#,
            "inventory[0].pci_bus_id \"00000000:17:00.0\\0\" contains control characters",
        ),
    ] {
        let mut b = batch();
        let json = format!(r#"{{"uuid":"GPU-1",{gpu},"model":"m","memory_total_bytes":1}}"#);
        b.inventory = Some(vec![serde_json::from_str(&json).unwrap()]);
        let err = b.validate(&Limits::default(), NOW).unwrap_err().0;
        assert_eq!(err, expected);
    }
    for (field, value, expected) in [
        (
            "memory_total_bytes",
            serde_json::json!(-1),
            "inventory[0].mig_instances[0].memory_total_bytes must be between 0 and",
        ),
        (
            "placement_size",
            serde_json::json!(0),
            "inventory[0].mig_instances[0].placement_size must be between 1 and 64 slices, got 0",
        ),
        (
            "compute_slices",
            serde_json::json!(u32::MAX),
            "inventory[0].mig_instances[0].compute_slices must be between 1 and 64 slices, got 4294967295",
        ),
        (
            "placement_start",
            serde_json::json!(u32::MAX),
            "inventory[0].mig_instances[0].placement_start 4294967295 places the instance past memory slice 64",
        ),
        (
            "placement_start",
            serde_json::json!(61),
            "placement_start 61 places the instance past",
        ),
        (
            "uuid",
            serde_json::json!("MIG 1"),
            "inventory[0].mig_instances[0].uuid \"MIG 1\" must not contain whitespace",
        ),
    ] {
        let mut m = ok.clone();
        m[field] = value;
        let err = with(m).unwrap_err();
        assert!(err.contains(expected), "{expected:?} not in {err:?}");
    }
}

/// An XID code is a number NVML reports, never negative.
#[test]
fn event_codes_are_not_negative() {
    let mut b = batch();
    b.snapshots[0].events.push(crate::GpuEvent {
        gpu_uuid: "GPU-1".into(),
        ts: NOW,
        kind: "xid".into(),
        code: -79,
        message: None,
    });
    let err = b.validate(&Limits::default(), NOW).unwrap_err().0;
    assert_eq!(
        err,
        "snapshots[0].events[0].code must not be negative, got -79"
    );
    b.snapshots[0].events[0].code = 79;
    b.validate(&Limits::default(), NOW).unwrap();
}

#[test]
fn limits_are_enforced() {
    let limits = Limits {
        max_rows: 1,
        ..Limits::default()
    };
    let err = batch().validate(&limits, NOW).unwrap_err();
    assert_eq!(err.0, "batch has 2 rows; the limit is 1");
}

#[test]
fn unknown_fields_are_refused_by_the_decoder() {
    let json = r#"{"version":1,"cluster":"c","node":"n","agent_id":"a","seq":1,"interval_ms":1000,"snapshots":[],"extra":1}"#;
    let err = serde_json::from_str::<Batch>(json).unwrap_err();
    assert!(err.to_string().contains("unknown field `extra`"), "{err}");
}

#[test]
fn a_sharing_mode_outside_its_domain_is_refused_by_the_decoder_with_the_allowed_ones() {
    let gpu = |sharing: &str| {
        format!(r#"{{"uuid":"GPU-1","index":0,"model":"m","memory_total_bytes":1{sharing}}}"#)
    };
    let g: crate::GpuInfo = serde_json::from_str(&gpu("")).unwrap();
    assert_eq!(
        g.sharing,
        crate::inventory::Sharing::Exclusive,
        "unsaid: exclusive"
    );
    let g: crate::GpuInfo = serde_json::from_str(&gpu(r#","sharing":"mps""#)).unwrap();
    assert_eq!(g.sharing, crate::inventory::Sharing::Mps);
    let err = serde_json::from_str::<crate::GpuInfo>(&gpu(r#","sharing":"MIG""#)).unwrap_err();
    assert!(
        err.to_string().contains(
            "unknown variant `MIG`, expected one of `exclusive`, `time_slicing`, `mps`, `mig`"
        ),
        "{err}"
    );
}

/// What a driver in trouble hands a producer: a pid of 2^32 − 1 and a GPU instance id of
/// 27,783 (NVML structures of another version read as this one), a process listed twice, two
/// equal XID errors within one millisecond, a message with a control character, a GPU UUID
/// with a space. Each would have the batch refused; dropped, the rest passes.
#[test]
fn rows_no_batch_may_hold_are_dropped_and_the_rest_passes() {
    let mut b = batch();
    let s = &mut b.snapshots[0];
    let p = s.processes[0].clone();
    s.processes.push(ProcessSample {
        pid: u32::MAX,
        ..p.clone()
    });
    s.processes.push(ProcessSample {
        pid: 11,
        gi_id: Some(27_783),
        ..p.clone()
    });
    s.processes.push(ProcessSample {
        sm_util: Some(0.9),
        ..p.clone()
    });
    let xid = crate::GpuEvent {
        gpu_uuid: "GPU-1".into(),
        ts: NOW - 10,
        kind: "xid".into(),
        code: 13,
        message: Some("Graphics Exception\u{1b}[31m".into()),
    };
    s.events = vec![xid.clone(), xid.clone()];
    s.gpus.push(GpuSample {
        gpu_uuid: "GPU 2".into(),
        ..Default::default()
    });
    let held = whole_gpu_of_alice();
    s.allocations = vec![
        held.clone(),
        held.clone(),
        Allocation {
            replica: Some(3),
            share: f32::NAN,
            ..held.clone()
        },
    ];
    assert!(b.validate(&Limits::default(), NOW).is_err());
    let dropped = b.snapshots[0].drop_impossible_rows();
    b.validate(&Limits::default(), NOW).unwrap();
    let whys: Vec<(&str, &str)> = dropped.iter().map(|d| (d.rows, d.why.as_str())).collect();
    assert_eq!(
        whys,
        [
            ("gpus", "its GPU UUID is not a name"),
            ("processes", "pid 4294967295 past Linux's largest (4194304)"),
            ("processes", "pid 11: MIG ids Some(27783)/None past 1023"),
            ("processes", "it repeats a row before it"),
            ("allocations", "it repeats a row before it"),
            ("allocations", "share NaN outside (0, 1]"),
            ("events", "it repeats a row before it"),
        ]
    );
    let s = &b.snapshots[0];
    // The first of a repeated process stays, as it came.
    assert_eq!(s.processes, [p]);
    assert_eq!(s.events.len(), 1);
    assert_eq!(
        s.events[0].message, None,
        "a message that is not text is cleared"
    );
    assert_eq!(s.gpus.len(), 1);
    assert_eq!(s.allocations, [held]);
}

#[test]
fn a_valid_snapshot_loses_no_row() {
    let mut b = batch();
    let before = b.clone();
    assert!(b.snapshots[0].drop_impossible_rows().is_empty());
    assert_eq!(b, before);
}

/// A Slurm task may set `SLURM_JOB_ACCOUNT` to anything in its own environment, and a user
/// name in /etc/passwd may hold any byte but `:` and a newline: the tenant loses the field,
/// the batch is taken.
#[test]
fn tenant_fields_that_are_not_text_are_cleared_and_the_rest_passes() {
    let mut b = batch();
    let job = Tenant {
        key: "slurm/884213".into(),
        kind: crate::TenantKind::SlurmJob,
        job_id: Some("884213".into()),
        user: Some("mkoch".into()),
        account: Some("physics\n".repeat(40)),
        ..b.tenants[0].clone()
    };
    b.tenants[0].user = Some("al\u{1b}ice".into());
    b.tenants.push(job);
    assert!(b.validate(&Limits::default(), NOW).is_err());
    let taken = drop_impossible_tenants(&mut b.tenants, &mut b.snapshots);
    b.validate(&Limits::default(), NOW).unwrap();
    let what: Vec<(&str, &str)> = taken.iter().map(|t| (t.tenant.as_str(), t.field)).collect();
    assert_eq!(what, [("host/1000", "user"), ("slurm/884213", "account")]);
    assert_eq!(b.tenants[0].user, None);
    assert_eq!(b.tenants[0].uid, Some(1000), "the rest of the tenant stays");
    assert_eq!(b.tenants[1].user.as_deref(), Some("mkoch"));
    assert_eq!(b.tenants[1].account, None);
    assert_eq!(
        b.snapshots[0].processes[0].tenant.as_deref(),
        Some("host/1000"),
        "the process keeps its tenant"
    );
}

/// Every free-text field of a tenant is one validation checks and the take-out clears: the
/// table names each `Option<String>` field serde writes, and nothing else.
#[test]
fn every_text_field_of_a_tenant_is_checked_and_cleared() {
    let mut all = batch().tenants[0].clone();
    for field in &crate::tenant::TEXT_FIELDS {
        let mut b = batch();
        let t = &mut b.tenants[0];
        let set: serde_json::Value = serde_json::json!({ field.name: "x\u{7}" });
        let mut v = serde_json::to_value(&*t).unwrap();
        v.as_object_mut()
            .unwrap()
            .extend(set.as_object().unwrap().clone());
        *t = serde_json::from_value(v).unwrap();
        let e = b.validate(&Limits::default(), NOW).unwrap_err();
        assert!(e.0.contains(&format!("tenants[0].{}", field.name)), "{e}");
        let taken = drop_impossible_tenants(&mut b.tenants, &mut b.snapshots);
        assert_eq!(taken.len(), 1, "{}", field.name);
        assert_eq!(taken[0].field, field.name);
        assert_eq!((field.read)(&b.tenants[0]), None);
        b.validate(&Limits::default(), NOW).unwrap();
        let mut v = serde_json::to_value(&all).unwrap();
        v.as_object_mut()
            .unwrap()
            .insert(field.name.into(), "set".into());
        all = serde_json::from_value(v).unwrap();
    }
    // Every Option<String> field is now set: serde writes the key, the kind, the uid and the
    // table's fields, and no other.
    let written = serde_json::to_value(&all).unwrap();
    let mut names: Vec<&str> = written
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    names.retain(|n| !["key", "kind", "uid"].contains(n));
    let mut table: Vec<&str> = crate::tenant::TEXT_FIELDS.iter().map(|f| f.name).collect();
    names.sort_unstable();
    table.sort_unstable();
    assert_eq!(names, table);
}

/// A tenant whose key is not a name goes, with its processes' attribution and its
/// allocations; a tenant repeating a key before it goes, and the first stays.
#[test]
fn tenants_whose_keys_cannot_be_sent_are_dropped_with_their_references() {
    let mut b = batch();
    let bad_key = format!("slurm/{}", "9".repeat(300));
    let mut job = b.tenants[0].clone();
    job.key = bad_key.clone();
    b.tenants.push(job);
    let mut second_alice = b.tenants[0].clone();
    second_alice.user = Some("not alice".into());
    b.tenants.push(second_alice);
    let s = &mut b.snapshots[0];
    s.processes.push(ProcessSample {
        pid: 11,
        tenant: Some(bad_key.clone()),
        ..s.processes[0].clone()
    });
    s.allocations = vec![
        whole_gpu_of_alice(),
        Allocation {
            gpu_uuid: "GPU-2".into(),
            tenant: bad_key.clone(),
            ..whole_gpu_of_alice()
        },
    ];
    assert!(b.validate(&Limits::default(), NOW).is_err());
    let taken = drop_impossible_tenants(&mut b.tenants, &mut b.snapshots);
    let rows = b.snapshots[0].drop_impossible_rows();
    b.validate(&Limits::default(), NOW).unwrap();
    let what: Vec<(&str, &str)> = taken.iter().map(|t| (t.field, t.why.as_str())).collect();
    assert_eq!(
        what,
        [
            ("key", "its key is not a name"),
            ("key", "its key repeats a tenant's before it")
        ]
    );
    assert_eq!(taken[0].tenant, format!("slurm/{}", "9".repeat(58)));
    assert_eq!(b.tenants.len(), 1);
    assert_eq!(
        b.tenants[0].user.as_deref(),
        Some("alice"),
        "the first stays"
    );
    let s = &b.snapshots[0];
    assert_eq!(s.processes.len(), 2, "the process stays, unattributed");
    assert_eq!(s.processes[1].tenant, None);
    assert_eq!(s.allocations, [whole_gpu_of_alice()]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].rows, "allocations");
}

#[test]
fn valid_tenants_lose_nothing() {
    let mut b = batch();
    let before = b.clone();
    assert!(drop_impossible_tenants(&mut b.tenants, &mut b.snapshots).is_empty());
    assert_eq!(b, before);
}

/// However long the names a key is made of, it fits the ingest's limit, and two tenants
/// whose names differ only past the cut keep two keys.
#[test]
fn tenant_keys_made_of_long_names_are_bounded_and_distinct() {
    let long = |c: char| format!("{}-{c}", "p".repeat(250));
    let (a, b) = (
        Tenant::pod_name_key("team", &long('a'), "main"),
        Tenant::pod_name_key("team", &long('b'), "main"),
    );
    assert_ne!(a, b);
    for k in [&a, &b] {
        assert_eq!(k.len(), crate::tenant::MAX_KEY_LEN, "{k}");
        assert!(is_name(k), "{k}");
        assert!(k.starts_with("pod/team/ppp"));
    }
    assert_eq!(
        a,
        Tenant::pod_name_key("team", &long('a'), "main"),
        "stable"
    );
    assert_eq!(
        Tenant::pod_name_key("team", "trainer-0", "main"),
        "pod/team/trainer-0/main",
        "a key that fits is as it was"
    );
    assert_eq!(Tenant::slurm_key("884213"), "slurm/884213");
}

/// The wire names of a struct's fields, as serde's derive declares them.
pub(super) fn field_names<'de, T: serde::Deserialize<'de>>() -> &'static [&'static str] {
    struct Names<'a>(&'a mut &'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for Names<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("names taken"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut names: &'static [&'static str] = &[];
    let _ = T::deserialize(Names(&mut names));
    names
}
