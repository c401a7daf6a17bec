//! Slurm jobs as slurmctld records them — the account a job runs under, its user, and the GPUs it
//! holds on this node — asked of `squeue --json` on a thread of their own, never on the
//! sampling path. A task's environment is its user's to rewrite: `env SLURM_JOB_ACCOUNT=other
//! ./train` would have the job's GPUs charged to another account's team (`[teams] accounts`),
//! and `SLURM_JOB_GPUS=` would hide a GPU the job holds and leaves idle. So where `squeue` runs,
//! a job's account is slurmctld's or unknown, and its GPUs here are slurmctld's where it names
//! them (`gres_detail`, `gpu:2(IDX:0-1)` for each of the job's nodes); the environment is read
//! only where it does not (docs/agent.md, "Slurm").
//!
//! Bounds: one `squeue` at a time, each with [`TIMEOUT`] and at most [`MAX_ANSWER`] bytes read;
//! a job slurmctld does not know (finished, or `squeue` failed) is asked again after [`RETRY`];
//! at most [`MAX_JOBS`] jobs are remembered; a job's node list expands to at most
//! [`MAX_NODES`] names.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long one `squeue` may take before it is killed.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// The most bytes of `squeue`'s answer read, one job held at a time (a job is 3–6 KiB of JSON;
/// should a squeue print every job of the cluster, this is about 50,000 of them).
pub const MAX_ANSWER: u64 = 256 * 1024 * 1024;
/// The most node names one job's node list expands to (the largest machines have about 10,000).
pub const MAX_NODES: usize = 16_384;
/// The longest part of a node list (between top-level commas), and of a number in brackets: a
/// node name is a host name. With [`MAX_NODES`], at most 4 MiB of names.
const MAX_PART: usize = 256;
const MAX_DIGITS: usize = 20;
/// GPU indices at and above this are not GPUs (NVIDIA's control devices' minors start here).
const MAX_GPU_INDEX: u32 = 254;
/// How long a job slurmctld did not answer for stays unknown before it is asked again.
pub const RETRY: Duration = Duration::from_secs(60);
/// The most jobs remembered (a node runs a handful at a time).
pub const MAX_JOBS: usize = 4096;

/// What slurmctld records of a job: the account it runs under, its user, and the GPUs (Slurm's
/// indices: the device minor numbers) it holds on this node — None where slurmctld does not say
/// (the node is not in the job's list as named here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    pub account: String,
    pub user: String,
    pub gpus: Option<BTreeSet<u32>>,
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
    /// This node's name, as the job's node list names it.
    node: String,
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
    /// thread started now, for node `node`. None when no such program can be found: the caller
    /// falls back to the tasks' environment, and says so.
    pub fn start(squeue: &Path, node: &str) -> Option<JobRecords> {
        let squeue = find_program(squeue)?;
        let shared = Arc::new(Shared {
            squeue,
            node: node.to_owned(),
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
        let answer = ask(&shared.squeue, &id, &shared.node);
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

/// `squeue --json --jobs ID`: the job's record; None when slurmctld does not know the job.
fn ask(squeue: &Path, id: &str, node: &str) -> anyhow::Result<Option<JobRecord>> {
    anyhow::ensure!(
        !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit()),
        "{id:?} is not a job id"
    );
    let mut child = Command::new(squeue)
        .args(["--json", "--jobs", id])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| anyhow::anyhow!("{}: {e}", squeue.display()))?;
    // Read while it runs (an answer past the pipe's buffer would block it), one job at a time:
    // should squeue print every job of the cluster (`--jobs` ignored with `--json`), only the
    // one asked for is kept.
    let stdout = child.stdout.take().expect("piped");
    let wanted: u64 = id.parse()?;
    let reader = std::thread::spawn(move || find_job(stdout.take(MAX_ANSWER), wanted));
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
    let found = reader
        .join()
        .map_err(|_| anyhow::anyhow!("reading squeue's answer failed"))?;
    if !status.success() {
        // squeue exits 1 for a job id slurmctld no longer holds ("Invalid job id specified").
        return Ok(None);
    }
    found?.map(|job| record(&job, id, node)).transpose()
}

/// Job `id` in `squeue --json`'s document (the one slurmrestd's `/jobs` serves), read as it
/// streams: the other jobs are skipped one by one, never all held. None: not listed.
fn find_job(answer: impl Read, id: u64) -> anyhow::Result<Option<serde_json::Value>> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    struct Document(u64);
    struct Jobs(u64);
    impl<'de> DeserializeSeed<'de> for Document {
        type Value = Option<Option<serde_json::Value>>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> Visitor<'de> for Document {
        type Value = Option<Option<serde_json::Value>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("squeue's JSON document")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut jobs = None;
            while let Some(key) = map.next_key::<String>()? {
                if key == "jobs" {
                    jobs = Some(map.next_value_seed(Jobs(self.0))?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(jobs)
        }
    }
    impl<'de> DeserializeSeed<'de> for Jobs {
        type Value = Option<serde_json::Value>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_seq(self)
        }
    }
    impl<'de> Visitor<'de> for Jobs {
        type Value = Option<serde_json::Value>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of jobs")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut found = None;
            while let Some(job) = seq.next_element::<serde_json::Value>()? {
                if found.is_none() && job["job_id"].as_u64() == Some(self.0) {
                    found = Some(job);
                }
            }
            Ok(found)
        }
    }
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(answer));
    let jobs = Document(id)
        .deserialize(&mut de)?
        .ok_or_else(|| anyhow::anyhow!("squeue's answer has no jobs list"))?;
    de.end()?;
    Ok(jobs)
}

