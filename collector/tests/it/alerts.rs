//! Alert delivery over real sockets to a local webhook receiver that checks what it gets:
//! Alertmanager's webhook format, signatures, grouping, group_interval, repeat, resolve, Slack
//! pacing, no retry on 4xx, and a receiver that is down (503s, then dropping every connection unanswered)
//! getting every notification afterwards, in order, none twice. Timers are scaled down
//! (group_wait 300 ms, group_interval 1 s, repeat 2.5 s) so the test runs in seconds; the logic
//! is the same as with Alertmanager's 30 s / 5 m / 4 h defaults (unit tests in
//! collector/src/alerts/groups.rs use those).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use collector::alerts::Alerting;
use collector::alerts::rules::{Kind, Rule};
use collector::alerts::settings::{Receiver, ReceiverKind, Settings};
use collector::config::Secret;
use collector_shared::signing;
use serde_json::Value;
use store::Store;
use store::label_actions::{NewLabelAction, Transition};

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Got {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
    pub raw: Bytes,
    pub at: Instant,
}

/// A webhook receiver on a real socket: records every request and answers with `status`.
#[derive(Clone)]
pub struct Hook {
    pub addr: SocketAddr,
    pub got: Arc<Mutex<Vec<Got>>>,
    pub status: Arc<AtomicU16>,
    open: Arc<AtomicBool>,
}

impl Hook {
    pub async fn start() -> Hook {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let h = Hook {
            addr,
            got: Arc::default(),
            status: Arc::new(AtomicU16::new(200)),
            open: Arc::new(AtomicBool::new(true)),
        };
        let app =
            axum::Router::new()
                .fallback(
                    |State(h): State<Hook>,
                     uri: axum::http::Uri,
                     headers: HeaderMap,
                     body: Bytes| async move {
                        let code = h.status.load(Ordering::SeqCst);
                        if code == 200 {
                            h.got.lock().unwrap().push(Got {
                                path: uri.path().to_owned(),
                                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                                raw: body,
                                headers,
                                at: Instant::now(),
                            });
                        }
                        StatusCode::from_u16(code).unwrap()
                    },
                )
                .with_state(h.clone());
        let gate = Gate {
            listener,
            open: h.open.clone(),
        };
        tokio::spawn(async move {
            let _ = axum::serve(gate, app).await;
        });
        h
    }

    /// The receiver goes away: every connection, new or kept alive, is dropped without an
    /// answer. The port stays bound, so no other server started meanwhile (tests run
    /// side by side with Prometheus and Alertmanager) can take it and answer in our place.
    pub fn down(&self) {
        self.open.store(false, Ordering::SeqCst);
    }

    /// The receiver is back.
    pub fn up(&self) {
        self.open.store(true, Ordering::SeqCst);
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn bodies(&self, path: &str) -> Vec<Value> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|g| g.path == path)
            .map(|g| g.body.clone())
            .collect()
    }
}

