//! Error replies as values: each carries the word it starts with (an
//! [`ErrorWord`], which is also its metrics label) and the text after it.
//! The core's errors keep their text to the byte behind their kind word
//! (`-INUSE ...`); the few texts the server words itself take the core's
//! shape or Redis's.

use holdline::wire::{self, Scope};
use holdline::{Error, ErrorKind};
use holdline_resp::Value;
use std::fmt;

/// What a command answers: a value, or an error reply.
pub type Reply = Result<Value, ErrorReply>;

/// The word an error reply starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorWord {
    Invalid,
    InUse,
    Lost,
    Limit,
    Closed,
    Err,
    NoAuth,
    NoPerm,
    WrongPass,
    NoProto,
    Moved,
    ClusterDown,
    CrossSlot,
    TryAgain,
}

impl ErrorWord {
    /// Every word, in the order of [`ErrorWord::index`].
    pub const ALL: [ErrorWord; 14] = [
        ErrorWord::Invalid,
        ErrorWord::InUse,
        ErrorWord::Lost,
        ErrorWord::Limit,
        ErrorWord::Closed,
        ErrorWord::Err,
        ErrorWord::NoAuth,
        ErrorWord::NoPerm,
        ErrorWord::WrongPass,
        ErrorWord::NoProto,
        ErrorWord::Moved,
        ErrorWord::ClusterDown,
        ErrorWord::CrossSlot,
        ErrorWord::TryAgain,
    ];

    /// Its place in [`ErrorWord::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The word on the wire.
    pub fn word(self) -> &'static str {
        match self {
            ErrorWord::Invalid => ErrorKind::Invalid.wire_word(),
            ErrorWord::InUse => ErrorKind::InUse.wire_word(),
            ErrorWord::Lost => ErrorKind::Lost.wire_word(),
            ErrorWord::Limit => ErrorKind::Limit.wire_word(),
            ErrorWord::Closed => ErrorKind::Closed.wire_word(),
            ErrorWord::Err => "ERR",
            ErrorWord::NoAuth => "NOAUTH",
            ErrorWord::NoPerm => "NOPERM",
            ErrorWord::WrongPass => "WRONGPASS",
            ErrorWord::NoProto => "NOPROTO",
            ErrorWord::Moved => "MOVED",
            ErrorWord::ClusterDown => "CLUSTERDOWN",
            ErrorWord::CrossSlot => "CROSSSLOT",
            ErrorWord::TryAgain => "TRYAGAIN",
        }
    }

    /// Its label in `holdline_errors_total{kind=...}`.
    pub fn label(self) -> &'static str {
        match self {
            ErrorWord::Invalid => "invalid",
            ErrorWord::InUse => "in_use",
            ErrorWord::Lost => "lost",
            ErrorWord::Limit => "limit",
            ErrorWord::Closed => "closed",
            ErrorWord::Err => "err",
            ErrorWord::NoAuth => "noauth",
            ErrorWord::NoPerm => "noperm",
            ErrorWord::WrongPass => "wrongpass",
            ErrorWord::NoProto => "noproto",
            ErrorWord::Moved => "moved",
            ErrorWord::ClusterDown => "clusterdown",
            ErrorWord::CrossSlot => "crossslot",
            ErrorWord::TryAgain => "tryagain",
        }
    }

    fn of_core(kind: ErrorKind) -> ErrorWord {
        match kind {
            ErrorKind::Invalid => ErrorWord::Invalid,
            ErrorKind::InUse => ErrorWord::InUse,
            ErrorKind::Lost => ErrorWord::Lost,
            ErrorKind::Limit => ErrorWord::Limit,
            ErrorKind::Closed => ErrorWord::Closed,
        }
    }
}

/// One error reply: `-WORD text`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorReply {
    pub word: ErrorWord,
    text: String,
}

impl ErrorReply {
    pub fn new(word: ErrorWord, text: impl Into<String>) -> ErrorReply {
        ErrorReply {
            word,
            text: text.into(),
        }
    }

    /// `-ERR text`.
    pub fn err(text: impl Into<String>) -> ErrorReply {
        ErrorReply::new(ErrorWord::Err, text)
    }

    /// `-KIND text`, the text being the core's to the byte.
    pub fn core(e: &Error) -> ErrorReply {
        ErrorReply::new(ErrorWord::of_core(e.kind()), e.to_string())
    }

    /// The reply on the wire.
    pub fn into_value(self) -> Value {
        Value::Error(self.to_string())
    }
}

impl fmt::Display for ErrorReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.word.word(), self.text)
    }
}

impl From<Error> for ErrorReply {
    fn from(e: Error) -> ErrorReply {
        ErrorReply::core(&e)
    }
}

/// `-INVALID lock NAME: key "KEY": WHAT: invalid`, for refusals the server
/// makes before the core sees the key.
pub fn invalid_key(lock: &str, key: &str, what: &'static str) -> ErrorReply {
    ErrorReply::core(&wire::error(
        ErrorKind::Invalid,
        Scope::Key(lock, key),
        what,
    ))
}

