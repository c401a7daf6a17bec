//! Weekly utilization reports: for each ISO week in the configured time zone, the fleet funnel
//! and its trend, teams, idle allocations, interference, open recommendations, per-model and
//! per-node tables; as one self-contained HTML file and as CSV. Made on schedule by one
//! collector (a database lock), stored, listed at `/api/v1/reports`, and on demand with
//! `gpulens report`. See docs/reports.md.

pub mod api;
pub mod content;
pub mod csv;
pub mod html;
pub mod metrics;
pub mod week;

pub use api::{ReportsState, routes};
pub use metrics::ReportMetrics;

use std::time::Duration;

use serde::Deserialize;

use collector_shared::settings::Secret;
use content::ReportData;
use store::reports::StoredReport;
use store::{LOCK_REPORTS, Store};
use week::IsoWeek;

/// `[reports]` in the configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Make each week's report when the week is over.
    pub enabled: bool,
    /// IANA time zone whose Monday midnights bound the weeks.
    pub timezone: String,
    /// How long after the week ends its report is made (late data, rollups).
    #[serde(deserialize_with = "collector_shared::settings::duration")]
    pub delay: Duration,
    /// Base URL of this gpulens, for links in the webhook message.
    pub external_url: Option<String>,
    /// Post a summary and links here when a report is ready.
    pub webhook: Option<Webhook>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    pub url: Secret,
    /// `json` (gpulens' body) or `slack` (an incoming webhook's `text`).
    #[serde(default = "default_kind")]
    pub kind: String,
    /// Signs the body as alert notifications are signed (`X-Gpulens-Signature`).
    #[serde(default)]
    pub secret: Option<Secret>,
}

fn default_kind() -> String {
    "json".into()
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enabled: true,
            timezone: "UTC".into(),
            delay: Duration::from_secs(3600),
            external_url: None,
            webhook: None,
        }
    }
}

impl Settings {
    pub fn check(&self) -> anyhow::Result<()> {
        week::zone(&self.timezone).map_err(|e| anyhow::anyhow!("reports: {e}"))?;
        if let Some(w) = &self.webhook
            && !matches!(w.kind.as_str(), "json" | "slack")
        {
            anyhow::bail!(
                "reports.webhook.kind must be \"json\" or \"slack\", not {:?}",
                w.kind
            );
        }
        Ok(())
    }
}

/// A stage of making a report, for progress output.
pub trait Progress {
    fn stage(&mut self, done: usize, of: usize, what: &str);
}

impl Progress for () {
    fn stage(&mut self, _: usize, _: usize, _: &str) {}
}

/// Why a report cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{week} ends at {end}; a report covers a whole week, so it can be made after that")]
    NotOver { week: IsoWeek, end: String },
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// The analysis of [from, to), as if run at `to`.
async fn analyse(
    store: &Store,
    thresholds: &analytics::Config,
    from: i64,
    to: i64,
) -> anyhow::Result<analytics::Analysis> {
    let window = Duration::from_millis((to - from) as u64);
    Ok(crate::analysis::run(store, thresholds, window, to).await?.0)
}

