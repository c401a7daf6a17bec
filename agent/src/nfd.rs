//! Node Feature Discovery's local feature file: the advisory `gpulens.io/` labels the collector
//! computed for this node, written where NFD's `local` source reads them
//! (`/etc/kubernetes/node-feature-discovery/features.d/` by default). NFD turns each
//! `key=value` line into a node label, so clusters that prefer NFD need not give gpulens any
//! Kubernetes API rights.
//!
//! The file is replaced atomically (written to a dotfile beside it, synced, renamed), stays
//! under NFD's 64 KiB limit (NFD ignores larger files), carries an `expiry-time` directive so
//! NFD drops the labels if the agent stops refreshing them, and holds only labels that pass
//! gpulens' advisory allow-list.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use model::labels::{self, Purpose};

/// NFD ignores feature files larger than this (source/local, `MaxFeatureFileSize`).
pub const MAX_FEATURE_FILE_BYTES: usize = 65_536;

/// The file name gpulens writes inside the features.d directory.
pub const FILE_NAME: &str = "gpulens";

#[derive(Debug, thiserror::Error)]
pub enum NfdError {
    #[error(transparent)]
    Refused(#[from] labels::LabelError),
    #[error("the feature file would be {0} bytes; NFD ignores files over {MAX_FEATURE_FILE_BYTES}")]
    TooLarge(usize),
    #[error("cannot write the feature file {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// The file's text: a header, the expiry directive, then one `key=value` line per label.
pub fn render(
    labels: &BTreeMap<String, String>,
    generated_ms: i64,
    expires_ms: i64,
) -> Result<String, NfdError> {
    labels::check_all(labels, Purpose::Advisory)?;
    let mut s = format!(
        "# Written by the gpulens agent at {}: advisory labels from the collector's analysis.\n\
         # Replaced whole on every refresh; edits are lost. NFD drops these labels after the expiry.\n\
         # +expiry-time={}\n",
        model::time::rfc3339_seconds(generated_ms),
        model::time::rfc3339_seconds(expires_ms),
    );
    for (k, v) in labels {
        s.push_str(k);
        s.push('=');
        s.push_str(v);
        s.push('\n');
    }
    if s.len() > MAX_FEATURE_FILE_BYTES {
        return Err(NfdError::TooLarge(s.len()));
    }
    Ok(s)
}

/// Replaces `dir/FILE_NAME` with `text` atomically: readers see the old file or the new one,
/// never a part.
pub fn write(dir: &Path, text: &str) -> Result<(), NfdError> {
    let target = dir.join(FILE_NAME);
    let tmp = dir.join(format!(".{FILE_NAME}.tmp"));
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| NfdError::Io { path, source }
    };
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(text.as_bytes()).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, &target).map_err(io(&target))?;
    // Make the rename itself durable.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Parses a feature file back into labels and its expiry (for `status` and tests).
pub fn parse(text: &str) -> (BTreeMap<String, String>, Option<String>) {
    let mut out = BTreeMap::new();
    let mut expiry = None;
    for line in text.lines() {
        if let Some(d) = line.strip_prefix("# +expiry-time=") {
            expiry = Some(d.trim().to_owned());
        } else if line.starts_with('#') || line.trim().is_empty() {
            continue;
        } else {
            let (k, v) = line.split_once('=').unwrap_or((line, "true"));
            out.insert(k.trim().to_owned(), v.trim().to_owned());
        }
    }
    (out, expiry)
}

/// How the agent keeps the feature file fresh.
#[derive(Debug, Clone)]
pub struct Refresh {
    /// Base URL of the collector.
    pub collector: String,
    pub token: ingest_client::Token,
    pub cluster: String,
    pub node: String,
    /// NFD's features.d directory.
    pub dir: std::path::PathBuf,
    /// How often the labels are fetched.
    pub every: std::time::Duration,
    /// HTTPS to the collector, as for batches.
    pub tls: ingest_client::Tls,
}

/// The labels' lifetime in the file: three refreshes, and at least an hour, so a collector
/// restart or a short outage does not flap them, while a node whose agent is gone loses them.
pub fn lifetime(every: std::time::Duration) -> std::time::Duration {
    (every * 3).max(std::time::Duration::from_secs(3600))
}

/// Fetches the node's advisory labels once and rewrites the file; returns the labels written.
pub async fn refresh_once(
    http: &reqwest::Client,
    r: &Refresh,
) -> anyhow::Result<BTreeMap<String, String>> {
    let mut url = reqwest::Url::parse(&r.collector)
        .map_err(|e| anyhow::anyhow!("collector URL {:?}: {e}", r.collector))?;
    url.path_segments_mut()
        .map_err(|()| anyhow::anyhow!("collector URL {:?} cannot take a path", r.collector))?
        .pop_if_empty()
        .extend(["api", "v1", "nodes", &r.node, "labels"]);
    url.query_pairs_mut().append_pair("cluster", &r.cluster);
    let resp = http.get(url).bearer_auth(r.token.current()).send().await?;
    let status = resp.status();
    if !status.is_success() {
        let body = ingest_client::bounded::prefix(resp, 4096).await;
        let detail = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["detail"].as_str().map(str::to_owned))
            .unwrap_or(body);
        anyhow::bail!("the collector answered {status}: {detail}");
    }
    // A node's labels are a few hundred bytes; the answer is read no further than 1 MiB.
    let body = ingest_client::bounded::body(resp, 1024 * 1024).await?;
    let answer: model::wire::v1::NodeLabels = serde_json::from_slice(&body)
        .map_err(|e| anyhow::anyhow!("the collector's answer is not node labels: {e}"))?;
    let now = model::time::now_ms();
    let expires = now.saturating_add(model::time::millis(lifetime(r.every)));
    let text = render(&answer.labels, now, expires)?;
    write(&r.dir, &text)?;
    tracing::debug!(analyzed = %answer.analyzed, labels = answer.labels.len(), "NFD feature file refreshed");
    Ok(answer.labels)
}

