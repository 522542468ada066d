//! One key's state: a state word and the FIFO line of waiters behind it.
//!
//! # The state word
//!
//! | bit      | meaning                                                        |
//! |----------|----------------------------------------------------------------|
//! | `HELD`   | the key has a holder                                           |
//! | `QLOCK`  | someone is changing the line (a tiny lock over [`Line`])       |
//! | `QUEUED` | the line is not empty                                          |
//! | `DEAD`   | the table retired this record; look the key up again           |
//! | 4..18    | one permit: the line's length (written by the `QLOCK` owner)   |
//! | 4..24    | `MULTI`: the permits held now                                  |
//! | `QSLEEP` | a thread sleeps until `QLOCK` is let go (set only with `QLOCK`)  |
//! | `MULTI`  | the key's lock has several permits (set at birth, never changed) |
//!
//! The word is a `u32`, so that with the 32-bit hash and an inline key the
//! record stays one cache line.
//!
//! Invariants:
//! - `QUEUED` implies `HELD`: a line only ever stands behind a holder, because
//!   a release with waiters hands `HELD` straight to the first of them.
//! - While `QLOCK` is set, only its owner changes the word, but for one
//!   thing: a thread waiting for `QLOCK` that is about to sleep adds
//!   `QSLEEP` (a CAS from a value with `QLOCK`). Every other transition is a
//!   CAS from a value without `QLOCK` (the uncontended ones expect exactly
//!   `0` or exactly `HELD`). So the owner unlocks with a swap to the value
//!   it locked from, updated (which has neither bit), and wakes the
//!   sleepers when the swap saw `QSLEEP` ([`crate::parking`] argues why no
//!   wake is lost). `QSLEEP` implies `QLOCK`.
//! - `DEAD` is set only from exactly `0` (free, no line, unlocked), or
//!   exactly `MULTI`, by the table's sweeper, and is final.
//! - `fence` is the fence of the latest grant while `HELD`, and the fence
//!   the next grant will carry while free: a release stores `fence + 1`
//!   before it gives the key up, so a stale fence is refused from the moment
//!   its holder lets go or is revoked.
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
//! `HELD`), and the invariants above still hold: the line's first waiter
//! does not fit, so something is held (`QUEUED` implies `HELD`). A release
//! that finds a line, or a waiter leaving the head of the line, takes
//! `QLOCK` and grants in order every head waiter that now fits, and none
//! behind one that does not (no overtaking); a newcomer's CAS fails while
//! anyone waits, so it cannot overtake either.
//!
//! Every grant draws its fence with one `fetch_add` on `fence`, which for
//! such a record is always the latest grant's (held or not), and puts it in
//! the key's book ([`Permits`]' slots, else the overflow under `QLOCK`)
//! before its taker returns; a release takes it out of the book before it
//! gives its permits back. A waiter's fence travels in its node, since one
//! release may grant several, and the waiter books it itself once it sees
//! its grant ([`Record::take_served`]), in its own slot rather than the
//! granter's.
//!
//! # The line
//!
//! Waiters are [`Waiter`] nodes on their threads' stacks, linked into an
//! intrusive circular doubly-linked list (the record keeps only its tail)
//! that only the `QLOCK` owner reads or writes, so a waiter leaves from any
//! position in O(1). Ownership rules:
//! - a node is linked by its own thread (`acquire_or_enqueue`) and unlinked
//!   either by a granter/closer (who then sets its final status) or by its own
//!   thread when its deadline passes (`cancel`), always under `QLOCK`;
//! - a node's thread may return (freeing the node) as soon as it reads a
//!   final status, so a granter copies the `Thread` handle it needs *before*
//!   it publishes that status, and never touches the node after.
//!
//! Waiter status, one state machine for threads and tasks:
//!
//! | from               | to                  | by                                  |
//! |--------------------|---------------------|-------------------------------------|
//! | `IDLE`             | `WAITING`           | a thread's node, as it is linked    |
//! | `IDLE`             | `PARKED`            | a task's node, as it is linked      |
//! | `WAITING`          | `PARKED`            | the thread, before it sleeps        |
//! | `WAITING`/`PARKED` | `GRANTED`/`CLOSED`  | a releaser/closer, under `QLOCK`    |
//! | `WAITING`/`PARKED` | `LEFT`              | the waiter itself, under `QLOCK`    |
//!
//! `PARKED` means "wake me": a task's node is `PARKED` from the start, as it
//! always needs its waker called. A waiter that finds no final status when
//! its deadline passes (or its future is dropped) takes `QLOCK` and, if none
//! arrived meanwhile, unlinks itself (`LEFT`): a grant and a departure can
//! never both happen, and a grant is never lost (a future dropped after its
//! grant lets the key go to the next in line).
//!
//! # Tasks' deadlines: one timer per line
//!
//! A waiting task is woken at its deadline by the store's timer, but a task
//! does not arm a timer of its own (on a hot key that was an arm and a
//! cancel per hold). Its node carries its deadline, and the record keeps,
//! in its [`Extra`], the time of the earliest line-timer entry still
//! pending for its key. Invariant, under `QLOCK`: every linked task node
//! with deadline `d` has an entry pending at or before `d` (in ms, rounded
//! up). A task that enqueues earlier than that entry arms a new one
//! ([`Enqueued::Waiting`]'s `arm_line_ms`); when an entry fires,
//! [`Record::expire_tasks`] wakes every task whose deadline passed (each
//! leaves the line itself, on that poll) and answers when the next is due.
//! The entry names the key, not the record: it looks the record up again
//! when it fires, so it needs nothing of the record's lifetime. A retired
//! record had no line, and its successor's tasks arm their own entries.
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

