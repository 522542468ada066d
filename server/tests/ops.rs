//! What ships in ops/: the Prometheus alert rules pass `promtool check
//! rules` and their unit tests (`promtool test rules`), and every holdline
//! metric the rules and the Grafana dashboard name is one the server
//! exports (a single server's after some work, and a cluster node's).

mod common;

use common::cluster::{etcd_available, start_etcd, start_node_with};
use common::{runs, tool_available, Server};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const RULES: &str = "ops/prometheus/alerts.yml";
const RULE_TESTS: &str = "ops/prometheus/alerts_test.yml";
const DASHBOARD: &str = "ops/grafana/holdline.json";

/// `path` in the repository.
fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_alert_rules_pass_promtools_checks_and_their_tests() {
    if !tool_available(
        "promtool (Debian's prometheus)",
        runs("promtool", &["--version"]),
    ) {
        return;
    }
    for args in [["check", "rules", RULES], ["test", "rules", RULE_TESTS]] {
        let path = repo(args[2]);
        let out = Command::new("promtool")
            .args(&args[..2])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Every `holdline_...` name in `text`.
fn names_in(text: &str) -> BTreeSet<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    text.split(|c: char| !word(c))
        .filter(|w| w.starts_with("holdline_"))
        .map(str::to_owned)
        .collect()
}

/// The sample names of a `/metrics` body (`_bucket`, `_total`... as sent).
fn exported(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

fn scrape(server: &Server) -> String {
    let addr = server.metrics.expect("--metrics").to_string();
    let (status, _, body) = common::http_get(&addr, "/metrics", "");
    assert_eq!(status, 200);
    body
}

#[test]
fn every_metric_the_rules_and_the_dashboard_name_is_exported() {
    let dashboard = read(DASHBOARD);
    let _: serde_json::Value = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    let mut named = names_in(&read(RULES));
    named.extend(names_in(&read(RULE_TESTS)));
    named.extend(names_in(&dashboard));
    // A single server after a grant, a release and a wait that ran out:
    // every per-lock family and both histograms have samples.
    let server = Server::start(&["--metrics", "127.0.0.1:0"]);
    let mut c = server.connect();
    let (lease, _) = c.grant(&["HOLD", "invoices", "9"]);
    let mut other = server.connect();
    other.call(&["HOLD", "invoices", "9", "WAIT", "0"]);
    c.call(&["RELEASE", &lease.to_string()]);
    let mut have = exported(&scrape(&server));
    if etcd_available() {
        let etcd = start_etcd();
        let node = start_node_with(&etcd, "ops", 4, 2, &["--metrics", "127.0.0.1:0"]);
        have.extend(exported(&scrape(&node)));
    } else {
        // Without etcd the cluster's own metrics cannot be seen here.
        named.retain(|n| !n.starts_with("holdline_cluster_"));
    }
    let missing: Vec<&String> = named.difference(&have).collect();
    assert!(missing.is_empty(), "named but not exported: {missing:?}");
    assert!(named.len() > 10, "{named:?}");
}
