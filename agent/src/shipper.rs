//! Turns sampling cycles into sequence-numbered batches. Sequence numbers are per agent id; the
//! agent id is kept in the state directory so a restarted agent continues its sequence instead
//! of being mistaken for a replay. Numbers are reserved in blocks of [`SEQ_BLOCK`], so the state
//! file is written once per block rather than once per batch; a restart continues after the
//! reserved block (the protocol allows gaps, never reuse). The newest sampled slot is kept
//! beside it (`last-slot`), so a restarted agent samples the slot it starts in unless the
//! previous run already did.

use std::path::{Path, PathBuf};

use model::wire::v1::{Batch, Snapshot, VERSION};
use model::{GpuInfo, Tenant};

/// The agent's identity and its next sequence number, kept on disk.
#[derive(Debug)]
pub struct AgentState {
    path: Option<PathBuf>,
    pub agent_id: String,
    pub next_seq: u64,
    /// Sequence numbers below this are reserved on disk for this run.
    reserved_until: u64,
    /// How many numbers one write of the state file reserves.
    block: u64,
    /// The newest slot sampled (0: none). At start-up it is what `last-slot` says; when that
    /// file is missing or unreadable but the state exists (an agent of an older version), it is
    /// "now", since the previous run may have sampled the current slot already.
    pub last_ts: i64,
    /// Whether the last write of `last-slot` failed (logged once per episode).
    last_slot_unsaved: bool,
    /// `last-slot`, opened once and rewritten in place each cycle.
    last_slot_file: Option<std::fs::File>,
}

/// How many sequence numbers one write of the state file reserves.
pub const SEQ_BLOCK: u64 = 1000;

impl AgentState {
    /// Loads `DIR/agent-state` or creates it. Without a directory the state lives in memory
    /// and a fresh agent id is made, so sequences never collide with an earlier run.
    pub fn load(dir: Option<&Path>) -> anyhow::Result<AgentState> {
        Self::load_with_block(dir, SEQ_BLOCK)
    }

    /// [`AgentState::load`] with another reservation block (1 writes the state every batch).
    pub fn load_with_block(dir: Option<&Path>, block: u64) -> anyhow::Result<AgentState> {
        let block = block.max(1);
        let fresh = || format!("agent-{:x}-{:x}", now_ms(), std::process::id());
        let Some(dir) = dir else {
            return Ok(AgentState {
                path: None,
                agent_id: fresh(),
                next_seq: 1,
                reserved_until: 1,
                block,
                last_ts: 0,
                last_slot_unsaved: false,
                last_slot_file: None,
            });
        };
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create state directory {}: {e}", dir.display()))?;
        let path = dir.join("agent-state");
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let mut parts = text.split_whitespace();
                let (Some(id), Some(seq)) = (
                    parts.next(),
                    parts.next().and_then(|s| s.parse::<u64>().ok()),
                ) else {
                    anyhow::bail!(
                        "{} is damaged; remove it to start a new agent id",
                        path.display()
                    );
                };
                // Everything below the saved mark may have been used by the previous run.
                let last_ts = std::fs::read_to_string(dir.join(LAST_SLOT))
                    .ok()
                    .and_then(|t| t.trim().parse::<i64>().ok())
                    .unwrap_or_else(now_ms);
                Ok(AgentState {
                    path: Some(path),
                    agent_id: id.to_owned(),
                    next_seq: seq,
                    reserved_until: seq,
                    block,
                    last_ts,
                    last_slot_unsaved: false,
                    last_slot_file: None,
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let s = AgentState {
                    path: Some(path),
                    agent_id: fresh(),
                    next_seq: 1,
                    reserved_until: 1,
                    block,
                    last_ts: 0,
                    last_slot_unsaved: false,
                    last_slot_file: None,
                };
                match s.save() {
                    Ok(()) => {}
                    // A new id never written down cannot collide with anything: run with it
                    // (a restart makes another) and write it once there is room.
                    Err(e) if is_disk_full_error(&e) => {
                        tracing::warn!(error = %e, "disk full: the new agent id is not saved yet")
                    }
                    Err(e) => return Err(e),
                }
                Ok(s)
            }
            Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
        }
    }

