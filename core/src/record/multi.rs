//! Several permits: a record of a lock of several permits (`MULTI`), its
//! takes and releases, the serving of its line, and the book of who holds
//! it ([`Record::holders`]).
//!
//! # Several permits
//!
//! A record with `MULTI` belongs to a lock of several permits. Its word
//! counts the permits held (bits 4..24, so a record of several permits
//! keeps its line's length in its [`Permits`] instead), and `HELD` says the
//! count is not zero. A take that fits while nobody waits is one CAS that
//! adds to the count, from a word without `QLOCK`, `QUEUED` or `DEAD`, as
//! tokio's batch semaphore takes a free permit; a release with nobody in
//! line is one CAS that takes from it. So the uncontended paths of one
//! permit never succeed on such a record (its word is never exactly `0` or
//! `HELD`), and the state word's invariants still hold: the line's first
//! waiter does not fit, so something is held (`QUEUED` implies `HELD`). A
//! release that finds a line, or a waiter leaving the head of the line,
//! takes `QLOCK` and grants in order every head waiter that now fits, and
//! none behind one that does not (no overtaking); a newcomer's CAS fails
//! while anyone waits, so it cannot overtake either, unless the line is
//! `OPEN`: its first waiter, which does not fit yet, was made with a
//! bypass bound that has not passed (bounded bypass; a reader may join
//! readers ahead of a waiting writer only within the writer's bound). The
//! serving of the line sets `OPEN`, or clears it once the bound passed
//! and then serves the line as it stands in order (`INORDER`), as a lock
//! of one permit does (`line`'s `hand_on`).
//!
//! Every grant draws its fence with one `fetch_add` on `fence`, which for
//! such a record is always the latest grant's (held or not), and puts it in
//! the key's book ([`Permits`]' slots, else the overflow under `QLOCK`)
//! before its taker returns; a release takes it out of the book before it
//! gives its permits back. A waiter's fence travels in its node, since one
//! release may grant several, and the waiter books it itself once it sees
//! its grant ([`Record::take_served`]), in its own slot rather than the
//! granter's.

use super::line::{lets_go_to_offer, may_offer, wake_roused};
use super::waiter::{finish_waiter, offer, rouse, GRANTED, PARKED};
use super::{Enqueued, Record, StateWord, Tried, WaitEnd, Waiter, Wake};
use crate::counters::{count, Event};
use crate::permits::Permits;
use crate::spin::Backoff;
use crate::sync::{AtomicU32, Ordering, Thread};
use std::pin::Pin;

/// Who holds a key now: from the state word for a lock of one permit; for
/// one of several, the count from the word and the grants from the book.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) struct Holders {
    /// Grants holding the key.
    pub(crate) count: u32,
    /// Permits they hold in all.
    pub(crate) permits: u32,
    /// The oldest current grant's fence, and the newest's.
    pub(crate) oldest: Option<u64>,
    pub(crate) newest: Option<u64>,
    /// The latest grant's fence, current or not (0 before any).
    pub(crate) latest: u64,
    /// Whether the grant asked about holds the key.
    pub(crate) asked_holds: bool,
}

/// The wakes of the waiters one release or departure grants, fired once
/// the line lock is let go; the first needs no allocation.
#[derive(Default)]
pub(super) struct Woken {
    first: Option<Wake>,
    more: Vec<Wake>,
    /// The sleeping thread at the head of the line left behind the grants,
    /// roused to spin as the next in line ([`rouse`]).
    roused: Option<Thread>,
    /// A sleeping waiter offered the permits that fit it (bounded bypass).
    offered: Option<Wake>,
}

impl Woken {
    pub(super) fn push(&mut self, wake: Wake) {
        match self.first {
            None => self.first = Some(wake),
            Some(_) => self.more.push(wake),
        }
    }

    /// Fires the wakes of the waiters granted the key, then unparks the
    /// thread roused behind them.
    pub(super) fn wake(self) {
        if let Some(w) = self.first {
            w.wake_granted();
        }
        for w in self.more {
            w.wake_granted();
        }
        if let Some(thread) = self.roused {
            wake_roused(thread);
        }
        if let Some(w) = self.offered {
            w.wake();
        }
    }
}

