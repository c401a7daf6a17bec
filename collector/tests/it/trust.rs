//! Over real sockets against a collector serving with sign-in (`server::serve_with`
//! on 127.0.0.1): sessions cannot be forged from the configuration, survive a restart and end
//! with `rotate-session-key`; anonymous slow bodies cannot starve readers or agents; wrong
//! tokens never lock out a right one; `next` cannot leave the collector; a sign-in posted from
//! another site is refused; a team-scoped caller reads no other team's names on `/metrics`
//! nor a tenant key shared with another cluster's team; remote-written hosts are capped; one
//! node's slow batches cannot hold every agent slot.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use collector::config::{Config, TeamsConfig};
use collector::state::AppState;
use sha2::Digest;

use crate::support;

const VIEWER: &str = "viewer-token-0000000001";
const SCOPED: &str = "scoped-token-0000000002";
const OPERATOR: &str = "operator-token-000000003";
const AGENT: &str = "agent-token-0000000004";
const BOB: &str = "bob-token-00000000000005";
const VICTIM: &str = "victim-token-000000000006";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn sha256_hex(s: &str) -> String {
    hex(&sha2::Sha256::digest(s.as_bytes()))
}

/// The documented "safe to share" form: every token as its SHA-256, no session_key.
fn config() -> Config {
    let mut c = Config::parse(&format!(
        r#"
[access]
[[access.tokens]]
name = "grafana"
sha256 = "{viewer}"
[[access.tokens]]
name = "ml-bot"
sha256 = "{scoped}"
teams = ["ml"]
[[access.tokens]]
name = "bob-bot"
sha256 = "{bob}"
teams = ["bob"]
[[access.tokens]]
name = "victim-bot"
sha256 = "{victim}"
teams = ["victim"]
[[access.tokens]]
name = "ops"
role = "operator"
sha256 = "{operator}"
[metrics]
tenant_series = true
[[agents]]
token = "{agent}"
nodes = ["*"]
"#,
        agent = AGENT,
        viewer = sha256_hex(VIEWER),
        scoped = sha256_hex(SCOPED),
        operator = sha256_hex(OPERATOR),
        bob = sha256_hex(BOB),
        victim = sha256_hex(VICTIM),
    ))
    .unwrap();
    c.server.max_in_flight = 64;
    c
}

