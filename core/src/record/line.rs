//! The line of a key: taking the key or standing in line behind its
//! holder, waiting there (spinning, then parked, or polled as a task),
//! leaving it, and letting the key go to the first in line; closing the
//! line and retiring an idle record. The paths of a lock of one permit are
//! here; a lock of several branches off at the top of each to `multi`.
//!
//! # The line
//!
//! Waiters are [`Waiter`] nodes on their threads' stacks, linked into an
//! intrusive circular doubly-linked list (`line_links`; the record keeps
//! only its tail) that only the `QLOCK` owner reads or writes, so a waiter
//! leaves from any position in O(1). Ownership rules:
//! - a node is linked by its own thread (`acquire_or_enqueue`) and unlinked
//!   either by a granter/closer (who then sets its final status) or by its own
//!   thread when its deadline passes (`cancel`), always under `QLOCK`;
//! - a node's thread may return (freeing the node) as soon as it reads a
//!   final status, so a granter copies the `Thread` handle it needs *before*
//!   it publishes that status, and never touches the node after.
//!
//! A release with waiters hands `HELD` straight to the first of them (it
//! stays set), so nobody can barge, unless that waiter may be bypassed
//! (bounded bypass, `waiter`'s module doc): then the key is left free for
//! it and whoever comes first takes it ([`hand_on`](Record::hand_on)).
//! The waiter's status machine is tabled in `waiter`.

use super::waiter::{
    end_of, finish_waiter, offer, rouse, CLOSED, GRANTED, LEFT, OFFERED, PARKED, WAITING,
};
use super::{Record, StateWord, WaitEnd, Waiter, Wake, Wakes, Woken, HELD};
use crate::counters::{count, Event};
use crate::spin::{first_in_line_spin_pauses, spin_learn, Backoff, SPIN_BEHIND, SPIN_ROUND};
use crate::sync::{park_timeout, spin_loop, Clock, Ordering, Thread};
use std::pin::Pin;
use std::task::Waker;
use std::time::Duration;

/// When a thread's wait in line gives up.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Deadline {
    /// At this time (µs on the store's clock), read by the caller.
    At(u64),
    /// This many ms after the wait stops spinning, read only then: a wait
    /// granted while it spins (most are) reads no clock, and one that
    /// parks waits its whole span plus its spin (a few µs) more.
    AfterSpin(u64),
}

/// What `acquire_or_enqueue` did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Enqueued {
    /// The key was free (its permits fit): the caller holds it with this fence.
    Granted(u64),
    /// The caller stands in line; `first` when nobody stands before it.
    /// `arm_line_ms`: the caller must put a line-timer entry for the key on
    /// the store's timer at this time (ms), to keep the line timer's
    /// invariant (`line_timer`'s module doc).
    Waiting {
        first: bool,
        arm_line_ms: Option<u64>,
    },
    /// The record was retired: look the key up again.
    Dead,
}

/// What `try_acquire` found.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Tried {
    /// The caller holds the key with this fence.
    Granted(u64),
    Held,
    Dead,
}

/// The word a record whose word was `seen` must have to be retired:
/// exactly idle (`0`, or `MULTI`, which never changes).
fn retirable(seen: u32) -> u32 {
    // Mutant for loom-tests/README.md: retire a held key too.
    if cfg!(holdline_mutant = "retire_held") && seen.held() {
        return seen.idle().with_held();
    }
    seen.idle()
}

/// The ordering an enqueuer lets QLOCK go with: Release.
/// (Mutant for loom-tests/README.md: a Relaxed unlock.)
#[inline(always)]
fn enqueue_unlock_order() -> Ordering {
    if cfg!(holdline_mutant = "relaxed_unlock") {
        Ordering::Relaxed
    } else {
        Ordering::Release
    }
}

/// The status a waiter leaving the line read under QLOCK, as it acts on it.
/// (Mutant for loom-tests/README.md: leave the line even when granted.)
#[inline(always)]
fn as_read(status: u32) -> u32 {
    if cfg!(holdline_mutant = "cancel_ignores_grant") {
        PARKED
    } else {
        status
    }
}

/// Whether an offered waiter finds the key still free under QLOCK.
/// (Mutant for loom-tests/README.md: take it even when a bypass holds it.)
#[inline(always)]
fn offered_key_free(s: u32) -> bool {
    !s.held() || cfg!(holdline_mutant = "offer_taken_twice")
}

