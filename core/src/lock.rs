//! A named lock: its handle ([`Lock`]), the per-call builder ([`KeyHold`]),
//! and the paths from a key to a grant.
//!
//! The uncontended path: hash the key, look at the closed flag, check and
//! list the hold in the thread's context, pin the epoch, find the record,
//! one CAS `0 -> HELD`, unpin; at the end one CAS `HELD -> 0`. No lock, no
//! allocation, no clock read, no shared counter. A key found in the table
//! was checked when its record was made, so only the slow path checks the
//! key's text. Everything else (creating the record, waiting in line,
//! timers, every error) is out of line.

use crate::counters::{count, Event};
use crate::ctx::{self, Refusal};
use crate::driver::Driver;
use crate::error::{Error, ErrorKind};
use crate::heartbeat::HeartbeatState;
use crate::hold_watch::HoldWatch;
use crate::key::{check_key, IntoKey, KeyBuf, KeyRef};
use crate::lease::{watched_word, Core, HeldLease, Lease, LeaseState};
use crate::lock_shared::LockShared;
use crate::outcome::Outcome;
use crate::record::{Deadline, Enqueued, Holders, Record, StateWord, Take, Tried, WaitEnd, Waiter};
use crate::record_ref::{Granted, HeldRecord, LineRecord};
use crate::sync::{Arc, Ordering};
use crate::table::find_in_chain;
use crossbeam_epoch as epoch;
use std::fmt;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::time::Duration;

/// Default wait of `hold`.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);
pub(crate) const DEFAULT_WAIT_MS: u64 = DEFAULT_WAIT.as_millis() as u64;
/// Most waiters one key's line holds (the holder not counted).
pub const MAX_WAITERS: u32 = 10_000;

/// A handle to a named lock of a store. Cheap to clone. Its `ttl` and
/// `maxHold` apply to the holds made through it.
#[derive(Clone)]
pub struct Lock {
    pub(crate) store: Arc<Core>,
    pub(crate) shared: Arc<LockShared>,
    pub(crate) ttl_ms: u64,
    pub(crate) max_hold_ms: u64,
    /// Renews every lease taken through this handle at once.
    pub(crate) heartbeat: Option<Arc<HeartbeatState<LeaseState>>>,
}

/// A snapshot of a lock's keys and counters (all handles of the name).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockStats {
    /// Keys with state in memory (held, waited for, or idle and not yet reclaimed).
    pub live_keys: usize,
    /// Keys with a holder.
    pub held_keys: usize,
    /// Threads standing in lines.
    pub waiters: usize,
    /// Grants made, ever.
    pub grants: u64,
    /// Waits that ended `in use`.
    pub timeouts: u64,
    /// Leases revoked at maxHold.
    pub revocations: u64,
    /// Handle-style leases that ran out at their ttl.
    pub expirations: u64,
}

