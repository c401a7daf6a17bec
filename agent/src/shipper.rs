//! Turns sampling cycles into sequence-numbered batches and delivers them. Sequence numbers
//! are per agent id; the agent id is persisted in the state directory so a restarted agent
//! continues its sequence instead of being mistaken for a replay.

use std::path::{Path, PathBuf};

use model::wire::v1::{Batch, Snapshot, VERSION};
use model::{GpuInfo, Tenant};

/// The agent's identity and its next sequence number, kept on disk.
#[derive(Debug)]
pub struct AgentState {
    path: Option<PathBuf>,
    pub agent_id: String,
    pub next_seq: u64,
    /// The newest instant already sampled: a restarted agent never samples it again.
    pub last_ts: i64,
}

impl AgentState {
    /// Loads `DIR/agent-state` or creates it. Without a directory the state lives in memory
    /// and a fresh agent id is made, so sequences never collide with an earlier run.
    pub fn load(dir: Option<&Path>) -> anyhow::Result<AgentState> {
        let fresh = || format!("agent-{:x}-{:x}", now_ms(), std::process::id());
        let Some(dir) = dir else {
            return Ok(AgentState {
                path: None,
                agent_id: fresh(),
                next_seq: 1,
                last_ts: 0,
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
                let last_ts = parts.next().and_then(|t| t.parse().ok()).unwrap_or(0);
                Ok(AgentState {
                    path: Some(path),
                    agent_id: id.to_owned(),
                    next_seq: seq,
                    last_ts,
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let s = AgentState {
                    path: Some(path),
                    agent_id: fresh(),
                    next_seq: 1,
                    last_ts: 0,
                };
                s.save()?;
                Ok(s)
            }
            Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
        }
    }

    /// Takes the next sequence number and records it durably before it is used.
    pub fn take_seq(&mut self) -> anyhow::Result<u64> {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.save()?;
        Ok(seq)
    }

    fn save(&self) -> anyhow::Result<()> {
        if let Some(path) = &self.path {
            let tmp = path.with_extension("tmp");
            std::fs::write(
                &tmp,
                format!("{} {} {}\n", self.agent_id, self.next_seq, self.last_ts),
            )?;
            std::fs::rename(&tmp, path)?;
        }
        Ok(())
    }
}

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
        let dir = std::env::temp_dir().join(format!("gpulens-agent-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut a = AgentState::load(Some(&dir)).unwrap();
        assert_eq!(a.take_seq().unwrap(), 1);
        assert_eq!(a.take_seq().unwrap(), 2);
        let mut b = AgentState::load(Some(&dir)).unwrap();
        assert_eq!(b.agent_id, a.agent_id);
        assert_eq!(b.take_seq().unwrap(), 3);
        b.last_ts = 1_800_000_000_000;
        b.take_seq().unwrap();
        assert_eq!(
            AgentState::load(Some(&dir)).unwrap().last_ts,
            1_800_000_000_000
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
}