/// Whether a release may leave the key free for a first waiter that may
/// be bypassed, the line not being served in order.
/// (Mutant for loom-tests/README.md: bypass a line served in order.)
#[inline(always)]
pub(super) fn may_offer(s: u32) -> bool {
    !s.in_order() || cfg!(holdline_mutant = "bypass_in_order")
}

/// Whether a release that sees the word `s` (with a line) lets the key go
/// with one CAS, leaving it to the first in line's pending offer.
/// (Mutant for loom-tests/README.md: a release that never takes QLOCK
/// while a line may be bypassed, so the bound is never checked again.)
#[inline(always)]
pub(super) fn lets_go_to_offer(s: u32) -> bool {
    if cfg!(holdline_mutant = "offer_never_rechecked") {
        return !s.in_order() && (s.woken() || s.queued());
    }
    s.woken()
}

/// Whether a departure that leaves the word `s` serves whoever stood
/// behind it: only a lock of several permits has waiters that may fit now.
/// (Mutant for loom-tests/README.md: a departure that serves nobody.)
#[inline(always)]
fn departure_serves(s: u32) -> bool {
    s.multi() && !cfg!(holdline_mutant = "leave_serves_none")
}

impl Record {
    /// Never waits: takes `want` permits of the key if they fit and nobody
    /// waits.
    pub(crate) fn try_acquire(&self, want: u32) -> Tried {
        let mut s = self.state.load(Ordering::Relaxed);
        if s.multi() {
            return self.try_acquire_multi(want);
        }
        let mut backoff = Backoff::new();
        loop {
            if s.dead() {
                return Tried::Dead;
            }
            if s.held() {
                return Tried::Held;
            }
            if s.locked() {
                // The line of a free key is locked briefly: by `close`, or
                // while its first waiter is offered it (bounded bypass).
                s = self.wait_line_unlocked(s, &mut backoff);
                continue;
            }
            // Free: no line, or one left to be bypassed (`hand_on`).
            // Acquire: as in `try_lock_fast`.
            match self.state.compare_exchange_weak(
                s,
                s.with_held(),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Tried::Granted(self.fence()),
                Err(now) => s = now,
            }
        }
    }

    /// Takes the key if it is free and nobody waits; otherwise, if `admit`
    /// (run under the line's lock with the current line length) agrees, links
    /// `waiter` at the back of the line.
    ///
    /// # Safety
    /// `waiter` is not linked, and once this answers `Waiting` it must stay
    /// where it is until it has a final status ([`Waiter::end`]) or
    /// [`leave`](Record::leave) answered: the line points at it.
    pub(crate) unsafe fn acquire_or_enqueue<E>(
        &self,
        waiter: Pin<&Waiter>,
        admit: impl FnOnce(u32) -> Result<(), E>,
    ) -> Result<Enqueued, E> {
        let mut s = self.state.load(Ordering::Relaxed);
        if s.multi() {
            // SAFETY: the caller's contract.
            return unsafe { self.acquire_or_enqueue_multi(waiter, admit) };
        }
        let mut backoff = Backoff::new();
        loop {
            if s.dead() {
                return Ok(Enqueued::Dead);
            }
            if s.free() {
                // No line, or one left to be bypassed (`hand_on`).
                match self.state.compare_exchange_weak(
                    s,
                    s.with_held(),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Ok(Enqueued::Granted(self.fence())),
                    Err(now) => s = now,
                }
                continue;
            }
            if s.locked() {
                s = self.wait_line_unlocked(s, &mut backoff);
                continue;
            }
            if let Err(now) = self.try_lock_line_from(s) {
                s = now;
                continue;
            }
            // We own QLOCK; `s` (which has HELD) is the word's value without it.
            // SAFETY: the caller's contract.
            return unsafe { self.enqueue_locked(s, waiter, admit) };
        }
    }

