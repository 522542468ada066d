//! Error replies: the core's errors behind their kind word, and the few
//! texts the server itself words in the core's shape.

use holdline::{Error, ErrorKind};
use holdline_resp::Value;
use std::fmt::Write;

/// The RESP error word for a core error kind.
pub fn kind_word(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Invalid => "INVALID",
        ErrorKind::InUse => "INUSE",
        ErrorKind::Lost => "LOST",
        ErrorKind::Limit => "LIMIT",
        ErrorKind::Closed => "CLOSED",
    }
}

/// `-KIND text`, the text being the core's to the byte.
pub fn core_error(e: &Error) -> Value {
    Value::Error(format!("{} {e}", kind_word(e.kind())))
}

/// `lock NAME: key "KEY": WHAT: invalid`, for refusals the server makes
/// before the core sees the key (the core's shape, key shown as the core
/// shows it: `{:?}`, cut to 64 characters).
pub fn invalid_key(lock: &str, key: &str, what: &str) -> Value {
    let mut text = format!("INVALID lock {lock}: key ");
    write_key(&mut text, key);
    let _ = write!(text, ": {what}: invalid");
    Value::Error(text)
}

/// `store: WHAT: invalid`, for refusals about no lock in particular.
pub fn invalid_store(what: &str) -> Value {
    Value::Error(format!("INVALID store: {what}: invalid"))
}

const KEY_SHOWN_CHARS: usize = 64;

fn write_key(out: &mut String, key: &str) {
    match key.char_indices().nth(KEY_SHOWN_CHARS) {
        None => {
            let _ = write!(out, "{key:?}");
        }
        Some((cut, _)) => {
            let shown = format!("{:?}", &key[..cut]);
            let _ = write!(out, "{}...\"", &shown[..shown.len() - 1]);
        }
    }
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
    fn core_errors_keep_their_text() {
        let store = holdline::Store::new();
        store.close();
        let e = store.lock("inv").open().unwrap_err();
        assert_eq!(core_error(&e), Value::Error(format!("CLOSED {e}")));
    }
}
