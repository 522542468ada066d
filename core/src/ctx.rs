//! Per-thread context: which holds are running on this thread, and whether
//! it is inside a transaction. This is how `hold` of a key the thread already
//! holds, and `hold` inside `store.tx`, fail at once instead of waiting.
//! Also whether a release on this thread granted a key to a task that its
//! runtime has not run yet, which a task's next hold of a free key yields
//! to (`hold_async`'s module doc).
//!
//! Invariant: an entry in `holds` names a hold whose closure is running on
//! this thread (entries are pushed at the grant and popped when the hold ends,
//! unwinding included), so the key text it points at, which lives in that
//! hold's caller frame further up this stack, is alive while it is listed.

use std::cell::{Cell, RefCell};

#[derive(Clone, Copy)]
struct HeldEntry {
    lock: usize,
    hash: u64,
    key: *const str,
}

const NO_ENTRY: HeldEntry = HeldEntry {
    lock: 0,
    hash: 0,
    key: "" as *const str,
};

/// One inline listing, a cell per field, so listing a hold is three
/// stores from registers. (An entry that was borrowed, or set whole into a
/// `Cell<HeldEntry>`, went through a copy on the stack whose 16-byte loads
/// of 8-byte stores missed store forwarding: an eighth of the uncontended
/// hold.)
struct InlineEntry {
    lock: Cell<usize>,
    hash: Cell<u64>,
    key: Cell<*const str>,
}

impl InlineEntry {
    const fn new() -> Self {
        InlineEntry {
            lock: Cell::new(NO_ENTRY.lock),
            hash: Cell::new(NO_ENTRY.hash),
            key: Cell::new(NO_ENTRY.key),
        }
    }

    #[inline(always)]
    fn set(&self, entry: HeldEntry) {
        self.lock.set(entry.lock);
        self.hash.set(entry.hash);
        self.key.set(entry.key);
    }

    fn get(&self) -> HeldEntry {
        HeldEntry {
            lock: self.lock.get(),
            hash: self.hash.get(),
            key: self.key.get(),
        }
    }
}

/// Holds nested up to this deep are listed inline; deeper ones spill to a
/// vector in a second thread-local. Keeping `ThreadCtx` free of anything
/// with a destructor makes its thread-local a plain address (no lazy
/// registration check) on the hot path.
const INLINE: usize = 4;

pub(crate) struct ThreadCtx {
    /// A release on this thread granted a key to a waiting task, and no
    /// task wait on this thread has gone pending since.
    task_granted: Cell<bool>,
    /// The fast path of this thread's running task found its key free but
    /// left it, owing that granted task a turn: its slow path yields.
    yield_owed: Cell<bool>,
    tx_depth: Cell<u32>,
    depth: Cell<usize>,
    inline: [InlineEntry; INLINE],
}

impl ThreadCtx {
    const fn new() -> Self {
        ThreadCtx {
            task_granted: Cell::new(false),
            yield_owed: Cell::new(false),
            tx_depth: Cell::new(0),
            depth: Cell::new(0),
            inline: [const { InlineEntry::new() }; INLINE],
        }
    }
}

#[cfg(not(loom))]
std::thread_local! {
    static CTX: ThreadCtx = const { ThreadCtx::new() };
    static SPILL: RefCell<Vec<HeldEntry>> = const { RefCell::new(Vec::new()) };
}

#[cfg(loom)]
loom::thread_local! {
    static CTX: ThreadCtx = ThreadCtx::new();
    static SPILL: RefCell<Vec<HeldEntry>> = RefCell::new(Vec::new());
}

/// A release on this thread just granted a key to a waiting task.
pub(crate) fn note_task_granted() {
    let _ = CTX.try_with(|c| c.task_granted.set(true));
}

/// A task wait on this thread went pending: the tasks it woke get to run.
pub(crate) fn forget_task_granted() {
    let _ = CTX.try_with(|c| c.task_granted.set(false));
}

/// Whether a release on this thread granted a task since the last pending
/// wait here.
#[inline(always)]
pub(crate) fn task_granted() -> bool {
    CTX.try_with(|c| c.task_granted.get()).unwrap_or(false)
}

/// The running task's fast path left its free key to yield first.
pub(crate) fn owe_yield() {
    let _ = CTX.try_with(|c| c.yield_owed.set(true));
}

/// Whether the running task owes a yield, forgetting it (written only
/// when owed: every task's slow path asks).
pub(crate) fn take_yield_owed() -> bool {
    CTX.try_with(|c| c.yield_owed.get() && c.yield_owed.replace(false))
        .unwrap_or(false)
}

/// Why a hold may not start on this thread.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Refusal {
    InTransaction,
    SameKeyHeld,
}

/// Checks the thread may hold `key` of lock `lock` now (without listing it).
#[inline]
pub(crate) fn check_hold(lock: usize, hash: u64, key: &str) -> Result<(), Refusal> {
    // The entry is made by value, never borrowed, so it stays in
    // registers (see `InlineEntry`).
    let entry = HeldEntry { lock, hash, key };
    // try_with: during thread-local teardown there is nothing to check.
    CTX.try_with(|c| {
        if c.tx_depth.get() != 0 {
            return Err(Refusal::InTransaction);
        }
        let depth = c.depth.get();
        if depth != 0 && is_listed(c, depth, entry) {
            return Err(Refusal::SameKeyHeld);
        }
        Ok(())
    })
    .unwrap_or(Ok(()))
}

