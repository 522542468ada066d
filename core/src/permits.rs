//! The book of a key of a lock of several permits: which grants hold it.
//!
//! A lock of one permit needs no book: its state word's `HELD` bit says
//! everything. A lock of `total > 1` permits keeps the count of permits
//! held in its records' state words (so a take that fits is one CAS, see
//! `record`'s "Several permits"), and each record a [`Permits`]: its
//! count and the book of its current grants, which `inspect` and fenced
//! writes read.
//!
//! The book is in two parts:
//! - [`Slots`]: the fences of up to [`SLOTS`] grants, each claimed and
//!   cleared by its own grant with one atomic operation, without the
//!   record's line lock. A grant is in at most one slot; 0 is an empty one
//!   (no grant has fence 0).
//! - [`Overflow`]: the grants that found every slot taken, under the line
//!   lock (a key with more than [`SLOTS`] holders at once).
//!
//! Invariants:
//! - Every current grant is in exactly one part from the moment its
//!   taker returns its fence until its release begins; a release takes it
//!   out of the book before it gives its permits back to the count. The
//!   taker books it: a grant served from the line too, once its waiter
//!   sees it (so it lands in the waiter's own slot).
//! - The overflow is searched, not kept in order: a grant drawn earlier
//!   may join it after a later one (its taker claims a slot, or books, only
//!   after drawing its fence).

use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// Grants of one key whose fences sit in slots, beyond which they go to
/// the overflow. A semaphore of a few permits never overflows; a
/// read-write lock of many readers does past 8 at once.
pub(crate) const SLOTS: usize = 8;

/// A key's permits: the count, and the book of who holds them.
pub(crate) struct Permits {
    total: u32,
    slots: Slots,
    /// The key's line's length (a record of one permit keeps it in its
    /// state word, where this one keeps its count): written only by the
    /// owner of the record's line lock, read by anyone for statistics.
    waiters: AtomicU32,
}

impl Permits {
    pub(crate) fn new(total: u32) -> Permits {
        debug_assert!(total > 1);
        Permits {
            total,
            slots: Slots::new(total),
            waiters: AtomicU32::new(0),
        }
    }

    /// Whether `want` more permits fit beside `held`.
    #[inline]
    pub(crate) fn fits(&self, held: u32, want: u32) -> bool {
        // Mutant for loom-tests/README.md: a grant past the count.
        if cfg!(holdline_mutant = "grant_past_count") {
            return true;
        }
        want <= self.total - held
    }

    pub(crate) fn slots(&self) -> &Slots {
        &self.slots
    }

    /// The line's length, as its last line-lock owner left it.
    pub(crate) fn waiters(&self) -> u32 {
        // Relaxed: a QLOCK owner reads its own writes (or, after taking
        // QLOCK with Acquire, the previous owner's); anyone else wants a
        // recent count and nothing it publishes.
        self.waiters.load(Ordering::Relaxed)
    }

    /// Sets the line's length: only the line lock's owner calls it.
    pub(crate) fn set_waiters(&self, n: u32) {
        // Relaxed: published to the next QLOCK owner by the unlock's Release.
        self.waiters.store(n, Ordering::Relaxed);
    }
}

/// The fences of up to [`SLOTS`] current grants (0: empty).
///
/// Relaxed throughout: a slot carries only its own fence, which nobody
/// reads anything else through. What a grant publishes to the next holder
/// goes through the state word's CAS, as for a lock of one permit; the
/// slots are coherent on their own (one location each), so a claim never
/// takes a slot another grant holds, and a look for a fence sees it from
/// its claim until its clear.
///
/// Each slot has a cache line of its own, and a thread starts its search
/// at its own slot ([`home`]): threads taking permits of one key side by
/// side then each write a line of their own, and only the state word's
/// line moves between their cores. (One line for all the slots was
/// written by every grant and every release: two more line transfers a
/// hold.) A key of `n` permits has `min(n, SLOTS)` slots.
pub(crate) struct Slots {
    fences: Box<[CachePadded<AtomicU64>]>,
}

