//! `--metrics`: Prometheus's text format on /metrics (checked by promtool
//! when it is installed), /healthz, and the figures moving with the work.

mod common;

use common::{runs, tool_available, Server};
use std::io::Write;
use std::process::{Command, Stdio};

/// A server with `--metrics 127.0.0.1:0`, and where its metrics are.
fn start() -> (Server, String) {
    let server = Server::start(&["--metrics", "127.0.0.1:0"]);
    let metrics = server.metrics.expect("it printed the metrics' address");
    (server, metrics.to_string())
}

/// `GET path`: the status code and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    get_with(addr, path, "")
}

/// `GET path` with `headers` (each ending `\r\n`): the status code and
/// the body.
fn get_with(addr: &str, path: &str, headers: &str) -> (u16, String) {
    let (status, _, body) = common::http_get(addr, path, headers);
    (status, body)
}

fn sample(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in\n{body}"))
}

#[test]
fn metrics_count_the_work_and_pass_promtool() {
    let (server, metrics) = start();
    let mut c = server.connect();
    let (lease, _) = c.grant(&["HOLD", "invoices", "9"]);
    assert!(common::error_text(c.call(&["HOLD", "invoices", "9"])).starts_with("INVALID"));
    let mut other = server.connect();
    assert!(
        common::error_text(other.call(&["HOLD", "invoices", "9", "WAIT", "0"]))
            .starts_with("INUSE")
    );
    assert_eq!(
        c.call(&["RELEASE", &lease.to_string()]),
        holdline_resp::Value::ok()
    );

    let (status, body) = get(&metrics, "/metrics");
    assert_eq!(status, 200);
    for (name, want) in [
        ("holdline_commands_total{command=\"hold\"}", 3.0),
        ("holdline_errors_total{kind=\"in_use\"}", 1.0),
        ("holdline_errors_total{kind=\"invalid\"}", 1.0),
        ("holdline_connections", 2.0),
        ("holdline_lock_grants_total{lock=\"invoices\"}", 1.0),
        ("holdline_lock_timeouts_total{lock=\"invoices\"}", 1.0),
        ("holdline_hold_seconds_count{lock=\"invoices\"}", 1.0),
        ("holdline_wait_seconds_count{lock=\"invoices\"}", 1.0),
    ] {
        assert_eq!(sample(&body, name), want, "{name}");
    }
    assert!(!body.contains("\"9\""), "never the key");
    assert_eq!(get(&metrics, "/healthz"), (200, "ok\n".to_owned()));
    assert_eq!(get(&metrics, "/nothing").0, 404);

    if !tool_available(
        "promtool (Debian's prometheus)",
        runs("promtool", &["--version"]),
    ) {
        return;
    }
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Off loopback the metrics need a token, and a scrape an admin's Bearer
/// token: lock names are every team's business otherwise.
#[test]
fn off_loopback_the_metrics_answer_only_an_admins_bearer_token() {
    let token = common::TempFile::new("token", "scrape-token-0123456789");
    let refused = Command::new(env!("CARGO_BIN_EXE_holdline"))
        .args(["serve", "--listen", "127.0.0.1:0", "--metrics", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("refusing to serve metrics on 0.0.0.0:0 without --token-file or --users"),
        "{err}"
    );
    let server = Server::start(&["--token-file", &token.path, "--metrics", "0.0.0.0:0"]);
    let port = server.metrics.unwrap().port();
    let at = format!("127.0.0.1:{port}");
    assert_eq!(get_with(&at, "/metrics", "").0, 401);
    assert_eq!(
        get_with(&at, "/metrics", "Authorization: Bearer guess\r\n").0,
        401
    );
    let bearer = "Authorization: Bearer scrape-token-0123456789\r\n";
    let (status, body) = get_with(&at, "/metrics", bearer);
    assert_eq!(status, 200);
    assert!(body.contains("holdline_"), "{body}");
}
