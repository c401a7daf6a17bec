//! Who owns a GPU process: its cgroup says which Kubernetes pod and container or which Slurm
//! job it runs in; otherwise it belongs to the host user that runs it. Everything is read
//! from a proc tree (`--proc-root`, default `/proc`), so tests run on fixture trees. The agent
//! needs the host PID namespace to see other containers' processes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use model::Tenant;

/// What a process's cgroup says about its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    Pod {
        pod_uid: String,
        container_id: Option<String>,
    },
    SlurmJob {
        job_id: String,
    },
    /// Neither: attribute to the process's user.
    Host,
}

/// Reads the cgroup file's text (v1 or v2) and finds the owner. A path inside a systemd user
/// manager's tree (`…/user@1000.service/…`) names no pod and no job: systemd delegates that
/// tree to its user, who may create any cgroup there — `systemd-run --user --scope
/// --unit=slurm-4242` or a `kubepods.slice/…-pod<uid>.slice` — and so claim another's job or
/// pod. Its processes are their user's.
pub fn owner_from_cgroup(text: &str) -> Owner {
    let paths: Vec<&str> = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .collect();
    for path in &paths {
        if let Some(o) = kubepods(path) {
            return o;
        }
    }
    for path in &paths {
        if let Some(job_id) = slurm_job(path) {
            return Owner::SlurmJob { job_id };
        }
    }
    Owner::Host
}

/// Whether a path's segment is a systemd user manager's (`user@<uid>.service`), below which
/// its user names the cgroups.
fn is_user_manager(seg: &str) -> bool {
    seg.strip_prefix("user@")
        .and_then(|s| s.strip_suffix(".service"))
        .is_some_and(|uid| !uid.is_empty() && uid.bytes().all(|b| b.is_ascii_digit()))
}

/// `/kubepods/burstable/pod<uid>/<id>` (cgroupfs driver) or
/// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope`
/// (systemd driver); guaranteed pods have no QoS level; any runtime prefix.
fn kubepods(path: &str) -> Option<Owner> {
    if !path.contains("kubepods") {
        return None;
    }
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if segments.iter().any(|s| is_user_manager(s)) {
        return None;
    }
    let (pos, pod_uid) = segments.iter().enumerate().find_map(|(i, seg)| {
        let seg = seg.strip_suffix(".slice").unwrap_or(seg);
        // systemd: kubepods-<qos>-pod<uid with _>; cgroupfs: pod<uid>
        let idx = seg.rfind("pod")?;
        let uid = &seg[idx + 3..];
        // A Kubernetes UID is an RFC 4122 UUID: 32 hex digits, with or without its dashes.
        let plausible = (32..=36).contains(&uid.len())
            && uid
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == '-' || c == '_');
        plausible.then(|| (i, uid.replace('_', "-")))
    })?;
    let container_id = segments.get(pos + 1).and_then(|seg| container_id(seg));
    Some(Owner::Pod {
        pod_uid,
        container_id,
    })
}

/// The container id in the last cgroup segment, whatever the runtime calls it.
fn container_id(seg: &str) -> Option<String> {
    let seg = seg.strip_suffix(".scope").unwrap_or(seg);
    if seg.starts_with("crio-conmon-") {
        return None;
    }
    let id = [
        "cri-containerd-",
        "containerd-",
        "crio-",
        "docker-",
        "cri-o-",
    ]
    .iter()
    .find_map(|p| seg.strip_prefix(p))
    .unwrap_or(seg);
    (id.len() >= 12 && id.chars().all(|c| c.is_ascii_hexdigit())).then(|| id.to_owned())
}

/// `/slurm/uid_1000/job_1234/step_0/task_0`, `/system.slice/slurmstepd.scope/job_1234/…`
/// or a `slurm-1234.scope` unit.
fn slurm_job(path: &str) -> Option<String> {
    if path.split('/').any(is_user_manager) {
        return None;
    }
    let under_slurm = path
        .split('/')
        .any(|s| s == "slurm" || s.starts_with("slurmstepd"));
    for seg in path.split('/') {
        if let Some(id) = seg.strip_prefix("job_")
            && is_job_id(id)
            && under_slurm
        {
            return Some(id.to_owned());
        }
        if let Some(id) = seg
            .strip_prefix("slurm-")
            .and_then(|s| s.strip_suffix(".scope"))
            && is_job_id(id)
        {
            return Some(id.to_owned());
        }
    }
    None
}

