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
