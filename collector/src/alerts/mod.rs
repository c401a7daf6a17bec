//! Alerting: rules over the newest analysis and the collector's own state, alert state
//! (pending → firing → resolved), Alertmanager-style grouping and timing, and delivery to
//! webhooks (Alertmanager's format, Slack, gpulens JSON) or an Alertmanager. See
//! docs/alerts.md.
//!
//! Every pass runs under a database lock, so one collector evaluates and delivers at a time;
//! everything it knows (alerts, what each group was last told, the outbox) is in the store, so
//! a restart or another collector carries on where it stopped. Delivery runs in its own task
//! and never touches the ingest path.

pub mod api;
pub mod deliver;
pub mod groups;
pub mod metrics;
pub mod payload;
pub mod prometheus;
pub mod rules;
pub mod settings;
pub mod state;

pub use api::routes;
pub use metrics::AlertMetrics;
pub use payload::slack_text;
pub use rules::ongoing;
pub use settings::Settings;
pub use state::{Alert, State as AlertState, load};

use std::collections::HashMap;
use std::sync::Arc;

use state::State;
use store::alerts::NewNotification;
use store::label_actions::{ActionFilter, ActionState};
use store::{LOCK_ALERTS, Store};

/// The group key of an Alertmanager receiver's pushes.
const PUSH_GROUP: &str = "alertmanager-push";
/// Finished notifications are kept this long (a group's newest always).
const KEEP_NOTIFICATIONS_MS: i64 = 7 * 86_400_000;

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Pass {
    pub pending: usize,
    pub firing: usize,
    pub resolved: usize,
    pub enqueued: usize,
    pub delivered: usize,
}

/// The alerting loop's memory between passes (all of it can be rebuilt from the store).
pub struct Alerting {
    settings: Settings,
    rules: Vec<rules::Rule>,
    sender: deliver::Sender,
    newest: Arc<collector_shared::newest::Newest>,
    last_prune_ms: i64,
}

impl Alerting {
    pub fn new(settings: Settings) -> anyhow::Result<Alerting> {
        Ok(Alerting {
            rules: settings.effective_rules(),
            settings,
            sender: deliver::Sender::new()?,
            newest: Arc::default(),
            last_prune_ms: 0,
        })
    }

    /// Evaluates the rules and moves the stored alerts on; returns them.
    pub async fn evaluate(&mut self, store: &Store, now_ms: i64) -> anyhow::Result<Vec<Alert>> {
        let analysis = self.newest.get(store).await?;
        let nodes = store.nodes().await?;
        let keep_ms = self.settings.keep_resolved.as_millis() as i64;
        let actions = store
            .label_actions(&ActionFilter {
                states: &[
                    ActionState::Applied,
                    ActionState::Unchanged,
                    ActionState::Refused,
                    ActionState::RolledBack,
                    ActionState::Failed,
                ],
                ..ActionFilter::newest(500)
            })
            .await?;
        let cases = store
            .reclaim_cases(&store::reclaim_cases::CaseFilter {
                // A case's notice is an active alert in these states.
                states: &store::reclaim_cases::CaseState::NOTIFIED,
                ..store::reclaim_cases::CaseFilter::newest(1_000)
            })
            .await?;
        let facts = rules::Facts {
            analysis: analysis.as_deref(),
            nodes: &nodes,
            label_actions: &actions,
            now_ms,
            keep_ms,
            reclaim_cases: &cases,
            silence_url: self.settings.silence_url.as_deref(),
        };
        let conditions = rules::evaluate(&self.rules, &facts);
        let before = state::load(store).await?;
        let alerts = state::advance(before.clone(), conditions, &self.rules, now_ms, keep_ms);
        let (write, gone) = state::changes(&before, &alerts);
        if !write.is_empty() || !gone.is_empty() {
            let write: Vec<_> = write.iter().map(|a| a.to_record()).collect();
            store.save_alerts(&write, &gone).await?;
        }
        Ok(alerts)
    }

    /// Builds the notifications due now into the outbox; returns how many.
    pub async fn enqueue(
        &self,
        store: &Store,
        alerts: &[Alert],
        now_ms: i64,
    ) -> anyhow::Result<usize> {
        let mut sent: HashMap<String, groups::Sent> = HashMap::new();
        for (_, key, at, digest) in store.latest_notifications().await? {
            sent.insert(key, groups::Sent { at_ms: at, digest });
        }
        let external = self.settings.external_url.as_deref();
        let mut n = 0;
        for r in &self.settings.receivers {
            if r.kind.format().takes_every_alert() {
                n += usize::from(self.enqueue_push(store, r, alerts, &sent, now_ms).await?);
                continue;
            }
            for due in groups::due(&self.settings, r, alerts, &sent, now_ms) {
                let body = payload::notification(r.kind, &r.name, &due, external);
                store
                    .enqueue_notification(&NewNotification {
                        receiver: &r.name,
                        group_key: &due.group_key,
                        status: due.status(),
                        digest: &due.digest,
                        firing: due.firing as i64,
                        resolved: (due.alerts.len() - due.firing) as i64,
                        payload: &body.to_string(),
                        created_ms: now_ms,
                        state: "queued",
                    })
                    .await?;
                self.count_enqueued(&r.name);
                n += 1;
            }
        }
        Ok(n)
    }

