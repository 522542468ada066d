//! The core's modules form a layering: none uses one that uses it back,
//! directly or through others; lib.rs's module map lists each of them,
//! bottom-up; no function runs over 80 lines (`holdline_testing::module_graph`).

holdline_testing::module_graph_tests! {
    edges: [("lease", "store_core"), ("store", "lock"), ("lock", "lease")],
    max_lines: 80,
    map: "lib.rs",
}
