//! The state word: one key's `u32` of flags and a count, and the names
//! of its bits ([`StateWord`]). Every test and change of the word goes
//! through these names; the transitions themselves are the line's
//! (`line`, `line_lock`) and the permits' (`multi`).
//!
//! | bit      | meaning                                                        |
//! |----------|----------------------------------------------------------------|
//! | `HELD`   | the key has a holder                                           |
//! | `QLOCK`  | someone is changing the line (a tiny lock over the line)       |
//! | `QUEUED` | the line is not empty                                          |
//! | `DEAD`   | the table retired this record; look the key up again           |
//! | 4..18    | one permit: the line's length (written by the `QLOCK` owner)   |
//! | 4..24    | `MULTI`: the permits held now                                  |
//! | `WOKEN`  | one permit: the first in line was offered the free key and has not acted yet |
//! | `OPEN`   | `MULTI`: a newcomer whose permits fit may take them ahead of the line |
//! | `INORDER`| the line is served in order for now (bounded bypass)          |
//! | `QSLEEP` | a thread sleeps until `QLOCK` is let go (set only with `QLOCK`)  |
//! | `MULTI`  | the key's lock has several permits (set at birth, never changed) |
//!
//! The word is a `u32`, so that with the 32-bit hash and an inline key the
//! record stays one cache line.
//!
//! Invariants:
//! - `QUEUED` implies `HELD`, but for one state: a release whose first
//!   waiter may be bypassed (`Waiter`'s bound, not passed yet) leaves the
//!   key free with its line (`QUEUED` without `HELD`) and offers it to that
//!   waiter; whoever comes first takes it (`free`). Otherwise a release
//!   with waiters hands `HELD` straight to the first of them.
//! - `WOKEN` (one permit only) implies `QUEUED` and not `INORDER`: a
//!   release offered the free key to the first in line (under `QLOCK`),
//!   which has not yet looked (under `QLOCK`) whether it is still free. A
//!   release that finds it set lets the key go with one CAS (`HELD`
//!   cleared, `QLOCK` not taken): the first in line has its offer and
//!   will look. Its look clears `WOKEN`, so the release after it takes
//!   `QLOCK` again and checks the bound.
//! - `OPEN` (`MULTI` only) implies `QUEUED`: the last serving of the line
//!   (under `QLOCK`) found its first waiter still unable to fit and within
//!   its bound, so a newcomer's CAS may take permits that fit past it
//!   (bounded bypass); every release with a line serves it again, under
//!   `QLOCK`, and sets or clears `OPEN` anew.
//! - `INORDER` implies `QUEUED`: a release that found its first waiter past
//!   its bound handed the key over, set it and marked the last in line then;
//!   every release hands over until that waiter is granted or leaves, or
//!   the line empties (`without_queued` clears both): the line as it stood
//!   when the bound passed is served in order.
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
//! # Two kinds of word, one type
//!
//! Bits 4..24 mean one thing or the other by the word's kind: the line's
//! length for a lock of one permit, the permits held for a lock of several
//! (`MULTI`, whose line's length lives in its [`Permits`]). So each bit
//! does have one meaning *for a given record*, and the kinds are not
//! given two types, on purpose:
//!
//! - Every transition is one CAS (or one swap) on one `AtomicU32`. Two
//!   types would be two views of that one atomic, since a record's kind
//!   is only known by loading its word: the uncontended hold tries
//!   `0 -> HELD` before it knows the kind (a `MULTI` word is never `0`),
//!   and `try_retire`, `lock_line` and the stats peek at any record.
//!   Splitting the atomic would break the single CAS that keeps the
//!   invariants above; wrapping it in two newtypes would add a branch or a
//!   conversion at each of those shared sites and leave the bits as they
//!   are (the representation is what loom checks, and what keeps a record
//!   one cache line).
//! - A word's kind never changes: `MULTI` is set at birth
//!   (`Record::new_held`) and no transition clears it, not even `DEAD`
//!   (`try_retire` keeps it). So a word loaded once and seen `multi()`
//!   stays of that kind through every CAS on the record, and each path
//!   branches on the kind once, at its top (`acquire_or_enqueue`,
//!   `try_acquire`, `release`, `holders`), then stays in its kind's code.
//! - The methods say which kind they serve. The flags (`held`, `locked`,
//!   `queued`, `dead`, `has_sleepers`, `free`, `held_alone`, ...) mean
//!   the same for both. Only for one permit: [`waiters`],
//!   [`with_one_more_waiter`], [`with_one_fewer_waiter`]. Only for `MULTI`:
//!   [`held_permits`], [`with_taken`], [`with_given_back`]. Each of these
//!   six checks its word's kind with a `debug_assert!`, compiled out of
//!   a release build: the uncontended hold of one permit calls none of
//!   them (it tests `free`, `held_alone` and `multi`), and the line's
//!   code reaches the counts through `line_len`, `line_grew` and
//!   `line_shrank`, which branch on the kind.
//!
//! [`Permits`]: crate::permits::Permits
//! [`waiters`]: StateWord::waiters
//! [`with_one_more_waiter`]: StateWord::with_one_more_waiter
//! [`with_one_fewer_waiter`]: StateWord::with_one_fewer_waiter
//! [`held_permits`]: StateWord::held_permits
//! [`with_taken`]: StateWord::with_taken
//! [`with_given_back`]: StateWord::with_given_back

