//! Notes on leases, HISTORY (every grant and end of a lease, newest first,
//! filtered by lock and key) and the audit log (JSON lines, reopened on
//! SIGHUP, never slowing a grant when nobody reads it).

mod common;

use common::{error_text, Client, Server, TempFile, PATIENCE};
use holdline_resp::Value;
use std::time::{Duration, Instant};

/// One HISTORY event (RESP3) as (field, value) pairs.
type Event = Vec<(String, Value)>;

fn history(c: &mut Client, args: &[&str]) -> Vec<Event> {
    let mut call = vec!["HISTORY"];
    call.extend_from_slice(args);
    let Value::Array(events) = c.call(&call) else {
        panic!("HISTORY answered no array")
    };
    events
        .into_iter()
        .map(|e| match e {
            Value::Map(pairs) => pairs
                .into_iter()
                .map(|(k, v)| (k.as_str().unwrap().to_owned(), v))
                .collect(),
            other => panic!("an event is a map in RESP3: {other:?}"),
        })
        .collect()
}

fn get<'a>(e: &'a Event, name: &str) -> &'a Value {
    &e.iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no {name} in {e:?}"))
        .1
}

fn word(e: &Event, name: &str) -> String {
    get(e, name)
        .as_str()
        .unwrap_or_else(|| panic!("{name} is no text"))
        .to_owned()
}

fn resp3(server: &Server) -> Client {
    let mut c = server.connect();
    assert!(matches!(c.call(&["HELLO", "3"]), Value::Map(_)));
    c
}

/// Polls HISTORY until it has `n` events for `args`.
fn await_events(c: &mut Client, args: &[&str], n: usize) -> Vec<Event> {
    common::poll(|| match history(c, args) {
        events if events.len() >= n => Ok(events),
        events => Err(format!("{} events, not {n}", events.len())),
    })
}

#[test]
fn notes_show_where_the_holder_shows() {
    let server = Server::start(&[]);
    let mut c = resp3(&server);
    let (lease, _) = c.grant(&["HOLD", "jobs", "nightly", "NOTE", "10.0.0.5:8080"]);
    let Value::Map(info) = c.call(&["INSPECT", "jobs", "nightly"]) else {
        panic!("INSPECT")
    };
    let holder = info
        .iter()
        .find(|(k, _)| k.as_str() == Some("holder"))
        .unwrap();
    let Value::Map(holder) = &holder.1 else {
        panic!("holder")
    };
    assert!(holder.contains(&(Value::bulk("note"), Value::bulk("10.0.0.5:8080"))));
    assert_eq!(
        c.call(&["NOTE", &lease.to_string(), "10.0.0.6:8080"]),
        Value::ok()
    );
    let mut other = server.connect();
    assert_eq!(
        error_text(other.call(&["NOTE", &lease.to_string(), "mine"])),
        format!("INVALID store: lease {lease} is not held by this connection: invalid")
    );
    assert_eq!(
        error_text(c.call(&["NOTE", &lease.to_string(), "a\nb"])),
        "INVALID lock jobs: key \"nightly\": a note is 1 to 1024 bytes of UTF-8 without control characters: invalid"
    );
    assert!(error_text(c.call(&["HOLD", "jobs", "x", "NOTE", ""])).contains("a note is 1 to 1024"));
    assert_eq!(c.call(&["RELEASE", &lease.to_string()]), Value::ok());
    let events = history(&mut c, &["jobs"]);
    assert_eq!(word(&events[0], "event"), "released");
    assert_eq!(
        word(&events[0], "note"),
        "10.0.0.6:8080",
        "the note as it was at the end"
    );
    assert_eq!(
        word(&events[1], "note"),
        "10.0.0.5:8080",
        "the note of the grant"
    );
}

