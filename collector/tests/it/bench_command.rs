//! `gpulens bench …` runs the benchmarks' own program, gpulens-bench, found beside gpulens:
//! every argument passed on untouched (`--help` too), its exit status kept, and a missing
//! program named with how to build it. A stand-in gpulens-bench (a shell script recording its
//! arguments) sits beside a copy of gpulens in a scratch folder.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::support::TempDir;

/// A folder with a copy of gpulens, and a gpulens-bench stand-in when `exit` is given: it
/// writes its arguments one per line to `args.txt` beside it and exits with `exit`.
fn folder(exit: Option<i32>) -> TempDir {
    let dir = TempDir::new("bench-command");
    std::fs::copy(env!("CARGO_BIN_EXE_gpulens"), dir.path().join("gpulens")).unwrap();
    if let Some(code) = exit {
        let script = dir.path().join("gpulens-bench");
        let record = dir.path().join("args.txt");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > '{}'\nexit {code}\n",
                record.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

#[test]
fn the_arguments_go_to_gpulens_bench_untouched_and_its_status_comes_back() {
    let dir = folder(Some(3));
    let out = Command::new(dir.path().join("gpulens"))
        .args(["bench", "analyze", "--gpus", "1000,10000", "--help", "a b"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let args = std::fs::read_to_string(dir.path().join("args.txt")).unwrap();
    assert_eq!(
        args.lines().collect::<Vec<_>>(),
        ["analyze", "--gpus", "1000,10000", "--help", "a b"]
    );

    let dir = folder(Some(0));
    let out = Command::new(dir.path().join("gpulens"))
        .args(["bench", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("args.txt")).unwrap(),
        "--help\n"
    );
}

#[test]
fn without_gpulens_bench_the_command_says_how_to_build_it() {
    let dir = folder(None);
    let out = Command::new(dir.path().join("gpulens"))
        .args(["bench", "ingest"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("gpulens-bench") && err.contains("cargo build --release --bin gpulens-bench"),
        "{err}"
    );
}
