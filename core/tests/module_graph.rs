//! The core's modules form a layering: none uses one that uses it back,
//! directly or through others (lib.rs's module map lists them bottom-up).
//! The reader is the workspace's shared one (`testing/module_graph.rs`).

#[path = "../../testing/module_graph.rs"]
mod module_graph;

fn src() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_of_the_core_uses_one_that_uses_it_back() {
    module_graph::assert_crate_layered(
        &src(),
        &[
            ("lease", "store_core"),
            ("store", "lock"),
            ("lock", "lease"),
        ],
    );
}

#[test]
fn no_function_of_the_core_is_over_80_lines() {
    module_graph::assert_short_functions(&src(), 80);
}