#[test]
fn history_is_newest_first_and_filters_by_lock_and_key() {
    let server = Server::start(&[]);
    let mut admin = resp3(&server);
    let mut a = server.connect();
    a.call(&["CLIENT", "SETNAME", "billing-7"]);
    let (l1, f1) = a.grant(&["HOLD", "inv", "k1", "NOTE", "first"]);
    a.call(&["RELEASE", &l1.to_string()]);
    let (l2, f2) = a.grant(&["HOLD", "sem", "k2", "PERMITS", "3", "TAKE", "2"]);
    a.grant(&["HOLD", "other", "k1"]);
    let list = match admin.call(&["CLIENT", "LIST"]) {
        Value::Verbatim(t) | Value::Simple(t) => t,
        Value::Bulk(b) => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    let line = list.lines().find(|l| l.contains("name=billing-7")).unwrap();
    let id = line
        .split_whitespace()
        .next()
        .unwrap()
        .trim_start_matches("id=");
    admin.call(&["CLIENT", "KILL", "ID", id]);
    let all = await_events(&mut admin, &[], 6);
    let words: Vec<String> = all.iter().map(|e| word(e, "event")).collect();
    // Newest first: the kill ends both leases left (in either order).
    assert_eq!(&words[2..], ["granted", "granted", "released", "granted"]);
    assert_eq!(&words[..2], ["disconnected", "disconnected"]);
    for e in &all[..2] {
        assert_eq!(word(e, "reason"), "killed");
        assert!(get(e, "held_ms").as_integer().is_some());
    }
    let k1 = history(&mut admin, &["inv", "k1"]);
    assert_eq!(k1.len(), 2);
    assert_eq!(get(&k1[0], "fence").as_integer(), Some(f1));
    assert_eq!(get(&k1[1], "lease").as_integer(), Some(l1));
    assert_eq!(word(&k1[1], "note"), "first");
    assert_eq!(
        get(&k1[1], "held_ms"),
        &Value::Null,
        "a grant has no held time"
    );
    let Value::Map(holder) = get(&k1[1], "holder") else {
        panic!("holder")
    };
    assert!(holder.contains(&(Value::bulk("name"), Value::bulk("billing-7"))));
    let sem = history(&mut admin, &["sem", "COUNT", "1"]);
    assert_eq!(sem.len(), 1);
    assert_eq!(word(&sem[0], "event"), "disconnected");
    assert_eq!(get(&sem[0], "lease").as_integer(), Some(l2));
    assert_eq!(get(&sem[0], "fence").as_integer(), Some(f2));
    assert_eq!(get(&sem[0], "permits").as_integer(), Some(2));
    assert!(error_text(admin.call(&["HISTORY", "a", "b", "c"])).contains("syntax error"));
    // RESP2: a flat array per event.
    let mut old = server.connect();
    let Value::Array(events) = old.call(&["HISTORY", "inv", "k1", "COUNT", "1"]) else {
        panic!("HISTORY")
    };
    assert!(matches!(&events[0], Value::Array(flat) if flat[0] == Value::bulk("time_ms")));
}

#[test]
fn a_revoked_lease_is_recorded_revoked_once() {
    let server = Server::start(&[]);
    let mut admin = resp3(&server);
    let mut c = server.connect();
    let (lease, _) = c.grant(&["HOLD", "jobs", "k", "MAXHOLD", "50"]);
    let events = await_events(&mut admin, &["jobs"], 2);
    assert_eq!(word(&events[0], "event"), "revoked");
    assert!(error_text(c.call(&["RELEASE", &lease.to_string()])).starts_with("LOST"));
    assert_eq!(
        history(&mut admin, &["jobs"]).len(),
        2,
        "the RELEASE of a lost lease adds nothing"
    );
    assert!(server.connect().call(&["HISTORY"]) != Value::Null);
}

#[test]
fn history_zero_keeps_nothing() {
    let server = Server::start(&["--history", "0"]);
    let mut c = resp3(&server);
    let (lease, _) = c.grant(&["HOLD", "jobs", "k"]);
    c.call(&["RELEASE", &lease.to_string()]);
    assert!(history(&mut c, &[]).is_empty());
}

#[test]
fn the_audit_log_is_json_lines_and_survives_a_rotation() {
    let log = TempFile::new("audit.jsonl", "");
    let path = log.path.clone();
    let server = Server::start(&["--audit-log", &path]);
    let mut c = server.connect();
    let (lease, fence) = c.grant(&["HOLD", "inv", "k", "NOTE", "n1"]);
    c.call(&["RELEASE", &lease.to_string()]);
    let lines = await_lines(&path, 2);
    let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(first["event"], "granted");
    assert_eq!(first["lock"], "inv");
    assert_eq!(first["key"], "k");
    assert_eq!(first["fence"].as_i64(), Some(fence));
    assert_eq!(first["note"], "n1");
    assert!(first["time_ms"].as_u64().unwrap() > 1_700_000_000_000);
    let second: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!(second["event"], "released");
    assert!(second["held_ms"].is_u64());
    // logrotate: move the file away, then SIGHUP.
    let rotated = format!("{path}.1");
    std::fs::rename(&path, &rotated).unwrap();
    server.signal(libc::SIGHUP);
    // The reopen happens before the writer's next line: hold until it shows.
    let deadline = Instant::now() + PATIENCE;
    while !std::path::Path::new(&path).exists() {
        let (lease, _) = c.grant(&["HOLD", "inv", "after"]);
        c.call(&["RELEASE", &lease.to_string()]);
        assert!(Instant::now() < deadline, "no new file after SIGHUP");
        std::thread::sleep(Duration::from_millis(20));
    }
    let after = await_lines(&path, 1);
    let e: serde_json::Value = serde_json::from_str(&after[0]).unwrap();
    assert_eq!(e["key"], "after");
    assert!(await_lines(&rotated, 2).len() >= 2);
    let _ = std::fs::remove_file(rotated);
}

/// Waits until `path` has at least `n` whole lines.
fn await_lines(path: &str, n: usize) -> Vec<String> {
    common::poll(|| {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= n && text.ends_with('\n') {
            Ok(lines)
        } else {
            Err(format!("{path}: {} lines, not {n}", lines.len()))
        }
    })
}

/// An audit log nobody reads (a FIFO without a reader: its writer cannot
/// even open it) never slows a grant: the server keeps serving, and the
/// events it cannot log are dropped and counted.
#[test]
fn an_audit_log_nobody_reads_drops_events_and_slows_nothing() {
    let dir = std::env::temp_dir().join(format!("holdline-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("audit");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let server = Server::start(&["--audit-log", fifo.to_str().unwrap()]);
    let mut c = server.connect();
    // More events than the writer's queue holds (4,096).
    for i in 0..2_500 {
        let (lease, _) = c.grant(&["HOLD", "inv", &format!("k{}", i % 10)]);
        assert_eq!(c.call(&["RELEASE", &lease.to_string()]), Value::ok());
    }
    let info = match c.call(&["INFO"]) {
        Value::Bulk(b) => String::from_utf8(b).unwrap(),
        Value::Verbatim(t) => t,
        other => panic!("{other:?}"),
    };
    let dropped: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("audit_dropped_events:"))
        .expect("audit_dropped_events in INFO")
        .trim()
        .parse()
        .unwrap();
    assert!(dropped >= 5_000 - 4_096, "dropped {dropped}");
    assert_eq!(c.call(&["PING"]), Value::Simple("PONG".into()));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
