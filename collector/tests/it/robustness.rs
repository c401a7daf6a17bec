//! HTTP robustness: thousands of mutated batches and query strings thrown at a
//! running collector (real socket, the default listener limits, the storage tasks running).
//! Invariants: no answer is a 5xx, the collector keeps answering, a refused batch stores
//! nothing, every refusal is the API's JSON error, and the background tasks keep advancing.

use std::time::Duration;

use collector::config::{IngestConfig, TeamsConfig};
use collector::state::AppState;
use collector_shared::agent_auth::Auth;
use model::wire::v1::Format;
use store::{Retention, TableCounts};

use crate::support;

const TOKEN: &str = "robust-token-0001";

/// A small deterministic generator (xorshift64*), so a failure replays from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Values that break naive parsers and range checks.
const NASTY: &[&str] = &[
    "-1",
    "1e309",
    "-1e309",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967296",
    "2147483648",
    "NaN",
    "null",
    "\"\"",
    "\"\\u0000\\u001b[31m\"",
    "\"gpu-a?x=1\"",
    "\"../../etc/passwd\"",
    "[]",
    "{}",
    "true",
    "0.5",
    "1.0000001",
];

/// `value` in a wire encoding, uncompressed.
fn encoded(format: Format, value: &impl serde::Serialize) -> Vec<u8> {
    match format {
        Format::Json => serde_json::to_vec(value).unwrap(),
        Format::MessagePack => rmp_serde::to_vec_named(value).unwrap(),
    }
}

/// What a mutant in a wire encoding still holds, if it is a document at all.
fn decoded(format: Format, bytes: &[u8]) -> Option<serde_json::Value> {
    match format {
        Format::Json => serde_json::from_slice(bytes).ok(),
        Format::MessagePack => rmp_serde::from_slice(bytes).ok(),
    }
}

fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut b = base.to_vec();
    for _ in 0..1 + rng.below(3) {
        if b.is_empty() {
            break;
        }
        let at = rng.below(b.len());
        match rng.below(6) {
            // Replace a number or string value after a colon with a nasty one.
            0 | 1 => {
                if let Some(colon) = b[at..].iter().position(|&c| c == b':') {
                    let start = at + colon + 1;
                    let end = b[start..]
                        .iter()
                        .position(|&c| c == b',' || c == b'}' || c == b']')
                        .map_or(b.len(), |e| start + e);
                    let v = NASTY[rng.below(NASTY.len())].as_bytes();
                    b.splice(start..end, v.iter().copied());
                }
            }
            2 => b[at] = rng.next() as u8,
            3 => {
                let end = (at + 1 + rng.below(16)).min(b.len());
                b.drain(at..end);
            }
            4 => {
                // Duplicate a span (duplicate rows, keys, brackets).
                let end = (at + 1 + rng.below(200)).min(b.len());
                let span = b[at..end].to_vec();
                b.splice(at..at, span);
            }
            _ => b.insert(at, b"{}[],:\"0"[rng.below(8)]),
        }
    }
    b
}

