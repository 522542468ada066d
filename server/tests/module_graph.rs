//! The server's modules form a layering (main.rs's module map): none uses
//! one that uses it back; no function runs over 80 lines.

holdline_testing::module_graph_tests! {
    edges: [("cmd", "session"), ("handler", "cmd"), ("server", "handler")],
    max_lines: 80,
}
