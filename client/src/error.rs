//! The client's error: the core's [`ErrorKind`] and the text, byte for byte.
//!
//! Three sources, one type:
//! - the server's error replies: `-INUSE <text>`, `-LOST <text>`, `-LIMIT`,
//!   `-INVALID`, `-CLOSED` carry their kind word, then the core's text,
//!   which is kept exactly as sent; any other error reply (`-ERR ...`,
//!   `-NOAUTH ...`, `-WRONGPASS ...`) is a refused request: kind
//!   [`ErrorKind::Invalid`], the whole line as its text; of those,
//!   `-NOPERM ...` (the connection's user may not name that lock) answers
//!   [`Error::is_no_perm`] true;
//! - local checks (names, keys, durations), worded as the core words them;
//! - the connection: an I/O failure, a dropped connection or a malformed
//!   reply (the texts every client shares, built in `texts`). A call that held nothing fails [`ErrorKind::Closed`] (the store
//!   cannot be reached: the same kind a server shutting down answers, and a
//!   caller that retries on it gets a fresh connection); a lease held on
//!   that connection is [`ErrorKind::Lost`], because the server lets a
//!   closed connection's keys go at once;
//! - silence: a server that answers nothing for a lease's whole ttl may
//!   have let it go, so the lease is [`ErrorKind::Lost`] then too.

use holdline::wire::{self, Scope};
use holdline::ErrorKind;
use std::fmt;
use std::io;
use std::sync::Arc;

/// An error from the client. `Display` is the text: the server's, byte for
/// byte, for an error reply.
#[derive(Clone)]
pub struct Error {
    kind: ErrorKind,
    text: Box<str>,
    io: Option<Arc<io::Error>>,
    /// A `NOPERM` error reply.
    no_perm: bool,
}

impl Error {
    /// An error of `kind` whose text is `text`, as it is.
    pub fn new(kind: ErrorKind, text: impl Into<Box<str>>) -> Error {
        Error {
            kind,
            text: text.into(),
            io: None,
            no_perm: false,
        }
    }

    /// The error an error reply stands for (`text` is the line after `-`).
    /// The five kinds' words are dropped and the core's text kept; any
    /// other reply is [`ErrorKind::Invalid`] with the whole line, a
    /// `NOPERM` one marked so ([`is_no_perm`](Error::is_no_perm)).
    pub fn from_reply(text: &str) -> Error {
        let (word, rest) = text.split_once(' ').unwrap_or((text, ""));
        match ErrorKind::from_wire_word(word) {
            Some(kind) => Error::new(kind, rest),
            None => Error {
                no_perm: word == "NOPERM",
                ..Error::new(ErrorKind::Invalid, text)
            },
        }
    }

    /// The core's error, its kind and text as they are.
    pub(crate) fn from_core(e: &holdline::Error) -> Error {
        Error::new(e.kind(), e.to_string())
    }

    /// The kind, to branch on.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether the server refused the command because the connection's
    /// user may not use its lock (a server started with `--users`): a
    /// `NOPERM` reply, kind [`ErrorKind::Invalid`], its text the server's
    /// line as sent (`NOPERM user alice may not use lock "payments"`).
    /// Retrying will not help; connecting as another user may.
    pub fn is_no_perm(&self) -> bool {
        self.no_perm
    }

    /// The I/O failure behind a connection error, if that is what it was.
    pub fn io_error(&self) -> Option<&io::Error> {
        self.io.as_deref()
    }

    /// Whether the connection failed (I/O, dropped, or a malformed reply),
    /// rather than the server answering an error.
    pub fn is_connection(&self) -> bool {
        self.io.is_some()
    }

    /// A connection failure, `what (e)` in the core's shape for `scope`.
    pub(crate) fn connection(kind: ErrorKind, scope: Scope<'_>, what: &str, e: io::Error) -> Error {
        let text = wire::error(kind, scope, format!("{what} ({e})")).to_string();
        Error::with_io(kind, text, e)
    }

    /// A local error in the core's shape.
    pub(crate) fn local(kind: ErrorKind, scope: Scope<'_>, what: &'static str) -> Error {
        Error::new(kind, wire::error(kind, scope, what).to_string())
    }