struct Served {
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// A collector over `store` with `config`, on a real socket, its session key from the store.
async fn serve(store: &store::Store, config: &Config) -> (Served, AppState) {
    let auth = collector_shared::agent_auth::Auth::from_config(
        &config.agents,
        config.token_review.as_ref(),
    )
    .unwrap();
    let state = AppState::new(
        store.clone(),
        auth,
        Default::default(),
        Default::default(),
        TeamsConfig::default(),
    )
    .with_access(config.access.clone())
    .unwrap()
    .with_fleet_metrics(&config.metrics)
    .with_stored_session_key()
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let limits = config.server.clone();
    let s = state.clone();
    let task = tokio::spawn(async move {
        collector::server::serve_with(listener, s, limits, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    (Served { addr, stop, task }, state)
}

/// One request on a fresh connection; status, headers (lower-case names) and body.
fn request(addr: SocketAddr, head: &str, body: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "{head}\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = Vec::new();
    let _ = s.read_to_end(&mut r);
    let r = String::from_utf8_lossy(&r).into_owned();
    let (head, body) = r.split_once("\r\n\r\n").unwrap_or((&r, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_lowercase(), body.to_owned())
}

fn get(addr: SocketAddr, path: &str, extra: &str) -> (u16, String, String) {
    let head = if extra.is_empty() {
        format!("GET {path} HTTP/1.1")
    } else {
        format!("GET {path} HTTP/1.1\r\n{extra}")
    };
    request(addr, &head, "")
}

fn bearer(t: &str) -> String {
    format!("Authorization: Bearer {t}")
}

/// Signs in with `token` on the form; the session cookie.
fn sign_in(addr: SocketAddr, token: &str) -> String {
    let (code, head, body) = request(
        addr,
        "POST /login HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded",
        &format!("token={token}&next=/recommendations"),
    );
    assert_eq!(code, 303, "{head}\n{body}");
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: gpulens_session="))
        .expect("a session cookie");
    cookie.split(';').next().unwrap().to_owned()
}

/// A cookie an attacker could make if the session key were derived from what the
/// configuration holds (token names and hashes), a payload naming the operator token.
fn forged_from_config(payload: &str) -> String {
    let mut h = sha2::Sha256::new();
    h.update(b"gpulens sessions v2");
    for (name, token) in [("grafana", VIEWER), ("ml-bot", SCOPED), ("ops", OPERATOR)] {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(sha2::Sha256::digest(token.as_bytes()));
    }
    let key: [u8; 32] = h.finalize().into();
    let payload = hex(payload.as_bytes());
    let mac = collector_shared::signing::hmac_sha256(&key, payload.as_bytes());
    format!("{payload}.{}", hex(&mac))
}

fn cookie(c: &str) -> String {
    format!("Cookie: gpulens_session={c}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_cannot_be_forged_from_the_config_survive_restarts_and_rotate() {
    let t = support::sqlite().await;
    let config = config();
    let (served, _) = serve(&t.store, &config).await;
    let addr = served.addr;
    let far = model::time::now_ms() + 3_600_000;
    for payload in [
        format!(r#"{{"k":"token","n":"ops","e":{far}}}"#),
        format!(r#"{{"k":"token","n":"ops","b":"00","e":{far}}}"#),
    ] {
        let (code, head) = recommendations_with(addr, forged_from_config(&payload)).await;
        assert_eq!(code, 303, "a forged cookie is not a session: {head}");
        assert!(head.contains("location: /login"), "{head}");
    }
    // A real sign-in works, and is still good after a restart (the key is in the database).
    let real = tokio::task::spawn_blocking(move || sign_in(addr, OPERATOR))
        .await
        .unwrap();
    assert_eq!(recommendations_with(addr, real.clone()).await.0, 200);
    served.stop().await;
    let (served, _) = serve(&t.store, &config).await;
    let code = recommendations_with(served.addr, real.clone()).await.0;
    assert_eq!(code, 200, "sessions survive a restart");
    served.stop().await;
    // Rotation (what `gpulens rotate-session-key` does) ends it at the next start.
    t.store
        .replace_secret(
            collector::state::SESSION_KEY_SECRET,
            &collector_shared::signing::random_key().unwrap(),
        )
        .await
        .unwrap();
    let (served, _) = serve(&t.store, &config).await;
    let code = recommendations_with(served.addr, real).await.0;
    assert_eq!(code, 303, "a rotated key ends every session");
    served.stop().await;
}

/// `GET /recommendations` (operators' page) with a session cookie: status and head.
async fn recommendations_with(addr: SocketAddr, session: String) -> (u16, String) {
    let (code, head, _) =
        tokio::task::spawn_blocking(move || get(addr, "/recommendations", &cookie(&session)))
            .await
            .unwrap();
    (code, head)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_anonymous_bodies_starve_neither_readers_nor_agents() {
    let t = support::sqlite().await;
    support::ingest_small_fleet(&t.store, &TeamsConfig::default()).await;
    let config = config();
    let (served, state) = serve(&t.store, &config).await;
    let addr = served.addr;
    let outcome = tokio::task::spawn_blocking(move || {
        // The audit's attack: a megabyte declared, never sent. Refused before any slot is taken.
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000000\r\n\r\ntoken="
        )
        .unwrap();
        let mut answer = [0u8; 12];
        s.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"HTTP/1.1 413", "answered before the body is read");
        drop(s);
        // The same within the size limit, trickled: 256 connections each hold what they can.
        let mut slow = Vec::new();
        for _ in 0..256 {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(
                s,
                "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 16000\r\n\r\ntoken="
            )
            .unwrap();
            slow.push(s);
        }
        std::thread::sleep(Duration::from_millis(500));
        // A signed-in read and an agent's batch each answer within a second.
        let start = Instant::now();
        let (code, _, body) = get(addr, "/api/v1/tenants", &bearer(VIEWER));
        assert_eq!(code, 200, "{body}");
        let read = start.elapsed();
        let batch = serde_json::json!({
            "version": 1, "agent_id": "trust-agent", "seq": 1, "cluster": "default",
            "node": "trust-node", "sent_at": model::time::now_ms(),
            "snapshots": [{"ts": model::time::now_ms(), "gpus": []}]
        })
        .to_string();
        let start = Instant::now();
        let (code, _, body) = request(
            addr,
            &format!(
                "POST /api/v1/ingest HTTP/1.1\r\nContent-Type: application/json\r\n{}",
                bearer(AGENT)
            ),
            &batch,
        );
        let ingest = start.elapsed();
        assert!(code == 200 || code == 400, "ingest answered {code}: {body}");
        // Anonymous requests past their share are refused at once, and counted.
        let (code, _, _) = request(
            addr,
            "POST /login HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded",
            "token=x",
        );
        drop(slow);
        (read, ingest, code)
    })
    .await
    .unwrap();
    let (read, ingest, anonymous) = outcome;
    assert!(read < Duration::from_secs(1), "the read took {read:?}");
    assert!(ingest < Duration::from_secs(1), "the batch took {ingest:?}");
    assert_eq!(anonymous, 503, "the anonymous share is full");
    assert!(!state.refusals.recent(model::time::now_ms()).is_empty());
    let (_, _, ready) = tokio::task::spawn_blocking(move || get(addr, "/readyz", ""))
        .await
        .unwrap();
    assert!(
        ready.contains("refused") && ready.contains("anonymous"),
        "{ready}"
    );
    served.stop().await;
}

const NODE_ONE: &str = "node-one-token-00000007";
const NODE_TWO: &str = "node-two-token-00000008";

/// A tiny valid batch for `node`.
fn batch_for(node: &str, seq: u64) -> String {
    let now = model::time::now_ms();
    serde_json::json!({
        "version": 1, "agent_id": format!("{node}-agent"), "seq": seq, "cluster": "default",
        "node": node, "interval_ms": 1000, "snapshots": [{"ts": now, "gpus": []}]
    })
    .to_string()
}

/// One node's credential (a compromised node holding its own token) opens 40 slow batches:
/// it gets two places in the handler and the rest are answered 429 at once, so the agents'
/// 32 slots stay open and another node's batch is stored within a second; once its slow
/// requests end, the node's own batches are taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_nodes_slow_batches_cannot_hold_every_agent_slot() {
    let t = support::sqlite().await;
    let mut config = config();
    let nodes = Config::parse(&format!(
        "[[agents]]\ntoken = \"{NODE_ONE}\"\nnodes = [\"gpu-node-1\"]\n\
         [[agents]]\ntoken = \"{NODE_TWO}\"\nnodes = [\"gpu-node-2\"]\n"
    ))
    .unwrap();
    config.agents.extend(nodes.agents);
    let (served, state) = serve(&t.store, &config).await;
    let addr = served.addr;
    let ingest_head = |token: &str| {
        format!(
            "POST /api/v1/ingest HTTP/1.1\r\nContent-Type: application/json\r\n{}",
            bearer(token)
        )
    };
    let (held, busy, other, own_while_held, own_after) = tokio::task::spawn_blocking(move || {
        let mut slow = Vec::new();
        for _ in 0..40 {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(
                s,
                "{}\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{{",
                ingest_head(NODE_ONE)
            )
            .unwrap();
            slow.push(s);
        }
        let (mut held, mut busy) = (0, 0);
        for s in &mut slow {
            s.set_read_timeout(Some(Duration::from_millis(1500)))
                .unwrap();
            let mut answer = [0u8; 12];
            match s.read_exact(&mut answer) {
                Ok(()) if &answer == b"HTTP/1.1 429" => busy += 1,
                Ok(()) => panic!("{}", String::from_utf8_lossy(&answer)),
                Err(_) => held += 1,
            }
        }
        let start = Instant::now();
        let (code, _, body) = request(addr, &ingest_head(NODE_TWO), &batch_for("gpu-node-2", 1));
        let other = (code, start.elapsed(), body);
        let (code, head, _) = request(addr, &ingest_head(NODE_ONE), &batch_for("gpu-node-1", 1));
        let own_while_held = (code, head.contains("retry-after: 1"));
        drop(slow);
        let start = Instant::now();
        let own_after = loop {
            let (code, _, body) =
                request(addr, &ingest_head(NODE_ONE), &batch_for("gpu-node-1", 1));
            if code != 429 || start.elapsed() > Duration::from_secs(10) {
                break (code, body);
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        (held, busy, other, own_while_held, own_after)
    })
    .await
    .unwrap();
    assert_eq!(
        (held, busy),
        (2, 38),
        "two in the handler, the rest turned away"
    );
    let (code, took, body) = other;
    assert_eq!(code, 200, "{body}");
    assert!(
        took < Duration::from_secs(1),
        "the other node's batch took {took:?}"
    );
    assert_eq!(own_while_held, (429, true), "with Retry-After");
    assert_eq!(own_after.0, 200, "{}", own_after.1);
    assert_eq!(state.ingest_per_node.nodes_in_flight(), 0);
    let (_, _, metrics) =
        tokio::task::spawn_blocking(move || get(addr, "/metrics", &bearer(VIEWER)))
            .await
            .unwrap();
    let count = |reason: &str| -> u64 {
        let prefix = format!("gpulens_ingest_rejected_batches_total{{reason=\"{reason}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |n| n.parse().unwrap())
    };
    // The 38, the one sent while held, and any of the retries before the two had ended.
    assert!(count("node_busy") >= 39, "{metrics}");
    assert_eq!(
        count("too_large"),
        0,
        "the two held bodies were cut short, not too large"
    );
    assert_eq!(count("incomplete"), 2, "{metrics}");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wrong_tokens_never_lock_out_a_right_one_and_forms_stay_home() {
    let t = support::sqlite().await;
    let config = config();
    let (served, _) = serve(&t.store, &config).await;
    let addr = served.addr;
    tokio::task::spawn_blocking(move || {
        let form = "POST /login HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded";
        for _ in 0..5 {
            request(addr, form, "token=wrong-guess");
        }
        let (code, head, _) = request(addr, form, "token=wrong-guess");
        assert_eq!(code, 429, "{head}");
        assert!(head.contains("retry-after"), "{head}");
        let (code, _, body) = get(addr, "/api/v1/tenants", &bearer("another-wrong-one"));
        assert_eq!(code, 429);
        assert!(body.contains("too_many_requests"), "{body}");
        // The right ones still work from the same address.
        sign_in(addr, OPERATOR);
        let (code, _, _) = get(addr, "/api/v1/tenants", &bearer(VIEWER));
        assert_eq!(code, 200);
        // Wrong agent tokens are limited too.
        let agent = "POST /api/v1/ingest HTTP/1.1\r\nContent-Type: application/json\r\nAuthorization: Bearer nope";
        let codes: Vec<u16> = (0..8).map(|_| request(addr, agent, "{}").0).collect();
        assert_eq!(&codes[..4], [401, 401, 401, 401]);
        assert_eq!(codes[7], 429, "{codes:?}");

        // `next` stays on this collector, whatever it decodes to.
        for next in ["/%09/evil.example/x", "//evil.example", "/%0d%0aSet-Cookie:%20a=b", "/%7F"] {
            let (code, head, _) = request(
                addr,
                form,
                &format!("token={OPERATOR}&next={next}"),
            );
            assert_eq!(code, 303, "{next}: {head}");
            assert!(head.contains("\r\nlocation: /\r\n"), "{next}: {head}");
        }
        // A sign-in posted from another site is refused, and sets no cookie.
        let (code, head, _) = request(
            addr,
            &format!("{form}\r\nOrigin: https://evil.example\r\nSec-Fetch-Site: cross-site"),
            &format!("token={OPERATOR}"),
        );
        assert_eq!(code, 403, "{head}");
        assert!(!head.contains("set-cookie: gpulens_session="), "{head}");
    })
    .await
    .unwrap();
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scoped_caller_reads_no_other_team_on_metrics_nor_across_clusters() {
    let t = support::sqlite().await;
    let teams = TeamsConfig::default();
    support::ingest_small_fleet(&t.store, &teams).await;
    let config = config();
    let (served, state) = serve(&t.store, &config).await;
    // The fleet's newest readings, as ingest records them for /metrics.
    let fleet = support::fleet();
    let now = model::time::now_ms();
    for b in support::batches(&fleet, "metrics", &[now - 1_000], 10, 1000) {
        state.latest.record(&b);
    }
    let addr = served.addr;
    let tenants: Vec<store::TenantRecord> = t.store.tenants().await.unwrap();
    // Each other team's tenant as /metrics names it: its namespace, Slurm job or user.
    let others: Vec<String> = tenants
        .iter()
        .filter(|x| x.team.as_deref() != Some("ml"))
        .filter_map(|x| {
            let x = &x.tenant;
            x.namespace
                .as_ref()
                .map(|v| format!("namespace=\"{v}\""))
                .or_else(|| x.job_id.as_ref().map(|v| format!("job_id=\"{v}\"")))
                .or_else(|| x.user.as_ref().map(|v| format!("user=\"{v}\"")))
        })
        .collect();
    assert!(!others.is_empty(), "{tenants:#?}");
    let (all, scoped) = tokio::task::spawn_blocking(move || {
        let (code, _, all) = get(addr, "/metrics", &bearer(VIEWER));
        assert_eq!(code, 200);
        let (code, _, scoped) = get(addr, "/metrics", &bearer(SCOPED));
        assert_eq!(code, 200);
        (all, scoped)
    })
    .await
    .unwrap();
    assert!(
        others.iter().any(|l| all.contains(l.as_str())),
        "an unscoped viewer sees the tenant series: {others:?}"
    );
    for l in &others {
        assert!(
            !scoped.contains(l.as_str()),
            "the ml-scoped caller read {l} on /metrics"
        );
    }
    for team in ["nb", "physics", "bob"] {
        assert!(
            !scoped.contains(&format!("team=\"{team}\"")),
            "the ml-scoped caller read team {team} on /metrics"
        );
    }
    served.stop().await;
}

/// The small fleet twice: in its own cluster with the default teams, and in cluster `other`
/// where every tenant is team victim's — so every tenant key names two teams' tenants.
async fn small_fleet_in_two_clusters() -> support::TestStore {
    let t = support::sqlite().await;
    support::ingest_small_fleet(&t.store, &TeamsConfig::default()).await;
    let fleet = support::fleet();
    let now = model::time::now_ms();
    let instants: Vec<i64> = (0..20).map(|i| now - 60_000 + i * 1000).collect();
    for mut b in support::batches(&fleet, "other", &instants, 10, 1000) {
        b.cluster = "other".into();
        t.store
            .ingest(&b, now, &|_| Some("victim".into()))
            .await
            .unwrap();
    }
    t
}

/// `host/1092` is team bob's in one cluster and team victim's in another; bob's
/// viewer asked for `tenant:host/1092` and got both clusters' data combined.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_key_shared_across_clusters_is_answered_only_to_who_sees_every_team() {
    let t = small_fleet_in_two_clusters().await;
    let tenants = t.store.tenants().await.unwrap();
    let shared = tenants
        .iter()
        .find(|x| x.team.as_deref() == Some("bob"))
        .unwrap_or_else(|| panic!("no tenant of team bob: {tenants:#?}"))
        .key()
        .to_string();
    assert!(
        tenants
            .iter()
            .any(|x| x.key() == shared && x.team.as_deref() == Some("victim")),
        "the same key in the other cluster, team victim"
    );
    let config = config();
    let (served, _) = serve(&t.store, &config).await;
    let addr = served.addr;
    let path = format!(
        "/api/v1/series?metric=effective&entity=tenant:{}",
        shared.replace('/', "%2F")
    );
    let (bob, victim, viewer) = tokio::task::spawn_blocking(move || {
        (
            get(addr, &path, &bearer(BOB)),
            get(addr, &path, &bearer(VICTIM)),
            get(addr, &path, &bearer(VIEWER)),
        )
    })
    .await
    .unwrap();
    // Whichever cluster's record comes first, neither scoped viewer reads the other's data.
    assert_eq!(
        bob.0, 404,
        "bob's viewer must not read victim's data: {}",
        bob.2
    );
    assert_eq!(
        victim.0, 404,
        "victim's viewer must not read bob's data: {}",
        victim.2
    );
    assert_eq!(viewer.0, 200, "{}", viewer.2);
    served.stop().await;
}

/// A walk of every page and read route a team-scoped caller can reach (the API's
/// reads, every series of the fleet's entities, and every link of every page, over a real
/// socket with three hours of the small fleet and a stored analysis) finds no other team's
/// tenant, by key or by its encoded form in a link.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heavy_a_scoped_walk_of_every_read_finds_no_other_team() {
    let t = support::sqlite().await;
    let fleet = support::fleet();
    let to = store::rollup::bucket_of(collector::now_ms(), store::rollup::MINUTE_MS);
    let from = to - 3 * 3_600_000;
    let teams = TeamsConfig::default();
    crate::analytics::load_with_teams(&t.store, &fleet, "walk", from, to, &|x| teams.team_of(x))
        .await;
    let cfg = analytics::Config::default();
    let (analysis, _) = collector::analysis::run(&t.store, &cfg, Duration::from_secs(3 * 3600), to)
        .await
        .unwrap();
    collector::analysis::save(&t.store, &analysis, to, 10)
        .await
        .unwrap();
    let tenants = t.store.tenants().await.unwrap();
    let forbidden: Vec<String> = tenants
        .iter()
        .filter(|x| x.team.as_deref() != Some("ml"))
        .flat_map(|x| [x.key().to_string(), web::format::enc(x.key())])
        .collect();
    assert!(
        tenants.iter().any(|x| x.team.as_deref() == Some("ml")) && !forbidden.is_empty(),
        "both ml's and other teams' tenants: {tenants:#?}"
    );
    let (served, _) = serve(&t.store, &config()).await;
    let addr = served.addr;
    let mut todo = crate::citus::api_reads(&fleet, from, to);
    todo.extend(["/".to_owned(), "/metrics".to_owned()]);
    let (seen, leaks) = tokio::task::spawn_blocking(move || {
        let mut queued: std::collections::BTreeSet<String> = todo.iter().cloned().collect();
        let (mut seen, mut leaks) = (Vec::new(), Vec::new());
        while let Some(page) = todo.pop() {
            let (code, head, body) = get(addr, &page, &bearer(SCOPED));
            seen.push((page.clone(), code));
            if code != 200 {
                continue;
            }
            for f in &forbidden {
                if body.contains(f.as_str()) {
                    leaks.push(format!("{page} shows {f}"));
                }
            }
            if head.contains("content-type: text/html") {
                for link in crate::citus::links(&body) {
                    if queued.len() < 400 && queued.insert(link.clone()) {
                        todo.push(link);
                    }
                }
            }
        }
        (seen, leaks)
    })
    .await
    .unwrap();
    assert!(leaks.is_empty(), "{leaks:#?}");
    let answered = seen.iter().filter(|(_, c)| *c == 200).count();
    assert!(answered >= 20, "the walk read too little: {seen:?}");
    served.stop().await;
}

/// With `cluster=`, a tenant key names one cluster's tenant: each scoped viewer reads its own
/// cluster's, and is refused the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_qualified_by_its_cluster_is_answered_to_its_own_team() {
    let t = small_fleet_in_two_clusters().await;
    let tenants = t.store.tenants().await.unwrap();
    let bobs = tenants
        .iter()
        .find(|x| x.team.as_deref() == Some("bob"))
        .unwrap();
    let (key, home) = (bobs.key().replace('/', "%2F"), bobs.cluster.clone());
    let (served, _) = serve(&t.store, &config()).await;
    let addr = served.addr;
    let answers = tokio::task::spawn_blocking(move || {
        let at = |cluster: &str, token: &str| {
            let path =
                format!("/api/v1/series?metric=effective&entity=tenant:{key}&cluster={cluster}");
            get(addr, &path, &bearer(token)).0
        };
        [
            at(&home, BOB),
            at("other", BOB),
            at("other", VICTIM),
            at(&home, VICTIM),
            at("no-such-cluster", VIEWER),
            at("Not_A_Name", VIEWER),
        ]
    })
    .await
    .unwrap();
    assert_eq!(answers, [200, 404, 200, 404, 404, 400]);
    served.stop().await;
}