    /// Takes the next sequence number; reserves a new block on disk before using it when the
    /// current one is spent.
    pub fn take_seq(&mut self) -> anyhow::Result<u64> {
        if self.next_seq >= self.reserved_until {
            let reserved = self.reserved_until;
            self.reserved_until = self.next_seq + self.block;
            if let Err(e) = self.save() {
                self.reserved_until = reserved;
                return Err(e);
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        Ok(seq)
    }

    /// Records that `ts` is being sampled, before the sample is taken: a restart never samples
    /// it again. Written in place (no new file, no new block), so a full disk rarely stops it;
    /// when it does, it is logged and sampling goes on (a restart within this slot may then
    /// sample it a second time).
    pub fn mark_sampled(&mut self, ts: i64) {
        self.last_ts = self.last_ts.max(ts);
        let Some(dir) = self.path.as_ref().and_then(|p| p.parent()) else {
            return;
        };
        let path = dir.join(LAST_SLOT);
        let text = format!("{:>20}\n", self.last_ts);
        let written = (|| -> std::io::Result<()> {
            use std::os::unix::fs::FileExt;
            if self.last_slot_file.is_none() {
                self.last_slot_file = Some(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .open(&path)?,
                );
            }
            let f = self.last_slot_file.as_ref().expect("opened above");
            // Fixed width at offset 0, so the file never changes size.
            f.write_all_at(text.as_bytes(), 0)
        })();
        match written {
            Ok(()) => self.last_slot_unsaved = false,
            Err(e) if !self.last_slot_unsaved => {
                self.last_slot_unsaved = true;
                tracing::warn!(error = %e, path = %path.display(), "cannot record the sampled slot; sampling goes on");
            }
            Err(_) => {}
        }
    }

    fn save(&self) -> anyhow::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        // Fixed width, so the in-place fallback below never grows the file.
        let text = format!("{} {:020}\n", self.agent_id, self.reserved_until);
        let tmp = path.with_extension("tmp");
        let replaced = std::fs::write(&tmp, &text).and_then(|()| std::fs::rename(&tmp, path));
        match replaced {
            Ok(()) => Ok(()),
            Err(e) if crate::spool::is_disk_full(&e) => {
                // No room for a new file: overwrite the old one in place.
                let _ = std::fs::remove_file(&tmp);
                use std::io::Write;
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .and_then(|mut f| f.write_all(text.as_bytes()))
                    .map_err(|e| {
                        anyhow::Error::new(e).context(format!("cannot write {}", path.display()))
                    })
            }
            Err(e) => {
                Err(anyhow::Error::new(e).context(format!("cannot write {}", path.display())))
            }
        }
    }
}

/// Whether an error from [`AgentState`] was a full filesystem.
pub fn is_disk_full_error(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(crate::spool::is_disk_full)
}

/// The file in the state directory that names the newest sampled slot.
const LAST_SLOT: &str = "last-slot";

/// Builds one batch from sampling cycles.
pub fn build_batch(
    cluster: &str,
    node: &str,
    state: &mut AgentState,
    interval_ms: u32,
    inventory: Vec<GpuInfo>,
    cycles: Vec<(Snapshot, Vec<Tenant>)>,
) -> anyhow::Result<Batch> {
    let mut tenants: Vec<Tenant> = Vec::new();
    let mut snapshots = Vec::with_capacity(cycles.len());
    if let Some(newest) = cycles.iter().map(|(s, _)| s.ts).max() {
        state.last_ts = state.last_ts.max(newest);
    }
    for (snap, ts) in cycles {
        for t in ts {
            if !tenants.iter().any(|x| x.key == t.key) {
                tenants.push(t);
            }
        }
        snapshots.push(snap);
    }
    Ok(Batch {
        version: VERSION,
        cluster: cluster.to_owned(),
        node: node.to_owned(),
        agent_id: state.agent_id.clone(),
        seq: state.take_seq()?,
        agent_version: Some(format!("gpulens-agent/{}", env!("CARGO_PKG_VERSION"))),
        interval_ms,
        inventory: Some(inventory),
        tenants,
        snapshots,
    })
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_survives_a_restart() {
        let dir = crate::scratch::fresh_dir("agent-state").unwrap();
        let mut a = AgentState::load(Some(&dir)).unwrap();
        assert_eq!(a.take_seq().unwrap(), 1);
        assert_eq!(a.take_seq().unwrap(), 2);
        // A restart continues after the reserved block: never a number used before.
        let mut b = AgentState::load(Some(&dir)).unwrap();
        assert_eq!(b.agent_id, a.agent_id);
        assert_eq!(b.take_seq().unwrap(), 1 + SEQ_BLOCK);
        assert!(b.last_ts > 0, "the current instant counts as sampled");
        for _ in 0..SEQ_BLOCK {
            b.take_seq().unwrap();
        }
        assert_eq!(
            AgentState::load(Some(&dir)).unwrap().take_seq().unwrap(),
            1 + 3 * SEQ_BLOCK
        );
        std::fs::write(dir.join("agent-state"), "garbage").unwrap();
        assert!(
            AgentState::load(Some(&dir))
                .unwrap_err()
                .to_string()
                .contains("damaged")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_sampled_slot_survives_a_restart() {
        let dir = crate::scratch::fresh_dir("agent-slot").unwrap();
        let mut a = AgentState::load(Some(&dir)).unwrap();
        assert_eq!(a.last_ts, 0, "a new agent has sampled nothing");
        a.mark_sampled(1_700_000_123_000);
        a.mark_sampled(1_700_000_124_000);
        let b = AgentState::load(Some(&dir)).unwrap();
        assert_eq!(b.last_ts, 1_700_000_124_000);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
