use super::*;

/// Any sample time (the tests' clocks start at 0).
const WIDE: (i64, i64) = (i64::MIN, i64::MAX);

/// One sample out of range (GPU_UTIL 500) dropped the whole scrape of every GPU
/// in it; one dated ten years ahead poisoned the host; samples from 1970 were stored.
#[test]
fn each_sample_is_checked_alone_and_none_moves_the_clock() {
    let r = Receiver::default();
    let now = 1_800_000_000_000;
    let window = (now - 7 * 86_400_000, now + MAX_FUTURE_MS);
    let req = WriteRequest {
        timeseries: vec![
            series("DCGM_FI_DEV_GPU_UTIL", "n1", &[], &[(now - 30_000, 500.0)]),
            series("DCGM_FI_DEV_GPU_TEMP", "n1", &[], &[(now - 30_000, 60.0)]),
            series(
                "DCGM_FI_DEV_POWER_USAGE",
                "n1",
                &[],
                &[(now + 10 * 365 * 86_400_000, 100.0), (0, 100.0)],
            ),
            series(
                "DCGM_FI_DEV_GPU_TEMP",
                "bad?host",
                &[],
                &[(now - 30_000, 1.0)],
            ),
        ],
    };
    assert_eq!(
        r.take(&req, |_| "c".into(), now, window, false),
        1,
        "only the temperature"
    );
    assert_eq!(r.metrics.dropped(DropReason::OutOfDomain), 1);
    assert_eq!(r.metrics.dropped(DropReason::OutOfWindow), 2);
    assert_eq!(
        r.metrics.ignored_series.get(),
        1,
        "a host that is no node name"
    );
    // The ten-years-ahead sample moved nothing: a sample a minute later is taken.
    let next = WriteRequest {
        timeseries: vec![series(
            "DCGM_FI_DEV_GPU_TEMP",
            "n1",
            &[],
            &[(now + 30_000, 61.0)],
        )],
    };
    assert_eq!(
        r.take(&next, |_| "c".into(), now + 60_000, window, false),
        1
    );
    assert_eq!(r.metrics.dropped(DropReason::Late), 0);
}

/// A Remote-Write 2.0 body decoded as an empty 1.0 message and was answered 204.
#[test]
fn remote_write_2_is_refused_with_415_and_1_0_passes() {
    let h = |pairs: &[(&str, &str)]| {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    };
    for ok in [
        h(&[]),
        h(&[
            ("content-type", "application/x-protobuf"),
            ("x-prometheus-remote-write-version", "0.1.0"),
        ]),
        h(&[(
            "content-type",
            "application/x-protobuf;proto=prometheus.WriteRequest",
        )]),
    ] {
        check_protocol(&ok).unwrap();
    }
    for bad in [
        h(&[(
            "content-type",
            "application/x-protobuf;proto=io.prometheus.write.v2.Request",
        )]),
        h(&[("x-prometheus-remote-write-version", "2.0.0")]),
        h(&[("content-type", "application/json")]),
    ] {
        let e = check_protocol(&bad).unwrap_err();
        assert_eq!(e.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "{e}");
    }
}

fn series(name: &str, host: &str, extra: &[(&str, &str)], samples: &[(i64, f64)]) -> TimeSeries {
    let mut labels = vec![
        Label {
            name: "__name__".into(),
            value: name.into(),
        },
        Label {
            name: "Hostname".into(),
            value: host.into(),
        },
        Label {
            name: "UUID".into(),
            value: "GPU-1".into(),
        },
        Label {
            name: "gpu".into(),
            value: "0".into(),
        },
        Label {
            name: "modelName".into(),
            value: "NVIDIA A100-SXM4-40GB".into(),
        },
    ];
    labels.extend(extra.iter().map(|(k, v)| Label {
        name: (*k).into(),
        value: (*v).into(),
    }));
    TimeSeries {
        labels,
        samples: samples
            .iter()
            .map(|(t, v)| Sample {
                timestamp: *t,
                value: *v,
            })
            .collect(),
    }
}

