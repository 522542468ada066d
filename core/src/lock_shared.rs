//! What every handle of one named lock shares: its permit count, its key
//! [`Table`] and its event counters. Beside the table, below leases and locks, so a lease can
//! count its revocation without knowing what a `Lock` is.

use crate::board::Boards;
use crate::sync::AtomicU64;
use crate::table::Table;

/// A lock's keys and counters, one per name per store.
pub(crate) struct LockShared {
    pub(crate) name: Box<str>,
    /// Each key's permits (1: a plain keyed lock), fixed while the name is
    /// known to the store.
    pub(crate) permits: u32,
    pub(crate) table: Table,
    pub(crate) timeouts: AtomicU64,
    pub(crate) revocations: AtomicU64,
    pub(crate) expirations: AtomicU64,
    /// The boards of this lock's elections, by name (`board`).
    pub(crate) elections: Boards,
}

impl LockShared {
    pub(crate) fn new(name: &str, permits: u32, fence_floor: u64) -> LockShared {
        LockShared {
            name: name.into(),
            permits,
            table: Table::new(fence_floor),
            timeouts: AtomicU64::new(0),
            revocations: AtomicU64::new(0),
            expirations: AtomicU64::new(0),
            elections: Default::default(),
        }
    }

    pub(crate) fn id(&self) -> usize {
        self as *const LockShared as usize
    }
}
