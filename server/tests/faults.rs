//! Leases and the connection, under faults: a client killed or stopped
//! mid-hold, a lease revoked at maxHold or run out at ttl (and the push
//! that says so), a waiter that leaves, 10,001 waiters, and SIGTERM with
//! holders and waiters.

mod common;

use bytes::BytesMut;
use common::{error_text, queue_behind, Server, PATIENCE};
use holdline_resp::{encode, Decoder, Proto, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// A client in a process of its own (this test binary, run again as
/// [`client_process`]), so it can be killed or stopped like a real one.
struct Helper {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

const HELPER_ADDR: &str = "HOLDLINE_TEST_HELPER_ADDR";

impl Helper {
    fn spawn(server: &Server) -> Helper {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "client_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_ADDR, server.addr.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Helper {
            child,
            stdin,
            stdout,
        }
    }

    /// Has the helper send `words` and answers what the server replied.
    fn call(&mut self, words: &str) -> Value {
        writeln!(self.stdin, "{words}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "the helper ended"
            );
            // libtest may have written its own words before ours on the line.
            if let Some((_, hex)) = line.trim().split_once("reply: ") {
                let bytes: Vec<u8> = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect();
                let mut buf = BytesMut::from(&bytes[..]);
                return Decoder::new(usize::MAX).decode(&mut buf).unwrap().unwrap();
            }
        }
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The helper's body: reads command lines on stdin, sends each, prints
/// each reply as `reply: HEX` (its RESP3 bytes). Runs only when spawned.
#[test]
#[ignore = "run by the fault tests as a separate client process"]
fn client_process() {
    let Ok(addr) = std::env::var(HELPER_ADDR) else {
        return;
    };
    let mut client = common::Client::connect(addr.parse().unwrap());
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = client.call(&words);
        let mut bytes = Vec::new();
        encode(&reply, Proto::Resp3, &mut bytes);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        println!("reply: {hex}");
        std::io::stdout().flush().unwrap();
    }
}

fn grant_of(v: Value) -> (i64, i64) {
    match v {
        Value::Array(pair) => (pair[0].as_integer().unwrap(), pair[1].as_integer().unwrap()),
        other => panic!("not a grant: {other:?}"),
    }
}

#[test]
fn a_killed_client_lets_its_key_go_at_once() {
    let server = Server::start(&[]);
    let mut helper = Helper::spawn(&server);
    let (_, fence) = grant_of(helper.call("HOLD faults k TTL 60000"));
    let mut waiter = server.connect();
    waiter.send(&["HOLD", "faults", "k", "WAIT", "60000"]);
    server.connect().await_stat("faults", "waiters", 1);
    let killed = Instant::now();
    helper.signal(libc::SIGKILL);
    let (_, next) = grant_of(waiter.read());
    assert!(next > fence);
    // "At once": long before the 60 s ttl could have run out.
    assert!(
        killed.elapsed() < Duration::from_secs(20),
        "{:?}",
        killed.elapsed()
    );
}

#[test]
fn a_stopped_client_loses_its_key_at_ttl_and_its_old_fence_is_refused() {
    let server = Server::start(&[]);
    let mut helper = Helper::spawn(&server);
    let (lease, fence) = grant_of(helper.call("HOLD faults s TTL 1000"));
    let held = Instant::now();
    let mut waiter = server.connect();
    waiter.send(&["HOLD", "faults", "s", "WAIT", "60000"]);
    helper.signal(libc::SIGSTOP);
    let (new_lease, new_fence) = grant_of(waiter.read());
    assert!(
        held.elapsed() >= Duration::from_millis(900),
        "granted before the ttl: {:?}",
        held.elapsed()
    );
    assert!(new_fence > fence);
    helper.signal(libc::SIGCONT);
    let put = helper.call(&format!("PUT faults s {fence} owner stale"));
    assert!(
        error_text(put).starts_with("LOST lock faults: key \"s\": the lease was lost: "),
        "the stalled holder's write is refused"
    );
    assert_eq!(
        error_text(helper.call(&format!("RELEASE {lease}"))),
        "LOST lock faults: key \"s\": the lease was lost: it ran out (ttl 1s)"
    );
    assert_eq!(
        waiter.call(&["PUT", "faults", "s", &new_fence.to_string(), "owner", "new"]),
        Value::ok()
    );
    assert_eq!(waiter.stat("faults", "expirations"), 1);
    waiter.call(&["RELEASE", &new_lease.to_string()]);
}

#[test]
fn a_lease_revoked_at_max_hold_is_pushed_and_release_answers_lost() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.call(&["HELLO", "3"]);
    let (lease, _) = c.grant(&["HOLD", "invoices", "m", "MAXHOLD", "300"]);
    let mut next = server.connect();
    next.send(&["HOLD", "invoices", "m", "WAIT", "20000"]);
    let text = "lock invoices: key \"m\": the lease was lost: it was revoked at its maxHold";
    assert_eq!(
        c.read(),
        Value::Push(vec![
            Value::bulk("lost"),
            Value::Integer(lease),
            Value::bulk(text)
        ])
    );
    grant_of(next.read());
    let id = lease.to_string();
    assert_eq!(error_text(c.call(&["RENEW", &id])), format!("LOST {text}"));
    assert_eq!(
        error_text(c.call(&["RELEASE", &id])),
        format!("LOST {text}")
    );
    assert!(error_text(c.call(&["RELEASE", &id])).starts_with("INVALID "));
    assert_eq!(next.stat("invoices", "revocations"), 1);
}

