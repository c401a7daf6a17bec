//! Grouping and timing of notifications, as Alertmanager does it: alerts with the same values
//! of the `group_by` labels form a group; a new group is notified `group_wait` after its first
//! alert, a changed group (alerts fired or resolved) `group_interval` after its last
//! notification, an unchanged one still firing every `repeat_interval`.
//!
//! What a group was last told is read back from the newest stored notification of the group,
//! so a restart or a second collector taking over neither forgets nor repeats.

use std::collections::{BTreeMap, HashMap};

use super::settings::{Receiver, Settings};
use super::state::{Alert, State};

/// The newest notification of a group.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    pub at_ms: i64,
    /// The fingerprints that were firing, sorted, comma-separated ("" after the resolution).
    pub digest: String,
}

/// A notification to build now.
#[derive(Debug, Clone)]
pub struct Due<'a> {
    pub group_key: String,
    pub group_labels: BTreeMap<String, String>,
    /// Firing alerts, then newly resolved ones.
    pub alerts: Vec<&'a Alert>,
    pub digest: String,
    pub firing: usize,
}

impl Due<'_> {
    pub fn status(&self) -> &'static str {
        if self.firing > 0 {
            "firing"
        } else {
            "resolved"
        }
    }
}

/// Whether the receiver takes the alert.
pub fn matches(r: &Receiver, a: &Alert) -> bool {
    r.matchers
        .iter()
        .all(|(k, v)| a.labels.get(k).is_some_and(|x| x == v))
}

/// The group's labels and key (`receiver:{name="value",…}` as Alertmanager writes it).
pub fn group_of(
    receiver: &str,
    group_by: &[String],
    a: &Alert,
) -> (String, BTreeMap<String, String>) {
    let labels: BTreeMap<String, String> = group_by
        .iter()
        .filter_map(|k| a.labels.get(k).map(|v| (k.clone(), v.clone())))
        .collect();
    let inner = labels
        .iter()
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect::<Vec<_>>()
        .join(",");
    (format!("{receiver}:{{{inner}}}"), labels)
}

