//! A task's wait in a key's line: the future behind `hold_async` and
//! `acquire_async`, standing in the same FIFO line as threads.
//!
//! The future owns its [`Waiter`] node (pinned with the future) and needs no
//! runtime: a grant or a close calls the node's waker, and the store's timer
//! calls it once its deadline has passed, through its line's timer (the
//! node carries the deadline; a task arms a [`LineDeadline`] only when no
//! entry already pending for its key comes at or before its deadline, so
//! a task's wait on a hot key arms and cancels nothing).
//!
//! | [`State`]  | what holds                                       | next                  |
//! |------------|--------------------------------------------------|-----------------------|
//! | `Start`    | nothing linked                                   | answered, or `Waiting` |
//! | `Waiting`  | node linked in `record`'s line, deadline covered | `Done` (answered)     |
//! | `Done`     | node unlinked                                    | -                     |
//!
//! The first poll reads the clock for the deadline, links the node (with
//! that poll's waker), and returns: whatever comes next calls the node's
//! waker. Only a later poll that finds no end (the line timer's wake, or a
//! spurious poll) reads the clock again and refreshes the waker.
//!
//! Dropping the future while `Waiting` leaves the line at once
//! ([`Record::leave`]), which frees its place for the limit; if a grant won
//! that race, the grant is let go at once, to the next in line.

use crate::ctx;
use crate::driver::{Driver, LineDue};
use crate::error::Error;
use crate::lock::{Entered, Grant, Lock, Mode};
use crate::lock_shared::LockShared;
use crate::record::{wake_all, WaitEnd, Waiter};
use crate::record_ref::LineRecord;
use crate::sync::{downgrade, upgrade, Weak};
use crossbeam_epoch as epoch;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Where a [`LineWait`] stands: see the module doc's table.
enum State {
    Start,
    Waiting {
        /// The line the node is linked in.
        record: LineRecord,
    },
    Done,
}

/// A line-timer entry: names its key (not its record, which may be
/// retired and made again before the entry comes due) and, when it fires,
/// looks the key up and lets its line wake the tasks whose deadline passed
/// ([`Record::expire_tasks`]).
pub(crate) struct LineDeadline {
    lock: Weak<LockShared>,
    hash: u64,
    key: Box<str>,
}

impl LineDue for LineDeadline {
    fn fire(&self, now_ms: u64) -> Option<u64> {
        let shared = upgrade(&self.lock)?;
        let mut wakes = Vec::new();
        let next = {
            let guard = epoch::pin();
            // Authoritative: a spurious miss would leave the line's tasks
            // unwoken. A record found while pinned is not freed while the
            // pin lasts.
            let record = shared
                .table
                .find_authoritative(self.hash, &self.key, &guard)?;
            record.expire_tasks(now_ms, &mut wakes)
        };
        wake_all(wakes);
        next
    }
}

/// Resolves to the grant (`None`: a `Try` found the key held), or the
/// error a blocking wait would have answered.
pub(crate) struct LineWait<'a> {
    lock: &'a Lock,
    text: &'a str,
    hash: u64,
    mode: Mode,
    /// The permits asked for.
    want: u32,
    /// µs on the store's clock, read when the node is linked (0: none).
    deadline_us: u64,
    state: State,
    /// Made at the first poll (it needs a waker); pinned with the future.
    node: Option<Waiter>,
}

// SAFETY: the state's record is a `LineRecord` (Send by its own
// argument); the node is Send + Sync; the rest are Send + Sync references.
unsafe impl Send for LineWait<'_> {}
// SAFETY: `&LineWait` exposes nothing.
unsafe impl Sync for LineWait<'_> {}

impl<'a> LineWait<'a> {
    /// The node, pinned: it lives in this future, which is pinned, and is
    /// never moved out of it (only replaced, in `start`, while unlinked).
    fn node(&self) -> Pin<&Waiter> {
        let node = self.node.as_ref().expect("linked");
        // SAFETY: structurally pinned with the future (see above).
        unsafe { Pin::new_unchecked(node) }
    }

    pub(crate) fn new(lock: &'a Lock, text: &'a str, hash: u64, mode: Mode, want: u32) -> Self {
        LineWait {
            lock,
            text,
            hash,
            mode,
            want,
            deadline_us: 0,
            state: State::Start,
            node: None,
        }
    }

