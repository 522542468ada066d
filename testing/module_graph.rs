//! The source rules every crate of the workspace checks on its own
//! sources: no module uses one that uses it back, directly or through
//! others, and no function runs over a page (`long_functions`). Included by each crate's `tests/module_graph.rs` with
//! `#[path = "../../testing/module_graph.rs"] mod module_graph;`.
//!
//! A module is a file of `src/` (or a folder of it: `src/cmd/*.rs` count as
//! `cmd`); it uses another when its shipped code (not its unit tests, not
//! its comments) names `crate::other`.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Module name -> the modules its shipped code names.
pub fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut texts: BTreeMap<String, String> = BTreeMap::new();
    for entry in fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        if path.is_dir() {
            let text = texts.entry(name).or_default();
            for inner in fs::read_dir(&path).unwrap() {
                let inner = inner.unwrap().path();
                if inner.extension().is_some_and(|e| e == "rs") {
                    text.push_str(&shipped(&fs::read_to_string(inner).unwrap()));
                }
            }
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main" {
            let text = shipped(&fs::read_to_string(&path).unwrap());
            texts.entry(name).or_default().push_str(&text);
        }
    }
    let names: BTreeSet<String> = texts.keys().cloned().collect();
    texts
        .into_iter()
        .map(|(name, text)| {
            let used = uses(&text, &names, &name);
            (name, used)
        })
        .collect()
}

/// The code of a file before its unit tests, without comment lines.
fn shipped(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    let end = text[..end]
        .find("#[cfg(all(test, not(loom)))]\nmod tests")
        .unwrap_or(end);
    text[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The modules among `names` that `code` names as `crate::m`, alone or in a
/// `crate::{a, b::c}` group.
pub fn uses(code: &str, names: &BTreeSet<String>, own: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let words: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            group
                .split(',')
                .map(|item| item.trim().split("::").next().unwrap_or(""))
                .collect()
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            vec![&rest[..end]]
        };
        for w in words {
            if names.contains(w) && w != own {
                used.insert(w.to_owned());
            }
        }
    }
    used
}

/// A cycle through `m`'s dependencies, if any (depth-first search).
pub fn find_cycle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    m: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(i) = path.iter().position(|p| p == m) {
        let mut cycle = path[i..].to_vec();
        cycle.push(m.to_owned());
        return Some(cycle);
    }
    if done.contains(m) {
        return None;
    }
    path.push(m.to_owned());
    for d in &graph[m] {
        if let Some(c) = find_cycle(graph, d, path, done) {
            return Some(c);
        }
    }
    path.pop();
    done.insert(m.to_owned());
    None
}

/// Panics naming the first import cycle among `src`'s modules.
pub fn assert_layered(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let graph = module_graph(src);
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        if let Some(cycle) = find_cycle(&graph, m, &mut Vec::new(), &mut done) {
            panic!("import cycle: {}", cycle.join(" -> "));
        }
    }
    graph
}

/// The reader itself: imports and groups are seen, a cycle is found.
pub fn check_the_reader() {
    let names: BTreeSet<String> = ["lock", "lease", "sync"].map(String::from).into();
    let text = "use crate::lock::Lock;\nuse crate::{lease::Lease, sync};\n";
    assert_eq!(uses(text, &names, "x"), names);
    let shipped_only =
        shipped("use crate::a;\n// crate::b\n#[cfg(test)]\nmod tests {\nuse crate::c;\n}");
    assert!(shipped_only.contains("crate::a") && !shipped_only.contains("crate::b"));
    assert!(!shipped_only.contains("crate::c"));
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_owned(), ["b".to_owned()].into()),
        ("b".to_owned(), ["a".to_owned()].into()),
    ]
    .into();
    let cycle = find_cycle(&graph, "a", &mut Vec::new(), &mut BTreeSet::new());
    assert_eq!(cycle.unwrap(), ["a", "b", "a"]);
}

/// Functions of `src` (and its folders) longer than `max` lines, as
/// `file:line name (n lines)`; unit tests excluded.
pub fn long_functions(src: &Path, max: usize) -> Vec<String> {
    let mut found = Vec::new();
    let mut files = Vec::new();
    collect_rs(src, &mut files);
    for path in files {
        let text = fs::read_to_string(&path).unwrap();
        let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
        let lines: Vec<&str> = text[..end].lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            let is_fn = !t.starts_with("//")
                && (t.starts_with("fn ") || t.contains(" fn ") && !t.contains("=>"))
                && t.contains('(');
            if !is_fn {
                continue;
            }
            if let Some(n) = body_lines(&lines[i..]) {
                if n > max {
                    found.push(format!("{}:{} {} ({n} lines)", path.display(), i + 1, t));
                }
            }
        }
    }
    found
}

fn collect_rs(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines from a function's signature to its closing brace, counting
/// braces outside strings, chars and comments; `None` for a declaration
/// without a body.
fn body_lines(lines: &[&str]) -> Option<usize> {
    let mut depth = 0i64;
    let mut opened = false;
    for (n, line) in lines.iter().enumerate() {
        let mut chars = line.chars().peekable();
        let mut in_str = false;
        while let Some(c) = chars.next() {
            match c {
                '\\' if in_str => {
                    chars.next();
                }
                '"' => in_str = !in_str,
                '\'' if !in_str => {
                    // A char literal ('{', '\'') or a lifetime ('a).
                    let rest: String = chars.clone().take(3).collect();
                    if rest.starts_with('\\') {
                        chars.nth(2);
                    } else if rest.chars().nth(1) == Some('\'') {
                        chars.nth(1);
                    }
                }
                '/' if !in_str && chars.peek() == Some(&'/') => break,
                '{' if !in_str => {
                    depth += 1;
                    opened = true;
                }
                '}' if !in_str => depth -= 1,
                ';' if !in_str && !opened => return None,
                _ => {}
            }
        }
        if opened && depth <= 0 {
            return Some(n + 1);
        }
    }
    None
}

/// The whole check of one crate's `src`: the reader works, no module
/// uses one that uses it back, and `edges` (`(module, a module it uses)`,
/// known to exist) are seen, so an empty graph cannot pass.
pub fn assert_crate_layered(src: &Path, edges: &[(&str, &str)]) {
    check_the_reader();
    let graph = assert_layered(src);
    for (from, to) in edges {
        assert!(
            graph.get(*from).is_some_and(|uses| uses.contains(*to)),
            "the reader missed {from} -> {to}"
        );
    }
}

/// Panics listing every function of `src` over `max` lines.
pub fn assert_short_functions(src: &Path, max: usize) {
    let long = long_functions(src, max);
    assert!(long.is_empty(), "over {max} lines:\n{}", long.join("\n"));
}
