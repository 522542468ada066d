//! OBSERVE: a key's present state, then one push for every change of its
//! holders, in order (an end before the next grant), with the exact
//! refusals, the limit of keys a connection observes, and an observer
//! that stops reading disconnected without slowing anyone.

mod common;

use common::{error_text, runs, tool_available, Client, Server, PATIENCE};
use holdline_resp::Value;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One `observe` push: (event, fence, permits, holder, note).
#[derive(Debug, PartialEq)]
struct Push {
    event: String,
    fence: i64,
    permits: i64,
    holder: i64,
    note: String,
}

fn push(event: &str, fence: i64, permits: i64, holder: i64, note: &str) -> Push {
    Push {
        event: event.into(),
        fence,
        permits,
        holder,
        note: note.into(),
    }
}

fn resp3(server: &Server) -> Client {
    let mut c = server.connect();
    assert!(matches!(c.call(&["HELLO", "3"]), Value::Map(_)));
    c
}

fn client_id(c: &mut Client) -> i64 {
    c.call(&["CLIENT", "ID"]).as_integer().expect("CLIENT ID")
}

/// The next push for `lock`'s `key` (other values are a failure).
fn next_push(c: &mut Client, lock: &str, key: &str) -> Push {
    let Value::Push(items) = c.read() else {
        panic!("expected a push")
    };
    let text = |v: &Value| v.as_str().expect("text").to_owned();
    let int = |v: &Value| v.as_integer().expect("an integer");
    assert_eq!(items.len(), 8, "{items:?}");
    assert_eq!(text(&items[0]), "observe");
    assert_eq!(
        (text(&items[1]), text(&items[2])),
        (lock.into(), key.into())
    );
    Push {
        event: text(&items[3]),
        fence: int(&items[4]),
        permits: int(&items[5]),
        holder: int(&items[6]),
        note: text(&items[7]),
    }
}

/// Observes `lock`'s `key` on a RESP3 connection: `OK`.
fn observe(c: &mut Client, lock: &str, key: &str) {
    assert_eq!(c.call(&["OBSERVE", lock, key]), Value::ok());
}

/// A RESP3 client observing `lock`'s `key`, told first that it is free.
fn observing_free(server: &Server, lock: &str, key: &str) -> Client {
    let mut o = resp3(server);
    observe(&mut o, lock, key);
    assert_eq!(next_push(&mut o, lock, key).event, "free");
    o
}