    /// Links `waiter` at the back of the line if `admit` agrees, and lets
    /// QLOCK go.
    ///
    /// # Safety
    /// The caller owns QLOCK (`s`: the word without it, with `HELD`); as
    /// for [`acquire_or_enqueue`](Record::acquire_or_enqueue).
    pub(super) unsafe fn enqueue_locked<E>(
        &self,
        s: u32,
        waiter: Pin<&Waiter>,
        admit: impl FnOnce(u32) -> Result<(), E>,
    ) -> Result<Enqueued, E> {
        // SAFETY: we own QLOCK.
        let len = unsafe { self.line_len(s) };
        if let Err(e) = admit(len) {
            // Release: publish nothing new, but keep the unlock a release.
            self.unlock_line(s, Ordering::Release);
            return Err(e);
        }
        // Relaxed: published with the node by the unlock below.
        let first_status = waiter.wake.with(|w| {
            // SAFETY: the node is not linked yet, so only its owner (our
            // caller) can reach `wake`.
            match unsafe { &*w } {
                Wake::Thread(_) => WAITING,
                Wake::Task(_) => PARKED,
            }
        });
        waiter.status.store(first_status, Ordering::Relaxed);
        // SAFETY: we own QLOCK, so we have exclusive access to the line
        // and to the links of every node in it; `waiter` is not linked
        // yet, and the caller keeps it in place while linked.
        unsafe { self.push_back(waiter) };
        // SAFETY: we own QLOCK; the node is ours until the unlock below.
        let arm_line_ms = unsafe { self.cover_deadline(&waiter) };
        // Release: the next QLOCK owner must see the node linked.
        let unlock = enqueue_unlock_order();
        // SAFETY: we own QLOCK.
        let s = unsafe { self.line_grew(s) };
        self.unlock_line(s, unlock);
        Ok(Enqueued::Waiting {
            first: len == 0,
            arm_line_ms,
        })
    }

    /// Waits until `waiter` is granted the key, the store closes, or
    /// `deadline` passes. Spins first when `first` in line, so a handoff
    /// finds it awake; parks after. A release that grants the waiter ahead
    /// rouses it (`PARKED` back to `WAITING`): it spins again, as the head
    /// it now is, then parks again.
    pub(crate) fn wait(
        &self,
        waiter: Pin<&Waiter>,
        first: bool,
        clock: &Clock,
        deadline: Deadline,
    ) -> WaitEnd {
        let mut first = first;
        let mut deadline_us = None;
        loop {
            let spent = match spin_for_end(waiter, first) {
                Spun::Ended(end) => return end,
                Spun::Offered => {
                    if let Some(end) = self.take_offered(waiter) {
                        return end;
                    }
                    // Bypassed: the first in line, spinning for the next offer.
                    first = true;
                    continue;
                }
                Spun::Spent(spent) => spent,
            };
            // The clock's first read: when the (first) spin ended.
            let parked_at = clock.now_us();
            let deadline_us = *deadline_us.get_or_insert(match deadline {
                Deadline::At(at) => at,
                // +1 so the rounded-down clock never ends a wait early.
                // Saturating throughout: a wait past the clock's range is no deadline.
                Deadline::AfterSpin(ms) => parked_at
                    .saturating_add(ms.saturating_mul(1000))
                    .saturating_add(1),
            });
            // Acquire on failure: a final status was published with Release.
            if let Err(now) = waiter.status.compare_exchange(
                WAITING,
                PARKED,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                if now == OFFERED {
                    // Offered as it was about to sleep: the loop's spin
                    // sees the offer at once.
                    first = true;
                    continue;
                }
                return end_of(now).unwrap_or(WaitEnd::TimedOut);
            }
            let Some(end) = self.park_until(waiter, clock, deadline_us) else {
                // Roused (the waiter ahead was granted; this one is next),
                // or offered the free key.
                first = true;
                continue;
            };
            if first {
                // The first in line learns from how long its parked waits
                // took how long to spin.
                let parked = (end == WaitEnd::Granted).then(|| clock.now_us() - parked_at);
                spin_learn(parked, spent);
            }
            return end;
        }
    }

    /// A thread offered the free key (bounded bypass) comes to take it:
    /// answers its wait's end (`Granted`, or an end that came first), or
    /// `None` when a bypass took the key first (it waits for the next offer).
    fn take_offered(&self, waiter: Pin<&Waiter>) -> Option<WaitEnd> {
        // Pin, then re-read the status, as `park_until` does before it
        // leaves: not final while pinned, so the record stays alive.
        let _pin = crossbeam_epoch::pin();
        if let Some(end) = end_of(waiter.status.load(Ordering::Acquire)) {
            return Some(end);
        }
        let s = self.lock_line();
        let mut woken = Woken::default();
        // SAFETY: pinned with the status read not final; we own QLOCK.
        let (s, end) = unsafe { self.take_offered_locked(s, waiter, WAITING, &mut woken) };
        self.unlock_line(s, Ordering::Release);
        woken.wake();
        end
    }

