//! Pointers to a key's record, each type saying what keeps the record
//! alive while it is used (the argument in full is `record`'s "The
//! record's lifetime"; a record is retired only from a state word of
//! exactly 0, so anything that keeps a bit set keeps the record):
//!
//! | type | who has it | kept alive by |
//! | --- | --- | --- |
//! | [`HeldRecord`] | a grant: `Grant`, `Lease`, `LeaseState` | `HELD`, until the grant's one release |
//! | [`LineRecord`] | a waiter whose node is linked in the line | `QUEUED` while linked; `HELD` once granted |
//!
//! Both are plain copies of a pointer: a lease and its `LeaseState` carry
//! the same `HeldRecord`, and the status CAS decides which of them
//! releases. Neither is dereferenced after the event that ends its reason
//! (the release; a final status other than a grant).

use crate::record::Record;
use std::ptr::NonNull;

/// The record of a key some grant holds.
#[derive(Clone, Copy)]
pub(crate) struct HeldRecord(NonNull<Record>);

// SAFETY: a `Record` is `Sync` (all its shared state is atomics and its
// line lock), and a `HeldRecord` is used only to release its grant, which
// is valid from any thread while the grant is held.
unsafe impl Send for HeldRecord {}
// SAFETY: as for `Send`; a shared `HeldRecord` offers only its address.
unsafe impl Sync for HeldRecord {}

impl HeldRecord {
    /// `record`, whose key the caller has just been granted.
    #[inline(always)]
    pub(crate) fn of(record: &Record) -> HeldRecord {
        HeldRecord(NonNull::from(record))
    }

    /// Lets the grant with `fence` of `permits` go, handing the key to the
    /// line's first waiter (or, with several permits, every head waiter
    /// that now fits).
    ///
    /// # Safety
    /// The grant is still held, and this is its one release: after it the
    /// record may be retired at any moment.
    #[inline(always)]
    pub(crate) unsafe fn release(self, fence: u64, permits: u32) {
        // SAFETY: held, so not retired (the caller's promise).
        unsafe { self.0.as_ref() }.release(fence, permits);
    }

    /// The record, for a slot of the maxHold watch to keep.
    pub(crate) fn as_ptr(self) -> *const Record {
        self.0.as_ptr()
    }

    /// The record a slot of the maxHold watch kept by [`as_ptr`](Self::as_ptr).
    ///
    /// # Safety
    /// `record` came from `as_ptr` of a grant that is still held.
    pub(crate) unsafe fn from_ptr(record: *const Record) -> HeldRecord {
        // SAFETY: from `as_ptr`, so not null (the caller's promise).
        HeldRecord(unsafe { NonNull::new_unchecked(record.cast_mut()) })
    }

    /// The record's address: with the fence, names the grant (the store's
    /// registry of timed leases), never dereferenced.
    pub(crate) fn addr(self) -> usize {
        grant_addr(self.0.as_ptr())
    }
}

/// The address of `record`, which with a fence names a grant of its key
/// (the store's registry of timed leases): the one spelling of it, for a
/// [`HeldRecord`] and for whoever looks a grant up by its record (a key's
/// snapshot). Never dereferenced.
pub(crate) fn grant_addr(record: *const Record) -> usize {
    record as usize
}

/// A grant's parts, once a lease owns its one release: the record, the
/// grant's fence (which names it) and the permits it holds.
#[derive(Clone, Copy)]
pub(crate) struct Granted {
    pub(crate) record: HeldRecord,
    pub(crate) fence: u64,
    pub(crate) permits: u32,
}

/// The record in whose line a waiter's node is linked.
#[derive(Clone, Copy)]
pub(crate) struct LineRecord(NonNull<Record>);

// SAFETY: as for `HeldRecord`: the record is `Sync`, and the waiter that
// owns this uses it from whichever thread polls or runs its wait.
unsafe impl Send for LineRecord {}

impl LineRecord {
    /// `record`, in whose line the caller's node was just linked.
    pub(crate) fn of(record: &Record) -> LineRecord {
        LineRecord(NonNull::from(record))
    }

    /// The record.
    ///
    /// # Safety
    /// The node is still linked, or was granted the key and has not
    /// released it: the record is not retired (module doc).
    pub(crate) unsafe fn get<'a>(self) -> &'a Record {
        // SAFETY: the caller's promise.
        unsafe { self.0.as_ref() }
    }
}
