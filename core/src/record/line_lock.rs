//! The line's lock: the `QLOCK` bit of the state word, taken with a CAS
//! (Acquire) and let go with a swap (Release), spun on briefly and slept
//! on after, at the record's address in [`crate::parking`].
//!
//! Invariants (see `state` for the word's): while `QLOCK` is set only its
//! owner changes the word, but for a waiter adding `QSLEEP` before it
//! sleeps; the owner lets go with a swap to the word it locked from,
//! updated (neither bit set), and wakes the sleepers when the swap saw
//! `QSLEEP`, so no wake is lost.

use super::Record;
use super::StateWord;
use crate::counters::{count, Event};
use crate::parking;
use crate::spin::Backoff;
use crate::sync::Ordering;
use std::ptr;

/// Whether an unlock that swapped out `was` wakes the line's sleepers.
/// (Mutant for loom-tests/README.md: an unlock that never does.)
#[inline(always)]
fn wakes_sleepers(was: u32) -> bool {
    was.has_sleepers() && !cfg!(holdline_mutant = "unlock_wakes_none")
}

impl Record {
    /// Takes QLOCK if the word is still `s` (without QLOCK); `Err`: the
    /// word now. Acquire: to see the line as the previous owner left it.
    /// Weak: every caller loops.
    #[inline(always)]
    pub(super) fn try_lock_line_from(&self, s: u32) -> Result<(), u32> {
        self.state
            .compare_exchange_weak(s, s.with_locked(), Ordering::Acquire, Ordering::Relaxed)
            .map(drop)
    }

    /// Spins until it owns QLOCK; answers the word's value without QLOCK.
    /// The caller must know the record is alive; if it may be DEAD (a
    /// caller that is only pinned), it lets the lock go unchanged when the
    /// answer has DEAD (`DEAD|QLOCK` only ever goes back to `DEAD`).
    pub(super) fn lock_line(&self) -> u32 {
        let mut s = self.state.load(Ordering::Relaxed);
        let mut backoff = Backoff::new();
        loop {
            if s.locked() {
                s = self.wait_line_unlocked(s, &mut backoff);
                continue;
            }
            match self.try_lock_line_from(s) {
                Ok(()) => return s,
                Err(now) => s = now,
            }
        }
    }

    /// Lets QLOCK go, leaving the word `s` (the value it was locked from,
    /// updated: neither `QLOCK` nor `QSLEEP`), and wakes whoever sleeps
    /// for it. A swap, not a store: a waiter may have added `QSLEEP` since
    /// the lock was taken. `order`: Release, but for one mutant's.
    #[inline]
    pub(super) fn unlock_line(&self, s: u32, order: Ordering) {
        debug_assert!(!s.locked() && !s.has_sleepers(), "{s:#x}");
        let was = self.state.swap(s, order);
        if wakes_sleepers(was) {
            self.wake_line_sleepers();
        }
    }

    #[cold]
    #[inline(never)]
    fn wake_line_sleepers(&self) {
        parking::unpark_all(ptr::from_ref(self).addr());
    }

    /// `s` (just loaded) has QLOCK: spends one round of `backoff` and
    /// answers the word loaded again, or, once the backoff says so, sleeps
    /// until the owner lets QLOCK go (marking the word `QSLEEP` first, so
    /// its unlock wakes us; see [`crate::parking`]).
    #[cold]
    pub(super) fn wait_line_unlocked(&self, s: u32, backoff: &mut Backoff) -> u32 {
        if backoff.snooze() {
            return self.state.load(Ordering::Relaxed);
        }
        // Relaxed: the mark and the owner's swap are read-modify-writes of
        // this word, so their order decides who sees whom; the parking
        // bucket's mutex orders the rest (crate::parking).
        let marked = s.has_sleepers()
            || self
                .state
                .compare_exchange(s, s.with_sleepers(), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        if marked {
            count(Event::LineLockPark);
            parking::park(ptr::from_ref(self).addr(), || {
                // Relaxed: under the bucket's mutex (crate::parking).
                let now = self.state.load(Ordering::Relaxed);
                now.locked() && now.has_sleepers()
            });
        }
        self.state.load(Ordering::Relaxed)
    }
}
