//! One runner for every periodic job of the collector (partitions, remote-write settling,
//! rollups, retention, analysis, alerts, reports, label convergence).
//!
//! A job is one implementation of [`Task`]: a name, an interval and one pass. The runner gives
//! every task the same treatment:
//! - each pass runs as a tokio task of its own, so an error *or a panic* in one pass is
//!   recorded and the next pass comes as usual, and one task never stops another;
//! - a task never overlaps itself (the next pass waits for the previous one; that is the
//!   task's lock inside one collector — work that must not run twice across collectors takes
//!   the database job lock inside its pass, as the analysis and the reports do);
//! - telemetry: `gpulens_task_runs_total{task,outcome}`, `gpulens_task_duration_seconds{task}`
//!   and `gpulens_task_last_success_timestamp_seconds{task}` on `/metrics`, and the state of
//!   each task in [`TaskHealth`], served at `GET /healthz/tasks`.
//!
//! `serve` and `demo` start the same set (`schedule::standard`). The runner knows no feature:
//! each feature builds its own tasks, and `schedule.rs` puts them together.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::metrics::{FGauge, snake_label};

/// What a pass returns.
pub type PassFuture = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// A periodic job.
pub trait Task: Send + Sync + 'static {
    /// Its name in metrics, logs and `/healthz/tasks` (snake_case, fixed).
    fn name(&self) -> &'static str;
    /// Time between the starts of two passes (a pass that takes longer delays the next).
    fn every(&self) -> Duration;
    /// Wait before the first pass (default: none).
    fn first_after(&self) -> Duration {
        Duration::ZERO
    }
    /// One pass. Errors are the runner's to record; the task need not log them.
    fn run_once(self: Arc<Self>) -> PassFuture;
}

/// One task's record, as `/healthz/tasks` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TaskStatus {
    pub name: &'static str,
    pub every_seconds: f64,
    pub runs: u64,
    pub failures: u64,
    /// Failed passes since the last successful one; the task is healthy when this is 0.
    pub consecutive_failures: u64,
    pub last_run: Option<String>,
    pub last_success: Option<String>,
    pub last_error: Option<String>,
    pub last_duration_seconds: Option<f64>,
}

impl TaskStatus {
    /// Whether its last pass succeeded (or none ran yet).
    pub fn healthy(&self) -> bool {
        self.consecutive_failures == 0
    }
}

/// How a background task's pass ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum TaskOutcome {
    Ok,
    Failed,
    Panicked,
}

snake_label!(TaskOutcome { Ok => "ok", Failed => "failed", Panicked => "panicked" });

/// A background task (`Task::name`, a fixed set).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabels {
    pub task: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskRunLabels {
    pub task: &'static str,
    pub outcome: TaskOutcome,
}

type HistogramMaker = fn() -> Histogram;

model::metric_set! {
    /// The runner's metrics, the same for every task.
    pub struct TaskMetrics {
        runs: Family<TaskRunLabels, Counter> => "task_runs",
            "Passes of each background task, by outcome (ok, failed, panicked); a failed or panicked pass is followed by the next as usual";
        duration: Family<TaskLabels, Histogram, HistogramMaker> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 4.0, 10)))
            => "task_duration" in Unit::Seconds,
            "Time one pass of a background task took";
        last_success: Family<TaskLabels, FGauge> => "task_last_success_timestamp" in Unit::Seconds,
            "When a background task last finished a pass without error (Unix time)";
    }
}

/// The state of every task the runner started, and the runner's metrics; shared with the
/// HTTP handlers.
#[derive(Debug, Default)]
pub struct TaskHealth {
    tasks: Mutex<BTreeMap<&'static str, TaskStatus>>,
    metrics: TaskMetrics,
}

impl TaskHealth {
    /// Task health whose metrics are on `registry` (the collector's `/metrics`).
    pub fn registered(registry: &mut Registry) -> TaskHealth {
        TaskHealth {
            tasks: Mutex::default(),
            metrics: TaskMetrics::register(registry),
        }
    }

    fn register(&self, name: &'static str, every: Duration) {
        self.lock().insert(
            name,
            TaskStatus {
                name,
                every_seconds: every.as_secs_f64(),
                runs: 0,
                failures: 0,
                consecutive_failures: 0,
                last_run: None,
                last_success: None,
                last_error: None,
                last_duration_seconds: None,
            },
        );
    }

    fn record(&self, name: &'static str, took: Duration, error: Option<String>) {
        let now = model::time::rfc3339(model::time::now_ms());
        let mut tasks = self.lock();
        let Some(t) = tasks.get_mut(name) else {
            return;
        };
        t.runs += 1;
        t.last_run = Some(now.clone());
        t.last_duration_seconds = Some(took.as_secs_f64());
        match error {
            None => {
                t.consecutive_failures = 0;
                t.last_success = Some(now);
            }
            Some(e) => {
                t.failures += 1;
                t.consecutive_failures += 1;
                t.last_error = Some(e);
            }
        }
    }

