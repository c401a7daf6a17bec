//! Alerting's tables (migration 0005): alert state, the notification outbox and delivery
//! attempts. One SQL text serves both backends, as in `label_actions.rs`.

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

/// The alerting methods of a backend: `$write`/`$read` name its pools, `$sql` adapts the
/// placeholders.
macro_rules! alert_methods {
    ($write:ident, $read:ident, $sql:path) => {
        pub async fn load_alerts(&self) -> Result<Vec<super::alerts::AlertRecord>> {
            let rows = sqlx::query(
                "SELECT fingerprint, rule, labels, annotations, state, value, active_ms, starts_ms, ends_ms, updated_ms FROM alerts ORDER BY fingerprint",
            )
            .fetch_all(&self.$read)
            .await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let json = |i: usize| -> Result<std::collections::BTreeMap<String, String>> {
                    let text: String = r.try_get(i)?;
                    serde_json::from_str(&text).map_err(|e| {
                        $crate::error::StoreError::Internal(format!("stored alert labels: {e}"))
                    })
                };
                out.push(super::alerts::AlertRecord {
                    fingerprint: r.try_get(0)?,
                    rule: r.try_get(1)?,
                    labels: json(2)?,
                    annotations: json(3)?,
                    state: r.try_get(4)?,
                    value: r.try_get(5)?,
                    active_ms: r.try_get(6)?,
                    starts_ms: r.try_get(7)?,
                    ends_ms: r.try_get(8)?,
                    updated_ms: r.try_get(9)?,
                });
            }
            Ok(out)
        }

        /// Upserts `alerts` and deletes the fingerprints `gone`, in one transaction.
        pub async fn save_alerts(
            &self,
            alerts: &[super::alerts::AlertRecord],
            gone: &[String],
        ) -> Result<()> {
            let mut tx = self.$write.begin().await?;
            for fp in gone {
                sqlx::query(&$sql("DELETE FROM alerts WHERE fingerprint = ?"))
                    .bind(fp)
                    .execute(&mut *tx)
                    .await?;
            }
            for a in alerts {
                sqlx::query(&$sql(
                    "INSERT INTO alerts (fingerprint, rule, labels, annotations, state, value, active_ms, starts_ms, ends_ms, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                     ON CONFLICT (fingerprint) DO UPDATE SET rule = excluded.rule, labels = excluded.labels, annotations = excluded.annotations, state = excluded.state, value = excluded.value, \
                     active_ms = excluded.active_ms, starts_ms = excluded.starts_ms, ends_ms = excluded.ends_ms, updated_ms = excluded.updated_ms",
                ))
                .bind(&a.fingerprint)
                .bind(&a.rule)
                .bind(serde_json::to_string(&a.labels).expect("string maps serialize"))
                .bind(serde_json::to_string(&a.annotations).expect("string maps serialize"))
                .bind(&a.state)
                .bind(a.value)
                .bind(a.active_ms)
                .bind(a.starts_ms)
                .bind(a.ends_ms)
                .bind(a.updated_ms)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(())
        }

        pub async fn enqueue_notification(
            &self,
            n: &super::alerts::NewNotification<'_>,
        ) -> Result<i64> {
            Ok(sqlx::query_scalar(&$sql(
                "INSERT INTO alert_notifications (receiver, group_key, status, digest, firing, resolved, payload, created_ms, state, attempts, next_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?) RETURNING id",
            ))
            .bind(n.receiver)
            .bind(n.group_key)
            .bind(n.status)
            .bind(n.digest)
            .bind(n.firing)
            .bind(n.resolved)
            .bind(n.payload)
            .bind(n.created_ms)
            .bind(n.state)
            .bind(n.created_ms)
            .fetch_one(&self.$write)
            .await?)
        }

        /// The newest notification of every group.
        pub async fn latest_notifications(&self) -> Result<Vec<super::alerts::GroupSent>> {
            let rows = sqlx::query(
                "SELECT n.receiver, n.group_key, n.created_ms, n.digest FROM alert_notifications n JOIN (SELECT max(id) AS id FROM alert_notifications GROUP BY receiver, group_key) m ON m.id = n.id",
            )
            .fetch_all(&self.$read)
            .await?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
                .collect()
        }

        /// The receiver's queued notifications, oldest first.
        pub async fn queued_notifications(
            &self,
            receiver: &str,
            limit: i64,
        ) -> Result<Vec<super::alerts::Queued>> {
            let rows = sqlx::query(&$sql(
                "SELECT id, payload, attempts, next_ms, created_ms FROM alert_notifications WHERE receiver = ? AND state = 'queued' ORDER BY id LIMIT ?",
            ))
            .bind(receiver)
            .bind(limit)
            .fetch_all(&self.$read)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(super::alerts::Queued {
                        id: r.try_get(0)?,
                        payload: r.try_get(1)?,
                        attempts: i64::from(r.try_get::<i32, _>(2)?),
                        next_ms: r.try_get(3)?,
                        created_ms: r.try_get(4)?,
                    })
                })
                .collect()
        }

        /// Stores an attempt and the notification's new state (`queued` again with the time of
        /// the next try, `delivered` or `failed`).
        pub async fn record_attempt(
            &self,
            id: i64,
            a: &super::alerts::Attempt,
            state: &str,
            next_ms: i64,
        ) -> Result<()> {
            let mut tx = self.$write.begin().await?;
            sqlx::query(&$sql(
                "INSERT INTO alert_attempts (notification_id, ts_ms, outcome, http_status, detail, duration_ms) VALUES (?, ?, ?, ?, ?, ?)",
            ))
            .bind(id)
            .bind(a.ts_ms)
            .bind(&a.outcome)
            .bind(a.http_status)
            .bind(&a.detail)
            .bind(a.duration_ms)
            .execute(&mut *tx)
            .await?;
            let delivered = (state == "delivered").then_some(a.ts_ms);
            let error = (state != "delivered").then_some(a.detail.as_str());
            sqlx::query(&$sql(
                "UPDATE alert_notifications SET attempts = attempts + 1, state = ?, next_ms = ?, delivered_ms = COALESCE(?, delivered_ms), last_error = ? WHERE id = ?",
            ))
            .bind(state)
            .bind(next_ms)
            .bind(delivered)
            .bind(error)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        }

        /// Stored notifications, newest first, with their attempts.
        pub async fn notifications(
            &self,
            receiver: Option<&str>,
            limit: i64,
        ) -> Result<Vec<super::alerts::NotificationRecord>> {
            let cond = if receiver.is_some() { "WHERE receiver = ?" } else { "" };
            let sql = $sql(&format!(
                "SELECT id, receiver, group_key, status, firing, resolved, created_ms, state, attempts, delivered_ms, last_error, payload FROM alert_notifications {cond} ORDER BY id DESC LIMIT ?"
            ));
            let mut q = sqlx::query(&sql);
            if let Some(r) = receiver {
                q = q.bind(r);
            }
            let rows = q.bind(limit).fetch_all(&self.$read).await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                out.push(super::alerts::NotificationRecord {
                    id: r.try_get(0)?,
                    receiver: r.try_get(1)?,
                    group_key: r.try_get(2)?,
                    status: r.try_get(3)?,
                    firing: i64::from(r.try_get::<i32, _>(4)?),
                    resolved: i64::from(r.try_get::<i32, _>(5)?),
                    created_ms: r.try_get(6)?,
                    state: r.try_get(7)?,
                    attempts: i64::from(r.try_get::<i32, _>(8)?),
                    delivered_ms: r.try_get(9)?,
                    last_error: r.try_get(10)?,
                    payload: r.try_get(11)?,
                    tries: Vec::new(),
                });
            }
            if out.is_empty() {
                return Ok(out);
            }
            // Ids come from the database: safe to inline.
            let ids = out.iter().map(|n| n.id.to_string()).collect::<Vec<_>>().join(", ");
            let tries = sqlx::query(&format!(
                "SELECT notification_id, ts_ms, outcome, http_status, detail, duration_ms FROM alert_attempts WHERE notification_id IN ({ids}) ORDER BY notification_id, ts_ms"
            ))
            .fetch_all(&self.$read)
            .await?;
            let at: std::collections::HashMap<i64, usize> =
                out.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
            for t in &tries {
                let id: i64 = t.try_get(0)?;
                out[at[&id]].tries.push(super::alerts::Attempt {
                    ts_ms: t.try_get(1)?,
                    outcome: t.try_get(2)?,
                    http_status: t.try_get(3)?,
                    detail: t.try_get(4)?,
                    duration_ms: t.try_get(5)?,
                });
            }
            Ok(out)
        }

        pub async fn supersede_queued(&self, receiver: &str) -> Result<u64> {
            let done = sqlx::query(&$sql(
                "UPDATE alert_notifications SET state = 'superseded' WHERE receiver = ? AND state = 'queued'",
            ))
            .bind(receiver)
            .execute(&self.$write)
            .await?;
            Ok(done.rows_affected())
        }

        /// Drops finished notifications (and their attempts) created before `before_ms`,
        /// keeping the newest of every group (what the group was last told).
        pub async fn prune_notifications(&self, before_ms: i64) -> Result<u64> {
            let old = "SELECT id FROM alert_notifications WHERE created_ms < ? AND state <> 'queued' AND id NOT IN (SELECT max(id) FROM alert_notifications GROUP BY receiver, group_key)";
            let mut tx = self.$write.begin().await?;
            sqlx::query(&$sql(&format!(
                "DELETE FROM alert_attempts WHERE notification_id IN ({old})"
            )))
            .bind(before_ms)
            .execute(&mut *tx)
            .await?;
            let done = sqlx::query(&$sql(&format!(
                "DELETE FROM alert_notifications WHERE id IN ({old})"
            )))
            .bind(before_ms)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(done.rows_affected())
        }
    };
}
pub(crate) use alert_methods;
