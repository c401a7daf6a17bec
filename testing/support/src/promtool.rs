//! `promtool check metrics` on a scrape, for the golden-scrape tests of the collector and the
//! agent; tests/run.sh installs promtool.

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `promtool check metrics` on `text`; its complaints, if any.
pub fn check_metrics(text: &str) -> Result<(), String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Label names that say the same as the shared vocabulary in other words (docs/metrics.md,
/// "One label vocabulary"): a scrape must not carry them.
const SYNONYMS: [(&str, &str); 6] = [
    ("uuid", "gpu_uuid"),
    ("gpu", "gpu_uuid"),
    ("model", "gpu_model"),
    ("gi_id", "gpu_instance"),
    ("ci_id", "compute_instance"),
    ("hostname", "node"),
];

/// The label names of one sample line (`name{a="x",b="y"} 1`), reading quoted values with
/// their escapes.
fn label_names(line: &str) -> Vec<String> {
    let Some(open) = line.find('{') else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut name = String::new();
    let mut chars = line[open + 1..].chars();
    while let Some(c) = chars.next() {
        match c {
            '}' => break,
            '=' => {
                names.push(std::mem::take(&mut name));
                // The quoted value.
                chars.next();
                while let Some(v) = chars.next() {
                    match v {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            ',' | ' ' => {}
            c => name.push(c),
        }
    }
    names
}

/// Checks a scrape keeps to the shared label vocabulary: no synonym of its labels, and every
/// series of a GPU (`gpu_uuid`) also names its `cluster` and `node`.
pub fn check_vocabulary(text: &str) -> Result<(), String> {
    let mut problems = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let names = label_names(line);
        for (bad, good) in SYNONYMS {
            if names.iter().any(|n| n == bad) {
                problems.push(format!("label {bad} (use {good}): {line}"));
            }
        }
        if names.iter().any(|n| n == "gpu_uuid")
            && !(names.iter().any(|n| n == "cluster") && names.iter().any(|n| n == "node"))
        {
            problems.push(format!("a GPU series without cluster and node: {line}"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

#[test]
fn the_vocabulary_check_names_synonyms_and_gpu_series_without_their_node() {
    assert!(check_vocabulary("a{cluster=\"c\",node=\"n\",gpu_uuid=\"GPU-1\"} 1\n").is_ok());
    let e =
        check_vocabulary("a{node=\"n\",uuid=\"GPU-1\",model=\"x,y=\\\"z\\\"\"} 1\n").unwrap_err();
    assert!(e.contains("label uuid (use gpu_uuid)"), "{e}");
    assert!(e.contains("label model (use gpu_model)"), "{e}");
    let e = check_vocabulary("a{gpu_uuid=\"GPU-1\"} 1\n").unwrap_err();
    assert!(e.contains("without cluster and node"), "{e}");
}
