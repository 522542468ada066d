//! SIGTERM on a single server drains: `/readyz` turns 503 `draining`, new
//! HOLDs and TRYHOLDs are refused with `-TRYAGAIN`, holders keep their
//! leases and let go, and the process exits once nothing is held (long
//! before `--drain-timeout`); a second SIGTERM ends it at once.

mod common;

use common::{error_text, Server, PATIENCE};
use holdline_resp::Value;
use std::time::{Duration, Instant};

/// The refusal of a new hold while draining (`reply::draining`).
const DRAINING: &str =
    "TRYAGAIN the server is draining: no new holds; try again on another server or later";

/// `GET path` on the metrics listener: the status and the body.
fn get(server: &Server, path: &str) -> (u16, String) {
    let addr = server.metrics.expect("--metrics").to_string();
    let (status, _, body) = common::http_get(&addr, path, "");
    (status, body)
}

/// Waits until `/readyz` answers `status` (the signal was seen).
fn await_ready(server: &Server, status: u16) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (got, body) = get(server, "/readyz");
        if got == status {
            return body;
        }
        assert!(Instant::now() < deadline, "/readyz stayed {got} {body:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_drain_refuses_new_holds_lets_holders_finish_and_exits_when_they_are_gone() {
    let mut server = Server::start(&["--metrics", "127.0.0.1:0", "--drain-timeout", "60s"]);
    assert_eq!(get(&server, "/readyz"), (200, "ready\n".to_owned()));
    let mut holder = server.connect();
    let (lease, fence) = holder.grant(&["HOLD", "jobs", "k", "TTL", "30000"]);
    server.signal(libc::SIGTERM);
    assert_eq!(await_ready(&server, 503), "draining\n");
    assert_eq!(get(&server, "/healthz"), (200, "ok\n".to_owned()));
    let mut newcomer = server.connect();
    assert_eq!(
        error_text(newcomer.call(&["HOLD", "jobs", "other"])),
        DRAINING
    );
    assert_eq!(
        error_text(newcomer.call(&["TRYHOLD", "jobs", "k"])),
        DRAINING
    );
    // The holder's lease lives on: it renews, writes with its fence, lets go.
    let lease = lease.to_string();
    assert_eq!(holder.call(&["RENEW", &lease]), Value::ok());
    let put = ["PUT", "jobs", "k", &fence.to_string(), "row", "done"];
    assert_eq!(holder.call(&put), Value::ok());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "exited while held"
    );
    let released = Instant::now();
    assert_eq!(holder.call(&["RELEASE", &lease]), Value::ok());
    let status = server.wait_exit(PATIENCE);
    assert_eq!(status.code(), Some(0));
    assert!(
        released.elapsed() < Duration::from_secs(30),
        "waited for the timeout"
    );
}

#[test]
fn a_second_sigterm_ends_the_drain_at_once() {
    let mut server = Server::start(&["--metrics", "127.0.0.1:0", "--drain-timeout", "60s"]);
    let mut holder = server.connect();
    holder.call(&["HELLO", "3"]);
    let (lease, _) = holder.grant(&["HOLD", "jobs", "k", "TTL", "30000"]);
    server.signal(libc::SIGTERM);
    await_ready(&server, 503);
    server.signal(libc::SIGTERM);
    // Ended as ever: the store closed, the holder told.
    assert_eq!(
        holder.read(),
        Value::Push(vec![
            Value::bulk("lost"),
            Value::Integer(lease),
            Value::bulk("lock jobs: key \"k\": the lease was lost: its store closed"),
        ])
    );
    assert_eq!(server.wait_exit(PATIENCE).code(), Some(0));
}
