//! gpulens-bench's command line: the five benchmarks, each with its help, and a clear refusal
//! of what it does not know.

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gpulens-bench"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn help_lists_every_benchmark() {
    let out = bench(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for name in ["ingest", "storage", "series", "analyze", "ui"] {
        assert!(help.contains(name), "{name} missing from:\n{help}");
    }
    let out = bench(&["analyze", "--help"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("--gpus"));
}

#[test]
fn an_unknown_benchmark_is_refused() {
    let out = bench(&["nonsense"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("nonsense"));
}

#[test]
fn ingest_refuses_empty_sizes_before_it_connects() {
    // The database URL names nothing reachable: a refusal must come before any connection.
    for flag in ["--gpus", "--seconds", "--snapshots-per-batch", "--rounds"] {
        let out = bench(&[
            "ingest",
            "--database-url",
            "postgres://nobody@127.0.0.1:1/none",
            flag,
            "0",
        ]);
        assert!(!out.status.success(), "{flag}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{flag} must be at least 1")),
            "{flag}: {err}"
        );
    }
}

#[test]
fn ingest_refuses_to_profile_a_phase_it_will_not_run() {
    let out = bench(&[
        "ingest",
        "--database-url",
        "postgres://nobody@127.0.0.1:1/none",
        "--profile-phase",
        "store-only",
    ]);
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--profile-phase store-only is a phase of --breakdown"),
        "{err}"
    );
}

/// `--breakdown` stores the round's rows twice more, in this process and without HTTP, and
/// says what each phase reached against raw COPY.
#[tokio::test]
async fn ingest_breakdown_stores_every_phase_and_reports_it() {
    let Some(base) = test_support::stores::pg_base() else {
        return;
    };
    let url = test_support::stores::fresh_database(&base).await;
    let run = |breakdown: bool| {
        let mut args = vec![
            "ingest",
            "--database-url",
            &url,
            "--gpus",
            "8",
            "--seconds",
            "3",
            "--rounds",
            "1",
            "--warmup-rounds",
            "0",
            "--in-flight",
            "1",
        ];
        if breakdown {
            args.push("--breakdown");
        }
        let out = bench(&args);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let store = store::Store::connect(&url).await.unwrap();
    let plain = run(false);
    assert!(!plain.contains("store only"), "{plain}");
    // One round: its own ratio is the median's, at both ends of the range.
    let after_colon = |prefix: &str| {
        let line = plain.lines().find(|l| l.trim_start().starts_with(prefix));
        let line = line.unwrap_or_else(|| panic!("no {prefix:?} in:\n{plain}"));
        line.split_once(':').unwrap().1.trim().to_owned()
    };
    let ratio = after_colon("ratio end-to-end / raw COPY:");
    assert_eq!(
        after_colon("of single rounds (each its own raw COPY):"),
        format!("{ratio} to {ratio}"),
        "{plain}"
    );
    let once = store.counts().await.unwrap();
    // Raw COPY and end to end: 8 GPUs × 3 s each.
    assert_eq!(once.gpu_samples, 2 * 8 * 3, "{once:?}");
    let report = run(true);
    for line in ["decode + store, no HTTP:", "store only (decoded batches):"] {
        let found = report.lines().find(|l| l.trim_start().starts_with(line));
        let found = found.unwrap_or_else(|| panic!("no {line:?} in:\n{report}"));
        assert!(found.contains("rows/s (median), ratio"), "{found}");
    }
    let after = store.counts().await.unwrap();
    assert_eq!(after.gpu_samples - once.gpu_samples, 4 * 8 * 3, "{after:?}");
    assert_eq!(
        after.process_samples - once.process_samples,
        2 * once.process_samples,
        "{after:?}"
    );
}
