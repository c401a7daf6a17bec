//! The collector's module map, checked: the shared layer is a crate of its own
//! (`collector-shared`) that depends on no feature — Cargo keeps that wall, and this checks its
//! manifest names no crate of the collector's; every top-level module of the collector is a
//! feature or the composition root, no feature imports the composition root, a feature uses
//! another only through its public items (never a submodule of it), and the modules import each
//! other without cycles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::import_circles::rust_files;

/// One folder (or file) each.
const FEATURES: &[&str] = &[
    "alerts",
    "analysis",
    "dashboard",
    "demand",
    "fleet",
    "health",
    "ingest",
    "labels",
    "reclaim",
    "remote_write",
    "reports",
    "simulate",
    "upkeep",
];
/// Puts the features together; nothing below imports it.
const ROOT: &[&str] = &[
    "commands", "config", "router", "schedule", "server", "state", "lib", "main",
];

/// The collector's sources, whose layers this checks.
fn src() -> PathBuf {
    crate::import_circles::workspace().join("collector/src")
}

/// The top-level module a file belongs to (`alerts/api.rs` → `alerts`).
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(src()).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_str()
        .unwrap();
    first.trim_end_matches(".rs").to_owned()
}

/// Submodules of a feature folder (`alerts` → {api, deliver, …}).
fn submodules(module: &str) -> BTreeSet<String> {
    let dir = src().join(module);
    if !dir.is_dir() {
        return BTreeSet::new();
    }
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.trim_end_matches(".rs").to_owned()
        })
        .filter(|n| n != "mod")
        .collect()
}

/// Every `crate::a::b…` path in a file's code (comments left out), with `use crate::{a, b}`
/// groups spread out, as (line, [a, b, …]).
fn crate_paths(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let tail = &rest[at + "crate::".len()..];
            if let Some(group) = tail.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or("");
                for part in inner.split(',') {
                    let segs: Vec<String> = part
                        .trim()
                        .split("::")
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect();
                    if !segs.is_empty() {
                        out.push((i + 1, segs));
                    }
                }
            } else {
                let segs: Vec<String> = tail
                    .split("::")
                    .map_while(|s| {
                        let ident: String = s
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        (!ident.is_empty()).then_some(ident)
                    })
                    .collect();
                // Stop at the first segment that is not a plain path segment.
                out.push((i + 1, segs));
            }
            rest = &tail[1.min(tail.len())..];
        }
    }
    out
}

fn layer(module: &str) -> &'static str {
    if FEATURES.contains(&module) {
        "feature"
    } else if ROOT.contains(&module) {
        "root"
    } else {
        "unknown"
    }
}

