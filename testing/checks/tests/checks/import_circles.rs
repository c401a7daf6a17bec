//! No import circle inside any crate of the workspace, at the granularity of files: every
//! `.rs` file is a module, and module A imports module B when A's code (tests left out) names
//! a path into B — `crate::b::…`, `super::…`, `self::…`, or a child module by its bare name.
//! `mod` declarations and a facade's `pub use` re-exports are declarations, not imports; a
//! path through a re-export counts as an import of the module it re-exports from. A module
//! that imports itself (or its items) is no circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type ModPath = Vec<String>;

/// A file of a crate: where it is, and its code, cleaned (see [`clean`]) and without tests and
/// re-exports.
struct Module {
    rel: String,
    code: String,
}

pub(crate) fn workspace() -> PathBuf {
    // This crate is testing/checks.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_owned()
}

/// The workspace's member crates (from the root Cargo.toml), as (name, src dir).
pub(crate) fn member_sources() -> Vec<(String, PathBuf)> {
    let text = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let doc: toml::Table = text.parse().unwrap();
    doc["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let m = m.as_str().unwrap();
            (m.to_owned(), workspace().join(m).join("src"))
        })
        .filter(|(_, src)| src.is_dir())
        .collect()
}

/// The workspace's test sources: every member's `tests/`, the root `tests/` and the fuzz
/// targets.
pub(crate) fn test_sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs: Vec<PathBuf> = member_sources()
        .into_iter()
        .map(|(_, src)| src.parent().unwrap().join("tests"))
        .collect();
    dirs.push(workspace().join("tests"));
    dirs.push(workspace().join("fuzz/fuzz_targets"));
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        rust_files(dir, &mut files);
    }
    files
}

pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `lib.rs`/`main.rs` → [], `a/mod.rs` → [a], `a/b.rs` → [a, b].
fn module_path(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut segs: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_str().unwrap().to_owned())
        .collect();
    if segs.last().is_some_and(|s| s == "mod") {
        segs.pop();
    }
    if segs == ["lib"] || segs == ["main"] {
        segs.clear();
    }
    segs
}