    /// The first poll: links the node, or answers at once.
    fn start(&mut self, waker: &Waker) -> Poll<Result<Option<Grant>, Error>> {
        self.deadline_us = self.lock.deadline_us(self.mode);
        let node = self.node.insert(Waiter::for_task(
            waker.clone(),
            self.want,
            self.deadline_us,
            self.lock.bypass(),
        ));
        // SAFETY: the node lives in this pinned future; `Drop` leaves the
        // line before the node is dropped, and nothing replaces it while
        // the state is `Waiting`.
        let entered = unsafe {
            self.lock
                .enter_line(self.text, self.hash, self.mode, Pin::new_unchecked(node))
        };
        let answer = match entered {
            Err(e) => Err(e),
            Ok(Entered::Granted(g)) => Ok(Some(g)),
            Ok(Entered::Held) => Ok(None),
            Ok(Entered::Waiting {
                record,
                arm_line_ms,
                ..
            }) => {
                // The node carries this poll's waker, so a grant from now on
                // reaches it: no look at the line again before returning.
                if let Some(at_ms) = arm_line_ms {
                    self.arm_line(at_ms);
                }
                self.state = State::Waiting { record };
                // Pending: the tasks this thread granted run now.
                ctx::forget_task_granted();
                return Poll::Pending;
            }
        };
        self.state = State::Done;
        Poll::Ready(answer)
    }

    /// A later poll of a linked node.
    fn poll_waiting(
        &mut self,
        record: LineRecord,
        waker: &Waker,
    ) -> Poll<Result<Option<Grant>, Error>> {
        let node = self.node();
        if let Some(end) = node.end() {
            return self.finish(record, end);
        }
        let _pin = epoch::pin();
        if let Some(end) = node.end() {
            return self.finish(record, end);
        }
        // SAFETY: pinned, and the node's status read not final while
        // pinned: it was linked then, so the record is not freed while the
        // pin lasts (record/mod.rs: the record's lifetime).
        let linked = unsafe { record.get() };
        if self.deadline_us != 0 && self.lock.store.clock.now_us() >= self.deadline_us {
            // SAFETY: pinned, and the status read not final while pinned.
            let end = unsafe { linked.leave(node) };
            return self.finish(record, end);
        }
        // SAFETY: as for `leave`. The line timer calls the waker set here.
        if let Some(end) = unsafe { linked.poll_wait(node, waker) } {
            return self.finish(record, end);
        }
        ctx::forget_task_granted();
        Poll::Pending
    }

    /// Ends the wait, answers.
    fn finish(&mut self, record: LineRecord, end: WaitEnd) -> Poll<Result<Option<Grant>, Error>> {
        self.state = State::Done;
        let node = self.node();
        Poll::Ready(
            self.lock
                .wait_ended(record, &node, end, self.text)
                .map(Some),
        )
    }

    /// Puts an entry for this key's line on the store's timer at `at_ms`.
    fn arm_line(&self, at_ms: u64) {
        let line = LineDeadline {
            lock: downgrade(&self.lock.shared),
            hash: self.hash,
            key: self.text.into(),
        };
        Driver::arm_line(&self.lock.store.timer, at_ms, Box::new(line));
    }
}

impl Future for LineWait<'_> {
    type Output = Result<Option<Grant>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: nothing below moves `node` out of the future; it is only
        // replaced while it is not linked (in `start`).
        let this = unsafe { self.get_unchecked_mut() };
        match this.state {
            State::Start => this.start(cx.waker()),
            State::Waiting { record } => this.poll_waiting(record, cx.waker()),
            State::Done => panic!("LineWait polled after it answered"),
        }
    }
}

impl Drop for LineWait<'_> {
    fn drop(&mut self) {
        let State::Waiting { record } = self.state else {
            return;
        };
        let node = self.node();
        // SAFETY: the state is `Waiting`: the node was linked, so the record
        // lives until the node has an end (record/mod.rs: its lifetime).
        let record = unsafe { record.get() };
        let end = match node.end() {
            Some(end) => end,
            None => {
                let _pin = epoch::pin();
                match node.end() {
                    Some(end) => end,
                    // SAFETY: pinned, and the status read not final while pinned.
                    None => unsafe { record.leave(node) },
                }
            }
        };
        // Mutant for loom-tests/README.md: forget a grant that raced the drop.
        if end == WaitEnd::Granted && !cfg!(holdline_mutant = "drop_forgets_grant") {
            // The grant raced the drop: it is ours, so let it go, to the
            // next in line.
            drop(Grant::of_waiter(
                record,
                &node,
                self.lock.shared.permits > 1,
            ));
        }
    }
}
