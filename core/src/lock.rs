//! A named lock: its handle ([`Lock`]), the per-call builder ([`KeyHold`]),
//! and the paths from a key to a grant.
//!
//! The uncontended path: check the key, hash it, pin the epoch, find the
//! record, one CAS `0 -> HELD`, unpin; at the end one CAS `HELD -> 0`. No
//! lock, no allocation, no clock read, no shared counter. Everything else
//! (creating the record, waiting in line, timers) is the slow path.

use crate::ctx::{self, Refusal};
use crate::error::{Error, ErrorKind};
use crate::key::{check_key, Key, KeyBuf, KeyRef};
use crate::lease::{HeldLease, Lease, LeaseState};
use crate::record::{Enqueued, Record, Tried, WaitEnd, Waiter};
use crate::store::StoreShared;
use crate::sync::{Arc, AtomicU64, Ordering};
use crate::table::Table;
use crossbeam_epoch as epoch;
use std::cell::{Cell, OnceCell};
use std::fmt;
use std::time::Duration;

/// Default wait of `hold`.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);
const DEFAULT_WAIT_MS: u64 = DEFAULT_WAIT.as_millis() as u64;
/// Most waiters one key's line holds (the holder not counted).
pub const MAX_WAITERS: u32 = 10_000;

/// What a lock's handles share: its keys and counters.
pub(crate) struct LockShared {
    pub(crate) name: Box<str>,
    pub(crate) table: Table,
    pub(crate) timeouts: AtomicU64,
    pub(crate) revocations: AtomicU64,
    pub(crate) expirations: AtomicU64,
}

impl LockShared {
    pub(crate) fn new(name: &str, fence_floor: u64) -> LockShared {
        LockShared {
            name: name.into(),
            table: Table::new(fence_floor),
            timeouts: AtomicU64::new(0),
            revocations: AtomicU64::new(0),
            expirations: AtomicU64::new(0),
        }
    }

    fn id(&self) -> usize {
        self as *const LockShared as usize
    }
}

