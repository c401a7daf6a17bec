//! The collector on a Citus cluster (a coordinator and two workers, started by tests/run.sh;
//! the schema distributed by `node` as `gpulens migrate` does): the analysis against ground
//! truth, a weekly report and a walk of the dashboard's pages answer on the distributed schema
//! what they answer on the embedded store. (The store's conformance suite and the alert
//! state's round trip run on Citus in their own files.)

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use collector::reports::{self, week::IsoWeek};
use collector::router::router;
use serde_json::Value;
use store::Store;
use tower::ServiceExt;

use crate::analytics::{Score, check, default_fleet, load_with_teams, scenario_files_in, verdict};
use crate::support;

const DAY_MS: i64 = 86_400_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_findings_on_citus_match_ground_truth() {
    if support::citus_base().is_none() {
        return;
    }
    let mut scores: BTreeMap<&'static str, Score> = BTreeMap::new();
    // The three fleets of scenarios/, which between them hold every kind of finding scored.
    // The ten edge cases of tests/scenarios/ are judged on SQLite
    // (`heavy_findings_match_ground_truth`): what they add is analysis, the same code on every
    // backend. On Citus nearly all of this test's time is the rollup of two days' backlog,
    // statement by statement through the coordinator (about 10 s a scenario here).
    for f in &scenario_files_in(&["scenarios"]) {
        let t = support::citus().await.unwrap();
        check(&t.store, f, &mut scores).await;
    }
    let (ok, report) = verdict(&scores);
    println!("{report}");
    assert!(ok, "below 0.9 on Citus:\n{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_a_weekly_report_on_citus_is_the_one_sqlite_makes() {
    let Some(citus) = support::citus().await else {
        return;
    };
    let lite = support::sqlite().await;
    // What `gpulens bench analyze` prints as the backend.
    assert_eq!(citus.store.citus_workers().await.unwrap(), Some(2));
    assert_eq!(lite.store.citus_workers().await.unwrap(), None);
    let fleet = default_fleet();
    let week: IsoWeek = "2026-W47".parse().unwrap();
    let (from, to) = week.bounds(&reports::week::zone("UTC").unwrap());
    let teams = collector::config::TeamsConfig::default();
    // The week's last day, every minute, in both stores.
    for s in [&lite.store, &citus.store] {
        load_with_teams(s, &fleet, "report", to - DAY_MS, to, &|x| teams.team_of(x)).await;
    }
    let cfg = analytics::Config::default();
    let now = to + DAY_MS;
    let (a, _, csv_a) = reports::generate(&lite.store, &cfg, week, "UTC", now, &mut ())
        .await
        .unwrap();
    let (b, html, csv_b) = reports::generate(&citus.store, &cfg, week, "UTC", now, &mut ())
        .await
        .unwrap();
    assert_eq!((a.from_ms, a.to_ms), (from, to));
    assert_eq!(a.nodes.len(), fleet.nodes.len(), "{a:?}");
    assert!(!a.teams.is_empty() && !a.idle.is_empty(), "{a:?}");
    assert!(html.contains("2026-W47"));
    // Sums over shards add in another order, in another precision: numbers agree to rounding.
    same_json(
        &serde_json::to_value(&a).unwrap(),
        &serde_json::to_value(&b).unwrap(),
        "report",
    );
    assert_eq!(csv_a.lines().count(), csv_b.lines().count());
}

/// The dashboard walked from `/` by following every link, on both stores holding the same
/// three hours and the same stored analysis: the same pages, each answered 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_on_citus_has_every_page_sqlite_has() {
    let Some(citus) = support::citus().await else {
        return;
    };
    let lite = support::sqlite().await;
    let fleet = support::fleet();
    let to = store::rollup::bucket_of(collector::now_ms(), store::rollup::MINUTE_MS);
    let from = to - 3 * 3_600_000;
    let teams = collector::config::TeamsConfig::default();
    let mut walks = Vec::new();
    for s in [&lite.store, &citus.store] {
        load_with_teams(s, &fleet, "walk", from, to, &|x| teams.team_of(x)).await;
        let cfg = analytics::Config::default();
        let (analysis, _) = collector::analysis::run(s, &cfg, Duration::from_secs(3 * 3600), to)
            .await
            .unwrap();
        collector::analysis::save(s, &analysis, to, 10)
            .await
            .unwrap();
        walks.push(walk(s.clone(), api_reads(&fleet, from, to)).await);
    }
    let (on_lite, on_citus) = (&walks[0], &walks[1]);
    assert!(on_lite.len() >= 20, "{on_lite:?}");
    let answered = |prefix: &str| {
        on_citus
            .iter()
            .filter(|(p, (c, _))| p.starts_with(prefix) && *c == StatusCode::OK)
            .count()
    };
    assert!(answered("/api/v1/series") >= 100, "{on_citus:?}");
    for (page, (code, json)) in on_citus {
        // Pages all answer; a series the entity has no such metric for is refused on both.
        assert_eq!(*code, on_lite[page].0, "{page}");
        assert!(
            page.starts_with("/api/") || *code == StatusCode::OK,
            "{page}"
        );
        // The API's answers are the same data (pages show relative times; links compare them).
        if let (Some(a), Some(b)) = (&on_lite[page].1, json) {
            same_json(a, b, page);
        }
    }
    assert_eq!(
        on_lite.keys().collect::<Vec<_>>(),
        on_citus.keys().collect::<Vec<_>>()
    );
    for detail in ["/nodes/", "/gpus/", "/tenants/", "/findings/"] {
        assert!(
            on_citus.keys().any(|p| p.starts_with(detail)),
            "no {detail}… page reached: {:?}",
            on_citus.keys()
        );
    }
}

