//! Error replies: the core's errors behind their kind word (`-INUSE ...`),
//! and the few texts the server words itself, in the core's shape.

use holdline::wire::{self, Scope};
use holdline::{Error, ErrorKind};
use holdline_resp::Value;

/// `-KIND text`, the text being the core's to the byte.
pub fn core_error(e: &Error) -> Value {
    Value::Error(format!("{} {e}", e.kind().wire_word()))
}

/// `-INVALID lock NAME: key "KEY": WHAT: invalid`, for refusals the server
/// makes before the core sees the key.
pub fn invalid_key(lock: &str, key: &str, what: &'static str) -> Value {
    core_error(&wire::error(
        ErrorKind::Invalid,
        Scope::Key(lock, key),
        what,
    ))
}

/// `-INVALID store: WHAT: invalid`, for refusals about no lock in particular.
pub fn invalid_store(what: String) -> Value {
    core_error(&wire::error(ErrorKind::Invalid, Scope::Store, what))
}

/// A key that is not UTF-8: shown as the core shows keys, except that the
/// bytes that are not UTF-8 are written `\xNN`.
pub fn key_not_utf8(lock: &str, key: &[u8]) -> Value {
    Value::Error(format!(
        "INVALID lock {lock}: key {}: the key is not UTF-8: invalid",
        shown_bytes(key)
    ))
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
pub fn noauth() -> Value {
    Value::error("NOAUTH Authentication required.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_texts_have_the_core_shape() {
        assert_eq!(
            invalid_key("inv", "7", "hold inside a hold of the same key"),
            Value::error(
                "INVALID lock inv: key \"7\": hold inside a hold of the same key: invalid"
            )
        );
        let long = "é".repeat(70);
        let Value::Error(text) = invalid_key("l", &long, "w") else {
            unreachable!()
        };
        assert_eq!(
            text,
            format!("INVALID lock l: key \"{}...\": w: invalid", "é".repeat(64))
        );
    }

    #[test]
    fn a_key_that_is_not_utf8_shows_its_bytes() {
        assert_eq!(
            key_not_utf8("inv", b"a\xffb\n"),
            Value::error("INVALID lock inv: key \"a\\xffb\\n\": the key is not UTF-8: invalid")
        );
        let long = [b'\xfe'; 70];
        let Value::Error(text) = key_not_utf8("l", &long) else {
            unreachable!()
        };
        assert!(
            text.contains(&format!("\"{}...\"", "\\xfe".repeat(64))),
            "{text}"
        );
    }

    #[test]
    fn core_errors_keep_their_text() {
        let store = holdline::Store::new();
        store.close();
        let e = store.lock("inv").open().unwrap_err();
        assert_eq!(core_error(&e), Value::Error(format!("CLOSED {e}")));
    }
}
