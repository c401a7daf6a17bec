//! The listener's bounds against real sockets on the loopback.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// Answers `ok` to any request, after `/slow` sleeps past every test's request timeout; counts
/// the connections it turned away.
#[derive(Default)]
struct Echo {
    refused: Arc<AtomicUsize>,
}

impl Service for Echo {
    type Connection = SocketAddr;

    fn connect(&self, peer: SocketAddr, _: Option<&CertificateDer<'_>>) -> SocketAddr {
        peer
    }

    fn call(
        &self,
        peer: &SocketAddr,
        request: Request<Incoming>,
    ) -> impl Future<Output = Response<Body>> + Send + 'static {
        let (slow, loopback) = (request.uri().path() == "/slow", peer.ip().is_loopback());
        async move {
            if slow {
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            Response::new(Body::from(format!("ok loopback={loopback}")))
        }
    }

    fn timed_out(&self, limit: Duration) -> Response<Body> {
        let mut r = Response::new(Body::from(format!("late after {limit:?}")));
        *r.status_mut() = axum::http::StatusCode::REQUEST_TIMEOUT;
        r
    }

    fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }
}

fn limits(max_connections: usize) -> Limits {
    Limits {
        header_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_millis(300),
        max_connections,
        shutdown_grace: Duration::from_secs(1),
    }
}

/// Starts a listener; returns its address, the refusal count and the shutdown switch.
async fn start(
    limits: Limits,
    at_capacity: AtCapacity,
) -> (
    SocketAddr,
    Arc<AtomicUsize>,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let echo = Echo::default();
    let refused = echo.refused.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let options = Options {
        limits,
        at_capacity,
        tls: None,
        name: "test listener",
    };
    let task = tokio::spawn(serve(socket, echo, options, async {
        let _ = stopped.await;
    }));
    (addr, refused, stop, task)
}

/// Sends `GET path` on `s` and reads the answer until the server closes or 2 s pass.
async fn get(s: &mut TcpStream, path: &str) -> String {
    let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return String::new();
    }
    read_all(s).await
}

async fn read_all(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Opens `n` connections and waits until the listener has taken them all.
async fn idle(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    out
}

#[tokio::test]
async fn answers_and_tells_the_service_who_asks() {
    let (addr, _, _stop, _) = start(limits(4), AtCapacity::CloseLongestWaiting).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let answer = get(&mut s, "/").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("ok loopback=true"), "{answer}");
}

#[tokio::test]
async fn a_request_past_its_limit_gets_the_services_late_answer() {
    let (addr, _, _stop, _) = start(limits(4), AtCapacity::CloseLongestWaiting).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let answer = get(&mut s, "/slow").await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.ends_with("late after 300ms"), "{answer}");
}

#[tokio::test]
async fn at_the_cap_the_longest_waiting_connection_makes_room() {
    let (addr, refused, _stop, _) = start(limits(3), AtCapacity::CloseLongestWaiting).await;
    let mut waiting = idle(addr, 3).await;
    let mut late = TcpStream::connect(addr).await.unwrap();
    assert!(get(&mut late, "/").await.starts_with("HTTP/1.1 200"));
    // The first idle socket was closed for it; the others are still served.
    assert_eq!(read_all(&mut waiting[0]).await, "", "closed unanswered");
    assert!(get(&mut waiting[2], "/").await.starts_with("HTTP/1.1 200"));
    assert_eq!(refused.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn at_the_cap_busy_connections_are_never_closed() {
    let (addr, refused, _stop, _) = start(limits(2), AtCapacity::CloseLongestWaiting).await;
    let mut busy = idle(addr, 2).await;
    for s in &mut busy {
        s.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut late = TcpStream::connect(addr).await.unwrap();
    assert_eq!(get(&mut late, "/").await, "", "turned away");
    assert_eq!(refused.load(Ordering::Relaxed), 1);
    // Both busy ones get their (late) answers.
    for s in &mut busy {
        let mut head = [0u8; 12];
        s.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 408");
    }
}

#[tokio::test]
async fn at_the_cap_the_answer_policy_sends_its_answer_and_closes() {
    let answer: Arc<[u8]> = Arc::from(
        &b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"[..],
    );
    let (addr, refused, _stop, _) = start(limits(2), AtCapacity::Answer(answer)).await;
    let mut waiting = idle(addr, 2).await;
    let mut late = TcpStream::connect(addr).await.unwrap();
    let got = get(&mut late, "/").await;
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(got.contains("retry-after: 1"), "{got}");
    assert_eq!(refused.load(Ordering::Relaxed), 1);
    // The waiting connections were left alone.
    assert!(get(&mut waiting[0], "/").await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn a_connection_that_sends_no_headers_is_closed_after_the_header_timeout() {
    let mut l = limits(4);
    l.header_timeout = Duration::from_millis(200);
    let (addr, _, _stop, _) = start(l, AtCapacity::CloseLongestWaiting).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HT").await.unwrap();
    let started = std::time::Instant::now();
    let got = read_all(&mut s).await;
    assert!(started.elapsed() < Duration::from_millis(1500), "closed");
    assert!(!got.contains("200 OK"), "{got}");
}

#[tokio::test]
async fn shutdown_lets_an_answer_finish_then_stops() {
    let mut l = limits(4);
    l.request_timeout = Duration::from_millis(500);
    let (addr, _, stop, task) = start(l, AtCapacity::CloseLongestWaiting).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.send(()).unwrap();
    let got = read_all(&mut s).await;
    assert!(
        got.starts_with("HTTP/1.1 408"),
        "the request in flight was answered: {got}"
    );
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("the listener stops")
        .unwrap();
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no longer listening"
    );
}

#[tokio::test]
async fn a_finished_connection_leaves_its_place() {
    let connections = Arc::new(Connections::default());
    let a = connections.make_room(1, false).expect("room for one");
    assert!(connections.make_room(1, false).is_none(), "full");
    assert!(
        connections.make_room(1, true).is_none(),
        "nothing to close: its task has not started"
    );
    drop(a);
    assert_eq!(connections.len(), 0);
    assert!(connections.make_room(1, false).is_some());
}