impl Got {
    /// The notification id the receiver was sent (`X-Gpulens-Notification-Id`).
    pub fn notification_id(&self) -> i64 {
        self.headers["x-gpulens-notification-id"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    }
}

/// Asserts the ids arrived in order, none twice.
fn assert_in_order_none_twice(ids: &[i64]) {
    let mut unique = ids.to_vec();
    unique.sort();
    unique.dedup();
    assert_eq!(ids, unique, "in order, none twice");
}

fn receiver(name: &str, kind: ReceiverKind, url: String) -> Receiver {
    Receiver {
        name: name.into(),
        kind,
        url: Secret(url),
        secret: None,
        timeout: Duration::from_secs(2),
        send_resolved: true,
        matchers: BTreeMap::new(),
    }
}

fn settings(receivers: Vec<Receiver>) -> Settings {
    let rule = Rule::default_for(Kind::LabelRollback);
    Settings {
        group_wait: Duration::from_millis(300),
        group_interval: Duration::from_secs(1),
        repeat_interval: Duration::from_millis(2500),
        default_rules: false,
        rules: vec![rule],
        receivers,
        external_url: Some("http://gpulens.example:8080".into()),
        ..Settings::default()
    }
}

/// The hook's listener: while shut it accepts and drops each connection (the client sees it
/// closed before any answer), and connections kept alive from before fail on their next read.
struct Gate {
    listener: tokio::net::TcpListener,
    open: Arc<AtomicBool>,
}

impl axum::serve::Listener for Gate {
    type Io = GatedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (GatedStream, SocketAddr) {
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) if self.open.load(Ordering::SeqCst) => {
                    let open = self.open.clone();
                    return (GatedStream { stream, open }, peer);
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

struct GatedStream {
    stream: tokio::net::TcpStream,
    open: Arc<AtomicBool>,
}

impl tokio::io::AsyncRead for GatedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.open.load(Ordering::SeqCst) {
            return Poll::Ready(Err(std::io::ErrorKind::ConnectionReset.into()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for GatedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Records a GPU Operator change on `node` that ended in `state` now.
pub async fn action(store: &Store, node: &str, state: &str) -> i64 {
    let now = collector::now_ms();
    let id = store
        .insert_label_action(&NewLabelAction {
            node: node.into(),
            label: "nvidia.com/mig.config".into(),
            value: "gpulens-mig-0123456789ab".into(),
            requested_by: "test".into(),
            requested_ms: now,
            plan: "{}".into(),
        })
        .await
        .unwrap();
    let moved = store
        .transition_label_action(&Transition {
            id,
            from: &[store::label_actions::ActionState::Planned],
            to: store::label_actions::ActionState::parse(state).expect("a label-action state"),
            by: None,
            override_pods: None,
            now_ms: now,
            outcome: Some("the MIG manager reported nvidia.com/mig.config.state=failed"),
        })
        .await
        .unwrap();
    assert!(moved);
    id
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

fn nodes_of(n: &Value) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = n["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["labels"]["node"].as_str().unwrap().to_owned(),
                a["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Alerting keeps its state in the store as records; what it reads back is what it wrote, on
/// every backend (SQLite, PostgreSQL, Citus), and a pass over unchanged conditions rewrites
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_state_round_trips_through_both_backends() {
    use collector::alerts::state::{State as AlertState, load};
    let lite = crate::support::sqlite().await;
    let pg = crate::support::postgres().await;
    let citus = crate::support::citus().await;
    for t in std::iter::once(&lite)
        .chain(pg.as_ref())
        .chain(citus.as_ref())
    {
        let s = &t.store;
        let mut a = Alerting::new(settings(vec![])).unwrap();
        action(s, "gpu-1", "rolled_back").await;
        let p = a.pass(s).await.unwrap().unwrap();
        assert_eq!((p.firing, p.enqueued), (1, 0));
        let stored = load(s).await.unwrap();
        assert_eq!(stored.len(), 1, "{}", s.backend());
        assert_eq!(stored[0].state, AlertState::Firing);
        assert_eq!(stored[0].labels["node"], "gpu-1");
        let p = a.pass(s).await.unwrap().unwrap();
        assert_eq!(p.firing, 1);
        assert_eq!(load(s).await.unwrap(), stored, "{}", s.backend());
    }
}

#[tokio::test]
async fn webhooks_get_grouped_signed_repeated_and_resolved_notifications() {
    let t = crate::support::sqlite().await;
    let hook = Hook::start().await;
    let mut r = receiver("oncall", ReceiverKind::Webhook, hook.url("/am"));
    r.secret = Some(Secret("s3cret-signing-key".into()));
    let mut a = Alerting::new(settings(vec![r])).unwrap();
    let s = &t.store;

    // A rollback: the alert fires at once (for = 0) but the group waits group_wait.
    action(s, "gpu-1", "rolled_back").await;
    let p = a.pass(s).await.unwrap().unwrap();
    assert_eq!((p.firing, p.enqueued), (1, 0));
    sleep_ms(350).await;
    let p = a.pass(s).await.unwrap().unwrap();
    assert_eq!((p.enqueued, p.delivered), (1, 1));
    let got = hook.got.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    let n = &got[0].body;
    // Alertmanager's webhook format, version 4.
    assert_eq!(n["version"], "4");
    assert_eq!(n["status"], "firing");
    assert_eq!(n["receiver"], "oncall");
    assert_eq!(n["groupKey"], "oncall:{alertname=\"GpulensLabelRollback\"}");
    assert_eq!(n["groupLabels"]["alertname"], "GpulensLabelRollback");
    assert_eq!(n["commonLabels"]["severity"], "warning");
    assert_eq!(n["externalURL"], "http://gpulens.example:8080");
    let alert = &n["alerts"][0];
    assert_eq!(alert["labels"]["node"], "gpu-1");
    assert_eq!(alert["labels"]["label"], "nvidia.com/mig.config");
    assert_eq!(alert["endsAt"], "0001-01-01T00:00:00Z");
    assert!(
        alert["annotations"]["description"]
            .as_str()
            .unwrap()
            .contains("failed"),
        "{alert}"
    );
    assert!(
        alert["generatorURL"]
            .as_str()
            .unwrap()
            .starts_with("http://gpulens.example:8080/api/v1/alerts?fingerprint=")
    );
    // Signed: HMAC-SHA256 over "<timestamp>.<body>".
    let ts: i64 = got[0].headers["x-gpulens-timestamp"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((collector::now_ms() / 1000 - ts).abs() < 60);
    assert_eq!(
        got[0].headers["x-gpulens-signature"].to_str().unwrap(),
        signing::signature("s3cret-signing-key", ts, &got[0].raw)
    );
    assert_ne!(
        got[0].headers["x-gpulens-signature"].to_str().unwrap(),
        signing::signature("another-key", ts, &got[0].raw)
    );

    // A second node joins the group: not before group_interval, then one notification with both.
    action(s, "gpu-2", "failed").await;
    assert_eq!(a.pass(s).await.unwrap().unwrap().enqueued, 0);
    sleep_ms(1050).await;
    assert_eq!(a.pass(s).await.unwrap().unwrap().delivered, 1);
    let n = hook.bodies("/am").pop().unwrap();
    assert_eq!(
        nodes_of(&n),
        [
            ("gpu-1".into(), "firing".into()),
            ("gpu-2".into(), "firing".into())
        ]
    );
    // Mixed severities: severity is not common any more.
    assert!(n["commonLabels"].get("severity").is_none(), "{n}");

    // Unchanged: nothing until repeat_interval, then the same group again.
    sleep_ms(1100).await;
    assert_eq!(a.pass(s).await.unwrap().unwrap().enqueued, 0);
    sleep_ms(1500).await;
    assert_eq!(a.pass(s).await.unwrap().unwrap().delivered, 1);
    assert_eq!(nodes_of(&hook.bodies("/am").pop().unwrap()).len(), 2);

    // gpu-1's next change applies: its alert resolves, told once with gpu-2 still firing.
    action(s, "gpu-1", "applied").await;
    sleep_ms(1050).await;
    assert_eq!(a.pass(s).await.unwrap().unwrap().delivered, 1);
    let n = hook.bodies("/am").pop().unwrap();
    assert_eq!(n["status"], "firing");
    assert_eq!(
        nodes_of(&n),
        [
            ("gpu-1".into(), "resolved".into()),
            ("gpu-2".into(), "firing".into())
        ]
    );
    let resolved = n["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["status"] == "resolved")
        .unwrap();
    assert_ne!(resolved["endsAt"], "0001-01-01T00:00:00Z");
    // Then gpu-2 too: the group's resolved notification, and silence after it.
    action(s, "gpu-2", "applied").await;
    sleep_ms(1050).await;
    assert_eq!(a.pass(s).await.unwrap().unwrap().delivered, 1);
    let n = hook.bodies("/am").pop().unwrap();
    assert_eq!(n["status"], "resolved");
    assert_eq!(nodes_of(&n), [("gpu-2".into(), "resolved".into())]);
    sleep_ms(2600).await;
    assert_eq!(a.pass(s).await.unwrap().unwrap().enqueued, 0);
    assert_eq!(hook.bodies("/am").len(), 5);

    // Everything is visible at /api/v1/alerts: alerts and each notification's attempts.
    let list = s.notifications(Some("oncall"), 100).await.unwrap();
    assert_eq!(list.len(), 5);
    assert!(
        list.iter()
            .all(|n| n.state == "delivered" && n.tries.len() == 1)
    );
    let alerts = collector::alerts::state::load(s).await.unwrap();
    assert!(
        alerts
            .iter()
            .all(|x| x.state == collector::alerts::state::State::Resolved)
    );
}

#[tokio::test]
async fn a_receiver_down_for_a_while_gets_every_notification_afterwards_once() {
    let t = crate::support::sqlite().await;
    let hook = Hook::start().await;
    let mut s_ = settings(vec![receiver(
        "oncall",
        ReceiverKind::Json,
        hook.url("/json"),
    )]);
    // One group per node, so each rollback makes its own notification; no repeats within the
    // test (they would be new notifications, queued behind these).
    s_.group_by = vec!["alertname".into(), "node".into()];
    s_.repeat_interval = Duration::from_secs(3600);
    let mut a = Alerting::new(s_).unwrap();
    let s = &t.store;

    // First it answers 503, then it drops every connection unanswered.
    hook.status.store(503, Ordering::SeqCst);
    for (i, node) in ["gpu-1", "gpu-2", "gpu-3"].iter().enumerate() {
        action(s, node, "rolled_back").await;
        a.pass(s).await.unwrap();
        sleep_ms(350).await;
        a.pass(s).await.unwrap();
        if i == 0 {
            hook.down();
        }
    }
    // Retried with backoff, never given up; the queue waits in order behind the first.
    for _ in 0..6 {
        sleep_ms(600).await;
        let p = a.pass(s).await.unwrap().unwrap();
        assert_eq!(p.delivered, 0);
    }
    let queued = s.notifications(Some("oncall"), 100).await.unwrap();
    assert_eq!(queued.len(), 3);
    assert!(queued.iter().all(|n| n.state == "queued"), "{queued:?}");
    let first = queued.iter().min_by_key(|n| n.id).unwrap();
    assert!(first.attempts >= 3, "{first:?}");
    let outcomes: Vec<(&str, Option<i32>)> = first
        .tries
        .iter()
        .map(|t| (t.outcome.as_str(), t.http_status))
        .collect();
    assert_eq!(outcomes[0], ("retry", Some(503)));
    assert!(
        first
            .tries
            .iter()
            .any(|t| t.http_status.is_none() && t.detail.contains("cannot reach")),
        "{:?}",
        first.tries
    );

    // Back: everything arrives, oldest first, each once.
    hook.status.store(200, Ordering::SeqCst);
    hook.up();
    let deadline = Instant::now() + Duration::from_secs(10);
    while hook.bodies("/json").len() < 3 {
        assert!(Instant::now() < deadline, "not delivered after the outage");
        sleep_ms(300).await;
        a.pass(s).await.unwrap();
    }
    for _ in 0..3 {
        sleep_ms(300).await;
        a.pass(s).await.unwrap();
    }
    let got = hook.got.lock().unwrap().clone();
    let ids: Vec<i64> = got.iter().map(Got::notification_id).collect();
    assert_in_order_none_twice(&ids);
    assert_eq!(ids.len(), 3);
    let nodes: Vec<&str> = got
        .iter()
        .map(|g| g.body["alerts"][0]["labels"]["node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["gpu-1", "gpu-2", "gpu-3"]);
    // gpulens' own JSON format.
    let b = &got[0].body;
    assert_eq!(b["status"], "firing");
    assert_eq!(b["firing"], 1);
    assert_eq!(b["alerts"][0]["rule"], "GpulensLabelRollback");
    assert!(b["alerts"][0]["starts_at"].is_string());
    assert!(
        s.notifications(Some("oncall"), 100)
            .await
            .unwrap()
            .iter()
            .all(|n| n.state == "delivered")
    );
}

#[tokio::test]
async fn refusals_are_not_retried_and_slack_is_paced() {
    let t = crate::support::sqlite().await;
    let hook = Hook::start().await;
    let mut s_ = settings(vec![
        receiver("chat", ReceiverKind::Slack, hook.url("/slack")),
        receiver("strict", ReceiverKind::Webhook, hook.url("/strict")),
    ]);
    s_.group_by = vec!["node".into()];
    s_.receivers[1].matchers = BTreeMap::from([("node".into(), "gpu-1".into())]);
    let mut a = Alerting::new(s_).unwrap();
    let s = &t.store;
    // The strict receiver refuses what it gets with 400; Slack gets two messages.
    hook.status.store(400, Ordering::SeqCst);
    action(s, "gpu-1", "failed").await;
    action(s, "gpu-2", "rolled_back").await;
    a.pass(s).await.unwrap();
    sleep_ms(350).await;
    a.pass(s).await.unwrap();
    let strict = s.notifications(Some("strict"), 10).await.unwrap();
    assert_eq!(strict.len(), 1, "the matcher keeps gpu-2 out");
    assert_eq!(strict[0].state.as_str(), "failed");
    assert_eq!(strict[0].attempts, 1);
    assert_eq!(strict[0].tries[0].http_status, Some(400));
    // Slack refused too; now let it in and send fresh ones: two groups, a second apart.
    hook.status.store(200, Ordering::SeqCst);
    action(s, "gpu-3", "failed").await;
    action(s, "gpu-4", "failed").await;
    a.pass(s).await.unwrap();
    sleep_ms(350).await;
    a.pass(s).await.unwrap();
    let got: Vec<Got> = hook
        .got
        .lock()
        .unwrap()
        .iter()
        .filter(|g| g.path == "/slack")
        .cloned()
        .collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[1].at.duration_since(got[0].at) >= Duration::from_millis(950));
    let text = got[0].body["text"].as_str().unwrap();
    assert!(text.starts_with("[FIRING:1]"), "{text}");
    let blocks = got[0].body["blocks"].as_array().unwrap();
    assert!(
        blocks[1]["text"]["text"]
            .as_str()
            .unwrap()
            .contains("GpulensLabelRollback")
    );
    // The refused notifications stay failed; nothing was sent twice.
    assert!(hook.bodies("/strict").is_empty());
}

/// The Alertmanager binary (Debian's prometheus-alertmanager), or None.
fn alertmanager_bin() -> Option<std::path::PathBuf> {
    let candidates = ["prometheus-alertmanager", "alertmanager"];
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .flat_map(|d| candidates.map(|c| d.join(c)))
            .find(|p| p.is_file())
    })
}

/// gpulens pushes its alerts to a real Alertmanager, which routes them to a webhook in its own
/// format (the same shape gpulens' webhook receivers get) and resolves them when gpulens does.
#[tokio::test]
async fn a_real_alertmanager_takes_our_alerts_and_routes_them() {
    let Some(bin) = alertmanager_bin() else {
        assert!(
            std::env::var("GPULENS_REQUIRE_ALERTMANAGER").is_err(),
            "prometheus-alertmanager is not installed"
        );
        eprintln!("skipping: no Alertmanager (run the suite with tests/run.sh)");
        return;
    };
    let hook = Hook::start().await;
    let dir = crate::support::TempDir::new("alertmanager");
    let config = dir.path().join("alertmanager.yml");
    std::fs::write(
        &config,
        format!(
            "route:\n  receiver: hook\n  group_by: ['alertname']\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: {}\n        send_resolved: true\n",
            hook.url("/from-am")
        ),
    )
    .unwrap();
    let port = crate::support::free_port();
    let _am = crate::support::Killed(
        std::process::Command::new(&bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let am = format!("http://127.0.0.1:{port}");
    let http = ingest_client::http().build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = http.get(format!("{am}/-/ready")).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(Instant::now() < deadline, "Alertmanager did not start");
        sleep_ms(200).await;
    }

    let t = crate::support::sqlite().await;
    let s = &t.store;
    let mut a = Alerting::new(settings(vec![receiver(
        "team-am",
        ReceiverKind::Alertmanager,
        am.clone(),
    )]))
    .unwrap();
    action(s, "gpu-1", "rolled_back").await;
    let p = a.pass(s).await.unwrap().unwrap();
    assert_eq!(
        (p.enqueued, p.delivered),
        (1, 1),
        "pushed at once: Alertmanager groups"
    );
    // Alertmanager holds it.
    let held = crate::support::get_json(&http, &format!("{am}/api/v2/alerts")).await;
    let held = held.as_array().unwrap();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["labels"]["alertname"], "GpulensLabelRollback");
    assert_eq!(held[0]["labels"]["node"], "gpu-1");
    assert_eq!(held[0]["status"]["state"], "active");
    // …and routes it to its webhook, in the format gpulens' own webhook receivers get.
    let deadline = Instant::now() + Duration::from_secs(20);
    while hook.bodies("/from-am").is_empty() {
        assert!(Instant::now() < deadline, "Alertmanager sent nothing");
        sleep_ms(200).await;
    }
    let from_am = hook.bodies("/from-am").remove(0);
    assert_eq!(from_am["version"], "4");
    assert_eq!(from_am["status"], "firing");
    assert_eq!(from_am["alerts"][0]["labels"]["node"], "gpu-1");
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let ours = {
        let hook2 = Hook::start().await;
        let mut b = Alerting::new(settings(vec![receiver(
            "oncall",
            ReceiverKind::Webhook,
            hook2.url("/ours"),
        )]))
        .unwrap();
        let t2 = crate::support::sqlite().await;
        action(&t2.store, "gpu-1", "rolled_back").await;
        b.pass(&t2.store).await.unwrap();
        sleep_ms(350).await;
        b.pass(&t2.store).await.unwrap();
        hook2.bodies("/ours").remove(0)
    };
    assert_eq!(keys(&ours), keys(&from_am), "top-level fields");
    assert_eq!(
        keys(&ours["alerts"][0]),
        keys(&from_am["alerts"][0]),
        "alert fields"
    );

    // Resolved in gpulens: pushed with its end time, and Alertmanager tells its webhook.
    action(s, "gpu-1", "applied").await;
    let p = a.pass(s).await.unwrap().unwrap();
    assert_eq!((p.resolved, p.delivered), (1, 1));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !hook
        .bodies("/from-am")
        .iter()
        .any(|b| b["status"] == "resolved")
    {
        assert!(Instant::now() < deadline, "Alertmanager did not resolve it");
        sleep_ms(200).await;
    }
    // Every push is recorded with its attempt.
    let pushes = s.notifications(Some("team-am"), 10).await.unwrap();
    assert_eq!(pushes.len(), 2);
    assert!(
        pushes
            .iter()
            .all(|n| n.state == "delivered" && n.tries[0].http_status == Some(200))
    );
}

/// Ten minutes of a receiver that is not there, with Alertmanager's default timers
/// (group_wait 30 s, group_interval 5 m, repeat 4 h), replayed in simulated time: passes every
/// 10 s of that time against a real socket. Alerts fire, join and resolve during the outage;
/// afterwards the receiver gets every notification, in order, each once.
#[tokio::test]
async fn a_receiver_down_for_ten_minutes_gets_every_notification_afterwards_once() {
    let t = crate::support::sqlite().await;
    let s = &t.store;
    let hook = Hook::start().await;
    let mut st = Settings {
        default_rules: false,
        rules: vec![Rule::default_for(Kind::LabelRollback)],
        receivers: vec![receiver("oncall", ReceiverKind::Webhook, hook.url("/am"))],
        ..Settings::default()
    };
    st.receivers[0].secret = Some(Secret("k".into()));
    assert_eq!(
        (st.group_wait, st.group_interval, st.repeat_interval),
        (
            Duration::from_secs(30),
            Duration::from_secs(300),
            Duration::from_secs(4 * 3600)
        )
    );
    let mut a = Alerting::new(st).unwrap();
    hook.down();
    let t0 = collector::now_ms();
    let mut resolved_at = None;
    for step in 0..=96 {
        let now = t0 + step * 10_000;
        match step {
            0 => drop(action(s, "gpu-1", "rolled_back").await),
            2 => drop(action(s, "gpu-2", "failed").await),
            12 => drop(action(s, "gpu-3", "rolled_back").await),
            42 => {
                action(s, "gpu-1", "applied").await;
                resolved_at = Some(now);
            }
            // Back after ten minutes.
            60 => hook.up(),
            _ => {}
        }
        a.pass_at(s, now).await.unwrap().unwrap();
        if step < 60 {
            assert!(hook.got.lock().unwrap().is_empty());
        }
    }
    assert!(resolved_at.is_some());
    let got = hook.got.lock().unwrap().clone();
    let ids: Vec<i64> = got.iter().map(Got::notification_id).collect();
    assert_in_order_none_twice(&ids);
    // 30 s: gpu-1 and gpu-2 (joined within group_wait); 5 m 30 s: gpu-3 joined; 10 m 30 s:
    // gpu-1 resolved. All three made during or right after the outage, all delivered.
    let bodies: Vec<Vec<(String, String)>> = got.iter().map(|g| nodes_of(&g.body)).collect();
    let f = |n: &str| (n.to_owned(), "firing".to_owned());
    assert_eq!(
        bodies,
        [
            vec![f("gpu-1"), f("gpu-2")],
            vec![f("gpu-1"), f("gpu-2"), f("gpu-3")],
            vec![
                ("gpu-1".to_owned(), "resolved".to_owned()),
                f("gpu-2"),
                f("gpu-3")
            ],
        ]
    );
    for g in &got {
        let ts: i64 = g.headers["x-gpulens-timestamp"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            g.headers["x-gpulens-signature"].to_str().unwrap(),
            signing::signature("k", ts, &g.raw)
        );
    }
    // The first notification's attempts span the outage, with the wait capped at 5 minutes.
    let list = s.notifications(Some("oncall"), 10).await.unwrap();
    let first = list.iter().min_by_key(|n| n.id).unwrap();
    assert_eq!(first.state.as_str(), "delivered");
    assert!(first.tries.len() >= 6, "{:?}", first.tries);
    // An attempt is stored at its end (the pass's time plus the request's duration, which is
    // real time); the next one starts at the first pass (every 10 s) after a backoff of at
    // most 5 minutes from that end.
    for w in first.tries.windows(2) {
        let next_pass = w[1].ts_ms - w[1].duration_ms;
        assert!(next_pass - w[0].ts_ms <= 300_000 + 10_000, "{w:?}");
    }
    assert!(first.tries.last().unwrap().ts_ms >= t0 + 600_000);
    assert!(
        first.tries[..first.tries.len() - 1]
            .iter()
            .all(|x| x.outcome == "retry")
    );
}