    /// Every registered task, by name.
    pub fn snapshot(&self) -> Vec<TaskStatus> {
        self.lock().values().cloned().collect()
    }

    /// Names of the tasks whose last pass failed.
    pub fn failing(&self) -> Vec<&'static str> {
        self.lock()
            .values()
            .filter(|t| !t.healthy())
            .map(|t| t.name)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, TaskStatus>> {
        // A panic while holding this lock cannot leave a half-written record worth refusing.
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The started tasks; dropping it (or [`Runner::stop`]) ends them.
#[derive(Debug, Default)]
pub struct Runner {
    handles: Vec<tokio::task::JoinHandle<()>>,
}

impl Runner {
    /// Starts every task, each on its own schedule.
    pub fn start(health: &Arc<TaskHealth>, tasks: Vec<Arc<dyn Task>>) -> Runner {
        let mut names = std::collections::HashSet::new();
        let handles = tasks
            .into_iter()
            .map(|task| {
                assert!(
                    names.insert(task.name()),
                    "two tasks are named {}",
                    task.name()
                );
                health.register(task.name(), task.every());
                tokio::spawn(drive(health.clone(), task))
            })
            .collect();
        Runner { handles }
    }

    /// Ends every task and waits until each has stopped (a pass under way is cancelled at
    /// its next await).
    pub async fn stop(mut self) {
        let handles = std::mem::take(&mut self.handles);
        for h in &handles {
            h.abort();
        }
        for h in handles {
            let _ = h.await;
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        for h in &self.handles {
            h.abort();
        }
    }
}

async fn drive(health: Arc<TaskHealth>, task: Arc<dyn Task>) {
    let name = task.name();
    tokio::time::sleep(task.first_after()).await;
    let mut tick = tokio::time::interval(task.every());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let labels = TaskLabels { task: name };
    loop {
        tick.tick().await;
        let started = Instant::now();
        let pass = tokio::spawn(task.clone().run_once());
        let (outcome, error) = match pass.await {
            Ok(Ok(())) => (TaskOutcome::Ok, None),
            Ok(Err(e)) => (TaskOutcome::Failed, Some(format!("{e:#}"))),
            Err(e) if e.is_panic() => (
                TaskOutcome::Panicked,
                Some(format!("the pass panicked: {}", panic_text(e.into_panic()))),
            ),
            // Cancelled: the runner is stopping.
            Err(_) => return,
        };
        let took = started.elapsed();
        let m = &health.metrics;
        m.runs
            .get_or_create(&TaskRunLabels {
                task: name,
                outcome,
            })
            .inc();
        m.duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if error.is_none() {
            m.last_success
                .get_or_create(&labels)
                .set(model::time::now_ms() as f64 / 1000.0);
        }
        // An error's text may carry what a server outside answered: clipped before it is
        // logged or kept (slurmrestd's errors[] made 27 MB per poll).
        let error = error.map(|e| ingest_client::bounded::one_line(&e, MAX_ERROR, false));
        if let Some(e) = &error {
            tracing::warn!(task = name, error = %e, "background task pass failed; the next pass runs as usual");
        }
        health.record(name, took, error);
    }
}

/// The most bytes of a task's error kept and logged.
pub const MAX_ERROR: usize = 1_000;

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}

/// A task made of a name, an interval and a closure; what most features need.
pub struct Periodic<F> {
    name: &'static str,
    every: Duration,
    first_after: Duration,
    pass: F,
}

impl<F> Periodic<F>
where
    F: Fn() -> PassFuture + Send + Sync + 'static,
{
    pub fn task(name: &'static str, every: Duration, pass: F) -> Arc<dyn Task> {
        Arc::new(Periodic {
            name,
            every,
            first_after: Duration::ZERO,
            pass,
        })
    }

    /// The same, with its first pass `first_after` from the start.
    pub fn delayed(
        name: &'static str,
        every: Duration,
        first_after: Duration,
        pass: F,
    ) -> Arc<dyn Task> {
        Arc::new(Periodic {
            name,
            every,
            first_after,
            pass,
        })
    }
}

impl<F> Task for Periodic<F>
where
    F: Fn() -> PassFuture + Send + Sync + 'static,
{
    fn name(&self) -> &'static str {
        self.name
    }
    fn every(&self) -> Duration {
        self.every
    }
    fn first_after(&self) -> Duration {
        self.first_after
    }
    fn run_once(self: Arc<Self>) -> PassFuture {
        (self.pass)()
    }
}
