//! The line's links: the five list operations on a record's line of
//! [`Waiter`] nodes (`push_back`, `pop_front`, `unlink`, `head`,
//! `rotate`), kept together so the list can be swapped in one place.
//!
//! The line is a [`List`] of the generic `line_list` (an intrusive
//! circular doubly-linked list known by its tail; the head is
//! `tail.next`), whose nodes live on their threads' stacks or
//! in their tasks' futures; a waiter leaves from any position in O(1).
//! Invariants: only the `QLOCK` owner reads or writes the line and the
//! links of a node in it; a linked node is alive (its owner does not
//! return before it is unlinked and given a final status, see `waiter`).

use super::{Record, Waiter};
use crate::line_list::{Link, List, Pointers};
use std::pin::Pin;

/// The line: a circular doubly-linked list known by its tail
/// ([`List`]), so the record spends one pointer on it. Read and written
/// only by the `QLOCK` owner.
pub(super) type Line = List<Waiter>;

// SAFETY: `links` is the waiter's own, the same on every call, and only
// the line touches it.
unsafe impl Link for Waiter {
    #[inline(always)]
    unsafe fn pointers(node: *const Self) -> *const Pointers<Self> {
        // SAFETY: `node` is live (the caller's contract); no reference formed.
        unsafe { &raw const (*node).links }
    }
}

impl Record {
    /// # Safety
    /// The caller owns QLOCK and `w` is not linked.
    pub(super) unsafe fn push_back(&self, w: Pin<&Waiter>) {
        // SAFETY: QLOCK gives exclusive access to the line; `w` is in no
        // line and stays pinned until unlinked (the caller's contract).
        self.line.with_mut(|line| unsafe { (*line).push_back(w) });
    }

    /// Unlinks the first waiter; answers it and whether the line is now empty.
    ///
    /// # Safety
    /// The caller owns QLOCK and the line is not empty.
    pub(super) unsafe fn pop_front(&self) -> (*const Waiter, bool) {
        // SAFETY: QLOCK gives exclusive access; not empty (the caller's).
        self.line.with_mut(|line| unsafe { (*line).pop_front() })
    }

    /// Unlinks `w` from anywhere in the line; answers whether it is now empty.
    ///
    /// # Safety
    /// The caller owns QLOCK and `w` is linked.
    pub(super) unsafe fn unlink(&self, w: &Waiter) -> bool {
        // SAFETY: QLOCK gives exclusive access; `w` is linked here.
        self.line.with_mut(|line| unsafe { (*line).unlink(w) })
    }

    /// The line's first node.
    ///
    /// # Safety
    /// The caller owns QLOCK and the line is not empty.
    pub(super) unsafe fn head(&self) -> *const Waiter {
        // SAFETY: QLOCK gives exclusive access; not empty (the caller's).
        self.line.with(|line| unsafe { (*line).head() })
    }

    /// The line's last node.
    ///
    /// # Safety
    /// The caller owns QLOCK and the line is not empty.
    pub(super) unsafe fn tail(&self) -> *const Waiter {
        // SAFETY: QLOCK gives exclusive access.
        self.line.with(|line| unsafe { (*line).tail() })
    }

    /// Moves the line's head to its tail (the order is a circle: the next
    /// head is the old second); answers the node moved.
    ///
    /// # Safety
    /// The caller owns QLOCK and the line is not empty. After `n` turns of
    /// a line of `n`, the order is as it was.
    pub(super) unsafe fn rotate(&self) -> *const Waiter {
        // SAFETY: QLOCK gives exclusive access; not empty (the caller's).
        self.line.with_mut(|line| unsafe { (*line).rotate() })
    }
}
