//! The stored records beside the samples: alerts and their outbox, the remote-write journal,
//! waiting episodes, pair-hours, reclaim cases, tenants.

use model::time::now_ms;
use store::reclaim_cases::CaseState;
use store::rollup::{HOUR_MS, MINUTE_MS, bucket_of};
use store::{Scope, Store};

use crate::hour_ago;
use crate::support::{self, fleet, no_team};

pub(crate) async fn alert_state_and_outbox_round_trip(store: &Store) {
    use std::collections::BTreeMap;
    use store::alerts::{AlertRecord, Attempt, NewNotification};

    let alert = |fp: &str, state: &str| AlertRecord {
        fingerprint: fp.into(),
        rule: "GpuThrottling".into(),
        labels: BTreeMap::from([
            ("alertname".into(), "GpuThrottling".into()),
            ("node".into(), fp.into()),
        ]),
        annotations: BTreeMap::from([("summary".into(), "hot \"quoted\" ünïcode".into())]),
        state: state.into(),
        value: 2.5,
        active_ms: 1_000,
        starts_ms: (state != "pending").then_some(2_000),
        ends_ms: (state == "resolved").then_some(3_000),
        updated_ms: 3_000,
    };
    let alerts = vec![
        alert("a", "firing"),
        alert("b", "resolved"),
        alert("c", "pending"),
    ];
    store.save_alerts(&alerts, &[]).await.unwrap();
    assert_eq!(store.load_alerts().await.unwrap(), alerts);
    // An upsert replaces every field; the others go.
    let mut a = alerts[0].clone();
    a.state = "resolved".into();
    a.ends_ms = Some(4_000);
    a.annotations.clear();
    a.updated_ms = 4_000;
    store
        .save_alerts(std::slice::from_ref(&a), &["b".to_owned(), "c".to_owned()])
        .await
        .unwrap();
    assert_eq!(store.load_alerts().await.unwrap(), [a]);

    let n = |group: &'static str, at: i64| NewNotification {
        receiver: "hook",
        group_key: group,
        status: "firing",
        digest: "a",
        firing: 1,
        resolved: 0,
        payload: "{}",
        created_ms: at,
        state: "queued",
    };
    let first = store.enqueue_notification(&n("g1", 10)).await.unwrap();
    let second = store.enqueue_notification(&n("g1", 20)).await.unwrap();
    let other = store.enqueue_notification(&n("g2", 30)).await.unwrap();
    assert!(first < second && second < other);
    let mut latest = store.latest_notifications().await.unwrap();
    latest.sort();
    assert_eq!(
        latest,
        [
            ("hook".into(), "g1".into(), 20, "a".into()),
            ("hook".into(), "g2".into(), 30, "a".into())
        ]
    );
    let queued = store.queued_notifications("hook", 10).await.unwrap();
    assert_eq!(
        queued.iter().map(|q| q.id).collect::<Vec<_>>(),
        [first, second, other]
    );
    let attempt = |outcome: &str, status: Option<i32>| Attempt {
        ts_ms: 40,
        outcome: outcome.into(),
        http_status: status,
        detail: "x".into(),
        duration_ms: 3,
    };
    store
        .record_attempt(first, &attempt("retry", Some(503)), "queued", 1_040)
        .await
        .unwrap();
    let q = store.queued_notifications("hook", 1).await.unwrap();
    assert_eq!((q[0].id, q[0].attempts, q[0].next_ms), (first, 1, 1_040));
    store
        .record_attempt(first, &attempt("delivered", Some(200)), "delivered", 50)
        .await
        .unwrap();
    let list = store.notifications(Some("hook"), 10).await.unwrap();
    let f = list.iter().find(|x| x.id == first).unwrap();
    assert_eq!(
        (f.state.as_str(), f.attempts, f.delivered_ms),
        ("delivered", 2, Some(40))
    );
    assert_eq!(f.tries.len(), 2);
    assert_eq!(f.tries[0].http_status, Some(503));
    assert_eq!(store.supersede_queued("hook").await.unwrap(), 2);
    assert!(
        store
            .queued_notifications("hook", 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Pruning keeps each group's newest.
    assert_eq!(store.prune_notifications(i64::MAX).await.unwrap(), 1);
    let left: Vec<i64> = store
        .notifications(None, 10)
        .await
        .unwrap()
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(left, [other, second]);
}

pub(crate) async fn remote_write_journal_keeps_what_waits(store: &Store) {
    for (i, newest) in [10_i64, 20, 30].into_iter().enumerate() {
        store
            .journal_remote_write(1_000 + i as i64, newest, &[i as u8, 0xff])
            .await
            .unwrap();
    }
    // Rows whose samples are all older than the oldest waiting scrape (20) go.
    assert_eq!(store.prune_remote_write_journal(Some(20)).await.unwrap(), 1);
    assert_eq!(
        store.remote_write_journal().await.unwrap(),
        [(1_001, vec![1, 0xff]), (1_002, vec![2, 0xff])]
    );
    // Nothing waits: everything goes.
    assert_eq!(store.prune_remote_write_journal(None).await.unwrap(), 2);
    assert!(store.remote_write_journal().await.unwrap().is_empty());
    // Where a replay starts: the streams' stored positions.
    let t0 = hour_ago(1);
    let b = fleet().batch(0, "rw", 7, &[t0], 1000);
    store.ingest(&b, t0, &no_team).await.unwrap();
    assert_eq!(
        store.stream_positions("rw").await.unwrap(),
        [(b.cluster.clone(), b.node.clone(), 7)]
    );
    assert!(store.stream_positions("nobody").await.unwrap().is_empty());
}

pub(crate) async fn waiting_episodes_are_kept_current_and_read_by_overlap(store: &Store) {
    use store::waiting::WaitingRecord;
    let h = HOUR_MS;
    let pod = |uid: &str, since: i64, seen: i64, count: i64, reason: &str| WaitingRecord {
        cluster: "c1".into(),
        source: "pod".into(),
        uid: uid.into(),
        scope: "ml".into(),
        team: "ml-team".into(),
        name: format!("train-{uid}"),
        resource: "nvidia.com/gpu".into(),
        count,
        product: (uid == "a").then(|| "NVIDIA-H100-80GB-HBM3".to_owned()),
        reason: reason.into(),
        message: "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.".into(),
        since_ms: since,
        first_seen_ms: seen,
        last_seen_ms: seen,
    };
    store
        .record_waiting(&[
            pod("a", 0, 2 * h, 2, "Unschedulable"),
            pod("b", h, 2 * h, 1, ""),
        ])
        .await
        .unwrap();
    // The next poll: "a" still waits (its count and reason changed), "b" was scheduled.
    store
        .record_waiting(&[pod("a", 90 * h, 3 * h, 4, "SchedulingGated")])
        .await
        .unwrap();
    let all = store.waiting(0, 10 * h).await.unwrap();
    assert_eq!(all.len(), 2, "{all:?}");
    let a = &all[0];
    assert_eq!(
        (
            a.uid.as_str(),
            a.since_ms,
            a.first_seen_ms,
            a.last_seen_ms,
            a.count
        ),
        ("a", 0, 2 * h, 3 * h, 4),
        "an episode keeps when it began and takes the latest poll"
    );
    assert_eq!(a.reason, "SchedulingGated");
    assert_eq!(a.product.as_deref(), Some("NVIDIA-H100-80GB-HBM3"));
    assert_eq!(all[1].product, None);
    // Overlap: "b" waited [h, 2h]; a window after it sees only "a".
    let later = store.waiting(2 * h + 1, 10 * h).await.unwrap();
    assert_eq!(
        later.iter().map(|w| w.uid.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    assert!(store.waiting(5 * h, 6 * h).await.unwrap().is_empty());
    assert_eq!(store.prune_waiting(2 * h + 1).await.unwrap(), 1);
    assert_eq!(store.waiting(0, 10 * h).await.unwrap().len(), 1);
}

pub(crate) async fn pair_hours_are_kept_per_node_hour(store: &Store) {
    use store::pair_hours::{PairHour, PairHourMark};
    let h = HOUR_MS;
    let t0 = bucket_of(now_ms(), h) - 10 * h;
    let pair = |node: &str, hour: i64, victim: &str, alone_sum: f64| PairHour {
        cluster: "c1".into(),
        node: node.into(),
        gpu: "GPU-a".into(),
        victim: victim.into(),
        aggressor: "pod/x".into(),
        hour,
        alone_n: 40,
        alone_sum,
        contended_n: 12,
        contended_sum: 0.1 + 0.2,
        contended_first: hour + 5 * MINUTE_MS,
        contended_last: hour + 50 * MINUTE_MS,
    };
    let mark = |hour: i64, gpu_samples: i64| PairHourMark {
        hour_ms: hour,
        thresholds: "v1,saturation=0.9".into(),
        gpu_samples,
        tenant_samples: 2 * gpu_samples,
    };
    let rows = [
        pair("n1", t0, "pod/v", 1.0 / 3.0),
        pair("n1", t0 + h, "pod/v", 2.5),
        pair("n1", t0 + h, "pod/w", 7.25),
        // An hour no mark names is not kept.
        pair("n1", t0 + 2 * h, "pod/v", 9.0),
    ];
    store
        .keep_pair_hours("c1", "n1", &[mark(t0, 120), mark(t0 + h, 60)], &rows)
        .await
        .unwrap();
    store
        .keep_pair_hours("c1", "n2", &[mark(t0, 1)], &[pair("n2", t0, "pod/q", 4.0)])
        .await
        .unwrap();
    // The same node name in another cluster is another node, read only with the fleet's.
    let other = PairHour {
        cluster: "c2".into(),
        ..pair("n1", t0, "pod/v", 5.5)
    };
    store
        .keep_pair_hours("c2", "n1", &[mark(t0, 5)], std::slice::from_ref(&other))
        .await
        .unwrap();
    let window = (t0 - h, t0 + 5 * h);
    let of = |scope: Scope<'static>| async move {
        let rows = store
            .pair_hours(scope, window.0, window.1, &mut |_| true)
            .await
            .unwrap();
        let mut marks = 0;
        store
            .pair_hour_marks(scope, window.0, window.1, &mut |c, n, _| {
                assert!(scope.cluster().is_none_or(|want| want == c), "{c}");
                if let Scope::Nodes(_, nodes) = scope {
                    assert!(nodes.iter().any(|x| x == n), "{n}");
                }
                marks += 1;
            })
            .await
            .unwrap();
        (rows, marks)
    };
    assert_eq!(of(Scope::Cluster("c2")).await, (vec![other.clone()], 1));
    let (all, marks) = of(Scope::Fleet).await;
    assert_eq!((all.len(), marks), (5, 4));
    let (c1, marks) = of(Scope::Cluster("c1")).await;
    assert!(c1.iter().all(|r| r.cluster == "c1"));
    assert_eq!((c1.len(), marks), (4, 3));
    // Some nodes of a cluster: a node the list names that has nothing kept adds nothing, and
    // the same node name in another cluster is not read.
    let nodes = |names: &[&str]| -> &'static [String] {
        Vec::leak(names.iter().map(|n| n.to_string()).collect())
    };
    let (n2, marks) = of(Scope::Nodes("c1", nodes(&["n2", "n9"]))).await;
    assert_eq!((n2.len(), marks), (1, 1));
    assert_eq!(n2[0].victim, "pod/q");
    let (both, marks) = of(Scope::Nodes("c1", nodes(&["n1", "n2"]))).await;
    assert_eq!((both.len(), marks), (4, 3));
    assert_eq!(of(Scope::Nodes("c2", nodes(&["n2"]))).await, (vec![], 0));
    assert_eq!(
        of(Scope::Nodes("c2", nodes(&["n1"]))).await,
        (vec![other.clone()], 1)
    );
    let marks = node_marks(store, "n1", window.0, window.1).await;
    let mut hours: Vec<_> = marks
        .iter()
        .map(|m| (m.hour_ms, m.gpu_samples, m.tenant_samples))
        .collect();
    hours.sort();
    assert_eq!(hours, [(t0, 120, 240), (t0 + h, 60, 120)]);
    assert_eq!(marks[0].thresholds, "v1,saturation=0.9");
    let kept = node_pair_hours(store, "n1", window.0, window.1).await;
    assert_eq!(kept, rows[..3], "sums come back to the bit");
    // Measured again: an hour's rows and mark are replaced, the other hours stay.
    store
        .keep_pair_hours(
            "c1",
            "n1",
            &[mark(t0 + h, 61)],
            &[pair("n1", t0 + h, "pod/v", 3.0)],
        )
        .await
        .unwrap();
    let kept = node_pair_hours(store, "n1", window.0, window.1).await;
    assert_eq!(
        kept,
        [
            pair("n1", t0, "pod/v", 1.0 / 3.0),
            pair("n1", t0 + h, "pod/v", 3.0)
        ]
    );
    let marks = node_marks(store, "n1", t0 + h, t0 + 2 * h).await;
    assert_eq!(marks, [mark(t0 + h, 61)]);
    assert_eq!(
        node_pair_hours(store, "n2", window.0, window.1).await.len(),
        1
    );
    // Dropping a range of hours drops their rows and marks, on every node of every cluster.
    assert_eq!(store.drop_pair_hours(i64::MIN, t0 + h).await.unwrap(), 6);
    assert_eq!(
        node_pair_hours(store, "n1", window.0, window.1).await.len(),
        1
    );
    assert!(
        node_pair_hours(store, "n2", window.0, window.1)
            .await
            .is_empty()
    );
}

/// One node's kept pair-hours (of cluster c1) in [from, to), by pair then hour.
pub(crate) async fn node_pair_hours(
    store: &Store,
    node: &str,
    from: i64,
    to: i64,
) -> Vec<store::pair_hours::PairHour> {
    let mut rows = store
        .pair_hours(Scope::Cluster("c1"), from, to, &mut |r| r.node == node)
        .await
        .unwrap();
    rows.sort_by(|a, b| {
        (&a.gpu, &a.victim, &a.aggressor, a.hour).cmp(&(&b.gpu, &b.victim, &b.aggressor, b.hour))
    });
    rows
}

/// One node's pair-hour marks (of cluster c1) in [from, to), by hour.
pub(crate) async fn node_marks(
    store: &Store,
    node: &str,
    from: i64,
    to: i64,
) -> Vec<store::pair_hours::PairHourMark> {
    let mut marks = Vec::new();
    store
        .pair_hour_marks(Scope::Cluster("c1"), from, to, &mut |c, n, m| {
            assert_eq!(c, "c1");
            if n == node {
                marks.push(m.clone());
            }
        })
        .await
        .unwrap();
    marks.sort_by_key(|m| m.hour_ms);
    marks
}

pub(crate) async fn reclaim_cases_move_once_and_keep_their_trail(store: &Store) {
    use store::audit::{Step, Trail};
    use store::reclaim_cases::{CaseFilter, Move, NewCase};
    let h = HOUR_MS;
    let case = |tenant: &str, opened: i64| NewCase {
        cluster: "c1".into(),
        node: "gpu-1".into(),
        gpu: "GPU-1".into(),
        tenant: tenant.into(),
        tenant_name: format!("pod ml/{tenant}"),
        namespace: "ml".into(),
        pod: tenant.into(),
        pod_uid: "uid".into(),
        team: "vision".into(),
        policy: "notebooks".into(),
        action: "scale-to-zero".into(),
        dry_run: false,
        finding: "f1".into(),
        idle_hours: 30.5,
        idle_share: 0.97,
        signal_metric: "sm_util".into(),
        signal_entity: format!("tenant:{tenant}"),
        state: CaseState::Noticed,
        opened_ms: opened,
        act_after_ms: opened + 4 * h,
    };
    let a = store.insert_reclaim_case(&case("a", h)).await.unwrap();
    let b = store.insert_reclaim_case(&case("b", 2 * h)).await.unwrap();
    let step = |n: i64, what: &str| Step {
        ts_ms: n,
        actor: "gpulens".into(),
        step: what.into(),
        result: "ok".into(),
        detail: String::new(),
    };
    for (i, w) in ["opened", "notice", "approved"].iter().enumerate() {
        store
            .add_audit_step(Trail::ReclaimCases, a, &step(i as i64, w))
            .await
            .unwrap();
    }
    let moved = store
        .move_reclaim_case(&Move {
            by: Some("alice"),
            ..Move::new(
                a,
                &[CaseState::Noticed, CaseState::AwaitingApproval],
                CaseState::Approved,
                5 * h,
            )
        })
        .await
        .unwrap();
    assert!(moved);
    assert!(
        !store
            .move_reclaim_case(&Move::new(
                a,
                &[CaseState::Noticed],
                CaseState::Cancelled,
                5 * h
            ))
            .await
            .unwrap(),
        "a case moves only from the states named"
    );
    store
        .move_reclaim_case(&Move {
            target: Some("Deployment ml/a"),
            undo: Some("kubectl scale"),
            ..Move::new(a, &[CaseState::Approved], CaseState::Acted, 6 * h)
        })
        .await
        .unwrap();
    store
        .move_reclaim_case(&Move {
            outcome: Some("freed GPU 0"),
            ..Move::new(a, &[CaseState::Acted], CaseState::Freed, 7 * h)
        })
        .await
        .unwrap();
    let all = store.reclaim_cases(&CaseFilter::newest(10)).await.unwrap();
    assert_eq!(all.iter().map(|c| c.id).collect::<Vec<_>>(), [b, a]);
    let got = &all[1];
    assert_eq!(
        got.case,
        NewCase {
            state: CaseState::Freed,
            ..case("a", h)
        },
        "the case reads back as recorded, in its new state"
    );
    assert_eq!(
        (
            got.decided_by.as_deref(),
            got.decided_ms,
            got.target.as_deref(),
            got.undo.as_deref(),
            got.acted_ms,
            got.finished_ms,
            got.outcome.as_deref()
        ),
        (
            Some("alice"),
            Some(5 * h),
            Some("Deployment ml/a"),
            Some("kubectl scale"),
            Some(6 * h),
            Some(7 * h),
            Some("freed GPU 0")
        )
    );
    assert_eq!(
        got.steps
            .iter()
            .map(|s| s.step.as_str())
            .collect::<Vec<_>>(),
        ["opened", "notice", "approved"]
    );
    let open = store
        .reclaim_cases(&CaseFilter {
            states: &CaseState::OPEN,
            ..CaseFilter::newest(10)
        })
        .await
        .unwrap();
    assert_eq!(open.iter().map(|c| c.id).collect::<Vec<_>>(), [b]);
    let acted = store
        .reclaim_cases(&CaseFilter {
            acted_since_ms: Some(6 * h),
            opened_since_ms: Some(0),
            ..CaseFilter::newest(10)
        })
        .await
        .unwrap();
    assert_eq!(acted.len(), 1);
    assert_eq!(acted[0].case.state, CaseState::Freed);
}

/// A host user's uid of 2^31 or more (a u32 on the wire) is kept in PostgreSQL's 32-bit
/// column as its two's complement; every backend reads the tenant back with its uid.
pub(crate) async fn a_uid_past_2_31_reads_back(store: &Store) {
    let t0 = hour_ago(1);
    let mut b = fleet().batch(0, "high-uid", 1, &[t0], 1000);
    for uid in [4_000_000_000u32, u32::MAX - 1, 2_147_483_648] {
        b.tenants
            .push(model::Tenant::host_user(uid, Some(format!("svc{uid}"))));
    }
    store.ingest(&b, t0, &no_team).await.unwrap();
    let tenants = store.tenants().await.unwrap();
    for uid in [4_000_000_000u32, u32::MAX - 1, 2_147_483_648] {
        let key = model::Tenant::host_key(uid);
        let t = tenants.iter().find(|t| t.key() == key);
        assert_eq!(t.map(|t| t.tenant.uid), Some(Some(uid)), "{key}");
    }
}

/// A tenant's first_seen is the first sample that shows it (not the last sample
/// of the first batch), and later batches move only its last_seen.
pub(crate) async fn a_tenant_is_first_seen_at_its_first_sample(store: &Store) {
    let t0 = hour_ago(2);
    let first = fleet().batch(0, "seen", 1, &[t0, t0 + 1000, t0 + 2000], 1000);
    store.ingest(&first, t0 + 3000, &no_team).await.unwrap();
    // Two minutes on (past the records' refresh), the next batch.
    let t1 = t0 + 2 * 60_000;
    let next = fleet().batch(0, "seen", 2, &[t1, t1 + 1000], 1000);
    store.ingest(&next, t1 + 2000, &no_team).await.unwrap();
    let tenants = store.tenants().await.unwrap();
    let ours: Vec<_> = tenants
        .iter()
        .filter(|t| first.tenants.iter().any(|x| x.key == t.key()))
        .collect();
    assert!(!ours.is_empty());
    for t in ours {
        assert_eq!(
            (t.first_seen_ms, t.last_seen_ms),
            (t0, t1 + 1000),
            "{}",
            t.key()
        );
    }
}

#[tokio::test]
pub(crate) async fn a_tenant_row_outside_the_wire_domain_is_left_out_not_fatal() {
    let dir = support::TempDir::new("tenant-domain");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = store::Store::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let t0 = hour_ago(1);
    let b = fleet().batch(0, "odd-tenant", 1, &[t0], 1000);
    store.ingest(&b, t0, &no_team).await.unwrap();
    let before = store.tenants().await.unwrap().len();
    assert!(before > 0);
    // Rows no agent batch can produce: a kind the wire does not know, a uid past u32.
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    for (key, kind, uid) in [("robot/1", "robot", 1i64), ("host/x", "host_user", 1 << 40)] {
        sqlx::query(
            "INSERT INTO tenants (cluster, node, tenant_key, kind, uid, first_seen, last_seen) VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&b.cluster)
        .bind(&b.node)
        .bind(key)
        .bind(kind)
        .bind(uid)
        .bind(t0)
        .bind(t0)
        .execute(&raw)
        .await
        .unwrap();
    }
    let after = store.tenants().await.unwrap();
    assert_eq!(after.len(), before, "{after:#?}");
    assert!(
        after
            .iter()
            .all(|t| !["robot/1", "host/x"].contains(&t.key()))
    );
}