/// `-TRYAGAIN ...`: a HOLD or TRYHOLD while the server drains (SIGTERM):
/// holders keep their leases, nobody new is granted one.
pub fn draining() -> ErrorReply {
    ErrorReply::new(
        ErrorWord::TryAgain,
        "the server is draining: no new holds; try again on another server or later",
    )
}

/// `-NOPERM ...`: under `--tls-user-from-cn`, a client certificate whose
/// CN names no user (or that has none); the connection then closes.
pub fn no_cn_user(cn: Option<&str>) -> ErrorReply {
    let text = match cn {
        Some(cn) => format!("the client certificate's CN {cn:?} names no user"),
        None => "the client certificate has no CN to name a user".to_owned(),
    };
    ErrorReply::new(ErrorWord::NoPerm, text)
}

/// `-INVALID store: WHAT: invalid`, for refusals about no lock in particular.
pub fn invalid_store(what: String) -> ErrorReply {
    ErrorReply::core(&wire::error(ErrorKind::Invalid, Scope::Store, what))
}

/// A key that is not UTF-8: shown as the core shows keys, except that the
/// bytes that are not UTF-8 are written `\xNN`.
pub fn key_not_utf8(lock: &str, key: &[u8]) -> ErrorReply {
    ErrorReply::new(
        ErrorWord::Invalid,
        format!(
            "lock {lock}: key {}: the key is not UTF-8: invalid",
            shown_bytes(key)
        ),
    )
}

/// Keys longer than this many characters are cut in error texts.
const SHOWN_UNITS: usize = 64;

/// `"..."` with the UTF-8 parts escaped as `{:?}` escapes them and every
/// other byte as `\xNN`, cut after 64 characters or bytes with `...`.
fn shown_bytes(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    let mut units = 0;
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if units == SHOWN_UNITS {
                out.push_str("...\"");
                return out;
            }
            out.extend(c.escape_debug());
            units += 1;
        }
        for b in chunk.invalid() {
            if units == SHOWN_UNITS {
                out.push_str("...\"");
                return out;
            }
            out.push_str(&format!("\\x{b:02x}"));
            units += 1;
        }
    }
    out.push('"');
    out
}

/// Redis's answer to a command before authentication.
pub fn noauth() -> ErrorReply {
    ErrorReply::new(ErrorWord::NoAuth, "Authentication required.")
}

/// A key of a partition another node serves, and that node's address.
pub fn moved(slot: u16, addr: &str) -> ErrorReply {
    ErrorReply::new(ErrorWord::Moved, format!("{slot} {addr}"))
}

/// A key of a partition no node serves now.
pub fn cluster_down() -> ErrorReply {
    ErrorReply::new(ErrorWord::ClusterDown, "Hash slot not served")
}

/// Rows of one command in partitions of their own.
pub fn cross_slot() -> ErrorReply {
    ErrorReply::new(
        ErrorWord::CrossSlot,
        "Keys in request don't hash to the same slot",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_wire(reply: ErrorReply) -> String {
        reply.to_string()
    }

    #[test]
    fn server_texts_have_the_core_shape() {
        assert_eq!(
            on_wire(invalid_key(
                "inv",
                "7",
                "hold inside a hold of the same key"
            )),
            "INVALID lock inv: key \"7\": hold inside a hold of the same key: invalid"
        );
        let long = "é".repeat(70);
        assert_eq!(
            on_wire(invalid_key("l", &long, "w")),
            format!("INVALID lock l: key \"{}...\": w: invalid", "é".repeat(64))
        );
    }

    #[test]
    fn a_key_that_is_not_utf8_shows_its_bytes() {
        let reply = key_not_utf8("inv", b"a\xffb\n");
        assert_eq!(reply.word, ErrorWord::Invalid);
        assert_eq!(
            reply.into_value(),
            Value::error("INVALID lock inv: key \"a\\xffb\\n\": the key is not UTF-8: invalid")
        );
        let long = [b'\xfe'; 70];
        let text = on_wire(key_not_utf8("l", &long));
        assert!(
            text.contains(&format!("\"{}...\"", "\\xfe".repeat(64))),
            "{text}"
        );
    }

    #[test]
    fn core_errors_keep_their_text_behind_their_word() {
        let store = holdline::Store::new();
        store.close();
        let e = store.lock("inv").open().unwrap_err();
        let reply = ErrorReply::core(&e);
        assert_eq!(reply.word, ErrorWord::Closed);
        assert_eq!(reply.into_value(), Value::Error(format!("CLOSED {e}")));
    }

    #[test]
    fn every_word_has_its_place_and_a_label_of_its_own() {
        let mut labels = std::collections::HashSet::new();
        for (i, word) in ErrorWord::ALL.into_iter().enumerate() {
            assert_eq!(word.index(), i, "{word:?}");
            assert!(labels.insert(word.label()), "{word:?}");
            assert_eq!(word.label().replace('_', ""), word.word().to_lowercase());
        }
    }
}