/// Two requests with a `*` token made 120,006 nodes. Hosts past a cluster's cap
/// are dropped and counted; the hosts already held keep working, and another cluster still
/// has room. Hosts were never forgotten, so after the cap every new host was
/// dropped until a restart; quiet hosts with nothing waiting are forgotten now.
#[test]
fn made_up_hosts_past_the_cap_are_dropped_counted_and_forgotten_when_quiet() {
    let r = Receiver::default();
    let now = 1_800_000_000_000;
    let flood = |prefix: &str, n: usize, at: i64| WriteRequest {
        timeseries: (0..n)
            .map(|i| {
                series(
                    "DCGM_FI_DEV_GPU_TEMP",
                    &format!("{prefix}-{i}"),
                    &[],
                    &[(at - 30_000, 50.0)],
                )
            })
            .collect(),
    };
    let req = flood("flood", MAX_HOSTS_PER_CLUSTER + 7, now);
    assert_eq!(
        r.take(&req, |_| "c".into(), now, WIDE, false),
        MAX_HOSTS_PER_CLUSTER
    );
    assert_eq!(r.metrics.dropped(DropReason::TooManyHosts), 7);
    assert_eq!(r.hosts.lock().unwrap().by_key.len(), MAX_HOSTS_PER_CLUSTER);
    let known = WriteRequest {
        timeseries: vec![series(
            "DCGM_FI_DEV_GPU_TEMP",
            "flood-0",
            &[],
            &[(now - 20_000, 51.0)],
        )],
    };
    assert_eq!(r.take(&known, |_| "c".into(), now, WIDE, false), 1);
    // Another cluster is not crowded out by c's flood.
    assert_eq!(
        r.take(&flood("west", 3, now), |_| "d".into(), now, WIDE, false),
        3
    );
    // Nothing is forgotten while it waits to be stored.
    let later = now + FORGET_MS + 60_000;
    let batches = r.ready(later);
    assert_eq!(batches.len(), MAX_HOSTS_PER_CLUSTER + 3);
    assert_eq!(
        r.hosts.lock().unwrap().by_key.len(),
        MAX_HOSTS_PER_CLUSTER + 3
    );
    for b in &batches {
        r.stored(b);
    }
    // Stored and quiet for an hour: new hosts of c are taken again.
    let fresh = flood("autoscaled", 5, later);
    assert_eq!(r.take(&fresh, |_| "c".into(), later, WIDE, false), 5);
    let hosts = r.hosts.lock().unwrap();
    assert_eq!(hosts.by_key.len(), 5);
    assert_eq!(hosts.per_cluster.get("c"), Some(&5));
    assert_eq!(hosts.per_cluster.get("d"), None);
}

/// A receiver that took one GPU utilization sample of host `n1` with `labels`, and its "now".
fn one_utilization_sample(labels: &[(&str, &str)]) -> (Receiver, i64) {
    let r = Receiver::default();
    let now = 1_800_000_000_000;
    let req = WriteRequest {
        timeseries: vec![series(
            "DCGM_FI_DEV_GPU_UTIL",
            "n1",
            labels,
            &[(now - 30_000, 40.0)],
        )],
    };
    assert_eq!(r.take(&req, |_| "c".into(), now, WIDE, false), 1);
    (r, now)
}

/// One pod label with a space dropped the host's whole scrape. The GPU's
/// sample stays; only the allocation to that pod is dropped, and counted.
#[test]
fn a_bad_pod_label_costs_the_allocation_not_the_gpu_sample() {
    let (r, _) = one_utilization_sample(&[("namespace", "team a"), ("pod", "p-1")]);
    assert_eq!(r.metrics.dropped(DropReason::BadTenant), 1);
    let hosts = r.hosts.lock().unwrap();
    let h = hosts.by_key.values().next().unwrap();
    assert!(h.tenants.is_empty());
    assert!(h.scrapes.values().all(|s| s.allocations.is_empty()));
}

