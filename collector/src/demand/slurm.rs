//! Slurm's waiting work: the jobs slurmrestd lists (`GET /slurm/<version>/jobs`, the same
//! document `squeue --json` prints) that are PENDING with a GPU request. Held jobs
//! (`hold`, `JobHeld*`) wait for a person, not for GPUs: they are counted apart and not stored.
//! Both shapes Slurm has used are read: plain numbers and states (v0.0.37–v0.0.39) and the
//! `{set, infinite, number}` numbers and state lists of v0.0.40 on.

use std::collections::BTreeMap;

use serde_json::Value;
use store::waiting::WaitingRecord;

use super::pods::{MAX_MESSAGE, Waiter, reason_and_message};
use super::settings::SlurmSettings;

/// The most GPUs one job may ask for; more is refused as outside the domain.
pub const MAX_GPUS: i64 = 65_536;
/// The largest slurmrestd answer read (about 20,000 jobs of v0.0.39's ~3 KiB each).
pub const MAX_BODY: usize = 64 * 1024 * 1024;

/// What one listed job is to the demand poll.
#[derive(Debug, PartialEq)]
pub enum Job {
    /// Pending with a GPU request: its waiting records.
    Waiting(Vec<WaitingRecord>),
    /// Pending but held: waits for a person.
    Held,
    /// Running, finished, or asking for no GPU.
    NotWaiting,
}

/// A Slurm number: plain, or `{set, infinite, number}` (unset and infinite read as none).
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Object(o) => {
            let set = o.get("set").and_then(Value::as_bool).unwrap_or(true);
            let infinite = o.get("infinite").and_then(Value::as_bool).unwrap_or(false);
            (set && !infinite).then(|| o.get("number")?.as_f64())?
        }
        _ => None,
    }
}

/// The job's states: a string (up to v0.0.39) or a list (from v0.0.40).
fn states(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// GPUs in one TRES list: `gres/gpu=8` (or `gres/gpu:a100=8`, when no untyped total is
/// given) in `tres_req_str`; `gres:gpu:8`, `gres:gpu:a100:8`, `gres/gpu:8` in the
/// per-job and per-node fields.
fn gpus_in(tres: &str) -> Result<Option<i64>, String> {
    let mut total = None;
    let mut typed: Option<i64> = None;
    for item in tres.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, count) = if let Some((k, v)) = item.split_once('=') {
            (k, v)
        } else if let Some((k, v)) = item.rsplit_once(':') {
            (k, v)
        } else {
            continue;
        };
        let name = name.replace('/', ":");
        let mut parts = name.split(':');
        if parts.next() != Some("gres") || parts.next() != Some("gpu") {
            continue;
        }
        let n: i64 = count
            .parse()
            .map_err(|_| format!("GPU count {count:?} in {tres:?} is not a whole number"))?;
        if !(0..=MAX_GPUS).contains(&n) {
            return Err(format!("{n} GPUs is outside 0 to {MAX_GPUS}"));
        }
        if parts.next().is_some() {
            typed = Some(typed.unwrap_or(0) + n);
        } else {
            total = Some(n);
        }
    }
    Ok(total.or(typed))
}

/// The GPUs a job asks for: its requested TRES, else its per-job request, else its per-node
/// request times its node count.
pub fn requested_gpus(job: &Value) -> Result<i64, String> {
    let text = |k: &str| job.get(k).and_then(Value::as_str).unwrap_or("");
    if let Some(n) = gpus_in(text("tres_req_str"))? {
        return Ok(n);
    }
    if let Some(n) = gpus_in(text("tres_per_job"))? {
        return Ok(n);
    }
    if let Some(n) = gpus_in(text("tres_per_node"))? {
        let nodes = job.get("node_count").and_then(number).unwrap_or(1.0);
        if !(1.0..=100_000.0).contains(&nodes) {
            return Err(format!("node_count {nodes} is outside 1 to 100000"));
        }
        let total = n.saturating_mul(nodes as i64);
        if total > MAX_GPUS {
            return Err(format!("{total} GPUs is more than {MAX_GPUS}"));
        }
        return Ok(total);
    }
    Ok(0)
}

