//! Slurm jobs' accounts and users as slurmctld records them, asked of `squeue` on a thread of
//! their own, never on the sampling path. A task's environment is its user's to rewrite: `env
//! SLURM_JOB_ACCOUNT=other ./train` would have the job's GPU charged to another account's team
//! (`[teams] accounts`). So where `squeue` runs, a job's account is slurmctld's or unknown,
//! never a task's word; the environment is read only on hosts without `squeue`
//! (docs/agent.md, "Slurm").
//!
//! Bounds: one `squeue` at a time, each with [`TIMEOUT`] and at most [`MAX_ANSWER`] bytes read;
//! a job slurmctld does not know (finished, or `squeue` failed) is asked again after [`RETRY`];
//! at most [`MAX_JOBS`] jobs are remembered.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long one `squeue` may take before it is killed.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// The most bytes of `squeue`'s answer read (one line of two names is under 140).
pub const MAX_ANSWER: u64 = 4096;
/// How long a job slurmctld did not answer for stays unknown before it is asked again.
pub const RETRY: Duration = Duration::from_secs(60);
/// The most jobs remembered (a node runs a handful at a time).
pub const MAX_JOBS: usize = 4096;

/// What slurmctld records of a job: the account it runs under and its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    pub account: String,
    pub user: String,
}

/// What is known of one job.
#[derive(Debug, Clone)]
enum Known {
    Found(JobRecord),
    /// Asked at this time and not answered (no such job, or `squeue` failed).
    Missing(Instant),
}

#[derive(Default)]
struct State {
    known: HashMap<String, Known>,
    wanted: VecDeque<String>,
    queued: HashSet<String>,
}

struct Shared {
    squeue: PathBuf,
    state: Mutex<State>,
    wake: Condvar,
}

/// Jobs' records, asked of `squeue` as jobs are first seen. Cheap to clone.
#[derive(Clone)]
pub struct JobRecords {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for JobRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JobRecords({})", self.shared.squeue.display())
    }
}

impl JobRecords {
    /// Records asked of the `squeue` at `squeue` (a path, or a name looked up in `PATH`), on a
    /// thread started now. None when no such program can be found: the caller falls back to
    /// the tasks' environment, and says so.
    pub fn start(squeue: &Path) -> Option<JobRecords> {
        let squeue = find_program(squeue)?;
        let shared = Arc::new(Shared {
            squeue,
            state: Mutex::default(),
            wake: Condvar::new(),
        });
        let worker = shared.clone();
        std::thread::Builder::new()
            .name("slurm-jobs".into())
            .spawn(move || ask_forever(&worker))
            .ok()?;
        Some(JobRecords { shared })
    }

    /// What slurmctld says of job `id` (digits): its record when known; None while it is being
    /// asked, or when slurmctld did not answer (asked again after [`RETRY`]).
    pub fn get(&self, id: &str) -> Option<JobRecord> {
        let mut st = self.shared.state.lock().expect("job records lock");
        match st.known.get(id) {
            Some(Known::Found(r)) => return Some(r.clone()),
            Some(Known::Missing(at)) if at.elapsed() < RETRY => return None,
            _ => {}
        }
        if !st.queued.contains(id) && st.queued.len() < MAX_JOBS {
            st.queued.insert(id.to_owned());
            st.wanted.push_back(id.to_owned());
            self.shared.wake.notify_one();
        }
        None
    }

    /// Whether job `id` is being asked about now (asked for and not yet answered).
    pub fn asking(&self, id: &str) -> bool {
        let st = self.shared.state.lock().expect("job records lock");
        st.queued.contains(id)
    }
}

/// The worker: asks for each wanted job in turn.
fn ask_forever(shared: &Shared) {
    loop {
        let id = {
            let mut st = shared.state.lock().expect("job records lock");
            loop {
                if let Some(id) = st.wanted.pop_front() {
                    break id;
                }
                st = shared.wake.wait(st).expect("job records lock");
            }
        };
        let answer = ask(&shared.squeue, &id);
        if let Err(e) = &answer {
            tracing::warn!(job = %id, error = %e, "slurmctld's record of the job could not be read; its account stays unknown");
        }
        let mut st = shared.state.lock().expect("job records lock");
        st.queued.remove(&id);
        if st.known.len() >= MAX_JOBS {
            // The oldest knowledge goes first: whatever is unanswered, then everything (jobs
            // still running are asked again).
            st.known.retain(|_, k| matches!(k, Known::Found(_)));
            if st.known.len() >= MAX_JOBS {
                st.known.clear();
            }
        }
        let known = match answer {
            Ok(Some(r)) => Known::Found(r),
            Ok(None) | Err(_) => Known::Missing(Instant::now()),
        };
        st.known.insert(id, known);
    }
}

