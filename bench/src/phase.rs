//! One timed phase of a benchmark: its CPU cost, the workers that run it (one per node, each
//! node's batches in order), settling the database before it, and telling a profiler when it
//! runs.

use std::time::{Duration, Instant};

use store::Store;

/// A phase of the ingest benchmark that a profiler can be told to record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Phase {
    EndToEnd,
    DecodeAndStore,
    StoreOnly,
}

/// The median of `v`: its middle value, the upper of the two middle ones for an even count.
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Tells a profiler when a phase runs (`--profile-phase`, the end-to-end one by default): with
/// `GPULENS_BENCH_PERF_CTL` naming the control FIFO of `perf record -D -1 --control
/// fifo:PATH`, "enable" as the phase starts and "disable" as it ends, so the profile holds that
/// phase alone (docs/PERFORMANCE.md). The FIFO is opened once, at the first phase, and kept.
fn profile_phase(command: &str) {
    static CONTROL: std::sync::OnceLock<Option<(std::ffi::OsString, std::fs::File)>> =
        std::sync::OnceLock::new();
    let control = CONTROL.get_or_init(|| {
        let path = std::env::var_os("GPULENS_BENCH_PERF_CTL")?;
        match std::fs::OpenOptions::new().write(true).open(&path) {
            Ok(fifo) => Some((path, fifo)),
            Err(e) => {
                eprintln!("not telling the profiler when phases run ({path:?}): {e}");
                None
            }
        }
    });
    if let Some((path, fifo)) = control {
        let mut fifo: &std::fs::File = fifo;
        if let Err(e) = std::io::Write::write_all(&mut fifo, format!("{command}\n").as_bytes()) {
            eprintln!("could not tell the profiler to {command} ({path:?}): {e}");
        }
    }
}

/// Before each phase: the collector's committers have given their connections back to the
/// pool (they keep one for a second after their last group), so the raw COPY phase can use
/// as many as end to end did; then a checkpoint, so that both phases start alike and the
/// database's own WAL-triggered checkpoints (every `max_wal_size` of WAL) fall in neither; the
/// disk flushes it starts would otherwise stall whichever phase they land in. Without the
/// privilege to checkpoint, says so once and goes on without.
async fn settle(store: &Store, checkpoints: &mut bool) {
    store.pool_quiet(Duration::from_secs(5)).await;
    if *checkpoints && let Err(e) = store.checkpoint().await {
        eprintln!(
            "not checkpointing between phases ({e}); the phases may land on the database's own checkpoints"
        );
        *checkpoints = false;
    }
}

/// CPU counters at the start of a phase ([`model::process`]).
struct CpuMark {
    process: Option<f64>,
    machine: Option<(f64, f64)>,
}

/// What a phase cost in CPU.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PhaseCpu {
    /// This process's CPU-ms per 1,000 rows (client and collector).
    pub(crate) process: f64,
    /// The machine's, all processes, per 1,000 rows.
    pub(crate) machine: f64,
    /// The share of the machine's cores busy during the phase.
    pub(crate) busy: f64,
}

impl CpuMark {
    fn now() -> CpuMark {
        CpuMark {
            process: model::own_usage::cpu_seconds(),
            machine: model::own_usage::machine_cpu_seconds(),
        }
    }

    /// The cost since the mark of storing `rows` rows; None where /proc is unreadable.
    fn per_1000_rows(&self, rows: usize) -> Option<PhaseCpu> {
        let now = CpuMark::now();
        let per = |s: f64| s * 1000.0 / rows as f64 * 1000.0;
        let (busy0, idle0) = self.machine?;
        let (busy1, idle1) = now.machine?;
        let (busy, idle) = (busy1 - busy0, idle1 - idle0);
        Some(PhaseCpu {
            process: per(now.process? - self.process?),
            machine: per(busy),
            busy: if busy + idle > 0.0 {
                busy / (busy + idle)
            } else {
                0.0
            },
        })
    }
}

/// Splits items into `n` worker lists so that each node belongs to one worker and keeps its
/// order: an agent delivers its batches one after another, in sequence.
pub(crate) fn by_worker<T>(items: Vec<T>, n: usize, node: impl Fn(&T) -> String) -> Vec<Vec<T>> {
    let mut nodes: Vec<String> = Vec::new();
    let mut out: Vec<Vec<T>> = (0..n.max(1)).map(|_| Vec::new()).collect();
    for item in items {
        let name = node(&item);
        let i = nodes.iter().position(|x| *x == name).unwrap_or_else(|| {
            nodes.push(name);
            nodes.len() - 1
        });
        out[i % n.max(1)].push(item);
    }
    out
}

/// Runs `work` on every item, one worker per list, in list order; the first error stops it.
pub(crate) async fn run_workers<T, F, Fut>(lists: Vec<Vec<T>>, work: F) -> anyhow::Result<()>
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let mut tasks = tokio::task::JoinSet::new();
    for list in lists {
        let work = work.clone();
        tasks.spawn(async move {
            for item in list {
                work(item).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(())
}

/// The phase a profiler records in a round: none in a warm-up round.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Profiled(pub Option<Phase>);

impl Profiled {
    /// Tells the profiler to `command` ("enable" or "disable") if it records `phase`.
    pub(crate) fn mark(self, phase: Phase, command: &str) {
        if self.0 == Some(phase) {
            profile_phase(command);
        }
    }
}

/// A phase's rate (rows/s) and what it cost in CPU (None where /proc is unreadable).
pub(crate) type Measured = (f64, Option<PhaseCpu>);

/// Runs one phase that stores `rows` rows: settles the database first ([`settle`]), tells the
/// profiler through `mark` ("enable" as `work` starts, "disable" as it ends), and measures
/// the phase's rate and CPU cost.
pub(crate) async fn timed(
    store: &Store,
    checkpoints: &mut bool,
    rows: usize,
    mark: impl Fn(&str),
    work: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<Measured> {
    settle(store, checkpoints).await;
    mark("enable");
    let (cpu, t) = (CpuMark::now(), Instant::now());
    work.await?;
    let measured = (
        rows as f64 / t.elapsed().as_secs_f64(),
        cpu.per_1000_rows(rows),
    );
    mark("disable");
    Ok(measured)
}
