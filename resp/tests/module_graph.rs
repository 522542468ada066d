//! The RESP crate's modules form a layering, and no function runs over 80
//! lines.

#[path = "../../testing/module_graph.rs"]
mod module_graph;

fn src() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_of_resp_uses_one_that_uses_it_back() {
    module_graph::assert_crate_layered(&src(), &[("decode", "value")]);
}

#[test]
fn no_function_of_resp_is_over_80_lines() {
    module_graph::assert_short_functions(&src(), 80);
}
