//! The line's links: the five list operations on a record's line of
//! [`Waiter`] nodes (`push_back`, `pop_front`, `unlink`, `head`,
//! `rotate`), kept together so the list can be swapped in one place.
//!
//! The line is an intrusive circular doubly-linked list known by its tail
//! (the head is `tail.next`), whose nodes live on their threads' stacks or
//! in their tasks' futures; a waiter leaves from any position in O(1).
//! Invariants: only the `QLOCK` owner reads or writes the line and the
//! links of a node in it; a linked node is alive (its owner does not
//! return before it is unlinked and given a final status, see `waiter`).

use super::{Record, Waiter};
use std::pin::Pin;
use std::ptr;

/// The line: a circular doubly-linked list known by its tail (the head is
/// `tail.next`), so the record spends one pointer on it. Read and written
/// only by the `QLOCK` owner.
pub(super) struct Line {
    pub(super) tail: *const Waiter,
}

impl Record {
    /// # Safety
    /// The caller owns QLOCK and `w` is not linked.
    pub(super) unsafe fn push_back(&self, w: Pin<&Waiter>) {
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
    pub(super) unsafe fn pop_front(&self) -> (*const Waiter, bool) {
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
    pub(super) unsafe fn unlink(&self, w: &Waiter) -> bool {
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

    /// The line's first node.
    ///
    /// # Safety
    /// The caller owns QLOCK and the line is not empty.
    pub(super) unsafe fn head(&self) -> *const Waiter {
        self.line.with(|line| {
            // SAFETY: QLOCK gives exclusive access; the tail is linked.
            unsafe { (*(*line).tail).next.with(|n| *n) }
        })
    }

    /// Moves the line's head to its tail (the order is a circle: the next
    /// head is the old second); answers the node moved.
    ///
    /// # Safety
    /// The caller owns QLOCK and the line is not empty. After `n` turns of
    /// a line of `n`, the order is as it was.
    pub(super) unsafe fn rotate(&self) -> *const Waiter {
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
