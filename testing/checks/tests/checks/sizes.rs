//! Rooms and functions stay small enough to read (STYLE.md): no function outside tests over
//! [`MAX_FN_LINES`] lines, no source file over [`MAX_FILE_LINES`] (test files included). An exception would be
//! listed with its size and may only shrink — a listed one that grows, or a new one over the
//! limit, fails the test, and one that got small enough must leave the list. None is listed.

use std::collections::BTreeMap;

use crate::import_circles::{
    clean, is_ident, member_sources, rust_files, test_sources, without_tests, workspace,
};

const MAX_FN_LINES: usize = 120;
const MAX_FILE_LINES: usize = 900;

/// Functions allowed over the limit: (file, function) → lines.
const LONG_FUNCTIONS: &[(&str, &str, usize)] = &[];

/// Files allowed over the limit → lines.
const LONG_FILES: &[(&str, usize)] = &[];

/// Each `fn` with a body in `code` (cleaned, tests removed): (name, lines from `fn` to its
/// closing brace).
fn functions(code: &str) -> Vec<(String, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut search = 0;
    while let Some(rel) = code[search..].find("fn ") {
        let at = search + rel;
        search = at + 3;
        if at > 0 && is_ident(code[..at].chars().next_back().unwrap()) {
            continue;
        }
        let name: String = code[at + 3..]
            .trim_start()
            .chars()
            .take_while(|&c| is_ident(c))
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body starts at the first `{` after the signature; `;` first: no body.
        let Some(open) = code[at..].find(['{', ';']).map(|o| at + o) else {
            break;
        };
        if b[open] == b';' {
            continue;
        }
        let mut depth = 0usize;
        let mut close = open;
        for (k, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let lines = code[at..=close].matches('\n').count() + 1;
        out.push((name, lines));
    }
    out
}

#[test]
fn functions_and_files_stay_under_their_limits_or_shrink() {
    let root = workspace();
    let mut long_fns: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut long_files: BTreeMap<String, usize> = BTreeMap::new();
    let mut read = 0;
    for (_, src) in member_sources() {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            read += 1;
            let rel = file.strip_prefix(&root).unwrap().display().to_string();
            let text = std::fs::read_to_string(&file).unwrap();
            let lines = text.lines().count();
            if lines > MAX_FILE_LINES {
                long_files.insert(rel.clone(), lines);
            }
            for (name, n) in functions(&without_tests(&clean(&text))) {
                if n > MAX_FN_LINES {
                    let e = long_fns.entry((rel.clone(), name)).or_default();
                    *e = (*e).max(n);
                }
            }
        }
    }
    // Test files are rooms too: the file limit holds for them (their functions are free).
    let test_files = test_sources();
    assert!(
        test_files.len() > 30,
        "read only {} test files",
        test_files.len()
    );
    for file in test_files {
        let lines = std::fs::read_to_string(&file).unwrap().lines().count();
        if lines > MAX_FILE_LINES {
            let rel = file.strip_prefix(&root).unwrap().display().to_string();
            long_files.insert(rel, lines);
        }
    }
    assert!(read > 150, "read only {read} files");
    let mut problems = Vec::new();
    let allowed_fns: BTreeMap<(String, String), usize> = LONG_FUNCTIONS
        .iter()
        .map(|(f, n, l)| (((*f).to_owned(), (*n).to_owned()), *l))
        .collect();
    for ((file, name), n) in &long_fns {
        match allowed_fns.get(&(file.clone(), name.clone())) {
            None => problems.push(format!(
                "{file}: fn {name} is {n} lines (limit {MAX_FN_LINES}); split it"
            )),
            Some(was) if n > was => problems.push(format!(
                "{file}: fn {name} grew from {was} to {n} lines; it is listed to shrink"
            )),
            Some(_) => {}
        }
    }
    for ((file, name), was) in &allowed_fns {
        if !long_fns.contains_key(&(file.clone(), name.clone())) {
            problems.push(format!(
                "{file}: fn {name} (listed at {was}) is now within {MAX_FN_LINES} lines or gone: take it off LONG_FUNCTIONS"
            ));
        }
    }
    let allowed_files: BTreeMap<&str, usize> = LONG_FILES.iter().copied().collect();
    for (file, n) in &long_files {
        match allowed_files.get(file.as_str()) {
            None => problems.push(format!(
                "{file} is {n} lines (limit {MAX_FILE_LINES}); split it by what it holds"
            )),
            Some(was) if n > was => problems.push(format!(
                "{file} grew from {was} to {n} lines; it is listed to shrink"
            )),
            Some(_) => {}
        }
    }
    for (file, was) in LONG_FILES {
        if !long_files.contains_key(*file) {
            problems.push(format!(
                "{file} (listed at {was}) is now within {MAX_FILE_LINES} lines: take it off LONG_FILES"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_size_check_measures_functions_from_fn_to_closing_brace() {
    let code = "fn a() {\n    let s = '{';\n}\n\nimpl X {\n    pub fn b(&self) -> u8 {\n        if x { 1 } else { 2 }\n    }\n}\ntrait T { fn c(&self); }\n#[cfg(test)]\nmod tests {\n    fn hidden() {}\n}\n";
    let got = functions(&without_tests(&clean(code)));
    assert_eq!(got, vec![("a".to_owned(), 3), ("b".to_owned(), 3)]);
}