/// A hold listed on this thread's context: dropping it unlists the
/// innermost hold (unwinding too). Holds end in the reverse order of their
/// listing, so the innermost is always the guard's own.
#[must_use = "a hold is listed only while its guard lives"]
pub(crate) struct Listed<'k> {
    _key: std::marker::PhantomData<&'k str>,
    /// Thread-bound: the listing is this thread's.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for Listed<'_> {
    #[inline]
    fn drop(&mut self) {
        pop_hold();
    }
}

/// Checks a blocking hold of `key` of lock `lock` may start on this thread
/// (as [`check_hold`]; a transaction is no refusal when `in_tx_ok`) and,
/// if so, lists it, in one look at the thread's context.
///
/// # Safety
/// The guard must be dropped, not leaked (`mem::forget`): the entry points
/// at `key`, which the guard's lifetime keeps alive only while it lives.
#[inline]
pub(crate) unsafe fn enter_hold(
    lock: usize,
    hash: u64,
    key: &str,
    in_tx_ok: bool,
) -> Result<Listed<'_>, Refusal> {
    let entry = HeldEntry { lock, hash, key };
    // try_with: during thread-local teardown nothing is checked or listed,
    // and the guard's pop is a no-op too.
    let listed = CTX.try_with(|c| {
        let depth = c.depth.get();
        if c.tx_depth.get() != 0 && !in_tx_ok {
            return Err(Refusal::InTransaction);
        }
        if depth != 0 && is_listed(c, depth, entry) {
            return Err(Refusal::SameKeyHeld);
        }
        push(c, depth, entry);
        Ok(())
    });
    match listed {
        Ok(Err(refusal)) => Err(refusal),
        _ => Ok(Listed {
            _key: std::marker::PhantomData,
            _not_send: std::marker::PhantomData,
        }),
    }
}

/// Lists a hold that already passed its checks (a task's hold, for one
/// poll of its future).
///
/// # Safety
/// As for [`enter_hold`]: the guard must be dropped, not leaked.
#[inline]
pub(crate) unsafe fn list_hold(lock: usize, hash: u64, key: &str) -> Listed<'_> {
    let entry = HeldEntry { lock, hash, key };
    let _ = CTX.try_with(|c| push(c, c.depth.get(), entry));
    Listed {
        _key: std::marker::PhantomData,
        _not_send: std::marker::PhantomData,
    }
}

/// Whether a hold of `entry`'s key is listed among the `depth` holds of `c`.
#[cold]
fn is_listed(c: &ThreadCtx, depth: usize, entry: HeldEntry) -> bool {
    let is_key = |h: &HeldEntry| {
        // SAFETY: see the module invariant: a listed key outlives its entry.
        h.lock == entry.lock && h.hash == entry.hash && unsafe { *h.key == *entry.key }
    };
    if c.inline[..depth.min(INLINE)]
        .iter()
        .any(|h| is_key(&h.get()))
    {
        return true;
    }
    // try_with: once SPILL is torn down (a hold in another thread-local's
    // destructor) the deeper holds are not listed, so not checked: a
    // same-key hold there waits out its deadline instead of failing at
    // once, which is the most a dying thread can be told.
    depth > INLINE
        && SPILL
            .try_with(|s| s.borrow().iter().any(is_key))
            .unwrap_or(false)
}

#[inline]
fn push(c: &ThreadCtx, depth: usize, entry: HeldEntry) {
    if depth < INLINE {
        c.inline[depth].set(entry);
    } else {
        push_spilled(entry);
    }
    c.depth.set(depth + 1);
}

/// Lists a hold nested deeper than [`INLINE`].
#[cold]
fn push_spilled(entry: HeldEntry) {
    // try_with: during teardown the entry goes unlisted (see `is_listed`);
    // `depth` still counts it, so the pops match.
    let _ = SPILL.try_with(|s| s.borrow_mut().push(entry));
}

/// Unlists the innermost hold of this thread.
#[inline]
fn pop_hold() {
    let _ = CTX.try_with(|c| {
        let depth = c.depth.get().saturating_sub(1);
        if depth >= INLINE {
            pop_spilled();
        }
        c.depth.set(depth);
    });
}

/// Unlists the innermost of the holds nested deeper than [`INLINE`].
#[cold]
fn pop_spilled() {
    let _ = SPILL.try_with(|s| s.borrow_mut().pop());
}

/// Whether this thread is inside a transaction.
pub(crate) fn in_tx() -> bool {
    CTX.try_with(|c| c.tx_depth.get() != 0).unwrap_or(false)
}

/// Marks this thread inside a transaction until the guard drops.
pub(crate) fn enter_tx() -> TxMark {
    let _ = CTX.try_with(|c| c.tx_depth.set(c.tx_depth.get() + 1));
    TxMark {
        _not_send: std::marker::PhantomData,
    }
}

pub(crate) struct TxMark {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for TxMark {
    fn drop(&mut self) {
        let _ = CTX.try_with(|c| c.tx_depth.set(c.tx_depth.get() - 1));
    }
}
