//! One key's state: a state word and the FIFO line of waiters behind it,
//! in one cache line ([`Record`]). This module keeps the record, its
//! layout and what it argues as a whole (its lifetime, the orderings); each
//! of its concepts is a submodule, whose doc states its invariants:
//!
//! - `state`: the state word's bits by name ([`StateWord`]), its table and
//!   invariants, and why its two kinds (one permit, `MULTI`) share a type.
//! - `waiter`: a waiter's node ([`Waiter`]), its wake handle and its status
//!   machine, and the final status a granter or closer gives it.
//! - `key_text`: the key's text, inline when short ([`KeyText`]).
//! - `line_links`: the line's intrusive list of waiters and its five ops.
//! - `line_lock`: the `QLOCK` bit: taken, let go, spun and slept on.
//! - `line`: taking the key or standing in line, waiting, leaving,
//!   letting go to the first in line, closing and retiring (one permit).
//! - `line_timer`: the line's length and its one timer for tasks' deadlines.
//! - `multi`: a lock of several permits: its takes, releases, served line
//!   and book of holders.
//!
//! # The record's lifetime, argued once
//!
//! A waiter holds a raw pointer to its record. The record stays allocated
//! while the waiter may use it because: while the node is linked the line is
//! not empty, so `QUEUED` is set and the sweeper (which retires only from
//! exactly `0`) cannot retire it; once `GRANTED`, `HELD` belongs to the
//! waiter and keeps it; after `CLOSED` or `LEFT` the waiter does not touch
//! it again. A waiter that reads its status *while pinned* and finds it not
//! final knows the record was not retired at that instant, so it cannot be
//! freed while the pin lasts: it may then take `QLOCK` (the record may turn
//! `DEAD` under it after a close, which is harmless: `DEAD|QLOCK` is only
//! ever put back to `DEAD`).
//!
//! # Orderings
//!
//! - Taking the key (a CAS that sets `HELD`) and taking `QLOCK` are Acquire;
//!   letting either go is Release: the holder publishes its writes and the
//!   bumped fence to the next holder, the lock owner publishes the line.
//! - Loads of the state word that only choose the next CAS, and every CAS's
//!   failure ordering, are Relaxed: the CAS that succeeds carries the
//!   ordering, and a stale value only costs a retry.
//! - A waiter's final status is stored Release and read Acquire: it carries
//!   the grant (and the fence) from the granter to the new holder.
//! - Stats read the state word (held, line length) with Relaxed peeks: they
//!   want a recent value and nothing it publishes; `is_dead` is such a peek
//!   too (a DEAD peek is confirmed under the shard lock).

mod key_text;
mod line;
mod line_links;
mod line_lock;
mod line_timer;
mod multi;
mod state;
mod waiter;

pub(crate) use key_text::KeyText;
pub(crate) use line::{Deadline, Enqueued, Tried};
pub(crate) use multi::Holders;
pub(crate) use state::StateWord;
pub(crate) use waiter::{wake_all, Bypass, WaitEnd, Waiter, Wakes};

use line_links::Line;
use multi::Woken;
use state::{HELD, MULTI};
use waiter::Wake;

use crate::permits::{Overflow, Permits};
use crate::sync::{AtomicU32, AtomicU64, Ordering, UnsafeCell};
use crossbeam_epoch as epoch;

/// One key of one lock: exactly one cache line, so the state word a holder
/// writes never shares a line with another key's record.
#[cfg_attr(not(loom), repr(align(64)))]
pub(crate) struct Record {
    /// Next record in the table bucket's chain.
    pub(crate) next: epoch::Atomic<Record>,
    /// The low 32 bits of the key's hash: they choose the bucket (the
    /// table has fewer than 2^32 per shard) and filter key comparisons.
    pub(crate) hash: u32,
    pub(crate) key: KeyText,
    state: AtomicU32,
    /// See `state`'s module doc: the latest grant's fence while held, the next's while free.
    fence: AtomicU64,
    line: UnsafeCell<Line>,
    /// What does not fit the cache line: made at birth for a lock of
    /// several permits, else under `QLOCK` when a task first waits; never
    /// replaced, and freed with the record.
    extra: UnsafeCell<Option<Box<Extra>>>,
}