    /// An Alertmanager gets the whole current set when it changed, and again before the end
    /// times it was given run out.
    async fn enqueue_push(
        &self,
        store: &Store,
        r: &settings::Receiver,
        alerts: &[Alert],
        sent: &HashMap<String, groups::Sent>,
        now_ms: i64,
    ) -> anyhow::Result<bool> {
        let valid_ms = 4 * self.settings.every.as_millis().max(60_000) as i64;
        let recent: Vec<&Alert> = alerts
            .iter()
            .filter(|a| groups::matches(r, a))
            .filter(|a| match a.state {
                State::Firing => true,
                State::Resolved => a.ends_ms.is_some_and(|e| now_ms - e < 3_600_000),
                State::Pending => false,
            })
            .collect();
        let digest = recent
            .iter()
            .map(|a| format!("{}:{}", a.fingerprint, a.state.as_str()))
            .collect::<Vec<_>>()
            .join(",");
        let key = format!("{}:{PUSH_GROUP}", r.name);
        let last = sent.get(&key);
        let stale = last.is_none_or(|l| now_ms - l.at_ms >= valid_ms / 2);
        if recent.is_empty() && last.is_none_or(|l| l.digest.is_empty()) {
            return Ok(false);
        }
        if last.is_some_and(|l| l.digest == digest) && !stale {
            return Ok(false);
        }
        let body = payload::alertmanager_push(
            &recent,
            now_ms,
            valid_ms,
            self.settings.external_url.as_deref(),
        );
        // An older push still queued says less than this one.
        store.supersede_queued(&r.name).await?;
        let firing = recent.iter().filter(|a| a.state == State::Firing).count();
        store
            .enqueue_notification(&NewNotification {
                receiver: &r.name,
                group_key: &key,
                status: if firing > 0 { "firing" } else { "resolved" },
                digest: &digest,
                firing: firing as i64,
                resolved: (recent.len() - firing) as i64,
                payload: &body.to_string(),
                created_ms: now_ms,
                state: "queued",
            })
            .await?;
        self.count_enqueued(&r.name);
        Ok(true)
    }

    fn count_enqueued(&self, receiver: &str) {
        self.sender
            .metrics
            .enqueued
            .get_or_create(&metrics::ReceiverLabels {
                receiver: receiver.to_owned(),
            })
            .inc();
    }

    /// One pass: evaluate, enqueue, deliver; `None` when another collector holds the lock.
    pub async fn pass(&mut self, store: &Store) -> anyhow::Result<Option<Pass>> {
        self.pass_at(store, model::time::now_ms()).await
    }

    /// [`Alerting::pass`] as if it were `now` (timers, backoff and stored times follow it;
    /// tests replay hours in seconds with it).
    pub async fn pass_at(&mut self, store: &Store, now: i64) -> anyhow::Result<Option<Pass>> {
        let Some(lock) = store.try_job_lock(LOCK_ALERTS).await? else {
            return Ok(None);
        };
        let result = self.locked_pass(store, now).await;
        lock.release().await?;
        result.map(Some)
    }

    async fn locked_pass(&mut self, store: &Store, now: i64) -> anyhow::Result<Pass> {
        let alerts = self.evaluate(store, now).await?;
        let mut pass = Pass {
            pending: alerts.iter().filter(|a| a.state == State::Pending).count(),
            firing: alerts.iter().filter(|a| a.state == State::Firing).count(),
            resolved: alerts.iter().filter(|a| a.state == State::Resolved).count(),
            ..Pass::default()
        };
        pass.enqueued = self.enqueue(store, &alerts, now).await?;
        let cap = self.settings.group_interval;
        for r in &self.settings.receivers {
            pass.delivered += self.sender.drain(store, r, cap, now).await?;
        }
        if now - self.last_prune_ms > 3_600_000 {
            store
                .prune_notifications(now - KEEP_NOTIFICATIONS_MS)
                .await?;
            self.last_prune_ms = now;
        }
        Ok(pass)
    }
}

/// Alerting as a background task: a pass every `settings.every`, reading the analysis
/// through `newest` (shared with the collector's other readers). When alerting cannot start
/// (its HTTP client), every pass says why.
pub fn task(
    store: Store,
    settings: Settings,
    newest: Arc<collector_shared::newest::Newest>,
    metrics: AlertMetrics,
) -> Arc<dyn collector_shared::tasks::Task> {
    let every = settings.every;
    let alerting = Alerting::new(settings)
        .map(|mut a| {
            a.newest = newest;
            a.sender.metrics = metrics;
            a
        })
        .map_err(|e| format!("{e:#}"));
    let alerting = Arc::new(tokio::sync::Mutex::new(alerting));
    collector_shared::tasks::Periodic::task("alerts", every, move || {
        let (store, alerting) = (store.clone(), alerting.clone());
        Box::pin(async move {
            let mut alerting = alerting.lock().await;
            let alerting = alerting
                .as_mut()
                .map_err(|e| anyhow::anyhow!("alerting cannot start: {e}"))?;
            if let Some(p) = alerting.pass(&store).await?
                && (p.enqueued > 0 || p.delivered > 0)
            {
                tracing::info!(
                    firing = p.firing,
                    pending = p.pending,
                    enqueued = p.enqueued,
                    delivered = p.delivered,
                    "alerts"
                )
            }
            Ok(())
        })
    })
}