#[test]
fn an_observer_is_told_the_state_then_every_change_in_order() {
    let server = Server::start(&[]);
    let mut o = resp3(&server);
    observe(&mut o, "jobs", "nightly");
    assert_eq!(
        next_push(&mut o, "jobs", "nightly"),
        push("free", 0, 0, 0, "")
    );

    let mut a = server.connect();
    let a_id = client_id(&mut a);
    let (lease_a, fence_a) = a.grant(&["HOLD", "jobs", "nightly", "NOTE", "a:1"]);
    let granted_a = push("granted", fence_a, 1, a_id, "a:1");
    assert_eq!(next_push(&mut o, "jobs", "nightly"), granted_a);

    // A note changed: the state again, with the new note.
    assert_eq!(a.call(&["NOTE", &lease_a.to_string(), "a:2"]), Value::ok());
    let held_a = push("held", fence_a, 1, a_id, "a:2");
    assert_eq!(next_push(&mut o, "jobs", "nightly"), held_a);

    // A waiter behind it: the release is told before the next grant.
    let mut b = server.connect();
    let b_id = client_id(&mut b);
    b.send(&["HOLD", "jobs", "nightly", "TTL", "300", "NOTE", "b"]);
    a.await_stat("jobs", "waiters", 1);
    assert_eq!(a.call(&["RELEASE", &lease_a.to_string()]), Value::ok());
    let released_a = push("released", fence_a, 1, a_id, "a:2");
    assert_eq!(next_push(&mut o, "jobs", "nightly"), released_a);
    let Value::Array(grant) = b.read() else {
        panic!("b's HOLD")
    };
    let fence_b = grant[1].as_integer().unwrap();
    assert!(fence_b > fence_a);
    assert_eq!(
        next_push(&mut o, "jobs", "nightly"),
        push("granted", fence_b, 1, b_id, "b")
    );

    // b goes silent past its ttl.
    let expired_b = push("expired", fence_b, 1, b_id, "b");
    assert_eq!(next_push(&mut o, "jobs", "nightly"), expired_b);

    // c is killed by an operator; d is revoked at its maxHold.
    let mut c = server.connect();
    let c_id = client_id(&mut c);
    let (_, fence_c) = c.grant(&["HOLD", "jobs", "nightly"]);
    assert_eq!(
        next_push(&mut o, "jobs", "nightly"),
        push("granted", fence_c, 1, c_id, "")
    );
    let mut admin = server.connect();
    let killed = admin.call(&["CLIENT", "KILL", "ID", &c_id.to_string()]);
    assert_eq!(killed, Value::Integer(1));
    let gone = push("disconnected", fence_c, 1, c_id, "");
    assert_eq!(next_push(&mut o, "jobs", "nightly"), gone);
    let mut d = server.connect();
    let d_id = client_id(&mut d);
    let (_, fence_d) = d.grant(&["HOLD", "jobs", "nightly", "MAXHOLD", "200"]);
    assert_eq!(
        next_push(&mut o, "jobs", "nightly"),
        push("granted", fence_d, 1, d_id, "")
    );
    assert_eq!(
        next_push(&mut o, "jobs", "nightly"),
        push("revoked", fence_d, 1, d_id, "")
    );
    assert!(fence_a < fence_b && fence_b < fence_c && fence_c < fence_d);

    // A second observer of the key learns its present state: free now,
    // with its last fence.
    let mut later = resp3(&server);
    observe(&mut later, "jobs", "nightly");
    let free = push("free", fence_d, 0, 0, "");
    assert_eq!(next_push(&mut later, "jobs", "nightly"), free);
}

#[test]
fn a_key_held_before_it_is_observed_shows_its_holder_and_unobserve_stops() {
    let server = Server::start(&[]);
    let mut a = server.connect();
    let a_id = client_id(&mut a);
    let (lease, fence) = a.grant(&["HOLD", "billing", "leader", "NOTE", "10.0.0.5:8080"]);
    let mut o = resp3(&server);
    observe(&mut o, "billing", "leader");
    let held = push("held", fence, 1, a_id, "10.0.0.5:8080");
    assert_eq!(next_push(&mut o, "billing", "leader"), held);
    assert_eq!(o.call(&["UNOBSERVE", "billing", "leader"]), Value::ok());
    assert_eq!(a.call(&["RELEASE", &lease.to_string()]), Value::ok());
    // Nothing comes: a PING's answer is the next value.
    assert_eq!(o.call(&["PING"]), Value::simple("PONG"));
    assert_eq!(o.read_within(Duration::from_millis(200)), None);
    // UNOBSERVE of a key not observed is OK too.
    assert_eq!(o.call(&["UNOBSERVE", "billing", "other"]), Value::ok());
}

#[test]
fn a_semaphores_observer_sees_every_holder() {
    let server = Server::start(&[]);
    let (mut a, mut b) = (server.connect(), server.connect());
    let (a_id, b_id) = (client_id(&mut a), client_id(&mut b));
    let (_, fa) = a.grant(&["HOLD", "pool", "k", "PERMITS", "3", "TAKE", "2"]);
    let (lease_b, fb) = b.grant(&["HOLD", "pool", "k", "PERMITS", "3"]);
    let mut o = resp3(&server);
    observe(&mut o, "pool", "k");
    let mut present = vec![
        next_push(&mut o, "pool", "k"),
        next_push(&mut o, "pool", "k"),
    ];
    present.sort_by_key(|p| p.fence);
    assert_eq!(
        present,
        [push("held", fa, 2, a_id, ""), push("held", fb, 1, b_id, "")]
    );
    assert_eq!(b.call(&["RELEASE", &lease_b.to_string()]), Value::ok());
    assert_eq!(
        next_push(&mut o, "pool", "k"),
        push("released", fb, 1, b_id, "")
    );
}

