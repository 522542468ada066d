//! A task's wait in a key's line: the future behind `hold_async` and
//! `acquire_async`, standing in the same FIFO line as threads.
//!
//! The future owns its [`Waiter`] node (pinned with the future) and needs no
//! runtime: a grant or a close calls the node's waker, and the store's timer
//! calls it at the wait's deadline.
//!
//! | state     | what holds                                   | next                        |
//! |-----------|----------------------------------------------|-----------------------------|
//! | `Start`   | nothing linked                               | answered, or `Waiting`      |
//! | `Waiting` | node linked in `record`'s line, deadline armed | `Done` (answered)         |
//! | `Done`    | node unlinked, timer cancelled               | -                           |
//!
//! Dropping the future while `Waiting` leaves the line at once
//! ([`Record::leave`]), which frees its place for the limit; if a grant won
//! that race, the grant is let go at once, to the next in line.

use crate::driver::Driver;
use crate::error::Error;
use crate::lock::{Entered, Grant, Lock, Mode};
use crate::record::{Record, WaitEnd, Waiter};
use crate::timer::TimerKey;
use crossbeam_epoch as epoch;
use std::future::Future;
use std::pin::Pin;
use std::ptr;
use std::task::{Context, Poll, Waker};

/// Resolves to the grant (`None`: a `Try` found the key held), or the
/// error a blocking wait would have answered.
pub(crate) struct LineWait<'a> {
    lock: &'a Lock,
    text: &'a str,
    hash: u64,
    mode: Mode,
    deadline_us: u64,
    /// The line the node is linked in; null before, and after the answer.
    record: *const Record,
    /// The deadline's wheel entry, and the waker it will call.
    timer: Option<(TimerKey, Waker)>,
    done: bool,
    /// Made at the first poll (it needs a waker); pinned with the future.
    node: Option<Waiter>,
}

// SAFETY: `record` is dereferenced only while the node is linked or the
// grant is ours (record.rs, "The record's lifetime"), which holds on any
// thread; the node is Send + Sync; the rest are Send + Sync references.
unsafe impl Send for LineWait<'_> {}
// SAFETY: `&LineWait` exposes nothing.
unsafe impl Sync for LineWait<'_> {}

impl<'a> LineWait<'a> {
    pub(crate) fn new(lock: &'a Lock, text: &'a str, hash: u64, mode: Mode) -> Self {
        LineWait {
            lock,
            text,
            hash,
            mode,
            deadline_us: lock.deadline_us(mode),
            record: ptr::null(),
            timer: None,
            done: false,
            node: None,
        }
    }

    /// Ends the wait: takes the deadline off the wheel, answers.
    fn finish(&mut self, record: &Record, end: WaitEnd) -> Poll<Result<Option<Grant>, Error>> {
        self.done = true;
        self.record = ptr::null();
        if let Some((key, _)) = self.timer.take() {
            self.lock.store.timer.cancel_wake(key);
        }
        Poll::Ready(self.lock.wait_ended(record, end, self.text).map(Some))
    }

    /// Keeps the deadline's wake pointed at the waker of the latest poll.
    fn arm_deadline(&mut self, waker: &Waker) {
        if self.deadline_us == 0 {
            return;
        }
        if let Some((key, old)) = &self.timer {
            if old.will_wake(waker) {
                return;
            }
            self.lock.store.timer.cancel_wake(*key);
        }
        self.timer = Driver::arm_wake(&self.lock.store.timer, self.deadline_us, waker.clone())
            .map(|key| (key, waker.clone()));
    }
}

impl Future for LineWait<'_> {
    type Output = Result<Option<Grant>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: nothing below moves `node` out of the future; it is only
        // replaced while it is not linked (before `enter_line`).
        let this = unsafe { self.get_unchecked_mut() };
        assert!(!this.done, "LineWait polled after it answered");
        if this.record.is_null() {
            this.node = Some(Waiter::for_task(cx.waker().clone()));
            let node = this.node.as_ref().expect("just set");
            // SAFETY: the node lives in this pinned future; `Drop` leaves the
            // line before the node is dropped, and nothing replaces it while
            // `record` is set.
            let entered = unsafe {
                this.lock
                    .enter_line(this.text, this.hash, this.mode, Pin::new_unchecked(node))
            };
            match entered {
                Err(e) => {
                    this.done = true;
                    return Poll::Ready(Err(e));
                }
                Ok(Entered::Granted(g)) => {
                    this.done = true;
                    return Poll::Ready(Ok(Some(g)));
                }
                Ok(Entered::Held) => {
                    this.done = true;
                    return Poll::Ready(Ok(None));
                }
                Ok(Entered::Waiting { record, .. }) => {
                    this.record = record;
                    this.arm_deadline(cx.waker());
                }
            }
        }
        let node = this.node.as_ref().expect("linked");
        // SAFETY: `record` is set, so the node was linked: the record lives
        // until the node has an end we act on (record.rs).
        let record = unsafe { &*this.record };
        if let Some(end) = node.end() {
            return this.finish(record, end);
        }
        let _pin = epoch::pin();
        if let Some(end) = node.end() {
            return this.finish(record, end);
        }
        if this.deadline_us != 0 && this.lock.store.clock.now_us() >= this.deadline_us {
            // SAFETY: pinned, and the status read not final while pinned.
            let end = unsafe { record.leave(node) };
            return this.finish(record, end);
        }
        // SAFETY: as for `leave`.
        match unsafe { record.poll_wait(node, cx.waker()) } {
            Some(end) => this.finish(record, end),
            None => {
                this.arm_deadline(cx.waker());
                Poll::Pending
            }
        }
    }
}

impl Drop for LineWait<'_> {
    fn drop(&mut self) {
        if self.done || self.record.is_null() {
            return;
        }
        if let Some((key, _)) = self.timer.take() {
            self.lock.store.timer.cancel_wake(key);
        }
        let node = self.node.as_ref().expect("linked");
        // SAFETY: `record` is set and not answered: the node was linked, so
        // the record lives until the node has an end (record.rs).
        let record = unsafe { &*self.record };
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
            drop(Grant::of(record));
        }
    }
}
