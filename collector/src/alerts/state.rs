//! Alert state: pending → firing → resolved, keyed by the alert's labels.

use std::collections::BTreeMap;

use serde::Serialize;

use store::alerts::AlertRecord;
use store::{Store, StoreError};

use super::rules::{Condition, Rule};

/// Every stored alert (pending, firing, recently resolved).
pub async fn load(store: &Store) -> Result<Vec<Alert>, StoreError> {
    store
        .load_alerts()
        .await?
        .into_iter()
        .map(Alert::from_record)
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// The condition holds, not yet for the rule's `for`.
    Pending,
    Firing,
    Resolved,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Firing => "firing",
            State::Resolved => "resolved",
        }
    }

    pub fn parse(s: &str) -> Option<State> {
        [State::Pending, State::Firing, State::Resolved]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

/// One alert.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub fingerprint: String,
    pub rule: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub state: State,
    pub value: f64,
    /// When the condition was first seen.
    pub active_ms: i64,
    /// When it fired.
    pub starts_ms: Option<i64>,
    /// When it resolved.
    pub ends_ms: Option<i64>,
    /// When anything above last changed (state, value, annotations); an alert that goes on
    /// unchanged is not rewritten.
    pub updated_ms: i64,
}

impl Alert {
    /// The alert as the store keeps it.
    pub fn to_record(&self) -> AlertRecord {
        AlertRecord {
            fingerprint: self.fingerprint.clone(),
            rule: self.rule.clone(),
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            state: self.state.as_str().to_owned(),
            value: self.value,
            active_ms: self.active_ms,
            starts_ms: self.starts_ms,
            ends_ms: self.ends_ms,
            updated_ms: self.updated_ms,
        }
    }

    /// An alert read back from the store; a state word alerting does not know is an error
    /// (the row was written by something else).
    pub fn from_record(r: AlertRecord) -> Result<Alert, StoreError> {
        let state = State::parse(&r.state)
            .ok_or_else(|| StoreError::Internal(format!("stored alert state {:?}", r.state)))?;
        Ok(Alert {
            fingerprint: r.fingerprint,
            rule: r.rule,
            labels: r.labels,
            annotations: r.annotations,
            state,
            value: r.value,
            active_ms: r.active_ms,
            starts_ms: r.starts_ms,
            ends_ms: r.ends_ms,
            updated_ms: r.updated_ms,
        })
    }

    /// The same alert, apart from when it was last written.
    fn same_as(&self, o: &Alert) -> bool {
        Alert {
            updated_ms: o.updated_ms,
            ..self.clone()
        } == *o
    }
}

