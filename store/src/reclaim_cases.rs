//! The reclaim loop's cases (migration 0014): an idle holding a policy took up, from notice to
//! outcome, with its audit trail (`reclaim_steps`). One SQL text serves both backends.

use crate::db::{Db, RowExt, StmtExt, Tables, stmt};
use crate::error::Result;

pub use super::audit::Step;
pub use model::reclaim::CaseState;

/// A case as it is first recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCase {
    pub cluster: String,
    pub node: String,
    pub gpu: String,
    /// The tenant's key (`pod/<uid>/<container>`) and its display name.
    pub tenant: String,
    pub tenant_name: String,
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    pub team: String,
    pub policy: String,
    /// `report`, `scale-to-zero` or `suspend`.
    pub action: String,
    pub dry_run: bool,
    /// The idle_allocation finding the case was opened from.
    pub finding: String,
    pub idle_hours: f64,
    pub idle_share: f64,
    /// The series that showed the holding idle: use on it cancels the case.
    pub signal_metric: String,
    pub signal_entity: String,
    pub state: CaseState,
    pub opened_ms: i64,
    /// When the grace period ends.
    pub act_after_ms: i64,
}

/// A stored case with its steps.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseRecord {
    pub id: i64,
    pub case: NewCase,
    pub decided_by: Option<String>,
    pub decided_ms: Option<i64>,
    /// The object acted on (`Deployment ml/trainer`).
    pub target: Option<String>,
    pub acted_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub outcome: Option<String>,
    /// How to undo what was done.
    pub undo: Option<String>,
    pub steps: Vec<Step>,
}

/// Which cases to read: every condition that is set; the newest `limit`.
#[derive(Debug, Clone, Copy)]
pub struct CaseFilter<'a> {
    pub id: Option<i64>,
    pub states: &'a [CaseState],
    /// Cases opened at or after this time.
    pub opened_since_ms: Option<i64>,
    /// Cases acted on at or after this time.
    pub acted_since_ms: Option<i64>,
    pub limit: i64,
}

impl<'a> CaseFilter<'a> {
    pub fn newest(limit: i64) -> CaseFilter<'a> {
        CaseFilter {
            id: None,
            states: &[],
            opened_since_ms: None,
            acted_since_ms: None,
            limit,
        }
    }

    /// The WHERE condition, `?` in field order (id, states, opened, acted).
    pub(crate) fn condition(&self) -> String {
        let mut c = vec!["1 = 1".to_owned()];
        if self.id.is_some() {
            c.push("id = ?".into());
        }
        if !self.states.is_empty() {
            c.push(format!(
                "state IN ({})",
                vec!["?"; self.states.len()].join(", ")
            ));
        }
        if self.opened_since_ms.is_some() {
            c.push("opened_ms >= ?".into());
        }
        if self.acted_since_ms.is_some() {
            c.push("acted_ms >= ?".into());
        }
        c.join(" AND ")
    }
}

/// A case moving from one of `from` to `to`, with what the move records (unset fields keep
/// their value). Leaving the open states records when it finished; entering `acted`, when.
#[derive(Debug, Clone, Copy)]
pub struct Move<'a> {
    pub id: i64,
    pub from: &'a [CaseState],
    pub to: CaseState,
    /// Who approved or cancelled it.
    pub by: Option<&'a str>,
    pub target: Option<&'a str>,
    pub undo: Option<&'a str>,
    pub outcome: Option<&'a str>,
    pub now_ms: i64,
}

