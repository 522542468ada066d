//! The command table against a real server: answers, error texts to
//! the byte, both protocols, and commands carried out in order while a
//! HOLD waits.

mod common;

use common::{error_text, Server};
use holdline_resp::Value;
use std::time::{Duration, Instant};

#[test]
fn hold_tryhold_release_renew_and_stats() {
    let server = Server::start(&[]);
    let mut a = server.connect();
    let mut b = server.connect();
    let (lease, fence) = a.grant(&["HOLD", "invoices", "9"]);
    assert!(lease > 0 && fence > 0);
    assert_eq!(b.call(&["TRYHOLD", "invoices", "9"]), Value::Null);
    assert_eq!(
        error_text(b.call(&["HOLD", "invoices", "9", "WAIT", "0"])),
        "INUSE lock invoices: key \"9\": held past the hold's wait: in use"
    );
    assert_eq!(
        error_text(b.call(&["hold", "invoices", "9", "wait", "50"])),
        "INUSE lock invoices: key \"9\": held past the hold's wait: in use"
    );
    // Another connection's lease is not b's to renew or release.
    let id = lease.to_string();
    assert_eq!(
        error_text(b.call(&["RELEASE", &id])),
        format!("INVALID store: lease {id} is not held by this connection: invalid")
    );
    assert_eq!(a.call(&["RENEW", &id]), Value::ok());
    let stats = a.stats("invoices");
    let names: Vec<&str> = stats.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "live_keys",
            "held_keys",
            "waiters",
            "grants",
            "timeouts",
            "revocations",
            "expirations"
        ]
    );
    assert_eq!(a.stat("invoices", "held_keys"), 1);
    assert_eq!(a.stat("invoices", "timeouts"), 2);
    assert_eq!(a.call(&["RELEASE", &id]), Value::ok());
    assert_eq!(
        error_text(a.call(&["RELEASE", &id])),
        format!("INVALID store: lease {id} is not held by this connection: invalid")
    );
    let (_, fence2) = b.grant(&["TRYHOLD", "invoices", "9"]);
    assert!(fence2 > fence, "fences rise: {fence2} after {fence}");
    // Key 9 and key "9" are one key; a number is its decimal text.
    assert_eq!(a.call(&["TRYHOLD", "invoices", "9"]), Value::Null);
}

#[test]
fn resp3_answers_maps_and_resp2_flat_arrays() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert!(matches!(c.call(&["STATS", "l"]), Value::Array(ref a) if a.len() == 14));
    let Value::Map(hello) = c.call(&["HELLO", "3"]) else {
        panic!("HELLO 3 answers a map")
    };
    let field = |name: &str| {
        hello
            .iter()
            .find(|(k, _)| k.as_str() == Some(name))
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("HELLO lacks {name}"))
    };
    assert_eq!(field("server"), Value::bulk("holdline"));
    assert_eq!(field("proto"), Value::Integer(3));
    for name in ["version", "id", "mode", "role", "modules"] {
        field(name);
    }
    assert!(matches!(c.call(&["STATS", "l"]), Value::Map(ref m) if m.len() == 7));
    // RESP3's own null for a held key, and RESP2's after HELLO 2.
    let mut other = server.connect();
    other.grant(&["HOLD", "l", "k"]);
    c.raw(b"*3\r\n$7\r\nTRYHOLD\r\n$1\r\nl\r\n$1\r\nk\r\n");
    assert_eq!(c.read(), Value::Null);
    assert!(matches!(c.call(&["HELLO", "2"]), Value::Array(_)));
    assert_eq!(
        error_text(c.call(&["HELLO", "4"])),
        "NOPROTO unsupported protocol version"
    );
}

