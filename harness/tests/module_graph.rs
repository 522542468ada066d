//! The harness's modules form a layering: none uses one that uses it back,
//! directly or through others; main.rs's module map lists each of them,
//! bottom-up; no function runs over 80 lines (`holdline_testing::module_graph`).

holdline_testing::module_graph_tests! {
    edges: [
        ("scenarios", "rates"),
        ("report", "schema"),
        ("server_scenarios", "measure"),
        ("bench", "verdict"),
        ("verdict", "report"),
    ],
    max_lines: 80,
    map: "main.rs",
}
