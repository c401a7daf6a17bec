//! Audit trails: the steps of a label action (migration 0004) or a reclaim case (0014), one
//! row per step with its time, actor and result, in order. One table shape, one writer and
//! one reader for both.

use crate::db::{Db, RowExt, StmtExt, Tables, stmt};
use crate::error::Result;

/// One step: who, when, what, and the result.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub ts_ms: i64,
    pub actor: String,
    pub step: String,
    pub result: String,
    pub detail: String,
}

/// Which trail a step belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trail {
    LabelActions,
    ReclaimCases,
}

impl Trail {
    /// The steps table and the column naming the action or case.
    pub(crate) fn table(self) -> (&'static str, &'static str) {
        match self {
            Trail::LabelActions => ("label_action_steps", "action_id"),
            Trail::ReclaimCases => ("reclaim_steps", "case_id"),
        }
    }
}

impl<DB: Db> Tables<DB> {
    /// Appends a step to the trail of action or case `id`. The step's place is read
    /// first, then written (Citus runs no subquery inside an INSERT); two writers that
    /// race for one place retry with the next.
    pub(crate) async fn add_audit_step(
        &self,
        trail: super::audit::Trail,
        id: i64,
        step: &super::audit::Step,
    ) -> Result<()> {
        let (table, key) = trail.table();
        let mut tries = 0;
        loop {
            let seq: i64 = stmt::<DB>(&DB::DIALECT.numbered(&format!(
                "SELECT CAST(COALESCE(MAX(seq) + 1, 0) AS BIGINT) FROM {table} WHERE {key} = ?"
            )))
            .arg(id)
            .scalar(&self.write)
            .await?;
            let done = stmt::<DB>(&DB::DIALECT.numbered(&format!(
                "INSERT INTO {table} ({key}, seq, ts_ms, actor, step, result, detail) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT ({key}, seq) DO NOTHING",
            )))
            .arg(id)
            .arg(seq as i32)
            .arg(step.ts_ms)
            .arg(&step.actor)
            .arg(&step.step)
            .arg(&step.result)
            .arg(&step.detail)
            .run(&self.write)
            .await?;
            tries += 1;
            if done == 1 {
                return Ok(());
            }
            if tries == 5 {
                return Err(super::StoreError::Conflict(format!(
                    "no free place for a step of {table} {id} after 5 tries"
                )));
            }
        }
    }

    /// The steps of each of `ids`, in order.
    pub(crate) async fn audit_steps(
        &self,
        trail: super::audit::Trail,
        ids: &[i64],
    ) -> Result<std::collections::HashMap<i64, Vec<super::audit::Step>>> {
        let mut out: std::collections::HashMap<i64, Vec<super::audit::Step>> =
            std::collections::HashMap::new();
        if ids.is_empty() {
            return Ok(out);
        }
        let (table, key) = trail.table();
        // Ids are integers: safe to inline.
        let list = ids
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let rows = stmt::<DB>(&format!(
            "SELECT {key}, ts_ms, actor, step, result, detail FROM {table} WHERE {key} IN ({list}) ORDER BY {key}, seq"
        ))
        .all(&self.read)
        .await?;
        for s in &rows {
            out.entry(s.at(0)?).or_default().push(super::audit::Step {
                ts_ms: s.at(1)?,
                actor: s.at(2)?,
                step: s.at(3)?,
                result: s.at(4)?,
                detail: s.at(5)?,
            });
        }
        Ok(out)
    }
}