/// Kubernetes names may be 253 characters long: a pod with such a name (and a long
/// namespace) had a tenant key past the ingest's 256 bytes, and every scrape of its host was
/// refused. The key is bounded and the scrape stored with the allocation.
#[test]
fn a_pod_with_a_long_name_keeps_its_allocation_and_the_scrape() {
    let ns = "n".repeat(63);
    let pod = ["p", "q", "r"].map(|c| c.repeat(63)).join(".") + "." + &"s".repeat(61);
    assert_eq!(pod.len(), 253);
    let (r, now) = one_utilization_sample(&[("namespace", &ns), ("pod", &pod)]);
    assert_eq!(r.metrics.dropped(DropReason::BadTenant), 0);
    let b = r.ready(now + IDLE_MS + 60_000);
    assert_eq!(b.len(), 1);
    let t = &b[0].tenants[0];
    assert_eq!(t.pod.as_deref(), Some(pod.as_str()), "the names stay whole");
    assert_eq!(t.key, model::Tenant::pod_name_key(&ns, &pod, "main"));
    assert_eq!(t.key.len(), 256, "{}", t.key);
    assert_eq!(b[0].snapshots[0].allocations[0].tenant, t.key);
    let limits = Limits {
        max_age_ms: i64::MAX / 4,
        ..Limits::default()
    };
    b[0].validate(&limits, now + IDLE_MS + 60_000).unwrap();
}

/// An exporter's `gpu` and `pci_bus_id` labels outside the batch's domain (an index past
/// 1,023, a bus id with a space) are left out of the inventory; the scrape is still stored.
#[test]
fn odd_inventory_labels_are_left_out_not_the_scrape() {
    let (r, now) =
        one_utilization_sample(&[("gpu", "4294967295"), ("pci_bus_id", "00000000:17:00.0 x")]);
    let b = r.ready(now + IDLE_MS + 60_000);
    assert_eq!(b.len(), 1);
    let g = &b[0].inventory.as_ref().unwrap()[0];
    assert_eq!((g.index, g.pci_bus_id.as_deref()), (0, None));
    let limits = Limits {
        max_age_ms: i64::MAX / 4,
        ..Limits::default()
    };
    b[0].validate(&limits, now + IDLE_MS + 60_000).unwrap();
}

/// Under a ServiceMonitor without honorLabels, Prometheus renames dcgm-exporter's pod
/// labels to exported_* and sets namespace/pod to the exporter's own: the GPU belongs to
/// the exported pod, not to the exporter.
#[test]
fn exported_pod_labels_win_over_the_exporters_own() {
    let labels = series(
        "DCGM_FI_DEV_GPU_UTIL",
        "n1",
        &[
            ("namespace", "gpu-operator"),
            ("pod", "nvidia-dcgm-exporter-x7k2p"),
            ("exported_namespace", "ml"),
            ("exported_pod", "trainer-0"),
            ("exported_container", "main"),
        ],
        &[],
    )
    .labels;
    assert_eq!(pod_labels(&labels), Some(Ok(("ml", "trainer-0", "main"))));
}

/// A GPU no pod holds, scraped through a ServiceMonitor or PodMonitor: the target's
/// namespace and pod are dcgm-exporter's own, and charge nobody.
#[test]
fn the_exporters_own_pod_is_no_tenant() {
    let of = |extra: &[(&str, &str)], host: &str| {
        pod_labels(&series("DCGM_FI_DEV_GPU_UTIL", host, extra, &[]).labels)
            .map(|r| r.map(|(ns, p, _)| format!("{ns}/{p}")))
    };
    let target = [
        ("namespace", "gpu-operator"),
        ("pod", "nvidia-dcgm-exporter-x7k2p"),
        ("container", "nvidia-dcgm-exporter"),
    ];
    assert_eq!(
        of(&target, "gpu-node-1"),
        None,
        "the GPU Operator's exporter"
    );
    let chart = [
        ("namespace", "monitoring"),
        ("pod", "dcgm-exporter-4kq9z"),
        ("container", "exporter"),
    ];
    assert_eq!(of(&chart, "gpu-node-1"), None, "dcgm-exporter's Helm chart");
    assert_eq!(
        of(
            &[("namespace", "gpu-operator"), ("pod", "dcgm-abc")],
            "dcgm-abc"
        ),
        None,
        "Hostname is the exporter's pod"
    );
    // A tenant's own container may be called `exporter`: only the exporter's pod is none.
    assert_eq!(
        of(
            &[
                ("namespace", "ml"),
                ("pod", "feature-exporter-0"),
                ("container", "exporter")
            ],
            "gpu-node-1"
        ),
        Some(Ok("ml/feature-exporter-0".into()))
    );
    // honorLabels: true and a GPU a pod holds: the pod's own labels.
    assert_eq!(
        of(
            &[
                ("namespace", "ml"),
                ("pod", "trainer-0"),
                ("container", "main")
            ],
            "gpu-node-1"
        ),
        Some(Ok("ml/trainer-0".into()))
    );
    // honorLabels: false: the exported pod wins even with the exporter's container.
    let mut renamed = target.to_vec();
    renamed.extend([("exported_namespace", "ml"), ("exported_pod", "trainer-0")]);
    assert_eq!(of(&renamed, "gpu-node-1"), Some(Ok("ml/trainer-0".into())));
}

