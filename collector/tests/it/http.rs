//! The HTTP surface through `router(state)` without a socket: ingest authentication, every
//! way a batch can be refused (and that nothing is stored then), replays, and the read API.

use std::io::Write;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use collector::config::{IngestConfig, TeamsConfig};
use collector::{router::router, state::AppState};
use collector_shared::agent_auth::Auth;
use serde_json::Value;
use store::Retention;
use tower::ServiceExt;

use crate::support::{self, TestStore, fleet};

const TOKEN: &str = "token-for-whole-0001";

async fn app() -> (AppState, TestStore) {
    let t = support::sqlite().await;
    let mut auth = Auth::default();
    auth.add(TOKEN, vec!["whole".into()], None);
    let ingest = IngestConfig {
        max_body_bytes: 64 * 1024,
        max_decoded_bytes: 256 * 1024,
        max_rows: 10_000,
        ..IngestConfig::default()
    };
    (
        AppState::new(
            t.store.clone(),
            auth,
            ingest,
            Retention::default(),
            TeamsConfig::default(),
        ),
        t,
    )
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

fn post(body: Vec<u8>, token: Option<&str>, encoding: Option<&str>) -> Request<Body> {
    let mut r = Request::post("/api/v1/ingest").header("content-type", "application/json");
    if let Some(t) = token {
        r = r.header("authorization", format!("Bearer {t}"));
    }
    if let Some(e) = encoding {
        r = r.header("content-encoding", e);
    }
    r.body(Body::from(body)).unwrap()
}

async fn call(state: &AppState, req: Request<Body>) -> (StatusCode, Value, Option<String>) {
    let resp = router(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, json, retry)
}

fn batch(seq: u64) -> model::wire::v1::Batch {
    let f = fleet();
    let now = collector::now_ms();
    f.batch(
        f.node_index("whole").unwrap(),
        "http",
        seq,
        &[now - 2000, now - 1000],
        1000,
    )
}

fn batch_json(seq: u64) -> Vec<u8> {
    serde_json::to_vec(&batch(seq)).unwrap()
}

/// `body` posted as MessagePack (what the agent sends), with `encoding`.
fn post_msgpack(body: Vec<u8>, encoding: &str) -> Request<Body> {
    Request::post("/api/v1/ingest")
        .header("content-type", "application/msgpack")
        .header("content-encoding", encoding)
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::from(body))
        .unwrap()
}

