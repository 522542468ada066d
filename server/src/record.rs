//! One record per lease: what the server knows of a grant, made once at
//! the grant and shared (one `Arc`) by the holding session, the clients'
//! table (CLIENT LIST, INSPECT), the observers, the events and the page.
//! A new fact about a lease is one field here; its note is set here and
//! read by all.
//!
//! [`HeldKey`] is the typed pair (lock, key) by which a connection files
//! what it holds and waits for, and observers what they observe.

use holdline::{EndReason, Signal};
use serde::{Serialize, Serializer};
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

/// A connection's leases (or their watches) by lease id. Ids are the
/// server's, never a client's choice, so foldhash's few instructions do
/// where SipHash's defence against chosen keys is not needed.
pub type ByLeaseId<V> = HashMap<u64, V, foldhash::fast::RandomState>;

/// A lock's name and a key: one allocation, split where the lock ends.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HeldKey {
    /// The lock's name, then the key.
    text: Box<str>,
    /// Where the lock's name ends in `text`.
    split: usize,
}

impl HeldKey {
    pub fn new(lock: &str, key: &str) -> HeldKey {
        let mut text = String::with_capacity(lock.len() + key.len());
        text.push_str(lock);
        text.push_str(key);
        HeldKey {
            text: text.into_boxed_str(),
            split: lock.len(),
        }
    }

    pub fn lock(&self) -> &str {
        &self.text[..self.split]
    }

    pub fn key(&self) -> &str {
        &self.text[self.split..]
    }
}

/// By lock, then key (as the page lists held keys).
impl Ord for HeldKey {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.lock(), self.key()).cmp(&(other.lock(), other.key()))
    }
}

impl PartialOrd for HeldKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for HeldKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{:?}", self.lock(), self.key())
    }
}

/// The connection a lease belongs to, as its events name it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub id: u64,
    pub name: Option<String>,
    pub addr: String,
}

/// One lease, as everyone but its session's core handle sees it.
pub struct LeaseRecord {
    /// The server's lease id.
    pub id: u64,
    pub held_key: HeldKey,
    /// The store it is held in: 0 on a single node; in a cluster, its
    /// partition's store id.
    pub store: u64,
    pub fence: u64,
    pub permits: u32,
    /// The holding connection (made once per connection, again on
    /// SETNAME).
    pub holder: Arc<Holder>,
    /// Its loss signal, while its session holds it: whether the core
    /// ended it before its connection noticed (observers are told so
    /// before the next grant). Let go with the lease, so that events kept
    /// for `HISTORY` keep no lease (nor its lock) alive.
    signal: Mutex<Option<Signal>>,
    /// What its holder says of it (`NOTE`; empty: nothing).
    note: Mutex<Arc<str>>,
}

impl LeaseRecord {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: u64,
        held_key: HeldKey,
        store: u64,
        fence: u64,
        permits: u32,
        holder: Arc<Holder>,
        signal: Signal,
        note: Arc<str>,
    ) -> LeaseRecord {
        LeaseRecord {
            id,
            held_key,
            store,
            fence,
            permits,
            holder,
            signal: Mutex::new(Some(signal)),
            note: Mutex::new(note),
        }
    }

    pub fn lock(&self) -> &str {
        self.held_key.lock()
    }

    pub fn key(&self) -> &str {
        self.held_key.key()
    }

    /// The holding connection's client id.
    pub fn client(&self) -> u64 {
        self.holder.id
    }

    /// Whether the core ended it (lost, not released) while its session
    /// still held it.
    pub fn is_lost(&self) -> bool {
        self.signal().is_some_and(|s| s.is_aborted())
    }

    /// Why the core ended it, once it has (while its session holds it).
    pub fn end_reason(&self) -> Option<EndReason> {
        self.signal()?.reason()
    }

    fn signal(&self) -> Option<Signal> {
        self.signal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Its session let the lease go, and told its observers: the record
    /// keeps nothing of the core's.
    pub fn forget_signal(&self) {
        self.signal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    /// The note now.
    pub fn note(&self) -> Arc<str> {
        self.note
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the note (the caller checked it is well formed).
    pub fn set_note(&self, note: Arc<str>) {
        *self.note.lock().unwrap_or_else(PoisonError::into_inner) = note;
    }
}

impl fmt::Debug for LeaseRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseRecord")
            .field("id", &self.id)
            .field("held_key", &self.held_key)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

/// As an event shows its lease: lock, key, fence, permits, lease, holder.
impl Serialize for LeaseRecord {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(6))?;
        map.serialize_entry("lock", self.lock())?;
        map.serialize_entry("key", self.key())?;
        map.serialize_entry("fence", &self.fence)?;
        map.serialize_entry("permits", &self.permits)?;
        map.serialize_entry("lease", &self.id)?;
        map.serialize_entry("holder", &*self.holder)?;
        map.end()
    }
}

/// A lease filed by its held key: a connection's leases in a set looked
/// up by [`HeldKey`], without a second copy of the key.
#[derive(Clone, Debug)]
pub struct ByKey(pub Arc<LeaseRecord>);

impl Borrow<HeldKey> for ByKey {
    fn borrow(&self) -> &HeldKey {
        &self.0.held_key
    }
}

impl PartialEq for ByKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.held_key == other.0.held_key
    }
}

impl Eq for ByKey {}

impl Hash for ByKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.held_key.hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_key_splits_where_its_lock_ends_and_sorts_by_lock_then_key() {
        let k = HeldKey::new("inv", "9\u{0}x");
        assert_eq!((k.lock(), k.key()), ("inv", "9\u{0}x"));
        assert_ne!(HeldKey::new("ab", "c"), HeldKey::new("a", "bc"));
        let mut keys = [
            HeldKey::new("ab", "a"),
            HeldKey::new("a", "bc"),
            HeldKey::new("a", "b"),
        ];
        keys.sort();
        let shown: Vec<_> = keys.iter().map(|k| (k.lock(), k.key())).collect();
        assert_eq!(shown, [("a", "b"), ("a", "bc"), ("ab", "a")]);
    }
}