#[test]
fn the_node_comes_from_relabeling_before_the_exporters_hostname() {
    let node = |extra: &[(&str, &str)], host: &str| {
        let s = series("DCGM_FI_DEV_GPU_UTIL", host, extra, &[(0, 1.0)]);
        node_of(&s.labels).map(str::to_owned)
    };
    assert_eq!(node(&[], "gpu-node-1").as_deref(), Some("gpu-node-1"));
    assert_eq!(
        node(&[("node", "gpu-node-2")], "nvidia-dcgm-exporter-x7k2p").as_deref(),
        Some("gpu-node-2")
    );
    assert_eq!(
        node(&[("kubernetes_node", "gpu-node-3")], "gpu-node-3").as_deref(),
        Some("gpu-node-3")
    );
    // Without NODE_NAME the exporter's Hostname is its pod name: no node at all.
    assert_eq!(node(&[], "nvidia-dcgm-exporter-x7k2p"), None);
    assert_eq!(node(&[], "dcgm-exporter-4fz9q"), None);
    // A node that merely starts the same way is still a node.
    assert_eq!(
        node(&[], "dcgm-exporter-lab-01").as_deref(),
        Some("dcgm-exporter-lab-01")
    );
    let r = Receiver::default();
    let req = WriteRequest {
        timeseries: vec![series(
            "DCGM_FI_DEV_GPU_UTIL",
            "nvidia-dcgm-exporter-x7k2p",
            &[],
            &[(0, 50.0)],
        )],
    };
    assert_eq!(r.take(&req, |_| "c".into(), 100_000, WIDE, false), 0);
}

#[test]
fn scrapes_settle_into_batches_in_order_and_late_samples_are_counted() {
    let r = Receiver::default();
    let pod = [
        ("namespace", "ml"),
        ("pod", "trainer-0"),
        ("container", "main"),
    ];
    let req = WriteRequest {
        timeseries: vec![
            series(
                "DCGM_FI_DEV_GPU_UTIL",
                "n1",
                &pod,
                &[(0, 50.0), (15_000, 60.0)],
            ),
            series("DCGM_FI_DEV_FB_USED", "n1", &[], &[(0, 1024.0)]),
            series("DCGM_FI_DEV_FB_FREE", "n1", &[], &[(0, 3072.0)]),
            series("up", "n1", &[], &[(0, 1.0)]),
        ],
    };
    assert_eq!(r.take(&req, |_| "c".into(), 100_000, WIDE, false), 4);
    assert!(r.ready(100_000).is_empty(), "nothing settled yet");
    // A scrape 45 s later settles the first two.
    let more = WriteRequest {
        timeseries: vec![series(
            "DCGM_FI_PROF_SM_ACTIVE",
            "n1",
            &[],
            &[(45_000, 0.4)],
        )],
    };
    r.take(&more, |_| "c".into(), 101_000, WIDE, false);
    let b = r.ready(101_000);
    assert_eq!(b.len(), 1);
    let b = &b[0];
    assert_eq!(
        (b.seq, b.snapshots.len(), b.interval_ms),
        (15_000, 2, 15_000)
    );
    let g = &b.snapshots[0].gpus[0];
    assert_eq!(g.gpu_util, Some(0.5));
    assert_eq!(g.mem_used_bytes, Some(1024 * 1024 * 1024));
    assert_eq!(g.mem_total_bytes, Some(4096 * 1024 * 1024));
    assert_eq!(
        b.snapshots[0].allocations[0].tenant,
        "pod/ml/trainer-0/main"
    );
    assert_eq!(b.tenants[0].namespace.as_deref(), Some("ml"));
    assert_eq!(
        b.inventory.as_ref().unwrap()[0].model,
        "NVIDIA A100-SXM4-40GB"
    );
    b.validate(
        &Limits {
            max_age_ms: i64::MAX / 4,
            ..Limits::default()
        },
        101_000,
    )
    .unwrap();
    r.stored(b);
    assert_eq!(r.metrics.ignored_series.get(), 1);
    // A sample for a stored scrape is late.
    let late = WriteRequest {
        timeseries: vec![series("DCGM_FI_DEV_GPU_TEMP", "n1", &[], &[(15_000, 40.0)])],
    };
    r.take(&late, |_| "c".into(), 102_000, WIDE, false);
    assert_eq!(r.metrics.dropped(DropReason::Late), 1);
    // The host goes quiet: its last scrape is stored after a minute.
    assert!(r.ready(102_000).is_empty());
    let rest = r.ready(101_000 + IDLE_MS + 1_000);
    assert_eq!(rest[0].seq, 45_000);
    assert_eq!(rest[0].snapshots[0].gpus[0].sm_active, Some(0.4));
}

