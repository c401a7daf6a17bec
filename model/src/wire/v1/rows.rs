//! The rows no batch may hold whatever their readings: an identifier that is not a name, a
//! pid past Linux's largest, a MIG id past [`MAX_MIG_ID`], an allocation's share outside
//! (0, 1], a row repeated within its snapshot. A producer drops those
//! ([`Snapshot::drop_impossible_rows`]) rather than have the collector refuse the batch, and
//! every other row of the node with it: NVML on a driver whose structures do not match its
//! caller's reports pids of 4,294,967,295, and two equal XID errors within one millisecond are
//! two equal event rows.

use std::hash::Hash;

use super::batch::{Snapshot, allocation_key, event_key, gpu_key, mig_key, process_key};
use super::validate::{MAX_MIG_ID, MAX_PID, MAX_REPLICA, is_name, is_text, set_for};
use crate::{Allocation, GpuEvent, GpuSample, MigSample, ProcessSample};

/// A row [`Snapshot::drop_impossible_rows`] dropped: whose, from which list, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct DroppedRow {
    pub gpu_uuid: String,
    /// The snapshot's list it was in: `gpus`, `mig`, `processes`, `allocations` or `events`.
    pub rows: &'static str,
    pub why: String,
}

impl Snapshot {
    /// Drops the rows no batch may hold whatever their readings — an identifier that is not a
    /// name, a pid past Linux's largest, a MIG id past [`MAX_MIG_ID`], an allocation's replica
    /// or share outside its range, a row repeating one before it in the snapshot — clears an
    /// event message that is not text, and says what it dropped. Times and references to the
    /// batch's tenants are the producer's own making and left as they are.
    pub fn drop_impossible_rows(&mut self) -> Vec<DroppedRow> {
        let mut dropped = Vec::new();
        let gpus = verdicts(&self.gpus, gpu_key, |g| {
            (!is_name(&g.gpu_uuid)).then(|| "its GPU UUID is not a name".into())
        });
        keep(&mut self.gpus, gpus, "gpus", &mut dropped);
        let mig = verdicts(&self.mig, mig_key, |m| {
            if !is_name(&m.gpu_uuid) {
                Some("its GPU UUID is not a name".into())
            } else {
                (m.gi_id > MAX_MIG_ID || m.ci_id > MAX_MIG_ID)
                    .then(|| format!("MIG ids {}/{} past {MAX_MIG_ID}", m.gi_id, m.ci_id))
            }
        });
        keep(&mut self.mig, mig, "mig", &mut dropped);
        let processes = verdicts(&self.processes, process_key, |p| {
            let past = |id: Option<u32>| id.is_some_and(|v| v > MAX_MIG_ID);
            if !is_name(&p.gpu_uuid) {
                Some("its GPU UUID is not a name".into())
            } else if p.pid > MAX_PID {
                Some(format!("pid {} past Linux's largest ({MAX_PID})", p.pid))
            } else {
                (past(p.gi_id) || past(p.ci_id)).then(|| {
                    format!(
                        "pid {}: MIG ids {:?}/{:?} past {MAX_MIG_ID}",
                        p.pid, p.gi_id, p.ci_id
                    )
                })
            }
        });
        keep(&mut self.processes, processes, "processes", &mut dropped);
        let allocations = verdicts(&self.allocations, allocation_key, |a| {
            let past = |id: Option<u32>| id.is_some_and(|v| v > MAX_MIG_ID);
            if !is_name(&a.gpu_uuid) || !is_name(&a.tenant) {
                Some("its GPU UUID or tenant is not a name".into())
            } else if past(a.gi_id) || past(a.ci_id) || a.replica.is_some_and(|r| r > MAX_REPLICA) {
                Some(format!(
                    "MIG ids {:?}/{:?} past {MAX_MIG_ID} or replica {:?} past {MAX_REPLICA}",
                    a.gi_id, a.ci_id, a.replica
                ))
            } else {
                (!(a.share > 0.0 && a.share <= 1.0))
                    .then(|| format!("share {} outside (0, 1]", a.share))
            }
        });
        keep(
            &mut self.allocations,
            allocations,
            "allocations",
            &mut dropped,
        );
        for e in &mut self.events {
            if e.message.as_deref().is_some_and(|m| !is_text(m)) {
                e.message = None;
            }
        }
        let events = verdicts(&self.events, event_key, |e| {
            (!is_name(&e.gpu_uuid) || !is_name(&e.kind))
                .then(|| "its GPU UUID or kind is not a name".into())
        });
        keep(&mut self.events, events, "events", &mut dropped);
        dropped
    }
}

/// Why each row must go, if it must: what `wrong` finds against it, or that it repeats (by
/// `key`) a row before it that stays.
fn verdicts<'a, T, K: Hash + Eq>(
    rows: &'a [T],
    key: impl Fn(&'a T) -> K,
    wrong: impl Fn(&T) -> Option<String>,
) -> Vec<Option<String>> {
    let mut seen = set_for(rows.len());
    rows.iter()
        .map(|r| match wrong(r) {
            Some(why) => Some(why),
            None => (!seen.insert(key(r))).then(|| "it repeats a row before it".into()),
        })
        .collect()
}

/// Keeps the rows without a verdict against them; notes the others in `dropped`.
fn keep<T: HasGpu>(
    rows: &mut Vec<T>,
    verdicts: Vec<Option<String>>,
    list: &'static str,
    dropped: &mut Vec<DroppedRow>,
) {
    let mut verdicts = verdicts.into_iter();
    rows.retain(|r| match verdicts.next().flatten() {
        Some(why) => {
            dropped.push(DroppedRow {
                gpu_uuid: r.gpu().to_owned(),
                rows: list,
                why,
            });
            false
        }
        None => true,
    });
}

/// A row that names its GPU.
trait HasGpu {
    fn gpu(&self) -> &str;
}

impl HasGpu for GpuSample {
    fn gpu(&self) -> &str {
        &self.gpu_uuid
    }
}

impl HasGpu for MigSample {
    fn gpu(&self) -> &str {
        &self.gpu_uuid
    }
}

impl HasGpu for ProcessSample {
    fn gpu(&self) -> &str {
        &self.gpu_uuid
    }
}

impl HasGpu for Allocation {
    fn gpu(&self) -> &str {
        &self.gpu_uuid
    }
}

impl HasGpu for GpuEvent {
    fn gpu(&self) -> &str {
        &self.gpu_uuid
    }
}