impl Slots {
    fn new(total: u32) -> Slots {
        let used = (total as usize).min(SLOTS);
        Slots {
            fences: (0..used)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Puts `fence` in an empty slot, searching from this thread's own;
    /// `false`: every slot is taken.
    pub(crate) fn claim(&self, fence: u64) -> bool {
        self.claim_from(home(), fence)
    }

    /// Empties the slot holding `fence`, searching from this thread's own
    /// (where its grant most likely put it); `false`: no slot holds it.
    pub(crate) fn clear(&self, fence: u64) -> bool {
        self.clear_from(home(), fence)
    }

    /// The slots in search order from `home` (any `u32`, spread over the
    /// slots by a multiply and shift, not a division).
    fn from(&self, home: u32) -> impl Iterator<Item = &AtomicU64> {
        let n = self.fences.len();
        let start = ((u64::from(home) * n as u64) >> 32) as usize;
        let (before, after) = self.fences.split_at(start);
        after.iter().chain(before).map(|slot| &**slot)
    }

    fn claim_from(&self, home: u32, fence: u64) -> bool {
        debug_assert_ne!(fence, 0);
        self.from(home).any(|slot| {
            slot.load(Ordering::Relaxed) == 0
                && slot
                    .compare_exchange(0, fence, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
        })
    }

    fn clear_from(&self, home: u32, fence: u64) -> bool {
        self.from(home).any(|slot| {
            // Only `fence`'s own grant clears its slot, so a plain store.
            slot.load(Ordering::Relaxed) == fence && {
                slot.store(0, Ordering::Relaxed);
                true
            }
        })
    }

    /// The fences in slots now.
    pub(crate) fn fences(&self) -> impl Iterator<Item = u64> + '_ {
        self.fences
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&f| f != 0)
    }
}

/// Where this thread starts its search of a key's slots: threads get
/// starts spread by the golden ratio, in the order they first take
/// permits. Under loom every search starts at the first slot, so that the
/// models do not depend on which of their threads asked first.
#[cfg(not(loom))]
fn home() -> u32 {
    // std's atomic, not the facade's: it only spreads threads over slots
    // and orders nothing (Relaxed), and loom does not build this.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    std::thread_local! {
        static HOME: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
    }
    HOME.try_with(|h| match h.get() {
        Some(home) => home,
        None => {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let home = n.wrapping_mul(0x9e37_79b9);
            h.set(Some(home));
            home
        }
    })
    .unwrap_or(0)
}

#[cfg(loom)]
fn home() -> u32 {
    0
}

/// The fences of the grants that found every slot taken, read and
/// written under the line lock (a fence names its grant; its permits are
/// its lease's to give back).
#[derive(Debug, Default)]
pub(crate) struct Overflow {
    fences: Vec<u64>,
}

impl Overflow {
    /// Books a grant with `fence`.
    pub(crate) fn book(&mut self, fence: u64) {
        self.fences.push(fence);
    }

    /// Ends the grant with `fence`; `false`: no such grant here.
    pub(crate) fn end(&mut self, fence: u64) -> bool {
        let Some(at) = self.fences.iter().position(|&f| f == fence) else {
            return false;
        };
        self.fences.swap_remove(at);
        if self.fences.is_empty() && self.fences.capacity() > 8 {
            // A burst of holders leaves no standing allocation behind it.
            self.fences = Vec::new();
        }
        true
    }

    /// The fences booked here.
    pub(crate) fn fences(&self) -> impl Iterator<Item = u64> + '_ {
        self.fences.iter().copied()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::ptr;

    proptest! {
        /// Any sequence of grants and ends, by threads starting their
        /// searches anywhere (a grant may end on another thread than the
        /// one that took it), keeps the book (slots and overflow together)
        /// exactly the set of current fences, each in one place.
        #[test]
        fn the_book_holds_each_current_grant_once(
            total in 2u32..20,
            ops in proptest::collection::vec((any::<bool>(), 0usize..32, any::<u32>()), 1..300),
        ) {
            let permits = Permits::new(total);
            let slots = permits.slots();
            let mut overflow = Overflow::default();
            let mut current = BTreeSet::new();
            let mut fence = 0;
            for (grant, pick, home) in ops {
                if grant && current.len() < total as usize {
                    fence += 1;
                    if !slots.claim_from(home, fence) {
                        overflow.book(fence);
                    }
                    current.insert(fence);
                } else if let Some(&f) = current.iter().nth(pick % current.len().max(1)) {
                    prop_assert!(slots.clear_from(home, f) || overflow.end(f));
                    prop_assert!(!slots.clear_from(home, f) && !overflow.end(f));
                    current.remove(&f);
                }
                let mut seen: Vec<u64> = permits.slots().fences().chain(overflow.fences()).collect();
                seen.sort_unstable();
                prop_assert_eq!(seen, current.iter().copied().collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn threads_start_their_searches_at_slots_spread_over_the_key() {
        let slots = Permits::new(100).slots;
        let starts: BTreeSet<usize> = (0..8u32)
            .map(|n| {
                let first = slots.from(n.wrapping_mul(0x9e37_79b9)).next().unwrap();
                slots
                    .fences
                    .iter()
                    .position(|s| ptr::eq(&**s, first))
                    .unwrap()
            })
            .collect();
        assert!(starts.len() >= 6, "eight threads start at {starts:?}");
        // The highest home starts at the last slot.
        assert!(slots.claim_from(u32::MAX, 5));
        assert_eq!(slots.fences[SLOTS - 1].load(Ordering::Relaxed), 5);
    }

    #[test]
    fn slots_are_no_more_than_the_permits_and_overflow_past_them() {
        let two = Permits::new(2);
        assert!(two.slots().claim(7) && two.slots().claim(8));
        assert!(
            !two.slots().claim(9),
            "a third grant of 2 permits has no slot"
        );
        let many = Permits::new(100);
        for f in 1..=SLOTS as u64 {
            assert!(many.slots().claim(f));
        }
        assert!(!many.slots().claim(99));
        let mut overflow = Overflow::default();
        overflow.book(99);
        assert!(!overflow.end(98));
        assert!(overflow.end(99));
    }
}
