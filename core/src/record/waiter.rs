//! The waiter: one thread's or task's node in a key's line ([`Waiter`]),
//! how it is told its wait ended ([`Wake`]), and its status, one state
//! machine for threads and tasks:
//!
//! | from               | to                  | by                                  |
//! |--------------------|---------------------|-------------------------------------|
//! | `IDLE`             | `WAITING`           | a thread's node, as it is linked    |
//! | `IDLE`             | `PARKED`            | a task's node, as it is linked      |
//! | `WAITING`          | `PARKED`            | the thread, before it sleeps        |
//! | `PARKED` (thread)  | `WAITING`           | a releaser, under `QLOCK`: [`rouse`] |
//! | `WAITING`/`PARKED` | `OFFERED`           | a releaser, under `QLOCK`: [`offer`] |
//! | `OFFERED`          | `GRANTED`           | the waiter itself, under `QLOCK`, taking the free key |
//! | `OFFERED`          | `WAITING`/`PARKED`  | the waiter itself, under `QLOCK`, finding it taken |
//! | `WAITING`/`PARKED`/`OFFERED` | `GRANTED`/`CLOSED` | a releaser/closer, under `QLOCK` |
//! | `WAITING`/`PARKED`/`OFFERED` | `LEFT`    | the waiter itself, under `QLOCK`    |
//!
//! `PARKED` means "wake me": a task's node is `PARKED` from the start, as it
//! always needs its waker called. A release that grants the head rouses a
//! sleeping thread behind it back to `WAITING` (and unparks it), so that it
//! spins as the next in line. A waiter that finds no final status when
//! its deadline passes (or its future is dropped) takes `QLOCK` and, if none
//! arrived meanwhile, unlinks itself (`LEFT`): a grant and a departure can
//! never both happen, and a grant is never lost (a future dropped after its
//! grant lets the key go to the next in line).
//!
//! `OFFERED` is bounded bypass: a waiter made with a [`Bypass`] bound
//! that stands first in line when the key is let go, before its bound has
//! passed, is not handed the key: the key is left free, with its line, and
//! the waiter is told so. It comes to take it under `QLOCK`; a running
//! thread or task that came first with a CAS has bypassed it, and it
//! waits for the next offer. Only the first in line is ever offered.
//!
//! A final status (`GRANTED`, `CLOSED`) is given by [`finish_waiter`] only
//! (or, for `GRANTED`, by the offered waiter to itself),
//! which copies the node's wake handle *before* it publishes the status:
//! once the status is final the node's owner may return and free it.

use crate::counters::{count, Event};
use crate::ctx;
use crate::line_list::Pointers;
use crate::sync::{process_us, AtomicU32, Ordering, Thread, UnsafeCell};
use std::marker::PhantomPinned;
use std::task::Waker;

// Waiter statuses. See the table in the module doc.
const IDLE: u32 = 0;
pub(super) const WAITING: u32 = 1;
pub(super) const PARKED: u32 = 2;
pub(super) const GRANTED: u32 = 3;
pub(super) const CLOSED: u32 = 4;
pub(super) const LEFT: u32 = 5;
pub(super) const OFFERED: u32 = 6;

/// How long a waiter may be bypassed (bounded bypass), and its part in
/// a run of the line served in order. Read and written under `QLOCK` once
/// the node is linked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bypass {
    /// 0: never (strict FIFO, every lock's default).
    bound_us: u32,
    /// It was the last in line when a bound passed: the line is served in
    /// order until its turn (`INORDER`).
    ends_run: bool,
    /// When its bound passes (µs on [`process_us`]), counted from the
    /// first release that found it first in line; 0: not yet.
    until_us: u64,
}

impl Bypass {
    /// A waiter that may be bypassed for `bound_us` once it is first in line
    /// (0: never; a bound past `u32::MAX` µs, 71 minutes, counts as that).
    pub(crate) const fn for_bound(bound_us: u64) -> Bypass {
        Bypass {
            bound_us: if bound_us > u32::MAX as u64 {
                u32::MAX
            } else {
                bound_us as u32
            },
            ends_run: false,
            until_us: 0,
        }
    }

    /// Whether the first in line, with this bound, may still be bypassed;
    /// the first look starts its bound.
    /// (Mutant for loom-tests/README.md: a bound that never passes.)
    fn allows_now(&mut self) -> bool {
        if self.bound_us == 0 {
            return false;
        }
        let now = process_us();
        if self.until_us == 0 {
            self.until_us = now.saturating_add(u64::from(self.bound_us));
        }
        now < self.until_us || cfg!(holdline_mutant = "bypass_past_bound")
    }
}

