//! Servers that are not holdline: each fails the connect at once with its
//! own text of `clients/texts.json`, never at the first hold.
//!
//! Each fake server accepts one connection on port 0, reads the client's
//! `HELLO`, and answers as Redis, an HTTP server, a source of random bytes
//! or a server announcing a huge reply would; a silent server is the
//! network tests' (`a_silent_server_fails_connect_after_the_timeout`).

mod common;

use common::{expected_text, PATIENCE};
use holdline_client::{ConnectOptions, ErrorKind, Store};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// What Redis 7.0.15 answers `HELLO 3`.
const REDIS_HELLO3: &[u8] =
    b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n\
$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:5\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n\
$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n";

/// The same as RESP2 (`HELLO 2`): a flat array of fields and values.
const REDIS_HELLO2: &[u8] =
    b"*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n\
$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:5\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n\
$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n";

const HTTP_400: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nBad Request";

/// Fixed "random" bytes: no RESP type first, no line end, not UTF-8 all through.
const RANDOM: &[u8] = b"\x9f\x00\xffz\x07\xc3\xa9Q\x01\xfe\x80\x11\x22";

/// A fake server: answers its first read with `answer`, then trickles a
/// byte every 10 ms while `trickle`, or closes when `answer` is empty.
struct Fake {
    addr: String,
    stop: Arc<AtomicBool>,
}

impl Fake {
    fn start(answer: &'static [u8], trickle: bool) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        thread::spawn(move || {
            let Ok((mut sock, _)) = listener.accept() else {
                return;
            };
            if answer.is_empty() {
                return; // closes at once, unread
            }
            let mut hello = [0u8; 256];
            let _ = sock.read(&mut hello);
            if sock.write_all(answer).is_err() {
                return;
            }
            while trickle && !flag.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_millis(10));
                if sock.write_all(b"a").is_err() {
                    return;
                }
            }
            // Keeps the socket open until told.
            while !flag.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_millis(10));
            }
        });
        Fake { addr, stop }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Connects to `fake` (with `options`) and answers the error, which must
/// come within 2 s.
async fn connect_error(fake: &Fake, options: ConnectOptions) -> holdline_client::Error {
    let started = Instant::now();
    let e = tokio::time::timeout(PATIENCE, Store::connect_with(&fake.addr, options))
        .await
        .expect("the connect fails at once")
        .expect_err("not holdline");
    assert!(started.elapsed() < Duration::from_secs(2), "{e}");
    e
}

#[tokio::test]
async fn redis_fails_connect_naming_its_server_and_version() {
    for answer in [REDIS_HELLO3, REDIS_HELLO2] {
        let fake = Fake::start(answer, false);
        let e = connect_error(&fake, ConnectOptions::new()).await;
        assert_eq!(e.kind(), ErrorKind::Invalid);
        let want = expected_text(
            "not_holdline",
            &[("hostport", &fake.addr), ("server", "redis 7.0.15")],
        );
        assert_eq!(e.to_string(), want);
    }
}

#[tokio::test]
async fn a_hello_that_names_no_server_fails_connect_unnamed() {
    let fake = Fake::start(b"%1\r\n$5\r\nproto\r\n:3\r\n", false);
    let e = connect_error(&fake, ConnectOptions::new()).await;
    assert_eq!(e.kind(), ErrorKind::Invalid);
    let want = expected_text("not_holdline_unnamed", &[("hostport", &fake.addr)]);
    assert_eq!(e.to_string(), want);
}

#[tokio::test]
async fn an_http_server_fails_connect_not_resp() {
    let fake = Fake::start(HTTP_400, false);
    let e = connect_error(&fake, ConnectOptions::new()).await;
    assert_eq!(e.kind(), ErrorKind::Closed);
    let want = expected_text(
        "not_resp",
        &[("hostport", &fake.addr), ("bytes", "\"HTTP/1.1 4\"")],
    );
    assert_eq!(e.to_string(), want);
}

#[tokio::test]
async fn random_bytes_fail_connect_not_resp_at_once() {
    let fake = Fake::start(RANDOM, true);
    let e = connect_error(&fake, ConnectOptions::new()).await;
    assert_eq!(e.kind(), ErrorKind::Closed);
    // The first 10 bytes, each that is not UTF-8 as U+FFFD, shown as a key.
    let shown = "\"\u{fffd}\\0\u{fffd}z\\u{7}éQ\\u{1}\u{fffd}\"";
    let want = expected_text("not_resp", &[("hostport", &fake.addr), ("bytes", shown)]);
    assert_eq!(e.to_string(), want);
}

#[tokio::test]
async fn a_huge_announced_reply_fails_connect_unread() {
    // Were the 999999999999 bytes ever allocated, the test would abort.
    let fake = Fake::start(b"$999999999999\r\n", true);
    let e = connect_error(&fake, ConnectOptions::new()).await;
    assert_eq!(e.kind(), ErrorKind::Closed);
    let want = expected_text(
        "reply_too_large",
        &[
            ("hostport", &fake.addr),
            ("size", "999999999999"),
            ("limit", "67108864"),
        ],
    );
    assert_eq!(e.to_string(), want);
}

#[tokio::test]
async fn max_reply_bytes_sets_the_limit() {
    let fake = Fake::start(b"*2\r\n$2000\r\n", true);
    let e = connect_error(&fake, ConnectOptions::new().max_reply_bytes(1024)).await;
    assert_eq!(e.kind(), ErrorKind::Closed);
    // The string inside the array announces more than the limit.
    let want = expected_text(
        "reply_too_large",
        &[
            ("hostport", &fake.addr),
            ("size", "2000"),
            ("limit", "1024"),
        ],
    );
    assert_eq!(e.to_string(), want);
}

#[tokio::test]
async fn a_tls_server_met_in_plain_text_fails_connect_tls_failed() {
    // A TLS alert record (protocol_version), as a TLS server answers plain text.
    let fake = Fake::start(b"\x15\x03\x01\x00\x02\x02\x46", false);
    let e = connect_error(&fake, ConnectOptions::new()).await;
    assert_eq!(e.kind(), ErrorKind::Closed);
    let reason = "the server speaks TLS: connect with rediss:// or a TLS option";
    let want = expected_text(
        "tls_failed",
        &[("hostport", &fake.addr), ("reason", reason)],
    );
    assert_eq!(e.to_string(), want);
}

#[tokio::test]
async fn a_server_that_closes_at_once_fails_connect_closed() {
    let fake = Fake::start(b"", false);
    let e = connect_error(&fake, ConnectOptions::new()).await;
    assert_eq!(e.kind(), ErrorKind::Closed);
    assert_eq!(e.to_string(), expected_text("connection_closed", &[]));
}
