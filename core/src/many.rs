//! Several keys at once: [`Lock::hold_many`], [`Lock::try_hold_many`] and
//! the builder [`KeySet`].
//!
//! Two holders that take the same keys in different orders can each hold
//! one and wait for the other's. A set is therefore always taken in one
//! canonical order, sorted by the keys' text (each key once), so any two
//! sets, whatever order their callers named them in, meet their common keys
//! in the same order and never wait on each other in a cycle.
//!
//! The keys are taken one after another, each through the same path as
//! [`Lock::hold`] (the same FIFO line, `limit`, `closed` and `invalid`
//! rules), under one deadline for the whole set. A key taken becomes a
//! [`Lease`] at once (its maxHold counts from its own grant) and is listed
//! on the thread, so a `hold` of it inside the closure fails `invalid`.
//! When any key fails, every lease already made is ended, in reverse order,
//! before the error returns: no partial set is ever left held.

use crate::error::Error;
use crate::key::{check_key, Key, KeyBuf};
use crate::lease::Lease;
use crate::lock::{ms, Lock, Mode, DEFAULT_WAIT};
use crate::outcome::Outcome;
use crate::sync::Ordering;
use std::fmt;
use std::time::Duration;

impl Lock {
    /// Holds every key of `keys` while `f` runs, waiting up to 10 s for
    /// the whole set, and answers what `f` answered.
    ///
    /// The keys are taken in one canonical order, sorted by their text,
    /// each once (`9` and `"9"` are one key), so two callers naming the same
    /// keys in opposite orders never wait on each other. `f` gets one
    /// [`Lease`] per distinct key, in that sorted order. If any key cannot
    /// be had (`in use` when the wait runs out part-way, `limit`, `closed`,
    /// `invalid`), every key already taken is let go before the error
    /// returns. An invalid key fails before any is taken. If a lease was
    /// lost while `f` ran, the answer is that `lost` error (the first key's,
    /// in sorted order) and `f`'s value is dropped, as with
    /// [`hold`](Lock::hold). An empty set runs `f` with no leases.
    ///
    /// ```
    /// use holdline::Store;
    ///
    /// let store = Store::new();
    /// let accounts = store.lock("accounts").open()?;
    /// // A transfer names its accounts in its own order; they are taken sorted.
    /// let keys = accounts.hold_many(&["bob", "alice"], |leases| {
    ///     leases.iter().map(|l| l.key().to_owned()).collect::<Vec<_>>()
    /// })?;
    /// assert_eq!(keys, ["alice", "bob"]);
    /// # Ok::<(), holdline::Error>(())
    /// ```
    pub fn hold_many<K: Key, R>(
        &self,
        keys: &[K],
        f: impl FnOnce(&[Lease<'_>]) -> R,
    ) -> Result<R, Error> {
        self.key_set(keys).hold(f)
    }

    /// Runs `f` under every key of `keys` only if all of them are free now:
    /// all or nothing, never waiting. `None` (and `f` not run, and no key
    /// kept) when any of them is held, also by this thread. Keys are taken
    /// sorted, each once, as in [`hold_many`](Lock::hold_many).
    pub fn try_hold_many<K: Key, R>(
        &self,
        keys: &[K],
        f: impl FnOnce(&[Lease<'_>]) -> R,
    ) -> Result<Option<R>, Error> {
        self.key_set(keys).try_hold(f)
    }

    /// A hold of several keys with options (`wait`); see
    /// [`hold_many`](Lock::hold_many).
    pub fn key_set<'a, K: Key>(&'a self, keys: &'a [K]) -> KeySet<'a, K> {
        KeySet {
            lock: self,
            keys,
            wait: DEFAULT_WAIT,
        }
    }

    /// Takes the set and runs `f`: `None` when `Try` found a key held.
    fn hold_set<K: Key, R>(
        &self,
        keys: &[K],
        mode: Mode,
        f: impl FnOnce(&[Lease<'_>]) -> R,
    ) -> Result<Option<Outcome<R>>, Error> {
        let mut texts: Vec<String> = keys
            .iter()
            .map(|k| k.key_ref().text(&mut KeyBuf::new()).to_owned())
            .collect();
        texts.sort_unstable();
        texts.dedup();
        if self.store.closed.load(Ordering::Acquire) {
            return Err(match texts.first() {
                Some(t) => Error::closed().for_key(&self.shared.name, t),
                None => Error::closed().for_lock(&self.shared.name),
            });
        }
        for text in &texts {
            check_key(&self.shared.name, text)?;
        }
        let deadline = self.deadline_us(mode);
        // Dropped on every early return (an error, a key held, a panic):
        // ends the leases taken so far, newest first, then unlists them.
        let mut listed = Vec::with_capacity(texts.len());
        let mut taken = Taken(Vec::with_capacity(texts.len()));
        for text in &texts {
            let hash = self.shared.table.hash(text);
            let mode = match mode {
                Mode::Wait(w) if w > 0 && self.store.clock.now_us() >= deadline => Mode::Wait(0),
                m => m,
            };
            // Listed, then granted, as a single hold is.
            // SAFETY: the guard goes into `listed`, dropped (never leaked)
            // on every return; `text` lives in `texts`, which outlives it.
            let Some((l, grant)) =
                (unsafe { self.acquire_listed(text, hash, mode, 1, Some(deadline)) })?
            else {
                return Ok(None);
            };
            // No reallocation (reserved above), so nothing can fail between
            // the lease taking the grant and its place in `taken`.
            taken.0.push(self.closure_lease(text, grant));
            listed.push(l);
        }
        let value = f(&taken.0);
        let mut lost = None;
        // Newest first; keeps the loss of the first key (in sorted order)
        // that was lost.
        while let Some(lease) = taken.0.pop() {
            let key = lease.key;
            if let Err(loss) = lease.end() {
                lost = Some(loss.error_for(&self.shared.name, key));
            }
        }
        drop(listed);
        Ok(Some(Outcome { value, lost }))
    }
}

/// The leases of a set being taken or held; dropping it ends them, newest
/// first (the order the thread listed them in).
struct Taken<'a>(Vec<Lease<'a>>);

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        while let Some(lease) = self.0.pop() {
            drop(lease);
        }
    }
}

/// Several keys of a lock, with options; from [`Lock::key_set`].
#[must_use = "a KeySet does nothing until .hold() or .try_hold()"]
pub struct KeySet<'a, K> {
    lock: &'a Lock,
    keys: &'a [K],
    wait: Duration,
}

impl<K> Clone for KeySet<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for KeySet<'_, K> {}

impl<K> fmt::Debug for KeySet<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeySet")
            .field("lock", &self.lock.name())
            .field("keys", &self.keys.len())
            .field("wait", &self.wait)
            .finish()
    }
}