/// How a wait in line ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum WaitEnd {
    Granted,
    Closed,
    TimedOut,
}

/// How a waiter is told that its wait ended.
pub(crate) enum Wake {
    /// A thread parked in [`Record::wait`](super::Record::wait).
    Thread(Thread),
    /// A task; the waker is replaced (under `QLOCK`) when the task moves.
    Task(Waker),
}

impl Wake {
    pub(super) fn wake(self) {
        match self {
            Wake::Thread(t) => t.unpark(),
            Wake::Task(w) => wake_task(w),
        }
    }

    /// Wakes a waiter just granted the key. A task is noted in this
    /// thread's context: its runtime queues it here, behind the releaser,
    /// whose next hold of a free key then yields to it (`hold_async`).
    pub(super) fn wake_granted(self) {
        if matches!(self, Wake::Task(_)) {
            ctx::note_task_granted();
        }
        self.wake();
    }

    /// Whether waking this wakes the task `waker` would: a thread's
    /// handle always does (a thread never re-polls).
    pub(super) fn wakes(&self, waker: &Waker) -> bool {
        match self {
            Wake::Thread(_) => true,
            Wake::Task(old) => old.will_wake(waker),
        }
    }

    /// The handle, for a node that is about to get its final status: a
    /// task's waker is moved out (a no-op waker left behind, which costs
    /// nothing to drop), saving a clone and a drop of the real one; a
    /// thread's handle is cloned.
    pub(super) fn take(&mut self) -> Wake {
        match self {
            Wake::Thread(t) => Wake::Thread(t.clone()),
            Wake::Task(w) => Wake::Task(std::mem::replace(w, Waker::noop().clone())),
        }
    }
}

/// Wakes a task. Its waker is foreign code: a panic in its `wake` (or in
/// its drop, which `wake` runs) reaches neither whoever woke it (a
/// releasing holder, the store's timer thread) nor the wakes after it;
/// the panic hook has reported it. The task whose waker panicked is the
/// one left unwoken.
fn wake_task(waker: Waker) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || waker.wake()));
}

/// Wakes collected under a line's lock, to be fired once it is let go.
pub(crate) type Wakes = Vec<Wake>;

/// Fires wakes collected under a line lock.
pub(crate) fn wake_all(wakes: Wakes) {
    for w in wakes {
        w.wake();
    }
}

/// One thread or task standing in a key's line: on the waiting thread's
/// stack, or inside the waiting task's (pinned) future.
///
/// It must not move while linked ([`PhantomPinned`]; the linking functions
/// are `unsafe fn`s that say so), and its `Drop` checks it is not linked.
pub(crate) struct Waiter {
    /// Its links in the line (`line_links`), written only under `QLOCK`.
    pub(super) links: Pointers<Waiter>,
    pub(super) status: AtomicU32,
    /// How many permits it asks for (1 for a lock of one permit).
    pub(super) want: u32,
    /// Until its grant, a task's deadline (µs on the store's clock; 0:
    /// none, and always 0 for a thread), written by its owner before it is
    /// linked and read by `QLOCK` owners ([`Record::expire_tasks`](super::Record::expire_tasks)). Then
    /// its grant's fence: written by the granter before it publishes
    /// `GRANTED` (Release), read by the owner after reading it (Acquire).
    pub(super) fence: UnsafeCell<u64>,
    /// Written by its owner before it is linked, and then only under `QLOCK`.
    pub(super) wake: UnsafeCell<Wake>,
    /// How long it may be bypassed: written by its owner before it is
    /// linked, and then only under `QLOCK`.
    bypass: UnsafeCell<Bypass>,
    _pinned: PhantomPinned,
}

// SAFETY: the links and `wake` are read and written only under the line's
// `QLOCK` once the node is linked (and only by its owner before), `status`
// is atomic, `Thread` and `Waker` are Send + Sync, and `bypass` is guarded
// as the links are.
unsafe impl Send for Waiter {}
// SAFETY: as for `Send`.
unsafe impl Sync for Waiter {}

impl Waiter {
    /// A node for the calling thread, asking for `want` permits.
    pub(crate) fn for_thread(want: u32, bypass: Bypass) -> Self {
        Self::new(Wake::Thread(crate::sync::current_thread()), want, 0, bypass)
    }

    /// A node for a task, woken through `waker`, asking for `want` permits,
    /// its wait ending at `deadline_us` on the store's clock (0: never).
    pub(crate) fn for_task(waker: Waker, want: u32, deadline_us: u64, bypass: Bypass) -> Self {
        Self::new(Wake::Task(waker), want, deadline_us, bypass)
    }