    /// An error of `kind` with `text`, caused by the I/O failure `e`.
    pub(crate) fn with_io(kind: ErrorKind, text: impl Into<Box<str>>, e: io::Error) -> Error {
        Error {
            kind,
            text: text.into(),
            io: Some(Arc::new(e)),
            no_perm: false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({:?}: {})", self.kind, self.text)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl PartialEq for Error {
    /// Same kind, same text (the I/O cause is not compared).
    fn eq(&self, other: &Error) -> bool {
        self.kind == other.kind && self.text == other.text
    }
}

impl Eq for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_keep_their_text_byte_for_byte() {
        let e =
            Error::from_reply("INUSE lock invoices: key \"9\": held past the hold's wait: in use");
        assert_eq!(e.kind(), ErrorKind::InUse);
        assert_eq!(
            e.to_string(),
            "lock invoices: key \"9\": held past the hold's wait: in use"
        );
        let e =
            Error::from_reply("LOST lock a: key \"m\": the lease was lost: it ran out (ttl 10s)");
        assert_eq!(e.kind(), ErrorKind::Lost);
        assert_eq!(
            e.to_string(),
            "lock a: key \"m\": the lease was lost: it ran out (ttl 10s)"
        );
        for (word, kind) in [
            ("LIMIT", ErrorKind::Limit),
            ("INVALID", ErrorKind::Invalid),
            ("CLOSED", ErrorKind::Closed),
        ] {
            let e = Error::from_reply(&format!("{word} store: x: y"));
            assert_eq!((e.kind(), e.to_string().as_str()), (kind, "store: x: y"));
        }
        let e = Error::from_reply("ERR unknown command 'NOPE'");
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert_eq!(e.to_string(), "ERR unknown command 'NOPE'");
        assert!(!e.is_connection());
        let e = Error::from_reply("INUSE");
        assert_eq!((e.kind(), e.to_string().as_str()), (ErrorKind::InUse, ""));
        assert!(!e.is_no_perm());
    }

    #[test]
    fn noperm_is_invalid_with_the_servers_line_and_told_apart() {
        let line = "NOPERM user team-b may not use lock \"payments\"";
        let e = Error::from_reply(line);
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert_eq!(e.to_string(), line);
        assert!(e.is_no_perm() && !e.is_connection());
        assert!(e.clone().is_no_perm());
        // Only the reply's first word counts.
        for other in ["ERR NOPERM", "NOPERMS x", "INVALID NOPERM x"] {
            assert!(!Error::from_reply(other).is_no_perm(), "{other}");
        }
        assert!(!Error::new(ErrorKind::Invalid, line).is_no_perm());
    }

    #[test]
    fn local_texts_have_the_core_shape() {
        let e = Error::local(
            ErrorKind::Invalid,
            Scope::Key("l", "a\"b"),
            "the key is empty",
        );
        assert_eq!(
            e.to_string(),
            "lock l: key \"a\\\"b\": the key is empty: invalid"
        );
        let e = Error::local(
            ErrorKind::Lost,
            Scope::Key("l", "k"),
            "its connection dropped",
        );
        assert_eq!(
            e.to_string(),
            "lock l: key \"k\": the lease was lost: its connection dropped"
        );
        let long = "x".repeat(65);
        let e = Error::local(
            ErrorKind::Closed,
            Scope::Key("l", &long),
            "the store is closed",
        );
        assert_eq!(
            e.to_string(),
            format!(
                "lock l: key \"{}...\": the store is closed: closed",
                "x".repeat(64)
            )
        );
        let e = Error::connection(
            ErrorKind::Closed,
            Scope::Store,
            "could not connect",
            io::Error::new(io::ErrorKind::ConnectionRefused, "refused"),
        );
        assert_eq!(e.to_string(), "store: could not connect (refused): closed");
        assert!(e.is_connection());
        assert_eq!(
            e.io_error().map(io::Error::kind),
            Some(io::ErrorKind::ConnectionRefused)
        );
    }
}
