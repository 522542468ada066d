//! Per-thread context: which holds are running on this thread, and whether
//! it is inside a transaction. This is how `hold` of a key the thread already
//! holds, and `hold` inside `store.tx`, fail at once instead of waiting.
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

/// Holds nested up to this deep are listed inline; deeper ones spill to a
/// vector in a second thread-local. Keeping `ThreadCtx` free of anything
/// with a destructor makes its thread-local a plain address (no lazy
/// registration check) on the hot path.
const INLINE: usize = 4;

pub(crate) struct ThreadCtx {
    tx_depth: Cell<u32>,
    depth: Cell<usize>,
    inline: [Cell<HeldEntry>; INLINE],
}

impl ThreadCtx {
    const fn new() -> Self {
        ThreadCtx {
            tx_depth: Cell::new(0),
            depth: Cell::new(0),
            inline: [const { Cell::new(NO_ENTRY) }; INLINE],
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

/// Why a hold may not start on this thread.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Refusal {
    InTransaction,
    SameKeyHeld,
}

/// Checks the thread may hold `key` of lock `lock` now.
#[inline]
pub(crate) fn check_hold(lock: usize, hash: u64, key: &str) -> Result<(), Refusal> {
    let is_key = |h: &HeldEntry| {
        // SAFETY: see the module invariant: a listed key outlives its entry.
        h.lock == lock && h.hash == hash && unsafe { &*h.key } == key
    };
    // try_with: during thread-local teardown there is nothing to check.
    CTX.try_with(|c| {
        if c.tx_depth.get() != 0 {
            return Err(Refusal::InTransaction);
        }
        let depth = c.depth.get();
        if c.inline[..depth.min(INLINE)]
            .iter()
            .any(|h| is_key(&h.get()))
        {
            return Err(Refusal::SameKeyHeld);
        }
        // try_with: once SPILL is torn down (a hold in another thread-local's
        // destructor) the deeper holds are not listed, so not checked: a
        // same-key hold there waits out its deadline instead of failing at
        // once, which is the most a dying thread can be told.
        if depth > INLINE
            && SPILL
                .try_with(|s| s.borrow().iter().any(is_key))
                .unwrap_or(false)
        {
            return Err(Refusal::SameKeyHeld);
        }
        Ok(())
    })
    .unwrap_or(Ok(()))
}

/// Lists a hold that starts running on this thread.
///
/// # Safety
/// `key` must stay alive until the matching [`pop_hold`].
#[inline]
pub(crate) unsafe fn push_hold(lock: usize, hash: u64, key: &str) {
    let entry = HeldEntry { lock, hash, key };
    // try_with: during thread-local teardown the matching pop is a no-op too.
    let _ = CTX.try_with(|c| {
        let depth = c.depth.get();
        if depth < INLINE {
            c.inline[depth].set(entry);
        } else {
            // try_with: during teardown the entry goes unlisted (see
            // `check_hold`); `depth` still counts it, so the pops match.
            let _ = SPILL.try_with(|s| s.borrow_mut().push(entry));
        }
        c.depth.set(depth + 1);
    });
}

/// Unlists the innermost hold of this thread.
#[inline]
pub(crate) fn pop_hold() {
    let _ = CTX.try_with(|c| {
        let depth = c.depth.get().saturating_sub(1);
        if depth >= INLINE {
            let _ = SPILL.try_with(|s| s.borrow_mut().pop());
        }
        c.depth.set(depth);
    });
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
