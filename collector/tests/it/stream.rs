//! The ingest stream (`GET /api/v1/ingest/stream`, docs/ingest.md "The stream") on a real
//! socket through the collector's own listener: batches stored once, each answered as its
//! request would be; refusals that leave the stream open and those that close it; the
//! upgrade refused without a token or without asking; the agent's client on streams, and
//! falling back to requests where a collector offers none.

use std::time::Duration;

use collector::config::{IngestConfig, TeamsConfig};
use collector::state::AppState;
use collector_shared::agent_auth::Auth;
use model::wire::v1::stream::{self, Encoding};
use serde_json::Value;
use store::Retention;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{self, TestStore, fleet};

const TOKEN: &str = "stream-token-whole-01";
/// Bound to another node than the batches'.
const OTHER: &str = "stream-token-other-01";

/// A collector on a real socket; its URL.
async fn serve() -> (String, TestStore, tokio::sync::oneshot::Sender<()>) {
    let t = support::sqlite().await;
    let mut auth = Auth::default();
    auth.add(TOKEN, vec!["whole".into()], None);
    auth.add(OTHER, vec!["elsewhere".into()], None);
    let ingest = IngestConfig {
        max_body_bytes: 64 * 1024,
        max_decoded_bytes: 256 * 1024,
        max_rows: 10_000,
        // Room for the concurrent sends below (the per-node bound holds on streams too:
        // each frame takes one of the node's places, as a request does).
        max_in_flight_per_node: 8,
    };
    let state = AppState::new(
        t.store.clone(),
        auth,
        ingest,
        Retention::default(),
        TeamsConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(collector::server::serve(listener, state, async {
        let _ = stopped.await;
    }));
    (url, t, stop)
}

fn batch(seq: u64) -> model::wire::v1::Batch {
    let f = fleet();
    let now = collector::now_ms();
    f.batch(
        f.node_index("whole").unwrap(),
        "stream",
        seq,
        &[now - 2000, now - 1000],
        1000,
    )
}

/// A stream opened by hand: the upgrade's answer head, and the connection.
async fn upgrade(url: &str, headers: &str) -> (String, TcpStream) {
    let mut s = TcpStream::connect(url.trim_start_matches("http://"))
        .await
        .unwrap();
    s.write_all(format!("GET {} HTTP/1.1\r\nHost: x\r\n{headers}\r\n", stream::PATH).as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        if s.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        head.push(byte[0]);
    }
    (String::from_utf8(head).unwrap(), s)
}

fn asking(token: &str) -> String {
    format!(
        "Connection: upgrade\r\nUpgrade: {}\r\nAuthorization: Bearer {token}\r\n",
        stream::UPGRADE
    )
}

/// One frame sent, its answer read; None when the collector closed the stream instead.
async fn exchange(s: &mut TcpStream, frame: &[u8]) -> Option<Value> {
    s.write_all(frame).await.ok()?;
    answer(s).await
}

async fn answer(s: &mut TcpStream) -> Option<Value> {
    let mut len = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(30), s.read_exact(&mut len))
        .await
        .unwrap()
        .ok()?;
    let mut answer = vec![0; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut answer).await.ok()?;
    Some(serde_json::from_slice(&answer).unwrap())
}