#[test]
fn observe_refuses_resp2_bad_keys_and_more_than_a_thousand_keys() {
    let server = Server::start(&[]);
    let mut two = server.connect();
    assert_eq!(
        error_text(two.call(&["OBSERVE", "jobs", "k"])),
        "ERR OBSERVE needs RESP3: send HELLO 3 first"
    );
    let mut o = resp3(&server);
    assert_eq!(
        error_text(o.call(&["OBSERVE", "jobs", ""])),
        "INVALID lock jobs: key \"\": the key is empty: invalid"
    );
    for i in 0..1000 {
        let key = format!("k{i}");
        observe(&mut o, "jobs", &key);
        assert_eq!(next_push(&mut o, "jobs", &key).event, "free");
    }
    // Observing a key again is no new key: its state again.
    observe(&mut o, "jobs", "k7");
    assert_eq!(next_push(&mut o, "jobs", "k7").event, "free");
    assert_eq!(
        error_text(o.call(&["OBSERVE", "jobs", "k1000"])),
        "LIMIT lock jobs: key \"k1000\": a connection observes at most 1000 keys: limit"
    );
    assert_eq!(o.call(&["UNOBSERVE", "jobs", "k0"]), Value::ok());
    observe(&mut o, "jobs", "k1000");
    assert_eq!(next_push(&mut o, "jobs", "k1000").event, "free");
    // Back to RESP2: nothing is observed any more.
    assert!(matches!(o.call(&["HELLO", "2"]), Value::Array(_)));
    let mut a = server.connect();
    a.grant(&["HOLD", "jobs", "k1"]);
    assert_eq!(o.call(&["PING"]), Value::simple("PONG"));
}

#[test]
fn every_handoff_is_told_end_first_with_rising_fences() {
    let server = Server::start(&[]);
    let mut o = observing_free(&server, "hot", "k");
    // Two clients take turns through the key's line, 200 grants in all.
    let addr = server.addr;
    let turns: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                for _ in 0..100 {
                    let (lease, _) = c.grant(&["HOLD", "hot", "k"]);
                    assert_eq!(c.call(&["RELEASE", &lease.to_string()]), Value::ok());
                }
            })
        })
        .collect();
    let mut last = 0;
    for _ in 0..200 {
        let granted = next_push(&mut o, "hot", "k");
        assert_eq!(granted.event, "granted");
        assert!(granted.fence > last, "{granted:?} after fence {last}");
        let ended = next_push(&mut o, "hot", "k");
        assert_eq!(
            (ended.event.as_str(), ended.fence),
            ("released", granted.fence)
        );
        last = granted.fence;
    }
    for t in turns {
        t.join().unwrap();
    }
}

/// `n` grants and releases of `lock`'s `key`, one round trip a grant
/// (each RELEASE sent with the next HOLD); the time they took.
fn grants(server: &Server, lock: &str, key: &str, n: usize) -> Duration {
    let mut c = server.connect();
    let began = Instant::now();
    let (mut lease, _) = c.grant(&["HOLD", lock, key]);
    for _ in 1..n {
        c.send(&["RELEASE", &lease.to_string()]);
        c.send(&["HOLD", lock, key]);
        assert_eq!(c.read(), Value::ok());
        let Value::Array(grant) = c.read() else {
            panic!("HOLD")
        };
        lease = grant[0].as_integer().unwrap();
    }
    assert_eq!(c.call(&["RELEASE", &lease.to_string()]), Value::ok());
    began.elapsed()
}