use crate::counters::{count, Event};
use crate::ctx;
use crate::parking;
use crate::permits::{Overflow, Permits};
use crate::spin::{first_in_line_spin_pauses, spin_learn, Backoff, SPIN_BEHIND, SPIN_ROUND};
use crate::sync::{
    park_timeout, spin_loop, AtomicU32, AtomicU64, Clock, Ordering, Thread, UnsafeCell,
};
use crossbeam_epoch as epoch;
use std::marker::PhantomPinned;
use std::pin::Pin;
use std::ptr;
use std::task::Waker;
use std::time::Duration;

const HELD: u32 = 1;
const QLOCK: u32 = 1 << 1;
const QUEUED: u32 = 1 << 2;
const DEAD: u32 = 1 << 3;
/// Someone sleeps until `QLOCK` is let go (above both counts' bits).
const QSLEEP: u32 = 1 << 30;
/// A lock of several permits: see the module doc's "Several permits".
const MULTI: u32 = 1 << 31;
/// The line's length lives in the state word above the flags, so a record
/// fits one cache line (10,000 waiters need 14 bits).
const WAITER_SHIFT: u32 = 4;
const WAITER_ONE: u32 = 1 << WAITER_SHIFT;
const WAITER_MASK: u32 = 0x3fff << WAITER_SHIFT;
/// A `MULTI` record's count of permits held, where a record of one permit
/// keeps its line's length (1,000,000 permits need 20 bits).
const HELD_ONE: u32 = 1 << WAITER_SHIFT;
const HELD_MASK: u32 = 0xf_ffff << WAITER_SHIFT;

/// The state word's bits by name (the table in the module doc): every test
/// and change of a bit goes through these, so no expression spells a mask.
///
/// A trait on `u32` rather than a newtype: the word lives in an
/// `AtomicU32` of the `sync` facade (so loom models the shipped code), and
/// with the trait every load, CAS and store, and the ordering argued beside
/// it, stays exactly the call it was; a newtype would wrap each of them.
/// Each method is one mask or add, `#[inline]`, so the code is the same
/// (`benches/compare_cores.sh --callgrind`). The trait is the crate's only
/// one on `u32` and is imported only where a state word is read (here and
/// `lock`), so a waiter's status, also a `u32`, never meets it.
pub(crate) trait StateWord: Copy {
    /// `HELD`: the key has a holder (several permits: some are held).
    fn held(self) -> bool;
    /// `QLOCK`: someone is changing the line.
    fn locked(self) -> bool;
    /// `QUEUED`: the line is not empty.
    fn queued(self) -> bool;
    /// `DEAD`: the record was retired.
    fn dead(self) -> bool;
    /// `MULTI`: the key's lock has several permits.
    fn multi(self) -> bool;
    /// `QSLEEP`: someone sleeps until `QLOCK` is let go.
    fn has_sleepers(self) -> bool;
    fn with_sleepers(self) -> Self;
    /// Held or with a line: a newcomer of one permit cannot take it.
    fn held_or_queued(self) -> bool;
    /// Nobody holds it, waits or changes the line: a CAS to `HELD` may take it.
    fn takeable(self) -> bool;
    /// Held, by the one holder of a lock of one permit.
    fn held_alone(self) -> bool;
    /// Held, or of several permits (whose `fence` is always the latest grant's).
    fn held_or_multi(self) -> bool;
    /// The idle word of the record's kind: exactly `0`, or exactly `MULTI`.
    fn idle(self) -> Self;
    fn with_held(self) -> Self;
    fn without_held(self) -> Self;
    fn with_locked(self) -> Self;
    fn with_queued(self) -> Self;
    fn without_queued(self) -> Self;
    fn with_dead(self) -> Self;
    /// One permit: the line's length.
    fn waiters(self) -> u32;
    /// One permit: one more in line (`QUEUED` set).
    fn with_one_more_waiter(self) -> Self;
    /// One permit: one fewer in line (`QUEUED` left as it was).
    fn with_one_fewer_waiter(self) -> Self;
    /// `MULTI`: the permits held.
    fn held_permits(self) -> u32;
    /// `MULTI`: `want` more permits held.
    fn with_taken(self, want: u32) -> Self;
    /// `MULTI`: `want` permits given back (`HELD` cleared when none is left).
    fn with_given_back(self, want: u32) -> Self;
}

