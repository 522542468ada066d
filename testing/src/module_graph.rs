//! The source rules every crate of the workspace checks on its own
//! sources: no module uses one that uses it back, directly or through
//! others; no function runs over a page (`long_functions`); and the crate
//! root's module map names every module it declares (`unmapped`). Each
//! crate's `tests/module_graph.rs` writes its tests of them with
//! [`module_graph_tests!`](crate::module_graph_tests).
//!
//! A module is a file of `src/` (or a folder of it: `src/cmd/*.rs` count as
//! `cmd`); it uses another when its shipped code (not its unit tests, not
//! its comments) names `crate::other`.

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

/// The modules a crate root (`lib.rs`, `main.rs`) declares (`mod m;`,
/// `pub mod m;`, `pub(crate) mod m;`).
pub fn declared_modules(root: &str) -> BTreeSet<String> {
    root.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let line = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            let name = line.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_owned())
        })
        .collect()
}

/// The crate root's module map: the comment lines (`//!` or `//`) from the
/// one that says `module map` or `modules, bottom-up` (any case) to the
/// first line that is no comment; empty when there is none.
pub fn module_map(root: &str) -> String {
    let mut map = String::new();
    let mut inside = false;
    for line in root.lines() {
        let text = line.trim_start();
        let comment = text.strip_prefix("//!").or_else(|| text.strip_prefix("//"));
        let Some(comment) = comment else {
            if inside {
                break;
            }
            continue;
        };
        let lower = comment.to_ascii_lowercase();
        inside |= lower.contains("module map") || lower.contains("modules, bottom-up");
        if inside {
            map.push_str(comment);
            map.push('\n');
        }
    }
    map
}

/// The modules `root` declares that its module map does not name in
/// backticks (`` `m` ``), in order.
pub fn unmapped(root: &str) -> Vec<String> {
    let map = module_map(root);
    // Each `word` of identifier characters (a code fence names nothing).
    let named: BTreeSet<&str> = map
        .split('`')
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    declared_modules(root)
        .into_iter()
        .filter(|m| !named.contains(m.as_str()))
        .collect()
}

/// The map reader itself: a map in `//!` or `//` lines ends at code, a
/// module it leaves out is found.
pub fn check_the_map_reader() {
    let root = "//! A crate.\n//!\n//! Module map, bottom-up: `a` (the first), `b`.\n\
                //! - `c`: the last.\n\nmod a;\npub mod b;\npub(crate) mod c;\nmod d;\n\
                // `d` after the map is no part of it.\n";
    assert_eq!(
        declared_modules(root),
        ["a", "b", "c", "d"].map(String::from).into()
    );
    assert_eq!(unmapped(root), ["d"]);
    let plain = "// Modules, bottom-up:\n// - `x`, `y`.\nmod x;\nmod y;\n";
    assert!(unmapped(plain).is_empty());
    assert_eq!(
        unmapped("mod z;\n"),
        ["z"],
        "no map: every module is unmapped"
    );
}

/// Panics listing each module that `root` (a crate's `lib.rs` or
/// `main.rs`) declares and its module map leaves out.
pub fn assert_module_map(root: &Path) {
    check_the_map_reader();
    let text = fs::read_to_string(root).unwrap();
    assert!(
        !declared_modules(&text).is_empty(),
        "{} declares no module",
        root.display()
    );
    let missing = unmapped(&text);
    assert!(
        missing.is_empty(),
        "{}'s module map leaves out {}: add a line each saying what it owns",
        root.display(),
        missing.join(", ")
    );
}

/// A crate's tests of the source rules, in its `tests/module_graph.rs`:
///
/// ```text
/// holdline_testing::module_graph_tests! {
///     // (module, a module it uses): edges known to exist, so an empty
///     // graph cannot pass.
///     edges: [("lock", "lease")],
///     // No function over this many lines.
///     max_lines: 80,
///     // The crate root whose module map must name every module (optional).
///     map: "lib.rs",
/// }
/// ```
#[macro_export]
macro_rules! module_graph_tests {
    (
        edges: [$(($from:literal, $to:literal)),* $(,)?],
        max_lines: $max:literal
        $(, map: $root:literal)? $(,)?
    ) => {
        fn src() -> ::std::path::PathBuf {
            ::std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
        }

        #[test]
        fn no_module_uses_one_that_uses_it_back() {
            $crate::module_graph::assert_crate_layered(&src(), &[$(($from, $to)),*]);
        }

        #[test]
        fn no_function_is_over_the_line_limit() {
            $crate::module_graph::assert_short_functions(&src(), $max);
        }

        $(
            #[test]
            fn the_module_map_names_every_module() {
                $crate::module_graph::assert_module_map(&src().join($root));
            }
        )?
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_readers_read() {
        super::check_the_reader();
        super::check_the_map_reader();
    }
}
