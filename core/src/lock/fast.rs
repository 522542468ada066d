//! The uncontended path: from a key's text to a [`Grant`] without a
//! lock, an allocation or a clock read, and the grant itself.
//!
//! A [`Grant`] owes its key exactly one release: dropping it pays that
//! (so a panic between a grant and its lease's set-up lets the key go),
//! and [`Grant::into_parts`] hands the duty to the lease that takes it
//! over. A record found while pinned is taken (one CAS) before the caller
//! unpins: from then on HELD, not the pin, keeps the record alive. A key
//! found in the table was checked when its record was made, so nothing
//! here checks the key's text; every refusal and wait is out of line.

use super::slow::thread_deadline;
use super::{Lock, Mode};
use crate::counters::{count, Event};
use crate::ctx::{self, Refusal};
use crate::error::Error;
use crate::record::{Deadline, Record, StateWord, Tried, Waiter};
use crate::record_ref::{Granted, HeldRecord};
use crate::sync::Ordering;
use crate::table::find_in_chain;
use crossbeam_epoch as epoch;
use std::mem::ManuallyDrop;

/// A grant: the caller holds `permits` of `record`'s key with `fence`, and
/// owes it exactly one release. Dropping a `Grant` pays it (so a panic
/// between a grant and its lease's set-up lets the key go);
/// [`into_parts`](Grant::into_parts) hands the duty to the lease that takes
/// it over.
pub(crate) struct Grant {
    record: HeldRecord,
    fence: u64,
    permits: u32,
}

impl Grant {
    /// The caller just took `r`'s one permit with the uncontended CAS
    /// (Acquire, so the fence read here is the grant's).
    #[inline]
    pub(crate) fn of(r: &Record) -> Grant {
        Grant::new(r, r.fence(), 1)
    }

    /// The caller just took `permits` of `r`'s key with `fence`.
    #[inline]
    pub(crate) fn new(r: &Record, fence: u64, permits: u32) -> Grant {
        Grant {
            record: HeldRecord::of(r),
            fence,
            permits,
        }
    }

    /// The caller just took `want` permits with [`Lock::take_fast`].
    #[inline(always)]
    pub(crate) fn of_taken(taken: Taken, want: u32) -> Grant {
        Grant {
            record: taken.record,
            fence: taken.fence,
            permits: want,
        }
    }

    /// The grant `waiter` was given (its status read `Granted`), booked
    /// now if its lock has several permits (`multi`): see
    /// [`Record::take_served`].
    pub(crate) fn of_waiter(r: &Record, waiter: &Waiter, multi: bool) -> Grant {
        Grant::new(r, r.take_served(waiter, multi), waiter.want())
    }

    /// The record, fence and permits, with the duty to release them once.
    #[inline]
    pub(crate) fn into_parts(self) -> Granted {
        let g = ManuallyDrop::new(self);
        Granted {
            record: g.record,
            fence: g.fence,
            permits: g.permits,
        }
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        // SAFETY: a Grant exists only while its key is HELD by it, and
        // this drop is its one release.
        unsafe { self.record.release(self.fence, self.permits) };
    }
}

/// What the fast path found.
pub(crate) enum Fast {
    /// It took the key.
    Granted(Grant),
    /// The key is held (by this thread, or by anyone at the instant it
    /// looked): a `Try` answers `None`; a wait goes the slow way.
    Held,
    /// Go the slow way.
    Slow,
}

