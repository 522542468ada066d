//! The harness's modules form a layering: none uses one that uses it back,
//! directly or through others (main.rs lists them bottom-up). Read from the
//! sources: a module uses another when its shipped code (not its unit
//! tests, not its comments) names `crate::other`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Module name -> the modules its shipped code names.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut texts = BTreeMap::new();
    for entry in fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        if path.extension().is_some_and(|e| e == "rs") && name != "main" {
            texts.insert(name, fs::read_to_string(&path).unwrap());
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

/// The modules among `names` that `text` names as `crate::m`, alone or in a
/// `crate::{a, b::c}` group.
fn uses(text: &str, names: &BTreeSet<String>, own: &str) -> BTreeSet<String> {
    // Unit tests may reach the public API from above.
    let shipped = text.split("#[cfg(test)]\nmod tests").next().unwrap();
    let code: String = shipped
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
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
fn find_cycle(
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

#[test]
fn no_module_of_the_harness_uses_one_that_uses_it_back() {
    let graph = module_graph();
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        if let Some(cycle) = find_cycle(&graph, m, &mut Vec::new(), &mut done) {
            panic!("import cycle: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_reader_sees_imports_and_groups() {
    let names: BTreeSet<String> = ["row", "units", "measure"].map(String::from).into();
    let text = "use crate::row::Run;\nuse crate::{units::fmt_ns, measure};\n// crate::nothing\n";
    let want: BTreeSet<String> = ["row", "units", "measure"].map(String::from).into();
    assert_eq!(uses(text, &names, "x"), want);
    // A cycle is found.
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_owned(), ["b".to_owned()].into()),
        ("b".to_owned(), ["a".to_owned()].into()),
    ]
    .into();
    let cycle = find_cycle(&graph, "a", &mut Vec::new(), &mut BTreeSet::new());
    assert_eq!(cycle.unwrap(), ["a", "b", "a"]);
}

#[test]
fn the_graph_knows_the_layers() {
    // Guards the reader: these edges exist, so an empty graph cannot pass.
    let graph = module_graph();
    assert!(graph["scenarios"].contains("rates"));
    assert!(graph["report"].contains("schema"));
    assert!(graph["server_scenarios"].contains("measure"));
    assert!(graph["bench"].contains("hot_path"));
}