/// The alert's identity: a hash of its labels (FNV-1a over `k=v` pairs in key order).
pub fn fingerprint(labels: &BTreeMap<String, String>) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (k, v) in labels {
        for b in k.bytes().chain([0xff]).chain(v.bytes()).chain([0xfe]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// Moves every alert on by one evaluation: conditions that hold now against the alerts as they
/// were. Pending alerts whose condition went away are dropped (they never fired); firing ones
/// resolve; resolved ones older than `keep_ms` are dropped; a resolved alert whose condition
/// comes back starts again as a new episode.
pub fn advance(
    alerts: Vec<Alert>,
    conditions: Vec<Condition>,
    rules: &[Rule],
    now_ms: i64,
    keep_ms: i64,
) -> Vec<Alert> {
    let mut by_fp: BTreeMap<String, Alert> = alerts
        .into_iter()
        .map(|a| (a.fingerprint.clone(), a))
        .collect();
    let mut holding = std::collections::BTreeSet::new();
    for c in conditions {
        let rule = &rules[c.rule];
        let fp = fingerprint(&c.labels);
        if !holding.insert(fp.clone()) {
            continue;
        }
        let a = by_fp.entry(fp.clone()).or_insert_with(|| Alert {
            fingerprint: fp,
            rule: rule.name.clone(),
            labels: c.labels.clone(),
            annotations: BTreeMap::new(),
            state: State::Pending,
            value: c.value,
            active_ms: now_ms,
            starts_ms: None,
            ends_ms: None,
            updated_ms: now_ms,
        });
        let was = a.clone();
        if a.state == State::Resolved {
            a.state = State::Pending;
            a.active_ms = now_ms;
            a.starts_ms = None;
            a.ends_ms = None;
        }
        a.annotations = c.annotations;
        a.value = c.value;
        if a.state == State::Pending && now_ms - a.active_ms >= rule.for_.as_millis() as i64 {
            a.state = State::Firing;
            a.starts_ms = Some(now_ms);
        }
        if !a.same_as(&was) {
            a.updated_ms = now_ms;
        }
    }
    by_fp
        .into_values()
        .filter_map(|mut a| {
            if holding.contains(&a.fingerprint) {
                return Some(a);
            }
            match a.state {
                State::Pending => None,
                State::Firing => {
                    a.state = State::Resolved;
                    a.ends_ms = Some(now_ms);
                    a.updated_ms = now_ms;
                    Some(a)
                }
                State::Resolved => (now_ms - a.ends_ms.unwrap_or(now_ms) <= keep_ms).then_some(a),
            }
        })
        .collect()
}

/// What to write to make the stored alerts `after` when they are `before`: the alerts that
/// are new or changed, and the fingerprints that are gone.
pub fn changes<'a>(before: &[Alert], after: &'a [Alert]) -> (Vec<&'a Alert>, Vec<String>) {
    let old: BTreeMap<&str, &Alert> = before.iter().map(|a| (a.fingerprint.as_str(), a)).collect();
    let kept: std::collections::BTreeSet<&str> =
        after.iter().map(|a| a.fingerprint.as_str()).collect();
    let write = after
        .iter()
        .filter(|a| old.get(a.fingerprint.as_str()) != Some(a))
        .collect();
    let gone = before
        .iter()
        .filter(|a| !kept.contains(a.fingerprint.as_str()))
        .map(|a| a.fingerprint.clone())
        .collect();
    (write, gone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::rules::{Kind, Rule};
    use std::time::Duration;

    fn cond(node: &str) -> Condition {
        Condition {
            rule: 0,
            labels: BTreeMap::from([
                ("alertname".into(), "X".into()),
                ("node".into(), node.into()),
            ]),
            annotations: BTreeMap::new(),
            value: 1.0,
        }
    }

    #[test]
    fn alerts_go_pending_firing_resolved() {
        let mut rule = Rule::default_for(Kind::IngestLag);
        rule.for_ = Duration::from_secs(60);
        let rules = [rule];
        let a = advance(vec![], vec![cond("a")], &rules, 0, 1000);
        assert_eq!(a[0].state, State::Pending);
        let a = advance(a, vec![cond("a")], &rules, 30_000, 1000);
        assert_eq!(a[0].state, State::Pending);
        let a = advance(a, vec![cond("a")], &rules, 60_000, 1000);
        assert_eq!(
            (a[0].state, a[0].starts_ms, a[0].active_ms),
            (State::Firing, Some(60_000), 0)
        );
        let a = advance(a, vec![], &rules, 70_000, 1000);
        assert_eq!((a[0].state, a[0].ends_ms), (State::Resolved, Some(70_000)));
        // Kept for keep_ms, then dropped.
        assert_eq!(advance(a.clone(), vec![], &rules, 71_000, 1000).len(), 1);
        assert!(advance(a.clone(), vec![], &rules, 71_001, 1000).is_empty());
        // Back again: a new episode, pending first.
        let again = advance(a, vec![cond("a")], &rules, 80_000, 1000);
        assert_eq!(
            (again[0].state, again[0].active_ms, again[0].ends_ms),
            (State::Pending, 80_000, None)
        );
        // A pending alert whose condition goes away never fired: dropped.
        assert!(advance(again, vec![], &rules, 90_000, 1000).is_empty());
    }

    #[test]
    fn only_changed_alerts_are_written() {
        let mut rule = Rule::default_for(Kind::IngestLag);
        rule.for_ = Duration::ZERO;
        let rules = [rule];
        let first = advance(vec![], vec![cond("a"), cond("b")], &rules, 0, 1000);
        // Nothing changes: nothing to write, and the times stay.
        let same = advance(
            first.clone(),
            vec![cond("a"), cond("b")],
            &rules,
            10_000,
            1000,
        );
        assert_eq!(same, first);
        assert_eq!(changes(&first, &same), (vec![], vec![]));
        // b's value moves and a goes away (a firing alert: it resolves, a change).
        let mut b = cond("b");
        b.value = 2.0;
        let next = advance(same.clone(), vec![b], &rules, 20_000, 1000);
        assert!(next.iter().all(|x| x.updated_ms == 20_000));
        let (write, gone) = changes(&same, &next);
        assert_eq!((write.len(), gone.len()), (2, 0));
        // The resolved alert is dropped after keep_ms.
        let later = advance(next.clone(), vec![cond("b")], &rules, 30_000, 1000);
        let (write, gone) = changes(&next, &later);
        assert_eq!(gone, [fingerprint(&cond("a").labels)]);
        assert_eq!(write.len(), 1, "b's value is back to 1");
    }

    #[test]
    fn fingerprints_follow_labels() {
        let a = cond("a").labels;
        let b = cond("b").labels;
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
        assert_ne!(fingerprint(&a), fingerprint(&b));
    }
}