impl<K: Key> KeySet<'_, K> {
    /// How long the whole set may take (default 10 s; zero: fail `in use`
    /// at once if any key is held; below 1 ms rounds up to 1 ms). One
    /// deadline for all the keys, not one per key.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Holds every key while `f` runs; see [`Lock::hold_many`]. Fails as it
    /// does (`in use` past the wait, `limit`, `closed`, `invalid`, `lost`),
    /// with no key left held.
    pub fn hold<R>(self, f: impl FnOnce(&[Lease<'_>]) -> R) -> Result<R, Error> {
        self.hold_outcome(f)?.into_result()
    }

    /// Holds every key while `f` runs, and answers the value with the loss
    /// of any lease; see [`Lock::hold_outcome`].
    pub fn hold_outcome<R>(self, f: impl FnOnce(&[Lease<'_>]) -> R) -> Result<Outcome<R>, Error> {
        self.lock
            .hold_set(self.keys, Mode::Wait(ms(self.wait)), f)
            .map(|o| o.expect("a waiting hold runs f"))
    }

    /// Runs `f` only if every key is free now; see [`Lock::try_hold_many`].
    /// `None` when any is held; fails `invalid` for a bad key, `closed`
    /// once the store is closed, `lost` when a lease was lost while `f` ran.
    pub fn try_hold<R>(self, f: impl FnOnce(&[Lease<'_>]) -> R) -> Result<Option<R>, Error> {
        match self.lock.hold_set(self.keys, Mode::Try, f)? {
            Some(o) => o.into_result().map(Some),
            None => Ok(None),
        }
    }
}
