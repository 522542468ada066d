//! The texts this client makes itself (not the server's), worded as every
//! holdline client words them: `clients/texts.json` is their one table and
//! the tests compare each builder here against it.
//!
//! Each builder answers a whole [`Error`]: kind, text, and (for a failed
//! connection) the I/O cause as its `source()`.

use crate::error::Error;
use holdline::wire::{self, duration_text, shown_key, Scope};
use holdline::ErrorKind;
use std::io;
use std::time::Duration;

/// `bad_address`: an address that is none of the accepted forms.
pub(crate) fn bad_address(address: &str) -> Error {
    Error::new(
        ErrorKind::Invalid,
        format!(
            "store: bad address {}: expected host, host:port, [ipv6]:port or redis[s]://[[user]:token@]host[:port]: invalid",
            shown_key(address)
        ),
    )
}

/// `bad_user`: a user name option that is not 1 to 64 ASCII letters,
/// digits or `_-.:@`.
pub(crate) fn bad_user(user: &str) -> Error {
    Error::new(
        ErrorKind::Invalid,
        format!(
            "store: bad user name {}: expected 1 to 64 ASCII letters, digits or _-.:@: invalid",
            shown_key(user)
        ),
    )
}

/// `user_without_token`: a user name option, and no token given anywhere.
pub(crate) fn user_without_token(user: &str) -> Error {
    Error::new(
        ErrorKind::Invalid,
        format!(
            "store: the user {} was given without a token: invalid",
            shown_key(user)
        ),
    )
}

/// `cannot_connect`: the TCP connect failed.
pub(crate) fn cannot_connect(hostport: &str, e: io::Error) -> Error {
    let text = format!("store: cannot connect to {hostport} ({e}): closed");
    Error::with_io(ErrorKind::Closed, text, e)
}

/// `connect_silent`: connected, but `HELLO` went unanswered.
pub(crate) fn connect_silent(hostport: &str, timeout: Duration) -> Error {
    let text = format!(
        "store: the server at {hostport} answered nothing for {}: closed",
        duration_text(timeout)
    );
    let e = io::Error::new(io::ErrorKind::TimedOut, "no answer to HELLO");
    Error::with_io(ErrorKind::Closed, text, e)
}

/// `not_holdline`: `HELLO` answered by another server, which named
/// itself (`server`, and `version` when it gave one);
/// `not_holdline_unnamed` when it named none.
pub(crate) fn not_holdline(hostport: &str, server: Option<&str>) -> Error {
    let text = match server {
        Some(server) => {
            format!("store: the server at {hostport} is {server}, not holdline: invalid")
        }
        None => format!("store: the server at {hostport} is not holdline: invalid"),
    };
    Error::new(ErrorKind::Invalid, text)
}

/// `not_resp`: the server sent bytes that are not RESP; `bytes` are the
/// first of them (at most 10 are shown).
pub(crate) fn not_resp(hostport: &str, bytes: &[u8]) -> String {
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(10)]);
    format!(
        "store: the server at {hostport} answered with something that is not RESP ({}): closed",
        shown_key(&head)
    )
}

/// `reply_too_large`: a reply's header announced `size` bytes, more than
/// the connection's reply limit.
pub(crate) fn reply_too_large(hostport: &str, size: u128, limit: usize) -> String {
    format!(
        "store: the server at {hostport} announced a reply of {size} bytes, over the limit of {limit}: closed"
    )
}

/// `tls_failed`: the TLS handshake failed, or the server ended the
/// connection with a TLS alert before it answered `HELLO` (under TLS 1.3
/// a refused client certificate shows only then).
pub(crate) fn tls_failed(hostport: &str, e: io::Error) -> Error {
    let text = format!("store: TLS with {hostport} failed ({e}): closed");
    Error::with_io(ErrorKind::Closed, text, e)
}

/// `token_missing`: the server wants a token and none was given.
pub(crate) fn token_missing() -> Error {
    Error::new(
        ErrorKind::Invalid,
        "store: the server wants a token: invalid",
    )
}

/// `token_refused`: the token given is not the server's.
pub(crate) fn token_refused() -> Error {
    Error::new(
        ErrorKind::Invalid,
        "store: the server refused the token: invalid",
    )
}

/// `connect_refused`: the server answered `HELLO` with a refusal that is
/// not about the token (its connection limit, say).
pub(crate) fn connect_refused(hostport: &str, line: &str) -> Error {
    let text = format!("store: the server at {hostport} refused the connection ({line}): closed");
    let e = io::Error::new(io::ErrorKind::ConnectionRefused, line.to_owned());
    Error::with_io(ErrorKind::Closed, text, e)
}

/// `connection_closed`: a call that held nothing lost its connection.
pub(crate) fn connection_closed(e: io::Error) -> Error {
    let text = "store: the connection to the server closed: closed";
    Error::with_io(ErrorKind::Closed, text, e)
}