#[test]
fn modules_keep_to_their_layers_and_import_each_other_without_cycles() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    let mut problems = Vec::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = module_of(file);
        if layer(&from) == "unknown" {
            problems.push(format!(
                "module `{from}` is in no layer: add it to FEATURES or ROOT in this test (and to lib.rs's list), or move it to the shared crate"
            ));
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let rel = file.strip_prefix(src()).unwrap().display().to_string();
        for (line, segs) in crate_paths(&text) {
            let Some(to) = segs.first() else { continue };
            // `crate::now_ms` and other items re-exported at the crate root belong to the root.
            let to = if src().join(format!("{to}.rs")).exists() || src().join(to).is_dir() {
                to.clone()
            } else {
                "lib".to_owned()
            };
            if to == from {
                continue;
            }
            edges.entry(from.clone()).or_default().insert(to.clone());
            match (layer(&from), layer(&to)) {
                ("feature", "root") => problems.push(format!(
                    "{rel}:{line}: feature `{from}` uses the composition root `{to}`"
                )),
                ("feature", "feature") => {
                    if let Some(sub) = segs.get(1)
                        && submodules(&to).contains(sub)
                    {
                        problems.push(format!(
                            "{rel}:{line}: feature `{from}` reaches into `{to}::{sub}`; use (or re-export) an item of `{to}` itself"
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    // `lib` declares every module; its own edges are declarations, not imports.
    edges.remove("lib");
    if let Some(cycle) = find_cycle(&edges) {
        problems.push(format!(
            "modules import each other in a cycle: {}",
            cycle.join(" → ")
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The test sees what it should: features do use each other.
    assert!(edges["dashboard"].contains("analysis"), "{edges:?}");
}

/// The shared layer's crate depends on no crate of the collector's (so none of its code can
/// name a feature or the composition root), and the features do use it.
#[test]
fn the_shared_layer_is_a_crate_below_the_features() {
    let root = crate::import_circles::workspace();
    let manifest = std::fs::read_to_string(root.join("collector-shared/Cargo.toml")).unwrap();
    let dependencies = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|d| d.split("\n[").next())
        .unwrap();
    let names = dependencies
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split(['=', '.', ' ']).next().unwrap());
    for name in names {
        assert_ne!(
            name, "collector",
            "the shared layer must not depend on the collector"
        );
    }
    let ingest: String = std::fs::read_dir(src().join("ingest"))
        .unwrap()
        .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap())
        .collect();
    assert!(
        ingest.contains("collector_shared::shared"),
        "the features reach the shared layer as collector_shared"
    );
}

#[test]
fn the_checker_finds_paths_groups_and_cycles() {
    let found = crate_paths(
        "use crate::{router::router, state::AppState};\n// crate::ignored::in_comment\nlet x = crate::alerts::state::load(s);",
    );
    let segs: Vec<Vec<&str>> = found
        .iter()
        .map(|(_, s)| s.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(
        segs,
        [
            vec!["router", "router"],
            vec!["state", "AppState"],
            vec!["alerts", "state", "load"]
        ]
    );
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(find_cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(find_cycle(&g).unwrap(), ["a", "b", "c", "a"]);
}

/// A cycle in the graph, as the modules along it, if there is one.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == n) {
            let mut cycle = path[at..].to_vec();
            cycle.push(n.to_owned());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_owned());
        for next in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for n in edges.keys() {
        if let Some(c) = visit(n, edges, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

/// The shared vocabulary does no IO: no file, socket, process or async runtime outside
/// `model/src/own_usage.rs`, which reads the process' own CPU and memory counters for the
/// benchmarks of agent and collector alike.
#[test]
fn the_model_crate_does_no_io_but_read_its_own_counters() {
    use crate::import_circles::{clean, without_tests, workspace};
    const IO: &[&str] = &[
        "std::fs",
        "std::net",
        "std::process",
        "std::io::stdin",
        "File::",
        "TcpStream",
        "tokio",
        "reqwest",
        "sqlx",
    ];
    let root = workspace().join("model/src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 10, "model/src has its sources");
    let mut offenders = Vec::new();
    for f in files {
        if f.ends_with("own_usage.rs") {
            continue;
        }
        let code = without_tests(&clean(&std::fs::read_to_string(&f).unwrap()));
        for io in IO.iter().filter(|io| code.contains(*io)) {
            offenders.push(format!("{} uses {io}", f.display()));
        }
    }
    assert!(offenders.is_empty(), "{offenders:#?}");
}

/// ARCHITECTURE.md stays short, and every invariant it states names what checks it: a test
/// that exists in the workspace (a backticked test-function name, alone or as the end of a
/// path), Cargo, or the construction of the code itself.
#[test]
fn architecture_md_is_short_and_each_invariant_names_an_existing_check() {
    use crate::import_circles::workspace;
    let doc = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    let lines = doc.lines().count();
    assert!(
        lines <= 150,
        "ARCHITECTURE.md has {lines} lines; keep it at 150 or under"
    );

    // Every `fn name` in the workspace's Rust sources (src, tests, fuzz targets).
    let mut files = crate::import_circles::test_sources();
    for (_, src) in crate::import_circles::member_sources() {
        rust_files(&src, &mut files);
    }
    let mut fns = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (i, _) in text.match_indices("fn ") {
            let name: String = text[i + 3..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            fns.insert(name);
        }
    }
    assert!(fns.len() > 1000, "the workspace's functions were read");

    let invariants = doc
        .split("## Invariants")
        .nth(1)
        .expect("ARCHITECTURE.md has its invariants section");
    let invariants = invariants.split("\n## ").next().unwrap();
    let mut bullets: Vec<String> = Vec::new();
    for line in invariants.lines() {
        if line.starts_with("- ") {
            bullets.push(line.to_owned());
        } else if line.starts_with("  ")
            && let Some(b) = bullets.last_mut()
        {
            b.push(' ');
            b.push_str(line.trim());
        }
    }
    assert!(
        bullets.len() >= 10,
        "the invariants were read: {bullets:#?}"
    );
    let mut problems = Vec::new();
    for b in &bullets {
        // A test name: snake case with at least three underscores, maybe behind a path.
        let named: Vec<&str> = b
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|code| code.rsplit("::").next().unwrap())
            .filter(|n| {
                n.matches('_').count() >= 3
                    && n.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
            .collect();
        for n in &named {
            if !fns.contains(*n) {
                problems.push(format!("no test `{n}` in the workspace (named by: {b})"));
            }
        }
        let structural = b.contains("Cargo") || b.contains("by construction");
        if named.is_empty() && !structural && !b.contains("tests/") {
            problems.push(format!("names no check: {b}"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