/// A record's state beyond its cache line.
struct Extra {
    /// Read and written under `QLOCK`.
    locked: UnsafeCell<Locked>,
    /// A lock of several permits (`MULTI`): its count and the slots of its
    /// book, which grants and releases use without `QLOCK`.
    permits: Option<Permits>,
}

/// What a record keeps beyond its cache line under `QLOCK`.
#[derive(Default)]
struct Locked {
    /// `MULTI`: the grants beyond the book's slots.
    overflow: Overflow,
    /// When the earliest line-timer entry still pending for the key comes
    /// due (ms): see `line_timer`'s module doc.
    line_timer_ms: Option<u64>,
}

impl Extra {
    fn new(permits: Option<Permits>) -> Extra {
        Extra {
            locked: UnsafeCell::new(Locked::default()),
            permits,
        }
    }
}

/// Under loom a record's end is a write to its line, so a `QLOCK` owner
/// still touching the line of a record the epoch freed (a retire or a free
/// that came too early) is a causality violation, not missed.
#[cfg(loom)]
impl Drop for Record {
    fn drop(&mut self) {
        self.line.with_mut(|_| ());
    }
}

// SAFETY: the raw pointers in `line` are only dereferenced by the `QLOCK`
// owner, and point at `Waiter`s that stay alive while linked (module doc).
unsafe impl Send for Record {}
// SAFETY: as for `Send`; all other fields are atomics or immutable.
unsafe impl Sync for Record {}

impl Record {
    /// A record whose creator already holds `take.want` of its key's
    /// `take.total` permits, with fence `fence`.
    pub(crate) fn new_held(hash: u64, key: &str, fence: u64, take: Take) -> Record {
        let (state, extra) = if take.total == 1 {
            (HELD, None)
        } else {
            let permits = Permits::new(take.total);
            // Fresh slots, at least two: the first grant has one.
            let booked = permits.slots().claim(fence);
            debug_assert!(booked);
            let extra = Box::new(Extra::new(Some(permits)));
            (MULTI.with_taken(take.want), Some(extra))
        };
        Record {
            next: epoch::Atomic::null(),
            hash: hash as u32,
            key: KeyText::new(key),
            state: AtomicU32::new(state),
            fence: AtomicU64::new(fence),
            line: UnsafeCell::new(Line::new()),
            extra: UnsafeCell::new(extra),
        }
    }

    /// The uncontended acquire: free, no line, nobody changing it. `Err`:
    /// the state word as found (a test before the CAS, so a held key
    /// costs a load, not a locked instruction).
    #[inline(always)]
    pub(crate) fn try_lock_fast(&self) -> Result<(), u32> {
        // Relaxed: it only chooses whether to try the CAS, which carries
        // the ordering; a word with HELD set means the key was held at
        // that instant, which is all a `Try` that answers `None` claims.
        let s = self.state.load(Ordering::Relaxed);
        if s != 0 {
            return Err(s);
        }
        // Acquire: pairs with the Release of the previous holder's release,
        // so this holder sees that holder's writes and the bumped fence.
        self.state
            .compare_exchange(0, HELD, Ordering::Acquire, Ordering::Relaxed)
            .map(|_| ())
    }

    /// The fence of the grant the caller holds.
    #[inline]
    pub(crate) fn fence(&self) -> u64 {
        // Relaxed: the caller's acquiring transition (CAS or GRANTED status,
        // both Acquire) ordered the granter's store before this load.
        self.fence.load(Ordering::Relaxed)
    }

    /// The fence a put must carry to be accepted now, if the key is held.
    pub(crate) fn current_fence_if_held(&self) -> Option<u64> {
        // Acquire: a HELD written by a later grant carries (through the
        // release sequence) the release that bumped the fence past the old
        // holder's, so a stale fence cannot be read back as current.
        let held = self.state.load(Ordering::Acquire).held();
        let fence = self.fence.load(Ordering::Relaxed);
        held.then_some(fence)
    }

