//! The harness's modules form a layering: none uses one that uses it back,
//! directly or through others (main.rs lists them bottom-up). The reader
//! is the workspace's shared one (`testing/module_graph.rs`).

#[path = "../../testing/module_graph.rs"]
mod module_graph;

use std::path::Path;

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_of_the_harness_uses_one_that_uses_it_back() {
    module_graph::assert_layered(&src());
}

#[test]
fn the_reader_sees_imports_and_groups() {
    module_graph::check_the_reader();
}

#[test]
fn the_graph_knows_the_layers() {
    // Guards the reader: these edges exist, so an empty graph cannot pass.
    let graph = module_graph::module_graph(&src());
    assert!(graph["scenarios"].contains("rates"));
    assert!(graph["report"].contains("schema"));
    assert!(graph["server_scenarios"].contains("measure"));
    assert!(graph["bench"].contains("verdict"));
    assert!(graph["verdict"].contains("report"));
}

#[test]
fn no_function_of_the_harness_is_over_80_lines() {
    let long = module_graph::long_functions(&src(), 80);
    assert!(long.is_empty(), "over 80 lines:\n{}", long.join("\n"));
}