/// A record of a lock of several permits (`MULTI`): takes and releases
/// with nobody in line are CASes on the count; the line is served under
/// QLOCK (module doc: "Several permits").
impl Record {
    /// Draws the fence of a grant whose permits were just counted and
    /// books it: in a slot, else (every slot taken) in the overflow under
    /// QLOCK.
    fn book_grant(&self, permits: &Permits) -> u64 {
        let fence = self.draw_fence();
        self.book(permits, fence);
        fence
    }

    /// Books the grant with `fence` (taken by the caller, not yet in the
    /// book): in a slot, else in the overflow under QLOCK.
    fn book(&self, permits: &Permits, fence: u64) {
        if !permits.slots().claim(fence) {
            let s = self.lock_line();
            // SAFETY: we own QLOCK.
            unsafe { self.with_locked(|l| l.overflow.book(fence)) };
            // Release: publishes the overflow to the next QLOCK owner.
            self.unlock_line(s, Ordering::Release);
        }
    }

    /// The fence of the grant `waiter` was served from the line (its status
    /// read `Granted`), booked now by its taker when the key has several
    /// permits (`multi`, known to the caller's lock): the granter only drew
    /// it, so the fence goes in the taker's own slot, whose line its
    /// release then clears, and not in the granter's.
    pub(crate) fn take_served(&self, waiter: &Waiter, multi: bool) -> u64 {
        let fence = waiter.granted_fence();
        if multi {
            self.book(self.permits(), fence);
        }
        fence
    }