/// Whether the collector closed the connection (EOF) within a few seconds.
async fn closed(s: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(10), s.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

fn compact(seq: u64) -> Vec<u8> {
    stream::batch_frame(
        Encoding::MessagePackSnappy,
        &ingest_client::Client::encode(&batch(seq)).unwrap(),
    )
}

#[tokio::test]
async fn batches_on_a_stream_are_stored_once_and_answered_as_requests_would_be() {
    let (url, t, _stop) = serve().await;
    let (head, mut s) = upgrade(&url, &asking(TOKEN)).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("gpulens-stream-max-age: 600"),
        "{head}"
    );
    let a = exchange(&mut s, &compact(1)).await.unwrap();
    assert_eq!(
        (a["code"].as_u64(), a["status"].as_str()),
        (Some(200), Some("stored")),
        "{a}"
    );
    assert!(a["rows"].as_u64().unwrap() > 0);
    assert_eq!(t.store.counts().await.unwrap().gpu_samples, 4);
    // The same batch again: a duplicate, nothing stored twice.
    let a = exchange(&mut s, &compact(1)).await.unwrap();
    assert_eq!(a["status"], "duplicate", "{a}");
    // JSON, gzip or not, on the same stream.
    let json = serde_json::to_vec(&batch(2)).unwrap();
    let a = exchange(&mut s, &stream::batch_frame(Encoding::Json, &json))
        .await
        .unwrap();
    assert_eq!(a["code"], 200, "{a}");
    // A batch refused for what it holds is answered as a request's 400, and the stream goes on.
    let a = exchange(
        &mut s,
        &stream::batch_frame(Encoding::Json, b"{\"version\": 2}"),
    )
    .await
    .unwrap();
    assert_eq!(a["code"], 400, "{a}");
    assert!(
        a["error"]["message"].as_str().unwrap().contains("JSON"),
        "{a}"
    );
    let a = exchange(
        &mut s,
        &stream::batch_frame(Encoding::MessagePackSnappy, b"\xff\xff"),
    )
    .await
    .unwrap();
    assert_eq!(a["code"], 400, "{a}");
    let a = exchange(&mut s, &compact(3)).await.unwrap();
    assert_eq!(a["status"], "stored", "{a}");
    assert_eq!(t.store.counts().await.unwrap().gpu_samples, 12);
    // A frame longer than [ingest] max_body_bytes: 413 from its header alone, then closed.
    let mut long = 70_000u32.to_be_bytes().to_vec();
    long.push(Encoding::Json.tag());
    let a = exchange(&mut s, &long).await.unwrap();
    assert_eq!(a["code"], 413, "{a}");
    assert!(closed(&mut s).await);
    // An encoding byte that names none: 415, then closed.
    let (_, mut s) = upgrade(&url, &asking(TOKEN)).await;
    let mut bad = compact(4);
    bad[4] = 7;
    let a = exchange(&mut s, &bad).await.unwrap();
    assert_eq!(a["code"], 415, "{a}");
    assert!(
        a["error"]["message"]
            .as_str()
            .unwrap()
            .contains("encoding byte is 7"),
        "{a}"
    );
    assert!(closed(&mut s).await);
    assert_eq!(t.store.counts().await.unwrap().gpu_samples, 12);
}

#[tokio::test]
async fn a_stream_is_refused_without_a_token_or_without_asking_and_binds_its_node() {
    let (url, t, _stop) = serve().await;
    let (head, _) = upgrade(&url, &asking("not-a-token-at-all-0")).await;
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    let (head, _) = upgrade(&url, &format!("Authorization: Bearer {TOKEN}\r\n")).await;
    assert!(head.starts_with("HTTP/1.1 426"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("upgrade: gpulens-ingest.v1"),
        "{head}"
    );
    // A token bound to another node: each of its batches is a 403, as its request would be.
    let (head, mut s) = upgrade(&url, &asking(OTHER)).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let a = exchange(&mut s, &compact(1)).await.unwrap();
    assert_eq!(a["code"], 403, "{a}");
    assert!(
        a["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not bound to node"),
        "{a}"
    );
    assert_eq!(t.store.counts().await.unwrap().gpu_samples, 0);
    // A frame cut short, then the client gone: nothing stored, the collector unhurt.
    let (_, mut s) = upgrade(&url, &asking(TOKEN)).await;
    let frame = compact(1);
    s.write_all(&frame[..frame.len() / 2]).await.unwrap();
    drop(s);
    let (_, mut s) = upgrade(&url, &asking(TOKEN)).await;
    let a = exchange(&mut s, &compact(1)).await.unwrap();
    assert_eq!(a["status"], "stored", "{a}");
    assert_eq!(t.store.counts().await.unwrap().gpu_samples, 4);
}

#[tokio::test]
async fn the_agents_client_sends_on_streams_and_as_requests_alike() {
    let (url, t, _stop) = serve().await;
    for transport in [
        ingest_client::Transport::Stream,
        ingest_client::Transport::Post,
    ] {
        let client = ingest_client::Client::new(&url, TOKEN)
            .unwrap()
            .with_transport(transport);
        // Concurrent sends, each on a stream of its own (or a request each).
        let sends = (1..=6).map(|i| {
            let client = client.clone();
            let seq = i + if transport == ingest_client::Transport::Post {
                100
            } else {
                0
            };
            async move {
                client
                    .send_encoded(ingest_client::Client::encode(&batch(seq)).unwrap())
                    .await
            }
        });
        for sent in futures_util::future::join_all(sends).await {
            assert!(
                matches!(sent, Ok(ingest_client::Delivered::Stored { .. })),
                "{sent:?}"
            );
        }
        let again = client
            .send_encoded(ingest_client::Client::encode(&batch(1)).unwrap())
            .await
            .unwrap();
        assert_eq!(again, ingest_client::Delivered::Duplicate);
    }
    assert_eq!(t.store.counts().await.unwrap().gpu_samples, 48);
    // The streams' client opened a stream for each of its concurrent sends and kept them (the
    // last send reused one); the requests' client opened none.
    let metrics = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("gpulens_ingest_streams_opened_total 6\n"),
        "{metrics}"
    );
    // A refusal reaches the caller as the request's would: final, with its message.
    let other = ingest_client::Client::new(&url, OTHER).unwrap();
    let refused = other
        .send_encoded(ingest_client::Client::encode(&batch(50)).unwrap())
        .await;
    assert!(
        matches!(&refused, Err(ingest_client::SendError::Rejected { status: 403, message }) if message.contains("not bound")),
        "{refused:?}"
    );
}

