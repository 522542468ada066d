//! Keys and lock names: what they may be, and how a key becomes text.
//!
//! A key is text; a number is its decimal text, so key `9` and key `"9"` are
//! one key. Integers are formatted into a stack buffer ([`KeyBuf`]), so no key
//! allocates on the way to a hold.

use crate::error::{Error, ErrorKind};

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Longest lock name, in bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// Scratch space a number is formatted into (enough for any `i128`).
pub(crate) struct KeyBuf {
    bytes: [u8; 40],
}

impl KeyBuf {
    #[inline]
    pub(crate) fn new() -> Self {
        KeyBuf { bytes: [0; 40] }
    }

    /// Writes `n` (with a `-` when `negative`) and answers the text. Out
    /// of line, so that [`KeyRef::text`] of a text key is inlined whole.
    #[inline(never)]
    fn decimal(&mut self, mut n: u128, negative: bool) -> &str {
        let mut at = self.bytes.len();
        // The digits past 64 bits first: a `u128` division by 10 is a
        // call, a `u64` one a multiply, and nearly every key fits in 64.
        while n > u128::from(u64::MAX) {
            at -= 1;
            self.bytes[at] = b'0' + (n % 10) as u8;
            n /= 10;
        }
        let mut n = n as u64;
        loop {
            at -= 1;
            self.bytes[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if negative {
            at -= 1;
            self.bytes[at] = b'-';
        }
        // SAFETY: only ASCII digits and '-' were written to `bytes[at..]`,
        // and ASCII is UTF-8. (A checked conversion cost a third of turning
        // a one-digit number into its text.)
        unsafe { std::str::from_utf8_unchecked(&self.bytes[at..]) }
    }
}

/// A key as a caller named it: text, or a number standing for its decimal text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRef<'a> {
    /// Text, used as it is.
    Text(&'a str),
    /// A non-negative number.
    Unsigned(u128),
    /// A negative number.
    Negative(u128),
}

impl<'a> KeyRef<'a> {
    /// The key's text, formatting a number into `buf`.
    #[inline(always)]
    pub(crate) fn text<'b>(self, buf: &'b mut KeyBuf) -> &'b str
    where
        'a: 'b,
    {
        match self {
            KeyRef::Text(t) => t,
            KeyRef::Unsigned(n) => buf.decimal(n, false),
            KeyRef::Negative(n) => buf.decimal(n, true),
        }
    }
}

/// Something that names a key: text, or an integer (its decimal text, so
/// key `9` and key `"9"` are the same key).
pub trait Key {
    /// The key as text or number.
    fn key_ref(&self) -> KeyRef<'_>;
}

impl Key for str {
    #[inline]
    fn key_ref(&self) -> KeyRef<'_> {
        KeyRef::Text(self)
    }
}

impl Key for String {
    #[inline]
    fn key_ref(&self) -> KeyRef<'_> {
        KeyRef::Text(self)
    }
}

/// A key already taken apart: what [`Lock::key`](crate::Lock::key) keeps.
impl Key for KeyRef<'_> {
    #[inline]
    fn key_ref(&self) -> KeyRef<'_> {
        *self
    }
}

impl<T: Key + ?Sized> Key for &T {
    #[inline]
    fn key_ref(&self) -> KeyRef<'_> {
        (**self).key_ref()
    }
}

/// A key as an argument: a reference to anything that is a [`Key`]
/// (`&id`, `"inv-9"`, `&9`), a [`KeyRef`], or an integer by value (`9`).
/// What `hold`, `lock`, `key` and the rest take, so a number needs no `&`.
pub trait IntoKey<'a> {
    /// The key as text or number, borrowing for `'a`.
    fn into_key(self) -> KeyRef<'a>;
}

impl<'a, T: Key + ?Sized> IntoKey<'a> for &'a T {
    #[inline]
    fn into_key(self) -> KeyRef<'a> {
        self.key_ref()
    }
}

impl<'a, 'b: 'a> IntoKey<'a> for KeyRef<'b> {
    #[inline]
    fn into_key(self) -> KeyRef<'a> {
        self
    }
}

macro_rules! unsigned_keys {
    ($($t:ty)*) => {$(
        impl Key for $t {
            #[inline]
            fn key_ref(&self) -> KeyRef<'_> {
                KeyRef::Unsigned(*self as u128)
            }
        }

        impl<'a> IntoKey<'a> for $t {
            #[inline]
            fn into_key(self) -> KeyRef<'a> {
                KeyRef::Unsigned(self as u128)
            }
        }
    )*};
}