/// `connection_closed_key`: the same, for a call about one key.
pub(crate) fn connection_closed_key(lock: &str, key: &str, e: io::Error) -> Error {
    let text = format!(
        "lock {lock}: key {}: the connection to the server closed: closed",
        shown_key(key)
    );
    Error::with_io(ErrorKind::Closed, text, e)
}

/// `lost_connection`: a held lease's connection dropped (the server lets
/// a closed connection's keys go at once).
pub(crate) fn lost_connection(lock: &str, key: &str, e: io::Error) -> Error {
    let text = format!(
        "lock {lock}: key {}: the lease was lost: its connection to the server closed",
        shown_key(key)
    );
    Error::with_io(ErrorKind::Lost, text, e)
}

/// `lost_silent`: nothing answered for the lease's ttl (less the margin).
pub(crate) fn lost_silent(lock: &str, key: &str, ttl: Duration) -> Error {
    Error::new(
        ErrorKind::Lost,
        format!(
            "lock {lock}: key {}: the lease was lost: the server answered nothing for its ttl ({})",
            shown_key(key),
            duration_text(ttl)
        ),
    )
}

/// `reattach_failed`: a lease handed over to another node (a planned
/// hand-over) could not be re-attached there before its deadline.
pub(crate) fn reattach_failed(lock: &str, key: &str) -> Error {
    Error::new(
        ErrorKind::Lost,
        format!(
            "lock {lock}: key {}: the lease was lost: it could not follow its partition to another node",
            shown_key(key)
        ),
    )
}

/// `wait_silent`: a waiting `HOLD` whose connection answered nothing for
/// its wait plus `grace` (the ttl, at least 1 s).
pub(crate) fn wait_silent(lock: &str, key: &str, wait: Duration, grace: Duration) -> Error {
    let text = format!(
        "lock {lock}: key {}: the server answered nothing for the hold's wait plus its ttl ({} + {}): closed",
        shown_key(key),
        duration_text(wait),
        duration_text(grace)
    );
    let e = io::Error::new(io::ErrorKind::TimedOut, "no answer to HOLD");
    Error::with_io(ErrorKind::Closed, text, e)
}

/// `moved_loop`: a command was redirected `MOVED` 5 times (and answered
/// `MOVED` once more) without reaching the node that serves its key.
pub(crate) fn moved_loop(scope: Scope<'_>) -> Error {
    let what = "redirected 5 times without reaching the node that serves it";
    let kind = ErrorKind::Closed;
    Error::new(kind, wire::error(kind, scope, what).to_string())
}

/// `slot_unserved`: a command answered `CLUSTERDOWN` 10 times.
pub(crate) fn slot_unserved(scope: Scope<'_>, slot: u16) -> Error {
    let what = format!("no node serves its slot ({slot}) after 10 tries");
    let kind = ErrorKind::Closed;
    Error::new(kind, wire::error(kind, scope, what).to_string())
}

/// Every builder with sample arguments, by its name in the table, for the
/// test that compares them with `clients/texts.json`.
#[doc(hidden)]
pub fn samples() -> Vec<(&'static str, String)> {
    let e = || io::Error::new(io::ErrorKind::ConnectionRefused, "REASON");
    let (lock, key) = ("invoices", "9");
    let s = Duration::from_secs;
    vec![
        ("bad_address", bad_address("nope://x").to_string()),
        ("bad_user", bad_user("a b").to_string()),
        ("user_without_token", user_without_token("a b").to_string()),
        (
            "cannot_connect",
            cannot_connect("127.0.0.1:1", e()).to_string(),
        ),
        (
            "connect_silent",
            connect_silent("127.0.0.1:1", s(10)).to_string(),
        ),
        ("tls_failed", tls_failed("127.0.0.1:1", e()).to_string()),
        ("token_missing", token_missing().to_string()),
        ("token_refused", token_refused().to_string()),
        (
            "connect_refused",
            connect_refused("127.0.0.1:1", "REASON").to_string(),
        ),
        ("connection_closed", connection_closed(e()).to_string()),
        (
            "connection_closed_key",
            connection_closed_key(lock, key, e()).to_string(),
        ),
        (
            "lost_connection",
            lost_connection(lock, key, e()).to_string(),
        ),
        ("lost_silent", lost_silent(lock, key, s(2)).to_string()),
        ("reattach_failed", reattach_failed(lock, key).to_string()),
        (
            "wait_silent",
            wait_silent(lock, key, s(3), s(2)).to_string(),
        ),
        ("moved_loop", moved_loop(Scope::Key(lock, key)).to_string()),
        (
            "slot_unserved",
            slot_unserved(Scope::Key(lock, key), 12182).to_string(),
        ),
        (
            "not_holdline",
            not_holdline("127.0.0.1:1", Some("redis 7.0.15")).to_string(),
        ),
        (
            "not_holdline_unnamed",
            not_holdline("127.0.0.1:1", None).to_string(),
        ),
        ("not_resp", not_resp("127.0.0.1:1", b"HTTP/1.1 400 Bad")),
        (
            "reply_too_large",
            reply_too_large("127.0.0.1:1", 999_999_999_999, 67_108_864),
        ),
    ]
}
