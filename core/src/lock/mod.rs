//! A named lock: its handle ([`Lock`]) and the public ways to hold one of
//! its keys ([`Lock::hold`], [`Lock::try_hold`], [`Lock::acquire`],
//! [`Lock::hold_outcome`], [`Lock::stats`]), each a short way into the
//! paths its submodules own:
//!
//! - `fast`: [`Grant`] (a release owed exactly once) and the uncontended
//!   path from a key to a grant.
//! - `slow`: a thread's wait in a key's line, past the fast path.
//! - `leases`: a grant made into a closure's or a handle's lease, with its
//!   maxHold or ttl timed.
//! - `errors`: the errors a lock's holds answer, naming the lock and key.
//! - `key_hold`: the per-call builder [`KeyHold`] and its options.
//! - `fairness`: [`Fairness`], strict FIFO or bounded bypass.
//!
//! The uncontended path: hash the key, look at the closed flag, check and
//! list the hold in the thread's context, pin the epoch, find the record,
//! one CAS `0 -> HELD`, unpin; at the end one CAS `HELD -> 0`. No lock, no
//! allocation, no clock read, no shared counter. A key found in the table
//! was checked when its record was made, so only the slow path checks the
//! key's text. Everything else (creating the record, waiting in line,
//! timers, every error) is out of line.

mod errors;
mod fairness;
mod fast;
mod key_hold;
mod leases;
mod slow;

pub use fairness::{Fairness, DEFAULT_BYPASS_BOUND};
pub(crate) use fast::{take, Fast, Grant};
pub use key_hold::KeyHold;
pub(crate) use key_hold::{hold_options, ms, Want};
pub(crate) use slow::{thread_deadline, Entered};

use crate::error::Error;
use crate::heartbeat::HeartbeatState;
use crate::key::{IntoKey, KeyBuf, KeyRef};
use crate::lease::{Core, HeldLease, Lease, LeaseState};
use crate::lock_shared::LockShared;
use crate::outcome::Outcome;
use crate::record::Holders;
use crate::sync::{Arc, Ordering};
use crossbeam_epoch as epoch;
use std::fmt;
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
    /// How long its waiters may be bypassed (µs; 0: strict FIFO).
    pub(crate) bypass_us: u64,
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
            bypass_us: 0,
            heartbeat,
        }
    }

    /// The handle with its lines served as `fairness` says.
    pub(crate) fn with_fairness(mut self, fairness: Fairness) -> Lock {
        self.bypass_us = fairness.bound_us();
        self
    }

    /// How a node of this handle's waiter may be bypassed.
    pub(crate) fn bypass(&self) -> crate::record::Bypass {
        crate::record::Bypass::for_bound(self.bypass_us)
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

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.shared.name)
            .field("ttl_ms", &self.ttl_ms)
            .field("max_hold_ms", &self.max_hold_ms)
            .finish()
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
