//! The README's commands, run as a new user runs them: the demo started the README's way (its
//! first command, `cargo run --bin gpulens -- demo`, is this test binary's `gpulens demo`), then
//! every `sh` block of README.md pasted in order into one bash session of a second terminal,
//! whose working directory looks like the repository (`target/`, `scenarios/`,
//! `gpulens.example.toml`). A command that exits non-zero or prints an error fails the test, so
//! a README change that breaks a command fails the suite.
//!
//! An HTML comment right before a fence marks a block:
//! - `<!-- readme-test: skip (why) -->`: not run (it needs what the suite lacks, says why);
//! - `<!-- readme-test: runs until stopped -->`: a server; it must still be running after 8 s
//!   with nothing wrong in its output, then it is stopped. It gets `GPULENS_LISTEN` (which the
//!   README documents as overriding the listen address) so it cannot meet the port of a demo.
//!
//! Blocks in docs/*.md run the same way where marked `<!-- readme-test: run -->`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Killed, TempDir, free_port};

#[derive(Debug, PartialEq)]
enum Mark {
    Run,
    Skip,
    Server,
}

#[derive(Debug)]
struct Block {
    file: String,
    line: usize,
    mark: Mark,
    code: String,
}

/// The shell blocks of a Markdown file with their marks. `default` is the mark of an unmarked
/// block (README: run; docs: skip).
fn blocks(path: &Path, default: fn() -> Mark) -> Result<Vec<Block>, String> {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_start();
        if let Some(info) = fence.strip_prefix("```") {
            let start = i;
            let body: Vec<&str> = lines[i + 1..]
                .iter()
                .take_while(|l| !l.trim_start().starts_with("```"))
                .copied()
                .collect();
            i += body.len() + 2;
            if !matches!(info.trim(), "sh" | "bash" | "shell") {
                continue;
            }
            let marker = (0..start)
                .rev()
                .map(|j| lines[j].trim())
                .find(|l| !l.is_empty())
                .and_then(|l| l.strip_prefix("<!-- readme-test:"))
                .map(|l| l.trim_end_matches("-->").trim().to_owned());
            let mark = match marker.as_deref() {
                None => default(),
                Some("run") => Mark::Run,
                Some("runs until stopped") => Mark::Server,
                Some(m) if m.starts_with("skip (") && m.ends_with(')') => Mark::Skip,
                Some(m) => {
                    return Err(format!(
                        "{}:{}: unknown readme-test mark {m:?}",
                        path.display(),
                        start + 1
                    ));
                }
            };
            out.push(Block {
                file: path.file_name().unwrap().to_string_lossy().into_owned(),
                line: start + 1,
                mark,
                code: body.join("\n"),
            });
        } else {
            i += 1;
        }
    }
    Ok(out)
}