macro_rules! signed_keys {
    ($($t:ty)*) => {$(
        impl Key for $t {
            #[inline]
            fn key_ref(&self) -> KeyRef<'_> {
                let n = *self as i128;
                if n < 0 { KeyRef::Negative(n.unsigned_abs()) } else { KeyRef::Unsigned(n as u128) }
            }
        }

        impl<'a> IntoKey<'a> for $t {
            #[inline]
            fn into_key(self) -> KeyRef<'a> {
                let n = self as i128;
                if n < 0 { KeyRef::Negative(n.unsigned_abs()) } else { KeyRef::Unsigned(n as u128) }
            }
        }
    )*};
}

unsigned_keys!(u8 u16 u32 u64 u128 usize);
signed_keys!(i8 i16 i32 i64 i128 isize);

/// Checks a key: 1 to 1,024 bytes of UTF-8 with no control characters.
#[inline]
#[doc(hidden)]
pub fn check_key(lock: &str, key: &str) -> Result<(), Error> {
    let bytes = key.as_bytes();
    let bad = |what: &'static str| Err(Error::new(ErrorKind::Invalid, what).for_key(lock, key));
    if bytes.is_empty() {
        return bad("the key is empty");
    }
    if bytes.len() > MAX_KEY_BYTES {
        return bad("the key is longer than 1024 bytes");
    }
    // ASCII fast path: controls are below 0x20 and 0x7f; anything above is
    // checked as chars (C1 controls U+0080..U+009F are controls too).
    let ascii_ok = bytes.iter().all(|&b| (0x20..0x7f).contains(&b));
    if !ascii_ok && key.chars().any(char::is_control) {
        return bad("the key holds a control character");
    }
    Ok(())
}

/// The name rule, as error texts state it (the quotes keep its last
/// character apart from the `: invalid` that follows).
const NAME_RULE: &str = r#"a lock name is 1 to 128 ASCII letters, digits and "_-.:""#;

/// Checks a lock name: 1 to 128 bytes of ASCII letters, digits and `_ - . :`.
#[doc(hidden)]
pub fn check_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if ok {
        Ok(())
    } else {
        Err(Error::new(ErrorKind::Invalid, NAME_RULE).for_lock(&format!("{name:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text<K: Key + ?Sized>(k: &K) -> String {
        let mut buf = KeyBuf::new();
        k.key_ref().text(&mut buf).to_owned()
    }

    #[test]
    fn integers_are_their_decimal_text() {
        assert_eq!(text(&9u8), "9");
        assert_eq!(text(&0i32), "0");
        assert_eq!(text(&-17i64), "-17");
        assert_eq!(text(&i128::MIN), i128::MIN.to_string());
        assert_eq!(text(&u128::MAX), u128::MAX.to_string());
        for n in [
            u128::from(u64::MAX),
            u128::from(u64::MAX) + 1,
            10u128.pow(20),
        ] {
            assert_eq!(text(&n), n.to_string());
            assert_eq!(text(&-(n as i128)), (-(n as i128)).to_string());
        }
        assert_eq!(text(&u64::MAX), u64::MAX.to_string());
        assert_eq!(text(&i8::MIN), "-128");
        assert_eq!(text("9"), "9");
        assert_eq!(text(&String::from("9")), "9");
        assert_eq!(text(&&"x"), "x");
    }

    #[test]
    fn keys_are_checked() {
        assert!(check_key("l", "a").is_ok());
        assert!(check_key("l", &"é".repeat(512)).is_ok());
        assert!(check_key("l", &"a".repeat(1024)).is_ok());
        for bad in ["", "a\nb", "\u{7f}", "x\u{85}", "tab\t"] {
            assert_eq!(
                check_key("l", bad).unwrap_err().kind(),
                ErrorKind::Invalid,
                "{bad:?}"
            );
        }
        let e = check_key("l", &"a".repeat(1025)).unwrap_err();
        assert!(
            e.to_string()
                .ends_with(": the key is longer than 1024 bytes: invalid"),
            "{e}"
        );
        let e = check_key("inv", "").unwrap_err();
        assert_eq!(
            e.to_string(),
            "lock inv: key \"\": the key is empty: invalid"
        );
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("invoices").is_ok());
        assert!(check_name("a-b_c.d:e9").is_ok());
        assert!(check_name(&"n".repeat(128)).is_ok());
        for bad in ["", "sp ace", "slash/", "é", &"n".repeat(129)] {
            assert_eq!(
                check_name(bad).unwrap_err().kind(),
                ErrorKind::Invalid,
                "{bad:?}"
            );
        }
        assert_eq!(
            check_name("a b").unwrap_err().to_string(),
            r#"lock "a b": a lock name is 1 to 128 ASCII letters, digits and "_-.:": invalid"#
        );
    }
}
