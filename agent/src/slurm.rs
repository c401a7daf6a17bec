//! Slurm's own record of which job holds which GPU, so that a job holding a GPU and running
//! nothing on it is seen: a holding without a process is exactly what an idle allocation is.
//! Three sources, in this order (docs/agent.md, "Slurm"):
//!
//! - **the job's device cgroup** (cgroup v1, `task/cgroup` with `ConstrainDevices=yes`):
//!   `devices/slurm/uid_U/job_J/devices.list`, whose `c 195:N` lines are the NVIDIA devices
//!   the job may open (`/dev/nvidiaN`, minor N; 254 and 255 are nvidia-modeset and nvidiactl);
//! - **slurmctld's record** (`crate::slurm_jobs`, where `squeue` runs): the job's GRES on this
//!   node, `gpu:2(IDX:0-1)`;
//! - **the job's environment** (any cgroup version, only where neither says): `SLURM_JOB_GPUS`
//!   (batch and interactive steps) or `SLURM_STEP_GPUS` (srun steps) of a task found through
//!   the job's cgroup (`system.slice/slurmstepd.scope/job_J/…/cgroup.procs` on v2) — its user's
//!   to rewrite.
//!
//! All are Slurm's global GPU ids — the order of gres.conf's device files, `/dev/nvidia[0-N]`
//! (or AutoDetect=nvml): the device minor number — never relative to the job's cgroup as
//! `CUDA_VISIBLE_DEVICES` is.
//!
//! The scan is bounded: at most [`MAX_JOBS`] jobs and [`MAX_TASKS`] tasks tried per job.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use model::wire::v1::Snapshot;
use model::{GpuInfo, Tenant};

use crate::attribution::ProcFs;

/// The most jobs read in one scan (a node runs a handful; the bound is for a hostile tree).
pub const MAX_JOBS: usize = 1024;
/// The most tasks of one job whose environment is tried.
pub const MAX_TASKS: usize = 16;
/// The NVIDIA character devices' major number.
const NVIDIA_MAJOR: u32 = 195;
/// Minors at and above this are control devices, not GPUs.
const NVIDIA_CONTROL_MINORS: u32 = 254;

/// A job and the GPUs (device minor numbers) Slurm gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    pub job_id: String,
    pub minors: BTreeSet<u32>,
    /// A task of the job, for its user and account; None when none could be read.
    pub pid: Option<u32>,
    /// The job's uid from its cgroup path (`uid_U`, cgroup v1).
    pub uid: Option<u32>,
    /// The job as a tenant, resolved when the holding is read (not on every sample).
    pub tenant: Tenant,
}

/// The jobs under `cgroup_root` (usually `/sys/fs/cgroup`) that hold GPUs.
pub fn holdings(cgroup_root: &Path, procfs: &ProcFs) -> Vec<Holding> {
    let mut out: Vec<Holding> = Vec::new();
    for (job_id, dir, uid) in job_dirs(cgroup_root).into_iter().take(MAX_JOBS) {
        let from_cgroup = device_minors(&dir);
        let pid = tasks(&dir)
            .into_iter()
            .take(MAX_TASKS)
            .find(|pid| procfs.environ(*pid, "SLURM_JOB_ID").as_deref() == Some(&job_id));
        // The device list is root's; without one slurmctld's record, and only where it says
        // nothing a task's environment (its user's to rewrite).
        let minors = match (from_cgroup, procfs.job_gpus(&job_id)) {
            (Some(m), _) | (None, Some(m)) => m,
            (None, None) => pid.map(|p| env_gpus(procfs, p)).unwrap_or_default(),
        };
        if minors.is_empty() {
            continue;
        }
        // A hybrid cgroup setup shows the job in both trees; the v1 device list came first.
        if out.iter().any(|h| h.job_id == job_id) {
            continue;
        }
        let tenant = pid
            .and_then(|pid| procfs.tenant(pid))
            .filter(|t| t.key == Tenant::slurm_key(&job_id))
            .unwrap_or_else(|| job_tenant(&job_id, uid, procfs));
        out.push(Holding {
            job_id,
            minors,
            pid,
            uid,
            tenant,
        });
    }
    out
}