/// Slurm numbers jobs with 32-bit integers: decimal digits that fit one.
pub(crate) fn is_job_id(id: &str) -> bool {
    id.bytes().all(|b| b.is_ascii_digit()) && id.parse::<u32>().is_ok()
}

/// A proc tree and the system's user names.
#[derive(Debug, Clone)]
pub struct ProcFs {
    root: PathBuf,
    boot_ms: Option<i64>,
    users: HashMap<u32, String>,
    /// Slurm jobs' accounts and users as slurmctld records them, where `squeue` runs.
    jobs: Option<crate::slurm_jobs::JobRecords>,
}

/// How much of a process's environment is read. Its owner decides its size — up to 6 MiB
/// with a large stack limit — and a Slurm task's is read every cycle where `squeue` does not
/// answer: unbounded, one user's processes would cost the agent megabytes read each second.
/// 1 MiB holds any environment in real use (module systems grow them to tens of KiB); a
/// variable past it is one its user pushed there, and could have rewritten anyway.
pub const MAX_ENVIRON_BYTES: u64 = 1024 * 1024;

/// Linux reports process start times in clock ticks of 1/100 s on every mainstream platform.
const CLOCK_TICKS_PER_S: i64 = 100;

impl ProcFs {
    /// `root` is usually `/proc`; `passwd` is `/etc/passwd` (user names; optional).
    pub fn new(root: &Path, passwd: Option<&Path>) -> ProcFs {
        let boot_ms = std::fs::read_to_string(root.join("stat"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("btime "))
                    .and_then(|v| v.trim().parse::<i64>().ok())
                    .map(|secs| secs * 1000)
            });
        let users = passwd
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|text| parse_passwd(&text))
            .unwrap_or_default();
        ProcFs {
            root: root.to_owned(),
            boot_ms,
            users,
            jobs: None,
        }
    }

    /// Slurm jobs' accounts and users from slurmctld's records instead of their tasks'
    /// environments ([`crate::slurm_jobs`]).
    pub fn set_job_records(&mut self, jobs: Option<crate::slurm_jobs::JobRecords>) {
        self.jobs = jobs;
    }

    /// Slurm job `job_id`'s account and user: slurmctld's record where `squeue` runs (neither
    /// until it has answered), else what the environment of its task `pid` says — slurmstepd
    /// puts them into every task's, and the task's user may rewrite them: a value that is not
    /// a Slurm name ([`model::names::is_slurm_name`], as for squeue's answers) is no value.
    pub fn job_record(&self, job_id: &str, pid: Option<u32>) -> (Option<String>, Option<String>) {
        match &self.jobs {
            Some(jobs) => jobs
                .get(job_id)
                .map_or((None, None), |r| (Some(r.account), Some(r.user))),
            None => match pid {
                Some(pid) => {
                    let env = self.environment(pid);
                    let name = |var| {
                        env.as_deref()
                            .and_then(|e| lookup(e, var))
                            .filter(|v| model::names::is_slurm_name(v))
                    };
                    (name("SLURM_JOB_ACCOUNT"), name("SLURM_JOB_USER"))
                }
                None => (None, None),
            },
        }
    }

    /// The GPUs (device minors) Slurm job `job_id` holds on this node as slurmctld records
    /// them; None where `squeue` does not run, has not answered, or does not say.
    pub fn job_gpus(&self, job_id: &str) -> Option<std::collections::BTreeSet<u32>> {
        self.jobs.as_ref()?.get(job_id)?.gpus
    }

    /// When the process started (ms since the epoch), from field 22 of /proc/PID/stat.
    pub fn start_time_ms(&self, pid: u32) -> Option<i64> {
        let stat = std::fs::read_to_string(self.root.join(pid.to_string()).join("stat")).ok()?;
        // The command name (field 2) may contain spaces and parentheses: skip past the last ')'.
        let rest = &stat[stat.rfind(')')? + 1..];
        let ticks: i64 = rest.split_whitespace().nth(19)?.parse().ok()?;
        Some(self.boot_ms? + ticks * 1000 / CLOCK_TICKS_PER_S)
    }

    /// The real uid from /proc/PID/status.
    pub fn uid(&self, pid: u32) -> Option<u32> {
        let status =
            std::fs::read_to_string(self.root.join(pid.to_string()).join("status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    pub fn owner(&self, pid: u32) -> Option<Owner> {
        let text = std::fs::read_to_string(self.root.join(pid.to_string()).join("cgroup")).ok()?;
        Some(owner_from_cgroup(&text))
    }

    /// A variable from /proc/PID/environ (readable for the agent as root in the host PID
    /// namespace), among its first [`MAX_ENVIRON_BYTES`].
    pub fn environ(&self, pid: u32, var: &str) -> Option<String> {
        lookup(&self.environment(pid)?, var)
    }

    /// The first [`MAX_ENVIRON_BYTES`] of /proc/PID/environ.
    fn environment(&self, pid: u32) -> Option<Vec<u8>> {
        use std::io::Read;
        let file = std::fs::File::open(self.root.join(pid.to_string()).join("environ")).ok()?;
        let mut raw = Vec::new();
        file.take(MAX_ENVIRON_BYTES).read_to_end(&mut raw).ok()?;
        Some(raw)
    }

    pub fn user_name(&self, uid: u32) -> Option<&str> {
        self.users.get(&uid).map(String::as_str)
    }

    /// The tenant a process belongs to, or None when its /proc entry cannot be read (the
    /// process has exited, or the agent is not in the host PID namespace).
    pub fn tenant(&self, pid: u32) -> Option<Tenant> {
        self.tenant_of(pid, self.owner(pid)?, self.uid(pid))
    }

    /// The tenant of process `pid`, whose cgroup says `owner` and whose real uid is `uid`
    /// (as [`ProcFs::owner`] and [`ProcFs::uid`] read them); None for a host process whose
    /// uid is unknown.
    pub fn tenant_of(&self, pid: u32, owner: Owner, uid: Option<u32>) -> Option<Tenant> {
        let user = uid.and_then(|u| self.user_name(u)).map(str::to_owned);
        Some(match owner {
            Owner::Pod {
                pod_uid,
                container_id,
            } => {
                // Pod and container names come from the kubelet; until then, the container
                // is named by its id.
                let container =
                    container_id.map_or_else(|| "unknown".to_owned(), |c| c[..12].to_owned());
                Tenant {
                    key: Tenant::pod_key(&pod_uid, &container),
                    kind: model::TenantKind::Pod,
                    namespace: None,
                    pod: None,
                    container: Some(container),
                    pod_uid: Some(pod_uid),
                    job_id: None,
                    user: None,
                    account: None,
                    uid: None,
                }
            }
            Owner::SlurmJob { job_id } => {
                let (account, job_user) = self.job_record(&job_id, Some(pid));
                Tenant {
                    key: Tenant::slurm_key(&job_id),
                    kind: model::TenantKind::SlurmJob,
                    namespace: None,
                    pod: None,
                    container: None,
                    pod_uid: None,
                    job_id: Some(job_id),
                    user: user.or(job_user),
                    account,
                    uid,
                }
            }
            Owner::Host => Tenant::host_user(uid?, user),
        })
    }
}

/// `var`'s value in an environment block (`NAME=value` entries separated by NULs).
fn lookup(environment: &[u8], var: &str) -> Option<String> {
    environment.split(|b| *b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        kv.strip_prefix(var)?.strip_prefix('=').map(str::to_owned)
    })
}