impl Lock {
    /// A blocking hold's way to its grant, for one key or each of a set:
    /// the closed flag, the thread's context checked and the hold listed in
    /// it, then the fast path, then a wait in line (until `deadline`, µs on
    /// the store's clock; `None`: `mode`'s wait from now). `None`: a `Try`
    /// found the key held. `want`: the permits asked for (the caller
    /// checked it against the lock's count).
    ///
    /// # Safety
    /// The caller drops the guard (never leaks it): it lists `text`.
    #[inline(always)]
    pub(crate) unsafe fn acquire_listed<'k>(
        &self,
        text: &'k str,
        hash: u64,
        mode: Mode,
        want: u32,
        deadline: Option<u64>,
    ) -> Result<Option<(ctx::Listed<'k>, Grant)>, Error> {
        // The lookup's first loads go out before the checks below, so their
        // cache misses (over many keys) overlap the checks' work.
        let guard = epoch::pin();
        let chain = self.shared.table.chain(hash, &guard);
        if self.store.closed.load(Ordering::Acquire) {
            return Err(self.closed_error(text));
        }
        let in_tx_ok = matches!(mode, Mode::Try);
        // SAFETY: the caller's contract.
        let listed = match unsafe { ctx::enter_hold(self.shared.id(), hash, text, in_tx_ok) } {
            Ok(listed) => listed,
            Err(refusal) => return self.refused_here(refusal, mode, text).map(|()| None),
        };
        let fast = match find_in_chain(chain, hash, text, &guard) {
            Some(r) => take(r, want),
            None => Fast::Slow,
        };
        // Unpinned before any wait: a waiter must not hold the epoch back.
        drop(guard);
        let grant = match fast {
            Fast::Granted(g) => g,
            Fast::Held if matches!(mode, Mode::Try) => return Ok(None),
            Fast::Held | Fast::Slow => {
                let deadline = deadline.map_or_else(|| thread_deadline(mode), Deadline::At);
                match self.acquire_slow_until(text, hash, mode, want, deadline)? {
                    Some(g) => g,
                    None => return Ok(None),
                }
            }
        };
        Ok(Some((listed, grant)))
    }

    /// The hot path of a task's hold: the key's record found without a
    /// lock and `want` of its permits taken (one CAS for a lock of one
    /// permit), answered as the record and the grant's fence: two words,
    /// which come back in registers. A whole [`Fast`] went through the
    /// stack, where copying its grant with wider loads than the stores
    /// that wrote it stalled every async hold (the same instructions ran
    /// at half the rate). `None`: anything else, which the refusals and
    /// the line then answer; and a key that would be granted at once to a
    /// task that owes a yield first (see [`yield_first`]).
    #[inline(always)]
    pub(crate) fn take_fast(&self, text: &str, hash: u64, want: u32) -> Option<Taken> {
        // Acquire: as in `acquire_fast`, which answers the refusals.
        if self.store.closed.load(Ordering::Acquire)
            || ctx::check_hold(self.shared.id(), hash, text).is_err()
        {
            return None;
        }
        let guard = epoch::pin();
        let r = self.shared.table.find(hash, text, &guard)?;
        if ctx::task_granted() && yield_first(r, want) {
            return None;
        }
        match r.try_lock_fast() {
            Ok(()) => Some(Taken {
                record: HeldRecord::of(r),
                fence: r.fence(),
            }),
            Err(s) if s.multi() || s.free() => take_by_try_fast(r, want),
            Err(_) => None,
        }
    }

    /// The uncontended acquire: the key's record found without a lock and
    /// taken with one CAS. `Slow`: no record yet, a line being changed, or
    /// a retired record.
    #[inline(always)]
    fn try_fast(&self, text: &str, hash: u64, want: u32) -> Fast {
        let guard = epoch::pin();
        match self.shared.table.find(hash, text, &guard) {
            Some(r) => take(r, want),
            None => Fast::Slow,
        }
    }

    /// From key text to a grant of `want` permits (`None`: `Try` found it held).
    #[inline]
    pub(crate) fn acquire_text(
        &self,
        text: &str,
        hash: u64,
        mode: Mode,
        want: u32,
    ) -> Result<Option<Grant>, Error> {
        match self.acquire_fast(text, hash, mode, want)? {
            Fast::Granted(g) => Ok(Some(g)),
            Fast::Held => Ok(None),
            Fast::Slow => self.acquire_slow_until(text, hash, mode, want, thread_deadline(mode)),
        }
    }

    /// The checks every acquire makes first, and the uncontended CAS (for
    /// the holds that list themselves later: tasks, several keys).
    #[inline]
    pub(crate) fn acquire_fast(
        &self,
        text: &str,
        hash: u64,
        mode: Mode,
        want: u32,
    ) -> Result<Fast, Error> {
        if !self.admitted(text, hash, mode)? {
            return Ok(Fast::Held);
        }
        Ok(match self.try_fast(text, hash, want) {
            Fast::Held if !matches!(mode, Mode::Try) => Fast::Slow,
            fast => fast,
        })
    }

    /// The refusals every acquire checks before it takes anything: the
    /// store closed, or the thread's context (a hold of this key inside
    /// its own hold, a hold inside a transaction). `Ok(false)`: a `Try` of
    /// a key this thread holds, which answers `None`.
    #[inline]
    pub(crate) fn admitted(&self, text: &str, hash: u64, mode: Mode) -> Result<bool, Error> {
        // The key's text is checked on the slow path only: a key found in
        // the table was checked when its record was made.
        if self.store.closed.load(Ordering::Acquire) {
            return Err(self.closed_error(text));
        }
        match ctx::check_hold(self.shared.id(), hash, text) {
            Ok(()) => Ok(true),
            Err(Refusal::InTransaction) if matches!(mode, Mode::Try) => Ok(true),
            Err(refusal) => self.refused_here(refusal, mode, text).map(|()| false),
        }
    }
}