/// One listed job, read against its domain; `Err` says why it was refused.
pub fn job_of(
    job: &Value,
    cluster: &str,
    team_of: &dyn Fn(&str) -> String,
    now_ms: i64,
) -> Result<Job, String> {
    let states = states(job.get("job_state").unwrap_or(&Value::Null));
    if !states.contains(&"PENDING") {
        return Ok(Job::NotWaiting);
    }
    let id = job
        .get("job_id")
        .and_then(number)
        .filter(|n| n.fract() == 0.0 && (1.0..=4_294_967_295.0).contains(n))
        .ok_or("a pending job without a job_id from 1 to 2^32-1")?;
    let reason = job.get("state_reason").and_then(Value::as_str);
    let held = job.get("hold").and_then(Value::as_bool).unwrap_or(false)
        || reason.is_some_and(|r| r.starts_with("JobHeld"));
    let gpus = requested_gpus(job).map_err(|why| format!("job {id}: {why}"))?;
    if gpus == 0 {
        return Ok(Job::NotWaiting);
    }
    if held {
        return Ok(Job::Held);
    }
    let account = job.get("account").and_then(Value::as_str).unwrap_or("");
    if !model::names::is_slurm_name(account) {
        return Err(format!(
            "job {id}: account {account:?} is not an account name"
        ));
    }
    let name: String = job
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .chars()
        .take(253)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let submitted = job
        .get("submit_time")
        .and_then(number)
        .filter(|s| *s > 0.0)
        .map_or(now_ms, |s| ((s * 1000.0) as i64).min(now_ms));
    let (reason, message) =
        reason_and_message(reason, job.get("state_description").and_then(Value::as_str));
    debug_assert!(message.chars().count() <= MAX_MESSAGE);
    let waiter = Waiter {
        source: "slurm_job",
        uid: format!("{}", id as u64),
        namespace: account,
        name: &name,
        product: None,
        reason,
        message,
        since_ms: submitted,
    };
    Ok(Job::Waiting(waiter.records(
        BTreeMap::from([("nvidia.com/gpu".to_owned(), gpus)]),
        cluster,
        team_of,
        now_ms,
    )))
}

/// slurmrestd, as the demand poll reads it.
#[derive(Debug, Clone)]
pub struct Source {
    pub settings: SlurmSettings,
    http: reqwest::Client,
}

