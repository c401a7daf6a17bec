//! The label workflow's audit trail (migration 0004): planned GPU Operator changes, their
//! approval and outcome, and every step. One SQL text serves both backends (`?` placeholders,
//! numbered for PostgreSQL).

use crate::db::{Db, RowExt, StmtExt, Tables, stmt};
use crate::error::Result;

use serde::{Deserialize, Serialize};

model::closed_set! {
    /// Where a label action stands: planned, approved by an operator, running, and one of the
    /// ends its run records.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum ActionState {
        Planned = "planned",
        Approved = "approved",
        Running = "running",
        Applied = "applied",
        Unchanged = "unchanged",
        Refused = "refused",
        RolledBack = "rolled_back",
        Failed = "failed",
    }
}

impl ActionState {
    /// Whether the action is still open (not ended).
    pub fn open(self) -> bool {
        OPEN.contains(&self)
    }
}

/// A planned change, as first recorded.
#[derive(Debug, Clone)]
pub struct NewLabelAction {
    pub node: String,
    pub label: String,
    pub value: String,
    pub requested_by: String,
    pub requested_ms: i64,
    /// The workflow plan as JSON.
    pub plan: String,
}

/// One recorded change and its steps.
#[derive(Debug, Clone)]
pub struct LabelActionRecord {
    pub id: i64,
    pub node: String,
    pub label: String,
    pub value: String,
    pub state: ActionState,
    pub requested_by: String,
    pub requested_ms: i64,
    pub approved_by: Option<String>,
    pub approved_ms: Option<i64>,
    pub override_pods: bool,
    pub finished_ms: Option<i64>,
    pub outcome: Option<String>,
    pub plan: String,
    /// The label's value before the run changed it (None: unset, or not run yet).
    pub previous_value: Option<String>,
    pub steps: Vec<LabelStep>,
}

/// One step of a run: who, when, what, and the result.
pub use super::audit::Step as LabelStep;

/// A state change of a label action: from one of `from` to `to`. Approval records `by`, when
/// and `override_pods`; end states record `outcome` and when.
#[derive(Debug, Clone, Copy)]
pub struct Transition<'a> {
    pub id: i64,
    pub from: &'a [ActionState],
    pub to: ActionState,
    pub by: Option<&'a str>,
    pub override_pods: Option<bool>,
    pub now_ms: i64,
    pub outcome: Option<&'a str>,
}

/// Which label actions to read: all of `id`, `node` and `states` (any of them) that are set;
/// the newest `limit`.
#[derive(Debug, Clone, Copy)]
pub struct ActionFilter<'a> {
    pub id: Option<i64>,
    pub node: Option<&'a str>,
    pub states: &'a [ActionState],
    pub limit: i64,
}

impl<'a> ActionFilter<'a> {
    /// The newest `limit` actions.
    pub fn newest(limit: i64) -> ActionFilter<'a> {
        ActionFilter {
            id: None,
            node: None,
            states: &[],
            limit,
        }
    }

    /// The WHERE condition, with `?` for id, node and each state in that order.
    pub(crate) fn condition(&self) -> String {
        let mut c = vec!["1 = 1".to_owned()];
        if self.id.is_some() {
            c.push("id = ?".into());
        }
        if self.node.is_some() {
            c.push("node = ?".into());
        }
        if !self.states.is_empty() {
            c.push(format!(
                "state IN ({})",
                vec!["?"; self.states.len()].join(", ")
            ));
        }
        c.join(" AND ")
    }
}

/// States in which an action is still open.
pub const OPEN: [ActionState; 3] = [
    ActionState::Planned,
    ActionState::Approved,
    ActionState::Running,
];

pub(crate) const ACTION_COLUMNS: &str = "id, node, label, value, state, requested_by, requested_ms, approved_by, approved_ms, override_pods, finished_ms, outcome, plan, previous_value";

impl<DB: Db> Tables<DB> {
    pub(crate) async fn insert_label_action(
        &self,
        a: &super::label_actions::NewLabelAction,
    ) -> Result<i64> {
        Ok(stmt::<DB>(&DB::DIALECT.numbered(
            "INSERT INTO label_actions (node, label, value, state, requested_by, requested_ms, plan) VALUES (?, ?, ?, 'planned', ?, ?, ?) RETURNING id",
        ))
        .arg(&a.node)
        .arg(&a.label)
        .arg(&a.value)
        .arg(&a.requested_by)
        .arg(a.requested_ms)
        .arg(&a.plan)
        .scalar(&self.write)
        .await?)
    }