/// A handle to a named lock of a store. Cheap to clone. Its `ttl` and
/// `maxHold` apply to the holds made through it.
#[derive(Clone)]
pub struct Lock {
    pub(crate) store: Arc<StoreShared>,
    pub(crate) shared: Arc<LockShared>,
    pub(crate) ttl_ms: u64,
    pub(crate) max_hold_ms: u64,
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
enum Mode {
    /// Never waits; a held key answers `None`.
    Try,
    /// Waits up to this many ms (0: fail `in use` at once if held).
    Wait(u64),
}

/// A grant: the caller holds `record` with `fence`.
struct Grant {
    record: *const Record,
    fence: u64,
}

impl Grant {
    #[inline]
    fn of(r: &Record) -> Grant {
        Grant {
            record: r,
            fence: r.fence(),
        }
    }
}

impl Lock {
    pub(crate) fn new(
        store: Arc<StoreShared>,
        shared: Arc<LockShared>,
        ttl_ms: u64,
        max_hold_ms: u64,
    ) -> Lock {
        Lock {
            store,
            shared,
            ttl_ms,
            max_hold_ms,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Holds `key` while `f` runs, waiting in line up to 10 s, and answers
    /// what `f` answered. Fails `in use` past the wait, `lost` if the lease
    /// was lost meanwhile (maxHold, store closed; `f`'s value is dropped).
    /// If `f` panics, the key is let go and the panic continues.
    #[inline]
    pub fn hold<K: Key + ?Sized, R>(
        &self,
        key: &K,
        f: impl FnOnce(&Lease<'_>) -> R,
    ) -> Result<R, Error> {
        self.hold_with(key.key_ref(), Mode::Wait(DEFAULT_WAIT_MS), f)
            .map(|r| r.expect("a waiting hold runs f"))
    }

    /// Runs `f` under `key` only if the key is free now; `None` (and `f` not
    /// run) when it is held, also by this thread.
    #[inline]
    pub fn try_hold<K: Key + ?Sized, R>(
        &self,
        key: &K,
        f: impl FnOnce(&Lease<'_>) -> R,
    ) -> Result<Option<R>, Error> {
        self.hold_with(key.key_ref(), Mode::Try, f)
    }

    /// A hold of `key` with options (`wait`).
    pub fn key<'a, K: Key + ?Sized>(&'a self, key: &'a K) -> KeyHold<'a> {
        KeyHold {
            lock: self,
            key: key.key_ref(),
            wait: DEFAULT_WAIT,
        }
    }

    /// A handle-style lease on `key`, waiting up to 10 s: held until
    /// released or dropped, or until it runs out `ttl` after its last renewal.
    pub fn acquire<K: Key + ?Sized>(&self, key: &K) -> Result<HeldLease, Error> {
        self.key(key).acquire()
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
    fn hold_with<R>(
        &self,
        key: KeyRef<'_>,
        mode: Mode,
        f: impl FnOnce(&Lease<'_>) -> R,
    ) -> Result<Option<R>, Error> {
        let mut buf = KeyBuf::new();
        let text = key.text(&mut buf);
        let hash = self.shared.table.hash(text);
        let Some(grant) = self.acquire_text(text, hash, mode)? else {
            return Ok(None);
        };
        // SAFETY: `text` lives in this frame (or the caller's), which outlives
        // the lease; the lease pops the entry when it ends (unwinding too).
        unsafe { ctx::push_hold(self.shared.id(), hash, text) };
        let lease = Lease {
            lock: self,
            key: text,
            record: grant.record,
            fence: grant.fence,
            state: OnceCell::new(),
            ended: Cell::new(false),
        };
        if self.max_hold_ms != 0 {
            let state = LeaseState::new(self, grant.record, grant.fence, self.max_hold_ms, 0);
            StoreShared::arm_timer(&self.store, &state);
            let _ = lease.state.set(state);
        }
        let r = f(&lease);
        match lease.end() {
            Ok(()) => Ok(Some(r)),
            Err(reason) => Err(lease.lost_error(reason)),
        }
    }

    /// From key text to a grant (`None`: `Try` found it held).
    #[inline]
    fn acquire_text(&self, text: &str, hash: u64, mode: Mode) -> Result<Option<Grant>, Error> {
        // The key's text is checked on the slow path only: a key found in
        // the table was checked when its record was made.
        if self.store.closed.load(Ordering::Acquire) {
            check_key(&self.shared.name, text)?;
            return Err(self.error(Error::closed(), text));
        }
        match ctx::check_hold(self.shared.id(), hash, text) {
            Ok(()) => {}
            Err(Refusal::SameKeyHeld) if matches!(mode, Mode::Try) => return Ok(None),
            Err(Refusal::SameKeyHeld) => {
                return Err(self.invalid("hold inside a hold of the same key", text));
            }
            Err(Refusal::InTransaction) if matches!(mode, Mode::Try) => {}
            Err(Refusal::InTransaction) => {
                return Err(
                    self.invalid("hold inside a transaction: hold first, then begin it", text)
                );
            }
        }
        {
            let guard = epoch::pin();
            if let Some(r) = self.shared.table.find(hash, text, &guard) {
                if r.try_lock_fast() {
                    return Ok(Some(Grant::of(r)));
                }
            }
        }
        self.acquire_slow(text, hash, mode)
    }

    #[cold]
    fn acquire_slow(&self, text: &str, hash: u64, mode: Mode) -> Result<Option<Grant>, Error> {
        check_key(&self.shared.name, text)?;
        let clock = &self.store.clock;
        let deadline = match mode {
            // In microseconds, +1 so the rounded-down clock never ends a
            // wait early.
            Mode::Wait(w) if w > 0 => clock
                .now_us()
                .saturating_add(w.saturating_mul(1000))
                .saturating_add(1),
            _ => 0,
        };
        let mut waiter: Option<Waiter> = None;
        let mut retired_seen = false;
        loop {
            let guard = epoch::pin();
            // After a DEAD record, go straight to the shard lock: the sweeper
            // holds it until the record is unlinked, so we wait there instead
            // of spinning on the stale one.
            let quick = if retired_seen {
                None
            } else {
                self.shared.table.find(hash, text, &guard)
            };
            let record = match quick {
                Some(r) => r,
                None => {
                    let (r, created) = self.shared.table.find_or_create(hash, text, &guard);
                    if created {
                        StoreShared::want_sweep(&self.store);
                        return Ok(Some(Grant::of(r)));
                    }
                    r
                }
            };
            let wait_ms = match mode {
                Mode::Try => 0,
                Mode::Wait(w) => w,
            };
            if wait_ms == 0 {
                match record.try_acquire() {
                    Tried::Granted => return Ok(Some(Grant::of(record))),
                    Tried::Dead => {
                        retired_seen = true;
                        continue;
                    }
                    Tried::Held if matches!(mode, Mode::Try) => return Ok(None),
                    Tried::Held => {
                        // Relaxed: a statistic.
                        self.shared.timeouts.fetch_add(1, Ordering::Relaxed);
                        return Err(self.in_use(text));
                    }
                }
            }
            let w = waiter.get_or_insert_with(Waiter::new);
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
            let enqueued = record.acquire_or_enqueue(w, admit).map_err(|kind| {
                let e = match kind {
                    ErrorKind::Limit => Error::new(
                        ErrorKind::Limit,
                        format!("{MAX_WAITERS} waiters already stand in line"),
                    ),
                    _ => Error::closed(),
                };
                self.error(e, text)
            })?;
            match enqueued {
                Enqueued::Granted => return Ok(Some(Grant::of(record))),
                Enqueued::Dead => {
                    retired_seen = true;
                    continue;
                }
                Enqueued::Waiting { first } => {
                    let record: *const Record = record;
                    // Unpin before waiting: a parked thread must not hold the
                    // epoch back.
                    drop(guard);
                    // SAFETY: while `w` is linked the line is not empty, so
                    // QUEUED is set and the record cannot be retired; once
                    // granted, HELD keeps it; after a timeout or close we do
                    // not touch it again.
                    let record = unsafe { &*record };
                    return match record.wait(w, first, clock, deadline) {
                        WaitEnd::Granted => Ok(Some(Grant::of(record))),
                        WaitEnd::Closed => Err(self.error(Error::closed(), text)),
                        WaitEnd::TimedOut => {
                            self.shared.timeouts.fetch_add(1, Ordering::Relaxed);
                            Err(self.in_use(text))
                        }
                    };
                }
            }
        }
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

    fn acquire_lease(&self, key: KeyRef<'_>, mode: Mode) -> Result<Option<HeldLease>, Error> {
        let mut buf = KeyBuf::new();
        let text = key.text(&mut buf);
        let hash = self.shared.table.hash(text);
        let Some(grant) = self.acquire_text(text, hash, mode)? else {
            return Ok(None);
        };
        let state = LeaseState::new(
            self,
            grant.record,
            grant.fence,
            self.max_hold_ms,
            self.ttl_ms,
        );
        StoreShared::arm_timer(&self.store, &state);
        Ok(Some(HeldLease::new(state, text)))
    }

    /// The fence a write must carry to be accepted now: `Some` while `key`
    /// is held. Authoritative (under the shard lock when the quick look misses).
    pub(crate) fn current_fence(&self, key: &str) -> Option<u64> {
        let hash = self.shared.table.hash(key);
        let guard = epoch::pin();
        self.shared
            .table
            .find_authoritative(hash, key, &guard)
            .and_then(Record::current_fence_if_held)
    }
}

fn ms(d: Duration) -> u64 {
    if d.is_zero() {
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
    lock: &'l Lock,
    key: KeyRef<'l>,
    wait: Duration,
}

impl KeyHold<'_> {
    /// How long to stand in line (default 10 s; zero: fail `in use` at once
    /// if held; below 1 ms rounds up to 1 ms).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Holds the key while `f` runs; see [`Lock::hold`].
    pub fn hold<R>(self, f: impl FnOnce(&Lease<'_>) -> R) -> Result<R, Error> {
        self.lock
            .hold_with(self.key, Mode::Wait(ms(self.wait)), f)
            .map(|r| r.expect("a waiting hold runs f"))
    }

    /// Runs `f` only if the key is free now; see [`Lock::try_hold`].
    pub fn try_hold<R>(self, f: impl FnOnce(&Lease<'_>) -> R) -> Result<Option<R>, Error> {
        self.lock.hold_with(self.key, Mode::Try, f)
    }

    /// A handle-style lease, waiting up to `wait`.
    pub fn acquire(self) -> Result<HeldLease, Error> {
        self.lock
            .acquire_lease(self.key, Mode::Wait(ms(self.wait)))
            .map(|l| l.expect("a waiting acquire grants"))
    }

    /// A handle-style lease only if the key is free now.
    pub fn try_acquire(self) -> Result<Option<HeldLease>, Error> {
        self.lock.acquire_lease(self.key, Mode::Try)
    }
}