/// Makes the report of `week`: analyses the week and the week before (for the trend).
pub async fn generate(
    store: &Store,
    thresholds: &analytics::Config,
    week: IsoWeek,
    timezone: &str,
    now_ms: i64,
    progress: &mut (dyn Progress + Send),
) -> Result<(ReportData, String, String), ReportError> {
    let tz = week::zone(timezone).map_err(|e| anyhow::anyhow!(e))?;
    let (from, to) = week.bounds(&tz);
    if to > now_ms {
        return Err(ReportError::NotOver {
            week,
            end: model::time::rfc3339(to),
        });
    }
    progress.stage(0, 4, &format!("analysing {week}"));
    let a = analyse(store, thresholds, from, to).await?;
    let previous = week.previous();
    progress.stage(1, 4, &format!("analysing {previous} for the trend"));
    let (pf, pt) = previous.bounds(&tz);
    let p = analyse(store, thresholds, pf, pt).await?;
    progress.stage(2, 4, "rendering");
    let mut data = ReportData::build(
        week.to_string(),
        timezone.to_owned(),
        &a,
        (!p.funnel.total.is_empty()).then_some(&p),
        now_ms,
    );
    let gpus: i64 = store
        .nodes()
        .await
        .map_err(anyhow::Error::from)?
        .iter()
        .map(|n| n.gpu_count)
        .sum();
    let week_hours = (to - from) as f64 / 3_600_000.0;
    if let Some(note) = coverage_note(
        a.funnel.total.observed_share(gpus, week_hours),
        gpus,
        week_hours,
    ) {
        data.limitations.insert(0, note);
    }
    let html = html::render(&data);
    let csv = csv::render(&data);
    progress.stage(3, 4, "done");
    Ok((data, html, csv))
}

/// "Partial week" when the fleet's GPUs were observed for less than 95 % of the week
/// ([`analytics::FunnelRow::observed_share`]): how much of it the data covers, so nobody reads
/// a partial week as a quiet one.
fn coverage_note(share: f64, gpus: i64, week_hours: f64) -> Option<String> {
    (share < 0.95).then(|| {
        format!(
            "Partial week: the fleet ({}) was observed for {:.0} % of it (about {:.1} of {:.0} days), so totals are lower than a full week's.",
            model::figures::count(gpus as f64, "GPU", "GPUs"),
            share * 100.0,
            share * week_hours / 24.0,
            week_hours / 24.0
        )
    })
}

/// Makes and stores the report of `week`.
pub async fn make_and_store(
    store: &Store,
    thresholds: &analytics::Config,
    week: IsoWeek,
    timezone: &str,
    now_ms: i64,
    progress: &mut (dyn Progress + Send),
) -> Result<StoredReport, ReportError> {
    let (data, html, csv) = generate(store, thresholds, week, timezone, now_ms, progress).await?;
    Ok(make_stored(store, &data, html, csv).await?)
}

/// Stores a report made with [`generate`].
pub async fn make_stored(
    store: &Store,
    data: &ReportData,
    html: String,
    csv: String,
) -> anyhow::Result<StoredReport> {
    let r = StoredReport {
        week: data.week.clone(),
        timezone: data.timezone.clone(),
        from_ms: data.from_ms,
        to_ms: data.to_ms,
        generated_ms: data.generated_ms,
        summary: data.summary(),
        data: serde_json::to_string(data)?,
        html,
        csv,
    };
    store.save_report(&r).await?;
    Ok(r)
}

/// The path of a stored report in the API.
pub fn link(external: Option<&str>, week: &str, timezone: &str, format: &str) -> String {
    let base = external.unwrap_or("").trim_end_matches('/');
    let tz: String = timezone
        .chars()
        .map(|c| {
            if c == '/' {
                "%2F".to_owned()
            } else if c == '+' {
                "%2B".to_owned()
            } else {
                c.to_string()
            }
        })
        .collect();
    format!("{base}/api/v1/reports/{week}?format={format}&timezone={tz}")
}

