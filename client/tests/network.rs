//! Leases across a network that misbehaves: a TCP proxy frozen with
//! SIGSTOP (both sockets open, nothing flowing), a holder process stopped
//! past its ttl, and the client-made texts every client shares.

mod common;

use common::{expected_text, granted_at, holder_binary, Proxy, Server, PATIENCE};
use holdline_client::{ErrorKind, Lock, Store};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::time::timeout;

#[test]
fn every_client_made_text_is_the_shared_tables() {
    let vars = [
        ("address", "\"nope://x\""),
        ("user", "\"a b\""),
        ("hostport", "127.0.0.1:1"),
        ("reason", "REASON"),
        ("timeout", "10s"),
        ("lock", "invoices"),
        ("key", "\"9\""),
        ("ttl", "2s"),
        ("wait", "3s"),
        ("slot", "12182"),
        ("server", "redis 7.0.15"),
        ("bytes", "\"HTTP/1.1 4\""),
        ("size", "999999999999"),
        ("limit", "67108864"),
    ];
    let samples = holdline_client::texts::samples();
    // Every text but proclaim_ended: this client's `resign` consumes the
    // leadership, so no proclaim can follow it.
    assert_eq!(samples.len(), 21, "one sample per text of the table");
    for (name, text) in samples {
        assert_eq!(text, expected_text(name, &vars), "{name}");
    }
}

#[test]
fn every_rule_number_is_the_shared_tables() {
    let rules = holdline_client::rules();
    assert!(rules
        .iter()
        .any(|&(name, _)| name == "map_refresh_node_timeout_ms"));
    for (name, n) in rules {
        assert_eq!(n, common::client_rule(name), "{name}");
    }
}

/// The ttl of the lock opened through the proxy.
const FAR_TTL: Duration = Duration::from_secs(2);