    /// Whether a take of `want` permits would be granted now, without a
    /// line (a guess: the word may change before any take).
    pub(crate) fn would_grant(&self, want: u32) -> bool {
        // Relaxed: a guess that orders nothing.
        let s = self.state.load(Ordering::Relaxed);
        if !s.multi() {
            return s == 0;
        }
        !s.dead() && !s.queued() && self.permits().fits(s.held_permits(), want)
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.state.load(Ordering::Relaxed).dead()
    }

    pub(crate) fn is_held(&self) -> bool {
        self.state.load(Ordering::Relaxed).held()
    }

    pub(crate) fn waiter_count(&self) -> u32 {
        let s = self.state.load(Ordering::Relaxed);
        if !s.multi() {
            s.waiters()
        } else {
            self.permits().waiters()
        }
    }

    /// The fence the next grant would carry if the key were free now:
    /// this minus the record's first fence is how many grants it made (the
    /// table keeps the first fences' sum, so a record spends no room on it).
    pub(crate) fn grant_mark(&self) -> u64 {
        let s = self.state.load(Ordering::Acquire);
        let fence = self.fence.load(Ordering::Relaxed);
        // Several permits: `fence` is always the latest grant's.
        fence + u64::from(s.held_or_multi())
    }

    /// The fence a new record for this key must start from once this one is
    /// retired: greater than every fence it granted.
    pub(crate) fn next_fence_after_retire(&self) -> u64 {
        let multi = self.state.load(Ordering::Relaxed).multi();
        self.fence.load(Ordering::Relaxed) + u64::from(multi)
    }
}

impl Record {
    /// The record's [`Extra`], if it has one. Only a `MULTI` record's may
    /// be asked for without `QLOCK`: it was made at birth and is never
    /// replaced, where another record's is made under `QLOCK`.
    fn extra(&self) -> Option<&Extra> {
        // SAFETY: the box, once there, is never replaced or freed before
        // the record (see above for who may ask when).
        self.extra.with(|e| unsafe { (*e).as_deref() })
    }

    /// The key's permits (count and book slots) of a `MULTI` record.
    fn permits(&self) -> &Permits {
        self.extra()
            .and_then(|e| e.permits.as_ref())
            .expect("a MULTI record has its permits")
    }

    /// Runs `f` on what the record keeps under `QLOCK`, its [`Extra`] made
    /// on first need (once per record, freed with it: an allocation under
    /// QLOCK, once).
    ///
    /// # Safety
    /// The caller owns QLOCK, which guards it.
    unsafe fn with_locked<R>(&self, f: impl FnOnce(&mut Locked) -> R) -> R {
        let extra: *const Extra = match self.extra() {
            Some(e) => e,
            // SAFETY: under QLOCK (the caller's contract), and a record
            // without an Extra is not MULTI, so nobody reads the cell
            // without QLOCK.
            None => self.extra.with_mut(|e| unsafe {
                let made: &Extra = (*e).insert(Box::new(Extra::new(None)));
                made as *const Extra
            }),
        };
        // SAFETY: QLOCK gives exclusive access to `locked`; the box lives
        // as long as the record.
        unsafe { (*extra).locked.with_mut(|l| f(&mut *l)) }
    }
}

/// What one grant takes of a key: `want` of its lock's `total` permits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Take {
    pub(crate) total: u32,
    pub(crate) want: u32,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_record_and_a_waiter_are_small() {
        // A held key with no waiters: the record (plus its key text and a
        // bucket slot, measured in tests/memory.rs). A waiter: one node.
        assert_eq!(std::mem::size_of::<Record>(), 64, "one cache line");
        assert_eq!(std::mem::align_of::<Record>(), 64);
        // A waiter: its links, status, count, fence, wake handle and
        // bypass bound, within one cache line.
        assert!(
            std::mem::size_of::<Waiter>() <= 64,
            "{}",
            std::mem::size_of::<Waiter>()
        );
    }
}