/// The notifications due for `receiver` at `now_ms`.
pub fn due<'a>(
    s: &Settings,
    receiver: &Receiver,
    alerts: &'a [Alert],
    sent: &HashMap<String, Sent>,
    now_ms: i64,
) -> Vec<Due<'a>> {
    let mut groups: BTreeMap<String, (BTreeMap<String, String>, Vec<&'a Alert>)> = BTreeMap::new();
    for a in alerts
        .iter()
        .filter(|a| a.state != State::Pending && matches(receiver, a))
    {
        let (key, labels) = group_of(&receiver.name, &s.group_by, a);
        groups.entry(key).or_insert((labels, Vec::new())).1.push(a);
    }
    let wait = s.group_wait.as_millis() as i64;
    let interval = s.group_interval.as_millis() as i64;
    let repeat = s.repeat_interval.as_millis() as i64;
    let mut out = Vec::new();
    for (key, (labels, members)) in groups {
        let last = sent.get(&key);
        let since = last.map_or(i64::MIN, |l| l.at_ms);
        let mut firing: Vec<&Alert> = members
            .iter()
            .copied()
            .filter(|a| a.state == State::Firing)
            .collect();
        firing.sort_by(|a, b| a.fingerprint.cmp(&b.fingerprint));
        // Resolved since the last notification (or ever, for a group never notified).
        let resolved: Vec<&Alert> = members
            .iter()
            .copied()
            .filter(|a| a.state == State::Resolved && a.ends_ms.is_some_and(|e| e > since))
            .filter(|_| receiver.send_resolved)
            .collect();
        let digest = firing
            .iter()
            .map(|a| a.fingerprint.as_str())
            .collect::<Vec<_>>()
            .join(",");
        // New, or everything was resolved and told: a new group, which waits.
        let fresh = last.is_none_or(|l| l.digest.is_empty());
        let at = match last {
            _ if fresh => {
                if firing.is_empty() && (last.is_some() || resolved.is_empty()) {
                    continue;
                }
                let first = firing
                    .iter()
                    .filter_map(|a| a.starts_ms)
                    .chain(resolved.iter().filter_map(|a| a.ends_ms))
                    .min()
                    .unwrap_or(now_ms);
                first + wait
            }
            Some(l) if l.digest != digest || !resolved.is_empty() => l.at_ms + interval,
            Some(l) if !firing.is_empty() => l.at_ms + repeat,
            _ => continue,
        };
        if now_ms < at || (firing.is_empty() && resolved.is_empty()) {
            continue;
        }
        let n = firing.len();
        firing.extend(resolved);
        out.push(Due {
            group_key: key,
            group_labels: labels,
            alerts: firing,
            digest,
            firing: n,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::settings::ReceiverKind;
    use std::time::Duration;

    fn alert(fp: &str, state: State, starts: i64, ends: Option<i64>) -> Alert {
        Alert {
            fingerprint: fp.into(),
            rule: "R".into(),
            labels: BTreeMap::from([
                ("alertname".into(), "R".into()),
                ("cluster".into(), "c".into()),
                ("node".into(), fp.into()),
            ]),
            annotations: BTreeMap::new(),
            state,
            value: 1.0,
            active_ms: starts,
            starts_ms: Some(starts),
            ends_ms: ends,
            updated_ms: starts,
        }
    }

    fn settings() -> (Settings, Receiver) {
        let s = Settings {
            group_wait: Duration::from_secs(30),
            group_interval: Duration::from_secs(300),
            repeat_interval: Duration::from_secs(3600),
            ..Settings::default()
        };
        let r = Receiver {
            name: "hook".into(),
            kind: ReceiverKind::Webhook,
            url: collector_shared::settings::Secret("http://127.0.0.1:1/".into()),
            secret: None,
            timeout: Duration::from_secs(1),
            send_resolved: true,
            matchers: BTreeMap::new(),
        };
        (s, r)
    }

    #[test]
    fn timers_follow_alertmanagers() {
        let (s, r) = settings();
        let key = "hook:{alertname=\"R\",cluster=\"c\"}".to_string();
        let a = vec![alert("a", State::Firing, 0, None)];
        let none = HashMap::new();
        // group_wait
        assert!(due(&s, &r, &a, &none, 29_999).is_empty());
        let d = due(&s, &r, &a, &none, 30_000);
        assert_eq!((d.len(), d[0].group_key.as_str()), (1, key.as_str()));
        let sent = HashMap::from([(
            key.clone(),
            Sent {
                at_ms: 30_000,
                digest: d[0].digest.clone(),
            },
        )]);
        // Unchanged: only after repeat_interval.
        assert!(due(&s, &r, &a, &sent, 3_629_999).is_empty());
        assert_eq!(due(&s, &r, &a, &sent, 3_630_000).len(), 1);
        // A second alert joins: after group_interval, carrying both.
        let two = vec![a[0].clone(), alert("b", State::Firing, 40_000, None)];
        assert!(due(&s, &r, &two, &sent, 329_999).is_empty());
        let d = due(&s, &r, &two, &sent, 330_000);
        assert_eq!((d[0].alerts.len(), d[0].status()), (2, "firing"));
        // Both resolve: one resolved notification, then silence.
        let gone = vec![
            alert("a", State::Resolved, 0, Some(400_000)),
            alert("b", State::Resolved, 40_000, Some(400_000)),
        ];
        let sent = HashMap::from([(
            key.clone(),
            Sent {
                at_ms: 330_000,
                digest: d[0].digest.clone(),
            },
        )]);
        let d = due(&s, &r, &gone, &sent, 630_000);
        assert_eq!((d[0].alerts.len(), d[0].status()), (2, "resolved"));
        let told = HashMap::from([(
            key.clone(),
            Sent {
                at_ms: 630_000,
                digest: String::new(),
            },
        )]);
        assert!(due(&s, &r, &gone, &told, 10_000_000).is_empty());
        // A new alert in the same group later is a new group again: group_wait.
        let back = vec![gone[0].clone(), alert("c", State::Firing, 700_000, None)];
        assert!(due(&s, &r, &back, &told, 729_999).is_empty());
        assert_eq!(due(&s, &r, &back, &told, 730_000).len(), 1);
    }

    #[test]
    fn groups_split_by_labels_and_receivers_filter() {
        let (mut s, mut r) = settings();
        s.group_by = vec!["node".into()];
        let a = vec![
            alert("a", State::Firing, 0, None),
            alert("b", State::Firing, 0, None),
        ];
        assert_eq!(due(&s, &r, &a, &HashMap::new(), 30_000).len(), 2);
        r.matchers = BTreeMap::from([("node".into(), "b".into())]);
        let d = due(&s, &r, &a, &HashMap::new(), 30_000);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].group_labels["node"], "b");
    }
}