#[test]
fn mig_instances_and_bodies() {
    let r = Receiver::default();
    let mig = [
        ("GPU_I_ID", "13"),
        ("GPU_I_PROFILE", "1g.5gb"),
        ("namespace", "nb"),
        ("pod", "jupyter"),
    ];
    let req = WriteRequest {
        timeseries: vec![series(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "n2",
            &mig,
            &[(0, 0.25)],
        )],
    };
    let body = intake::remote_write::encode(&req).unwrap();
    let back = decode(&body, 1 << 20).unwrap();
    assert_eq!(back, req);
    assert!(decode(b"not snappy at all", 1 << 20).is_err());
    r.take(&back, |_| "c".into(), 0, WIDE, false);
    let b = &r.ready(IDLE_MS + 1)[0];
    let m = &b.snapshots[0].mig[0];
    assert_eq!((m.gi_id, m.gr_engine_active), (13, Some(0.25)));
    let a = &b.snapshots[0].allocations[0];
    assert_eq!((a.gi_id, a.share), (Some(13), 1.0 / 7.0));
    assert!(b.inventory.as_ref().unwrap()[0].mig_enabled);
}

/// A series whose `GPU_I_ID` is no MIG id was read as the whole GPU's (`abc`) or made the
/// host's scrape refused (5,000); a `UUID` that is no name, or a `cluster` that is none, refused
/// it too. Such series are ignored and counted; text labels that cannot be sent are left out.
#[test]
fn series_naming_no_gpu_instance_or_cluster_are_ignored() {
    let now = 1_800_000_000_000;
    for extra in [
        &[("GPU_I_ID", "abc")][..],
        &[("GPU_I_ID", "5000")],
        &[("cluster", "Bad Cluster")],
    ] {
        let r = Receiver::default();
        let req = WriteRequest {
            timeseries: vec![series("DCGM_FI_DEV_GPU_UTIL", "n1", extra, &[(now, 40.0)])],
        };
        assert_eq!(
            r.take(&req, cluster_label, now, WIDE, false),
            0,
            "{extra:?}"
        );
        assert_eq!(r.metrics.ignored_series.get(), 1);
    }
    let mut odd = series(
        "DCGM_FI_DEV_FB_USED",
        "n1",
        &[("GPU_I_ID", "1"), ("GPU_I_PROFILE", "3g.40gb\u{7}")],
        &[(now, 40.0)],
    );
    odd.labels[2].value = "GPU 1".into();
    let r = Receiver::default();
    let req = WriteRequest {
        timeseries: vec![odd.clone()],
    };
    assert_eq!(
        r.take(&req, cluster_label, now, WIDE, false),
        0,
        "a UUID with a space"
    );
    odd.labels[2].value = "GPU-1".into();
    odd.labels[4].value = "NVIDIA\u{1b}[2J".into();
    let req = WriteRequest {
        timeseries: vec![odd],
    };
    assert_eq!(r.take(&req, cluster_label, now, WIDE, false), 1);
    let b = r.ready(now + IDLE_MS + 60_000);
    let g = &b[0].inventory.as_ref().unwrap()[0];
    assert_eq!(g.model, "unknown");
    assert!(g.mig_instances.is_empty(), "a profile that is no text");
    b[0].validate(
        &Limits {
            max_age_ms: i64::MAX / 4,
            ..Limits::default()
        },
        now + IDLE_MS + 60_000,
    )
    .unwrap();
}