    /// Under QLOCK (`s`: the word without it), `waiter` acts on an offer:
    /// it takes the key if it is still free, or goes back to waiting
    /// (`back_to`: `WAITING` for a thread, `PARKED` for a task) if a bypass
    /// took it. Answers the word to unlock with and the wait's end, if any;
    /// `woken`: whom its take granted or offered the key to behind it
    /// (several permits), to wake once QLOCK is let go.
    ///
    /// # Safety
    /// The caller owns QLOCK, and `waiter`'s status was read not final
    /// while pinned (so it is linked, or its end is already final).
    unsafe fn take_offered_locked(
        &self,
        s: u32,
        waiter: Pin<&Waiter>,
        back_to: u32,
        woken: &mut Woken,
    ) -> (u32, Option<WaitEnd>) {
        // Under QLOCK only the waiter itself moves it out of OFFERED.
        // Acquire: to see a granter's fence store if it is final.
        let status = waiter.status.load(Ordering::Acquire);
        if status != OFFERED {
            return (s, end_of(status));
        }
        // It acts on its offer: the next release takes QLOCK again.
        let s = s.without_woken();
        if s.multi() {
            // SAFETY: the caller's contract; OFFERED, so linked.
            return unsafe { self.take_offered_permits(s, waiter, back_to, woken) };
        }
        if !offered_key_free(s) {
            count(Event::Bypassed);
            // Relaxed: only its owner, and later QLOCK owners, read it.
            waiter.status.store(back_to, Ordering::Relaxed);
            return (s, None);
        }
        // Only the first in line is offered, and it is still linked.
        // SAFETY: we own QLOCK, and the line is not empty.
        let (first, now_empty) = unsafe { self.pop_front() };
        debug_assert!(std::ptr::eq(first, &*waiter));
        // SAFETY: we own QLOCK.
        let s = unsafe { self.line_shrank(s, now_empty) }.with_held();
        // Relaxed: the release that left the key free stored it, and its
        // Release unlock of QLOCK, which we took (Acquire), published it.
        let fence = self.fence.load(Ordering::Relaxed);
        // SAFETY: the node is ours, and its fence cell is written only by
        // QLOCK owners while linked (we are one; it is unlinked now).
        waiter.fence.with_mut(|f| unsafe { *f = fence });
        // Release, as a granter's: the owner (us) reads the fence after it.
        waiter.status.store(GRANTED, Ordering::Release);
        (s, Some(WaitEnd::Granted))
    }

    /// The parked part of [`wait`](Record::wait): sleeps until a final
    /// status arrives or the deadline passes (then leaves the line);
    /// `None` when a release roused it to spin as the next in line, or
    /// offered it the free key.
    fn park_until(&self, waiter: Pin<&Waiter>, clock: &Clock, deadline_us: u64) -> Option<WaitEnd> {
        loop {
            let now = clock.now_us();
            if now >= deadline_us {
                // Pin, then re-read the status: a status still not final,
                // read while pinned, means the node was linked at that
                // instant, so the record was not retired then and cannot be
                // freed while we stay pinned. (A CLOSED read before the pin
                // proves nothing: a closed line's record may be retired.)
                let _pin = crossbeam_epoch::pin();
                if let Some(end) = end_of(waiter.status.load(Ordering::Acquire)) {
                    return Some(end);
                }
                // SAFETY: pinned, status read not final while pinned.
                return Some(unsafe { self.leave(waiter) });
            }
            // Cap one park at a day so huge deadlines cannot overflow the call.
            count(Event::Park);
            park_timeout(Duration::from_micros(
                (deadline_us - now).min(86_400_000_000),
            ));
            match waiter.status.load(Ordering::Acquire) {
                WAITING | OFFERED => return None,
                status => {
                    if let Some(end) = end_of(status) {
                        count(Event::GrantedParked);
                        return Some(end);
                    }
                }
            }
        }
    }

