//! The agent's /metrics port faced 4,200 idle sockets and lost batches ("Too many
//! open files"). Here `gpulens-agent run` ships to the ingest stand-in while 5,000 idle
//! sockets and 50 trickling ones hold its listener: /healthz keeps answering, no batch is
//! lost, and every slot arrives.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use agent::bench::standin::Receiver;

use crate::delivery::{free_port, wait_until};
use crate::outages::{agent, distinct_ts, lost, metrics, work_dir};

fn healthz_within(port: u16, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if crate::metrics::get(port, "/healthz", "text/plain").is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn heavy_thousands_of_idle_and_trickling_sockets_cost_no_batch_and_no_probe() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let rx = rt.block_on(Receiver::start(0)).unwrap();
    let work = work_dir("sockets");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let a = agent(&rx.url(), &work, "1s", &["--listen", &listen]);
    wait_until("the agent's /healthz", Duration::from_secs(30), || {
        crate::metrics::get(port, "/healthz", "text/plain").is_some()
    });
    let started = Instant::now();

    let addr: SocketAddr = listen.parse().unwrap();
    let mut idle = Vec::new();
    let mut trickling = Vec::new();
    for i in 0..5_050 {
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            if i % 101 == 0 {
                trickling.push(s);
            } else {
                idle.push(s);
            }
        }
    }
    assert!(idle.len() > 4_000, "only {} sockets opened", idle.len());
    // Ten seconds under siege: trickled header bytes every second, a probe every second.
    let mut probes = 0;
    for _ in 0..10 {
        for s in &mut trickling {
            let _ = s.write_all(b"G");
        }
        assert!(
            healthz_within(port, Duration::from_secs(2)),
            "/healthz did not answer within 2 s with {} idle sockets open",
            idle.len()
        );
        probes += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    // And again from fresh sockets, as a scanner reconnecting would.
    for _ in 0..2_000 {
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            idle.push(s);
        }
    }
    assert!(healthz_within(port, Duration::from_secs(2)));
    drop(idle);
    drop(trickling);

    let text = metrics(port).expect("/metrics answers after the siege");
    assert_eq!(lost(&text), 0, "batches lost:\n{text}");
    let secs = started.elapsed().as_secs() as i64;
    wait_until("the batches of the siege", Duration::from_secs(20), || {
        distinct_ts(&rx.arrivals()).len() as i64 >= secs
    });
    let ts = distinct_ts(&rx.arrivals());
    for w in ts.windows(2) {
        assert!(
            w[1] - w[0] <= 1_000,
            "a slot is missing between {} and {}",
            w[0],
            w[1]
        );
    }
    assert_eq!(probes, 10);
    drop(a);
    std::fs::remove_dir_all(&work).unwrap();
}
