//! The stored form of an analysis: a JSON object `{"format": 2, "analysis": …}`. The format
//! number says how to read the rest, so a collector reading a newer or older database names
//! the mismatch instead of misreading it, and older formats are upgraded here, in one place,
//! before they are read:
//!
//! - format 0 (a bare analysis object, before the envelope) and format 1 stored each evidence
//!   series with its `/api/v1/series` link (`href`); format 2 stores what the series shows —
//!   a tenant series' cluster as a field — and the API builds the link (`view.rs`).
//!
//! Golden files of each format (`collector-shared/tests/data/stored-analysis/`, format 0 and 1 as
//! collectors wrote them) hold the form still: a field renamed in the analytics changes what
//! this writes, and the test comparing it with `format-2.json` fails — bump [`FORMAT`] and add
//! the upgrade when the change is meant. A field *added* with a serde default (the plan's
//! `held_for_repair` and `worth`) reads from every older form unchanged and
//! is ignored by an older reader: the golden file is rewritten, the format stays.

use analytics::Analysis;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The format this collector writes.
pub const FORMAT: u32 = 2;

#[derive(Serialize)]
struct Out<'a> {
    format: u32,
    analysis: &'a Analysis,
}

/// The envelope's format alone.
#[derive(Deserialize)]
struct Head {
    format: Option<u32>,
}

#[derive(Deserialize)]
struct Versioned {
    analysis: Analysis,
}

#[derive(Deserialize)]
struct Untyped {
    analysis: Value,
}

pub fn encode(a: &Analysis) -> String {
    serde_json::to_string(&Out {
        format: FORMAT,
        analysis: a,
    })
    .expect("an analysis serializes")
}

pub fn decode(body: &str) -> Result<Analysis, String> {
    let head: Head = serde_json::from_str(body).map_err(|e| e.to_string())?;
    let format = head.format.unwrap_or(0);
    let read = |r: serde_json::Result<Analysis>| {
        r.map_err(|e| format!("stored analysis (format {format}): {e}"))
    };
    match format {
        FORMAT => read(serde_json::from_str::<Versioned>(body).map(|v| v.analysis)),
        0 | 1 => {
            let mut a: Value = if format == 0 {
                serde_json::from_str(body)
            } else {
                serde_json::from_str::<Untyped>(body).map(|u| u.analysis)
            }
            .map_err(|e| format!("stored analysis (format {format}): {e}"))?;
            evidence_without_links(&mut a);
            read(serde_json::from_value(a))
        }
        other => Err(format!(
            "stored analysis has format {other}; this collector reads formats 0 to {FORMAT} (a newer collector wrote it)"
        )),
    }
}

/// Formats 0 and 1 → 2: each evidence series of the findings and recommendations loses its
/// `href`; a tenant series keeps the cluster the link named.
fn evidence_without_links(analysis: &mut Value) {
    for list in ["findings", "recommendations"] {
        let Some(items) = analysis.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for item in items {
            let Some(evidence) = item.get_mut("evidence").and_then(Value::as_array_mut) else {
                continue;
            };
            for e in evidence.iter_mut().filter_map(Value::as_object_mut) {
                let href = e.remove("href");
                let cluster = href.as_ref().and_then(Value::as_str).and_then(cluster_of);
                if let Some(c) = cluster
                    && !e.contains_key("cluster")
                {
                    e.insert("cluster".into(), Value::String(c));
                }
            }
        }
    }
}

/// The `cluster` a format-1 link named, unescaped (it escaped ` &#+%?=` as `%XX`).
fn cluster_of(href: &str) -> Option<String> {
    let (_, query) = href.split_once('?')?;
    let raw = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("cluster="))?;
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| raw.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_form_round_trips_and_names_formats_it_cannot_read() {
        let a = Analysis {
            from_ms: 1,
            to_ms: 2,
            generated_ms: 3,
            limitations: vec!["x".into()],
            ..Default::default()
        };
        let body = encode(&a);
        assert!(body.starts_with(r#"{"format":2,"#), "{body}");
        let back = decode(&body).unwrap();
        assert_eq!(
            (back.from_ms, back.to_ms, back.limitations),
            (1, 2, vec!["x".into()])
        );
        let newer = r#"{"format":3,"analysis":{}}"#;
        assert!(decode(newer).unwrap_err().contains("format 3"));
        assert!(decode("not json").is_err());
        assert!(decode(r#"{"format":1,"analysis":[]}"#).is_err());
    }

    #[test]
    fn a_format_1_link_gives_back_the_cluster_it_named() {
        assert_eq!(
            cluster_of("/api/v1/series?metric=m&entity=tenant:a&from=1&to=2&cluster=eu%20west%261")
                .as_deref(),
            Some("eu west&1")
        );
        assert_eq!(cluster_of("/api/v1/series?metric=m&entity=gpu:G"), None);
        // A stray `%` is kept as written, not misread.
        assert_eq!(cluster_of("?cluster=a%2").as_deref(), Some("a%2"));
    }

    fn golden(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/stored-analysis")
            .join(name)
    }

    /// Formats 0 and 1 as a collector wrote them read into the same analysis, whose format-2
    /// form is `format-2.json` byte for byte (`GPULENS_BLESS=1` rewrites that file when a change
    /// of the form is meant — with a new format number).
    #[test]
    fn every_format_written_reads_and_the_current_form_holds_still() {
        let read = |name: &str| decode(&std::fs::read_to_string(golden(name)).unwrap()).unwrap();
        let from_1 = read("format-1.json");
        let written = encode(&from_1);
        assert_eq!(encode(&read("format-0.json")), written);
        assert!(!from_1.findings.is_empty() && !from_1.recommendations.is_empty());
        let evidence = from_1
            .findings
            .iter()
            .flat_map(|f| &f.evidence)
            .chain(from_1.recommendations.iter().flat_map(|r| &r.evidence));
        for e in evidence {
            let tenant = e.entity.starts_with("tenant:");
            assert_eq!(
                e.cluster.as_deref(),
                tenant.then_some("prod-k8s"),
                "{}",
                e.entity
            );
        }
        let path = golden("format-2.json");
        if std::env::var_os("GPULENS_BLESS").is_some() {
            std::fs::write(&path, &written).unwrap();
        }
        let kept = std::fs::read_to_string(&path).unwrap();
        assert!(
            kept == written,
            "the stored analysis' form changed: bump FORMAT, upgrade the older formats in \
             stored.rs and rewrite format-2.json (GPULENS_BLESS=1)"
        );
        assert_eq!(encode(&decode(&kept).unwrap()), kept);
    }
}