/// Posts the summary and links of a new report (three tries).
async fn announce(s: &Settings, w: &Webhook, r: &StoredReport) -> anyhow::Result<()> {
    let html = link(s.external_url.as_deref(), &r.week, &r.timezone, "html");
    let csv = link(s.external_url.as_deref(), &r.week, &r.timezone, "csv");
    let body = if w.kind == "slack" {
        // The summary escaped for Slack's markup (it carries the configured currency).
        let summary = crate::alerts::slack_text(&r.summary);
        serde_json::json!({ "text": format!("{summary}\n<{html}|HTML report> · <{csv}|CSV>") })
    } else {
        serde_json::json!({
            "week": r.week, "timezone": r.timezone,
            "from": model::time::rfc3339(r.from_ms), "to": model::time::rfc3339(r.to_ms),
            "summary": r.summary, "html": html, "csv": csv,
        })
    }
    .to_string();
    // As the alert receivers: a redirect is not followed (the secret-signed body would go to
    // wherever the webhook points), and an answer's body is read only as far as 300 bytes.
    let http = ingest_client::http()
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let mut last = String::new();
    for attempt in 0..3 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(2 << attempt)).await;
        }
        let req = http
            .post(&w.url.0)
            .header("content-type", "application/json");
        match collector_shared::signing::signed(req, w.secret.as_ref(), &body)
            .body(body.clone())
            .send()
            .await
        {
            Ok(resp) if resp.status().is_success() => return Ok(()),
            Ok(resp) if resp.status().is_client_error() && resp.status().as_u16() != 429 => {
                let status = resp.status();
                let why = ingest_client::bounded::prefix(resp, 300).await;
                anyhow::bail!("the report webhook refused the message: HTTP {status}: {why}")
            }
            // A redirect is final too, as for the alert receivers: asking again gets the same.
            Ok(resp) if resp.status().is_redirection() => {
                let to = resp
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .map(|l| {
                        ingest_client::bounded::one_line(
                            &String::from_utf8_lossy(l.as_bytes()),
                            200,
                            false,
                        )
                    })
                    .unwrap_or_else(|| "nowhere said".into());
                anyhow::bail!(
                    "the report webhook answered HTTP {} (a redirect to {to}), which gpulens does not follow: configure the URL it redirects to",
                    resp.status()
                )
            }
            Ok(resp) => {
                let status = resp.status();
                last = format!(
                    "HTTP {status}: {}",
                    ingest_client::bounded::prefix(resp, 300).await
                );
            }
            Err(e) => last = e.without_url().to_string(),
        }
    }
    anyhow::bail!("the report webhook did not take the message after 3 tries: {last}")
}

/// Makes last week's report if it is due and not stored yet; returns it when made.
pub async fn scheduled(
    store: &Store,
    s: &Settings,
    thresholds: &analytics::Config,
    now_ms: i64,
    metrics: &ReportMetrics,
) -> anyhow::Result<Option<StoredReport>> {
    let tz = week::zone(&s.timezone).map_err(|e| anyhow::anyhow!(e))?;
    let week = IsoWeek::last_complete(now_ms - s.delay.as_millis() as i64, &tz);
    if store
        .report(&week.to_string(), &s.timezone)
        .await?
        .is_some()
    {
        return Ok(None);
    }
    let Some(lock) = store.try_job_lock(LOCK_REPORTS).await? else {
        return Ok(None);
    };
    let result = async {
        // Another collector may have made it while this one waited for the lock.
        if store
            .report(&week.to_string(), &s.timezone)
            .await?
            .is_some()
        {
            return Ok(None);
        }
        let (data, html, csv) =
            generate(store, thresholds, week, &s.timezone, now_ms, &mut ()).await?;
        if data.is_empty() {
            // No data that week (gpulens was not running yet): nothing to report.
            return Ok(None);
        }
        anyhow::Ok(Some(make_stored(store, &data, html, csv).await?))
    }
    .await;
    lock.release().await?;
    let made = result?;
    if made.is_some() {
        metrics.made.inc();
    }
    if let (Some(r), Some(w)) = (&made, &s.webhook) {
        tracing::info!(week = %r.week, "weekly report stored");
        let announced = announce(s, w, r).await;
        metrics
            .announcements
            .get_or_create(&metrics::AnnounceLabels {
                outcome: if announced.is_ok() { "sent" } else { "failed" },
            })
            .inc();
        if let Err(e) = announced {
            tracing::warn!(error = %e, week = %r.week, "the report is stored but could not be announced");
        }
    }
    Ok(made)
}