/// The record of `job`: its `account`, `user_name`, and from `nodes` (a hostlist) and
/// `gres_detail` (one entry per node, in that order) the GPU indices on `node`. A job whose
/// account or user is no Slurm name is refused, never half-read.
fn record(job: &serde_json::Value, id: &str, node: &str) -> anyhow::Result<JobRecord> {
    let name = |field: &str| {
        job[field]
            .as_str()
            .filter(|v| model::names::is_slurm_name(v))
            .map(str::to_owned)
            .ok_or_else(|| anyhow::anyhow!("job {id}: {field} is not a Slurm name"))
    };
    let (account, user) = (name("account")?, name("user_name")?);
    // This node's place in the job's node list; its GRES entry there (none: no GRES).
    let short = node.split('.').next().unwrap_or(node);
    let gpus = job["nodes"]
        .as_str()
        .and_then(|list| expand_hostlist(list, MAX_NODES))
        .and_then(|names| names.iter().position(|n| n == node || n == short))
        .and_then(|at| match job["gres_detail"].as_array()?.get(at) {
            Some(entry) => gpu_indices(entry.as_str()?),
            None => Some(BTreeSet::new()),
        });
    Ok(JobRecord {
        account,
        user,
        gpus,
    })
}

/// [`find_job`] and [`record`] of a whole answer.
#[cfg(test)]
fn parse(out: &[u8], id: &str, node: &str) -> anyhow::Result<Option<JobRecord>> {
    find_job(out, id.parse()?)?
        .map(|job| record(&job, id, node))
        .transpose()
}

/// Slurm's hostlist (`gpu-[005-006,010],cn1`, brackets in several places multiplying) as
/// names; None when malformed or longer than `max`.
fn expand_hostlist(list: &str, max: usize) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let (mut depth, mut from) = (0, 0);
    let mut parts = Vec::new();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[from..i]);
                from = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return None;
        }
    }
    parts.push(&list[from..]);
    for part in parts.into_iter().filter(|p| !p.is_empty()) {
        if part.len() > MAX_PART {
            return None;
        }
        let mut names = vec![String::new()];
        let mut rest = part;
        while !rest.is_empty() {
            let Some(open) = rest.find('[') else {
                names.iter_mut().for_each(|n| n.push_str(rest));
                break;
            };
            let close = rest.find(']')?;
            let (prefix, ranges) = (&rest[..open], rest.get(open + 1..close)?);
            let mut items = Vec::new();
            for range in ranges.split(',') {
                let (lo, hi, width) = span(range)?;
                if (hi - lo) as usize >= max {
                    return None;
                }
                items.extend((lo..=hi).map(|n| format!("{n:0width$}")));
            }
            let mut next = Vec::with_capacity(names.len() * items.len());
            for n in &names {
                for item in &items {
                    next.push(format!("{n}{prefix}{item}"));
                }
            }
            if next.len() + out.len() > max {
                return None;
            }
            names = next;
            rest = &rest[close + 1..];
        }
        out.extend(names);
        if out.len() > max {
            return None;
        }
    }
    Some(out)
}

/// One of Slurm's number ranges, `7` or `005-010`: (low, high, the digits of the low one, which
/// set the names' zero padding); None when malformed, reversed or past [`MAX_DIGITS`].
fn span(range: &str) -> Option<(u64, u64, usize)> {
    let (a, b) = range.split_once('-').unwrap_or((range, range));
    if a.len().max(b.len()) > MAX_DIGITS {
        return None;
    }
    let (lo, hi): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
    (lo <= hi).then_some((lo, hi, a.len()))
}

