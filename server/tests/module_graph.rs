//! The server's modules form a layering (main.rs's module map): none uses
//! one that uses it back.

#[path = "../../testing/module_graph.rs"]
mod module_graph;

use std::path::Path;

#[test]
fn no_module_of_the_server_uses_one_that_uses_it_back() {
    module_graph::check_the_reader();
    let graph = module_graph::assert_layered(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // Guards the reader: these edges exist, so an empty graph cannot pass.
    assert!(graph["cmd"].contains("session"));
    assert!(graph["handler"].contains("cmd"));
    assert!(graph["server"].contains("handler"));
}

#[test]
fn no_function_of_the_server_is_over_80_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let long = module_graph::long_functions(&src, 80);
    assert!(long.is_empty(), "over 80 lines:\n{}", long.join("\n"));
}
