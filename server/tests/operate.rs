//! What operators ask the server: INFO, INSPECT, CLIENT LIST, INFO, KILL
//! and HELP, and the log's start-up checks.

mod common;

use common::{error_text, map_field, queue_behind, Server};
use holdline_resp::Value;
use std::process::Command;

fn text(v: Value) -> String {
    match v {
        Value::Verbatim(t) | Value::Simple(t) => t,
        Value::Bulk(b) => String::from_utf8(b).unwrap(),
        other => panic!("not text: {other:?}"),
    }
}

/// `key:value` lines of an INFO answer.
fn info_field(info: &str, key: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(str::to_owned)
}

#[test]
fn info_answers_every_section_in_redis_format() {
    let server = Server::start(&[]);
    let (_holder, _lease, _waiter) = queue_behind(&server, "inv", "k", "20000");
    let mut admin = server.connect();
    admin.await_stat("inv", "waiters", 1);
    let info = text(admin.call(&["INFO"]));
    for header in [
        "# Server",
        "# Clients",
        "# Stats",
        "# Memory",
        "# Cluster",
        "# Locks",
    ] {
        assert!(info.contains(header), "{header} in {info}");
    }
    assert_eq!(info_field(&info, "cluster_enabled").as_deref(), Some("0"));
    assert_eq!(info_field(&info, "tcp_port"), Some(server.port()));
    assert_eq!(info_field(&info, "connected_clients").as_deref(), Some("3"));
    assert_eq!(info_field(&info, "blocked_clients").as_deref(), Some("1"));
    assert_eq!(info_field(&info, "tls").as_deref(), Some("0"));
    assert_eq!(info_field(&info, "grants").as_deref(), Some("1"));
    assert!(
        info_field(&info, "used_memory_rss")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert_eq!(
        info_field(&info, "lock_inv").as_deref(),
        Some("live_keys=1,held_keys=1,waiters=1,grants=1,timeouts=0,revocations=0,expirations=0")
    );
    let locks = text(admin.call(&["INFO", "locks"]));
    assert!(
        locks.starts_with("# Locks\r\n") && !locks.contains("# Server"),
        "{locks}"
    );
}

#[test]
fn inspect_names_the_holder_and_client_kill_frees_its_keys() {
    let server = Server::start(&[]);
    let mut holder = server.connect();
    assert_eq!(
        holder.call(&["CLIENT", "SETNAME", "billing-7"]),
        Value::ok()
    );
    let holder_id = holder.call(&["CLIENT", "ID"]).as_integer().unwrap();
    let (lease, fence) = holder.grant(&["HOLD", "inv", "k", "TTL", "30000"]);
    let mut waiter = server.connect();
    waiter.send(&["HOLD", "inv", "k", "WAIT", "20000"]);
    let mut admin = server.connect();
    admin.await_stat("inv", "waiters", 1);
    let mut old = server.connect();
    let Value::Array(flat) = old.call(&["INSPECT", "inv", "k"]) else {
        panic!("RESP2: a flat array")
    };
    assert_eq!(flat[0], Value::bulk("held"));

    assert!(matches!(admin.call(&["HELLO", "3"]), Value::Map(_)));
    let Value::Map(info) = admin.call(&["INSPECT", "inv", "k"]) else {
        panic!("RESP3: a map")
    };
    let get = |k: &str| map_field(&info, k);
    assert_eq!(get("held"), Some(Value::Boolean(true)));
    assert_eq!(get("fence"), Some(Value::Integer(fence)));
    assert_eq!(get("waiters"), Some(Value::Integer(1)));
    let Some(Value::Map(who)) = get("holder") else {
        panic!("no holder in {info:?}")
    };
    let field = |k: &str| map_field(&who, k);
    assert_eq!(field("id"), Some(Value::Integer(holder_id)));
    assert_eq!(field("name"), Some(Value::bulk("billing-7")));
    assert_eq!(field("lease"), Some(Value::Integer(lease)));
    assert_eq!(admin.call(&["INSPECT", "inv", "nothing"]), Value::Null);

    let list = text(admin.call(&["CLIENT", "LIST"]));
    let line = list
        .lines()
        .find(|l| l.starts_with(&format!("id={holder_id} ")))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        line.contains(" name=billing-7 ") && line.contains(" leases=1 "),
        "{line}"
    );
    assert!(list.contains(" waiting=inv/k"), "{list}");

    // The operator frees the stuck holder: the waiter is granted at once.
    let killed = admin.call(&["CLIENT", "KILL", "ID", &holder_id.to_string()]);
    assert_eq!(killed, Value::Integer(1));
    let Value::Array(pair) = waiter.read() else {
        panic!("the waiter was not granted")
    };
    assert!(pair[1].as_integer().unwrap() > fence);
    assert_eq!(
        admin.call(&["CLIENT", "KILL", "ID", "999999"]),
        Value::Integer(0)
    );
}

#[test]
fn client_info_and_help_answer_and_unknown_subcommands_stay_errors() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let me = text(c.call(&["CLIENT", "INFO"]));
    assert!(me.starts_with("id=") && me.contains(" cmd=client "), "{me}");
    let Value::Array(help) = c.call(&["CLIENT", "HELP"]) else {
        panic!("CLIENT HELP answers lines")
    };
    assert!(help.len() > 5);
    assert_eq!(
        error_text(c.call(&["CLIENT", "FROB"])),
        "ERR unknown subcommand 'FROB'. Try CLIENT HELP."
    );
}

/// A bad setting: the flags given, the variable set, and what the refusal names.
type BadKnob = (
    &'static [&'static str],
    Option<(&'static str, &'static str)>,
    &'static str,
);

#[test]
fn a_bad_knob_exits_2_naming_it_and_help_names_the_knobs() {
    // As a flag or as a variable; clap names its own flags.
    let bad: [BadKnob; 4] = [
        (&["--log-level", "bogus"], None, "\"bogus\""),
        (&[], Some(("HOLDLINE_LOG", "info,=nope")), "\"info,=nope\""),
        (&["--cores", "0"], None, "--cores"),
        (
            &[],
            Some(("HOLDLINE_CORES", "many")),
            "holdline: HOLDLINE_CORES \"many\": invalid value 'many' for '--cores <N>'",
        ),
    ];
    for (args, env, named) in bad {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_holdline"));
        cmd.args(["serve", "--listen", "127.0.0.1:0"]).args(args);
        if let Some((var, value)) = env {
            cmd.env(var, value);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(named), "{stderr}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_holdline"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for word in [
        "HOLDLINE_LOG",
        "--log-level",
        "--log-format",
        "SIGTERM",
        "SIGHUP",
        "--tls-cert",
        "--cores",
    ] {
        assert!(help.contains(word), "--help names {word}: {help}");
    }
}

#[test]
fn inline_commands_split_words_as_redis_does() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.raw(b"TRYHOLD inv \"a b\"\r\n");
    let Value::Array(pair) = c.read() else {
        panic!("a quoted key with a space is one key")
    };
    assert!(pair[1].as_integer().unwrap() > 0);
    c.raw(b"INSPECT inv 'a b'\r\n");
    assert!(
        matches!(c.read(), Value::Array(_)),
        "the same key, single-quoted"
    );
    c.raw(b"ECHO \"\\x41\\x42\"\r\n");
    assert_eq!(c.read(), Value::bulk("AB"));
    c.raw(b"ECHO \"open\r\n");
    assert!(error_text(c.read()).starts_with("ERR protocol error: unbalanced quotes"));
}
