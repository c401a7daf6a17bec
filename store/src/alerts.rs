//! Alerting's tables (migration 0005): alert state, the notification outbox and delivery
//! attempts. One SQL text serves both backends, as in `label_actions.rs`.

use crate::db::{Db, RowExt, StmtExt, Tables, stmt};
use crate::error::Result;

/// A notification to store in the outbox.
#[derive(Debug, Clone)]
pub struct NewNotification<'a> {
    pub receiver: &'a str,
    pub group_key: &'a str,
    pub status: &'a str,
    pub digest: &'a str,
    pub firing: i64,
    pub resolved: i64,
    pub payload: &'a str,
    pub created_ms: i64,
    /// `queued`, or a final state for notifications recorded after the fact (pushes).
    pub state: &'a str,
}

/// A queued notification, for the sender.
#[derive(Debug, Clone)]
pub struct Queued {
    pub id: i64,
    pub payload: String,
    pub attempts: i64,
    pub next_ms: i64,
    pub created_ms: i64,
}

/// One delivery attempt.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub ts_ms: i64,
    /// delivered | retry | failed
    pub outcome: String,
    pub http_status: Option<i32>,
    pub detail: String,
    pub duration_ms: i64,
}

/// A stored notification with its attempts (for `/api/v1/alerts`).
#[derive(Debug, Clone)]
pub struct NotificationRecord {
    pub id: i64,
    pub receiver: String,
    pub group_key: String,
    pub status: String,
    pub firing: i64,
    pub resolved: i64,
    pub created_ms: i64,
    pub state: String,
    pub attempts: i64,
    pub delivered_ms: Option<i64>,
    pub last_error: Option<String>,
    pub tries: Vec<Attempt>,
    pub payload: String,
}

/// One alert as stored: its labels and annotations are kept as JSON objects of strings, its
/// state as text (`pending`, `firing`, `resolved`; alerting gives the words their meaning).
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRecord {
    pub fingerprint: String,
    pub rule: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub annotations: std::collections::BTreeMap<String, String>,
    pub state: String,
    pub value: f64,
    pub active_ms: i64,
    pub starts_ms: Option<i64>,
    pub ends_ms: Option<i64>,
    pub updated_ms: i64,
}

/// The newest notification of each group: (receiver, group key, created, digest).
pub type GroupSent = (String, String, i64, String);