    /// The actions `filter` selects, newest first, with their steps (two queries).
    pub(crate) async fn label_actions(
        &self,
        filter: &super::label_actions::ActionFilter<'_>,
    ) -> Result<Vec<super::label_actions::LabelActionRecord>> {
        let sql = format!(
            "SELECT {} FROM label_actions WHERE {} ORDER BY id DESC LIMIT ?",
            super::label_actions::ACTION_COLUMNS,
            filter.condition()
        );
        let sql = DB::DIALECT.numbered(&sql);
        let mut q = stmt::<DB>(&sql);
        if let Some(id) = filter.id {
            q = q.arg(id);
        }
        if let Some(node) = filter.node {
            q = q.arg(node);
        }
        for state in filter.states {
            q = q.arg(state.as_str());
        }
        let rows = q.arg(filter.limit).all(&self.read).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            out.push(super::label_actions::LabelActionRecord {
                id: r.at(0)?,
                node: r.at(1)?,
                label: r.at(2)?,
                value: r.at(3)?,
                state: {
                    let s: String = r.at(4)?;
                    super::label_actions::ActionState::parse(&s).ok_or_else(|| {
                        sqlx::Error::Decode(format!("label_actions.state holds {s:?}").into())
                    })?
                },
                requested_by: r.at(5)?,
                requested_ms: r.at(6)?,
                approved_by: r.at(7)?,
                approved_ms: r.at(8)?,
                override_pods: r.at::<i32>(9)? != 0,
                finished_ms: r.at(10)?,
                outcome: r.at(11)?,
                plan: r.at(12)?,
                previous_value: r.at(13)?,
                steps: Vec::new(),
            });
        }
        if out.is_empty() {
            return Ok(out);
        }
        let ids: Vec<i64> = out.iter().map(|a| a.id).collect();
        let mut steps = self
            .audit_steps(super::audit::Trail::LabelActions, &ids)
            .await?;
        for a in &mut out {
            a.steps = steps.remove(&a.id).unwrap_or_default();
        }
        Ok(out)
    }

    /// Moves an action from one of `from` to `to`; false when it was in no such state.
    pub(crate) async fn transition_label_action(
        &self,
        t: &super::label_actions::Transition<'_>,
    ) -> Result<bool> {
        let super::label_actions::Transition {
            id,
            from,
            to,
            by,
            override_pods,
            now_ms,
            outcome,
        } = *t;
        let states = vec!["?"; from.len()].join(", ");
        let approving = to == super::label_actions::ActionState::Approved;
        let sql = if approving {
            format!(
                "UPDATE label_actions SET state = ?, approved_by = ?, approved_ms = ?, override_pods = ? WHERE id = ? AND state IN ({states})"
            )
        } else {
            format!(
                "UPDATE label_actions SET state = ?, outcome = COALESCE(?, outcome), finished_ms = ?, override_pods = COALESCE(?, override_pods) WHERE id = ? AND state IN ({states})"
            )
        };
        let finished = (!to.open()).then_some(now_ms);
        let sql = DB::DIALECT.numbered(&sql);
        let q = stmt::<DB>(&sql).arg(to.as_str());
        let q = if approving {
            q.arg(by)
                .arg(now_ms)
                .arg(i32::from(override_pods.unwrap_or(false)))
        } else {
            q.arg(outcome)
                .arg(finished)
                .arg(override_pods.map(i32::from))
        };
        let mut q = q.arg(id);
        for state in from {
            q = q.arg(state.as_str());
        }
        let done = q.run(&self.write).await?;
        Ok(done == 1)
    }

    /// Records the value the run is about to replace.
    pub(crate) async fn set_label_previous(&self, id: i64, value: Option<&str>) -> Result<()> {
        stmt::<DB>(
            &DB::DIALECT.numbered("UPDATE label_actions SET previous_value = ? WHERE id = ?"),
        )
        .arg(value)
        .arg(id)
        .run(&self.write)
        .await?;
        Ok(())
    }

    pub(crate) async fn add_label_step(
        &self,
        id: i64,
        step: &super::label_actions::LabelStep,
    ) -> Result<()> {
        self.add_audit_step(super::audit::Trail::LabelActions, id, step)
            .await
    }
}