fn parse_passwd(text: &str) -> HashMap<u32, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let uid = f.nth(1)?.parse().ok()?;
            Some((uid, name.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f8c3b2a-6d1e-4c7f-9a25-3e4b5c6d7e8f";
    const CID: &str = "3f1a9c0e7b2d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f";

    fn pod(container: Option<&str>) -> Owner {
        Owner::Pod {
            pod_uid: UID.into(),
            container_id: container.map(str::to_owned),
        }
    }

    #[test]
    fn cgroup_v1_cgroupfs_every_qos_class() {
        for qos in ["", "burstable/", "besteffort/"] {
            let text = format!(
                "12:memory:/kubepods/{qos}pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/{qos}pod{UID}/{CID}\n"
            );
            assert_eq!(owner_from_cgroup(&text), pod(Some(CID)), "{qos}");
        }
    }

    #[test]
    fn cgroup_v2_systemd_with_every_runtime() {
        let u = UID.replace('-', "_");
        for (slice, runtime) in [
            (
                format!("kubepods.slice/kubepods-pod{u}.slice"),
                "cri-containerd",
            ),
            (
                format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice"),
                "crio",
            ),
            (
                format!(
                    "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice"
                ),
                "docker",
            ),
        ] {
            let text = format!("0::/{slice}/{runtime}-{CID}.scope\n");
            assert_eq!(owner_from_cgroup(&text), pod(Some(CID)), "{runtime}");
        }
        // CRI-O's conmon process is the pod's, but no container's.
        let text = format!("0::/kubepods.slice/kubepods-pod{u}.slice/crio-conmon-{CID}.scope\n");
        assert_eq!(owner_from_cgroup(&text), pod(None));
    }

    #[test]
    fn cgroup_v2_cgroupfs_containerd() {
        let text = format!("0::/kubepods/burstable/pod{UID}/{CID}\n");
        assert_eq!(owner_from_cgroup(&text), pod(Some(CID)));
    }

    #[test]
    fn slurm_forms() {
        let job = |id: &str| Owner::SlurmJob { job_id: id.into() };
        assert_eq!(
            owner_from_cgroup("4:memory:/slurm/uid_1000/job_123456/step_0/task_0\n"),
            job("123456")
        );
        assert_eq!(
            owner_from_cgroup("0::/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0\n"),
            job("42")
        );
        assert_eq!(
            owner_from_cgroup("0::/system.slice/slurm-7788.scope\n"),
            job("7788")
        );
    }

    #[test]
    fn everything_else_is_the_host_user() {
        assert_eq!(
            owner_from_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n"),
            Owner::Host
        );
        assert_eq!(
            owner_from_cgroup(&format!("0::/system.slice/docker-{CID}.scope\n")),
            Owner::Host
        );
        assert_eq!(owner_from_cgroup("0::/job_12/not-slurm\n"), Owner::Host);
        assert_eq!(owner_from_cgroup(""), Owner::Host);
    }

    /// A user's own systemd manager tree is theirs to name: what it holds is no job and no
    /// pod, whatever the cgroups there are called. The same names outside it still are.
    #[test]
    fn a_users_own_cgroups_claim_no_job_and_no_pod() {
        let mine = "/user.slice/user-1000.slice/user@1000.service";
        for path in [
            format!("{mine}/app.slice/slurm-4242.scope"),
            format!("{mine}/slurm/uid_1000/job_4242/step_0"),
            format!(
                "{mine}/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CID}.scope",
                UID.replace('-', "_")
            ),
        ] {
            assert_eq!(
                owner_from_cgroup(&format!("0::{path}\n")),
                Owner::Host,
                "{path}"
            );
        }
        // cgroup v1: the name=systemd hierarchy in the user's tree, the controllers' paths
        // where slurmstepd put the task; those say.
        let v1 = format!(
            "12:memory:/slurm/uid_1000/job_4242/step_0/task_0\n1:name=systemd:{mine}/kubepods/pod{UID}/{CID}\n"
        );
        assert_eq!(
            owner_from_cgroup(&v1),
            Owner::SlurmJob {
                job_id: "4242".into()
            }
        );
        assert_eq!(
            owner_from_cgroup("0::/system.slice/slurm-4242.scope\n"),
            Owner::SlurmJob {
                job_id: "4242".into()
            }
        );
    }

    /// An agent in a cgroup namespace of its own (containerd's default on cgroup v2) reads
    /// other pods' and users' paths relative to its own cgroup: the same rules hold.
    #[test]
    fn paths_relative_to_the_agents_cgroup_namespace() {
        let uid_ = UID.replace('-', "_");
        let other_pod = format!(
            "0::/../../../kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice/cri-containerd-{CID}.scope\n"
        );
        assert_eq!(owner_from_cgroup(&other_pod), pod(Some(CID)));
        let users_own = format!(
            "0::/../../../../user.slice/user-1000.slice/user@1000.service/app.slice/kubepods-pod{uid_}.slice\n"
        );
        assert_eq!(owner_from_cgroup(&users_own), Owner::Host);
    }

    /// Names no kubelet or slurmstepd writes are no pod and no job: a UID longer than a UUID,
    /// a job id past Slurm's 32 bits.
    #[test]
    fn cgroup_names_past_their_forms_are_the_host_user() {
        let long_uid = "0123456789abcdef".repeat(15);
        assert_eq!(
            owner_from_cgroup(&format!("0::/kubepods/burstable/pod{long_uid}/{CID}\n")),
            Owner::Host
        );
        assert_eq!(
            owner_from_cgroup("0::/slurm/uid_1000/job_4294967296/step_0\n"),
            Owner::Host
        );
        assert_eq!(
            owner_from_cgroup(&format!(
                "0::/system.slice/slurm-{}.scope\n",
                "9".repeat(200)
            )),
            Owner::Host
        );
        assert_eq!(
            owner_from_cgroup("0::/slurm/uid_1000/job_4294967295/step_0\n"),
            Owner::SlurmJob {
                job_id: "4294967295".into()
            }
        );
    }

    #[test]
    fn a_fixture_proc_tree() {
        let root = crate::scratch::fresh_dir("proc").unwrap();
        std::fs::create_dir_all(root.join("4242")).unwrap();
        std::fs::write(root.join("stat"), "cpu 1 2 3\nbtime 1790000000\n").unwrap();
        std::fs::write(root.join("4242/stat"), "4242 (python (train)) S 1 4242 4242 0 -1 4194560 1 0 0 0 5 6 0 0 20 0 8 0 123456 0 0\n").unwrap();
        std::fs::write(
            root.join("4242/status"),
            "Name:\tpython\nUid:\t1001\t1001\t1001\t1001\n",
        )
        .unwrap();
        std::fs::write(
            root.join("4242/cgroup"),
            "0::/user.slice/user-1001.slice/session-3.scope\n",
        )
        .unwrap();
        std::fs::write(
            root.join("passwd"),
            "root:x:0:0:root:/root:/bin/bash\nalice:x:1001:1001::/home/alice:/bin/bash\n",
        )
        .unwrap();
        let p = ProcFs::new(&root, Some(&root.join("passwd")));
        assert_eq!(p.start_time_ms(4242), Some(1_790_000_000_000 + 1_234_560));
        let t = p.tenant(4242).unwrap();
        assert_eq!(
            (t.key.as_str(), t.user.as_deref()),
            ("host/1001", Some("alice"))
        );
        assert_eq!(p.tenant(9999), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// Cgroup files put together at random from the pieces kubelets, slurmstepd and users
    /// write (a user names cgroups in their own tree): reading never panics, a pod's UID and
    /// container id and a job's id keep their forms, the keys made of them are names, and a
    /// file whose every path lies in a user's own tree names no pod and no job.
    #[test]
    fn random_cgroup_files_keep_the_forms() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let pieces: &[&str] = &[
            "/",
            "/",
            "/",
            "kubepods",
            "kubepods.slice",
            "kubepods-burstable-pod",
            "pod",
            "burstable",
            ".slice",
            ".scope",
            "cri-containerd-",
            "crio-",
            "crio-conmon-",
            "slurm",
            "slurmstepd.scope",
            "job_",
            "slurm-",
            "step_0",
            "user@1000.service",
            "user@.service",
            "user-1000.slice",
            "_",
            "-",
            "@",
            " ",
            "\u{7}",
            "é",
            "\n0::",
            "\n12:memory:",
            "\n1:name=systemd:",
        ];
        let hex = b"0123456789abcdef";
        let uid_ = UID.replace('-', "_");
        // What kubelets and slurmstepd write, for half the files to start from.
        let templates = [
            format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/cri-containerd-{CID}.scope"
            ),
            format!("0::/kubepods/besteffort/pod{UID}/{CID}"),
            "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0".to_owned(),
            "12:memory:/slurm/uid_1000/job_4242/step_0/task_0".to_owned(),
            "0::/system.slice/slurm-4242.scope".to_owned(),
        ];
        let (mut pods, mut jobs) = (0, 0);
        for round in 0..50_000 {
            let mut text = if round % 2 == 0 {
                templates[(next() % templates.len() as u64) as usize].clone()
            } else {
                String::from("0::")
            };
            for _ in 0..(next() % 6) {
                let piece = match next() % 4 {
                    0 => {
                        let n = next() % 70;
                        (0..n)
                            .map(|_| hex[(next() % 16) as usize] as char)
                            .collect()
                    }
                    1 => (next() % 10_000_000_000).to_string(),
                    _ => pieces[(next() % pieces.len() as u64) as usize].to_owned(),
                };
                // Inserted at a random place (a character boundary), or cut out from one.
                let mut at = (next() % (text.len() as u64 + 1)) as usize;
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                if next() % 4 == 0 {
                    let mut end = (at + (next() % 40) as usize).min(text.len());
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.replace_range(at..end, "");
                } else {
                    text.insert_str(at, &piece);
                }
            }
            let key = match owner_from_cgroup(&text) {
                Owner::Pod {
                    pod_uid,
                    container_id,
                } => {
                    assert!((32..=36).contains(&pod_uid.len()), "{text:?}");
                    assert!(
                        pod_uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'),
                        "{text:?}"
                    );
                    let container = container_id.map_or("unknown".to_owned(), |c| {
                        assert!(c.len() >= 12 && c.bytes().all(|b| b.is_ascii_hexdigit()));
                        c[..12].to_owned()
                    });
                    pods += 1;
                    Tenant::pod_key(&pod_uid, &container)
                }
                Owner::SlurmJob { job_id } => {
                    assert!(job_id.parse::<u32>().is_ok(), "{text:?}");
                    jobs += 1;
                    Tenant::slurm_key(&job_id)
                }
                Owner::Host => continue,
            };
            assert!(model::wire::v1::is_name(&key), "{key:?} of {text:?}");
            let paths = text.lines().filter_map(|l| l.splitn(3, ':').nth(2));
            assert!(
                !paths.into_iter().all(|p| p.split('/').any(is_user_manager)),
                "{text:?} is all a user's own tree"
            );
        }
        // The files reach both forms often, not by luck.
        assert!(pods > 5_000 && jobs > 5_000, "{pods} pods, {jobs} jobs");
    }

    /// A process's environment is its owner's to grow: only its first MiB is read.
    #[test]
    fn an_environment_is_read_up_to_its_bound() {
        let root = crate::scratch::fresh_dir("environ").unwrap();
        std::fs::create_dir_all(root.join("7")).unwrap();
        let padding = format!("PAD={}\0", "x".repeat(MAX_ENVIRON_BYTES as usize));
        std::fs::write(
            root.join("7/environ"),
            format!("SLURM_JOB_ID=42\0{padding}SLURM_JOB_ACCOUNT=late\0"),
        )
        .unwrap();
        let p = ProcFs::new(&root, None);
        assert_eq!(p.environ(7, "SLURM_JOB_ID").as_deref(), Some("42"));
        assert_eq!(p.environ(7, "SLURM_JOB_ACCOUNT"), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