/// A server, a proxy in front of it, and its lock `name` twice: opened
/// through a store of the server itself (near) and through one of the
/// proxy (far, with a ttl of `FAR_TTL`).
async fn near_and_far(name: &str) -> (Server, Proxy, Lock, Lock) {
    let server = Server::start();
    let proxy = Proxy::start(&server.addr);
    let near = server.store().await;
    let far = Store::connect(&proxy.addr).await.unwrap();
    let near_lock = near.lock(name).open().unwrap();
    let far_lock = far.lock(name).ttl(FAR_TTL).open().unwrap();
    (server, proxy, near_lock, far_lock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_link_loses_the_lease_before_anyone_else_is_granted() {
    let (_server, proxy, near_lock, far_lock) = near_and_far("frozen").await;
    let ttl = FAR_TTL;

    let held = far_lock.acquire("k").await.unwrap();
    // A renewal or two go through before the freeze.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!held.is_lost());
    let waiter = granted_at(near_lock, "k");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let next_grant = async { waiter.await.unwrap().unwrap().0 };
    common::lost_before_the_next_grant(&proxy, &held, next_grant, ttl).await;
    let lost = held.check().unwrap_err();
    // Release answers the loss at once (the link is still frozen).
    let released = timeout(Duration::from_secs(5), held.release()).await;
    assert_eq!(
        released.expect("release returns at once").unwrap_err(),
        lost
    );
    proxy.thaw();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_wait_gives_up_closed_and_keeps_nothing() {
    let (_server, proxy, near_lock, far_lock) = near_and_far("frozen-wait").await;
    let held = near_lock.acquire("k").await.unwrap();
    let wait = Duration::from_secs(3);
    let started = Instant::now();
    let waiting = tokio::spawn(async move {
        let r = far_lock.key("k").wait(wait).hold(async |_| ()).await;
        (r, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.freeze();
    let (result, ended) = timeout(PATIENCE, waiting).await.unwrap().unwrap();
    let err = result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    let vars = [
        ("lock", "frozen-wait"),
        ("key", "\"k\""),
        ("wait", "3s"),
        ("ttl", "2s"),
    ];
    assert_eq!(err.to_string(), expected_text("wait_silent", &vars));
    assert!(
        ended - started <= wait + Duration::from_secs(3),
        "gave up {:?} after it began",
        ended - started
    );
    // The holder lets go while the link is still frozen: the server may
    // grant the abandoned waiter, whose connection the client closed.
    held.release().await.unwrap();
    proxy.thaw();
    // Once the close reaches the server, the key goes to the next holder.
    let fence = near_lock
        .key("k")
        .wait(Duration::from_secs(20))
        .hold(async |l| l.fence())
        .await
        .expect("the abandoned waiter keeps nothing");
    assert!(fence > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_past_its_ttl_knows_at_its_first_look() {
    let server = Server::start();
    let mut holder = Command::new(holder_binary())
        .args([&server.addr, "stopped", "k", "1000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the holder example (cargo build --example holder)");
    let mut out = BufReader::new(holder.stdout.take().unwrap());
    let mut stdin = holder.stdin.take().unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("held "), "{line}");
    writeln!(stdin, "look").unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "look held");

    let pid = holder.id().to_string();
    let kill = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success())
    };
    kill("-STOP");
    std::thread::sleep(Duration::from_millis(2500));
    // The look is queued before the process runs again.
    writeln!(stdin, "look").unwrap();
    kill("-CONT");
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "look lost");
    drop(stdin);
    line.clear();
    out.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("lost lock stopped: key \"k\": the lease was lost: "),
        "{line}"
    );
    holder.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_verifies_the_address_and_the_token() {
    let server = Server::start_with_token("s3cret");
    let missing = Store::connect(&server.addr).await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::Invalid);
    assert_eq!(missing.to_string(), expected_text("token_missing", &[]));
    let refused = Store::connect_with_token(&server.addr, "wrong")
        .await
        .unwrap_err();
    assert_eq!(refused.to_string(), expected_text("token_refused", &[]));
    let port = server.addr.rsplit(':').next().unwrap();
    let url = format!("redis://:s3cret@127.0.0.1:{port}");
    let s = Store::connect(&url).await.expect("the URL's token");
    let lock = s.lock("t").open().unwrap();
    assert!(lock.hold("k", async |l| l.fence()).await.unwrap() > 0);
    // An explicit token wins over the URL's.
    let url = format!("redis://:wrong@127.0.0.1:{port}");
    assert!(Store::connect_with_token(&url, "s3cret").await.is_ok());

    for bad in ["127.0.0.1:", "redis://127.0.0.1/1", "http://h:1", "[::1"] {
        let e = Store::connect(bad).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid);
        let shown = format!("{bad:?}");
        assert_eq!(
            e.to_string(),
            expected_text("bad_address", &[("address", &shown)])
        );
    }
    // A refused connection names where it dialled; the default port is 7380.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = closed.local_addr().unwrap().to_string();
    drop(closed);
    let e = Store::connect(&dead).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Closed);
    let prefix = expected_text("cannot_connect", &[("hostport", &dead), ("reason", "")]);
    assert!(
        e.to_string()
            .starts_with(prefix.split("()").next().unwrap()),
        "{e}"
    );
    if std::net::TcpStream::connect("127.0.0.1:7380").is_err() {
        let e = Store::connect("127.0.0.1").await.unwrap_err();
        assert!(
            e.to_string()
                .starts_with("store: cannot connect to 127.0.0.1:7380 ("),
            "{e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_fails_connect_after_the_timeout() {
    // A listener that accepts (the kernel does) and never answers HELLO.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let started = Instant::now();
    let e = timeout(PATIENCE, Store::connect(&addr))
        .await
        .unwrap()
        .unwrap_err();
    assert!(started.elapsed() >= Duration::from_secs(9));
    assert_eq!(e.kind(), ErrorKind::Closed);
    let want = expected_text("connect_silent", &[("hostport", &addr), ("timeout", "10s")]);
    assert_eq!(e.to_string(), want);
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_that_waited_past_its_ttl_starts_with_a_fresh_deadline() {
    // The renewals sent while the HOLD waited are answered right behind
    // its grant; the lease counts from them, not from the HOLD's send.
    let server = Server::start();
    let s = Store::connect(&server.addr).await.unwrap();
    let ttl = Duration::from_millis(600);
    let lock = s.lock("long-wait").ttl(ttl).open().unwrap();
    let first = lock.acquire("k").await.unwrap();
    let l2 = lock.clone();
    let waiter = tokio::spawn(async move {
        l2.key("k")
            .wait(PATIENCE)
            .hold(async |lease| {
                let at_grant = lease.is_lost();
                tokio::time::sleep(Duration::from_millis(300)).await;
                (at_grant, lease.is_lost())
            })
            .await
    });
    // Three ttls of waiting, renewed all along.
    tokio::time::sleep(ttl * 3).await;
    assert!(!first.is_lost());
    first.release().await.unwrap();
    let (at_grant, later) = timeout(PATIENCE, waiter).await.unwrap().unwrap().unwrap();
    assert!(
        !at_grant && !later,
        "lost at grant: {at_grant}, later: {later}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_the_connection_says_so_at_connect() {
    // What a server at its connection limit answers, whatever is sent.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        use std::io::Write;
        let (mut sock, _) = listener.accept().unwrap();
        let _ = sock.write_all(b"-ERR max number of clients reached\r\n");
        std::thread::sleep(Duration::from_secs(1));
    });
    let e = Store::connect(&addr).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Closed);
    let vars = [
        ("hostport", addr.as_str()),
        ("reason", "ERR max number of clients reached"),
    ];
    assert_eq!(e.to_string(), expected_text("connect_refused", &vars));
}
