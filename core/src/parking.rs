//! Where a thread sleeps while a word's bit is held by another thread, and
//! how it is woken: a fixed table of buckets (a mutex and a condvar each),
//! the bucket chosen by the word's address, as parking_lot_core's parking
//! lot keys its queues by address. Used for a line's lock bit (`record`).
//!
//! The handshake, for a word whose owner lets its bit go with a swap:
//! - the sleeper first marks the word (a bit of its own, set by a CAS
//!   while the owner's bit is set), then, under the bucket's mutex, checks
//!   with `still_wanted` that the mark is still there and only then waits;
//! - the owner's swap clears both bits and, when it saw the mark, takes the
//!   bucket's mutex and wakes every sleeper of the bucket.
//!
//! No wake is lost: the mark and the swap are read-modify-writes of one
//! word, so either the swap comes after the mark in the word's order (it
//! sees the mark and wakes), or the mark's CAS fails. If the owner takes
//! the mutex before the sleeper's check, the mutex orders its swap before
//! that check, which then sees the bits gone and does not wait; if after,
//! the sleeper is already waiting (the condvar let the mutex go as it
//! began to wait) and is woken. Several words share a bucket, so a wake
//! may be for another word: a sleeper always looks at its word again.

use crate::sync::{lock, Condvar, Mutex};

/// A mutex and a condvar; sleepers of every word hashed here wait on it.
struct Bucket {
    mutex: Mutex<()>,
    woken: Condvar,
}

impl Bucket {
    #[cfg(loom)]
    fn new() -> Self {
        Bucket {
            mutex: Mutex::new(()),
            woken: Condvar::new(),
        }
    }
}

/// Buckets: enough that threads sleeping on different keys rarely share
/// one (a shared bucket costs only a spurious wake).
#[cfg(not(loom))]
const BUCKETS: usize = 64;

#[cfg(not(loom))]
static TABLE: [Bucket; BUCKETS] = [const {
    Bucket {
        mutex: Mutex::new(()),
        woken: Condvar::new(),
    }
}; BUCKETS];

#[cfg(loom)]
const BUCKETS: usize = 2;

#[cfg(loom)]
loom::lazy_static! {
    static ref TABLE: Vec<Bucket> = (0..BUCKETS).map(|_| Bucket::new()).collect();
}

/// The bucket of the word at `addr`.
fn bucket(addr: usize) -> &'static Bucket {
    // Records are cache-line aligned: the low 6 bits say nothing. A
    // Fibonacci multiply spreads the rest over the table.
    let h = (addr >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize);
    &TABLE[(h >> (usize::BITS - 6)) % BUCKETS]
}

/// Sleeps until [`unpark_all`] of `addr` (or a spurious wake), if
/// `still_wanted` answers true under the bucket's mutex; answers at once
/// otherwise. The caller looks at its word again either way.
pub(crate) fn park(addr: usize, still_wanted: impl FnOnce() -> bool) {
    let b = bucket(addr);
    let guard = lock(&b.mutex);
    if still_wanted() {
        // A poisoned mutex guards nothing here (its data is `()`).
        drop(b.woken.wait(guard).unwrap_or_else(|p| p.into_inner()));
    }
}

/// Wakes every thread parked on `addr`'s bucket (some may be sleeping on
/// other words: they look again and sleep on).
pub(crate) fn unpark_all(addr: usize) {
    let b = bucket(addr);
    let _guard = lock(&b.mutex);
    b.woken.notify_all();
}
