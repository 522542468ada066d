//! The client's modules form a layering: none uses one that uses it back;
//! lib.rs's module map lists each of them; no function runs over 80 lines.

holdline_testing::module_graph_tests! {
    edges: [("lock", "store"), ("hold", "lock"), ("driver", "lease")],
    max_lines: 80,
    map: "lib.rs",
}