    /// A task's poll: answers its wait's end if it has one, else makes sure
    /// `waker` is the one a grant will call.
    ///
    /// # Safety
    /// The caller is pinned and read `waiter`'s status as not final while
    /// pinned, so the record is alive (`record`'s module doc); `waiter` is a task's node
    /// linked into this record's line.
    pub(crate) unsafe fn poll_wait(&self, waiter: Pin<&Waiter>, waker: &Waker) -> Option<WaitEnd> {
        let s = self.lock_line();
        // Under QLOCK only we can change the status or the waker now. An
        // offer of the free key (bounded bypass) is taken here.
        let mut woken = Woken::default();
        // SAFETY: the caller's contract; we own QLOCK.
        let (s, end) = unsafe { self.take_offered_locked(s, waiter, PARKED, &mut woken) };
        // SAFETY: the node is linked and we own QLOCK, which guards `wake`.
        // `will_wake` compares the wakers' data and vtable: no foreign code.
        let current = end.is_some() || waiter.wake.with(|w| unsafe { &*w }.wakes(waker));
        // Release: publishes nothing new, lets the next QLOCK owner in.
        self.unlock_line(s, Ordering::Release);
        woken.wake();
        if current {
            return end;
        }
        // A new waker: cloned before the line is locked again, and the old
        // one dropped after it is let go, so neither foreign call runs
        // under QLOCK (a panic there reaches only this task, and the line
        // stays usable). A grant between the two locks woke the old waker
        // and is seen below as the end.
        let mut swap = Some(Wake::Task(waker.clone()));
        let s = self.lock_line();
        let end = waiter.end();
        if end.is_none() {
            waiter.wake.with_mut(|w| {
                // SAFETY: as above.
                let w = unsafe { &mut *w };
                swap = swap.take().map(|new| std::mem::replace(w, new));
            });
        }
        // Release: publishes the new waker to the next QLOCK owner.
        self.unlock_line(s, Ordering::Release);
        // The old waker (or the unused new one), dropped unlocked.
        drop(swap);
        end
    }

    /// Leaves the line (deadline passed, or the task's future dropped),
    /// unless a grant or a close got there first; answers `TimedOut` when it
    /// left, or the end that came first.
    ///
    /// # Safety
    /// As for [`poll_wait`](Record::poll_wait): pinned, and `waiter`'s status
    /// read as not final while pinned.
    pub(crate) unsafe fn leave(&self, waiter: Pin<&Waiter>) -> WaitEnd {
        let s = self.lock_line();
        // Under QLOCK no one else can change the status (only QLOCK owners
        // publish final statuses). Acquire: to see a granter's fence store.
        let status = as_read(waiter.status.load(Ordering::Acquire));
        if let Some(end) = end_of(status) {
            self.unlock_line(s, Ordering::Release);
            return end;
        }
        // An offer it leaves without acting on: the next release offers
        // the key to the next in line.
        let s = if status == OFFERED {
            s.without_woken()
        } else {
            s
        };
        // SAFETY: we own QLOCK and `waiter` is linked (no final status).
        let (_, ends_run) = unsafe { waiter.bypass_marks() };
        // SAFETY: as above.
        let now_empty = unsafe { self.unlink(&waiter) };
        // Relaxed: only the owner reads LEFT, in program order.
        waiter.status.store(LEFT, Ordering::Relaxed);
        // SAFETY: we own QLOCK.
        let s = unsafe { self.line_shrank(s, now_empty) };
        // The last of a run served in order left: the run is over.
        let s = if ends_run { s.without_in_order() } else { s };
        if !s.multi() && !s.held() && s.queued() {
            // It was offered the free key (bounded bypass) and leaves
            // instead: the key goes on to the next in line, as at a release.
            // SAFETY: we own QLOCK; the line is not empty.
            let (s, handed) = unsafe { self.hand_on(s) };
            self.unlock_line(s, Ordering::Release);
            handed.wake();
            return WaitEnd::TimedOut;
        }
        if !departure_serves(s) {
            self.unlock_line(s, Ordering::Release);
            return WaitEnd::TimedOut;
        }
        // Several permits: whoever stood behind it may fit now.
        let mut woken = Woken::default();
        // SAFETY: we own QLOCK.
        let s = unsafe { self.serve_line(s, &mut woken) };
        self.unlock_line(s, Ordering::Release);
        woken.wake();
        WaitEnd::TimedOut
    }

