//! The line's length and its timer: the count of a record's line (in the
//! state word for one permit, in the [`Permits`] for several), and the one
//! timer entry per line that wakes its tasks at their deadlines.
//!
//! # Tasks' deadlines: one timer per line
//!
//! A waiting task is woken at its deadline by the store's timer, but a task
//! does not arm a timer of its own (on a hot key that was an arm and a
//! cancel per hold). Its node carries its deadline, and the record keeps,
//! in its `Extra`, the time of the earliest line-timer entry still
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
//! [`Permits`]: crate::permits::Permits
//! [`Enqueued::Waiting`]: super::Enqueued::Waiting

use super::{Record, StateWord, Waiter, Wakes};
use crate::sync::Ordering;

/// The line timer (module doc: "one timer per line").
impl Record {
    /// The line's length.
    ///
    /// # Safety
    /// The caller owns QLOCK; `s` is the word without it.
    pub(super) unsafe fn line_len(&self, s: u32) -> u32 {
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
    pub(super) unsafe fn line_grew(&self, s: u32) -> u32 {
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
    pub(super) unsafe fn line_shrank(&self, s: u32, now_empty: bool) -> u32 {
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
    pub(super) unsafe fn cover_deadline(&self, waiter: &Waiter) -> Option<u64> {
        // SAFETY: the caller owns QLOCK, which guards a linked node's cell.
        let deadline_us = waiter.fence.with(|d| unsafe { *d });
        if deadline_us == 0 {
            return None;
        }
        let due_ms = deadline_us.div_ceil(1000);
        // SAFETY: the caller owns QLOCK.
        unsafe {
            self.with_locked(|extra| {
                if covered(extra.line_timer_ms, due_ms) {
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
}

/// Whether a line-timer entry pending at `pending` (ms) covers a
/// deadline due at `due_ms`: it comes at or before it.
/// (Mutant for loom-tests/README.md: a deadline left uncovered.)
#[inline(always)]
fn covered(pending: Option<u64>, due_ms: u64) -> bool {
    pending.is_some_and(|at| at <= due_ms) || cfg!(holdline_mutant = "uncovered_deadline")
}