/// `squeue --noheader --jobs ID --format '%a %u'`: the job's account and user; None when
/// slurmctld does not know the job.
fn ask(squeue: &Path, id: &str) -> anyhow::Result<Option<JobRecord>> {
    anyhow::ensure!(
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
        "{id:?} is not a job id"
    );
    let mut child = Command::new(squeue)
        .args(["--noheader", "--jobs", id, "--format", "%a %u"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| anyhow::anyhow!("{}: {e}", squeue.display()))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("{} took more than {TIMEOUT:?}", squeue.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut out = String::new();
    if let Some(stdout) = child.stdout.take() {
        stdout.take(MAX_ANSWER).read_to_string(&mut out)?;
    }
    if !status.success() {
        // squeue exits 1 for a job id slurmctld no longer holds ("Invalid job id specified").
        return Ok(None);
    }
    parse(&out)
}

/// The one line `squeue` prints: the account and the user, each a Slurm name. Nothing: no such
/// job. Anything else is refused, never half-read.
fn parse(out: &str) -> anyhow::Result<Option<JobRecord>> {
    let mut lines = out.lines().filter(|l| !l.trim().is_empty());
    let Some(line) = lines.next() else {
        return Ok(None);
    };
    anyhow::ensure!(lines.next().is_none(), "squeue printed more than one job");
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [account, user] = fields[..] else {
        anyhow::bail!("squeue printed {line:?}, not an account and a user");
    };
    anyhow::ensure!(
        model::names::is_slurm_name(account) && model::names::is_slurm_name(user),
        "squeue printed {line:?}, not an account and a user"
    );
    Ok(Some(JobRecord {
        account: account.to_owned(),
        user: user.to_owned(),
    }))
}

/// `program` as given when it holds a `/`, else the first executable of that name in `PATH`.
fn find_program(program: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.components().count() > 1 {
        return runnable(program).then(|| program.to_owned());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| runnable(p))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A stand-in `squeue` in `dir` answering as squeue does: the line `answers` gives a job,
    /// else nothing and exit 1 ("Invalid job id specified"); each call's arguments are appended
    /// to `dir/asked`.
    pub(crate) fn stand_in_squeue(dir: &Path, answers: &[(&str, &str)]) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let squeue = dir.join("squeue");
        let cases: String = answers
            .iter()
            .map(|(id, line)| format!("  {id}) echo '{line}' ;;\n"))
            .collect();
        std::fs::write(
            &squeue,
            format!(
                "#!/bin/sh\necho \"$@\" >> {log}\ncase \"$3\" in\n{cases}  *) echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1 ;;\nesac\n",
                log = dir.join("asked").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&squeue, std::fs::Permissions::from_mode(0o755)).unwrap();
        squeue
    }

    /// Job `id`'s record once `jobs` has it (asking for it), or None after 10 s.
    pub(crate) fn answered(jobs: &JobRecords, id: &str) -> Option<JobRecord> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(r) = jobs.get(id) {
                return Some(r);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn squeues_line_is_an_account_and_a_user() {
        assert_eq!(
            parse("physics mkoch\n").unwrap(),
            Some(JobRecord {
                account: "physics".into(),
                user: "mkoch".into()
            })
        );
        assert_eq!(parse("").unwrap(), None, "no such job");
        assert_eq!(parse("\n  \n").unwrap(), None);
        for bad in [
            "physics",
            "physics mkoch extra",
            "phys;ics mkoch",
            "physics mk\u{1b}och",
            "a b\nc d\n",
            &format!("{} mkoch", "a".repeat(65)),
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    /// Job records through a stand-in `squeue`: asked off the caller's thread, known once
    /// answered, never the caller's wait.
    #[test]
    fn a_job_is_asked_once_and_then_known() {
        let dir = crate::scratch::fresh_dir("slurm-jobs").unwrap();
        let log = dir.join("asked");
        let squeue = stand_in_squeue(&dir, &[("884213", "physics mkoch")]);
        let jobs = JobRecords::start(&squeue).expect("the stand-in runs");
        let deadline = Instant::now() + Duration::from_secs(10);
        assert_eq!(
            answered(&jobs, "884213"),
            Some(JobRecord {
                account: "physics".into(),
                user: "mkoch".into()
            })
        );
        assert!(!jobs.asking("884213"), "answered");
        // An unknown job stays unknown, and is not asked again before RETRY.
        assert_eq!(jobs.get("7"), None);
        while std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
            < 2
        {
            assert!(Instant::now() < deadline, "the unknown job was never asked");
            std::thread::sleep(Duration::from_millis(5));
        }
        for _ in 0..5 {
            assert_eq!(jobs.get("7"), None);
            assert!(jobs.get("884213").is_some());
        }
        std::thread::sleep(Duration::from_millis(50));
        let asked = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            asked.lines().collect::<Vec<_>>(),
            [
                "--noheader --jobs 884213 --format %a %u",
                "--noheader --jobs 7 --format %a %u"
            ]
        );
        assert!(JobRecords::start(&dir.join("no-such-squeue")).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
