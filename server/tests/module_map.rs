//! main.rs's module map names every module of the server.

#[test]
fn the_module_map_names_every_module() {
    let main = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/main.rs");
    let text = std::fs::read_to_string(main).unwrap();
    let map: String = text
        .lines()
        .filter(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let modules: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    assert!(modules.len() > 10, "{modules:?}");
    let missing: Vec<&&str> = modules
        .iter()
        .filter(|m| !map.contains(&format!("`{m}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "main.rs's module map leaves out {missing:?}"
    );
}