/// How an acquire waits.
#[derive(Clone, Copy)]
pub(crate) enum Mode {
    /// Never waits; a held key answers `None`.
    Try,
    /// Waits up to this many ms (0: fail `in use` at once if held).
    Wait(u64),
}

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
    pub(crate) fn new(
        store: Arc<Core>,
        shared: Arc<LockShared>,
        ttl_ms: u64,
        max_hold_ms: u64,
        heartbeat: Option<Arc<HeartbeatState<LeaseState>>>,
    ) -> Lock {
        Lock {
            store,
            shared,
            ttl_ms,
            max_hold_ms,
            heartbeat,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Holds `key` while `f` runs, waiting in line up to 10 s, and answers
    /// what `f` answered. Fails `in use` past the wait, `limit` when the
    /// line is full, `closed`, or `invalid` (a bad key, a hold of a key this
    /// thread already holds, a hold inside a transaction).
    ///
    /// Fails `lost` when the lease was lost while `f` ran (revoked at
    /// maxHold, or the store closed): then **`f`'s value is dropped**, since
    /// the key may have had another holder meanwhile. When `f` did
    /// something that must not go unseen, use
    /// [`hold_outcome`](Lock::hold_outcome), which answers the value and the
    /// loss together. If `f` panics, the key is let go and the panic
    /// continues.
    #[inline]
    pub fn hold<'k, K: IntoKey<'k>, R>(
        &self,
        key: K,
        f: impl FnOnce(&Lease<'_>) -> R,
    ) -> Result<R, Error> {
        self.hold_mode(key.into_key(), Mode::Wait(DEFAULT_WAIT_MS), 1, f)
            .map(|r| r.expect("a waiting hold runs f"))
    }

    /// Runs `f` under `key` only if the key is free now; `None` (and `f` not
    /// run) when it is held, also by this thread.
    #[inline]
    pub fn try_hold<'k, K: IntoKey<'k>, R>(
        &self,
        key: K,
        f: impl FnOnce(&Lease<'_>) -> R,
    ) -> Result<Option<R>, Error> {
        self.hold_mode(key.into_key(), Mode::Try, 1, f)
    }

    /// A hold of `key` with options (`wait`).
    pub fn key<'a, K: IntoKey<'a>>(&'a self, key: K) -> KeyHold<'a> {
        KeyHold {
            lock: self,
            key: key.into_key(),
            wait: DEFAULT_WAIT,
            want: Want::One,
        }
    }

    /// A handle-style lease on `key`, for a holder outside the process (a
    /// server's client), waiting up to 10 s.
    ///
    /// **It runs out `ttl` (10 s by default) after its last
    /// [`renew`](HeldLease::renew)**: the key goes to the next in line and
    /// the lease is `lost`, whatever its holder is doing. Held in process,
    /// use [`lock`](Lock::lock) instead: a [`Guard`](crate::Guard) is held
    /// until dropped, with no ttl.
    ///
    /// Fails `in use` past the wait, `limit` when the line is full,
    /// `closed`, or `invalid` (a bad key, a key this thread is holding in a
    /// closure, a wait inside a transaction).
    pub fn acquire<'k, K: IntoKey<'k>>(&self, key: K) -> Result<HeldLease, Error> {
        self.key(key.into_key()).acquire()
    }

    /// Counts of this lock's keys and events. Walks the table: O(live keys).
    pub fn stats(&self) -> LockStats {
        let t = self.shared.table.totals();
        // Relaxed counters: statistics; nothing is published through them.
        LockStats {
            live_keys: t.live,
            held_keys: t.held,
            waiters: t.waiters,
            grants: t.grants,
            timeouts: self.shared.timeouts.load(Ordering::Relaxed),
            revocations: self.shared.revocations.load(Ordering::Relaxed),
            expirations: self.shared.expirations.load(Ordering::Relaxed),
        }
    }

    /// Under loom: how many wait in `key`'s line (a cheap probe for models).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn waiters_of(&self, key: &str) -> usize {
        let guard = epoch::pin();
        let hash = self.shared.table.hash(key);
        self.shared
            .table
            .find(hash, key, &guard)
            .map_or(0, |r| r.waiter_count() as usize)
    }

    #[inline]
    fn hold_mode<R>(
        &self,
        key: KeyRef<'_>,
        mode: Mode,
        want: u32,
        f: impl FnOnce(&Lease<'_>) -> R,
    ) -> Result<Option<R>, Error> {
        match self.hold_run(key, mode, want, f)? {
            Some(outcome) => outcome.into_result().map(Some),
            None => Ok(None),
        }
    }

    /// A hold's run: `None` when `Try` found the key held, else what `f`
    /// answered and whether the lease was lost meanwhile.
    ///
    /// The uncontended path, all inlined: the closed flag, the thread's
    /// context (checked and listed in one look), one pin, one lookup and
    /// one CAS; after `f`, the release's CAS. Everything that can fail or
    /// wait is out of line.
    #[inline]
    pub(crate) fn hold_run<R>(
        &self,
        key: KeyRef<'_>,
        mode: Mode,
        want: u32,
        f: impl FnOnce(&Lease<'_>) -> R,
    ) -> Result<Option<Outcome<R>>, Error> {
        let mut buf = KeyBuf::new();
        let text = key.text(&mut buf);
        let hash = self.shared.table.hash(text);
        // SAFETY: the guard lives in this frame until the hold ends
        // (unwinding too), and `text` outlives the frame.
        let Some((_listed, grant)) =
            (unsafe { self.acquire_listed(text, hash, mode, want, None) })?
        else {
            return Ok(None);
        };
        let lease = self.closure_lease(text, grant);
        let value = f(&lease);
        let lost = match lease.end() {
            Ok(()) => None,
            Err(loss) => Some(loss.error_for(&self.shared.name, text)),
        };
        Ok(Some(Outcome { value, lost }))
    }

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

    /// A closure's lease over `grant`, with its maxHold timer armed. The
    /// lease owns the grant before anything that could panic runs.
    #[inline(always)]
    pub(crate) fn closure_lease<'a>(&'a self, text: &'a str, grant: Grant) -> Lease<'a> {
        let granted = grant.into_parts();
        let state = match self.max_hold_ms {
            0 => std::ptr::null_mut(),
            _ => self.time_max_hold(granted.record, granted.fence, granted.permits),
        };
        Lease::new(&self.store, &self.shared, text, granted, state)
    }

    /// How a closure lease's maxHold is timed: by a slot of the store's
    /// watch (no lock, no allocation, no clock), or, when the thread has
    /// none free, by a state on the wheel. Out of line, so the plain
    /// hold's inlined path stays as small; nothing here can panic once
    /// the grant is given (only allocation, which aborts), so the grant
    /// always reaches its lease.
    /// (The grant comes as its parts, in registers.)
    #[inline(never)]
    fn time_max_hold(&self, record: HeldRecord, fence: u64, permits: u32) -> *mut LeaseState {
        let granted = Granted {
            record,
            fence,
            permits,
        };
        let Some(claim) =
            HoldWatch::claim(&self.store.watch, &granted, &self.shared, self.max_hold_ms)
        else {
            return self.arm_max_hold(&granted);
        };
        if claim.parked {
            claim.watched.seen_at(self.store.clock.now_ms());
            Driver::start_ticking(&self.store.timer);
        }
        watched_word(claim.watched)
    }

    /// A maxHold lease's state and timer on the store's wheel: for a
    /// thread with every slot of the watch taken. Armed before its lease
    /// owns it: if the timer ends the grant first, the lease's end finds
    /// the state ended.
    #[cold]
    #[inline(never)]
    fn arm_max_hold(&self, granted: &Granted) -> *mut LeaseState {
        let state = LeaseState::new(
            &self.store,
            &self.shared,
            *granted,
            self.max_hold_ms,
            0,
            None,
        );
        Driver::arm(&self.store.timer, &state);
        Arc::into_raw(state).cast_mut()
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
            Err(s) if s.multi() => take_permits_fast(r, want),
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

    /// The error of a hold made after the store closed.
    #[cold]
    #[inline(never)]
    pub(crate) fn closed_error(&self, text: &str) -> Error {
        if let Err(e) = check_key(&self.shared.name, text) {
            return e;
        }
        self.error(Error::closed(), text)
    }

    /// What a refusal by the thread's context means for a hold in `mode`:
    /// `Ok` (answer `None`) for a `Try` of a key this thread holds.
    #[cold]
    #[inline(never)]
    pub(crate) fn refused_here(
        &self,
        refusal: Refusal,
        mode: Mode,
        text: &str,
    ) -> Result<(), Error> {
        match refusal {
            Refusal::SameKeyHeld if matches!(mode, Mode::Try) => Ok(()),
            Refusal::SameKeyHeld => Err(self.invalid("hold inside a hold of the same key", text)),
            Refusal::InTransaction => {
                Err(self.invalid("hold inside a transaction: hold first, then begin it", text))
            }
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
        let waiter = Waiter::for_thread(want);
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

    fn refused(&self, kind: ErrorKind, text: &str) -> Error {
        let e = match kind {
            ErrorKind::Limit => Error::new(
                ErrorKind::Limit,
                format!("{MAX_WAITERS} waiters already stand in line"),
            ),
            _ => Error::closed(),
        };
        self.error(e, text)
    }

    fn error(&self, e: Error, key: &str) -> Error {
        e.for_key(&self.shared.name, key)
    }

    fn invalid(&self, what: &'static str, key: &str) -> Error {
        self.error(Error::new(ErrorKind::Invalid, what), key)
    }

    fn in_use(&self, key: &str) -> Error {
        self.error(
            Error::new(ErrorKind::InUse, "held past the hold's wait"),
            key,
        )
    }

    fn acquire_lease(
        &self,
        key: KeyRef<'_>,
        mode: Mode,
        want: u32,
    ) -> Result<Option<HeldLease>, Error> {
        let mut buf = KeyBuf::new();
        let text = key.text(&mut buf);
        let hash = self.shared.table.hash(text);
        let Some(grant) = self.acquire_text(text, hash, mode, want)? else {
            return Ok(None);
        };
        Ok(Some(self.held_lease(text, grant)))
    }

    /// A handle-style lease over `grant`, its timer armed. The lease owns
    /// the grant before anything that could panic runs.
    pub(crate) fn held_lease(&self, text: &str, grant: Grant) -> HeldLease {
        let state = LeaseState::new(
            &self.store,
            &self.shared,
            grant.into_parts(),
            self.max_hold_ms,
            self.ttl_ms,
            self.heartbeat.clone(),
        );
        let lease = HeldLease::new(state, text);
        Driver::arm(&self.store.timer, lease.state());
        lease
    }

    /// Who holds `key` now, and whether the grant with `fence` is one of
    /// them. Authoritative (under the shard lock when the quick look misses).
    pub(crate) fn holders(&self, key: &str, fence: u64) -> Holders {
        let hash = self.shared.table.hash(key);
        let guard = epoch::pin();
        self.shared
            .table
            .find_authoritative(hash, key, &guard)
            .map_or_else(Holders::default, |r| r.holders(fence))
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
        Err(s) if s.multi() => take_permits(r, want),
        Err(_) => Fast::Slow,
    }
}

/// A lock of several permits: `want` of them taken at once if they fit
/// and nobody waits (one short turn of the line lock; no waiter node, no
/// clock read). `Held`: they do not fit now, or a line stands.
#[cold]
#[inline(never)]
fn take_permits(r: &Record, want: u32) -> Fast {
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

/// [`take_permits`] for [`Lock::take_fast`]: `None` where it would not grant.
#[cold]
#[inline(never)]
fn take_permits_fast(r: &Record, want: u32) -> Option<Taken> {
    match r.try_acquire(want) {
        Tried::Granted(fence) => Some(Taken {
            record: HeldRecord::of(r),
            fence,
        }),
        Tried::Held | Tried::Dead => None,
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

/// A wait in whole milliseconds, as `Mode::Wait` takes it.
#[inline]
pub(crate) fn ms(d: Duration) -> u64 {
    if d == DEFAULT_WAIT {
        // Every hold without `.wait(..)`: no 128-bit division.
        DEFAULT_WAIT_MS
    } else if d.is_zero() {
        0
    } else {
        // Sub-millisecond waits round up to 1 ms.
        d.as_millis().clamp(1, u128::from(u64::MAX / 4)) as u64
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.shared.name)
            .field("ttl_ms", &self.ttl_ms)
            .field("max_hold_ms", &self.max_hold_ms)
            .finish()
    }
}

/// One key of a lock, with options; from [`Lock::key`].
#[derive(Clone, Copy, Debug)]
#[must_use = "a KeyHold does nothing until .hold(), .try_hold() or .acquire()"]
pub struct KeyHold<'l> {
    pub(crate) lock: &'l Lock,
    pub(crate) key: KeyRef<'l>,
    pub(crate) wait: Duration,
    pub(crate) want: Want,
}

/// How many permits a [`KeyHold`] asks for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Want {
    One,
    Permits(u32),
    Exclusive,
}

impl KeyHold<'_> {
    /// How long to stand in line (default 10 s; zero: fail `in use` at once
    /// if held; below 1 ms rounds up to 1 ms).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Takes `permits` of the key's permits (default 1; 1 to the lock's
    /// count, else the hold fails `invalid` at once).
    pub fn permits(mut self, permits: u32) -> Self {
        self.want = Want::Permits(permits);
        self
    }

    /// Takes all the key's permits: alone with the key (a writer of a
    /// read-write lock).
    pub fn exclusive(mut self) -> Self {
        self.want = Want::Exclusive;
        self
    }

    /// The permits asked for, checked against the lock's count.
    #[inline(always)]
    pub(crate) fn asked(&self) -> Result<u32, Error> {
        let total = self.lock.shared.permits;
        match self.want {
            Want::One => Ok(1),
            Want::Exclusive => Ok(total),
            Want::Permits(m) if (1..=total).contains(&m) => Ok(m),
            Want::Permits(m) => Err(self.too_many(m, total)),
        }
    }

    /// The refusal of `m` permits of a lock of `total`.
    #[cold]
    #[inline(never)]
    fn too_many(&self, m: u32, total: u32) -> Error {
        let mut buf = KeyBuf::new();
        let text = self.key.text(&mut buf);
        let what = format!("{m} permits asked of a lock of {total}");
        self.lock.error(Error::new(ErrorKind::Invalid, what), text)
    }

    /// Holds the key while `f` runs; see [`Lock::hold`]. Fails as it does
    /// (`in use` past this wait, `limit`, `closed`, `invalid`, `lost`), and
    /// `invalid` for more permits than the lock has.
    pub fn hold<R>(self, f: impl FnOnce(&Lease<'_>) -> R) -> Result<R, Error> {
        self.lock
            .hold_mode(self.key, Mode::Wait(ms(self.wait)), self.asked()?, f)
            .map(|r| r.expect("a waiting hold runs f"))
    }

    /// Runs `f` only if the key is free now; see [`Lock::try_hold`]. With
    /// several permits: only if its permits fit now and nobody waits.
    /// `None` otherwise; fails `closed`, `lost` (the lease lost while `f`
    /// ran), or `invalid` for a bad key or more permits than the lock has.
    pub fn try_hold<R>(self, f: impl FnOnce(&Lease<'_>) -> R) -> Result<Option<R>, Error> {
        self.lock.hold_mode(self.key, Mode::Try, self.asked()?, f)
    }

    /// A handle-style lease, waiting up to `wait`; see [`Lock::acquire`]:
    /// **it runs out `ttl` after its last renewal** (in process, use
    /// [`lock`](KeyHold::lock)). Fails as it does, and `invalid` for more
    /// permits than the lock has.
    pub fn acquire(self) -> Result<HeldLease, Error> {
        self.lock
            .acquire_lease(self.key, Mode::Wait(ms(self.wait)), self.asked()?)
            .map(|l| l.expect("a waiting acquire grants"))
    }

    /// A handle-style lease only if the key is free now: `None` when it is
    /// held (with several permits: when its permits do not fit now or
    /// someone waits). Fails `closed`, or `invalid` for a bad key or more
    /// permits than the lock has.
    pub fn try_acquire(self) -> Result<Option<HeldLease>, Error> {
        self.lock.acquire_lease(self.key, Mode::Try, self.asked()?)
    }
}
impl Lock {
    /// [`hold`](Lock::hold), answering the closure's value even when the
    /// lease was lost while it ran: `Ok(Outcome { value, lost })`, with
    /// `lost` the error `hold` would have answered. `Err` only when `f`
    /// never ran (`in use`, `limit`, `closed`, `invalid`).
    ///
    /// ```
    /// use holdline::{ErrorKind, Store};
    /// use std::time::Duration;
    ///
    /// let store = Store::new();
    /// let mail = store.lock("mail").max_hold(Duration::from_millis(20)).open()?;
    /// let outcome = mail.hold_outcome("welcome:7", |lease| {
    ///     // A slow step: the lease is revoked at its 20 ms maxHold.
    ///     lease.signal().wait_timeout(Duration::from_secs(10));
    ///     "sent"
    /// })?;
    /// assert_eq!(outcome.value, "sent"); // the side effect is not lost
    /// let lost = outcome.lost.expect("revoked");
    /// assert_eq!(lost.kind(), ErrorKind::Lost);
    /// assert_eq!(
    ///     lost.to_string(),
    ///     "lock mail: key \"welcome:7\": the lease was lost: it was revoked at its maxHold"
    /// );
    /// # Ok::<(), holdline::Error>(())
    /// ```
    pub fn hold_outcome<'k, K: IntoKey<'k>, R>(
        &self,
        key: K,
        f: impl FnOnce(&Lease<'_>) -> R,
    ) -> Result<Outcome<R>, Error> {
        self.key(key.into_key()).wait(DEFAULT_WAIT).hold_outcome(f)
    }
}

impl KeyHold<'_> {
    /// Holds the key while `f` runs, waiting up to `wait`, and answers the
    /// value with the loss; see [`Lock::hold_outcome`].
    pub fn hold_outcome<R>(self, f: impl FnOnce(&Lease<'_>) -> R) -> Result<Outcome<R>, Error> {
        self.lock
            .hold_run(self.key, Mode::Wait(ms(self.wait)), self.asked()?, f)
            .map(|o| o.expect("a waiting hold runs f"))
    }
}