/// A proxy that lets the upgrade through and then drops the connection: the batch goes as a
/// request at once, and so do the next minute's, without a stream tried for each.
#[tokio::test]
async fn a_stream_that_breaks_before_its_first_answer_sends_requests_instead() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (upgrades, posts) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let app = axum::Router::new()
        .route(
            stream::PATH,
            axum::routing::get({
                let upgrades = upgrades.clone();
                move || async move {
                    upgrades.fetch_add(1, Ordering::SeqCst);
                    axum::http::Response::builder()
                        .status(101)
                        .header("connection", "upgrade")
                        .header("upgrade", stream::UPGRADE)
                        .body(axum::body::Body::empty())
                        .unwrap()
                }
            }),
        )
        .route(
            "/api/v1/ingest",
            axum::routing::post({
                let posts = posts.clone();
                move || async move {
                    let n = posts.fetch_add(1, Ordering::SeqCst) + 1;
                    format!(r#"{{"status":"stored","seq":{n},"rows":3,"last_seq":{n}}}"#)
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = ingest_client::Client::new(&url, TOKEN).unwrap();
    for seq in 1..=3 {
        let sent = client
            .send_encoded(ingest_client::Client::encode(&batch(seq)).unwrap())
            .await;
        assert_eq!(sent.unwrap(), ingest_client::Delivered::Stored { rows: 3 });
    }
    assert_eq!(upgrades.load(Ordering::SeqCst), 1);
    assert_eq!(posts.load(Ordering::SeqCst), 3);
}

/// Frames split anywhere on the way (here: a header in two pieces, a body in many, two frames
/// in one write) are read the same.
#[tokio::test]
async fn frames_split_or_joined_on_the_way_are_read_the_same() {
    let (url, t, _stop) = serve().await;
    let (head, mut s) = upgrade(&url, &asking(TOKEN)).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let frame = compact(1);
    for piece in [&frame[..3], &frame[3..9], &frame[9..20], &frame[20..]] {
        s.write_all(piece).await.unwrap();
        s.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(answer(&mut s).await.unwrap()["status"], "stored");
    let mut two = compact(2);
    two.extend(compact(3));
    s.write_all(&two).await.unwrap();
    for _ in 0..2 {
        assert_eq!(answer(&mut s).await.unwrap()["status"], "stored");
    }
    assert_eq!(t.store.counts().await.unwrap().gpu_samples, 12);
}

/// A collector shutting down closes its open streams between frames at once: they do not hold
/// the shutdown for their idle time.
#[tokio::test]
async fn shutting_down_closes_open_streams() {
    let (url, _t, stop) = serve().await;
    let (_, mut idle) = upgrade(&url, &asking(TOKEN)).await;
    let (_, mut busy) = upgrade(&url, &asking(TOKEN)).await;
    assert_eq!(
        exchange(&mut busy, &compact(1)).await.unwrap()["status"],
        "stored"
    );
    let started = std::time::Instant::now();
    stop.send(()).unwrap();
    assert!(closed(&mut idle).await);
    assert!(closed(&mut busy).await);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
