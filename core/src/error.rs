//! Errors: one type, five kinds, and texts in one shape.
//!
//! `lock NAME: key "KEY": WHAT: KIND`, except `lost`, which reads
//! `lock NAME: key "KEY": the lease was lost: REASON`. An error without a key
//! drops the key part; a store-wide one starts with `store:`. Errors are built
//! only off the hot path, so they may allocate.

use std::borrow::Cow;
use std::fmt;

/// What went wrong, as a caller branches on it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ErrorKind {
    /// A bad lock name or key, or a hold where it may not be called.
    Invalid,
    /// The wait passed with the key still held.
    InUse,
    /// The lease ran out, was revoked at `maxHold`, or its store closed.
    Lost,
    /// The line of waiters for the key is full.
    Limit,
    /// The store is closed.
    Closed,
}

impl ErrorKind {
    /// The kind as the error texts spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "invalid",
            ErrorKind::InUse => "in use",
            ErrorKind::Lost => "lost",
            ErrorKind::Limit => "limit",
            ErrorKind::Closed => "closed",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error from holdline. Its `Display` is the error's text, e.g.
/// `lock invoices: key "9": held past the hold's wait: in use`.
///
/// One pointer wide (the details are boxed), so a `Result<T, Error>` costs
/// the hold path no more than `T` and a tag.
#[derive(Clone, PartialEq, Eq)]
pub struct Error(Box<Details>);

#[derive(Clone, PartialEq, Eq)]
struct Details {
    kind: ErrorKind,
    /// `Some(name)` for a lock's error, `None` for a store-wide one.
    lock: Option<Box<str>>,
    key: Option<Box<str>>,
    what: Cow<'static, str>,
}

/// Keys longer than this many characters are cut in error texts.
const KEY_SHOWN_CHARS: usize = 64;

impl Error {
    pub(crate) fn new(kind: ErrorKind, what: impl Into<Cow<'static, str>>) -> Self {
        Error(Box::new(Details {
            kind,
            lock: None,
            key: None,
            what: what.into(),
        }))
    }

    pub(crate) fn for_lock(mut self, lock: &str) -> Self {
        self.0.lock = Some(lock.into());
        self
    }

    pub(crate) fn for_key(mut self, lock: &str, key: &str) -> Self {
        self.0.lock = Some(lock.into());
        self.0.key = Some(key.into());
        self
    }

    pub(crate) fn closed() -> Self {
        Error::new(ErrorKind::Closed, "the store is closed")
    }

    pub(crate) fn lost(reason: impl Into<Cow<'static, str>>) -> Self {
        Error::new(ErrorKind::Lost, reason)
    }

    /// The kind, to branch on.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The lock the error is about, if any.
    pub fn lock(&self) -> Option<&str> {
        self.0.lock.as_deref()
    }

    /// The key the error is about, if any, uncut.
    pub fn key(&self) -> Option<&str> {
        self.0.key.as_deref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.0;
        match &d.lock {
            Some(name) => write!(f, "lock {name}: ")?,
            None => f.write_str("store: ")?,
        }
        if let Some(key) = &d.key {
            f.write_str("key ")?;
            write_key(f, key)?;
            f.write_str(": ")?;
        }
        if d.kind == ErrorKind::Lost {
            write!(f, "the lease was lost: {}", d.what)
        } else {
            write!(f, "{}: {}", d.what, d.kind)
        }
    }
}

/// Writes the key as `{:?}` shows it, its first 64 characters only, with
/// `...` inside the quotes when it was cut.
fn write_key(f: &mut impl fmt::Write, key: &str) -> fmt::Result {
    match key.char_indices().nth(KEY_SHOWN_CHARS) {
        None => write!(f, "{key:?}"),
        Some((cut, _)) => {
            let shown = format!("{:?}", &key[..cut]);
            write!(f, "{}...\"", &shown[..shown.len() - 1])
        }
    }
}

/// The key as error texts show it (quoted, escaped, cut to 64 characters).
#[doc(hidden)]
pub fn shown_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len().min(256) + 2);
    let _ = write_key(&mut out, key);
    out
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({:?}: {})", self.0.kind, self)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_have_their_shape() {
        let e = Error::new(ErrorKind::InUse, "held past the hold's wait").for_key("invoices", "9");
        assert_eq!(
            e.to_string(),
            "lock invoices: key \"9\": held past the hold's wait: in use"
        );
        let e = Error::lost("it was revoked at its maxHold").for_key("invoices", "m");
        assert_eq!(
            e.to_string(),
            "lock invoices: key \"m\": the lease was lost: it was revoked at its maxHold"
        );
        assert_eq!(
            Error::closed().to_string(),
            "store: the store is closed: closed"
        );
        let e = Error::closed().for_lock("a");
        assert_eq!(e.to_string(), "lock a: the store is closed: closed");
    }

    #[test]
    fn long_and_odd_keys_are_escaped_and_cut() {
        let e = Error::closed().for_key("l", "a\"b\n");
        assert_eq!(
            e.to_string(),
            "lock l: key \"a\\\"b\\n\": the store is closed: closed"
        );
        let long = "x".repeat(100);
        let e = Error::closed().for_key("l", &long);
        assert_eq!(
            e.to_string(),
            format!(
                "lock l: key \"{}...\": the store is closed: closed",
                "x".repeat(64)
            )
        );
        assert_eq!(e.key(), Some(long.as_str()));
        let exactly = "y".repeat(64);
        let e = Error::closed().for_key("l", &exactly);
        assert_eq!(
            e.to_string(),
            format!("lock l: key \"{exactly}\": the store is closed: closed")
        );
    }
}
