//! The RESP crate's modules form a layering; lib.rs's module map lists
//! each of them; no function runs over 80 lines.

holdline_testing::module_graph_tests! {
    edges: [("decode", "value")],
    max_lines: 80,
    map: "lib.rs",
}
