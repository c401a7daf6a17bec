//! The background-task runner: a task that fails or panics on every pass leaves the others
//! running, is counted on `/metrics` and named by `/healthz/tasks` (503) and `/readyz` (still
//! 200: the database answers), and recovers as soon as a pass succeeds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use collector::config::TeamsConfig;
use collector::state::AppState;
use collector_shared::agent_auth::Auth;
use collector_shared::tasks::{Periodic, Runner, Task};
use store::Retention;

use crate::support;

async fn get(state: &AppState, path: &str) -> (StatusCode, String) {
    let (status, _, body) = support::get(state, path).await;
    (status, body)
}

fn state(t: &support::TestStore) -> AppState {
    AppState::new(
        t.store.clone(),
        Auth::default(),
        Default::default(),
        Retention::default(),
        TeamsConfig::default(),
    )
}

fn counting(name: &'static str, runs: Arc<AtomicU64>) -> Arc<dyn Task> {
    Periodic::task(name, Duration::from_millis(20), move || {
        let runs = runs.clone();
        Box::pin(async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    })
}

#[tokio::test]
async fn a_failing_or_panicking_task_never_stops_the_others_and_is_reported() {
    let t = support::sqlite().await;
    let state = state(&t);
    let healthy_runs = Arc::new(AtomicU64::new(0));
    let broken = Arc::new(AtomicBool::new(true));
    let failing = {
        let broken = broken.clone();
        Periodic::task("always_fails", Duration::from_millis(20), move || {
            let broken = broken.load(Ordering::SeqCst);
            Box::pin(async move {
                anyhow::ensure!(!broken, "the store said no");
                Ok(())
            })
        })
    };
    let panicking = Periodic::task("always_panics", Duration::from_millis(20), || {
        Box::pin(async { panic!("a row no check foresaw") })
    });
    let runner = Runner::start(
        &state.shared.tasks,
        vec![
            counting("keeps_going", healthy_runs.clone()),
            failing,
            panicking,
        ],
    );

    // The healthy task keeps running while the others fail on every pass.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while healthy_runs.load(Ordering::SeqCst) < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "the healthy task stalled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = get(&state, "/healthz/tasks").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["healthy"], false);
    let task = |name: &str| {
        v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing from {body}"))
            .clone()
    };
    assert_eq!(task("keeps_going")["healthy"], true);
    assert!(
        task("always_fails")["consecutive_failures"]
            .as_u64()
            .unwrap()
            >= 1
    );
    assert_eq!(task("always_fails")["last_error"], "the store said no");
    assert!(
        task("always_panics")["last_error"]
            .as_str()
            .unwrap()
            .contains("panicked: a row no check foresaw"),
        "{body}"
    );

    let (status, body) = get(&state, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "the database answers: {body}");
    assert!(
        body.contains("always_fails") && body.contains("always_panics"),
        "{body}"
    );

    let (_, metrics) = get(&state, "/metrics").await;
    for needle in [
        "gpulens_task_runs_total{task=\"always_fails\",outcome=\"failed\"}",
        "gpulens_task_runs_total{task=\"always_panics\",outcome=\"panicked\"}",
        "gpulens_task_runs_total{task=\"keeps_going\",outcome=\"ok\"}",
        "gpulens_task_duration_seconds_count{task=\"keeps_going\"}",
        "gpulens_task_last_success_timestamp_seconds{task=\"keeps_going\"}",
    ] {
        assert!(
            metrics.contains(needle),
            "{needle} missing from /metrics:\n{metrics}"
        );
    }

    // A pass that succeeds again makes the task healthy again.
    broken.store(false, Ordering::SeqCst);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = get(&state, "/healthz/tasks").await;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let fails = v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "always_fails")
            .unwrap()
            .clone();
        if fails["healthy"] == true {
            assert!(fails["last_success"].is_string());
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no recovery: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    runner.stop().await;
}

#[tokio::test]
async fn serve_and_demo_run_the_same_storage_analysis_alert_and_report_tasks() {
    let t = support::sqlite().await;
    let state = state(&t);
    let plan = collector::schedule::Plan {
        storage_every: Duration::from_secs(3600),
        analysis: Default::default(),
        analysis_first_after: Duration::from_secs(3600),
        alerts: Some(Default::default()),
        reports: Some((Default::default(), Default::default())),
        labels: None,
        demand: None,
        reclaim: None,
    };
    let names: Vec<_> = collector::schedule::standard(&state, plan)
        .iter()
        .map(|t| t.name())
        .collect();
    assert_eq!(
        names,
        [
            "partitions",
            "remote_write_settle",
            "rollups",
            "retention",
            "analysis",
            "alerts",
            "reports"
        ]
    );
}

#[tokio::test]
async fn every_feature_counts_its_own_work_on_metrics() {
    let t = support::sqlite().await;
    let state = state(&t);
    collector::analysis::scheduled(&t.store, &Default::default(), &state.metrics.analysis)
        .await
        .unwrap();
    // Families show on /metrics once they have a series: one each, as their features would.
    let m = &state.metrics;
    m.alerts
        .attempts
        .get_or_create(&collector::alerts::metrics::AttemptLabels {
            receiver: "ops".into(),
            outcome: "delivered",
        })
        .inc();
    m.labels.run("applied");
    state
        .remote_write
        .metrics
        .drop(collector::remote_write::DropReason::Late);
    let (_, metrics) = get(&state, "/metrics").await;
    for needle in [
        "gpulens_ingest_batch_rows_count 0",
        "gpulens_rollup_buckets_total 0",
        "gpulens_analysis_passes_total{outcome=\"stored\"} 1",
        "gpulens_analysis_load_seconds_count 1",
        "gpulens_alert_delivery_attempts_total{receiver=\"ops\",outcome=\"delivered\"} 1",
        "gpulens_reports_made_total 0",
        "gpulens_label_action_runs_total{outcome=\"applied\"} 1",
        "gpulens_label_actions_planned_total 0",
        "gpulens_remote_write_samples_dropped_total{reason=\"late\"} 1",
        "gpulens_remote_write_ignored_series_total 0",
        "gpulens_remote_write_scrapes_stored_total 0",
    ] {
        assert!(
            metrics.contains(needle),
            "{needle} missing from /metrics:\n{metrics}"
        );
    }
}

/// `--log-format json`: every line the collector writes to stderr is one JSON object with a
/// timestamp, level, target and message, including the error it stops with.
#[test]
fn logs_are_json_lines_when_asked() {
    let dir = crate::support::TempDir::new("json-logs");
    let db = format!("sqlite://{}", dir.path().join("gpulens.db").display());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gpulens"))
        .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0"])
        .args(["--database-url", &db])
        .env("GPULENS_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(!lines.is_empty(), "the collector logged nothing");
    for l in &lines {
        for k in ["timestamp", "level", "target", "message"] {
            assert!(l.get(k).is_some(), "{k} missing: {l}");
        }
    }
    assert!(
        lines.iter().any(|l| l["level"] == "WARN"
            && l["message"]
                .as_str()
                .unwrap()
                .contains("no [[agents]] configured")),
        "{text}"
    );
    // A failure to start is a JSON line too.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpulens"))
        .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0"])
        .args(["--config", "/nonexistent/gpulens.toml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8(out.stderr).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["level"], "ERROR");
    assert!(
        last["error"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/gpulens.toml"),
        "{last}"
    );
}