impl<'a> Move<'a> {
    pub fn new(id: i64, from: &'a [CaseState], to: CaseState, now_ms: i64) -> Move<'a> {
        Move {
            id,
            from,
            to,
            by: None,
            target: None,
            undo: None,
            outcome: None,
            now_ms,
        }
    }
}

pub(crate) const COLUMNS: &str = "id, cluster, node, gpu, tenant, tenant_name, namespace, pod, pod_uid, team, policy, action, dry_run, finding, idle_hours, idle_share, signal_metric, signal_entity, state, opened_ms, act_after_ms, decided_by, decided_ms, target, acted_ms, finished_ms, outcome, undo";

impl<DB: Db> Tables<DB> {
    /// Records a new case; returns its id.
    pub(crate) async fn insert_reclaim_case(
        &self,
        c: &super::reclaim_cases::NewCase,
    ) -> Result<i64> {
        Ok(stmt::<DB>(&DB::DIALECT.numbered(
            "INSERT INTO reclaim_cases (cluster, node, gpu, tenant, tenant_name, namespace, pod, pod_uid, team, policy, action, dry_run, finding, idle_hours, idle_share, signal_metric, signal_entity, state, opened_ms, act_after_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        ))
        .arg(&c.cluster)
        .arg(&c.node)
        .arg(&c.gpu)
        .arg(&c.tenant)
        .arg(&c.tenant_name)
        .arg(&c.namespace)
        .arg(&c.pod)
        .arg(&c.pod_uid)
        .arg(&c.team)
        .arg(&c.policy)
        .arg(&c.action)
        .arg(i32::from(c.dry_run))
        .arg(&c.finding)
        .arg(c.idle_hours)
        .arg(c.idle_share)
        .arg(&c.signal_metric)
        .arg(&c.signal_entity)
        .arg(c.state.as_str())
        .arg(c.opened_ms)
        .arg(c.act_after_ms)
        .scalar(&self.write)
        .await?)
    }

    /// The cases `f` selects, newest first, with their steps.
    pub(crate) async fn reclaim_cases(
        &self,
        f: &super::reclaim_cases::CaseFilter<'_>,
    ) -> Result<Vec<super::reclaim_cases::CaseRecord>> {
        let sql = DB::DIALECT.numbered(&format!(
            "SELECT {} FROM reclaim_cases WHERE {} ORDER BY id DESC LIMIT ?",
            super::reclaim_cases::COLUMNS,
            f.condition()
        ));
        let mut q = stmt::<DB>(&sql);
        if let Some(id) = f.id {
            q = q.arg(id);
        }
        for s in f.states {
            q = q.arg(s.as_str());
        }
        for t in [f.opened_since_ms, f.acted_since_ms].into_iter().flatten() {
            q = q.arg(t);
        }
        let rows = q.arg(f.limit).all(&self.read).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            out.push(super::reclaim_cases::CaseRecord {
                id: r.at(0)?,
                case: super::reclaim_cases::NewCase {
                    cluster: r.at(1)?,
                    node: r.at(2)?,
                    gpu: r.at(3)?,
                    tenant: r.at(4)?,
                    tenant_name: r.at(5)?,
                    namespace: r.at(6)?,
                    pod: r.at(7)?,
                    pod_uid: r.at(8)?,
                    team: r.at(9)?,
                    policy: r.at(10)?,
                    action: r.at(11)?,
                    dry_run: r.at::<i32>(12)? != 0,
                    finding: r.at(13)?,
                    idle_hours: r.at(14)?,
                    idle_share: r.at(15)?,
                    signal_metric: r.at(16)?,
                    signal_entity: r.at(17)?,
                    state: {
                        let s: String = r.at(18)?;
                        super::reclaim_cases::CaseState::parse(&s).ok_or_else(|| {
                            sqlx::Error::Decode(format!("reclaim_cases.state holds {s:?}").into())
                        })?
                    },
                    opened_ms: r.at(19)?,
                    act_after_ms: r.at(20)?,
                },
                decided_by: r.at(21)?,
                decided_ms: r.at(22)?,
                target: r.at(23)?,
                acted_ms: r.at(24)?,
                finished_ms: r.at(25)?,
                outcome: r.at(26)?,
                undo: r.at(27)?,
                steps: Vec::new(),
            });
        }
        let ids: Vec<i64> = out.iter().map(|c| c.id).collect();
        let mut steps = self
            .audit_steps(super::audit::Trail::ReclaimCases, &ids)
            .await?;
        for c in &mut out {
            c.steps = steps.remove(&c.id).unwrap_or_default();
        }
        Ok(out)
    }

    /// Moves a case (see [`super::reclaim_cases::Move`]); false when it was in none of
    /// the `from` states (someone else moved it first).
    pub(crate) async fn move_reclaim_case(
        &self,
        m: &super::reclaim_cases::Move<'_>,
    ) -> Result<bool> {
        let states = vec!["?"; m.from.len()].join(", ");
        let sql = DB::DIALECT.numbered(&format!(
            "UPDATE reclaim_cases SET state = ?, decided_by = COALESCE(?, decided_by), decided_ms = COALESCE(?, decided_ms), target = COALESCE(?, target), undo = COALESCE(?, undo), outcome = COALESCE(?, outcome), acted_ms = COALESCE(?, acted_ms), finished_ms = COALESCE(?, finished_ms) WHERE id = ? AND state IN ({states})"
        ));
        let open = m.to.is_open();
        let mut q = stmt::<DB>(&sql)
            .arg(m.to.as_str())
            .arg(m.by)
            .arg(m.by.map(|_| m.now_ms))
            .arg(m.target)
            .arg(m.undo)
            .arg(m.outcome)
            .arg((m.to == super::reclaim_cases::CaseState::Acted).then_some(m.now_ms))
            .arg((!open).then_some(m.now_ms))
            .arg(m.id);
        for s in m.from {
            q = q.arg(s.as_str());
        }
        Ok(q.run(&self.write).await? == 1)
    }
}