    /// Lets the key go: straight to the first waiter when there is one
    /// (no barging) unless it may be bypassed (then free, offered to it),
    /// otherwise free. Called once per grant, by its holder or
    /// by whoever took its lease away. `fence` is that grant's fence.
    /// `permits`: the grant's (1 for a lock of one permit).
    #[inline]
    pub(crate) fn release(&self, fence: u64, permits: u32) {
        // Relaxed: MULTI is set at birth and never changes.
        if self.state.load(Ordering::Relaxed).multi() {
            return self.release_multi(fence, permits);
        }
        // Relaxed: published by the Release transition below.
        self.fence.store(fence + 1, Ordering::Relaxed);
        // Release: the next holder (fast acquire, Acquire) sees our writes.
        if self
            .state
            .compare_exchange(HELD, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.release_slow();
        }
    }

    #[cold]
    fn release_slow(&self) {
        let mut s = self.state.load(Ordering::Relaxed);
        let mut backoff = Backoff::new();
        loop {
            if s.locked() {
                s = self.wait_line_unlocked(s, &mut backoff);
                continue;
            }
            if !s.queued() || lets_go_to_offer(s) {
                // No line; or its first was offered the key already and
                // has not looked yet: it will, and find the key free.
                match self.state.compare_exchange_weak(
                    s,
                    s.without_held(),
                    Ordering::Release,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return,
                    Err(now) => s = now,
                }
                continue;
            }
            if let Err(now) = self.try_lock_line_from(s) {
                s = now;
                continue;
            }
            // SAFETY: we own QLOCK; QUEUED says the line is not empty.
            let (s, handed) = unsafe { self.hand_on(s) };
            // Release: publishes the line and, to later lockers, the grant
            // (or the free key, with our writes, to whoever takes it).
            self.unlock_line(s, Ordering::Release);
            handed.wake();
            return;
        }
    }

    /// Lets the key go on to a non-empty line: grants it to the first in
    /// line (`HELD` stays set, or is set), rousing the one behind; or, when
    /// that waiter may be bypassed and the line is not served in order,
    /// leaves it free (`QUEUED` without `HELD`) and offers it to that
    /// waiter. A grant to a waiter that had a bound (it passed) sets
    /// `INORDER` and marks the last in line: every release hands over until
    /// that one's turn (`state`'s module doc).
    /// Answers the word to unlock with and the wakes to fire after.
    ///
    /// # Safety
    /// The caller owns QLOCK (`s`: the word without it, one permit,
    /// `QUEUED`), and the key's fence is the next grant's.
    #[inline(always)]
    unsafe fn hand_on(&self, s: u32) -> (u32, Handed) {
        // SAFETY: we own QLOCK; the head of a non-empty line is linked.
        let head = unsafe { self.head() };
        // SAFETY: as above: alive while linked and we own QLOCK.
        let head_ref = unsafe { &*head };
        // SAFETY: we own QLOCK; `head` is linked.
        if may_offer(s) && unsafe { head_ref.may_be_bypassed() } {
            // SAFETY: as above.
            let offered = unsafe { offer(head) };
            return (s.without_held().with_woken(), Handed::offered(offered));
        }
        // Read before its final status: then the node may vanish.
        // SAFETY: as above.
        let (bounded, ends_run) = unsafe { head_ref.bypass_marks() };
        // SAFETY: we own QLOCK; QUEUED says the line is not empty.
        let (first, now_empty) = unsafe { self.pop_front() };
        let s = s.with_one_fewer_waiter().with_held().without_woken();
        // Relaxed: stored by the release that let it go (ours, or one
        // published to us by QLOCK's Acquire).
        let fence = self.fence.load(Ordering::Relaxed);
        // SAFETY: `first` was linked until just now and has no final
        // status, so its owner is still waiting for one: alive.
        let granted = unsafe { finish_waiter(first, GRANTED, fence) };
        if now_empty {
            return (s.without_queued(), Handed::granted(granted, None));
        }
        // The next in line wakes to spin, so that it is awake when
        // `first` lets go (a core to spare runs it meanwhile).
        // SAFETY: we own QLOCK; the head of a non-empty line is linked.
        let roused = unsafe { rouse(self.head()) };
        let s = if ends_run {
            s.without_in_order()
        } else if bounded && !s.in_order() {
            // Its bound passed: the line as it stands is served in order.
            // SAFETY: we own QLOCK; the line is not empty.
            unsafe { (*self.tail()).mark_ends_run() };
            s.with_in_order()
        } else {
            s
        };
        (s, Handed::granted(granted, roused))
    }