    /// The next fence of a `MULTI` record, whose `fence` is the latest grant's.
    fn draw_fence(&self) -> u64 {
        // Relaxed: a fence need only be unique and greater than every
        // fence drawn before it, which one location's read-modify-writes
        // give (they are totally ordered, in step with happens-before);
        // the grant's own CAS on the word is what orders the rest.
        self.fence.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Takes `want` permits if they fit and nobody waits: one CAS on the
    /// count (it waits out a QLOCK owner, whose word it must not change).
    pub(super) fn try_acquire_multi(&self, want: u32) -> Tried {
        let permits = self.permits();
        let mut s = self.state.load(Ordering::Relaxed);
        let mut backoff = Backoff::new();
        loop {
            if s.dead() {
                return Tried::Dead;
            }
            if line_waits(s) || !permits.fits(s.held_permits(), want) {
                return Tried::Held;
            }
            if s.locked() {
                s = self.wait_line_unlocked(s, &mut backoff);
                continue;
            }
            match cas_taken(&self.state, s, s.with_taken(want)) {
                Ok(_) => return Tried::Granted(self.book_grant(permits)),
                Err(now) => s = now,
            }
        }
    }

    /// [`acquire_or_enqueue`](Record::acquire_or_enqueue) of a `MULTI`
    /// record: the CAS when the node's permits fit and nobody waits, else
    /// a look under QLOCK, which links the node unless they fit by then.
    ///
    /// # Safety
    /// As for `acquire_or_enqueue`.
    #[cold]
    pub(super) unsafe fn acquire_or_enqueue_multi<E>(
        &self,
        waiter: Pin<&Waiter>,
        admit: impl FnOnce(u32) -> Result<(), E>,
    ) -> Result<Enqueued, E> {
        match self.try_acquire_multi(waiter.want) {
            Tried::Granted(fence) => return Ok(Enqueued::Granted(fence)),
            Tried::Dead => return Ok(Enqueued::Dead),
            Tried::Held => {}
        }
        let s = self.lock_line();
        if s.dead() {
            self.unlock_line(s, Ordering::Release);
            return Ok(Enqueued::Dead);
        }
        let permits = self.permits();
        if fit_under_lock(s, permits, waiter.want) {
            // Given back since the CAS failed: counted under QLOCK, then
            // booked by this taker after the unlock, as every grant is.
            // Release: the unlock, as for any QLOCK owner.
            self.state
                .store(s.with_taken(waiter.want), Ordering::Release);
            return Ok(Enqueued::Granted(self.book_grant(permits)));
        }
        // Something is held: the permits did not fit, or a line stands
        // (which implies HELD).
        debug_assert!(s.held());
        // SAFETY: we own QLOCK; the caller's contract for the node.
        unsafe { self.enqueue_locked(s, waiter, admit) }
    }

    /// Ends the grant with `fence` of `want` permits: out of the book,
    /// then its permits back to the count, with one CAS when nobody waits,
    /// else under QLOCK, serving the line.
    #[cold]
    pub(super) fn release_multi(&self, fence: u64, want: u32) {
        if !self.permits().slots().clear(fence) {
            let s = self.lock_line();
            // SAFETY: we own QLOCK.
            let ended = unsafe { self.with_locked(|l| l.overflow.end(fence)) };
            debug_assert!(ended, "a release of a grant not booked");
            return self.give_back_locked(s, want);
        }
        let mut s = self.state.load(Ordering::Relaxed);
        let mut backoff = Backoff::new();
        loop {
            if s.locked() {
                s = self.wait_line_unlocked(s, &mut backoff);
                continue;
            }
            // Someone waits and may fit now: serve the line under QLOCK;
            // unless its first was offered its permits and has not looked
            // yet (it serves the line when it does).
            if release_serves_line(s) && !lets_go_to_offer(s) {
                match self.try_lock_line_from(s) {
                    Ok(()) => return self.give_back_locked(s, want),
                    Err(now) => s = now,
                }
                continue;
            }
            // Release: the next holder (a CAS or a grant, both Acquire)
            // sees our writes.
            match self.state.compare_exchange_weak(
                s,
                s.with_given_back(want),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => s = now,
            }
        }
    }

    /// Gives `want` permits back and serves the line, then lets QLOCK go
    /// and wakes whom it granted.
    fn give_back_locked(&self, s: u32, want: u32) {
        let mut woken = Woken::default();
        // SAFETY: the caller owns QLOCK of a MULTI record.
        let s = unsafe { self.serve_line(s.with_given_back(want), &mut woken) };
        // Release: the next QLOCK owner (and the next holder) sees our writes.
        self.unlock_line(s, Ordering::Release);
        woken.wake();
    }

    /// Grants, in order, every waiter at the head of the line whose permits
    /// now fit, stopping at the first that does not (no overtaking).
    /// Answers the word to unlock with.
    ///
    /// # Safety
    /// The caller owns QLOCK of a `MULTI` record; `s` is the word without it.
    pub(super) unsafe fn serve_line(&self, mut s: u32, woken: &mut Woken) -> u32 {
        let permits = self.permits();
        let mut granted = false;
        while s.queued() {
            // SAFETY: QLOCK; QUEUED says the line is not empty, and linked
            // nodes are alive.
            let want = unsafe { (*self.head()).want };
            if !permits.fits(s.held_permits(), want) {
                break;
            }
            // SAFETY: as above.
            if !granted && unsafe { self.offers_head(s) } {
                // SAFETY: as above.
                woken.offered = unsafe { offer(self.head()) };
                return s.with_woken().with_open();
            }
            // SAFETY: as above.
            let (_, ends_run) = unsafe { (*self.head()).bypass_marks() };
            if ends_run {
                s = s.without_in_order();
            }
            // SAFETY: as above.
            let (head, now_empty) = unsafe { self.pop_front() };
            // Drawn here, booked by its taker (`take_served`).
            let fence = self.draw_fence();
            // SAFETY: as above.
            // (An offered head granted here has its offer settled too.)
            s = unsafe { self.line_shrank(s.with_taken(want).without_woken(), now_empty) };
            // SAFETY: `head` was linked until just now, with no final status.
            if let Some(wake) = unsafe { finish_waiter(head, GRANTED, fence) } {
                woken.push(wake);
            }
            granted = true;
            if stops_after_one() {
                break;
            }
        }
        if granted && s.queued() {
            // SAFETY: QLOCK; QUEUED says the head is linked.
            woken.roused = unsafe { rouse(self.head()) };
        }
        if !s.queued() {
            return s;
        }
        // SAFETY: QLOCK; QUEUED says the line is not empty.
        unsafe { self.settle_open(s) }
    }

    /// Whether the first in line, whose permits fit now, is offered them
    /// instead of granted: it sleeps (a grant would leave them idle until
    /// it wakes), may be bypassed, and the line is not served in order.
    ///
    /// # Safety
    /// The caller owns QLOCK of a `MULTI` record whose line is not empty.
    unsafe fn offers_head(&self, s: u32) -> bool {
        // SAFETY: QLOCK; the head of a non-empty line is linked.
        let head = unsafe { &*self.head() };
        // Relaxed: a hint; `offer` and `finish_waiter` handle either status.
        may_offer(s)
            && head.status.load(Ordering::Relaxed) == PARKED
            // SAFETY: as above.
            && unsafe { head.may_be_bypassed() }
    }

    /// An offered first waiter (`waiter`, status `OFFERED`) looks under
    /// QLOCK (`s`: the word without it nor `WOKEN`): takes its permits if
    /// they fit, serving the line behind it, or goes back to waiting
    /// (`back_to`) when newcomers took them first.
    ///
    /// # Safety
    /// The caller owns QLOCK of a `MULTI` record; `waiter` is linked, first.
    pub(super) unsafe fn take_offered_permits(
        &self,
        s: u32,
        waiter: std::pin::Pin<&Waiter>,
        back_to: u32,
        woken: &mut Woken,
    ) -> (u32, Option<WaitEnd>) {
        if !self.permits().fits(s.held_permits(), waiter.want) {
            count(Event::Bypassed);
            // Relaxed: only its owner, and later QLOCK owners, read it.
            waiter.status.store(back_to, Ordering::Relaxed);
            return (s, None);
        }
        // SAFETY: QLOCK; the line is not empty (the waiter is in it).
        let (first, now_empty) = unsafe { self.pop_front() };
        debug_assert!(std::ptr::eq(first, &*waiter));
        let fence = self.draw_fence();
        // SAFETY: QLOCK.
        let s = unsafe { self.line_shrank(s.with_taken(waiter.want), now_empty) };
        // SAFETY: the node is ours; QLOCK owners write a linked node's fence.
        waiter.fence.with_mut(|f| unsafe { *f = fence });
        // Release, as a granter's: the owner (us) reads the fence after it.
        waiter.status.store(GRANTED, Ordering::Release);
        // SAFETY: QLOCK of a MULTI record.
        let s = unsafe { self.serve_line(s, woken) };
        (s, Some(WaitEnd::Granted))
    }

    /// After the line was served, its first waiter still does not fit:
    /// opens the line to newcomers whose permits fit (`OPEN`) while that
    /// waiter is within its bound and the line is not served in order;
    /// else closes it, and a bound that passed starts a run served in
    /// order (`INORDER`, the last in line marked).
    ///
    /// # Safety
    /// The caller owns QLOCK of a `MULTI` record whose line is not empty.
    unsafe fn settle_open(&self, s: u32) -> u32 {
        // SAFETY: QLOCK; the head of a non-empty line is linked.
        let head = unsafe { &*self.head() };
        // SAFETY: as above.
        if may_offer(s) && unsafe { head.may_be_bypassed() } {
            return s.with_open();
        }
        let s = s.without_open();
        // SAFETY: as above.
        let (bounded, _) = unsafe { head.bypass_marks() };
        if bounded && !s.in_order() {
            // SAFETY: QLOCK; the line is not empty.
            unsafe { (*self.tail()).mark_ends_run() };
            return s.with_in_order();
        }
        s
    }

    /// Who holds the key now, and whether the grant with `fence` is one of
    /// them. For several permits it takes the line lock for an instant:
    /// that holds the line and the overflow still, while grants and
    /// releases with nobody in line may come and go in the slots (each
    /// fence is read as it was at one instant). The caller is pinned (or
    /// holds).
    pub(crate) fn holders(&self, fence: u64) -> Holders {
        // Relaxed: MULTI never changes.
        if !self.state.load(Ordering::Relaxed).multi() {
            return match self.current_fence_if_held() {
                Some(f) => Holders {
                    count: 1,
                    permits: 1,
                    oldest: Some(f),
                    newest: Some(f),
                    latest: f,
                    asked_holds: f == fence,
                },
                None => Holders {
                    latest: self.next_fence_after_retire().saturating_sub(1),
                    ..Holders::default()
                },
            };
        }
        let s = self.lock_line();
        let holders = if s.dead() {
            Holders::default()
        } else {
            // Relaxed: the latest drawn; nothing is read through it.
            let latest = self.fence.load(Ordering::Relaxed);
            let slots = self.permits().slots();
            // SAFETY: we own QLOCK of a MULTI record.
            unsafe {
                self.with_locked(|l| {
                    let fences = slots.fences().chain(l.overflow.fences());
                    book_holders(fences, s.held_permits(), fence, latest)
                })
            }
        };
        self.unlock_line(s, Ordering::Release);
        holders
    }
}

/// Whether a newcomer that sees the word `s` must leave the permits to
/// the line: someone waits, and the line is not open to bypass.
/// (Mutant for loom-tests/README.md: a newcomer overtakes the line.)
#[inline(always)]
fn line_waits(s: u32) -> bool {
    s.queued() && !s.open() && !cfg!(holdline_mutant = "fast_overtakes")
}

/// A take's CAS of the word from `s` to `taken`.
/// (Mutant for loom-tests/README.md: a take that stores its count over
/// whatever changed since its load.)
#[inline(always)]
fn cas_taken(state: &AtomicU32, s: u32, taken: u32) -> Result<u32, u32> {
    if cfg!(holdline_mutant = "take_stores") {
        state.store(taken, Ordering::Release);
        return Ok(s);
    }
    // Acquire: pairs with the Release of the releases before, as
    // for a lock of one permit.
    state.compare_exchange_weak(s, taken, Ordering::Acquire, Ordering::Relaxed)
}

/// Whether `want` permits, refused by a take's CAS, fit after all when
/// looked at again under QLOCK (the word `s`): nobody waits and they fit.
/// (Mutant for loom-tests/README.md: no second look under QLOCK.)
#[inline(always)]
fn fit_under_lock(s: u32, permits: &Permits, want: u32) -> bool {
    let look = !cfg!(holdline_mutant = "enqueue_without_recheck");
    look && (!s.queued() || s.open()) && permits.fits(s.held_permits(), want)
}

/// Whether a release that sees the word `s` gives its permits back under
/// QLOCK, serving the line: someone waits and may fit now.
/// (Mutant for loom-tests/README.md: give back past the line.)
#[inline(always)]
fn release_serves_line(s: u32) -> bool {
    s.queued() && !cfg!(holdline_mutant = "release_skips_line")
}

/// Whether serving the line stops after one grant: never, it grants
/// every head that fits.
/// (Mutant for loom-tests/README.md: serve one waiter per release.)
#[inline(always)]
fn stops_after_one() -> bool {
    cfg!(holdline_mutant = "serve_one")
}

/// Who holds a key of several permits, from its book's `fences`.
fn book_holders(
    fences: impl Iterator<Item = u64>,
    permits: u32,
    fence: u64,
    latest: u64,
) -> Holders {
    let mut holders = Holders {
        permits,
        latest,
        ..Holders::default()
    };
    for f in fences {
        holders.count += 1;
        holders.oldest = Some(holders.oldest.map_or(f, |o| o.min(f)));
        holders.newest = Some(holders.newest.map_or(f, |n| n.max(f)));
        holders.asked_holds |= f == fence;
    }
    holders
}
