//! The server's modules form a layering: none uses one that uses it back;
//! main.rs's module map names every module; no function runs over 80
//! lines (`holdline_testing::module_graph`).

holdline_testing::module_graph_tests! {
    edges: [("cmd", "session"), ("handler", "cmd"), ("server", "handler")],
    max_lines: 80,
    map: "main.rs",
}
