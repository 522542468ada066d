//! What the crates above the core (the server, the clients) share with it,
//! so that each wire word and text has one home: the kind words error
//! replies start with, the key as texts show it, the name and key checks,
//! a builder for texts in the core's shape, the defaults, and the names of
//! a lock's counters.
//!
//! Not for users of the library: everything here is `#[doc(hidden)]` and
//! may change with the protocol.

use crate::error::{Error, ErrorKind};
use crate::key::{IntoKey, KeyBuf};
use crate::lock::LockStats;
use std::borrow::Cow;
use std::time::Duration;

pub use crate::error::shown_key;
pub use crate::key::{check_key, check_name};
pub use crate::lock::DEFAULT_WAIT;
pub use crate::store::DEFAULT_TTL;

impl ErrorKind {
    /// The word an error reply starts with: `INUSE`, `LOST`, ...
    #[doc(hidden)]
    pub fn wire_word(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "INVALID",
            ErrorKind::InUse => "INUSE",
            ErrorKind::Lost => "LOST",
            ErrorKind::Limit => "LIMIT",
            ErrorKind::Closed => "CLOSED",
        }
    }

    /// The kind an error reply's first word stands for, if it is one.
    #[doc(hidden)]
    pub fn from_wire_word(word: &str) -> Option<ErrorKind> {
        [
            ErrorKind::Invalid,
            ErrorKind::InUse,
            ErrorKind::Lost,
            ErrorKind::Limit,
            ErrorKind::Closed,
        ]
        .into_iter()
        .find(|k| k.wire_word() == word)
    }
}

/// What an error is about: the store, a lock, or one key of a lock.
#[derive(Clone, Copy, Debug)]
pub enum Scope<'a> {
    Store,
    Lock(&'a str),
    Key(&'a str, &'a str),
}

/// An error in the core's shape about `scope`: `lock L: key "K": WHAT:
/// KIND` (`... the lease was lost: WHAT` for `lost`).
pub fn error(kind: ErrorKind, scope: Scope<'_>, what: impl Into<Cow<'static, str>>) -> Error {
    let e = Error::new(kind, what);
    match scope {
        Scope::Store => e,
        Scope::Lock(lock) => e.for_lock(lock),
        Scope::Key(lock, key) => e.for_key(lock, key),
    }
}

impl LockStats {
    /// The counters by the names `STATS` and `INFO` give them, in order.
    #[doc(hidden)]
    pub fn fields(&self) -> [(&'static str, u64); 7] {
        [
            ("live_keys", self.live_keys as u64),
            ("held_keys", self.held_keys as u64),
            ("waiters", self.waiters as u64),
            ("grants", self.grants),
            ("timeouts", self.timeouts),
            ("revocations", self.revocations),
            ("expirations", self.expirations),
        ]
    }

    /// Sets the counter `fields` names `name`; `false` for a name it does
    /// not give (a newer server's, say).
    #[doc(hidden)]
    pub fn set_field(&mut self, name: &str, n: u64) -> bool {
        let count = usize::try_from(n).unwrap_or(usize::MAX);
        match name {
            "live_keys" => self.live_keys = count,
            "held_keys" => self.held_keys = count,
            "waiters" => self.waiters = count,
            "grants" => self.grants = n,
            "timeouts" => self.timeouts = n,
            "revocations" => self.revocations = n,
            "expirations" => self.expirations = n,
            _ => return false,
        }
        true
    }
}

/// A key's text: text as it is, a number as its decimal text.
pub fn key_text<'k, K: IntoKey<'k>>(key: K) -> String {
    let mut buf = KeyBuf::new();
    key.into_key().text(&mut buf).to_owned()
}

/// A duration as the core's texts write it: `300ms`, `2s`, `1m`.
pub fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms >= 60_000 && ms % 60_000 == 0 {
        format!("{}m", ms / 60_000)
    } else if ms >= 1000 && ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_its_word() {
        for kind in [
            ErrorKind::Invalid,
            ErrorKind::InUse,
            ErrorKind::Lost,
            ErrorKind::Limit,
            ErrorKind::Closed,
        ] {
            assert_eq!(ErrorKind::from_wire_word(kind.wire_word()), Some(kind));
        }
        assert_eq!(ErrorKind::from_wire_word("ERR"), None);
    }

    #[test]
    fn texts_in_the_core_shape() {
        let e = error(ErrorKind::Invalid, Scope::Key("inv", "7"), "w");
        assert_eq!(e.to_string(), "lock inv: key \"7\": w: invalid");
        let e = error(ErrorKind::Lost, Scope::Key("inv", "7"), "why");
        assert_eq!(
            e.to_string(),
            "lock inv: key \"7\": the lease was lost: why"
        );
        let e = error(ErrorKind::Invalid, Scope::Store, "w");
        assert_eq!(e.to_string(), "store: w: invalid");
        assert_eq!(
            shown_key(&"é".repeat(70)),
            format!("\"{}...\"", "é".repeat(64))
        );
        assert_eq!(duration_text(Duration::from_millis(2500)), "2500ms");
        assert_eq!(key_text(-17i64), "-17");
        assert_eq!(key_text(i128::MIN), i128::MIN.to_string());
        assert_eq!(key_text("x"), "x");
        // Every name `fields` gives is one `set_field` takes back.
        let mut stats = LockStats::default();
        for (i, (name, _)) in LockStats::default().fields().into_iter().enumerate() {
            assert!(stats.set_field(name, i as u64 + 1), "{name}");
        }
        let back: Vec<u64> = stats.fields().iter().map(|(_, n)| *n).collect();
        assert_eq!(back, [1, 2, 3, 4, 5, 6, 7]);
        assert!(!stats.set_field("nothing", 1));
        assert_eq!(duration_text(Duration::from_secs(120)), "2m");
    }
}