pub(super) const HELD: u32 = 1;
const QLOCK: u32 = 1 << 1;
const QUEUED: u32 = 1 << 2;
const DEAD: u32 = 1 << 3;
/// The line is served in order for now (above both counts' bits).
const INORDER: u32 = 1 << 29;
/// `MULTI`: a newcomer may take permits that fit ahead of the line.
const OPEN: u32 = 1 << 28;
/// One permit: the first in line was offered the key and has not acted.
const WOKEN: u32 = 1 << 27;
/// Someone sleeps until `QLOCK` is let go (above both counts' bits).
const QSLEEP: u32 = 1 << 30;
/// A lock of several permits: see `multi`'s module doc.
pub(super) const MULTI: u32 = 1 << 31;
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
    /// Nobody holds it or changes the line, and it is not retired: a CAS
    /// adding `HELD` may take it, ahead of a line left to be bypassed.
    fn free(self) -> bool;
    /// `INORDER`: releases hand the key over until the line empties.
    fn in_order(self) -> bool;
    fn with_in_order(self) -> Self;
    fn without_in_order(self) -> Self;
    /// `WOKEN`: the first in line was offered the key and has not acted.
    fn woken(self) -> bool;
    fn with_woken(self) -> Self;
    fn without_woken(self) -> Self;
    /// `OPEN`: a newcomer may take permits that fit ahead of the line.
    fn open(self) -> bool;
    fn with_open(self) -> Self;
    fn without_open(self) -> Self;
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
    fn free(self) -> bool {
        self & (HELD | QLOCK | DEAD) == 0
    }
    #[inline]
    fn in_order(self) -> bool {
        self & INORDER != 0
    }
    #[inline]
    fn with_in_order(self) -> u32 {
        self | INORDER
    }
    #[inline]
    fn without_in_order(self) -> u32 {
        self & !INORDER
    }
    #[inline]
    fn woken(self) -> bool {
        self & WOKEN != 0
    }
    #[inline]
    fn with_woken(self) -> u32 {
        self | WOKEN
    }
    #[inline]
    fn without_woken(self) -> u32 {
        self & !WOKEN
    }
    #[inline]
    fn open(self) -> bool {
        self & OPEN != 0
    }
    #[inline]
    fn with_open(self) -> u32 {
        self | OPEN
    }
    #[inline]
    fn without_open(self) -> u32 {
        self & !OPEN
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
        self & !(QUEUED | INORDER | OPEN | WOKEN)
    }
    #[inline]
    fn with_dead(self) -> u32 {
        self | DEAD
    }
    #[inline]
    fn waiters(self) -> u32 {
        debug_assert!(!self.multi(), "{self:#x}: a word of one permit");
        (self & WAITER_MASK) >> WAITER_SHIFT
    }
    #[inline]
    fn with_one_more_waiter(self) -> u32 {
        debug_assert!(!self.multi(), "{self:#x}: a word of one permit");
        (self | QUEUED) + WAITER_ONE
    }
    #[inline]
    fn with_one_fewer_waiter(self) -> u32 {
        debug_assert!(!self.multi(), "{self:#x}: a word of one permit");
        self - WAITER_ONE
    }
    #[inline]
    fn held_permits(self) -> u32 {
        debug_assert!(self.multi(), "{self:#x}: a MULTI word");
        (self & HELD_MASK) >> WAITER_SHIFT
    }
    #[inline]
    fn with_taken(self, want: u32) -> u32 {
        debug_assert!(self.multi(), "{self:#x}: a MULTI word");
        (self + want * HELD_ONE) | HELD
    }
    #[inline]
    fn with_given_back(self, want: u32) -> u32 {
        debug_assert!(self.multi(), "{self:#x}: a MULTI word");
        let s = self - want * HELD_ONE;
        if s.held_permits() == 0 {
            s.without_held()
        } else {
            s
        }
    }
}