    fn new(wake: Wake, want: u32, deadline_us: u64, bypass: Bypass) -> Self {
        Waiter {
            links: Pointers::new(),
            status: AtomicU32::new(IDLE),
            want,
            fence: UnsafeCell::new(deadline_us),
            wake: UnsafeCell::new(wake),
            bypass: UnsafeCell::new(bypass),
            _pinned: PhantomPinned,
        }
    }

    /// Whether, first in line, it may be bypassed now (bounded bypass, its
    /// bound not passed); the first look starts its bound.
    ///
    /// # Safety
    /// The caller owns the QLOCK of the line it is linked in.
    pub(super) unsafe fn may_be_bypassed(&self) -> bool {
        // SAFETY: QLOCK guards a linked node's bypass.
        self.bypass.with_mut(|b| unsafe { (*b).allows_now() })
    }

    /// Whether it was made with a bound, and whether it ends a run of the
    /// line served in order.
    ///
    /// # Safety
    /// As for [`may_be_bypassed`](Waiter::may_be_bypassed).
    pub(super) unsafe fn bypass_marks(&self) -> (bool, bool) {
        // SAFETY: QLOCK guards a linked node's bypass.
        self.bypass
            .with(|b| unsafe { ((*b).bound_us != 0, (*b).ends_run) })
    }

    /// Marks it as the last of a run of the line served in order.
    ///
    /// # Safety
    /// As for [`may_be_bypassed`](Waiter::may_be_bypassed).
    pub(super) unsafe fn mark_ends_run(&self) {
        // SAFETY: QLOCK guards a linked node's bypass.
        self.bypass.with_mut(|b| unsafe { (*b).ends_run = true });
    }

    /// How many permits it asks for.
    pub(crate) fn want(&self) -> u32 {
        self.want
    }

    /// The fence of its grant. Only its owner asks, after [`end`] answered
    /// `Granted` (an Acquire read of the status the granter published
    /// after writing the fence).
    ///
    /// [`end`]: Waiter::end
    pub(crate) fn granted_fence(&self) -> u64 {
        debug_assert_eq!(self.end(), Some(WaitEnd::Granted));
        // SAFETY: the granter wrote it before its Release store of
        // GRANTED, which the owner read with Acquire; nobody writes it again.
        self.fence.with(|f| unsafe { *f })
    }

    /// The wait's end, once a granter, a closer or the waiter itself decided
    /// it. Acquire: pairs with the Release that published it (and the fence).
    pub(crate) fn end(&self) -> Option<WaitEnd> {
        end_of(self.status.load(Ordering::Acquire))
    }

    /// Whether the node is in a line now (only its owner may ask; see the
    /// status table).
    pub(crate) fn is_linked(&self) -> bool {
        matches!(
            self.status.load(Ordering::Acquire),
            WAITING | PARKED | OFFERED
        )
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        // A linked node freed would leave a dangling pointer in the line.
        debug_assert!(!self.is_linked(), "a waiter dropped while in line");
        // Under loom the node's end is a write to each of its cells, so a
        // granter or closer that touches a node after publishing its final
        // status (which lets the owner return and free it) is reported as a
        // causality violation, not missed.
        #[cfg(loom)]
        {
            // (The links' own drop writes them, under loom.)
            self.wake.with_mut(|_| ());
            self.fence.with_mut(|_| ());
            self.bypass.with_mut(|_| ());
        }
    }
}

/// Gives a just-unlinked waiter its final status; answers the wake to fire
/// once the caller has let QLOCK go.
///
/// `fence` is the grant's (ignored for `CLOSED`).
///
/// # Safety
/// The caller owns the QLOCK of the line `w` was just unlinked from, and `w`
/// has no final status yet (so its owner has not returned or dropped it).
pub(super) unsafe fn finish_waiter(w: *const Waiter, to: u32, fence: u64) -> Option<Wake> {
    // SAFETY: per the contract, `w`'s owner waits for a final status and
    // cannot free the node before it reads one (a dropped future takes
    // QLOCK first, which we hold); until our store below, `w` is alive.
    let w = unsafe { &*w };
    // SAFETY: only a QLOCK owner writes a linked node's fence, and its
    // owner reads it only after the Release store of its final status.
    w.fence.with_mut(|f| unsafe { *f = fence });
    // Release: the new holder must see the fence and everything before.
    match w
        .status
        .compare_exchange(WAITING, to, Ordering::Release, Ordering::Relaxed)
    {
        Ok(_) => {
            count(Event::HandoffToSpinner);
            None
        }
        Err(_parked) => {
            count(Event::HandoffToParked);
            // PARKED: it sleeps (or is about to), or it is a task. Take the
            // handle first: once the status is final the node may vanish.
            // Nobody reads a node's waker after its final status.
            // SAFETY: we own QLOCK, which guards `wake` of a linked node.
            let wake = unsafe { take_wake(w, to) };
            w.status.store(to, Ordering::Release);
            handed(wake)
        }
    }
}