/// The uncontended acquire of a record found while pinned: one CAS. The
/// grant is taken before the caller unpins: from then on HELD, not the
/// pin, keeps the record alive.
#[inline(always)]
pub(crate) fn take(r: &Record, want: u32) -> Fast {
    match r.try_lock_fast() {
        Ok(()) => Fast::Granted(Grant::of(r)),
        Err(s) if s.held_alone() => Fast::Held,
        // Several permits; or a key left free for its line (bounded bypass).
        Err(s) if s.multi() || s.free() => take_by_try(r, want),
        Err(_) => Fast::Slow,
    }
}

/// A take the uncontended CAS cannot make, through `try_acquire`: `want`
/// permits of a lock of several, taken at once if they fit and nobody
/// waits (or the line is open to bypass), or a key of one permit left
/// free for its line (bounded bypass); no waiter node, no clock read.
/// `Held`: they do not fit now, or a line stands.
#[cold]
#[inline(never)]
fn take_by_try(r: &Record, want: u32) -> Fast {
    match r.try_acquire(want) {
        Tried::Granted(fence) => Fast::Granted(Grant::new(r, fence, want)),
        Tried::Held => Fast::Held,
        Tried::Dead => Fast::Slow,
    }
}

/// For [`Lock::take_fast`] on a thread where a release granted a key to a
/// waiting task that its runtime has queued but not run: whether this
/// task yields to it before it takes `r`'s key. A task that took another
/// free key and ran on would leave the granted key held by a task that is
/// not running, and the tasks of other threads asking for it would wait
/// (the line's handoff is FIFO). So it yields, once, when its own key
/// would be granted at once (the yield is noted as owed, and the slow
/// path makes it); when its key is held, its wait lets the granted task
/// run anyway.
#[cold]
#[inline(never)]
fn yield_first(r: &Record, want: u32) -> bool {
    ctx::forget_task_granted();
    let yields = r.would_grant(want);
    if yields {
        count(Event::YieldedToGranted);
        ctx::owe_yield();
    }
    yields
}

/// What [`Lock::take_fast`] took: the record and the grant's fence (the
/// permits are the caller's `want`).
#[derive(Clone, Copy)]
pub(crate) struct Taken {
    record: HeldRecord,
    fence: u64,
}

/// [`take_by_try`] for [`Lock::take_fast`]: `None` where it would not grant.
#[cold]
#[inline(never)]
fn take_by_try_fast(r: &Record, want: u32) -> Option<Taken> {
    match r.try_acquire(want) {
        Tried::Granted(fence) => Some(Taken {
            record: HeldRecord::of(r),
            fence,
        }),
        Tried::Held | Tried::Dead => None,
    }
}
