//! A thread's wait for a key, past the fast path: finding or making the
//! key's record, entering its line, waiting there until a grant or the
//! deadline, and what the wait's end means.
//!
//! A waiter's node lives in its waiting frame, pinned, and is never
//! dropped or reused while linked in a line: it leaves only with a final
//! status or after `Record::leave`. A record is reached after a wait only
//! for a grant (then HELD by it, so alive); after any other end the node
//! has left the line and the record may be gone. Nobody waits pinned to
//! the epoch. `Try` and zero waits never link a node.

use super::{Grant, Lock, Mode, MAX_WAITERS};
use crate::driver::Driver;
use crate::error::{Error, ErrorKind};
use crate::key::check_key;
use crate::record::{Deadline, Enqueued, Record, Take, Tried, WaitEnd, Waiter};
use crate::record_ref::LineRecord;
use crate::sync::Ordering;
use crossbeam_epoch as epoch;
use std::pin::Pin;

/// A key's record, and whether we just made it (and so hold its key, with
/// this fence).
enum Found<'g> {
    Made(&'g Record, u64),
    Existing(&'g Record),
}

/// Where a caller stands after trying to enter a key's line.
pub(crate) enum Entered {
    /// It holds the key.
    Granted(Grant),
    /// `Mode::Try` found the key held.
    Held,
    /// Its node is linked in `record`'s line (`first`: nobody before it;
    /// `arm_line_ms`: a task's line-timer entry to arm, see `Enqueued`).
    Waiting {
        record: LineRecord,
        first: bool,
        arm_line_ms: Option<u64>,
    },
}

impl Lock {
    /// Past the fast path: wait in line on this thread until `deadline`
    /// (used only when `mode` waits at all).
    #[cold]
    pub(crate) fn acquire_slow_until(
        &self,
        text: &str,
        hash: u64,
        mode: Mode,
        want: u32,
        deadline: Deadline,
    ) -> Result<Option<Grant>, Error> {
        let waiter = Waiter::for_thread(want, self.bypass());
        // The node lives in this frame, which does not return until it has
        // left every line: pin it here.
        let waiter = std::pin::pin!(waiter);
        // SAFETY: the node stays in this frame until `wait` (or the error
        // below, which is only returned when it was never linked) answers.
        match unsafe { self.enter_line(text, hash, mode, waiter.as_ref()) }? {
            Entered::Granted(g) => Ok(Some(g)),
            Entered::Held => Ok(None),
            Entered::Waiting { record, first, .. } => {
                // SAFETY: the node is linked, and this frame waits until
                // its end: a grant (then held) or the wait's own end.
                let end = unsafe { record.get() }.wait(
                    waiter.as_ref(),
                    first,
                    &self.store.clock,
                    deadline,
                );
                self.wait_ended(record, &waiter, end, text).map(Some)
            }
        }
    }

    /// The wait's deadline on the store's clock (µs), for `mode`.
    pub(crate) fn deadline_us(&self, mode: Mode) -> u64 {
        match mode {
            // +1 so the rounded-down clock never ends a wait early.
            Mode::Wait(w) if w > 0 => self
                .store
                .clock
                .now_us()
                .saturating_add(w.saturating_mul(1000))
                .saturating_add(1),
            _ => 0,
        }
    }

    /// What a wait's end means to the caller. `record` is reached only
    /// for a grant: after any other end the node has left the line, and
    /// the record may be gone.
    pub(crate) fn wait_ended(
        &self,
        record: LineRecord,
        waiter: &Waiter,
        end: WaitEnd,
        text: &str,
    ) -> Result<Grant, Error> {
        match end {
            WaitEnd::Granted => {
                // SAFETY: granted, so the record is HELD by this grant and
                // not retired (record_ref).
                let record = unsafe { record.get() };
                Ok(Grant::of_waiter(record, waiter, self.shared.permits > 1))
            }
            WaitEnd::Closed => Err(self.error(Error::closed(), text)),
            WaitEnd::TimedOut => {
                // Relaxed: a statistic.
                self.shared.timeouts.fetch_add(1, Ordering::Relaxed);
                Err(self.in_use(text))
            }
        }
    }

    /// Finds (or makes) the key's record and takes the key, or links
    /// `waiter` into its line. `Try` and zero waits never link.
    ///
    /// # Safety
    /// `waiter` is not linked; if this answers `Waiting`, it must not be
    /// dropped or reused until it has a final status or `Record::leave`
    /// answered (the line points at it; `Pin` keeps it from moving).
    pub(crate) unsafe fn enter_line(
        &self,
        text: &str,
        hash: u64,
        mode: Mode,
        waiter: Pin<&Waiter>,
    ) -> Result<Entered, Error> {
        let want = waiter.want();
        let mut retired_seen = false;
        loop {
            let guard = epoch::pin();
            let record = match self.find_or_make(hash, text, want, retired_seen, &guard)? {
                Found::Made(r, fence) => return Ok(Entered::Granted(Grant::new(r, fence, want))),
                Found::Existing(r) => r,
            };
            if matches!(mode, Mode::Try | Mode::Wait(0)) {
                match record.try_acquire(want) {
                    Tried::Granted(fence) => {
                        return Ok(Entered::Granted(Grant::new(record, fence, want)))
                    }
                    Tried::Dead => retired_seen = true,
                    Tried::Held if matches!(mode, Mode::Try) => return Ok(Entered::Held),
                    Tried::Held => {
                        // Relaxed: a statistic.
                        self.shared.timeouts.fetch_add(1, Ordering::Relaxed);
                        return Err(self.in_use(text));
                    }
                }
                continue;
            }
            // Runs under the line lock, so it only decides; the error (which
            // allocates) is built after the lock is let go.
            let admit = |len: u32| {
                // Read under the line lock: see `Store::close`.
                if self.store.closed.load(Ordering::Acquire) {
                    Err(ErrorKind::Closed)
                } else if len >= MAX_WAITERS {
                    Err(ErrorKind::Limit)
                } else {
                    Ok(())
                }
            };
            // SAFETY: the caller's contract.
            let enqueued = unsafe { record.acquire_or_enqueue(waiter, admit) }
                .map_err(|kind| self.refused(kind, text))?;
            match enqueued {
                Enqueued::Granted(fence) => {
                    return Ok(Entered::Granted(Grant::new(record, fence, want)))
                }
                Enqueued::Dead => retired_seen = true,
                // Unpinned on return: a waiter must not hold the epoch back.
                Enqueued::Waiting { first, arm_line_ms } => {
                    let record = LineRecord::of(record);
                    return Ok(Entered::Waiting {
                        record,
                        first,
                        arm_line_ms,
                    });
                }
            }
        }
    }

    /// The key's record: found, or made (and then `want` of its permits
    /// held by us). The key's text is checked only when none is found: a
    /// record's key was checked when it was made.
    fn find_or_make<'g>(
        &self,
        hash: u64,
        text: &str,
        want: u32,
        retired_seen: bool,
        guard: &'g epoch::Guard,
    ) -> Result<Found<'g>, Error> {
        // After a DEAD record, go straight to the shard lock: the sweeper
        // holds it until the record is unlinked, so we wait there instead
        // of spinning on the stale one.
        if !retired_seen {
            if let Some(r) = self.shared.table.find(hash, text, guard) {
                return Ok(Found::Existing(r));
            }
        }
        check_key(&self.shared.name, text)?;
        let take = Take {
            total: self.shared.permits,
            want,
        };
        let found = match self.shared.table.find_or_create(hash, text, take, guard) {
            (r, Some(fence)) => {
                Driver::want_sweep(&self.store.timer);
                Found::Made(r, fence)
            }
            (r, None) => Found::Existing(r),
        };
        Ok(found)
    }
}

/// When a thread's wait in `mode` gives up: its wait after its spin (read
/// only if it spins in vain). `Try` and zero waits never stand in line.
pub(crate) fn thread_deadline(mode: Mode) -> Deadline {
    match mode {
        Mode::Wait(w) => Deadline::AfterSpin(w),
        Mode::Try => Deadline::At(0),
    }
}