/// An allocation of a whole GPU for each held GPU that no allocation names for the job yet,
/// and the job's tenant. `gpus` are the node's GPUs by device minor number; a MIG-enabled GPU is
/// left out (Slurm hands out MIG instances through the `nvidia-caps` devices, not read here).
pub fn allocate(
    snap: &mut Snapshot,
    tenants: &mut HashMap<String, Tenant>,
    held: &[Holding],
    gpus: &[(u32, &GpuInfo)],
) {
    for h in held {
        let key = Tenant::slurm_key(&h.job_id);
        let mut allocated = false;
        for minor in &h.minors {
            let Some((_, g)) = gpus.iter().find(|(m, g)| m == minor && !g.mig_enabled) else {
                continue;
            };
            if snap
                .allocations
                .iter()
                .any(|a| a.gpu_uuid == g.uuid && a.tenant == key)
            {
                continue;
            }
            snap.allocations.push(model::Allocation {
                gpu_uuid: g.uuid.clone(),
                tenant: key.clone(),
                gi_id: None,
                ci_id: None,
                replica: None,
                share: 1.0,
            });
            allocated = true;
        }
        if allocated {
            tenants.entry(key).or_insert_with(|| h.tenant.clone());
        }
    }
}

/// The tenant of a job known only from its cgroup (and slurmctld's record, where `squeue` runs).
fn job_tenant(job_id: &str, uid: Option<u32>, procfs: &ProcFs) -> Tenant {
    let (account, job_user) = procfs.job_record(job_id, None);
    Tenant {
        key: Tenant::slurm_key(job_id),
        kind: model::TenantKind::SlurmJob,
        namespace: None,
        pod: None,
        container: None,
        pod_uid: None,
        job_id: Some(job_id.to_owned()),
        user: uid
            .and_then(|u| procfs.user_name(u))
            .map(str::to_owned)
            .or(job_user),
        account,
        uid,
    }
}

/// Whether Slurm keeps job cgroups under `root` (either tree): whether it runs jobs here.
pub fn runs_jobs(root: &Path) -> bool {
    root.join("devices/slurm").is_dir() || root.join("system.slice/slurmstepd.scope").is_dir()
}

/// (job id, directory, uid) of every job cgroup: cgroup v1's devices hierarchy first (it has
/// the device list), then the v2 unified tree.
fn job_dirs(root: &Path) -> Vec<(String, PathBuf, Option<u32>)> {
    let mut out = Vec::new();
    for user in subdirs(&root.join("devices/slurm")) {
        let uid = name_after(&user, "uid_").and_then(|u| u.parse().ok());
        for job in subdirs(&user) {
            if let Some(id) = job_id(&job) {
                out.push((id, job, uid));
            }
        }
    }
    for job in subdirs(&root.join("system.slice/slurmstepd.scope")) {
        if let Some(id) = job_id(&job) {
            out.push((id, job, None));
        }
    }
    out
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .take(MAX_JOBS)
        .collect();
    dirs.sort();
    dirs
}

fn name_after<'p>(path: &'p Path, prefix: &str) -> Option<&'p str> {
    path.file_name()?.to_str()?.strip_prefix(prefix)
}

/// `job_1234` → `1234` (a job id is a 32-bit number, array tasks included).
fn job_id(dir: &Path) -> Option<String> {
    let id = name_after(dir, "job_")?;
    crate::attribution::is_job_id(id).then(|| id.to_owned())
}

/// The GPU minors a cgroup v1 device list allows; None where there is no list, or it allows
/// every device (`a *:* rwm`: the job is not constrained, so the list says nothing).
fn device_minors(job: &Path) -> Option<BTreeSet<u32>> {
    let text = std::fs::read_to_string(job.join("devices.list")).ok()?;
    let mut minors = BTreeSet::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(kind), Some(numbers)) = (f.next(), f.next()) else {
            continue;
        };
        if kind == "a" {
            return None;
        }
        let Some((major, minor)) = numbers.split_once(':') else {
            continue;
        };
        if kind == "c"
            && major.parse() == Ok(NVIDIA_MAJOR)
            && let Ok(minor) = minor.parse::<u32>()
            && minor < NVIDIA_CONTROL_MINORS
        {
            minors.insert(minor);
        }
    }
    Some(minors)
}

