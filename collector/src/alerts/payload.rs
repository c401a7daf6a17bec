//! Notification bodies: Alertmanager's webhook format (version 4), Slack's incoming webhook,
//! gpulens' own JSON, and the alert list Alertmanager's `/api/v2/alerts` takes; and the
//! HMAC-SHA256 signature.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::groups::Due;
use super::settings::ReceiverKind;
use super::state::{Alert, State};
use model::time::rfc3339;

/// Alertmanager's "not resolved" end time.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

fn status(a: &Alert) -> &'static str {
    if a.state == State::Resolved {
        "resolved"
    } else {
        "firing"
    }
}

/// Where an alert leads: its finding's page when it has one, else the alert in the API.
fn generator_url(external: Option<&str>, a: &Alert) -> String {
    let base = external.unwrap_or("").trim_end_matches('/');
    match a
        .annotations
        .get("finding")
        .filter(|p| p.starts_with("/findings/"))
    {
        Some(page) => format!("{base}{page}"),
        None => format!("{base}/api/v1/alerts?fingerprint={}", a.fingerprint),
    }
}

/// Labels (or annotations) every alert of the notification shares.
fn common(
    alerts: &[&Alert],
    pick: impl Fn(&Alert) -> &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let Some(first) = alerts.first() else {
        return BTreeMap::new();
    };
    pick(first)
        .iter()
        .filter(|(k, v)| alerts.iter().all(|a| pick(a).get(*k) == Some(*v)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// What differs between receiver kinds; grouping, the outbox, retries and signing are the
/// same for all. A new kind of receiver is a `ReceiverKind` variant (its configuration word)
/// and one implementation of this trait.
pub trait Format: Sync {
    /// Where to POST, given the configured URL.
    fn endpoint(&self, url: &str) -> String {
        url.to_owned()
    }
    /// Whether the receiver takes every active alert each pass and groups them itself
    /// (Alertmanager), rather than gpulens' grouped notifications.
    fn takes_every_alert(&self) -> bool {
        false
    }
    /// The least time between two posts to one URL.
    fn min_gap(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// The body of a grouped notification.
    fn body(&self, receiver: &str, due: &Due, external: Option<&str>) -> Value;
}

/// Alertmanager's webhook format, version 4.
struct Webhook;
/// A Slack incoming webhook: at most one message a second per URL (Slack's limit).
struct Slack;
/// gpulens' own JSON (docs/alerts.md).
struct OwnJson;
/// An Alertmanager's `/api/v2/alerts`, which takes the whole alert list.
struct Alertmanager;

impl Format for Webhook {
    fn body(&self, receiver: &str, due: &Due, external: Option<&str>) -> Value {
        webhook(receiver, due, external)
    }
}

impl Format for Slack {
    fn min_gap(&self) -> std::time::Duration {
        std::time::Duration::from_secs(1)
    }
    fn body(&self, _: &str, due: &Due, external: Option<&str>) -> Value {
        slack(due, external)
    }
}

impl Format for OwnJson {
    fn body(&self, receiver: &str, due: &Due, external: Option<&str>) -> Value {
        own(receiver, due, external)
    }
}

impl Format for Alertmanager {
    fn endpoint(&self, url: &str) -> String {
        format!("{}/api/v2/alerts", url.trim_end_matches('/'))
    }
    fn takes_every_alert(&self) -> bool {
        true
    }
    fn body(&self, receiver: &str, due: &Due, external: Option<&str>) -> Value {
        webhook(receiver, due, external)
    }
}

impl ReceiverKind {
    /// How this kind of receiver is sent to.
    pub fn format(self) -> &'static dyn Format {
        match self {
            ReceiverKind::Webhook => &Webhook,
            ReceiverKind::Slack => &Slack,
            ReceiverKind::Json => &OwnJson,
            ReceiverKind::Alertmanager => &Alertmanager,
        }
    }
}

/// The body for a grouped notification, in the receiver's format.
pub fn notification(
    kind: ReceiverKind,
    receiver: &str,
    due: &Due,
    external: Option<&str>,
) -> Value {
    kind.format().body(receiver, due, external)
}

fn webhook(receiver: &str, due: &Due, external: Option<&str>) -> Value {
    let alerts: Vec<Value> = due
        .alerts
        .iter()
        .map(|a| {
            json!({
                "status": status(a),
                "labels": a.labels,
                "annotations": a.annotations,
                "startsAt": rfc3339(a.starts_ms.unwrap_or(a.active_ms)),
                "endsAt": a.ends_ms.map_or(ZERO_TIME.to_owned(), rfc3339),
                "generatorURL": generator_url(external, a),
                "fingerprint": a.fingerprint,
            })
        })
        .collect();
    json!({
        "version": "4",
        "groupKey": due.group_key,
        "truncatedAlerts": 0,
        "status": due.status(),
        "receiver": receiver,
        "groupLabels": due.group_labels,
        "commonLabels": common(&due.alerts, |a| &a.labels),
        "commonAnnotations": common(&due.alerts, |a| &a.annotations),
        "externalURL": external.unwrap_or(""),
        "alerts": alerts,
    })
}

/// Text as Slack's markup takes it: `&`, `<` and `>` escaped, so that a name from the fleet
/// (a Slurm account, a user name) cannot become a link (`<http://…|…>`) or a mention
/// (`<!channel>`) in the channel.
pub fn slack_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Slack shows at most this many alerts in one message.
const SLACK_MAX_ALERTS: usize = 10;

fn slack(due: &Due, external: Option<&str>) -> Value {
    let title = format!(
        "[{}{}] {}",
        due.status().to_uppercase(),
        if due.firing > 0 {
            format!(":{}", due.firing)
        } else {
            String::new()
        },
        due.group_labels
            .iter()
            .map(|(k, v)| format!("{}={}", slack_text(k), slack_text(v)))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut lines = Vec::new();
    for a in due.alerts.iter().take(SLACK_MAX_ALERTS) {
        let what = a
            .annotations
            .get("description")
            .or_else(|| a.annotations.get("summary"))
            .cloned()
            .unwrap_or_default();
        let label = |name: &str| slack_text(a.labels.get(name).map_or("", String::as_str));
        // The finding's page, a URL gpulens made (percent-encoded: no `|` or `>` in it).
        let page = match (external, a.annotations.get("finding")) {
            (Some(_), Some(p)) if p.starts_with("/findings/") => {
                format!(" <{}|finding>", generator_url(external, a))
            }
            _ => String::new(),
        };
        lines.push(format!(
            "• *{}* {} ({}, {}): {}{page}",
            status(a),
            label("alertname"),
            label("severity"),
            label("node"),
            slack_text(&what)
        ));
    }
    if due.alerts.len() > SLACK_MAX_ALERTS {
        lines.push(format!("…and {} more", due.alerts.len() - SLACK_MAX_ALERTS));
    }
    let mut blocks = vec![
        json!({"type": "section", "text": {"type": "mrkdwn", "text": format!("*{title}*")}}),
        json!({"type": "section", "text": {"type": "mrkdwn", "text": lines.join("\n")}}),
    ];
    if let Some(base) = external {
        blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": format!("<{}/api/v1/alerts|gpulens alerts>", base.trim_end_matches('/'))}]}));
    }
    json!({ "text": title, "blocks": blocks })
}

fn own(receiver: &str, due: &Due, external: Option<&str>) -> Value {
    let alerts: Vec<Value> = due
        .alerts
        .iter()
        .map(|a| {
            json!({
                "fingerprint": a.fingerprint,
                "status": status(a),
                "rule": a.rule,
                "labels": a.labels,
                "annotations": a.annotations,
                "value": a.value,
                "starts_at": a.starts_ms.map(rfc3339),
                "ends_at": a.ends_ms.map(rfc3339),
                "link": generator_url(external, a),
            })
        })
        .collect();
    json!({
        "receiver": receiver,
        "status": due.status(),
        "group_key": due.group_key,
        "group_labels": due.group_labels,
        "firing": due.firing,
        "resolved": due.alerts.len() - due.firing,
        "alerts": alerts,
    })
}

/// The body for Alertmanager's `POST /api/v2/alerts`: firing alerts with an end time
/// `valid_ms` ahead (Alertmanager resolves them itself if gpulens stops refreshing), resolved
/// ones with their end.
pub fn alertmanager_push(
    alerts: &[&Alert],
    now_ms: i64,
    valid_ms: i64,
    external: Option<&str>,
) -> Value {
    Value::Array(
        alerts
            .iter()
            .map(|a| {
                json!({
                    "labels": a.labels,
                    "annotations": a.annotations,
                    "startsAt": rfc3339(a.starts_ms.unwrap_or(a.active_ms)),
                    "endsAt": rfc3339(a.ends_ms.unwrap_or(now_ms + valid_ms)),
                    "generatorURL": generator_url(external, a),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A firing alert of rule `idle` with these labels and annotations.
    fn firing(
        fingerprint: &str,
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
    ) -> Alert {
        Alert {
            fingerprint: fingerprint.into(),
            rule: "idle".into(),
            labels,
            annotations,
            state: State::Firing,
            value: 1.0,
            active_ms: 0,
            starts_ms: Some(0),
            ends_ms: None,
            updated_ms: 0,
        }
    }

    #[test]
    fn fleet_text_never_becomes_slack_markup() {
        let hostile = "team <!channel> & <http://evil.example|click here>";
        let alert = firing(
            "f",
            BTreeMap::from([
                ("alertname".into(), "GpulensIdle".into()),
                ("team".into(), hostile.into()),
            ]),
            BTreeMap::from([("description".into(), hostile.into())]),
        );
        let due = Due {
            group_key: "k".into(),
            group_labels: BTreeMap::from([("team".into(), hostile.into())]),
            alerts: vec![&alert],
            digest: String::new(),
            firing: 1,
        };
        let body = slack(&due, Some("https://gpulens.example.com")).to_string();
        assert!(
            !body.contains("<!channel>") && !body.contains("<http://evil"),
            "{body}"
        );
        assert!(
            body.contains("team &lt;!channel&gt; &amp; &lt;http://evil.example|click here&gt;")
        );
        // The link gpulens adds itself stays a link.
        assert!(body.contains("<https://gpulens.example.com/api/v1/alerts|gpulens alerts>"));
    }

    /// A finding's alert leads to the finding's page; others to the alert in the API.
    #[test]
    fn an_alert_leads_to_its_finding() {
        let mut alert = firing(
            "f1",
            BTreeMap::new(),
            BTreeMap::from([("finding".into(), "/findings/idle_allocation-1a2b".into())]),
        );
        let base = Some("https://gpulens.example.com/");
        assert_eq!(
            generator_url(base, &alert),
            "https://gpulens.example.com/findings/idle_allocation-1a2b"
        );
        // Only a dashboard path is taken from an annotation a rule could set.
        alert
            .annotations
            .insert("finding".into(), "https://evil.example/".into());
        assert_eq!(
            generator_url(base, &alert),
            "https://gpulens.example.com/api/v1/alerts?fingerprint=f1"
        );
    }
}