/// Refreshes the file every `r.every` until the task is dropped. Failures keep the previous
/// file (its expiry removes the labels if they go on); each kind of failure is logged once
/// until a refresh succeeds.
pub async fn refresh_forever(r: Refresh) {
    let http = match r
        .tls
        .apply(ingest_client::http())
        .timeout(std::time::Duration::from_secs(30))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "no HTTP client for the NFD labels; not writing them");
            return;
        }
    };
    let mut last: Option<BTreeMap<String, String>> = None;
    let mut failing: Option<String> = None;
    let mut tick = tokio::time::interval(r.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match refresh_once(&http, &r).await {
            Ok(labels) => {
                failing = None;
                if last.as_ref() != Some(&labels) {
                    tracing::info!(file = %r.dir.join(FILE_NAME).display(), labels = ?labels, "NFD labels written");
                    last = Some(labels);
                }
            }
            Err(e) => {
                let e = format!("{e:#}");
                if failing.as_deref() != Some(e.as_str()) {
                    tracing::warn!(error = %e, "cannot refresh the NFD labels; the previous file stays until its expiry");
                    failing = Some(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unix ms of Unix seconds.
    fn at(s: i64) -> i64 {
        s * 1000
    }

    fn sample() -> BTreeMap<String, String> {
        BTreeMap::from([
            (labels::UTILIZATION_CLASS.to_owned(), "low".to_owned()),
            (labels::RECOMMENDED_SHARING.to_owned(), "mig".to_owned()),
        ])
    }

    #[test]
    fn the_file_has_nfds_format() {
        let text = render(&sample(), at(1_763_726_400), at(1_763_730_000)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("# Written by the gpulens agent at 2025-11-21T12:00:00Z"));
        assert!(lines.contains(&"# +expiry-time=2025-11-21T13:00:00Z"));
        assert!(lines.contains(&"gpulens.io/utilization-class=low"));
        assert!(lines.contains(&"gpulens.io/recommended-sharing=mig"));
        let (back, expiry) = parse(&text);
        assert_eq!(back, sample());
        assert_eq!(expiry.as_deref(), Some("2025-11-21T13:00:00Z"));
    }

    #[test]
    fn foreign_keys_and_oversized_files_are_refused() {
        let mut l = sample();
        l.insert("kubernetes.io/hostname".into(), "x".into());
        assert!(matches!(
            render(&l, at(0), at(1)),
            Err(NfdError::Refused(_))
        ));
        let mut l = sample();
        l.insert("nvidia.com/mig.config".into(), "all-1g.10gb".into());
        assert!(matches!(
            render(&l, at(0), at(1)),
            Err(NfdError::Refused(_))
        ));
        let many: BTreeMap<String, String> = (0..1200)
            .map(|i| (format!("gpulens.io/k{i:04}"), "v".repeat(50)))
            .collect();
        assert!(matches!(
            render(&many, at(0), at(1)),
            Err(NfdError::TooLarge(_))
        ));
    }

    #[test]
    fn writes_replace_the_file_whole() {
        let dir = crate::scratch::fresh_dir("nfd").unwrap();
        let first = render(&sample(), at(0), at(60)).unwrap();
        write(&dir, &first).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join(FILE_NAME)).unwrap(), first);
        let mut l = sample();
        l.remove(labels::RECOMMENDED_SHARING);
        let second = render(&l, at(60), at(120)).unwrap();
        write(&dir, &second).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join(FILE_NAME)).unwrap(),
            second
        );
        // Only the feature file remains: no temporary file is left for NFD to read.
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![FILE_NAME.to_owned()]);
        // A directory that does not exist is an error that names the path.
        let err = write(&dir.join("missing"), &second).unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