/// Series put together at random from the labels dcgm-exporter and Prometheus write, each with
/// a good or a hostile value (a UUID with a space, a MIG id of 5,000 or `abc`, a model name
/// with a control character, a 300-byte profile, a cluster that is no name, 253-character pod
/// names): whatever the receiver takes, every scrape it makes of it passes ingest's checks, so
/// no label costs a host its scrape.
#[test]
fn random_labels_never_cost_a_host_its_scrape() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let long_pod = ["p", "q", "r"].map(|c| c.repeat(63)).join(".") + "." + &"s".repeat(61);
    let long = "x".repeat(300);
    let values: Vec<&str> = vec![
        "",
        "n1",
        "n2",
        "GPU-1",
        "GPU-2",
        "GPU 3",
        &long,
        "a\u{7}b",
        "é",
        "0",
        "1",
        "7",
        "5000",
        "4294967296",
        "abc",
        "-1",
        "3g.40gb",
        "1g.10gb",
        "ml",
        "web",
        "Bad Cluster",
        "trainer-0",
        &long_pod,
        "main",
        "nvidia-dcgm-exporter-x7k2p",
        "00000000:17:00.0",
    ];
    let names = [
        "__name__",
        "Hostname",
        "UUID",
        "gpu",
        "modelName",
        "pci_bus_id",
        "GPU_I_ID",
        "GPU_I_PROFILE",
        "namespace",
        "pod",
        "container",
        "exported_namespace",
        "exported_pod",
        "cluster",
    ];
    let fields = [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_PROF_SM_ACTIVE",
    ];
    let samples = [0.0, 50.0, 100.0, -5.0, 1e20, f64::NAN];
    let limits = Limits {
        max_age_ms: i64::MAX / 4,
        ..Limits::default()
    };
    let now = 1_800_000_000_000;
    let (mut taken, mut stored) = (0, 0);
    for _ in 0..300 {
        let r = Receiver::default();
        for _ in 0..10 {
            let timeseries = (0..1 + next() % 12)
                .map(|_| {
                    let mut labels = Vec::new();
                    for &name in &names {
                        if next() % 10 >= 7 {
                            continue;
                        }
                        let value = match name {
                            "__name__" => fields[(next() % 5) as usize],
                            "Hostname" if next() % 2 == 0 => "n1",
                            "UUID" if next() % 2 == 0 => "GPU-1",
                            _ => values[(next() % values.len() as u64) as usize],
                        };
                        labels.push(Label {
                            name: name.into(),
                            value: value.into(),
                        });
                    }
                    let at = now - (next() % 60_000) as i64;
                    TimeSeries {
                        labels,
                        samples: vec![Sample {
                            timestamp: at,
                            value: samples[(next() % samples.len() as u64) as usize],
                        }],
                    }
                })
                .collect();
            taken += r.take(
                &WriteRequest { timeseries },
                cluster_label,
                now,
                WIDE,
                false,
            );
        }
        for b in r.ready(now + IDLE_MS + 60_000) {
            b.validate(&limits, now + IDLE_MS + 60_000)
                .unwrap_or_else(|e| panic!("{e}: {b:?}"));
            stored += 1;
        }
    }
    // The series reach the store often, not by luck.
    assert!(
        taken > 400 && stored > 300,
        "{taken} taken, {stored} stored"
    );
}