fn raw(c: &TableCounts) -> [i64; 5] {
    [
        c.gpu_samples,
        c.mig_samples,
        c.process_samples,
        c.allocation_samples,
        c.gpu_events,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_batches_and_queries_never_get_a_5xx_nor_store_anything_when_refused() {
    let t = support::sqlite().await;
    let fleet = support::fleet();
    let mut auth = Auth::default();
    auth.add(
        TOKEN,
        fleet.nodes.iter().map(|n| n.spec.name.clone()).collect(),
        None,
    );
    let ingest = IngestConfig {
        max_body_bytes: 256 * 1024,
        max_decoded_bytes: 1024 * 1024,
        max_rows: 20_000,
        ..IngestConfig::default()
    };
    let state = AppState::new(
        t.store.clone(),
        auth,
        ingest,
        Retention::default(),
        TeamsConfig::default(),
    );
    let mut upkeep = state.upkeep().tasks(Duration::from_millis(300));
    upkeep.push(collector::remote_write::task(
        state.remote_write_state(),
        Duration::from_millis(300),
    ));
    let runner = collector_shared::tasks::Runner::start(&state.shared.tasks, upkeep);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(collector::server::serve(listener, state.clone(), async {
        let _ = stopped.await;
    }));
    let http = ingest_client::http().build().unwrap();

    let now = collector::now_ms();
    // Older than the rollup grace, so the storage tasks roll up what is stored while it runs.
    let instants: Vec<i64> = (0..4).map(|i| now - 150_000 + i * 15_000).collect();
    // Every node's batch in both encodings: JSON seeds for even requests, MessagePack for odd.
    let batches: Vec<_> = (0..fleet.nodes.len())
        .map(|n| fleet.batch(n, "robust", 1, &instants, 15_000))
        .collect();
    let seeds = Format::ALL.map(|f| batches.iter().map(|b| encoded(f, b)).collect::<Vec<_>>());

    let seed = 0x9E37_79B9_7F4A_7C15;
    let mut rng = Rng(seed);
    let mut counts = t.store.counts().await.unwrap();
    let (mut stored, mut refused) = (0, 0);
    for i in 0..1500u64 {
        let format = Format::ALL[(i % 2) as usize];
        let seeds = &seeds[(i % 2) as usize];
        let pick = rng.below(seeds.len());
        let mut body = mutate(&mut rng, &seeds[pick]);
        // Most mutants keep a fresh sequence so a valid one is stored, not a duplicate.
        if let Some(mut v) = decoded(format, &body)
            && v.get("seq").is_some_and(|s| s.is_u64())
        {
            v["seq"] = (i + 2).into();
            body = encoded(format, &v);
        }
        let resp = http
            .post(format!("{base_url}/api/v1/ingest"))
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", format.content_type())
            .body(body.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {i} (seed {seed:#x}) got no answer: {e}"));
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert!(
            !status.is_server_error(),
            "request {i} (seed {seed:#x}): {status} {text}\nbody: {}",
            String::from_utf8_lossy(&body)
        );
        let after = t.store.counts().await.unwrap();
        if status.is_client_error() {
            refused += 1;
            assert_eq!(
                raw(&after),
                raw(&counts),
                "request {i} (seed {seed:#x}) was refused ({status} {text}) but stored rows"
            );
            let v: serde_json::Value = serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("refusal {i} is not JSON: {text}"));
            assert!(v["error"]["message"].is_string(), "{text}");
        } else {
            stored += 1;
        }
        counts = after;
    }
    eprintln!("ingest: {stored} mutants stored, {refused} refused");
    assert!(
        refused > 500 && stored > 10,
        "{stored} stored, {refused} refused"
    );

    // Query strings: every read endpoint with mutated and hostile parameters.
    let paths = [
        "/api/v1/series",
        "/api/v1/funnel",
        "/api/v1/findings",
        "/api/v1/recommendations",
        "/api/v1/gpus",
        "/api/v1/alerts",
        "/api/v1/reports",
        "/api/v1/label-actions",
    ];
    let keys = [
        "metric", "entity", "from", "to", "step", "agg", "node", "team", "kind", "severity",
        "limit", "state", "format", "timezone", "week",
    ];
    let values = [
        "gpu_util",
        "fleet",
        "now-1h",
        "now",
        "9223372036854775807",
        "-9223372036854775808",
        "inf",
        "1e300",
        "NaN",
        "%00",
        "%ff%fe",
        "now-99999999999y",
        "2026-13-45T99:99:99Z",
        "node:gpu-a%3Fx%3D1",
        "tenant:%2e%2e%2f",
        "0",
        "",
        "%E2%80%AE",
        "1m",
        "p95",
    ];
    for i in 0..1500 {
        let path = paths[rng.below(paths.len())];
        let mut q = String::new();
        for _ in 0..rng.below(6) {
            if !q.is_empty() {
                q.push('&');
            }
            q.push_str(keys[rng.below(keys.len())]);
            q.push('=');
            q.push_str(values[rng.below(values.len())]);
        }
        let url = format!("{base_url}{path}?{q}");
        let resp = http
            .get(&url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("query {i} {url} got no answer: {e}"));
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert!(!status.is_server_error(), "{url}: {status} {text}");
        if status.is_client_error() {
            let v: serde_json::Value = serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("{url}: refusal is not JSON: {text}"));
            assert!(v["error"]["message"].is_string(), "{url}: {text}");
        }
    }

    // Still up, and the background tasks kept advancing through all of it.
    let healthz = http
        .get(format!("{base_url}/healthz"))
        .send()
        .await
        .unwrap();
    assert!(healthz.status().is_success());
    let before = state.shared.tasks.snapshot();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let after = state.shared.tasks.snapshot();
    for (b, a) in before.iter().zip(&after) {
        assert!(a.runs > b.runs, "task {} stalled: {a:?}", a.name);
        assert!(a.healthy(), "task {} failing: {a:?}", a.name);
    }
    let _ = stop.send(());
    server.await.unwrap().unwrap();
    runner.stop().await;
}
