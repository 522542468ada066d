//! Permits over the wire: `PERMITS n` and `TAKE m|ALL` on HOLD and
//! TRYHOLD, their refusals, INSPECT's holders, and a lock's count kept
//! only while the lock is in use.

mod common;

use common::{error_text, Client, Server, PATIENCE};
use holdline_resp::Value;
use std::time::{Duration, Instant};

/// INSPECT's answer (RESP3) as a lookup.
fn inspect(c: &mut Client, lock: &str, key: &str) -> Vec<(String, Value)> {
    match c.call(&["INSPECT", lock, key]) {
        Value::Map(pairs) => pairs
            .into_iter()
            .map(|(k, v)| (k.as_str().unwrap().to_owned(), v))
            .collect(),
        other => panic!("INSPECT answered {other:?}"),
    }
}

fn field<'a>(map: &'a [(String, Value)], name: &str) -> &'a Value {
    &map.iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no {name} in {map:?}"))
        .1
}

fn resp3(server: &Server) -> Client {
    let mut c = server.connect();
    assert!(matches!(c.call(&["HELLO", "3"]), Value::Map(_)));
    c
}

#[test]
fn a_semaphore_grants_its_count_and_lines_up_the_rest_in_order() {
    let server = Server::start(&[]);
    let mut admin = resp3(&server);
    let mut holders: Vec<Client> = (0..3).map(|_| server.connect()).collect();
    // 1 + 2 = 3 of 4 fit; the third asks for 3 and waits.
    let fences = [
        holders[0].grant(&["HOLD", "p", "k", "PERMITS", "4"]).1,
        holders[1]
            .grant(&["HOLD", "p", "k", "PERMITS", "4", "TAKE", "2"])
            .1,
    ];
    assert!(fences[1] > fences[0]);
    holders[2].send(&["HOLD", "p", "k", "PERMITS", "4", "TAKE", "3"]);
    admin.await_stat("p", "waiters", 1);
    // A try of one permit would fit, but someone waits: no overtaking.
    let mut other = server.connect();
    assert_eq!(
        other.call(&["TRYHOLD", "p", "k", "PERMITS", "4"]),
        Value::Null
    );
    let info = inspect(&mut admin, "p", "k");
    assert_eq!(field(&info, "holders"), &Value::Integer(2));
    assert_eq!(field(&info, "permits_held"), &Value::Integer(3));
    assert_eq!(field(&info, "fence"), &Value::Integer(fences[1]));
    let Value::Array(list) = field(&info, "holder_list") else {
        panic!("no holder_list in {info:?}")
    };
    assert_eq!(list.len(), 2);
    // Whoever held 2 lets go: 1 + 3 fit, so the waiter is granted.
    holders[1].call(&["QUIT"]);
    let Value::Array(pair) = holders[2].read() else {
        panic!("the waiter was not granted")
    };
    assert!(pair[1].as_integer().unwrap() > fences[1], "fences rise");
    let info = inspect(&mut admin, "p", "k");
    assert_eq!(field(&info, "permits_held"), &Value::Integer(4));
}

#[test]
fn take_all_is_alone_with_the_key() {
    let server = Server::start(&[]);
    let mut admin = resp3(&server);
    let (mut reader, mut writer, mut late) = (server.connect(), server.connect(), server.connect());
    let (_, first) = reader.grant(&["HOLD", "docs", "d", "PERMITS", "1024"]);
    writer.send(&["HOLD", "docs", "d", "PERMITS", "1024", "TAKE", "ALL"]);
    admin.await_stat("docs", "waiters", 1);
    late.send(&["HOLD", "docs", "d", "PERMITS", "1024"]);
    admin.await_stat("docs", "waiters", 2);
    reader.call(&["QUIT"]);
    let Value::Array(pair) = writer.read() else {
        panic!("the writer was not granted")
    };
    let writer_fence = pair[1].as_integer().unwrap();
    assert!(writer_fence > first);
    let info = inspect(&mut admin, "docs", "d");
    assert_eq!(field(&info, "permits_held"), &Value::Integer(1024));
    let Value::Map(holder) = field(&info, "holder") else {
        panic!("no holder")
    };
    assert!(holder.contains(&(Value::bulk("permits"), Value::Integer(1024))));
    assert_eq!(
        late.read_within(Duration::from_millis(200)),
        None,
        "the late reader waits"
    );
    writer.call(&["QUIT"]);
    let Value::Array(pair) = late.read() else {
        panic!("the late reader was not granted")
    };
    assert!(pair[1].as_integer().unwrap() > writer_fence);
}

#[test]
fn bad_counts_are_refused_with_the_lock_and_key_named() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.grant(&["HOLD", "docs", "d", "PERMITS", "1024"]);
    let mut other = server.connect();
    for (args, text) in [
        (
            vec!["HOLD", "docs", "e", "PERMITS", "8"],
            "INVALID lock docs: opened with 1024 permits, not 8: invalid",
        ),
        (
            vec!["TRYHOLD", "docs", "e"],
            "INVALID lock docs: opened with 1024 permits, not 1: invalid",
        ),
        (
            vec!["HOLD", "providers", "stripe", "PERMITS", "5", "TAKE", "6"],
            "INVALID lock providers: key \"stripe\": 6 permits asked of a lock of 5: invalid",
        ),
        (
            vec![
                "TRYHOLD",
                "providers",
                "stripe",
                "PERMITS",
                "5",
                "TAKE",
                "0",
            ],
            "INVALID lock providers: key \"stripe\": 0 permits asked of a lock of 5: invalid",
        ),
        (
            vec!["HOLD", "providers", "stripe", "PERMITS", "0"],
            "INVALID lock providers: a lock has 1 to 1000000 permits, not 0: invalid",
        ),
        (
            vec!["HOLD", "p", "k", "PERMITS", "-1"],
            "ERR value is not an integer or out of range",
        ),
        (
            vec!["HOLD", "p", "k", "TAKE", "SOME"],
            "ERR value is not an integer or out of range",
        ),
        (
            vec!["HOLD", "p", "k", "TAKE", "1", "TAKE", "1"],
            "ERR syntax error",
        ),
        (vec!["HOLD", "p", "k", "PERMITS"], "ERR syntax error"),
    ] {
        assert_eq!(error_text(other.call(&args)), text, "{args:?}");
    }
    // The connection and the holder are served on.
    assert_eq!(other.call(&["PING"]), Value::Simple("PONG".into()));
}

/// A lock's count is fixed while a key of it is held or waited for, and
/// free again once the lock is forgotten (its idle keys reclaimed, about a
/// second later); a look at it (INSPECT) fixes nothing.
#[test]
fn a_count_holds_while_the_lock_is_in_use_and_no_longer() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(c.call(&["INSPECT", "fresh", "k"]), Value::Null);
    c.grant(&["HOLD", "fresh", "k", "PERMITS", "5"]);
    let (lease, _) = c.grant(&["HOLD", "docs", "d", "PERMITS", "1024"]);
    let mut other = server.connect();
    let refused = other.call(&["HOLD", "docs", "d", "PERMITS", "8"]);
    assert!(error_text(refused).contains("opened with 1024 permits, not 8"));
    assert_eq!(c.call(&["RELEASE", &lease.to_string()]), Value::ok());
    let deadline = Instant::now() + PATIENCE;
    loop {
        match other.call(&["HOLD", "docs", "d", "PERMITS", "8", "WAIT", "0"]) {
            Value::Array(_) => break,
            refused => {
                let text = error_text(refused);
                assert!(text.contains("opened with 1024 permits"), "{text}");
                assert!(Instant::now() < deadline, "the count stayed fixed: {text}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}