#[test]
fn small_commands_behave_as_redis() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(c.call(&["PING"]), Value::simple("PONG"));
    assert_eq!(c.call(&["ping", "hi"]), Value::bulk("hi"));
    assert_eq!(c.call(&["ECHO", "a\r\nb"]), Value::bulk("a\r\nb"));
    assert_eq!(c.call(&["SELECT", "0"]), Value::ok());
    assert_eq!(
        error_text(c.call(&["SELECT", "1"])),
        "ERR DB index is out of range"
    );
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), Value::Null);
    assert_eq!(c.call(&["CLIENT", "SETNAME", "worker-1"]), Value::ok());
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), Value::bulk("worker-1"));
    assert_eq!(
        c.call(&["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]),
        Value::ok()
    );
    assert!(error_text(c.call(&["CLIENT", "MAINT_NOTIFICATIONS", "on"]))
        .starts_with("ERR unknown subcommand"));
    assert_eq!(
        c.call(&["PING"]),
        Value::simple("PONG"),
        "an unknown subcommand keeps the connection"
    );
    // A map, flattened in RESP2: name, then its doc.
    let Value::Array(docs) = c.call(&["COMMAND", "DOCS", "HOLD"]) else {
        panic!("COMMAND DOCS answers a map")
    };
    assert_eq!(docs[0], Value::bulk("hold"));
    assert_eq!(docs.len(), 2);
    assert_eq!(c.call(&["QUIT"]), Value::ok());
    assert!(c.read_to_close().is_empty());
}

#[test]
fn put_and_get_are_fenced() {
    let server = Server::start(&[]);
    let mut a = server.connect();
    let (lease, fence) = a.grant(&["HOLD", "acct", "7"]);
    let f = fence.to_string();
    assert_eq!(
        a.call(&["PUT", "acct", "7", &f, "balance:7", "100"]),
        Value::ok()
    );
    assert_eq!(a.call(&["GET", "balance:7"]), Value::bulk("100"));
    assert_eq!(a.call(&["GET", "nothing"]), Value::Null);
    let older = (fence - 1).to_string();
    assert!(
        error_text(a.call(&["PUT", "acct", "7", &older, "balance:7", "1"]))
            .starts_with("LOST lock acct: key \"7\": the lease was lost: ")
    );
    a.call(&["RELEASE", &lease.to_string()]);
    // Released: the old fence no longer writes.
    assert!(error_text(a.call(&["PUT", "acct", "7", &f, "balance:7", "0"])).starts_with("LOST "));
    assert_eq!(a.call(&["GET", "balance:7"]), Value::bulk("100"));
}

/// A connection's commands run one at a time in order; what it sends
/// behind a waiting HOLD is read at once (and renews its leases) but
/// carried out after the HOLD ends.
#[test]
fn commands_behind_a_waiting_hold_renew_at_once_and_run_after_it() {
    let server = Server::start(&[]);
    let mut holder = server.connect();
    let mut waiter = server.connect();
    let (blocking, _) = holder.grant(&["HOLD", "jobs", "b"]);
    // The waiter holds "a" with a short ttl, then waits for "b" while
    // pinging every 100 ms: its pings keep "a" alive past its 1 s ttl.
    let (kept, _) = waiter.grant(&["HOLD", "jobs", "a", "TTL", "1000"]);
    waiter.send(&["HOLD", "jobs", "b", "WAIT", "20000"]);
    let started = Instant::now();
    let mut pings = 0;
    while started.elapsed() < Duration::from_millis(2500) {
        waiter.send(&["PING", "x"]);
        pings += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    // Nothing answered yet: the PINGs wait behind the HOLD.
    assert_eq!(waiter.read_within(Duration::from_millis(50)), None);
    assert_eq!(
        holder.call(&["RELEASE", &blocking.to_string()]),
        Value::ok()
    );
    assert!(
        matches!(waiter.read(), Value::Array(_)),
        "the HOLD is answered first"
    );
    for _ in 0..pings {
        assert_eq!(waiter.read(), Value::bulk("x"));
    }
    assert_eq!(
        waiter.call(&["RENEW", &kept.to_string()]),
        Value::ok(),
        "the lease on a was renewed by the commands read while b was waited for"
    );
}

#[test]
fn a_second_hold_of_a_held_key_on_one_connection_is_invalid_at_once() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.grant(&["HOLD", "invoices", "7"]);
    let started = Instant::now();
    assert_eq!(
        error_text(c.call(&["HOLD", "invoices", "7", "WAIT", "5000"])),
        "INVALID lock invoices: key \"7\": hold inside a hold of the same key: invalid"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "refused at once, not at the wait"
    );
    assert_eq!(c.call(&["TRYHOLD", "invoices", "7"]), Value::Null);
}

#[test]
fn waiters_are_granted_in_arrival_order() {
    let server = Server::start(&[]);
    let mut holder = server.connect();
    let (lease, _) = holder.grant(&["HOLD", "fifo", "k"]);
    let mut waiters: Vec<_> = (0..5).map(|_| server.connect()).collect();
    for (i, w) in waiters.iter_mut().enumerate() {
        w.send(&["HOLD", "fifo", "k", "WAIT", "20000"]);
        holder.await_stat("fifo", "waiters", i as i64 + 1);
    }
    holder.call(&["RELEASE", &lease.to_string()]);
    let mut last_fence = 0;
    for w in &mut waiters {
        // The next in line has the key; the rest are still waiting.
        let Value::Array(pair) = w.read() else {
            panic!()
        };
        let fence = pair[1].as_integer().unwrap();
        assert!(fence > last_fence);
        last_fence = fence;
        w.call(&["RELEASE", &pair[0].as_integer().unwrap().to_string()]);
    }
}

/// The longest WAIT the server takes (an i64 of milliseconds) waits as long
/// as it takes: no answer while the key is held, the grant once it is let
/// go; one past it is refused as Redis refuses a number out of range.
#[test]
fn the_longest_wait_waits_until_the_key_is_let_go() {
    let server = Server::start(&[]);
    let mut holder = server.connect();
    let (lease, _) = holder.grant(&["HOLD", "longest", "k"]);
    let mut waiter = server.connect();
    waiter.send(&["HOLD", "longest", "k", "WAIT", &i64::MAX.to_string()]);
    assert_eq!(
        waiter.read_within(Duration::from_millis(300)),
        None,
        "still waiting"
    );
    assert_eq!(holder.call(&["RELEASE", &lease.to_string()]), Value::ok());
    let granted = waiter
        .read_within(Duration::from_secs(10))
        .expect("granted");
    assert!(matches!(granted, Value::Array(_)), "{granted:?}");
    let past = (i64::MAX as u64 + 1).to_string();
    assert_eq!(
        error_text(holder.call(&["HOLD", "longest", "j", "WAIT", &past])),
        "ERR value is not an integer or out of range: WAIT takes whole milliseconds (WAIT 10000 is 10 s)"
    );
}
