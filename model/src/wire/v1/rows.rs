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
    /// event message that is not text, and says what it dropped. Times, and processes'
    /// references to the batch's tenants, are the producer's own making and left as they are
    /// (tenants that cannot be sent go first: [`super::drop_impossible_tenants`]).
    pub fn drop_impossible_rows(&mut self) -> Vec<DroppedRow> {
        let mut dropped = Vec::new();
        let gpus = verdicts(&self.gpus, ("gpus", gpu_key), gpu_key, |g| {
            (!is_name(&g.gpu_uuid)).then(|| "its GPU UUID is not a name".into())
        });
        keep(&mut self.gpus, gpus, &mut dropped);
        let mig = verdicts(&self.mig, ("mig", |m| &m.gpu_uuid), mig_key, |m| {
            if !is_name(&m.gpu_uuid) {
                Some("its GPU UUID is not a name".into())
            } else {
                (m.gi_id > MAX_MIG_ID || m.ci_id > MAX_MIG_ID)
                    .then(|| format!("MIG ids {}/{} past {MAX_MIG_ID}", m.gi_id, m.ci_id))
            }
        });
        keep(&mut self.mig, mig, &mut dropped);
        let processes = verdicts(
            &self.processes,
            ("processes", |p| &p.gpu_uuid),
            process_key,
            |p| {
                if !is_name(&p.gpu_uuid) {
                    Some("its GPU UUID is not a name".into())
                } else if p.pid > MAX_PID {
                    Some(format!("pid {} past Linux's largest ({MAX_PID})", p.pid))
                } else {
                    (past_mig_id(p.gi_id) || past_mig_id(p.ci_id)).then(|| {
                        format!(
                            "pid {}: MIG ids {:?}/{:?} past {MAX_MIG_ID}",
                            p.pid, p.gi_id, p.ci_id
                        )
                    })
                }
            },
        );
        keep(&mut self.processes, processes, &mut dropped);
        let allocations = verdicts(
            &self.allocations,
            ("allocations", |a| &a.gpu_uuid),
            allocation_key,
            |a| {
                if !is_name(&a.gpu_uuid) || !is_name(&a.tenant) {
                    Some("its GPU UUID or tenant is not a name".into())
                } else if past_mig_id(a.gi_id)
                    || past_mig_id(a.ci_id)
                    || a.replica.is_some_and(|r| r > MAX_REPLICA)
                {
                    Some(format!(
                        "MIG ids {:?}/{:?} past {MAX_MIG_ID} or replica {:?} past {MAX_REPLICA}",
                        a.gi_id, a.ci_id, a.replica
                    ))
                } else {
                    (!(a.share > 0.0 && a.share <= 1.0))
                        .then(|| format!("share {} outside (0, 1]", a.share))
                }
            },
        );
        keep(&mut self.allocations, allocations, &mut dropped);
        for e in &mut self.events {
            if e.message.as_deref().is_some_and(|m| !is_text(m)) {
                e.message = None;
            }
        }
        let events = verdicts(&self.events, ("events", |e| &e.gpu_uuid), event_key, |e| {
            (!is_name(&e.gpu_uuid) || !is_name(&e.kind))
                .then(|| "its GPU UUID or kind is not a name".into())
        });
        keep(&mut self.events, events, &mut dropped);
        dropped
    }
}

/// Whether an optional MIG id is past [`MAX_MIG_ID`].
fn past_mig_id(id: Option<u32>) -> bool {
    id.is_some_and(|v| v > MAX_MIG_ID)
}

/// A snapshot list as [`DroppedRow`] names it, and the GPU of one of its rows.
type List<T> = (&'static str, fn(&T) -> &str);

/// What each row of `list` must go for, if it must: what `wrong` finds against it, or that it
/// repeats (by `key`) a row before it that stays.
fn verdicts<'a, T, K: Hash + Eq>(
    rows: &'a [T],
    (list, gpu): List<T>,
    key: impl Fn(&'a T) -> K,
    wrong: impl Fn(&T) -> Option<String>,
) -> Vec<Option<DroppedRow>> {
    let mut seen = set_for(rows.len());
    rows.iter()
        .map(|r| {
            let why = match wrong(r) {
                Some(why) => Some(why),
                None => (!seen.insert(key(r))).then(|| "it repeats a row before it".into()),
            };
            why.map(|why| DroppedRow {
                gpu_uuid: gpu(r).to_owned(),
                rows: list,
                why,
            })
        })
        .collect()
}

/// Keeps the rows without a verdict against them; moves the verdicts into `dropped`.
pub(super) fn keep<T, V>(rows: &mut Vec<T>, verdicts: Vec<Option<V>>, dropped: &mut Vec<V>) {
    let mut verdicts = verdicts.into_iter();
    rows.retain(|_| match verdicts.next().flatten() {
        Some(d) => {
            dropped.push(d);
            false
        }
        None => true,
    });
}
