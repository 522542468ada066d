//! Bad input, each case followed by a check that another client is still
//! served: garbage, a huge bulk length, a frame over `--max-frame`, half a
//! frame then silence, unknown commands, wrong arity, numbers that are
//! not, bad names and keys, too many connections, wrong or missing token.

mod common;

use common::{error_text, queue_behind, Client, Server};
use holdline_resp::Value;
use std::time::Duration;

/// Another client holds and lets go a key: the server still serves.
fn still_serves(server: &Server) {
    let mut other = server.connect();
    let (lease, _) = other.grant(&["HOLD", "alive", "k", "WAIT", "5000"]);
    assert_eq!(other.call(&["RELEASE", &lease.to_string()]), Value::ok());
}

/// Sends `bytes`; the server answers `-ERR protocol error: ...` and closes.
fn refused(server: &Server, bytes: &[u8]) -> String {
    let mut c = server.connect();
    c.raw(bytes);
    let answers = c.read_to_close();
    assert_eq!(answers.len(), 1, "{answers:?}");
    let text = error_text(answers[0].clone());
    assert!(text.starts_with("ERR protocol error: "), "{text}");
    still_serves(server);
    text
}

#[test]
fn malformed_frames_are_answered_then_closed() {
    let server = Server::start(&[]);
    assert_eq!(
        refused(&server, b"*abc\r\n"),
        "ERR protocol error: invalid multibulk length"
    );
    assert_eq!(
        refused(&server, b"*2\r\n$4\r\nPING\r\n:1\r\n"),
        "ERR protocol error: expected bulk strings in a command"
    );
    refused(&server, b"*1\r\n$4\r\nPINGxx\r\n");
    refused(&server, b"$-5\r\n");
    // Commands before the bad frame are answered first, in order.
    let mut c = server.connect();
    c.raw(b"*1\r\n$4\r\nPING\r\n*x\r\n");
    let answers = c.read_to_close();
    assert_eq!(answers[0], Value::simple("PONG"));
    assert!(error_text(answers[1].clone()).starts_with("ERR protocol error"));
}

#[test]
fn binary_garbage_never_takes_the_server_down() {
    let server = Server::start(&[]);
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for round in 0..20 {
        let garbage: Vec<u8> = (0..4096)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let mut c = server.connect();
        // Inline commands: garbage lines read as unknown commands until a
        // byte starts a RESP type or a quote stays open; either way the
        // server answers or closes, possibly before all of it was sent, so
        // neither the write nor the half-close may succeed here.
        let _ = std::io::Write::write_all(&mut c.stream, &garbage);
        let _ = c.stream.shutdown(std::net::Shutdown::Write);
        let _ = c.read_to_close();
        if round % 5 == 0 {
            still_serves(&server);
        }
    }
    still_serves(&server);
}

#[test]
fn a_huge_bulk_length_is_refused_without_allocating_it() {
    let server = Server::start(&[]);
    let before = server.rss_kib();
    assert_eq!(
        refused(&server, b"*2\r\n$3\r\nGET\r\n$999999999\r\n"),
        "ERR protocol error: frame larger than 524288 bytes"
    );
    refused(&server, b"*999999999\r\n");
    server.assert_rss_within(before, 64 * 1024);
}

#[test]
fn a_frame_over_max_frame_is_refused() {
    let server = Server::start(&["--max-frame", "4096"]);
    let mut c = server.connect();
    let value = "v".repeat(3000);
    // Within the limit: fine.
    let (lease, fence) = c.grant(&["HOLD", "big", "k"]);
    assert_eq!(
        c.call(&["PUT", "big", "k", &fence.to_string(), "row", &value]),
        Value::ok()
    );
    c.call(&["RELEASE", &lease.to_string()]);
    let big = "v".repeat(5000);
    let mut frame = Vec::new();
    holdline_resp::encode_command(&["PUT", "big", "k", "1", "row", &big], &mut frame);
    assert_eq!(
        refused(&server, &frame),
        "ERR protocol error: frame larger than 4096 bytes"
    );
    // An inline line that never ends is refused the same way.
    refused(&server, &b"PING ".repeat(1000));
}