/// Output that says something went wrong although the exit status did not.
fn complaint(output: &str) -> Option<&str> {
    output.lines().find(|l| {
        let l = l.trim_start();
        l.starts_with("error") || l.contains(" ERROR ") || l.contains("panicked at")
    })
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn heavy_every_readme_command_runs_verbatim_against_the_demo() {
    let mut all = blocks(&root().join("README.md"), || Mark::Run).unwrap();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    for d in docs {
        all.extend(blocks(&d, || Mark::Skip).unwrap());
    }
    let runnable: Vec<&Block> = all.iter().filter(|b| b.mark != Mark::Skip).collect();
    assert!(
        runnable.len() >= 2,
        "README.md lost its runnable blocks: {all:#?}"
    );

    // A second terminal's working directory: the repository as the commands see it.
    let dir = TempDir::new("readme");
    let work = dir.path();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_gpulens")).parent().unwrap();
    let target = bin_dir.parent().unwrap();
    std::os::unix::fs::symlink(target, work.join("target")).unwrap();
    for name in ["scenarios", "gpulens.example.toml"] {
        std::os::unix::fs::symlink(root().join(name), work.join(name)).unwrap();
    }
    assert_eq!(
        bin_dir.file_name().unwrap(),
        "debug",
        "the README's PATH line names target/debug"
    );

    // The first terminal: the demo, started the README's way, on a port of the test's own.
    let port = free_port();
    let log = work.join("demo.log");
    let _demo = Killed(
        Command::new(env!("CARGO_BIN_EXE_gpulens"))
            .arg("demo")
            .current_dir(work)
            .env("GPULENS_LISTEN", format!("127.0.0.1:{port}"))
            .env_remove("GPULENS_DATA_DIR")
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let out = std::fs::read_to_string(&log).unwrap_or_default();
        if out.contains("streaming live samples") {
            break;
        }
        if let Some(e) = complaint(&out) {
            panic!("the demo failed: {e}");
        }
        assert!(
            Instant::now() < deadline,
            "the demo did not get ready: {out}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let out = std::fs::read_to_string(&log).unwrap();
    for hint in ["dashboard: http://", "for a second terminal: source"] {
        assert!(
            out.contains(hint),
            "the demo does not print {hint:?}: {out}"
        );
    }

    for b in runnable {
        let script = match b.mark {
            Mark::Run => format!("set -euo pipefail\n{}\n", b.code),
            Mark::Server => format!(
                "set -euo pipefail\nexport GPULENS_LISTEN=127.0.0.1:{}\n( {} ) > server.log 2>&1 &\n\
                 pid=$!\nsleep 8\nif ! kill -0 $pid 2>/dev/null; then cat server.log; echo 'error: the server stopped'; exit 1; fi\n\
                 kill $pid; wait $pid || true\ncat server.log\n",
                free_port(),
                b.code
            ),
            Mark::Skip => unreachable!(),
        };
        // Earlier blocks set up the shell (PATH, the demo's env file): each block runs after
        // all the plain blocks before it, as pasting them into one terminal would.
        let setup: String = all
            .iter()
            .filter(|p| p.mark == Mark::Run && p.file == b.file && p.line < b.line)
            .flat_map(|p| p.code.lines())
            .filter(|l| l.starts_with("export ") || l.starts_with("source "))
            .collect::<Vec<_>>()
            .join("\n");
        let started = Instant::now();
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("{setup}\n{script}"))
            .current_dir(work)
            .env_remove("GPULENS_LISTEN")
            .env_remove("GPULENS_DATA_DIR")
            .env_remove("GPULENS_DATABASE_URL")
            .env_remove("GPULENS_CONFIG")
            .env_remove("GPULENS_TOKEN")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "{}:{}: the block failed ({}):\n{}\n--- output ---\n{text}",
            b.file,
            b.line,
            out.status,
            b.code
        );
        if let Some(line) = complaint(&text) {
            panic!(
                "{}:{}: the block printed an error: {line}\n{}\n--- output ---\n{text}",
                b.file, b.line, b.code
            );
        }
        eprintln!(
            "{}:{} ran in {:.1}s",
            b.file,
            b.line,
            started.elapsed().as_secs_f64()
        );
    }
    assert!(
        work.join("week.html").exists(),
        "the README's report command wrote no week.html"
    );
}

#[test]
fn readme_marks_are_read_and_unknown_ones_refused() {
    let dir = TempDir::new("readme-marks");
    let md = dir.path().join("x.md");
    std::fs::write(
        &md,
        "# x\n\n```sh\necho a\n```\n\n<!-- readme-test: skip (no db) -->\n```sh\necho b\n```\n\n<!-- readme-test: runs until stopped -->\n\n```bash\nserve\n```\n```text\nnot shell\n```\n",
    )
    .unwrap();
    let b = blocks(&md, || Mark::Run).unwrap();
    let marks: Vec<(&Mark, &str)> = b.iter().map(|b| (&b.mark, b.code.as_str())).collect();
    assert_eq!(
        marks,
        [
            (&Mark::Run, "echo a"),
            (&Mark::Skip, "echo b"),
            (&Mark::Server, "serve")
        ]
    );
    std::fs::write(&md, "<!-- readme-test: maybe -->\n```sh\nx\n```\n").unwrap();
    let err = blocks(&md, || Mark::Run).unwrap_err();
    assert!(err.contains("unknown readme-test mark"), "{err}");
}