impl Source {
    pub fn new(settings: SlurmSettings) -> anyhow::Result<Source> {
        let http = ingest_client::http()
            .user_agent(concat!("gpulens/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(30))
            .build()?;
        Ok(Source { settings, http })
    }

    /// The listed jobs, at most `max`; and whether there were more. Slurm's own errors in
    /// the answer (`errors[]`) fail the read.
    pub async fn jobs(&self, max: usize) -> anyhow::Result<(Vec<Value>, bool)> {
        let s = &self.settings;
        let resp = self
            .http
            .get(s.jobs_url())
            .header("X-SLURM-USER-NAME", &s.user)
            .header("X-SLURM-USER-TOKEN", &s.token.0)
            .send()
            .await?;
        let status = resp.status();
        if !status.is_success() {
            let text = ingest_client::bounded::prefix(resp, 300).await;
            anyhow::bail!("slurmrestd answered {status}: {text}");
        }
        let body = ingest_client::bounded::body(resp, MAX_BODY)
            .await
            .map_err(|e| anyhow::anyhow!("slurmrestd: {e}"))?;
        read_jobs(&body, max)
    }
}

/// The first `max` jobs of a slurmrestd answer and whether it listed more. Only those jobs
/// become JSON values; the rest are skipped as they are parsed, so a large answer costs its
/// bytes and `max` jobs, not a value tree of every job (a 60 MiB answer grew to 2 GB).
/// Slurm's own `errors[]` fail the read, the first few named, each clipped.
pub fn read_jobs(body: &[u8], max: usize) -> anyhow::Result<(Vec<Value>, bool)> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let doc = serde::Deserializer::deserialize_map(&mut de, AnswerVisitor { max })
        .map_err(|e| anyhow::anyhow!("slurmrestd's answer is not JSON: {e}"))?;
    if doc.errors.total > 0 {
        let shown: Vec<String> = doc
            .errors
            .kept
            .iter()
            .map(|e| ingest_client::bounded::one_line(&e.to_string(), 200, false))
            .collect();
        anyhow::bail!(
            "slurmrestd reports {} error(s): {}",
            doc.errors.total,
            shown.join("; ")
        );
    }
    let Some(jobs) = doc.jobs else {
        anyhow::bail!("slurmrestd's answer has no jobs list");
    };
    Ok((jobs.kept, jobs.total > max))
}

/// The first `max` elements of a JSON list, and how many it had.
struct FirstOf {
    max: usize,
}

struct Kept {
    kept: Vec<Value>,
    total: usize,
}

impl<'de> serde::de::DeserializeSeed<'de> for FirstOf {
    type Value = Kept;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Kept, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for FirstOf {
    type Value = Kept;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list")
    }
    /// `null` reads as an empty list (slurmrestd writes `"errors": null` at times).
    fn visit_unit<E>(self) -> Result<Kept, E> {
        Ok(Kept {
            kept: Vec::new(),
            total: 0,
        })
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Kept, A::Error> {
        let mut out = Kept {
            kept: Vec::new(),
            total: 0,
        };
        while out.total < self.max {
            match seq.next_element::<Value>()? {
                Some(v) => out.kept.push(v),
                None => return Ok(out),
            }
            out.total += 1;
        }
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
            out.total += 1;
        }
        Ok(out)
    }
}

/// What is read of a slurmrestd answer: its jobs and errors lists, nothing else.
struct Answer {
    jobs: Option<Kept>,
    errors: Kept,
}

struct AnswerVisitor {
    max: usize,
}

/// Slurm's errors named in a failure; the rest are counted.
const ERRORS_SHOWN: usize = 3;

impl<'de> serde::de::Visitor<'de> for AnswerVisitor {
    type Value = Answer;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("slurmrestd's jobs answer (an object)")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Answer, A::Error> {
        let mut out = Answer {
            jobs: None,
            errors: Kept {
                kept: Vec::new(),
                total: 0,
            },
        };
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "jobs" => out.jobs = Some(map.next_value_seed(FirstOf { max: self.max })?),
                "errors" => {
                    out.errors = map.next_value_seed(FirstOf { max: ERRORS_SHOWN })?;
                }
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_is_read_as_its_first_jobs_and_a_clipped_error() {
        let jobs: Vec<Value> = (0..1_000)
            .map(|i| json!({"job_id": i, "x": [1, 2, {"y": "z"}]}))
            .collect();
        let body =
            serde_json::to_vec(&json!({"meta": {"v": 1}, "jobs": jobs, "warnings": []})).unwrap();
        let (kept, more) = read_jobs(&body, 10).unwrap();
        assert_eq!(kept.len(), 10);
        assert_eq!(kept[9]["job_id"], 9);
        assert!(more);
        let (kept, more) = read_jobs(&body, 1_000).unwrap();
        assert_eq!((kept.len(), more), (1_000, false));
        // errors[] of any size fails the read with a short message.
        let errors: Vec<Value> = (0..10_000)
            .map(|i| json!({"error": "x".repeat(1_000), "error_number": i}))
            .collect();
        let body = serde_json::to_vec(&json!({"jobs": [], "errors": errors})).unwrap();
        let e = read_jobs(&body, 10).unwrap_err().to_string();
        assert!(e.contains("10000 error(s)"), "{e}");
        assert!(e.len() < 1_000, "{} bytes", e.len());
        assert!(
            read_jobs(br#"{"errors": null, "jobs": []}"#, 5)
                .unwrap()
                .0
                .is_empty()
        );
        assert!(read_jobs(br#"{"meta": {}}"#, 5).is_err());
        assert!(read_jobs(b"[1, 2]", 5).is_err());
    }

    #[test]
    fn gpu_requests_read_as_slurm_writes_them() {
        assert_eq!(
            gpus_in("cpu=8,mem=120000M,node=1,billing=80,gres/gpu=8"),
            Ok(Some(8))
        );
        assert_eq!(gpus_in("cpu=8,gres/gpu=3,gres/gpu:a100=3"), Ok(Some(3)));
        assert_eq!(
            gpus_in("cpu=8,gres/gpu:a100=2,gres/gpu:v100=1"),
            Ok(Some(3))
        );
        assert_eq!(gpus_in("gres:gpu:8"), Ok(Some(8)));
        assert_eq!(gpus_in("gres:gpu:h100-80:1"), Ok(Some(1)));
        assert_eq!(gpus_in("gres/gpu:4"), Ok(Some(4)));
        assert_eq!(gpus_in("cpu=1,mem=4G,node=1,billing=1"), Ok(None));
        assert_eq!(gpus_in(""), Ok(None));
        assert!(gpus_in("gres/gpu=lots").is_err());
        assert!(gpus_in("gres/gpu=99999999").is_err());
        let per_node = json!({"tres_per_node": "gres:gpu:4", "node_count": {"set": true, "infinite": false, "number": 2}});
        assert_eq!(requested_gpus(&per_node), Ok(8));
    }

    #[test]
    fn numbers_and_states_of_both_shapes() {
        assert_eq!(number(&json!(5)), Some(5.0));
        assert_eq!(
            number(&json!({"set": true, "infinite": false, "number": 7})),
            Some(7.0)
        );
        assert_eq!(
            number(&json!({"set": false, "infinite": false, "number": 7})),
            None
        );
        assert_eq!(
            number(&json!({"set": true, "infinite": true, "number": 0})),
            None
        );
        assert_eq!(states(&json!("PENDING")), ["PENDING"]);
        assert_eq!(
            states(&json!(["PENDING", "REQUEUED"])),
            ["PENDING", "REQUEUED"]
        );
    }

    #[test]
    fn hostile_jobs_are_refused_or_kept_in_their_domain() {
        let team = |a: &str| a.to_owned();
        let job = |extra: Value| {
            let mut j = json!({"job_id": 7, "job_state": ["PENDING"], "account": "ml",
                               "name": "train", "tres_req_str": "gres/gpu=2", "submit_time": 100});
            for (k, v) in extra.as_object().unwrap() {
                j[k] = v.clone();
            }
            j
        };
        for (bad, says) in [
            (json!({"job_id": -1}), "job_id"),
            (json!({"job_id": 1.5}), "job_id"),
            (json!({"account": "a b"}), "account"),
            (json!({"account": "x".repeat(65)}), "account"),
            (json!({"tres_req_str": "gres/gpu=1e9"}), "whole number"),
        ] {
            let e = job_of(&job(bad.clone()), "c", &team, 1_000).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let Job::Waiting(r) = job_of(
            &job(json!({"name": "a\u{7}b", "submit_time": 9e12, "state_reason": "Bad Reason!"})),
            "c",
            &team,
            1_000,
        )
        .unwrap() else {
            panic!("a pending GPU job waits")
        };
        assert_eq!(r[0].name, "a b", "control characters are spaces");
        assert_eq!(
            r[0].since_ms, 1_000,
            "a submit time in the future reads as now"
        );
        assert_eq!(r[0].reason, "", "a reason that is not one word is left out");
        assert_eq!(
            job_of(&job(json!({"hold": true})), "c", &team, 1_000),
            Ok(Job::Held)
        );
    }

    /// Hostile jobs from a fixed seed: random values in every field the parser reads, in
    /// both shapes. Whatever comes in, a job is refused or read inside the domain; no panic.
    #[test]
    fn hostile_jobs_from_a_seed_never_leave_the_domain() {
        let mut rng = crate::demand::pods::hostile::Rng(0x51_0a_2b_3c_4d_5e_6f_70);
        const FIELDS: [&str; 12] = [
            "job_id",
            "job_state",
            "hold",
            "state_reason",
            "state_description",
            "account",
            "name",
            "tres_req_str",
            "tres_per_job",
            "tres_per_node",
            "node_count",
            "submit_time",
        ];
        let team = |a: &str| a.to_owned();
        let (mut waiting, mut refused) = (0, 0);
        for i in 0..6_000 {
            let mut job = json!({"job_id": 40 + i, "job_state": ["PENDING"], "account": "ml",
                                 "name": "train", "tres_req_str": "cpu=8,gres/gpu=2", "submit_time": 100});
            for _ in 0..=rng.below(4) {
                let field = FIELDS[rng.below(FIELDS.len() as u64) as usize];
                let v = match rng.below(4) {
                    0 => {
                        json!({"set": rng.below(2) == 0, "infinite": rng.below(5) == 0, "number": rng.value()})
                    }
                    1 => json!(format!("gres/gpu={}", rng.value())),
                    _ => rng.value(),
                };
                job[field] = v;
            }
            match job_of(&job, "c", &team, 1_000_000) {
                Ok(Job::Waiting(records)) => {
                    waiting += 1;
                    for r in records {
                        assert!((1..=MAX_GPUS).contains(&r.count), "{r:?}");
                        assert!(model::names::is_slurm_name(&r.scope), "{r:?}");
                        assert!(
                            r.name.chars().count() <= 253 && !r.name.chars().any(char::is_control)
                        );
                        assert!(r.since_ms <= 1_000_000, "{r:?}");
                        assert!(r.message.chars().count() <= MAX_MESSAGE);
                        assert!(
                            r.uid
                                .parse::<u64>()
                                .is_ok_and(|n| (1..=4_294_967_295).contains(&n))
                        );
                    }
                }
                Ok(_) => {}
                Err(_) => refused += 1,
            }
        }
        assert!(
            waiting > 500 && refused > 500,
            "{waiting} waiting, {refused} refused"
        );
    }
}