#[test]
fn half_a_frame_then_silence_holds_only_its_own_connection() {
    let server = Server::start(&[]);
    let mut stalled = server.connect();
    stalled.raw(b"*3\r\n$4\r\nHOLD\r\n$5\r\nal");
    for _ in 0..3 {
        still_serves(&server);
    }
    assert_eq!(stalled.read_within(Duration::from_millis(200)), None);
    // The rest arrives: the frame completes and is answered.
    stalled.raw(b"ive\r\n$1\r\nk\r\n");
    assert!(matches!(stalled.read(), Value::Array(_)));
}

#[test]
fn command_faults_answer_err_and_keep_the_connection() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let cases: &[(&[&str], &str)] = &[
        (
            &["FROB"],
            "ERR unknown command 'FROB', with args beginning with: ",
        ),
        (
            &["HOLD", "l"],
            "ERR wrong number of arguments for 'hold' command",
        ),
        (
            &["RELEASE"],
            "ERR wrong number of arguments for 'release' command",
        ),
        (
            &["PUT", "l", "k", "1", "r"],
            "ERR wrong number of arguments for 'put' command",
        ),
        (
            &["HOLD", "l", "k", "WAIT", "soon"],
            "ERR value is not an integer or out of range: WAIT takes whole milliseconds (WAIT 10000 is 10 s)",
        ),
        (
            &["HOLD", "l", "k", "TTL", "1.5"],
            "ERR value is not an integer or out of range: TTL takes whole milliseconds (TTL 10000 is 10 s)",
        ),
        (
            &["RELEASE", "one"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["HOLD", "invoices", "inv-9", "TTL", "10s"],
            "ERR value is not an integer or out of range: TTL takes whole milliseconds (TTL 10000 is 10 s)",
        ),
        (
            &["TRYHOLD", "l", "k", "MAXHOLD", "-5"],
            "ERR value is not an integer or out of range: MAXHOLD takes whole milliseconds (MAXHOLD 10000 is 10 s)",
        ),
        (&["HOLD", "l", "k", "FOREVER", "1"], "ERR syntax error"),
    ];
    for (args, text) in cases {
        assert_eq!(error_text(c.call(args)), *text, "{args:?}");
        assert_eq!(c.call(&["PING"]), Value::simple("PONG"));
    }
    still_serves(&server);
}

#[test]
fn bad_lock_names_and_keys_are_invalid_with_core_texts() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let name_rule = r#"a lock name is 1 to 128 ASCII letters, digits and "_-.:": invalid"#;
    assert_eq!(
        error_text(c.call(&["HOLD", "in voices", "9"])),
        format!("INVALID lock \"in voices\": {name_rule}")
    );
    assert_eq!(
        error_text(c.call(&["HOLD", "", "9"])),
        format!("INVALID lock \"\": {name_rule}")
    );
    assert_eq!(
        error_text(c.call(&["TRYHOLD", "inv", ""])),
        "INVALID lock inv: key \"\": the key is empty: invalid"
    );
    let long = "k".repeat(1025);
    assert!(error_text(c.call(&["HOLD", "inv", &long]))
        .ends_with(": the key is longer than 1024 bytes: invalid"));
    assert_eq!(
        error_text(c.call(&["HOLD", "inv", "a\tb"])),
        "INVALID lock inv: key \"a\\tb\": the key holds a control character: invalid"
    );
    // Bytes that are no UTF-8 at all: shown escaped, as control
    // characters are.
    c.raw(b"*3\r\n$4\r\nHOLD\r\n$3\r\ninv\r\n$2\r\n\xff\xfe\r\n");
    assert_eq!(
        error_text(c.read()),
        "INVALID lock inv: key \"\\xff\\xfe\": the key is not UTF-8: invalid"
    );
    // A repeated option: which one was meant?
    assert_eq!(
        error_text(c.call(&["HOLD", "inv", "k", "TTL", "10", "TTL", "20"])),
        "ERR syntax error"
    );
    assert!(error_text(c.call(&["HOLD", "inv", "k", "TTL", "0"])).starts_with("INVALID lock inv: "));
    assert!(
        error_text(c.call(&["HOLD", "inv", "k", "MAXHOLD", "0"])).starts_with("INVALID lock inv: ")
    );
    still_serves(&server);
}