impl StateWord for u32 {
    #[inline]
    fn held(self) -> bool {
        self & HELD != 0
    }
    #[inline]
    fn locked(self) -> bool {
        self & QLOCK != 0
    }
    #[inline]
    fn queued(self) -> bool {
        self & QUEUED != 0
    }
    #[inline]
    fn dead(self) -> bool {
        self & DEAD != 0
    }
    #[inline]
    fn has_sleepers(self) -> bool {
        self & QSLEEP != 0
    }
    #[inline]
    fn with_sleepers(self) -> u32 {
        self | QSLEEP
    }
    #[inline]
    fn multi(self) -> bool {
        self & MULTI != 0
    }
    #[inline]
    fn held_or_queued(self) -> bool {
        self & (HELD | QUEUED) != 0
    }
    #[inline]
    fn takeable(self) -> bool {
        self & (HELD | QUEUED | QLOCK) == 0
    }
    #[inline]
    fn held_alone(self) -> bool {
        self & (HELD | MULTI) == HELD
    }
    #[inline]
    fn held_or_multi(self) -> bool {
        self & (HELD | MULTI) != 0
    }
    #[inline]
    fn idle(self) -> u32 {
        self & MULTI
    }
    #[inline]
    fn with_held(self) -> u32 {
        self | HELD
    }
    #[inline]
    fn without_held(self) -> u32 {
        self & !HELD
    }
    #[inline]
    fn with_locked(self) -> u32 {
        self | QLOCK
    }
    #[inline]
    fn with_queued(self) -> u32 {
        self | QUEUED
    }
    #[inline]
    fn without_queued(self) -> u32 {
        self & !QUEUED
    }
    #[inline]
    fn with_dead(self) -> u32 {
        self | DEAD
    }
    #[inline]
    fn waiters(self) -> u32 {
        (self & WAITER_MASK) >> WAITER_SHIFT
    }
    #[inline]
    fn with_one_more_waiter(self) -> u32 {
        (self | QUEUED) + WAITER_ONE
    }
    #[inline]
    fn with_one_fewer_waiter(self) -> u32 {
        self - WAITER_ONE
    }
    #[inline]
    fn held_permits(self) -> u32 {
        (self & HELD_MASK) >> WAITER_SHIFT
    }
    #[inline]
    fn with_taken(self, want: u32) -> u32 {
        (self + want * HELD_ONE) | HELD
    }
    #[inline]
    fn with_given_back(self, want: u32) -> u32 {
        let s = self - want * HELD_ONE;
        if s.held_permits() == 0 {
            s.without_held()
        } else {
            s
        }
    }
}

// Waiter statuses. See the table in the module doc.
const IDLE: u32 = 0;
const WAITING: u32 = 1;
const PARKED: u32 = 2;
const GRANTED: u32 = 3;
const CLOSED: u32 = 4;
const LEFT: u32 = 5;

/// How a wait in line ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum WaitEnd {
    Granted,
    Closed,
    TimedOut,
}

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
    /// invariant (module doc).
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

/// How a waiter is told that its wait ended.
pub(crate) enum Wake {
    /// A thread parked in [`Record::wait`].
    Thread(Thread),
    /// A task; the waker is replaced (under `QLOCK`) when the task moves.
    Task(Waker),
}

impl Wake {
    fn wake(self) {
        match self {
            Wake::Thread(t) => t.unpark(),
            Wake::Task(w) => wake_task(w),
        }
    }

    /// Wakes a waiter just granted the key. A task is noted in this
    /// thread's context: its runtime queues it here, behind the releaser,
    /// whose next hold of a free key then yields to it (`hold_async`).
    fn wake_granted(self) {
        if matches!(self, Wake::Task(_)) {
            ctx::note_task_granted();
        }
        self.wake();
    }

    /// Whether waking this wakes the task `waker` would: a thread's
    /// handle always does (a thread never re-polls).
    fn wakes(&self, waker: &Waker) -> bool {
        match self {
            Wake::Thread(_) => true,
            Wake::Task(old) => old.will_wake(waker),
        }
    }

    /// The handle, for a node that is about to get its final status: a
    /// task's waker is moved out (a no-op waker left behind, which costs
    /// nothing to drop), saving a clone and a drop of the real one; a
    /// thread's handle is cloned.
    fn take(&mut self) -> Wake {
        match self {
            Wake::Thread(t) => Wake::Thread(t.clone()),
            Wake::Task(w) => Wake::Task(std::mem::replace(w, Waker::noop().clone())),
        }
    }
}

/// Whether an unlock that swapped out `was` wakes the line's sleepers.
/// (Mutant for loom-tests/README.md: an unlock that never does.)
#[inline(always)]
fn wakes_sleepers(was: u32) -> bool {
    was.has_sleepers() && !cfg!(holdline_mutant = "unlock_wakes_none")
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
    prev: UnsafeCell<*const Waiter>,
    next: UnsafeCell<*const Waiter>,
    status: AtomicU32,
    /// How many permits it asks for (1 for a lock of one permit).
    want: u32,
    /// Until its grant, a task's deadline (µs on the store's clock; 0:
    /// none, and always 0 for a thread), written by its owner before it is
    /// linked and read by `QLOCK` owners ([`Record::expire_tasks`]). Then
    /// its grant's fence: written by the granter before it publishes
    /// `GRANTED` (Release), read by the owner after reading it (Acquire).
    fence: UnsafeCell<u64>,
    /// Written by its owner before it is linked, and then only under `QLOCK`.
    wake: UnsafeCell<Wake>,
    _pinned: PhantomPinned,
}