#[tokio::test]
async fn a_good_batch_is_stored_once() {
    let (state, t) = app().await;
    let (status, body, _) = call(
        &state,
        post(gzip(&batch_json(1)), Some(TOKEN), Some("gzip")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "stored");
    assert!(body["rows"].as_u64().unwrap() > 0);
    // The identical retry is acknowledged and not stored again.
    let (status, body, _) = call(
        &state,
        post(gzip(&batch_json(1)), Some(TOKEN), Some("gzip")),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "duplicate");
    assert_eq!(t.store.counts().await.unwrap().gpu_samples, 4);
    // Plain JSON without compression is accepted too.
    let (status, _, _) = call(&state, post(batch_json(2), Some(TOKEN), None)).await;
    assert_eq!(status, StatusCode::OK);
    // And MessagePack, snappy-compressed, stores the same rows: in the compact layout the
    // agent sends (structs as arrays) and keyed by field name, as other libraries write it.
    let packed = ingest_client::Client::encode(&batch(3)).unwrap();
    let (status, body, _) = call(&state, post_msgpack(packed, "snappy")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(t.store.counts().await.unwrap().gpu_samples, 12);
    let named = ingest_client::Client::encode_named(&batch(4)).unwrap();
    let (status, body, _) = call(&state, post_msgpack(named, "snappy")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(t.store.counts().await.unwrap().gpu_samples, 16);
    let metrics = call(
        &state,
        Request::get("/metrics").body(Body::empty()).unwrap(),
    )
    .await
    .1;
    let text = metrics.as_str().unwrap();
    assert!(
        text.contains("gpulens_ingest_batches_total{outcome=\"stored\"} 4"),
        "{text}"
    );
    assert!(
        text.contains("gpulens_ingest_batches_total{outcome=\"duplicate\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn every_bad_request_is_a_4xx_that_names_the_problem_and_stores_nothing() {
    let (state, t) = app().await;
    let good = batch_json(1);
    let latin1 = {
        let at = good.windows(8).position(|w| w == b"\"node\":\"").unwrap() + 8;
        let mut b = good.clone();
        b.insert(at, 0xE9);
        b
    };
    let mut wrong_node: Value = serde_json::from_slice(&good).unwrap();
    wrong_node["node"] = "mig".into();
    let mut bad_value: Value = serde_json::from_slice(&good).unwrap();
    bad_value["snapshots"][0]["gpus"][0]["gpu_util"] = 85.0.into();
    let mut extra_field: Value = serde_json::from_slice(&good).unwrap();
    extra_field["surprise"] = true.into();
    let bomb = gzip(&vec![b' '; 1024 * 1024]);
    // A wrong node with a broken body was a 400 (validation before authorization).
    let mut wrong_node_bad_value = wrong_node.clone();
    wrong_node_bad_value["snapshots"][0]["gpus"][0]["gpu_util"] = 85.0.into();
    // Gzip with trailing garbage or a second member was decoded and stored.
    let mut trailing = gzip(&good);
    trailing.extend_from_slice(b"garbage after the member");
    let mut two_members = gzip(&good);
    two_members.extend(gzip(b" "));
    let cases: Vec<(&str, Request<Body>, StatusCode, &str)> = vec![
        (
            "other node, invalid body",
            post(
                serde_json::to_vec(&wrong_node_bad_value).unwrap(),
                Some(TOKEN),
                None,
            ),
            StatusCode::FORBIDDEN,
            "not bound to node \"mig\"",
        ),
        (
            "gzip with trailing data",
            post(trailing, Some(TOKEN), Some("gzip")),
            StatusCode::BAD_REQUEST,
            "follow the gzip member",
        ),
        (
            "two gzip members",
            post(two_members, Some(TOKEN), Some("gzip")),
            StatusCode::BAD_REQUEST,
            "follow the gzip member",
        ),
        (
            "no Content-Type",
            Request::post("/api/v1/ingest")
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Body::from(good.clone()))
                .unwrap(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the request has none",
        ),
        (
            "no token",
            post(good.clone(), None, None),
            StatusCode::UNAUTHORIZED,
            "missing Authorization",
        ),
        (
            "wrong token",
            post(good.clone(), Some("nope-nope-nope"), None),
            StatusCode::UNAUTHORIZED,
            "unknown agent token",
        ),
        (
            "other node",
            post(serde_json::to_vec(&wrong_node).unwrap(), Some(TOKEN), None),
            StatusCode::FORBIDDEN,
            "not bound to node \"mig\"",
        ),
        (
            "not json",
            post(b"{\"version\":1,".to_vec(), Some(TOKEN), None),
            StatusCode::BAD_REQUEST,
            "not valid JSON",
        ),
        (
            "not UTF-8 (a Latin-1 byte in the node's name)",
            post(latin1, Some(TOKEN), None),
            StatusCode::BAD_REQUEST,
            "batch is not UTF-8 text: invalid utf-8 sequence of 1 bytes from index",
        ),
        (
            "bad value",
            post(serde_json::to_vec(&bad_value).unwrap(), Some(TOKEN), None),
            StatusCode::BAD_REQUEST,
            "snapshots[0].gpus[0].gpu_util is a ratio between 0 and 1, got 85",
        ),
        (
            "unknown field",
            post(serde_json::to_vec(&extra_field).unwrap(), Some(TOKEN), None),
            StatusCode::BAD_REQUEST,
            "unknown field `surprise`",
        ),
        (
            "broken gzip",
            post(b"\x1f\x8b\x08garbage".to_vec(), Some(TOKEN), Some("gzip")),
            StatusCode::BAD_REQUEST,
            "could not be decompressed",
        ),
        (
            "gzip bomb",
            post(bomb, Some(TOKEN), Some("gzip")),
            StatusCode::PAYLOAD_TOO_LARGE,
            "decompressed batch exceeds",
        ),
        (
            "too large",
            post(vec![b' '; 100 * 1024], Some(TOKEN), None),
            StatusCode::PAYLOAD_TOO_LARGE,
            "exceeds 65536 bytes",
        ),
        (
            "zstd",
            post(good.clone(), Some(TOKEN), Some("zstd")),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "not supported",
        ),
        (
            "JSON sent as MessagePack",
            post_msgpack(good.clone(), "identity"),
            StatusCode::BAD_REQUEST,
            "batch is not valid MessagePack for protocol v1",
        ),
        (
            "snappy claiming 1 GiB",
            post_msgpack(b"\x80\x80\x80\x80\x04garbage".to_vec(), "snappy"),
            StatusCode::PAYLOAD_TOO_LARGE,
            "decompresses to 1073741824 bytes",
        ),
        (
            "broken snappy",
            post_msgpack(b"\x20\xff\xff".to_vec(), "snappy"),
            StatusCode::BAD_REQUEST,
            "snappy body could not be decompressed",
        ),
        (
            "text/plain",
            Request::post("/api/v1/ingest")
                .header("content-type", "text/plain")
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Body::from(good.clone()))
                .unwrap(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json or application/msgpack, got \"text/plain\"",
        ),
    ];
    for (name, req, want, message) in cases {
        let (status, body, _) = call(&state, req).await;
        assert_eq!(status, want, "{name}: {body}");
        let msg = body["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no JSON error in {body}"));
        assert!(
            msg.contains(message),
            "{name}: {msg:?} should mention {message:?}"
        );
        assert!(body["error"]["code"].is_string(), "{name}");
    }
    assert_eq!(
        t.store.counts().await.unwrap(),
        store::TableCounts::default()
    );
    let metrics = call(
        &state,
        Request::get("/metrics").body(Body::empty()).unwrap(),
    )
    .await
    .1;
    assert!(
        metrics
            .as_str()
            .unwrap()
            .contains("gpulens_ingest_rejected_batches_total{reason=\"unauthenticated\"} 2")
    );
}

#[tokio::test]
async fn the_read_api_answers_and_explains_mistakes() {
    let (state, _t) = app().await;
    assert_eq!(
        call(
            &state,
            post(gzip(&batch_json(1)), Some(TOKEN), Some("gzip"))
        )
        .await
        .0,
        StatusCode::OK
    );
    let (status, nodes, _) = call(
        &state,
        Request::get("/api/v1/nodes").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(nodes["nodes"][0]["node"], "whole");
    assert_eq!(nodes["nodes"][0]["status"], "reporting");
    let (_, gpus, _) = call(
        &state,
        Request::get("/api/v1/gpus?node=whole")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    let uuid = gpus["gpus"][0]["uuid"].as_str().unwrap().to_owned();
    // The view keeps every field the stored record served before it had a view of its own.
    for (list, url) in [("gpus", "/api/v1/gpus"), ("tenants", "/api/v1/tenants")] {
        let (_, body, _) = call(&state, Request::get(url).body(Body::empty()).unwrap()).await;
        let first = &body[list][0];
        assert!(
            first["first_seen_ms"].is_i64() && first["last_seen_ms"].is_i64(),
            "{url}: {first}"
        );
    }
    let (status, series, _) = call(
        &state,
        Request::get(format!(
            "/api/v1/series?metric=gpu_util&entity=gpu:{uuid}&from=now-10s&step=1s"
        ))
        .body(Body::empty())
        .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{series}");
    assert_eq!(series["resolution"], "raw");
    assert!(
        series["points"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p[1].is_number())
    );
    for (url, message) in [
        ("/api/v1/series?entity=fleet", "`metric` is required"),
        (
            "/api/v1/series?metric=gpu_util&entity=rack:1",
            "is not gpu:UUID",
        ),
        (
            "/api/v1/series?metric=gpu_util&entity=fleet&from=yesterday",
            "is not RFC 3339",
        ),
        (
            "/api/v1/series?metric=gpu_util&entity=fleet&from=now-7d&step=1s",
            "raise `step`",
        ),
        (
            "/api/v1/series?metric=gpu_util&entity=fleet&agg=median",
            "agg must be",
        ),
        (
            "/api/v1/series?metric=gpu_util&entity=fleet&bogus=1",
            "unknown field",
        ),
        // An i64::MAX `to` made the point loop overflow and allocate until the
        // process died; saturating steps slipped past the point cap.
        (
            "/api/v1/series?metric=gpu_util&entity=fleet&to=9223372036854775807",
            "outside 1970-01-01 to 9999-12-31",
        ),
        (
            "/api/v1/series?metric=gpu_util&entity=fleet&from=0&to=253402300799999&step=1h",
            "raise `step`",
        ),
        (
            "/api/v1/series?metric=gpu_util&entity=fleet&step=inf",
            "is not a duration",
        ),
        (
            "/api/v1/series?metric=gpu_util&entity=fleet&step=1e300",
            "is not a duration",
        ),
        (
            "/api/v1/series?metric=gpu_util&entity=fleet&step=18446744073709551616",
            "is not a duration",
        ),
    ] {
        let (status, body, _) = call(&state, Request::get(url).body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {body}");
        let text = body.to_string();
        assert!(text.contains(message), "{url}: {text}");
    }
    let (status, body, _) = call(
        &state,
        Request::get("/api/v1/nowhere").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "not_found");
    // A browser mistyping a dashboard path gets a page; a client without HTML, or any path
    // under /api/, the JSON error.
    let asked = |uri: &str, accept: &str| {
        Request::get(uri)
            .header("accept", accept)
            .body(Body::empty())
            .unwrap()
    };
    let html = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8";
    let (status, body, _) = call(&state, asked("/nowhere/ml%3Cb%3E", html)).await;
    let page = body.as_str().unwrap_or_default();
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert!(
        page.contains("Nothing is served at /nowhere/ml%3Cb%3E."),
        "{page}"
    );
    let (status, body, _) = call(&state, asked(&format!("/{}", "x".repeat(5000)), html)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body.as_str()
            .unwrap()
            .contains(&format!("/{}….", "x".repeat(199)))
    );
    for (uri, accept) in [("/nowhere/x", "*/*"), ("/api/v1/nowhere", html)] {
        let (status, body, _) = call(&state, asked(uri, accept)).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["error"]["code"], "not_found", "{uri}");
    }
    // Every 4xx has the JSON error body: 405, query mistakes on every endpoint, and
    // an approval is refused for its token before its body is read.
    for (req, want) in [
        (
            Request::delete("/api/v1/nodes")
                .body(Body::empty())
                .unwrap(),
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            Request::get("/api/v1/label-actions?limit=x")
                .body(Body::empty())
                .unwrap(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Request::get("/api/v1/label-actions?state=approve")
                .body(Body::empty())
                .unwrap(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Request::get("/api/v1/label-actions?state=")
                .body(Body::empty())
                .unwrap(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Request::get("/api/v1/alerts?bogus=1")
                .body(Body::empty())
                .unwrap(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Request::get("/api/v1/reports?limit=-1")
                .body(Body::empty())
                .unwrap(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Request::post("/api/v1/label-actions/1/approve")
                .header("authorization", "Bearer not-an-operator")
                .body(Body::from("{not json"))
                .unwrap(),
            // An unknown token is no credential (the body is never read).
            StatusCode::UNAUTHORIZED,
        ),
        (
            Request::post("/api/v1/label-actions/x/approve")
                .body(Body::empty())
                .unwrap(),
            StatusCode::UNAUTHORIZED,
        ),
    ] {
        let what = format!("{} {}", req.method(), req.uri());
        let (status, body, _) = call(&state, req).await;
        assert_eq!(status, want, "{what}: {body}");
        assert!(
            body["error"]["code"].is_string(),
            "{what}: no JSON error in {body}"
        );
    }
    // A series of something never seen is a 404 naming it, not a run of nulls.
    for entity in [
        "node:nope",
        "gpu:GPU-nope",
        "cluster:nope",
        "tenant:pod/x/y",
    ] {
        let (status, body, _) = call(
            &state,
            Request::get(format!("/api/v1/series?metric=gpu_util&entity={entity}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{entity}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(entity));
    }
    let (status, html, _) = call(&state, Request::get("/").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.as_str().unwrap().contains("Fleet overview"));
    assert_eq!(
        call(
            &state,
            Request::get("/healthz").body(Body::empty()).unwrap()
        )
        .await
        .0,
        StatusCode::OK
    );
    assert_eq!(
        call(&state, Request::get("/readyz").body(Body::empty()).unwrap())
            .await
            .0,
        StatusCode::OK
    );
}

/// The OpenAPI document and the route table agree: every documented path and method is a
/// declared route, every declared route of the API (and the probes, `/metrics` and `/`) is
/// documented with its methods, and each answers.
#[tokio::test]
async fn the_openapi_document_and_the_routes_agree_and_each_route_answers() {
    let (state, _t) = app().await;
    let (status, doc, _) = call(
        &state,
        Request::get("/api/v1/openapi.json")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented = std::collections::BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    let declared: std::collections::BTreeSet<(String, String)> = collector::router::routes(&state)
        .rules()
        .iter()
        .filter(|r| r.documented)
        .map(|r| (r.method.to_owned(), r.path.to_owned()))
        .collect();
    assert_eq!(
        documented, declared,
        "openapi.json and the declared routes differ (left: documented, right: declared)"
    );
    for (method, route) in &declared {
        let uri = route
            .replace("{node}", "n1")
            .replace("{id}", "1")
            .replace("{week}", "2026-W01");
        let req = Request::builder()
            .method(method.as_str())
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        let (status, _, _) = call(&state, req).await;
        assert!(
            status != StatusCode::NOT_FOUND || route.contains('{'),
            "{method} {route} is documented but not served"
        );
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {route}");
    }
}

/// Mutation fuzzing of the ingest endpoint: thousands of damaged bodies (flipped bytes,
/// truncations, duplicated and spliced fragments, in plain JSON and inside gzip). Every answer
/// is a 2xx or a 4xx with a JSON error; never a 5xx, never a panic. Stored rows only ever come
/// from batches that were answered 2xx.
#[tokio::test]
async fn damaged_batches_never_cause_a_server_error() {
    let (state, t) = app().await;
    let good = batch_json(1);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut stored_rows = 0u64;
    let mut seq = 1u64;
    for i in 0..3000 {
        let mut body = good.clone();
        match next() % 5 {
            0 => {
                for _ in 0..=(next() % 8) {
                    let at = next() as usize % body.len();
                    body[at] = b"{}[]\",:0-.eE\\ \x00\xff"[next() as usize % 16];
                }
            }
            1 => body.truncate(next() as usize % body.len()),
            2 => {
                let a = next() as usize % body.len();
                let b = (a + next() as usize % 64).min(body.len());
                let piece = body[a..b].to_vec();
                let at = next() as usize % body.len();
                body.splice(at..at, piece);
            }
            3 => {
                // A valid batch with a fresh sequence number: must be stored.
                seq += 1;
                body = batch_json(seq);
            }
            _ => {
                let at = next() as usize % body.len();
                body.insert(at, b'x');
            }
        }
        let gzipped = i % 2 == 0;
        let payload = if gzipped {
            let mut z = gzip(&body);
            if next() % 3 == 0 && z.len() > 20 {
                let at = 10 + next() as usize % (z.len() - 10);
                z[at] ^= 0x5a;
            }
            z
        } else {
            body
        };
        let (status, reply, _) = call(
            &state,
            post(payload, Some(TOKEN), gzipped.then_some("gzip")),
        )
        .await;
        assert!(
            status.is_success() || status.is_client_error(),
            "case {i}: {status} {reply}"
        );
        if status.is_client_error() {
            assert!(reply["error"]["message"].is_string(), "case {i}: {reply}");
        } else {
            stored_rows += reply["rows"].as_u64().unwrap_or(0);
        }
    }
    let c = t.store.counts().await.unwrap();
    let total =
        (c.gpu_samples + c.mig_samples + c.process_samples + c.allocation_samples + c.gpu_events)
            as u64;
    assert_eq!(
        total, stored_rows,
        "rows in the database come only from acknowledged batches"
    );
    assert!(stored_rows > 0);
}

/// Remote-write bodies over 2 MiB got axum's text 413 or a reset, not the
/// configured limit; now the limit is read from `[ingest] max_body_bytes` and answered as the
/// API's JSON error, after the token is checked.
#[tokio::test]
async fn remote_write_over_the_body_limit_is_a_json_413_after_authentication() {
    let (state, _t) = app().await;
    let big = vec![0u8; 3 * 1024 * 1024];
    let req = |token: Option<&str>| {
        let mut r = Request::post("/api/v1/write")
            .header("content-type", "application/x-protobuf")
            .header("content-encoding", "snappy");
        if let Some(t) = token {
            r = r.header("authorization", format!("Bearer {t}"));
        }
        r.body(Body::from(big.clone())).unwrap()
    };
    let (status, body, _) = call(&state, req(None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, body, _) = call(&state, req(Some(TOKEN))).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let error = body["error"]["message"].as_str().unwrap_or_default();
    assert!(error.contains("65536 bytes"), "{body}");
}

/// A collector older than MessagePack batches: 415 for anything but JSON, as it answered.
#[tokio::test]
async fn a_collector_that_refuses_messagepack_gets_json_from_then_on() {
    use std::sync::{Arc, Mutex};
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let app = axum::Router::new().route(
        "/api/v1/ingest",
        axum::routing::post({
            let seen = seen.clone();
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
                let ct = headers["content-type"].to_str().unwrap().to_owned();
                seen.lock().unwrap().push(ct.clone());
                if ct != "application/json" {
                    let error = r#"{"error":{"code":"unsupported_media_type","message":"Content-Type must be application/json"}}"#;
                    return (StatusCode::UNSUPPORTED_MEDIA_TYPE, error.to_owned());
                }
                assert_eq!(headers["content-encoding"], "gzip");
                let mut json = Vec::new();
                std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut json)
                    .unwrap();
                let b: model::wire::v1::Batch = serde_json::from_slice(&json).unwrap();
                (StatusCode::OK, format!(r#"{{"status":"stored","seq":{0},"rows":1,"last_seq":{0}}}"#, b.seq))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = ingest_client::Client::new(&url, TOKEN).unwrap();
    for seq in [1, 2] {
        let body = ingest_client::Client::encode(&batch(seq)).unwrap();
        let sent = client.clone().send_encoded(body).await.unwrap();
        assert_eq!(sent, ingest_client::Delivered::Stored { rows: 1 });
    }
    // The first batch was tried as MessagePack once; the second went as JSON straight away.
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "application/msgpack",
            "application/json",
            "application/json"
        ]
    );
}