#[test]
fn too_many_connections_are_refused_and_others_served() {
    let server = Server::start(&["--max-connections", "3"]);
    let mut kept: Vec<Client> = (0..3).map(|_| server.connect()).collect();
    for c in &mut kept {
        assert_eq!(c.call(&["PING"]), Value::simple("PONG"));
    }
    let mut over = server.connect();
    assert_eq!(
        over.read_to_close(),
        vec![Value::error("ERR max number of clients reached")]
    );
    for c in &mut kept {
        assert_eq!(c.call(&["PING"]), Value::simple("PONG"));
    }
    drop(kept.pop());
    // The freed place is soon served again.
    let deadline = std::time::Instant::now() + common::PATIENCE;
    loop {
        let mut c = server.connect();
        c.send(&["PING"]);
        match c.read_within(Duration::from_secs(5)) {
            Some(Value::Simple(s)) if s == "PONG" => break,
            Some(Value::Error(_)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_token_is_required_when_configured() {
    let token_file = common::TempFile::new("token", "open-sesame\n");
    let server = Server::start(&["--token-file", &token_file.path]);
    let mut c = server.connect();
    assert_eq!(
        error_text(c.call(&["PING"])),
        "NOAUTH Authentication required."
    );
    assert_eq!(
        error_text(c.call(&["HOLD", "l", "k"])),
        "NOAUTH Authentication required."
    );
    assert_eq!(
        error_text(c.call(&["AUTH", "open-sesamE"])),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    // HELLO without the token fails as Redis's does, so a client learns
    // at connect that it needs one.
    assert!(error_text(c.call(&["HELLO", "3"]))
        .starts_with("NOAUTH HELLO must be called with the client already authenticated"));
    assert_eq!(
        error_text(c.call(&["HELLO", "3", "AUTH", "default", "open"])),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    // Before AUTH, a frame is held to a small size.
    let mut big = server.connect();
    big.raw(format!("*2\r\n$4\r\nAUTH\r\n${}\r\n", 100_000).as_bytes());
    assert!(error_text(big.read_to_close()[0].clone())
        .starts_with("ERR protocol error: frame larger than"));
    // A pipelined AUTH lifts the limit for the frames behind it.
    let mut piped = server.connect();
    let mut frames = Vec::new();
    holdline_resp::encode_command(&["AUTH", "open-sesame"], &mut frames);
    holdline_resp::encode_command(&["ECHO", &"e".repeat(100_000)], &mut frames);
    piped.raw(&frames);
    assert_eq!(piped.read(), Value::ok());
    assert_eq!(piped.read(), Value::bulk("e".repeat(100_000)));
    // The right token, by AUTH or by HELLO.
    assert_eq!(c.call(&["AUTH", "open-sesame"]), Value::ok());
    assert_eq!(c.call(&["PING"]), Value::simple("PONG"));
    let mut h = server.connect();
    assert!(matches!(
        h.call(&["HELLO", "3", "AUTH", "default", "open-sesame"]),
        Value::Map(_)
    ));
    let (lease, _) = h.grant(&["HOLD", "l", "k"]);
    assert_eq!(h.call(&["RELEASE", &lease.to_string()]), Value::ok());
}

#[test]
fn a_public_address_without_a_token_is_refused_at_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_holdline"))
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "refusing to listen on 0.0.0.0:0 without --token-file, --users or --tls-client-ca"
        ),
        "{stderr}"
    );
}

#[test]
fn a_broken_stream_behind_a_waiting_hold_still_leaves_the_line_on_close() {
    let server = Server::start(&[]);
    let (mut holder, lease, mut c) = queue_behind(&server, "broken", "k", "60000");
    c.raw(b"*x\r\n");
    holder.await_stat("broken", "waiters", 1);
    drop(c);
    holder.await_stat("broken", "waiters", 0);
    holder.call(&["RELEASE", &lease.to_string()]);
    still_serves(&server);
}