// SAFETY: the links and `wake` are read and written only under the line's
// `QLOCK` once the node is linked (and only by its owner before), `status`
// is atomic, and `Thread` and `Waker` are Send + Sync.
unsafe impl Send for Waiter {}
// SAFETY: as for `Send`.
unsafe impl Sync for Waiter {}

impl Waiter {
    /// A node for the calling thread, asking for `want` permits.
    pub(crate) fn for_thread(want: u32) -> Self {
        Self::new(Wake::Thread(crate::sync::current_thread()), want, 0)
    }

    /// A node for a task, woken through `waker`, asking for `want` permits,
    /// its wait ending at `deadline_us` on the store's clock (0: never).
    pub(crate) fn for_task(waker: Waker, want: u32, deadline_us: u64) -> Self {
        Self::new(Wake::Task(waker), want, deadline_us)
    }

    fn new(wake: Wake, want: u32, deadline_us: u64) -> Self {
        Waiter {
            prev: UnsafeCell::new(ptr::null()),
            next: UnsafeCell::new(ptr::null()),
            status: AtomicU32::new(IDLE),
            want,
            fence: UnsafeCell::new(deadline_us),
            wake: UnsafeCell::new(wake),
            _pinned: PhantomPinned,
        }
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
        matches!(self.status.load(Ordering::Acquire), WAITING | PARKED)
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
            self.prev.with_mut(|_| ());
            self.next.with_mut(|_| ());
            self.wake.with_mut(|_| ());
            self.fence.with_mut(|_| ());
        }
    }
}

/// The line: a circular doubly-linked list known by its tail (the head is
/// `tail.next`), so the record spends one pointer on it. Read and written
/// only by the `QLOCK` owner.
struct Line {
    tail: *const Waiter,
}

/// Keys up to this many bytes live inside the record: a lookup compares
/// them without another dependent load, and making the record allocates once.
const INLINE_KEY: usize = 22;

/// A record's key text: inline when short, else on the heap. 24 bytes.
pub(crate) enum KeyText {
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    Heap(Box<str>),
}

impl KeyText {
    fn new(key: &str) -> KeyText {
        if key.len() <= INLINE_KEY {
            let mut bytes = [0; INLINE_KEY];
            bytes[..key.len()].copy_from_slice(key.as_bytes());
            KeyText::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            KeyText::Heap(key.into())
        }
    }

    /// Whether this is the text of `key`. Inline keys are compared a word
    /// at a time, without a call to `memcmp` (it is on every lookup).
    #[inline]
    pub(crate) fn is(&self, key: &str) -> bool {
        match self {
            KeyText::Inline { len, bytes } => {
                usize::from(*len) == key.len() && short_eq(bytes, key.as_bytes())
            }
            KeyText::Heap(text) => text.as_bytes() == key.as_bytes(),
        }
    }
}

