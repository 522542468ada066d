//! The harness's modules form a layering: none uses one that uses it back,
//! directly or through others (main.rs lists them bottom-up), and no
//! function runs over 80 lines (`testing/module_graph.rs`).

#[path = "../../testing/module_graph.rs"]
mod module_graph;

fn src() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_of_the_harness_uses_one_that_uses_it_back() {
    module_graph::assert_crate_layered(
        &src(),
        &[
            ("scenarios", "rates"),
            ("report", "schema"),
            ("server_scenarios", "measure"),
            ("bench", "verdict"),
            ("verdict", "report"),
        ],
    );
}

#[test]
fn no_function_of_the_harness_is_over_80_lines() {
    module_graph::assert_short_functions(&src(), 80);
}