/// The weekly report as a background task: every ten minutes, is a week's report due?
pub fn task(
    store: Store,
    s: Settings,
    thresholds: analytics::Config,
    metrics: ReportMetrics,
) -> std::sync::Arc<dyn collector_shared::tasks::Task> {
    // Weeks without data are looked at once per run, not every ten minutes.
    let empty: std::sync::Arc<tokio::sync::Mutex<Option<String>>> = Default::default();
    let shared = std::sync::Arc::new((store, s, thresholds, metrics));
    collector_shared::tasks::Periodic::task("reports", Duration::from_secs(600), move || {
        let (shared, empty) = (shared.clone(), empty.clone());
        Box::pin(async move {
            let (store, s, thresholds, metrics) = &*shared;
            let mut empty = empty.lock().await;
            let now = model::time::now_ms();
            let tz = week::zone(&s.timezone)
                .map_err(|e| anyhow::anyhow!("report time zone {:?}: {e}", s.timezone))?;
            let due = IsoWeek::last_complete(now - s.delay.as_millis() as i64, &tz).to_string();
            if empty.as_deref() == Some(due.as_str()) {
                return Ok(());
            }
            match scheduled(store, s, thresholds, now, metrics).await? {
                Some(r) => {
                    tracing::info!(week = %r.week, summary = %r.summary, "weekly report made")
                }
                None => {
                    if store.report(&due, &s.timezone).await?.is_none() {
                        *empty = Some(due);
                    }
                }
            }
            Ok(())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::coverage_note;

    /// The report webhook answering an error without end costs a few hundred bytes,
    /// and a redirect is not followed (the signed body would go wherever it points).
    #[tokio::test]
    async fn a_hostile_report_webhook_is_read_no_further_than_its_reason() {
        use kube_standin::hostile::{Behaviour, Hostile};
        let report = store::reports::StoredReport {
            week: "2026-W46".into(),
            timezone: "UTC".into(),
            from_ms: 0,
            to_ms: 1,
            generated_ms: 1,
            summary: "s".into(),
            data: String::new(),
            html: String::new(),
            csv: String::new(),
        };
        let peer = Hostile::start(Behaviour::Endless {
            status: 400,
            filler: "no ",
        })
        .await;
        let hook = super::Webhook {
            url: collector_shared::settings::Secret(format!("{}/hook", peer.url)),
            kind: "json".into(),
            secret: None,
        };
        let started = std::time::Instant::now();
        let e = super::announce(&super::Settings::default(), &hook, &report)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("the report webhook refused the message: HTTP 400"),
            "{e:.200}"
        );
        assert!(e.len() < 500, "{} bytes", e.len());
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let peak = model::own_usage::peak_rss_mib().expect("VmHWM is read");
        assert!(peak < 512.0, "{peak:.0} MiB");
        let redirect = Hostile::start(Behaviour::Redirect {
            to: format!("{}/elsewhere", peer.url),
        })
        .await;
        let hook = super::Webhook {
            url: collector_shared::settings::Secret(format!("{}/hook", redirect.url)),
            ..hook
        };
        let e = super::announce(&super::Settings::default(), &hook, &report)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("HTTP 307"), "{e:.200}");
        assert_eq!(peer.requests(), 1, "the redirect was followed");
    }

    #[test]
    fn a_partial_week_says_how_much_of_it_has_data() {
        let week = 168.0;
        assert_eq!(coverage_note(1.0, 16, week), None);
        assert_eq!(coverage_note(0.96, 16, week), None);
        assert_eq!(
            coverage_note(0.5, 16, week).as_deref(),
            Some(
                "Partial week: the fleet (16 GPUs) was observed for 50 % of it (about 3.5 of 7 days), so totals are lower than a full week's."
            )
        );
        assert!(
            coverage_note(0.25, 1, week)
                .unwrap()
                .starts_with("Partial week: the fleet (1 GPU) was observed")
        );
    }
}