/// Whether the first `b.len()` bytes of `a` are `b` (`b` 1 to
/// [`INLINE_KEY`] bytes long), in at most three overlapping word compares.
#[inline]
fn short_eq(a: &[u8; INLINE_KEY], b: &[u8]) -> bool {
    let n = b.len();
    debug_assert!((1..=INLINE_KEY).contains(&n));
    let word = |s: &[u8], at: usize| -> u64 {
        let mut w = [0; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_ne_bytes(w)
    };
    let half = |s: &[u8], at: usize| -> u32 {
        let mut w = [0; 4];
        w.copy_from_slice(&s[at..at + 4]);
        u32::from_ne_bytes(w)
    };
    if n >= 8 {
        // [0, 8), [n - 8, n), and [8, 16) when more than 16: every byte.
        word(a, 0) == word(b, 0)
            && word(a, n - 8) == word(b, n - 8)
            && (n <= 16 || word(a, 8) == word(b, 8))
    } else if n >= 4 {
        half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4)
    } else {
        // 1 to 3 bytes: the first, the middle and the last cover them.
        n != 0 && a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1]
    }
}

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
    /// See the module doc: the latest grant's fence while held, the next's while free.
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
    /// due (ms): see the module doc's "one timer per line".
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
            line: UnsafeCell::new(Line { tail: ptr::null() }),
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
            if s.held_or_queued() {
                return Tried::Held;
            }
            if s.locked() {
                // Only `close` locks the line of a free key; it is brief.
                s = self.wait_line_unlocked(s, &mut backoff);
                continue;
            }
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
            if s.takeable() {
                match self.state.compare_exchange_weak(
                    s,
                    HELD,
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
            // Acquire: to see the line as the previous QLOCK owner left it.
            if let Err(now) = self.state.compare_exchange_weak(
                s,
                s.with_locked(),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
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
    unsafe fn enqueue_locked<E>(
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
        // (Mutant for loom-tests/README.md: a Relaxed unlock.)
        let unlock = if cfg!(holdline_mutant = "relaxed_unlock") {
            Ordering::Relaxed
        } else {
            Ordering::Release
        };
        // SAFETY: we own QLOCK.
        let s = unsafe { self.line_grew(s) };
        self.unlock_line(s, unlock);
        Ok(Enqueued::Waiting {
            first: len == 0,
            arm_line_ms,
        })
    }

    /// Waits until `waiter` is granted the key, the store closes, or
    /// `deadline` passes. Spins first when `first` in line, so
    /// a handoff finds it awake; parks after.
    pub(crate) fn wait(
        &self,
        waiter: Pin<&Waiter>,
        first: bool,
        clock: &Clock,
        deadline: Deadline,
    ) -> WaitEnd {
        let budget = if first {
            first_in_line_spin_pauses()
        } else {
            SPIN_BEHIND
        };
        let (mut spent, mut round) = (0, 0);
        while spent < budget {
            if let Some(end) = end_of(waiter.status.load(Ordering::Acquire)) {
                count(Event::GrantedSpinning);
                return end;
            }
            // Short rounds first, so a quick handoff is seen at once.
            let pauses = (1u32 << (round / 16).min(3)).min(SPIN_ROUND);
            for _ in 0..pauses {
                spin_loop();
            }
            spent += pauses;
            round += 1;
        }
        // The clock's first read: when the spin ended.
        let parked_at = clock.now_us();
        let deadline_us = match deadline {
            Deadline::At(at) => at,
            // +1 so the rounded-down clock never ends a wait early.
            // Saturating throughout: a wait past the clock's range is no deadline.
            Deadline::AfterSpin(ms) => parked_at
                .saturating_add(ms.saturating_mul(1000))
                .saturating_add(1),
        };
        // Acquire on failure: a final status was published with Release.
        if let Err(now) =
            waiter
                .status
                .compare_exchange(WAITING, PARKED, Ordering::Acquire, Ordering::Acquire)
        {
            return end_of(now).unwrap_or(WaitEnd::TimedOut);
        }
        let end = self.park_until(waiter, clock, deadline_us);
        if first {
            // The first in line learns from how long its parked waits took
            // how long to spin.
            let parked = (end == WaitEnd::Granted).then(|| clock.now_us() - parked_at);
            spin_learn(parked, spent);
        }
        end
    }

    /// The parked part of [`wait`](Record::wait): sleeps until a final
    /// status arrives or the deadline passes (then leaves the line).
    fn park_until(&self, waiter: Pin<&Waiter>, clock: &Clock, deadline_us: u64) -> WaitEnd {
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
                    return end;
                }
                // SAFETY: pinned, status read not final while pinned.
                return unsafe { self.leave(waiter) };
            }
            // Cap one park at a day so huge deadlines cannot overflow the call.
            count(Event::Park);
            park_timeout(Duration::from_micros(
                (deadline_us - now).min(86_400_000_000),
            ));
            if let Some(end) = end_of(waiter.status.load(Ordering::Acquire)) {
                count(Event::GrantedParked);
                return end;
            }
        }
    }

    /// A task's poll: answers its wait's end if it has one, else makes sure
    /// `waker` is the one a grant will call.
    ///
    /// # Safety
    /// The caller is pinned and read `waiter`'s status as not final while
    /// pinned, so the record is alive (module doc); `waiter` is a task's node
    /// linked into this record's line.
    pub(crate) unsafe fn poll_wait(&self, waiter: Pin<&Waiter>, waker: &Waker) -> Option<WaitEnd> {
        let s = self.lock_line();
        // Under QLOCK only we can change the status or the waker now.
        let end = waiter.end();
        // SAFETY: the node is linked and we own QLOCK, which guards `wake`.
        // `will_wake` compares the wakers' data and vtable: no foreign code.
        let current = end.is_some() || waiter.wake.with(|w| unsafe { &*w }.wakes(waker));
        // Release: publishes nothing new, lets the next QLOCK owner in.
        self.unlock_line(s, Ordering::Release);
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
        let status = waiter.status.load(Ordering::Acquire);
        // Mutant for loom-tests/README.md: leave the line even when granted.
        let status = if cfg!(holdline_mutant = "cancel_ignores_grant") {
            PARKED
        } else {
            status
        };
        if let Some(end) = end_of(status) {
            self.unlock_line(s, Ordering::Release);
            return end;
        }
        // SAFETY: we own QLOCK and `waiter` is linked (no final status).
        let now_empty = unsafe { self.unlink(&waiter) };
        // Relaxed: only the owner reads LEFT, in program order.
        waiter.status.store(LEFT, Ordering::Relaxed);
        // SAFETY: we own QLOCK.
        let s = unsafe { self.line_shrank(s, now_empty) };
        // Mutant for loom-tests/README.md: a departure that serves nobody.
        if !s.multi() || cfg!(holdline_mutant = "leave_serves_none") {
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
    /// (no barging), otherwise free. Called once per grant, by its holder or
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
            if !s.queued() {
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
            if let Err(now) = self.state.compare_exchange_weak(
                s,
                s.with_locked(),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                s = now;
                continue;
            }
            // SAFETY: we own QLOCK; QUEUED says the line is not empty.
            let (first, now_empty) = unsafe { self.pop_front() };
            let s = s.with_one_fewer_waiter();
            // Relaxed: our own store in `release`.
            let fence = self.fence.load(Ordering::Relaxed);
            // SAFETY: `first` was linked until just now and has no final
            // status, so its thread is still waiting for one: alive.
            let wake = unsafe { finish_waiter(first, GRANTED, fence) };
            // HELD stays set: it passed to `first`.
            let s = if now_empty { s.without_queued() } else { s };
            // Release: publishes the line and, to later lockers, the grant.
            self.unlock_line(s, Ordering::Release);
            if let Some(wake) = wake {
                wake.wake_granted();
            }
            return;
        }
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

    /// Spins until it owns QLOCK; answers the word's value without QLOCK.
    /// The caller must know the record is alive; if it may be DEAD (a
    /// caller that is only pinned), it lets the lock go unchanged when the
    /// answer has DEAD (`DEAD|QLOCK` only ever goes back to `DEAD`).
    fn lock_line(&self) -> u32 {
        let mut s = self.state.load(Ordering::Relaxed);
        let mut backoff = Backoff::new();
        loop {
            if s.locked() {
                s = self.wait_line_unlocked(s, &mut backoff);
                continue;
            }
            // Acquire: to see the line as the previous owner left it.
            match self.state.compare_exchange_weak(
                s,
                s.with_locked(),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return s,
                Err(now) => s = now,
            }
        }
    }

    /// Lets QLOCK go, leaving the word `s` (the value it was locked from,
    /// updated: neither `QLOCK` nor `QSLEEP`), and wakes whoever sleeps
    /// for it. A swap, not a store: a waiter may have added `QSLEEP` since
    /// the lock was taken. `order`: Release, but for one mutant's.
    #[inline]
    fn unlock_line(&self, s: u32, order: Ordering) {
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
    fn wait_line_unlocked(&self, s: u32, backoff: &mut Backoff) -> u32 {
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

    /// # Safety
    /// The caller owns QLOCK and `w` is not linked.
    unsafe fn push_back(&self, w: Pin<&Waiter>) {
        let wp: *const Waiter = &*w;
        self.line.with_mut(|line| {
            // SAFETY: QLOCK gives exclusive access to the line and the links;
            // linked nodes are alive.
            unsafe {
                let tail = (*line).tail;
                if tail.is_null() {
                    w.prev.with_mut(|p| *p = wp);
                    w.next.with_mut(|n| *n = wp);
                } else {
                    let head = (*tail).next.with(|n| *n);
                    w.prev.with_mut(|p| *p = tail);
                    w.next.with_mut(|n| *n = head);
                    (*tail).next.with_mut(|n| *n = wp);
                    (*head).prev.with_mut(|p| *p = wp);
                }
                (*line).tail = wp;
            }
        });
    }

    /// Unlinks the first waiter; answers it and whether the line is now empty.
    ///
    /// # Safety
    /// The caller owns QLOCK and the line is not empty.
    unsafe fn pop_front(&self) -> (*const Waiter, bool) {
        let head = self.line.with(|line| {
            // SAFETY: QLOCK gives exclusive access; the tail is linked, so alive.
            unsafe {
                let tail = (*line).tail;
                debug_assert!(!tail.is_null());
                (*tail).next.with(|n| *n)
            }
        });
        // SAFETY: the caller's contract; `head` is linked.
        let now_empty = unsafe { self.unlink(&*head) };
        (head, now_empty)
    }

    /// Unlinks `w` from anywhere in the line; answers whether it is now empty.
    ///
    /// # Safety
    /// The caller owns QLOCK and `w` is linked.
    unsafe fn unlink(&self, w: &Waiter) -> bool {
        let wp: *const Waiter = w;
        self.line.with_mut(|line| {
            // SAFETY: QLOCK gives exclusive access; linked nodes are alive.
            unsafe {
                let prev = w.prev.with(|p| *p);
                let next = w.next.with(|n| *n);
                if next == wp {
                    // The only one.
                    (*line).tail = ptr::null();
                    return true;
                }
                (*prev).next.with_mut(|n| *n = next);
                (*next).prev.with_mut(|p| *p = prev);
                if (*line).tail == wp {
                    (*line).tail = prev;
                }
                false
            }
        })
    }
}

/// The line timer (module doc: "one timer per line").
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

    /// The line's length.
    ///
    /// # Safety
    /// The caller owns QLOCK; `s` is the word without it.
    unsafe fn line_len(&self, s: u32) -> u32 {
        if !s.multi() {
            s.waiters()
        } else {
            self.permits().waiters()
        }
    }

    /// One more in line: the word to unlock with.
    ///
    /// # Safety
    /// As for [`line_len`](Record::line_len).
    unsafe fn line_grew(&self, s: u32) -> u32 {
        if !s.multi() {
            return s.with_one_more_waiter();
        }
        let permits = self.permits();
        permits.set_waiters(permits.waiters() + 1);
        s.with_queued()
    }

    /// One fewer in line (`now_empty`: it was the last): the word to unlock with.
    ///
    /// # Safety
    /// As for [`line_len`](Record::line_len).
    unsafe fn line_shrank(&self, s: u32, now_empty: bool) -> u32 {
        let s = if !s.multi() {
            s.with_one_fewer_waiter()
        } else {
            let permits = self.permits();
            permits.set_waiters(permits.waiters() - 1);
            s
        };
        if now_empty {
            s.without_queued()
        } else {
            s
        }
    }

    /// Keeps the line timer's invariant for a task node just linked: the
    /// time of the entry its caller must arm, if none pending comes at or
    /// before its deadline.
    ///
    /// # Safety
    /// The caller owns QLOCK and `waiter` is linked.
    unsafe fn cover_deadline(&self, waiter: &Waiter) -> Option<u64> {
        // SAFETY: the caller owns QLOCK, which guards a linked node's cell.
        let deadline_us = waiter.fence.with(|d| unsafe { *d });
        if deadline_us == 0 {
            return None;
        }
        let due_ms = deadline_us.div_ceil(1000);
        // SAFETY: the caller owns QLOCK.
        unsafe {
            self.with_locked(|extra| {
                // Mutant for loom-tests/README.md: a deadline left uncovered.
                if extra.line_timer_ms.is_some_and(|at| at <= due_ms)
                    || cfg!(holdline_mutant = "uncovered_deadline")
                {
                    return None;
                }
                extra.line_timer_ms = Some(due_ms);
                Some(due_ms)
            })
        }
    }

    /// A line-timer entry for this key came due at `now_ms`: collects the
    /// wakes of every task in line whose deadline has passed (each leaves
    /// the line on the poll this wake causes) and answers when the next
    /// entry must come, if one must be armed to cover those left.
    ///
    /// The caller is pinned and found the record in its table while pinned
    /// (it may have turned `DEAD` since: then nothing is in line).
    pub(crate) fn expire_tasks(&self, now_ms: u64, wakes: &mut Wakes) -> Option<u64> {
        // Room made before the line is locked: nothing allocates under
        // QLOCK. A task that finds no room is covered as if due now, so
        // the line fires again at once for it.
        wakes.reserve(self.waiter_count() as usize);
        let s = self.lock_line();
        if s.dead() {
            self.unlock_line(s, Ordering::Release);
            return None;
        }
        let mut next_us: Option<u64> = None;
        // SAFETY: we own QLOCK.
        for _ in 0..unsafe { self.line_len(s) } {
            // SAFETY: we own QLOCK; the count says how many are linked; the
            // rotation keeps every node linked (head becomes the tail).
            let node = unsafe { &*self.rotate() };
            // SAFETY: QLOCK guards a linked node's cells.
            let deadline_us = node.fence.with(|d| unsafe { *d });
            if deadline_us == 0 {
                continue;
            }
            let due = deadline_us <= now_ms.saturating_mul(1000);
            if due && wakes.len() < wakes.capacity() {
                // The waker moved out, not cloned (no foreign code under
                // QLOCK): a no-op stays behind, and the task's poll, which
                // this wake causes, leaves the line or sets a new one.
                // SAFETY: as above.
                wakes.push(node.wake.with_mut(|w| unsafe { (*w).take() }));
            } else {
                next_us = Some(next_us.map_or(deadline_us, |n| n.min(deadline_us)));
            }
        }
        // SAFETY: we own QLOCK.
        let arm = unsafe {
            self.with_locked(|extra| {
                // An entry after `now_ms` is still on the wheel; one at or
                // before it is this one, or fired already.
                let pending = extra.line_timer_ms.filter(|&at| at > now_ms);
                let arm = next_us
                    .map(|n| n.div_ceil(1000))
                    .filter(|&due| pending.is_none_or(|at| at > due));
                extra.line_timer_ms = arm.or(pending);
                arm
            })
        };
        // Release: publishes the line (rotated) to the next QLOCK owner.
        self.unlock_line(s, Ordering::Release);
        arm
    }

    /// Moves the line's head to its tail (the order is a circle: the next
    /// head is the old second); answers the node moved.
    ///
    /// # Safety
    /// The caller owns QLOCK and the line is not empty. After `n` turns of
    /// a line of `n`, the order is as it was.
    unsafe fn rotate(&self) -> *const Waiter {
        self.line.with_mut(|line| {
            // SAFETY: QLOCK gives exclusive access; the tail is linked.
            unsafe {
                let head = (*(*line).tail).next.with(|n| *n);
                (*line).tail = head;
                head
            }
        })
    }
}

/// What one grant takes of a key: `want` of its lock's `total` permits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Take {
    pub(crate) total: u32,
    pub(crate) want: u32,
}

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
struct Woken {
    first: Option<Wake>,
    more: Vec<Wake>,
}

impl Woken {
    fn push(&mut self, wake: Wake) {
        match self.first {
            None => self.first = Some(wake),
            Some(_) => self.more.push(wake),
        }
    }

    /// Fires the wakes of the waiters granted the key.
    fn wake(self) {
        if let Some(w) = self.first {
            w.wake_granted();
        }
        for w in self.more {
            w.wake_granted();
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
    fn try_acquire_multi(&self, want: u32) -> Tried {
        let permits = self.permits();
        let mut s = self.state.load(Ordering::Relaxed);
        let mut backoff = Backoff::new();
        loop {
            if s.dead() {
                return Tried::Dead;
            }
            // Mutant for loom-tests/README.md: a newcomer overtakes the line.
            let waits = s.queued() && !cfg!(holdline_mutant = "fast_overtakes");
            if waits || !permits.fits(s.held_permits(), want) {
                return Tried::Held;
            }
            if s.locked() {
                s = self.wait_line_unlocked(s, &mut backoff);
                continue;
            }
            // Mutant for loom-tests/README.md: a take that stores its count
            // over whatever changed since its load.
            if cfg!(holdline_mutant = "take_stores") {
                self.state.store(s.with_taken(want), Ordering::Release);
                return Tried::Granted(self.book_grant(permits));
            }
            // Acquire: pairs with the Release of the releases before, as
            // for a lock of one permit.
            match self.state.compare_exchange_weak(
                s,
                s.with_taken(want),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
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
    unsafe fn acquire_or_enqueue_multi<E>(
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
        // Mutant for loom-tests/README.md: no second look under QLOCK.
        let look = !cfg!(holdline_mutant = "enqueue_without_recheck");
        if look && !s.queued() && permits.fits(s.held_permits(), waiter.want) {
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
    fn release_multi(&self, fence: u64, want: u32) {
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
            // Someone waits and may fit now: serve the line under QLOCK.
            // (Mutant for loom-tests/README.md: give back past the line.)
            if s.queued() && !cfg!(holdline_mutant = "release_skips_line") {
                // Acquire: to see the line as the previous owner left it.
                match self.state.compare_exchange_weak(
                    s,
                    s.with_locked(),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return self.give_back_locked(s, want),
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
    unsafe fn serve_line(&self, mut s: u32, woken: &mut Woken) -> u32 {
        let permits = self.permits();
        while s.queued() {
            // SAFETY: QLOCK; QUEUED says the line is not empty, and linked
            // nodes are alive.
            let want = unsafe { (*self.head()).want };
            if !permits.fits(s.held_permits(), want) {
                break;
            }
            // SAFETY: as above.
            let (head, now_empty) = unsafe { self.pop_front() };
            // Drawn here, booked by its taker (`take_served`).
            let fence = self.draw_fence();
            // SAFETY: as above.
            s = unsafe { self.line_shrank(s.with_taken(want), now_empty) };
            // SAFETY: `head` was linked until just now, with no final status.
            if let Some(wake) = unsafe { finish_waiter(head, GRANTED, fence) } {
                woken.push(wake);
            }
            // Mutant for loom-tests/README.md: serve one waiter per release.
            if cfg!(holdline_mutant = "serve_one") {
                break;
            }
        }
        s
    }

    /// The line's first node.
    ///
    /// # Safety
    /// The caller owns QLOCK and the line is not empty.
    unsafe fn head(&self) -> *const Waiter {
        self.line.with(|line| {
            // SAFETY: QLOCK gives exclusive access; the tail is linked.
            unsafe { (*(*line).tail).next.with(|n| *n) }
        })
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

/// Gives a just-unlinked waiter its final status; answers the wake to fire
/// once the caller has let QLOCK go.
///
/// `fence` is the grant's (ignored for `CLOSED`).
///
/// # Safety
/// The caller owns the QLOCK of the line `w` was just unlinked from, and `w`
/// has no final status yet (so its owner has not returned or dropped it).
unsafe fn finish_waiter(w: *const Waiter, to: u32, fence: u64) -> Option<Wake> {
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
            // Mutant for loom-tests/README.md: publish the final status
            // before copying the wake handle (the node may be gone by then).
            if cfg!(holdline_mutant = "status_before_wake") {
                w.status.store(to, Ordering::Release);
            }
            // PARKED: it sleeps (or is about to), or it is a task. Take the
            // handle first: once the status is final the node may vanish.
            // Nobody reads a node's waker after its final status.
            // SAFETY: we own QLOCK, which guards `wake` of a linked node.
            let wake = w.wake.with_mut(|k| unsafe { (*k).take() });
            w.status.store(to, Ordering::Release);
            // Mutant for loom-tests/README.md: forget the wake.
            if cfg!(holdline_mutant = "missed_wake") {
                return None;
            }
            Some(wake)
        }
    }
}

fn end_of(status: u32) -> Option<WaitEnd> {
    // LEFT is reported by `leave` itself, never read back as an end.
    match status {
        GRANTED => Some(WaitEnd::Granted),
        CLOSED => Some(WaitEnd::Closed),
        _ => None,
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn inline_keys_compare_byte_for_byte() {
        let texts: Vec<String> = (1..=40)
            .map(|n| (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect())
            .collect();
        for t in &texts {
            let k = KeyText::new(t);
            assert!(k.is(t), "{t}");
            // Every one-byte change, at every position, is another key.
            for i in 0..t.len() {
                let mut other = t.clone().into_bytes();
                other[i] = b'Z';
                let other = String::from_utf8(other).unwrap();
                assert!(!k.is(&other), "{t} vs {other}");
            }
            for u in &texts {
                assert_eq!(k.is(u), t == u, "{t} vs {u}");
            }
        }
    }

    #[test]
    fn a_record_and_a_waiter_are_small() {
        // A held key with no waiters: the record (plus its key text and a
        // bucket slot, measured in tests/memory.rs). A waiter: one node.
        assert_eq!(std::mem::size_of::<Record>(), 64, "one cache line");
        assert_eq!(std::mem::align_of::<Record>(), 64);
        assert!(
            std::mem::size_of::<Waiter>() <= 48,
            "{}",
            std::mem::size_of::<Waiter>()
        );
    }
}
