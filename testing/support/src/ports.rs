//! Free ports for servers the tests start as child processes (PostgreSQL, Prometheus,
//! Alertmanager, `gpulens serve`), for every test binary that starts one.
//!
//! A port found by binding port 0 lies in the kernel's ephemeral range
//! (`net.ipv4.ip_local_port_range`), where any other socket bound to port 0 or connecting out
//! (tests run side by side, each with servers and clients) may take it between our check and
//! the child's bind. So the port is chosen below that range, starting from a place given by
//! the process id, which differs between tests running at the same time.

use std::sync::atomic::{AtomicU32, Ordering};

const LOWEST: u32 = 10_000;

/// A TCP port on the loopback interface that nothing is bound to now and that the kernel does
/// not hand out by itself.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral_from.saturating_sub(LOWEST);
    if span >= 1_000 {
        let start = std::process::id().wrapping_mul(7_919);
        for _ in 0..span {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = (LOWEST + start.wrapping_add(n) % span) as u16;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("binding a loopback port")
        .local_addr()
        .unwrap()
        .port()
}