    /// Fails every waiter with `closed` (the store closed). The holder keeps
    /// the key until it lets go. The caller holds the record's shard lock, so
    /// the record is in its chain and not DEAD.
    pub(crate) fn close_line(&self, wake: &mut Wakes) {
        // Taking and letting go QLOCK (Acquire/Release) is what makes a waiter
        // that locks after us see the store's `closed` flag (`Store::close`).
        let mut s = self.lock_line();
        // SAFETY: we own QLOCK.
        for _ in 0..unsafe { self.line_len(s) } {
            // SAFETY: we own QLOCK, and the count says how many are linked.
            let (w, now_empty) = unsafe { self.pop_front() };
            // SAFETY: as above.
            s = unsafe { self.line_shrank(s, now_empty) };
            // SAFETY: `w` was linked and has no final status: alive.
            if let Some(t) = unsafe { finish_waiter(w, CLOSED, 0) } {
                wake.push(t);
            }
        }
        self.unlock_line(s, Ordering::Release);
    }

    /// The sweeper's step: retires the record if it is idle (exactly `0`,
    /// or exactly `MULTI`).
    pub(crate) fn try_retire(&self) -> bool {
        // Relaxed: a look, not the decision (the CAS below decides). It
        // keeps the sweep off a busy key's cache line: a CAS that fails
        // still takes the line exclusive, from whoever holds the key.
        let seen = self.state.load(Ordering::Relaxed);
        let idle = retirable(seen);
        if seen != idle {
            return false;
        }
        // Acquire: to read the last holder's fence bump afterwards. MULTI
        // stays: a retired record's last fences are read by its kind.
        self.state
            .compare_exchange(idle, idle.with_dead(), Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }
}

/// What a key's release left to wake once its line is unlocked.
pub(super) struct Handed {
    /// The grant's wake (a sleeping thread, or a task), or the offer's.
    wake: Option<Wake>,
    /// A grant's: the thread behind, roused to spin as the next in line.
    roused: Option<Thread>,
    granted: bool,
}

impl Handed {
    fn granted(wake: Option<Wake>, roused: Option<Thread>) -> Handed {
        Handed {
            wake,
            roused,
            granted: true,
        }
    }

    fn offered(wake: Option<Wake>) -> Handed {
        Handed {
            wake,
            roused: None,
            granted: false,
        }
    }

    /// Fires the wakes; the caller has let QLOCK go.
    fn wake(self) {
        match self.wake {
            Some(wake) if self.granted => wake.wake_granted(),
            Some(wake) => wake.wake(),
            None => {}
        }
        if let Some(thread) = self.roused {
            wake_roused(thread);
        }
    }
}

/// How a waiter's spin ended.
enum Spun {
    /// With the wait's end.
    Ended(WaitEnd),
    /// With an offer of the free key (bounded bypass): come take it.
    Offered,
    /// In vain, after this many pauses.
    Spent(u32),
}

/// A waiter's spin before it parks (the first in line's learned budget,
/// else a short one).
fn spin_for_end(waiter: Pin<&Waiter>, first: bool) -> Spun {
    let budget = if first {
        first_in_line_spin_pauses()
    } else {
        SPIN_BEHIND
    };
    let (mut spent, mut round) = (0, 0);
    while spent < budget {
        match waiter.status.load(Ordering::Acquire) {
            OFFERED => return Spun::Offered,
            status => {
                if let Some(end) = end_of(status) {
                    count(Event::GrantedSpinning);
                    return Spun::Ended(end);
                }
            }
        }
        // Short rounds first, so a quick handoff is seen at once.
        let pauses = (1u32 << (round / 16).min(3)).min(SPIN_ROUND);
        for _ in 0..pauses {
            spin_loop();
        }
        spent += pauses;
        round += 1;
    }
    Spun::Spent(spent)
}

/// Unparks a thread roused to spin as the next in line.
/// (Mutant for loom-tests/README.md: a rouse that never unparks.)
#[inline(always)]
pub(super) fn wake_roused(thread: Thread) {
    if !cfg!(holdline_mutant = "rouse_forgets_unpark") {
        thread.unpark();
    }
}