/// The code with comments blanked and string and char literals emptied, so braces and paths
/// in them are not read as code. Lines are kept.
pub(crate) fn clean(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |s: &[u8], out: &mut String| {
        for &c in s {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&rest[..end], &mut out);
            i += end;
        } else if rest.starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(rest.len(), |e| e + 4);
            blank(&rest[..end], &mut out);
            i += end;
        } else if rest[0] == b'r'
            && (rest.get(1) == Some(&b'"') || rest.get(1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            let end = text[i + body..]
                .find(&close)
                .map_or(rest.len(), |e| body + e + close.len());
            out.push_str("\"\"");
            blank(&rest[2..end], &mut out);
            i += end;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            blank(&rest[2.min(rest.len())..(j + 1).min(rest.len())], &mut out);
            i += j + 1;
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{1F600}', '{') or a lifetime ('a).
            let len = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(ch + 2)
            };
            match len {
                Some(n) => {
                    out.push_str("' '");
                    blank(&rest[3.min(n)..n], &mut out);
                    i += n;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = text[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The code with `#[cfg(test)]` items (test modules and test-only functions) removed.
pub(crate) fn without_tests(code: &str) -> String {
    let mut out = code.to_owned();
    while let Some(at) = out.find("#[cfg(test)]") {
        let b = out.as_bytes();
        // The item ends at the first `;` before any brace, or at its closing brace.
        let mut depth = 0usize;
        let mut end = out.len();
        for (k, &c) in b.iter().enumerate().skip(at + "#[cfg(test)]".len()) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                _ => {}
            }
        }
        let blanked: String = out[at..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(at..end, &blanked);
    }
    out
}

pub(crate) fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths of a use-tree starting at `s` (after `crate::` or a first segment): `a::b`,
/// `a::{b, c::{d, e}}`, `*`. Returns the paths and how many bytes were read.
fn use_tree(s: &str) -> (Vec<ModPath>, usize) {
    let mut prefix: ModPath = Vec::new();
    let mut i = 0;
    let b = s.as_bytes();
    loop {
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        if i < b.len() && b[i] == b'{' {
            let mut paths = Vec::new();
            i += 1;
            loop {
                while i < b.len() && (b[i] == b' ' || b[i] == b'\n' || b[i] == b',') {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    i += 1;
                    break;
                }
                let (inner, n) = use_tree(&s[i..]);
                if n == 0 {
                    i += 1;
                    continue;
                }
                for p in inner {
                    let mut full = prefix.clone();
                    full.extend(p);
                    paths.push(full);
                }
                i += n;
            }
            return (paths, i);
        }
        let ident: String = s[i..].chars().take_while(|&c| is_ident(c)).collect();
        if ident.is_empty() {
            return (vec![prefix], i);
        }
        i += ident.len();
        prefix.push(ident);
        if s[i..].starts_with("::") {
            i += 2;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// Removes a facade's `pub use` re-exports from its code (`mod x;` names no path), returning the
/// re-exports as (name, path it names relative to the facade).
fn declarations(code: &str, facade: bool) -> (String, Vec<(String, ModPath)>) {
    let mut out = code.to_owned();
    let mut reexports = Vec::new();
    let mut search = 0;
    while let Some(rel) = out[search..].find("use ") {
        let at = search + rel;
        search = at + 4;
        if at > 0 && is_ident(out[..at].chars().next_back().unwrap()) {
            continue;
        }
        let before = out[..at].trim_end();
        let public = before.ends_with("pub") || before.ends_with(')') && before.contains("pub(");
        if !(facade && public) {
            continue;
        }
        let Some(len) = out[at..].find(';') else {
            break;
        };
        let stmt = out[at + 4..at + len].to_owned();
        let (paths, _) = use_tree(&stmt);
        for p in paths {
            if let Some(name) = p.last()
                && name != "*"
                && name != "self"
            {
                reexports.push((name.clone(), p));
            }
        }
        let blanked: String = out[at..at + len]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(at..at + len, &blanked);
    }
    (out, reexports)
}

struct Crate {
    modules: BTreeMap<ModPath, Module>,
    /// (facade module, name) → the path the name re-exports, absolute.
    reexports: BTreeMap<(ModPath, String), ModPath>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        let mut modules = BTreeMap::new();
        let mut declared = Vec::new();
        for file in files {
            let path = module_path(src, &file);
            // A facade (`lib.rs`, `main.rs`, `mod.rs`) declares its module's surface with
            // `pub use`.
            let name = file.file_name().unwrap().to_str().unwrap();
            let facade = matches!(name, "lib.rs" | "main.rs" | "mod.rs");
            let text = std::fs::read_to_string(&file).unwrap();
            let (code, re) = declarations(&without_tests(&clean(&text)), facade);
            declared.extend(re.into_iter().map(|(n, t)| (path.clone(), n, t)));
            let rel = file
                .strip_prefix(workspace())
                .unwrap_or(&file)
                .display()
                .to_string();
            modules.insert(path, Module { rel, code });
        }
        // Re-exports of this crate's items; those of other crates lead out of it.
        let mut reexports = BTreeMap::new();
        for (path, name, target) in declared {
            let first = target[0].as_str();
            let mut child = path.clone();
            child.push(first.to_owned());
            if matches!(first, "crate" | "self" | "super") || modules.contains_key(&child) {
                reexports.insert((path.clone(), name), absolute(&path, &target));
            }
        }
        Crate { modules, reexports }
    }

    /// The module a path from `from` lands in: the deepest module it walks through, following
    /// re-exports.
    fn resolve(&self, path: &ModPath) -> ModPath {
        let mut cur: ModPath = Vec::new();
        for (k, seg) in path.iter().enumerate() {
            let mut next = cur.clone();
            next.push(seg.clone());
            if self.modules.contains_key(&next) {
                cur = next;
            } else if let Some(target) = self.reexports.get(&(cur.clone(), seg.clone())) {
                let mut rest = target.clone();
                rest.extend(path[k + 1..].iter().cloned());
                if rest.len() > path.len() + 8 {
                    return cur;
                }
                return self.resolve(&rest);
            } else {
                break;
            }
        }
        cur
    }

    /// Who imports whom.
    fn edges(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
        for (path, m) in &self.modules {
            let code = &m.code;
            let mut i = 0;
            while i < code.len() {
                let c = code[i..].chars().next().unwrap();
                let starts_word = is_ident(c)
                    && (i == 0 || {
                        let p = code[..i].chars().next_back().unwrap();
                        !(is_ident(p) || p == ':')
                    });
                if !starts_word {
                    i += c.len_utf8();
                    continue;
                }
                let word: String = code[i..].chars().take_while(|&c| is_ident(c)).collect();
                let after = i + word.len();
                if !code[after..].starts_with("::") {
                    i = after;
                    continue;
                }
                let (tails, n) = use_tree(&code[after + 2..]);
                i = after + 2 + n.max(1);
                for tail in tails {
                    let mut rel = vec![word.clone()];
                    rel.extend(tail);
                    let child = {
                        let mut p = path.clone();
                        p.push(word.clone());
                        self.modules.contains_key(&p)
                    };
                    if !matches!(word.as_str(), "crate" | "super" | "self") && !child {
                        continue;
                    }
                    let to = self.resolve(&absolute(path, &rel));
                    if &to != path {
                        edges.entry(path.clone()).or_default().insert(to);
                    }
                }
            }
        }
        edges
    }
}

/// A path as written in module `at` (`crate::a`, `super::b`, `self::c`, `child::d`), made
/// absolute.
fn absolute(at: &ModPath, rel: &ModPath) -> ModPath {
    let mut base = at.clone();
    let mut segs = rel.iter().peekable();
    match segs.peek().map(|s| s.as_str()) {
        Some("crate") => {
            base.clear();
            segs.next();
        }
        Some("self") => {
            segs.next();
        }
        Some("super") => {
            while segs.peek().is_some_and(|s| *s == "super") {
                base.pop();
                segs.next();
            }
        }
        _ => {}
    }
    base.extend(segs.cloned());
    base
}

/// The strongly connected components of more than one module (Tarjan).
fn circles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct T<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on: BTreeSet<&'a ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a ModPath) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.edges.get(v).into_iter().flatten() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn show(p: &ModPath) -> String {
    if p.is_empty() {
        "crate".into()
    } else {
        p.join("::")
    }
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut problems = Vec::new();
    let mut modules = 0;
    for (name, src) in member_sources() {
        let krate = Crate::read(&src);
        modules += krate.modules.len();
        let edges = krate.edges();
        for circle in circles(&edges) {
            let mut why = Vec::new();
            for from in &circle {
                for to in edges[from].iter().filter(|t| circle.contains(t)) {
                    why.push(format!("    {} → {}", krate.modules[from].rel, show(to)));
                }
            }
            problems.push(format!(
                "{name}: {} modules import each other in a circle: {}\n{}",
                circle.len(),
                circle.iter().map(show).collect::<Vec<_>>().join(", "),
                why.join("\n")
            ));
        }
    }
    assert!(modules > 150, "the check read only {modules} modules");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_circle_check_reads_paths_as_rust_does() {
    let src = std::env::temp_dir().join(format!("gpulens-circles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(src.join("feature")).unwrap();
    let write = |p: &str, t: &str| std::fs::write(src.join(p), t).unwrap();
    write(
        "lib.rs",
        "mod feature;\nmod low;\nmod top;\npub use low::{Thing, other::*};\n",
    );
    // The facade re-exports its part and calls it by bare name; the part uses the facade's
    // item through `super` — a circle.
    write(
        "feature/mod.rs",
        "mod part;\npub use part::Part;\npub struct State;\nfn run() { part::go(); }\n",
    );
    write(
        "feature/part.rs",
        "use super::State;\npub struct Part;\npub fn go() {}\n",
    );
    // Through the crate root's re-export to `low`; a string, a comment and a test module do
    // not count.
    write(
        "top.rs",
        "use crate::{Thing, feature::Part};\nfn f() { let s = \"crate::top::x\"; } // crate::top\n#[cfg(test)]\nmod tests { use crate::top; }\n",
    );
    write(
        "low.rs",
        "pub struct Thing;\nfn g(c: char) -> bool { c == '{' }\n#[cfg(test)]\nmod tests { use crate::top::f; }\n",
    );
    let krate = Crate::read(&src);
    let edges = krate.edges();
    let p = |s: &str| -> ModPath { s.split("::").map(String::from).collect() };
    assert_eq!(
        edges[&p("top")],
        BTreeSet::from([p("low"), p("feature::part")]),
        "{edges:?}"
    );
    assert!(!edges.contains_key(&p("low")), "{edges:?}");
    assert_eq!(
        circles(&edges),
        vec![vec![p("feature"), p("feature::part")]]
    );
    std::fs::remove_dir_all(&src).unwrap();
}