#[test]
fn an_observer_that_stops_reading_is_cut_off_and_slows_nobody() {
    const GRANTS: usize = 100_000;
    let server = Server::start(&[]);
    // The rate without an observer, measured the same way, for the margin.
    let alone = grants(&server, "hot", "warm-up", GRANTS / 10);
    let before_kib = server.rss_kib();
    let mut slow = resp3(&server);
    let slow_id = client_id(&mut slow);
    // It observes, then never reads again.
    slow.send(&["OBSERVE", "hot", "k"]);
    let watched = grants(&server, "hot", "k", GRANTS);
    let per_grant = |d: Duration, n: usize| d.as_secs_f64() / n as f64;
    let (alone, watched) = (per_grant(alone, GRANTS / 10), per_grant(watched, GRANTS));
    eprintln!(
        "per grant: {:.1} us alone, {:.1} us observed",
        alone * 1e6,
        watched * 1e6
    );
    // Wide: only a server that waited on the stuck reader fails this.
    assert!(
        watched < alone * 5.0,
        "{watched} s a grant against {alone} s"
    );
    // Cut off: gone from CLIENT LIST, and its socket closed.
    let mut admin = server.connect();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let Value::Bulk(list) = admin.call(&["CLIENT", "LIST"]) else {
            panic!("CLIENT LIST")
        };
        let listed = String::from_utf8_lossy(&list).contains(&format!("id={slow_id} "));
        if !listed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stuck observer is still served"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let read = slow.read_to_close();
    assert!(read.len() < 2 * GRANTS, "{} values reached it", read.len());
    // Its pushes were let go: the server's memory is back near where it was.
    server.assert_rss_within(before_kib, 32 * 1024);
}

#[test]
fn a_lease_the_core_ends_is_told_before_the_waiter_it_let_in() {
    let server = Server::start(&[]);
    let mut o = observing_free(&server, "ttl", "k");
    for round in 0..10 {
        // A holder that goes silent past its ttl, with a waiter behind it:
        // the core gives the key on at once, and the waiter's connection
        // may hear of its grant before the silent one hears of its loss.
        let mut silent = server.connect();
        let (_, fence) = silent.grant(&["HOLD", "ttl", "k", "TTL", "100"]);
        assert_eq!(next_push(&mut o, "ttl", "k").event, "granted");
        let mut next = server.connect();
        let (lease, after) = next.grant(&["HOLD", "ttl", "k"]);
        let ended = next_push(&mut o, "ttl", "k");
        assert_eq!(
            (ended.event.as_str(), ended.fence),
            ("expired", fence),
            "round {round}"
        );
        let granted = next_push(&mut o, "ttl", "k");
        assert_eq!(
            (granted.event.as_str(), granted.fence),
            ("granted", after),
            "round {round}"
        );
        assert_eq!(next.call(&["RELEASE", &lease.to_string()]), Value::ok());
        assert_eq!(next_push(&mut o, "ttl", "k").event, "released");
    }
}

#[test]
fn redis_cli_observes_and_shows_the_pushes() {
    if !tool_available("redis-cli", runs("redis-cli", &["--version"])) {
        return;
    }
    let server = Server::start(&[]);
    // RESP3 (`-3`); pushes are shown on a terminal, or when asked. The
    // observing connection holds the key itself, so the order is fixed.
    let mut cli = Command::new("redis-cli")
        .args(["-3", "--show-pushes", "yes", "-p", &server.port()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run redis-cli");
    let mut stdin = cli.stdin.take().unwrap();
    writeln!(stdin, "OBSERVE jobs nightly").unwrap();
    writeln!(stdin, "HOLD jobs nightly NOTE 10.0.0.5:8080").unwrap();
    writeln!(stdin, "PING").unwrap();
    drop(stdin);
    let out = cli.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..8],
        ["OK", "observe", "jobs", "nightly", "free", "0", "0", "0"]
    );
    let lease = lines[9];
    let fence = lines[10];
    let want = ["observe", "jobs", "nightly", "granted", fence, "1"];
    assert_eq!(lines[11..17], want, "{text}");
    assert_eq!(lines[18..], ["10.0.0.5:8080", "PONG"], "{text}");
    assert!(lease.parse::<u64>().is_ok(), "{text}");
}
