//! The RESP crate's modules form a layering, and no function runs over 80
//! lines.

#[path = "../../testing/module_graph.rs"]
mod module_graph;

use std::path::Path;

#[test]
fn no_module_of_resp_uses_one_that_uses_it_back() {
    module_graph::check_the_reader();
    let graph = module_graph::assert_layered(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph["decode"].contains("value"));
}

#[test]
fn no_function_of_resp_is_over_80_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let long = module_graph::long_functions(&src, 80);
    assert!(long.is_empty(), "over 80 lines:\n{}", long.join("\n"));
}
