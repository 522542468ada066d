//! Per-thread context: which holds are running on this thread, and whether
//! it is inside a transaction. This is how `hold` of a key the thread already
//! holds, and `hold` inside `store.tx`, fail at once instead of waiting.
//!
//! Invariant: an entry in `holds` names a hold whose closure is running on
//! this thread (entries are pushed at the grant and popped when the hold ends,
//! unwinding included), so the key text it points at, which lives in that
//! hold's caller frame further up this stack, is alive while it is listed.

use std::cell::{Cell, RefCell};

struct HeldEntry {
    lock: usize,
    hash: u64,
    key: *const str,
}

pub(crate) struct ThreadCtx {
    tx_depth: Cell<u32>,
    holds: RefCell<Vec<HeldEntry>>,
}

impl ThreadCtx {
    const fn new() -> Self {
        ThreadCtx {
            tx_depth: Cell::new(0),
            holds: RefCell::new(Vec::new()),
        }
    }
}

#[cfg(not(loom))]
std::thread_local! {
    static CTX: ThreadCtx = const { ThreadCtx::new() };
}

#[cfg(loom)]
loom::thread_local! {
    static CTX: ThreadCtx = ThreadCtx::new();
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
    // try_with: during thread-local teardown there is nothing to check.
    CTX.try_with(|c| {
        if c.tx_depth.get() != 0 {
            return Err(Refusal::InTransaction);
        }
        let holds = c.holds.borrow();
        for h in holds.iter() {
            // SAFETY: see the module invariant: a listed key outlives its entry.
            if h.lock == lock && h.hash == hash && unsafe { &*h.key } == key {
                return Err(Refusal::SameKeyHeld);
            }
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
    // try_with: during thread-local teardown the matching pop is a no-op too.
    let _ = CTX.try_with(|c| c.holds.borrow_mut().push(HeldEntry { lock, hash, key }));
}

/// Unlists the innermost hold of this thread.
#[inline]
pub(crate) fn pop_hold() {
    // try_with: a hold ending during thread teardown has nothing to unlist.
    let _ = CTX.try_with(|c| c.holds.borrow_mut().pop());
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