/// The API's reads over the stored range: every list, and series of every entity kind at raw,
/// minute and hour resolution.
pub(crate) fn api_reads(fleet: &simulator::Fleet, from: i64, to: i64) -> Vec<String> {
    let mut out: Vec<String> = [
        "nodes",
        "gpus",
        "tenants",
        "findings",
        "recommendations",
        "plan",
        "outcomes",
        "alerts",
        "reports",
        "label-actions",
    ]
    .iter()
    .map(|p| format!("/api/v1/{p}"))
    .collect();
    out.push(format!("/api/v1/funnel?from={from}&to={to}"));
    let (snap, _) = fleet.snapshot(0, to - 60_000);
    let device = ["gpu_util", "mem_used_bytes", "sm_active", "power_w"];
    let tenant = ["sm_util", "mem_used_bytes", "alloc_share", "effective"];
    let mut entities = vec![
        ("fleet".to_owned(), device),
        (format!("cluster:{}", fleet.scenario.cluster), device),
        (format!("node:{}", fleet.nodes[0].spec.name), device),
        (format!("gpu:{}", snap.gpus[0].gpu_uuid), device),
    ];
    entities.extend(
        snap.allocations
            .iter()
            .take(2)
            .map(|a| (format!("tenant:{}", web::format::enc(&a.tenant)), tenant)),
    );
    // Raw seconds over ten minutes, minutes and hours over the three hours.
    for (e, metrics) in &entities {
        for metric in metrics {
            for (step, span) in [("10", 600_000), ("60s", 10_800_000), ("1h", 10_800_000)] {
                for agg in ["mean", "max"] {
                    out.push(format!(
                        "/api/v1/series?entity={e}&metric={metric}&agg={agg}&step={step}&from={}&to={to}",
                        to - span
                    ));
                }
            }
        }
    }
    out
}

/// Every page reachable from `/` by links (at most 400) and the `api` reads, with their
/// statuses and, for JSON, the answers.
async fn walk(store: Store, api: Vec<String>) -> BTreeMap<String, (StatusCode, Option<Value>)> {
    let state = crate::support::default_state(store);
    let mut seen = BTreeMap::new();
    let mut todo = api;
    todo.push("/".to_owned());
    let mut queued: BTreeSet<String> = todo.iter().cloned().collect();
    while let Some(page) = todo.pop() {
        let resp = router(state.clone())
            .oneshot(Request::get(&page).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let code = resp.status();
        let kind = |t: &str| {
            resp.headers()
                .get("content-type")
                .is_some_and(|v| v.to_str().unwrap_or("").starts_with(t))
        };
        let (html, json) = (kind("text/html"), kind("application/json"));
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        let value = json.then(|| serde_json::from_slice(&body).unwrap());
        seen.insert(page, (code, value));
        if !html {
            continue;
        }
        for link in links(&String::from_utf8_lossy(&body)) {
            if queued.len() < 400 && queued.insert(link.clone()) {
                todo.push(link);
            }
        }
    }
    seen
}

/// The site's own links in a page: `href="/…"`, entities decoded, fragments dropped, sign-in
/// and sign-out left out.
pub(crate) fn links(html: &str) -> Vec<String> {
    html.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|l| l.starts_with('/') && !l.starts_with("//"))
        .map(|l| l.replace("&amp;", "&"))
        .map(|l| l.split('#').next().unwrap_or_default().to_owned())
        .filter(|l| !l.is_empty() && !l.starts_with("/auth/") && l != "/logout")
        .collect()
}

/// `a` and `b` are the same JSON (`generated` aside), numbers equal to a relative 1e-6: raw
/// measurements are 32-bit floats, which the backends average in different precision.
fn same_json(a: &Value, b: &Value, at: &str) {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-6 * x.abs().max(y.abs()).max(1.0),
                "{at}: {x} vs {y}"
            );
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: lengths");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                same_json(x, y, &format!("{at}[{i}]"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(
                x.keys().collect::<Vec<_>>(),
                y.keys().collect::<Vec<_>>(),
                "{at}: keys"
            );
            // When each answer was made is the one thing that differs.
            for (k, v) in x.iter().filter(|(k, _)| *k != "generated") {
                same_json(v, &y[k], &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

/// `gpulens migrate --citus` distributes the schema on a Citus coordinator and refuses, in
/// words, a PostgreSQL server without Citus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_with_citus_distributes_and_plain_postgres_is_refused_in_words() {
    let (Some((base, workers)), Some(pg)) = (support::citus_base(), support::pg_base()) else {
        return;
    };
    let migrate = |url: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_gpulens"))
            .args(["migrate", "--citus", "--database-url", url])
            .env("GPULENS_LOG", "error")
            .output()
            .unwrap()
    };
    let lock = support::citus_setup_lock(&base).await;
    let url = support::citus_database(&base, &workers).await;
    let out = migrate(&url);
    drop(lock);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("citus: gpu_samples distributed by node"),
        "{text}"
    );
    assert!(
        text.contains("citus: alerts copied to every node"),
        "{text}"
    );
    // Again: nothing left to do.
    let again = migrate(&url);
    assert!(String::from_utf8_lossy(&again.stdout).contains("up to date"));

    let plain = migrate(&support::fresh_database(&pg).await);
    let err = String::from_utf8_lossy(&plain.stderr);
    assert!(!plain.status.success());
    assert!(err.contains("does not load Citus"), "{err}");
}