/// The GPU indices one node's `gres_detail` entry names: `gpu:2(IDX:0-1)`,
/// `gpu:a100:3(IDX:0,2-3)`, with other GRES beside them; `IDX:N/A` or no `gpu` entry names
/// none. None when an index is malformed or no GPU's.
fn gpu_indices(detail: &str) -> Option<BTreeSet<u32>> {
    let mut out = BTreeSet::new();
    let mut rest = detail;
    while let Some(at) = rest.find("(IDX:") {
        let gres = rest[..at].rsplit(',').next().unwrap_or("");
        let list_end = rest[at..].find(')')? + at;
        let list = &rest[at + "(IDX:".len()..list_end];
        rest = &rest[list_end + 1..];
        if !gres.starts_with("gpu") || list == "N/A" {
            continue;
        }
        for range in list.split(',') {
            let (lo, hi, _) = span(range)?;
            if hi >= u64::from(MAX_GPU_INDEX) {
                return None;
            }
            out.extend(lo as u32..=hi as u32);
        }
    }
    Some(out)
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

    /// A stand-in `squeue` in `dir` answering `--json --jobs ID` as squeue does: `{"jobs":
    /// [job]}` for a job `answers` gives, else an error and exit 1 ("Invalid job id
    /// specified"); each call's arguments are appended to `dir/asked`.
    pub(crate) fn stand_in_squeue(dir: &Path, answers: &[(&str, serde_json::Value)]) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let squeue = dir.join("squeue");
        let cases: String = answers
            .iter()
            .map(|(id, job)| format!("  {id}) echo '{}' ;;\n", serde_json::json!({"jobs": [job]})))
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

    /// A running job as `squeue --json` prints it (the fields read, of the many it has).
    pub(crate) fn job(id: u64, account: &str, nodes: &str, gres: &[&str]) -> serde_json::Value {
        serde_json::json!({"job_id": id, "account": account, "user_name": "mkoch",
            "job_state": ["RUNNING"], "nodes": nodes, "gres_detail": gres})
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

    fn record(account: &str, gpus: Option<&[u32]>) -> Option<JobRecord> {
        Some(JobRecord {
            account: account.into(),
            user: "mkoch".into(),
            gpus: gpus.map(|g| g.iter().copied().collect()),
        })
    }

    /// The job's account, user and — from its node list and its GRES per node — the GPUs it
    /// holds on this node, by the name the agent has for it (or its first label).
    #[test]
    fn squeues_json_is_the_jobs_record_here() {
        let doc =
            |j: serde_json::Value| serde_json::to_vec(&serde_json::json!({"jobs": [j]})).unwrap();
        let two = doc(job(
            9,
            "physics",
            "gpu-[6-7]",
            &["gpu:a100:2(IDX:0-1)", "gpu:a100:2(IDX:2-3)"],
        ));
        assert_eq!(
            parse(&two, "9", "gpu-7").unwrap(),
            record("physics", Some(&[2, 3]))
        );
        assert_eq!(
            parse(&two, "9", "gpu-6.cluster.local").unwrap(),
            record("physics", Some(&[0, 1]))
        );
        assert_eq!(
            parse(&two, "9", "gpu-9").unwrap(),
            record("physics", None),
            "not its node"
        );
        assert_eq!(parse(&two, "8", "gpu-7").unwrap(), None, "not this job");
        let none = doc(job(9, "physics", "gpu-7", &[]));
        assert_eq!(
            parse(&none, "9", "gpu-7").unwrap(),
            record("physics", Some(&[])),
            "no GRES"
        );
        for bad in [
            doc(job(9, "phys ics", "gpu-7", &[])),
            doc(job(9, "", "gpu-7", &[])),
            br#"{"errors": []}"#.to_vec(),
            b"slurm_load_jobs error".to_vec(),
        ] {
            assert!(
                parse(&bad, "9", "gpu-7").is_err(),
                "{}",
                String::from_utf8_lossy(&bad)
            );
        }
        // Every job of a busy cluster (should squeue ignore --jobs with --json): the one asked
        // for is found among them, read one at a time.
        let all: Vec<serde_json::Value> = (1..=3000)
            .map(|i| job(i, "physics", &format!("cn{i}"), &[]))
            .collect();
        let many = serde_json::to_vec(&serde_json::json!({"meta": {}, "jobs": all, "errors": []}))
            .unwrap();
        assert_eq!(
            parse(&many, "2999", "cn2999").unwrap(),
            record("physics", Some(&[]))
        );
        let mut trailing = many.clone();
        trailing.extend_from_slice(b"{}");
        assert!(parse(&trailing, "2999", "cn2999").is_err(), "one document");
        // slurmrestd's /jobs of Slurm 21.08.5, as recorded (collector/tests/data/slurm).
        let recorded =
            include_bytes!("../../collector/tests/data/slurm/slurmrestd-v0.0.37-21.08.5.json");
        assert_eq!(
            parse(recorded, "26515966", "cs75").unwrap(),
            Some(JobRecord {
                account: "account1".into(),
                user: "user2".into(),
                gpus: Some(BTreeSet::new())
            })
        );
    }

    #[test]
    fn hostlists_expand_as_slurm_writes_them() {
        let names = |l: &str| expand_hostlist(l, 1000);
        assert_eq!(
            names("gpu-[005-006,010],cn1").unwrap(),
            ["gpu-005", "gpu-006", "gpu-010", "cn1"]
        );
        assert_eq!(
            names("r[1-2]n[01-02]").unwrap(),
            ["r1n01", "r1n02", "r2n01", "r2n02"]
        );
        assert_eq!(names("cs75").unwrap(), ["cs75"]);
        for bad in [
            "gpu-[1-",
            "gpu-1]",
            "a[2-1]",
            "a[x]",
            "a[[1]]",
            "a[1-1001]",
            "a[1-40]b[1-40]",
        ] {
            assert_eq!(names(bad), None, "{bad}");
        }
    }

    /// Random text from the alphabet of node lists and GRES entries (brackets, ranges, commas,
    /// digits, names): reading never panics, never yields more names than allowed, and never an
    /// index that is no GPU's.
    #[test]
    fn random_lists_and_entries_stay_within_bounds() {
        let mut state = 0x51u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let hostlist = b"[]-,0123456789an";
        let gres = b"gpu:()IDX,-0123456789N/A";
        for round in 0..20_000 {
            let (alphabet, len) = if round % 2 == 0 {
                (&hostlist[..], 40)
            } else {
                (&gres[..], 48)
            };
            let n = (next() % len) as usize;
            let text: String = (0..n)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize] as char)
                .collect();
            if let Some(names) = expand_hostlist(&text, 500) {
                assert!(names.len() <= 500, "{text}");
            }
            if let Some(ids) = gpu_indices(&text) {
                assert!(ids.iter().all(|i| *i < MAX_GPU_INDEX), "{text}");
            }
        }
        assert_eq!(
            expand_hostlist(&format!("{}[1-2]", "a".repeat(300)), 10),
            None
        );
        assert_eq!(
            expand_hostlist(&format!("a[{}1-2]", "0".repeat(30)), 10),
            None
        );
    }

    #[test]
    fn gres_entries_name_gpu_indices() {
        let set = |v: &[u32]| Some(v.iter().copied().collect::<BTreeSet<u32>>());
        assert_eq!(gpu_indices("gpu:2(IDX:0-1)"), set(&[0, 1]));
        assert_eq!(
            gpu_indices("gpu:a100:3(IDX:0,2-3),mps:100(IDX:N/A)"),
            set(&[0, 2, 3])
        );
        assert_eq!(gpu_indices("tmpdisk:100,gpu:1(IDX:7)"), set(&[7]));
        assert_eq!(gpu_indices("gpu:1(IDX:N/A)"), set(&[]));
        assert_eq!(gpu_indices(""), set(&[]));
        for bad in [
            "gpu:1(IDX:254)",
            "gpu:1(IDX:0",
            "gpu:2(IDX:3-1)",
            "gpu:1(IDX:x)",
        ] {
            assert_eq!(gpu_indices(bad), None, "{bad}");
        }
    }

    /// Job records through a stand-in `squeue`: asked off the caller's thread, known once
    /// answered, never the caller's wait.
    #[test]
    fn a_job_is_asked_once_and_then_known() {
        let dir = crate::scratch::fresh_dir("slurm-jobs").unwrap();
        let log = dir.join("asked");
        let squeue = stand_in_squeue(&dir, &[("884213", job(884213, "physics", "gpu-7", &[]))]);
        let jobs = JobRecords::start(&squeue, "gpu-7").expect("the stand-in runs");
        let deadline = Instant::now() + Duration::from_secs(10);
        assert_eq!(answered(&jobs, "884213"), record("physics", Some(&[])));
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
            ["--json --jobs 884213", "--json --jobs 7"]
        );
        assert!(JobRecords::start(&dir.join("no-such-squeue"), "gpu-7").is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
