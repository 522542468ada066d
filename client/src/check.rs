//! Local checks that cost nothing: a key's text, lock names, keys and
//! durations, with the core's rules and texts, so a bad argument fails
//! before a round trip (the server checks the same again).

use crate::error::{Error, Scope};
use holdline::{ErrorKind, Key, KeyRef, MAX_KEY_BYTES, MAX_NAME_BYTES};
use std::time::Duration;

/// The key's text: text as it is, a number as its decimal text.
pub(crate) fn key_text<K: Key + ?Sized>(key: &K) -> String {
    match key.key_ref() {
        KeyRef::Text(t) => t.to_owned(),
        KeyRef::Unsigned(n) => n.to_string(),
        KeyRef::Negative(n) => format!("-{n}"),
    }
}

/// A key is 1 to 1,024 bytes of UTF-8 with no control characters.
pub(crate) fn check_key(lock: &str, key: &str) -> Result<(), Error> {
    let bad = |what: &str| {
        Err(Error::local(
            ErrorKind::Invalid,
            Scope::Key(lock, key),
            what,
        ))
    };
    if key.is_empty() {
        return bad("the key is empty");
    }
    if key.len() > MAX_KEY_BYTES {
        return bad("the key is longer than 1024 bytes");
    }
    if key.chars().any(char::is_control) {
        return bad("the key holds a control character");
    }
    Ok(())
}

/// A lock name is 1 to 128 bytes of ASCII letters, digits and `_ - . :`.
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if ok {
        return Ok(());
    }
    let quoted = format!("{name:?}");
    Err(Error::local(
        ErrorKind::Invalid,
        Scope::Lock(&quoted),
        r#"a lock name is 1 to 128 ASCII letters, digits and "_-.:""#,
    ))
}

/// A ttl or maxHold in whole milliseconds: at least 1 ms, else `invalid`
/// with `what` (the core's "a ttl is at least 1ms").
pub(crate) fn lease_ms(lock: &str, d: Duration, what: &str) -> Result<u64, Error> {
    if d < Duration::from_millis(1) {
        Err(Error::local(ErrorKind::Invalid, Scope::Lock(lock), what))
    } else {
        Ok(clamp_ms(d))
    }
}

/// A wait in milliseconds: zero stays zero (do not wait), anything below
/// 1 ms rounds up to 1 ms, as in the core.
pub(crate) fn wait_ms(d: Duration) -> u64 {
    if d.is_zero() {
        0
    } else {
        clamp_ms(d).max(1)
    }
}

fn clamp_ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX / 4)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdline::Store;

    /// The same inputs through the core, whose texts are the contract.
    #[test]
    fn texts_match_the_core() {
        let store = Store::new();
        let lock = store.lock("l").open().unwrap();
        for key in [
            "",
            "a\nb",
            "\u{7f}",
            "x\u{85}",
            "tab\t",
            &"a".repeat(1025),
            "ok",
        ] {
            let core = lock
                .key(key)
                .wait(Duration::ZERO)
                .hold(|_| ())
                .err()
                .map(|e| e.to_string());
            let ours = check_key("l", key).err().map(|e| e.to_string());
            assert_eq!(ours, core, "{key:?}");
        }
        for name in ["", "sp ace", "slash/", "é", &"n".repeat(129), "a-b_c.d:e9"] {
            let core = store.lock(name).open().err().map(|e| e.to_string());
            let ours = check_name(name).err().map(|e| e.to_string());
            assert_eq!(ours, core, "{name:?}");
        }
        let core = store.lock("l").ttl(Duration::ZERO).open().unwrap_err();
        let ours = lease_ms("l", Duration::ZERO, "a ttl is at least 1ms").unwrap_err();
        assert_eq!(ours.to_string(), core.to_string());
        let core = store
            .lock("l")
            .max_hold(Duration::from_micros(999))
            .open()
            .unwrap_err();
        let ours =
            lease_ms("l", Duration::from_micros(999), "a maxHold is at least 1ms").unwrap_err();
        assert_eq!(ours.to_string(), core.to_string());
        assert_eq!(ours.kind(), core.kind());
        store.close();
    }

    #[test]
    fn keys_are_text_and_numbers_are_decimal() {
        assert_eq!(key_text("9"), "9");
        assert_eq!(key_text(&9u8), "9");
        assert_eq!(key_text(&-17i64), "-17");
        assert_eq!(key_text(&i128::MIN), i128::MIN.to_string());
        assert_eq!(key_text(&String::from("x")), "x");
    }

    #[test]
    fn waits_round_like_the_core() {
        assert_eq!(wait_ms(Duration::ZERO), 0);
        assert_eq!(wait_ms(Duration::from_micros(1)), 1);
        assert_eq!(wait_ms(Duration::from_millis(1500)), 1500);
        assert_eq!(lease_ms("l", Duration::from_millis(1), "x").unwrap(), 1);
    }
}