impl<DB: Db> Tables<DB> {
    pub(crate) async fn load_alerts(&self) -> Result<Vec<super::alerts::AlertRecord>> {
        let rows = stmt::<DB>(
            "SELECT fingerprint, rule, labels, annotations, state, value, active_ms, starts_ms, ends_ms, updated_ms FROM alerts ORDER BY fingerprint",
        )
        .all(&self.read)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let json = |i: usize| -> Result<std::collections::BTreeMap<String, String>> {
                let text: String = r.at(i)?;
                serde_json::from_str(&text).map_err(|e| {
                    crate::error::StoreError::Internal(format!("stored alert labels: {e}"))
                })
            };
            out.push(super::alerts::AlertRecord {
                fingerprint: r.at(0)?,
                rule: r.at(1)?,
                labels: json(2)?,
                annotations: json(3)?,
                state: r.at(4)?,
                value: r.at(5)?,
                active_ms: r.at(6)?,
                starts_ms: r.at(7)?,
                ends_ms: r.at(8)?,
                updated_ms: r.at(9)?,
            });
        }
        Ok(out)
    }

    /// Upserts `alerts` and deletes the fingerprints `gone`, in one transaction.
    pub(crate) async fn save_alerts(
        &self,
        alerts: &[super::alerts::AlertRecord],
        gone: &[String],
    ) -> Result<()> {
        let mut tx = self.write.begin().await?;
        for fp in gone {
            stmt::<DB>(&DB::DIALECT.numbered("DELETE FROM alerts WHERE fingerprint = ?"))
                .arg(fp)
                .run(&mut tx)
                .await?;
        }
        for a in alerts {
            stmt::<DB>(&DB::DIALECT.numbered(
                "INSERT INTO alerts (fingerprint, rule, labels, annotations, state, value, active_ms, starts_ms, ends_ms, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (fingerprint) DO UPDATE SET rule = excluded.rule, labels = excluded.labels, annotations = excluded.annotations, state = excluded.state, value = excluded.value, \
                 active_ms = excluded.active_ms, starts_ms = excluded.starts_ms, ends_ms = excluded.ends_ms, updated_ms = excluded.updated_ms",
            ))
            .arg(&a.fingerprint)
            .arg(&a.rule)
            .arg(serde_json::to_string(&a.labels).expect("string maps serialize"))
            .arg(serde_json::to_string(&a.annotations).expect("string maps serialize"))
            .arg(&a.state)
            .arg(a.value)
            .arg(a.active_ms)
            .arg(a.starts_ms)
            .arg(a.ends_ms)
            .arg(a.updated_ms)
            .run(&mut tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn enqueue_notification(
        &self,
        n: &super::alerts::NewNotification<'_>,
    ) -> Result<i64> {
        Ok(stmt::<DB>(&DB::DIALECT.numbered(
            "INSERT INTO alert_notifications (receiver, group_key, status, digest, firing, resolved, payload, created_ms, state, attempts, next_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?) RETURNING id",
        ))
        .arg(n.receiver)
        .arg(n.group_key)
        .arg(n.status)
        .arg(n.digest)
        .arg(n.firing)
        .arg(n.resolved)
        .arg(n.payload)
        .arg(n.created_ms)
        .arg(n.state)
        .arg(n.created_ms)
        .scalar(&self.write)
        .await?)
    }

    /// The newest notification of every group.
    pub(crate) async fn latest_notifications(&self) -> Result<Vec<super::alerts::GroupSent>> {
        let rows = stmt::<DB>(
            "SELECT n.receiver, n.group_key, n.created_ms, n.digest FROM alert_notifications n JOIN (SELECT max(id) AS id FROM alert_notifications GROUP BY receiver, group_key) m ON m.id = n.id",
        )
        .all(&self.read)
        .await?;
        rows.iter()
            .map(|r| Ok((r.at(0)?, r.at(1)?, r.at(2)?, r.at(3)?)))
            .collect()
    }

    /// The receiver's queued notifications, oldest first.
    pub(crate) async fn queued_notifications(
        &self,
        receiver: &str,
        limit: i64,
    ) -> Result<Vec<super::alerts::Queued>> {
        let rows = stmt::<DB>(&DB::DIALECT.numbered(
            "SELECT id, payload, attempts, next_ms, created_ms FROM alert_notifications WHERE receiver = ? AND state = 'queued' ORDER BY id LIMIT ?",
        ))
        .arg(receiver)
        .arg(limit)
        .all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(super::alerts::Queued {
                    id: r.at(0)?,
                    payload: r.at(1)?,
                    attempts: i64::from(r.at::<i32>(2)?),
                    next_ms: r.at(3)?,
                    created_ms: r.at(4)?,
                })
            })
            .collect()
    }

    /// Stores an attempt and the notification's new state (`queued` again with the time of
    /// the next try, `delivered` or `failed`).
    pub(crate) async fn record_attempt(
        &self,
        id: i64,
        a: &super::alerts::Attempt,
        state: &str,
        next_ms: i64,
    ) -> Result<()> {
        let mut tx = self.write.begin().await?;
        stmt::<DB>(&DB::DIALECT.numbered(
            "INSERT INTO alert_attempts (notification_id, ts_ms, outcome, http_status, detail, duration_ms) VALUES (?, ?, ?, ?, ?, ?)",
        ))
        .arg(id)
        .arg(a.ts_ms)
        .arg(&a.outcome)
        .arg(a.http_status)
        .arg(&a.detail)
        .arg(a.duration_ms)
        .run(&mut tx)
        .await?;
        let delivered = (state == "delivered").then_some(a.ts_ms);
        let error = (state != "delivered").then_some(a.detail.as_str());
        stmt::<DB>(&DB::DIALECT.numbered(
            "UPDATE alert_notifications SET attempts = attempts + 1, state = ?, next_ms = ?, delivered_ms = COALESCE(?, delivered_ms), last_error = ? WHERE id = ?",
        ))
        .arg(state)
        .arg(next_ms)
        .arg(delivered)
        .arg(error)
        .arg(id)
        .run(&mut tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Stored notifications, newest first, with their attempts.
    pub(crate) async fn notifications(
        &self,
        receiver: Option<&str>,
        limit: i64,
    ) -> Result<Vec<super::alerts::NotificationRecord>> {
        let cond = if receiver.is_some() {
            "WHERE receiver = ?"
        } else {
            ""
        };
        let sql = DB::DIALECT.numbered(&format!(
            "SELECT id, receiver, group_key, status, firing, resolved, created_ms, state, attempts, delivered_ms, last_error, payload FROM alert_notifications {cond} ORDER BY id DESC LIMIT ?"
        ));
        let mut q = stmt::<DB>(&sql);
        if let Some(r) = receiver {
            q = q.arg(r);
        }
        let rows = q.arg(limit).all(&self.read).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            out.push(super::alerts::NotificationRecord {
                id: r.at(0)?,
                receiver: r.at(1)?,
                group_key: r.at(2)?,
                status: r.at(3)?,
                firing: i64::from(r.at::<i32>(4)?),
                resolved: i64::from(r.at::<i32>(5)?),
                created_ms: r.at(6)?,
                state: r.at(7)?,
                attempts: i64::from(r.at::<i32>(8)?),
                delivered_ms: r.at(9)?,
                last_error: r.at(10)?,
                payload: r.at(11)?,
                tries: Vec::new(),
            });
        }
        if out.is_empty() {
            return Ok(out);
        }
        // Ids come from the database: safe to inline.
        let ids = out
            .iter()
            .map(|n| n.id.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let tries = stmt::<DB>(&format!(
            "SELECT notification_id, ts_ms, outcome, http_status, detail, duration_ms FROM alert_attempts WHERE notification_id IN ({ids}) ORDER BY notification_id, ts_ms"
        ))
        .all(&self.read)
        .await?;
        let at: std::collections::HashMap<i64, usize> =
            out.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
        for t in &tries {
            let id: i64 = t.at(0)?;
            out[at[&id]].tries.push(super::alerts::Attempt {
                ts_ms: t.at(1)?,
                outcome: t.at(2)?,
                http_status: t.at(3)?,
                detail: t.at(4)?,
                duration_ms: t.at(5)?,
            });
        }
        Ok(out)
    }

    pub(crate) async fn supersede_queued(&self, receiver: &str) -> Result<u64> {
        let done = stmt::<DB>(&DB::DIALECT.numbered(
            "UPDATE alert_notifications SET state = 'superseded' WHERE receiver = ? AND state = 'queued'",
        ))
        .arg(receiver)
        .run(&self.write)
        .await?;
        Ok(done)
    }

    /// Drops finished notifications (and their attempts) created before `before_ms`,
    /// keeping the newest of every group (what the group was last told).
    pub(crate) async fn prune_notifications(&self, before_ms: i64) -> Result<u64> {
        let old = "SELECT id FROM alert_notifications WHERE created_ms < ? AND state <> 'queued' AND id NOT IN (SELECT max(id) FROM alert_notifications GROUP BY receiver, group_key)";
        let mut tx = self.write.begin().await?;
        stmt::<DB>(&DB::DIALECT.numbered(&format!(
            "DELETE FROM alert_attempts WHERE notification_id IN ({old})"
        )))
        .arg(before_ms)
        .run(&mut tx)
        .await?;
        let done = stmt::<DB>(&DB::DIALECT.numbered(&format!(
            "DELETE FROM alert_notifications WHERE id IN ({old})"
        )))
        .arg(before_ms)
        .run(&mut tx)
        .await?;
        tx.commit().await?;
        Ok(done)
    }
}