/// The job's tasks: `cgroup.procs` of the job and of its steps, down to the v2 layout's
/// `step_*/user/task_*`.
fn tasks(job: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    let mut dirs = vec![(job.to_owned(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        if pids.len() >= MAX_TASKS {
            break;
        }
        if depth < 3 {
            dirs.extend(subdirs(&dir).into_iter().map(|d| (d, depth + 1)));
        }
    }
    pids
}

/// `SLURM_JOB_GPUS` (else `SLURM_STEP_GPUS`) of a task: comma-separated global GPU ids.
fn env_gpus(procfs: &ProcFs, pid: u32) -> BTreeSet<u32> {
    let list = procfs
        .environ(pid, "SLURM_JOB_GPUS")
        .or_else(|| procfs.environ(pid, "SLURM_STEP_GPUS"))
        .unwrap_or_default();
    list.split(',')
        .filter_map(|id| id.trim().parse::<u32>().ok())
        .filter(|id| *id < NVIDIA_CONTROL_MINORS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn environ(proc: &Path, pid: u32, vars: &[(&str, &str)]) {
        let text: String = vars.iter().map(|(k, v)| format!("{k}={v}\0")).collect();
        write(&proc.join(pid.to_string()).join("environ"), &text);
    }

    #[test]
    fn a_v1_device_list_names_the_jobs_gpus() {
        let d = crate::scratch::fresh_dir("slurm").unwrap();
        let (cg, proc) = (d.join("cgroup"), d.join("proc"));
        // As slurmstepd leaves it: the job's own devices and /dev/null & co. allowed.
        write(
            &cg.join("devices/slurm/uid_1000/job_4242/devices.list"),
            "c 1:3 rwm\nc 195:255 rwm\nc 195:254 rwm\nc 195:2 rwm\nc 195:3 rwm\nc 511:0 rwm\n",
        );
        write(
            &cg.join("devices/slurm/uid_1000/job_4242/step_batch/cgroup.procs"),
            "9001\n",
        );
        environ(
            &proc,
            9001,
            &[("SLURM_JOB_ID", "4242"), ("SLURM_JOB_GPUS", "0")],
        );
        let held: Vec<_> = holdings(&cg, &ProcFs::new(&proc, None))
            .into_iter()
            .map(|h| (h.job_id, h.minors, h.pid, h.uid))
            .collect();
        assert_eq!(
            held,
            vec![(
                "4242".to_owned(),
                BTreeSet::from([2, 3]),
                Some(9001),
                Some(1000)
            )],
            "the device list wins over the environment, control devices are not GPUs"
        );
        std::fs::remove_dir_all(d).unwrap();
    }

    /// On cgroup v2 a task's environment says account `finance` and GPU 0; slurmctld says the
    /// job runs under `physics` on GPUs 1 and 2 here. Where `squeue` runs, slurmctld's word is
    /// the job's; only without one is the environment read.
    #[test]
    fn a_task_does_not_choose_its_jobs_account_or_gpus_where_squeue_runs() {
        let d = crate::scratch::fresh_dir("slurm").unwrap();
        let (cg, proc) = (d.join("cgroup"), d.join("proc"));
        let job = cg.join("system.slice/slurmstepd.scope/job_4242");
        write(&job.join("step_batch/user/task_0/cgroup.procs"), "9001\n");
        write(
            &proc.join("9001/cgroup"),
            "0::/system.slice/slurmstepd.scope/job_4242/step_batch/user/task_0\n",
        );
        environ(
            &proc,
            9001,
            &[
                ("SLURM_JOB_ID", "4242"),
                ("SLURM_JOB_GPUS", "0"),
                ("SLURM_JOB_ACCOUNT", "finance"),
                ("SLURM_JOB_USER", "mkoch"),
            ],
        );
        let held = |procfs: &ProcFs| {
            let held = holdings(&cg, procfs);
            assert_eq!(held.len(), 1, "{held:?}");
            (held[0].tenant.account.clone(), held[0].minors.clone())
        };
        let mut procfs = ProcFs::new(&proc, None);
        assert_eq!(
            held(&procfs),
            (Some("finance".to_owned()), BTreeSet::from([0])),
            "no squeue"
        );
        let answer = crate::slurm_jobs::tests::job(
            4242,
            "physics",
            "gpu-[6-7]",
            &["gpu:1(IDX:0)", "gpu:2(IDX:1-2)"],
        );
        let squeue = crate::slurm_jobs::tests::stand_in_squeue(&d, &[("4242", answer)]);
        let jobs = crate::slurm_jobs::JobRecords::start(&squeue, "gpu-7").unwrap();
        procfs.set_job_records(Some(jobs.clone()));
        assert!(crate::slurm_jobs::tests::answered(&jobs, "4242").is_some());
        assert_eq!(
            held(&procfs),
            (Some("physics".to_owned()), BTreeSet::from([1, 2]))
        );
        assert_eq!(
            procfs.tenant(9001).and_then(|t| t.account).as_deref(),
            Some("physics"),
            "the job's processes too"
        );
        assert!(runs_jobs(&cg));
        assert!(!runs_jobs(&d.join("proc")));
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn on_cgroup_v2_the_environment_of_a_task_names_them() {
        let d = crate::scratch::fresh_dir("slurm").unwrap();
        let (cg, proc) = (d.join("cgroup"), d.join("proc"));
        let job = cg.join("system.slice/slurmstepd.scope/job_77");
        write(&job.join("step_batch/user/task_0/cgroup.procs"), "501\n");
        write(&job.join("step_0/user/task_0/cgroup.procs"), "502\n");
        environ(
            &proc,
            501,
            &[
                ("SLURM_JOB_ID", "77"),
                ("SLURM_JOB_GPUS", "1,3"),
                ("CUDA_VISIBLE_DEVICES", "0,1"),
            ],
        );
        environ(
            &proc,
            502,
            &[("SLURM_JOB_ID", "77"), ("SLURM_STEP_GPUS", "1")],
        );
        // A job without GPUs, and a directory that is not a job.
        write(
            &cg.join("system.slice/slurmstepd.scope/job_78/step_batch/user/task_0/cgroup.procs"),
            "600\n",
        );
        environ(&proc, 600, &[("SLURM_JOB_ID", "78")]);
        write(
            &cg.join("system.slice/slurmstepd.scope/system/cgroup.procs"),
            "1\n",
        );
        let held = holdings(&cg, &ProcFs::new(&proc, None));
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(held[0].job_id, "77");
        assert_eq!(
            held[0].minors,
            BTreeSet::from([1, 3]),
            "global ids, not CUDA_VISIBLE_DEVICES"
        );
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn an_unconstrained_or_unreadable_job_falls_back_or_is_skipped() {
        let d = crate::scratch::fresh_dir("slurm").unwrap();
        let (cg, proc) = (d.join("cgroup"), d.join("proc"));
        write(
            &cg.join("devices/slurm/uid_7/job_5/devices.list"),
            "a *:* rwm\n",
        );
        write(&cg.join("devices/slurm/uid_7/job_5/cgroup.procs"), "70\n");
        environ(&proc, 70, &[("SLURM_JOB_ID", "5"), ("SLURM_JOB_GPUS", "0")]);
        // A task whose environment belongs to another job is not taken for this one.
        write(
            &cg.join("devices/slurm/uid_7/job_6/devices.list"),
            "a *:* rwm\n",
        );
        write(&cg.join("devices/slurm/uid_7/job_6/cgroup.procs"), "71\n");
        environ(
            &proc,
            71,
            &[("SLURM_JOB_ID", "999"), ("SLURM_JOB_GPUS", "1")],
        );
        write(
            &cg.join("devices/slurm/uid_7/job_x1/devices.list"),
            "c 195:0 rwm\n",
        );
        let held = holdings(&cg, &ProcFs::new(&proc, None));
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(
            (held[0].job_id.as_str(), &held[0].minors),
            ("5", &BTreeSet::from([0]))
        );
        std::fs::remove_dir_all(d).unwrap();
    }
}