#[test]
fn a_silent_connection_runs_out_at_ttl() {
    let server = Server::start(&[]);
    let mut resp3 = server.connect();
    resp3.call(&["HELLO", "3"]);
    let mut resp2 = server.connect();
    let (pushed, _) = resp3.grant(&["HOLD", "t", "a", "TTL", "300"]);
    let (learned, _) = resp2.grant(&["HOLD", "t", "b", "TTL", "300"]);
    let text = |k: &str| format!("lock t: key \"{k}\": the lease was lost: it ran out (ttl 300ms)");
    assert_eq!(
        resp3.read(),
        Value::Push(vec![
            Value::bulk("lost"),
            Value::Integer(pushed),
            Value::bulk(text("a"))
        ])
    );
    // RESP2 gets no push; its next RENEW says it.
    assert_eq!(resp2.read_within(Duration::from_millis(600)), None);
    assert_eq!(
        error_text(resp2.call(&["RENEW", &learned.to_string()])),
        format!("LOST {}", text("b"))
    );
}

#[test]
fn a_waiter_that_leaves_leaves_the_line() {
    let server = Server::start(&[]);
    let (mut holder, lease, leaver) = queue_behind(&server, "line", "k", "60000");
    // A key held throughout keeps the lock known: an idle lock nobody has
    // a handle of is forgotten with its counters.
    holder.grant(&["HOLD", "line", "pin"]);
    holder.await_stat("line", "waiters", 1);
    drop(leaver);
    holder.await_stat("line", "waiters", 0);
    holder.call(&["RELEASE", &lease.to_string()]);
    let mut later = server.connect();
    later.grant(&["TRYHOLD", "line", "k"]);
    assert_eq!(
        holder.stat("line", "grants"),
        3,
        "no grant went to the client that left (k twice, and the pin)"
    );
}

#[test]
fn the_10001st_waiter_is_refused_limit() {
    // 10,002 client sockets here and as many in the server.
    if !common::raise_descriptor_limit(10_300) {
        eprintln!(
            "note: the descriptor hard limit is below 10,300; skipping the 10,001-waiter test"
        );
        return;
    }
    let server = Server::start(&["--max-connections", "10100"]);
    let mut holder = server.connect();
    let (lease, _) = holder.grant(&["HOLD", "crowd", "k"]);
    let mut hold = Vec::new();
    holdline_resp::encode_command(&["HOLD", "crowd", "k", "WAIT", "120000"], &mut hold);
    let mut waiters = Vec::with_capacity(10_000);
    // In batches, each seen standing in line before the next: a burst far
    // past the listen backlog would only test the kernel's SYN retries.
    for _ in 0..20 {
        for _ in 0..500 {
            let mut w = std::net::TcpStream::connect(server.addr).unwrap();
            w.write_all(&hold).unwrap();
            waiters.push(w);
        }
        holder.await_stat("crowd", "waiters", waiters.len() as i64);
    }
    eprintln!("10,000 waiters: server RSS {} KiB", server.rss_kib());
    let mut one_more = server.connect();
    let started = Instant::now();
    assert_eq!(
        error_text(one_more.call(&["HOLD", "crowd", "k", "WAIT", "60000"])),
        "LIMIT lock crowd: key \"k\": 10000 waiters already stand in line: limit"
    );
    assert!(started.elapsed() < PATIENCE);
    drop(waiters);
    holder.await_stat("crowd", "waiters", 0);
    assert_eq!(holder.call(&["RELEASE", &lease.to_string()]), Value::ok());
    one_more.grant(&["TRYHOLD", "crowd", "k"]);
}

#[test]
fn sigterm_closes_the_store_tells_everyone_and_exits_zero() {
    // The drain (tests/drain.rs) ends at its timeout: then as ever.
    let mut server = Server::start(&["--drain-timeout", "200ms"]);
    let mut holder = server.connect();
    holder.call(&["HELLO", "3"]);
    let (lease, _) = holder.grant(&["HOLD", "jobs", "k"]);
    let mut waiter = server.connect();
    waiter.send(&["HOLD", "jobs", "k", "WAIT", "60000"]);
    holder.await_stat("jobs", "waiters", 1);
    server.signal(libc::SIGTERM);
    assert_eq!(
        holder.read(),
        Value::Push(vec![
            Value::bulk("lost"),
            Value::Integer(lease),
            Value::bulk("lock jobs: key \"k\": the lease was lost: its store closed"),
        ])
    );
    let answers = waiter.read_to_close();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert!(
        error_text(answers[0].clone()).starts_with("CLOSED "),
        "{answers:?}"
    );
    let status = server.wait_exit(PATIENCE);
    assert_eq!(status.code(), Some(0));
}

#[test]
fn sigint_exits_zero() {
    let mut server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(c.call(&["PING"]), Value::simple("PONG"));
    server.signal(libc::SIGINT);
    assert!(c.read_to_close().is_empty());
    assert_eq!(server.wait_exit(PATIENCE).code(), Some(0));
}
