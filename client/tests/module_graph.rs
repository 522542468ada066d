//! The client's modules form a layering (lib.rs's module map): none uses
//! one that uses it back; no function runs over 80 lines.

#[path = "../../testing/module_graph.rs"]
mod module_graph;

fn src() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_of_the_client_uses_one_that_uses_it_back() {
    module_graph::assert_crate_layered(
        &src(),
        &[("lock", "store"), ("hold", "lock"), ("driver", "lease")],
    );
}

#[test]
fn no_function_of_the_client_is_over_80_lines() {
    module_graph::assert_short_functions(&src(), 80);
}