/// Rouses `w`, the new head of a line whose head was just granted, if it
/// is a thread that sleeps: its status goes from `PARKED` back to
/// `WAITING`, and the caller unparks the handle answered once QLOCK is let
/// go, so the thread spins as the next in line and is awake when the key
/// comes. A task is left alone (its runtime runs it once it is granted).
///
/// Relaxed: the status carries nothing here (the grant, later, is stored
/// Release as ever); a thread that finds `WAITING` after a wake spins.
///
/// # Safety
/// The caller owns the QLOCK of `w`'s line, and `w` is linked in it.
pub(super) unsafe fn rouse(w: *const Waiter) -> Option<Thread> {
    // SAFETY: linked, so alive while we own QLOCK (the caller's).
    let w = unsafe { &*w };
    // SAFETY: QLOCK guards `wake` of a linked node.
    let thread = w.wake.with(|wake| match unsafe { &*wake } {
        Wake::Thread(t) => Some(t.clone()),
        Wake::Task(_) => None,
    })?;
    w.status
        .compare_exchange(PARKED, WAITING, Ordering::Relaxed, Ordering::Relaxed)
        .ok()
        .map(|_| thread)
}

/// Offers the free key to `w`, the first in line, whose bound has not
/// passed: its status becomes `OFFERED`, and the caller fires the wake
/// answered (a sleeping thread's, or a task's) once QLOCK is let go. A
/// spinning thread, or one already offered, needs none.
///
/// Relaxed: the offer carries nothing; the waiter acts on it under QLOCK,
/// whose Acquire shows it the word and the fence.
///
/// # Safety
/// The caller owns the QLOCK of `w`'s line, and `w` is linked in it.
pub(super) unsafe fn offer(w: *const Waiter) -> Option<Wake> {
    count(Event::Offered);
    // SAFETY: linked, so alive while we own QLOCK (the caller's).
    let w = unsafe { &*w };
    match w
        .status
        .compare_exchange(WAITING, OFFERED, Ordering::Relaxed, Ordering::Relaxed)
    {
        Ok(_) | Err(OFFERED) => None,
        Err(_parked) => {
            // SAFETY: we own QLOCK, which guards `wake` of a linked node; a
            // task's waker is moved out (its next poll puts one back).
            let wake = w.wake.with_mut(|k| unsafe { (*k).take() });
            w.status.store(OFFERED, Ordering::Relaxed);
            offered_wake(wake)
        }
    }
}

/// The wake an offer fires once QLOCK is let go.
/// (Mutant for loom-tests/README.md: an offer that wakes nobody.)
#[inline(always)]
fn offered_wake(wake: Wake) -> Option<Wake> {
    if cfg!(holdline_mutant = "offer_forgets_wake") {
        return None;
    }
    Some(wake)
}

/// Moves the wake handle out of `w`, a node about to get the final
/// status `to`.
/// (Mutant for loom-tests/README.md: publish the final status before
/// copying the wake handle (the node may be gone by then).)
///
/// # Safety
/// The caller owns QLOCK, and `w` was just unlinked with no final status.
#[inline(always)]
unsafe fn take_wake(w: &Waiter, to: u32) -> Wake {
    if cfg!(holdline_mutant = "status_before_wake") {
        w.status.store(to, Ordering::Release);
    }
    // SAFETY: we own QLOCK, which guards `wake` of a linked node.
    w.wake.with_mut(|k| unsafe { (*k).take() })
}

/// The wake a granter or closer fires once it lets QLOCK go.
/// (Mutant for loom-tests/README.md: forget the wake.)
#[inline(always)]
fn handed(wake: Wake) -> Option<Wake> {
    if cfg!(holdline_mutant = "missed_wake") {
        return None;
    }
    Some(wake)
}

pub(super) fn end_of(status: u32) -> Option<WaitEnd> {
    // LEFT is reported by `leave` itself, never read back as an end.
    match status {
        GRANTED => Some(WaitEnd::Granted),
        CLOSED => Some(WaitEnd::Closed),
        _ => None,
    }
}
