//! Guards: a hold that lasts until a value is dropped, as parking_lot's
//! and tokio's mutex guards do, beside the closure holds.
//!
//! A guard owns the same [`Lease`] a closure hold makes
//! ([`Lock::closure_lease`]): the same grant, the same maxHold timing (a
//! slot of the store's watch, else the wheel), no ttl (it is renewed while
//! the process lives), and the same release when it ends: on drop, panic
//! included, or by [`Guard::release`], which also tells whether the lease
//! was lost first.
//!
//! # The thread's running holds
//!
//! A closure hold lists its key in its thread's context, so a hold of the
//! same key inside it fails `invalid` at once. A guard is not listed: the
//! listing is a stack of pointers to key text, popped innermost first, and
//! a guard may be dropped out of that order, moved to another thread, or
//! leaked with `mem::forget` (safe code), any of which would leave an
//! entry pointing at text that is gone. So a hold of a key this thread
//! holds by a guard waits in line like anyone else's (and fails `in use`
//! past its wait); `try_lock` and `try_hold` answer `None`. A guard taken
//! inside a closure hold of the same key still fails `invalid` (the
//! closure is listed), and so does a waiting guard inside a transaction.
//!
//! # Borrowed, owned, async
//!
//! [`Guard`] borrows its lock and key; [`OwnedGuard`] keeps an
//! `Arc<Lock>` and its key's text, so it is `'static` (for
//! `tokio::spawn`). Both are `Send + Sync`. The async forms wait in the
//! same line without blocking the thread, and their futures are `Send`.

use crate::ctx::{self, Refusal};
use crate::error::Error;
use crate::key::{IntoKey, KeyBuf, KeyRef};
use crate::lease::{Lease, Signal};
use crate::lock::{
    hold_options, ms, take, thread_deadline, Fast, Grant, KeyHold, Lock, Mode, Want, DEFAULT_WAIT,
    DEFAULT_WAIT_MS,
};
use crate::sync::Ordering;
use crate::table::find_in_chain;
use crossbeam_epoch as epoch;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// A borrowed guard's key text: the caller's text, or a number's decimal
/// text. The number's copy is on the heap: an inline buffer made every
/// [`Guard`] (text keys too) 24 bytes larger, and the uncontended
/// `lock` measurably slower than the closure hold.
pub(crate) enum KeyText<'a> {
    Borrowed(&'a str),
    Number(Box<str>),
}

impl<'a> KeyText<'a> {
    /// Text as it is; a number formatted, then copied.
    #[inline(always)]
    fn of(key: KeyRef<'a>) -> KeyText<'a> {
        match key {
            KeyRef::Text(t) => KeyText::Borrowed(t),
            number => KeyText::number(number),
        }
    }

    #[cold]
    #[inline(never)]
    fn number(key: KeyRef<'_>) -> KeyText<'a> {
        KeyText::Number(key.text(&mut KeyBuf::new()).into())
    }

    #[inline(always)]
    fn as_str(&self) -> &str {
        match self {
            KeyText::Borrowed(t) => t,
            KeyText::Number(t) => t,
        }
    }

    /// The text the lease itself is given: the caller's; none for a
    /// number (a guard answers its key from here, not from its lease).
    #[inline(always)]
    fn lease_text(&self) -> &'a str {
        match self {
            KeyText::Borrowed(t) => t,
            KeyText::Number(_) => "",
        }
    }
}

/// An owned guard's copy of its key text: inline up to [`INLINE_KEY`]
/// bytes (any integer's decimal text fits), so most keys allocate nothing.
pub(crate) enum OwnedKey {
    Inline { bytes: [u8; INLINE_KEY], len: u8 },
    Heap(Box<str>),
}

/// The longest key text an owned guard keeps inline.
const INLINE_KEY: usize = 40;

impl OwnedKey {
    /// A copy of `key`'s text, inline when it fits.
    fn of(key: KeyRef<'_>) -> OwnedKey {
        let mut buf = KeyBuf::new();
        let text = key.text(&mut buf);
        if text.len() > INLINE_KEY {
            return OwnedKey::Heap(text.into());
        }
        let mut bytes = [0; INLINE_KEY];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        OwnedKey::Inline {
            bytes,
            len: text.len() as u8,
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // SAFETY: `bytes[..len]` is a whole `&str`'s bytes, copied by
            // `of` and never written since.
            OwnedKey::Inline { bytes, len } => unsafe {
                std::str::from_utf8_unchecked(&bytes[..usize::from(*len)])
            },
            OwnedKey::Heap(t) => t,
        }
    }
}

/// A key held until this guard is dropped: from [`Lock::lock`],
/// [`Lock::try_lock`], [`Lock::lock_async`] and their [`KeyHold`] forms.
///
/// No ttl: it is held while the process lives. A lock's maxHold revokes
/// it as it revokes a closure hold: the key goes to the next in line,
/// [`is_lost`](Guard::is_lost) turns true and its [`Signal`] aborts.
/// Dropping it (panic included) lets the key go; [`release`](Guard::release)
/// does too, and tells whether the lease was lost first.
///
/// It is not listed in its thread's running holds (it may move between
/// threads, be dropped in any order, or be leaked): a hold of the same key
/// on the same thread while it lives waits in line, and fails `in use`
/// past its wait, instead of failing `invalid` at once.
#[must_use = "the key is let go as soon as the guard is dropped"]
pub struct Guard<'a> {
    lease: Lease<'a>,
    key: KeyText<'a>,
}

/// [`Guard`], owning an `Arc` of its lock and its key's text, so it is
/// `'static` (for `tokio::spawn`); from [`Lock::lock_owned`] and
/// [`OwnedKeyHold`]. Same rules as [`Guard`].
#[must_use = "the key is let go as soon as the guard is dropped"]
pub struct OwnedGuard {
    // Declared first, so dropped first: the lease's end reaches the lock
    // (through `lock`, below), which must still be alive.
    lease: Lease<'static>,
    key: OwnedKey,
    lock: Arc<Lock>,
}

/// What both guards answer, over their lease and key text.
macro_rules! guard_methods {
    () => {
        /// The fencing token: greater than every earlier grant's of this key.
        #[inline]
        pub fn fence(&self) -> u64 {
            self.lease.fence()
        }

        /// How many of the key's permits this guard holds.
        #[inline]
        pub fn permits(&self) -> u32 {
            self.lease.permits()
        }

        /// The key, as text.
        #[inline]
        pub fn key(&self) -> &str {
            self.key.as_str()
        }

        /// Whether the lease was lost (revoked at maxHold, or its store closed).
        pub fn is_lost(&self) -> bool {
            self.lease.is_lost()
        }

        /// `Err` of kind `Lost` once the lease is lost; never fails otherwise.
        pub fn check(&self) -> Result<(), Error> {
            match self.lease.loss() {
                None => Ok(()),
                Some(loss) => Err(loss.error_for(&self.lease.lock.name, self.key.as_str())),
            }
        }

        /// A handle that aborts when the lease is lost (see [`Signal`]).
        /// Never fails; the first call allocates the lease's shared state.
        pub fn signal(&self) -> Signal {
            self.lease.signal()
        }
    };
}

impl<'a> Guard<'a> {
    guard_methods!();

    /// Lets the key go now. `Err` (`lost`) when the lease was lost before
    /// (revoked at maxHold, or its store closed): the key may have had
    /// another holder meanwhile.
    pub fn release(self) -> Result<(), Error> {
        let Guard { lease, key } = self;
        let lock = lease.lock;
        lease
            .end()
            .map_err(|loss| loss.error_for(&lock.name, key.as_str()))
    }
}

impl OwnedGuard {
    guard_methods!();

    /// A guard over `grant` of `key`, keeping `lock`.
    fn new(lock: Arc<Lock>, key: OwnedKey, grant: Grant) -> OwnedGuard {
        // SAFETY: the lease borrows the `Lock` in `lock`'s allocation,
        // which does not move while the `Arc` lives; the guard keeps the
        // `Arc` and drops (or, in `release`, ends) its lease first, and
        // never lends the `'static` reference out.
        let lock_ref: &'static Lock = unsafe { &*Arc::as_ptr(&lock) };
        // The lease gets no text: it cannot point into `key`, which moves
        // with the guard; the guard answers its key itself.
        let lease = lock_ref.closure_lease("", grant);
        OwnedGuard { lease, key, lock }
    }

    /// The lock this guard holds a key of.
    pub fn lock(&self) -> &Arc<Lock> {
        &self.lock
    }

    /// Lets the key go now; see [`Guard::release`]. `Err` (`lost`) when
    /// the lease was lost before.
    pub fn release(self) -> Result<(), Error> {
        let OwnedGuard { lease, key, lock } = self;
        let ended = lease.end();
        ended.map_err(|loss| loss.error_for(&lock.shared.name, key.as_str()))
    }
}

impl Lock {
    /// Holds `key` until the guard is dropped, waiting in line up to 10 s
    /// (choose with [`KeyHold::wait`] and [`KeyHold::lock`]). Fails `in
    /// use` past the wait, `limit` when the line is full, `closed`, or
    /// `invalid` (a bad key, a key this thread holds in a closure hold, a
    /// wait inside a transaction). A key this thread holds by a guard is
    /// waited for like anyone else's.
    ///
    /// ```
    /// use holdline::Store;
    ///
    /// let store = Store::new();
    /// let invoices = store.lock("invoices").open()?;
    /// let guard = invoices.lock("inv-9")?;
    /// assert!(invoices.try_lock("inv-9")?.is_none()); // held
    /// let fence = guard.fence();
    /// drop(guard); // lets the key go
    /// assert!(invoices.lock("inv-9")?.fence() > fence);
    /// # Ok::<(), holdline::Error>(())
    /// ```
    #[inline(always)]
    pub fn lock<'a, K: IntoKey<'a>>(&'a self, key: K) -> Result<Guard<'a>, Error> {
        self.guard(key.into_key(), Mode::Wait(DEFAULT_WAIT_MS), 1)
            .map(|g| g.expect("a waiting lock grants"))
    }

    /// A guard of `key` only if it is free now: `None` when it is held
    /// (also by this thread). Fails `closed`, or `invalid` for a bad key.
    #[inline(always)]
    pub fn try_lock<'a, K: IntoKey<'a>>(&'a self, key: K) -> Result<Option<Guard<'a>>, Error> {
        self.guard(key.into_key(), Mode::Try, 1)
    }

    /// [`lock`](Lock::lock) without blocking the thread: waits in the same
    /// line as a task (up to 10 s). Fails as `lock` does. Dropping the
    /// future leaves the line, or lets the key go.
    pub fn lock_async<'a, K: IntoKey<'a>>(
        &'a self,
        key: K,
    ) -> impl Future<Output = Result<Guard<'a>, Error>> + Send + 'a {
        self.key(key.into_key()).lock_async()
    }

    /// An [`OwnedGuard`] of `key` (its text copied), waiting in line up
    /// to 10 s: [`lock`](Lock::lock) for a guard that must be `'static`
    /// (tokio's `lock_owned`). Fails as `lock` does.
    pub fn lock_owned<'k, K: IntoKey<'k>>(self: Arc<Self>, key: K) -> Result<OwnedGuard, Error> {
        self.owned_key(key).lock()
    }

    /// An [`OwnedGuard`] of `key` only if it is free now: `None` when it is
    /// held (also by this thread). Fails `closed`, or `invalid` for a bad key.
    pub fn try_lock_owned<'k, K: IntoKey<'k>>(
        self: Arc<Self>,
        key: K,
    ) -> Result<Option<OwnedGuard>, Error> {
        self.owned_key(key).try_lock()
    }

    /// [`lock_owned`](Lock::lock_owned) without blocking the thread; the
    /// future is `Send + 'static`. Fails as `lock` does.
    pub fn lock_owned_async<'k, K: IntoKey<'k>>(
        self: Arc<Self>,
        key: K,
    ) -> impl Future<Output = Result<OwnedGuard, Error>> + Send + 'static {
        self.owned_key(key).lock_async()
    }

    /// An owned hold of `key` with options (`wait`, `permits`,
    /// `exclusive`), for an [`OwnedGuard`]. The key's text is copied
    /// (allocating only past 40 bytes).
    pub fn owned_key<'k, K: IntoKey<'k>>(self: Arc<Self>, key: K) -> OwnedKeyHold {
        let key = OwnedKey::of(key.into_key());
        OwnedKeyHold {
            lock: self,
            key,
            wait: DEFAULT_WAIT,
            want: Want::One,
        }
    }

    /// The blocking guard's path: `None` when `Try` found the key held.
    #[inline(always)]
    fn guard<'a>(
        &'a self,
        key: KeyRef<'a>,
        mode: Mode,
        want: u32,
    ) -> Result<Option<Guard<'a>>, Error> {
        let key = KeyText::of(key);
        let text = key.as_str();
        let hash = self.shared.table.hash(text);
        let Some(grant) = self.acquire_unlisted(text, hash, mode, want)? else {
            return Ok(None);
        };
        let lease = self.closure_lease(key.lease_text(), grant);
        Ok(Some(Guard { lease, key }))
    }

    /// A guard's way to its grant: [`Lock::acquire_listed`]'s, in the same
    /// order (the lookup's loads first, so their misses overlap the
    /// checks), with the thread's context checked but nothing listed (see
    /// the module doc). `None`: a `Try` found the key held. Kept whole in
    /// the caller: a grant passed back through memory, stored and loaded
    /// at different widths, cost a quarter of the uncontended lock.
    #[inline(always)]
    pub(crate) fn acquire_unlisted(
        &self,
        text: &str,
        hash: u64,
        mode: Mode,
        want: u32,
    ) -> Result<Option<Grant>, Error> {
        let guard = epoch::pin();
        let chain = self.shared.table.chain(hash, &guard);
        if self.store.closed.load(Ordering::Acquire) {
            return Err(self.closed_error(text));
        }
        if let Err(refusal) = ctx::check_hold(self.shared.id(), hash, text) {
            let allowed = matches!((refusal, mode), (Refusal::InTransaction, Mode::Try));
            if !allowed {
                return self.refused_here(refusal, mode, text).map(|()| None);
            }
        }
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
                match self.acquire_slow_until(text, hash, mode, want, thread_deadline(mode))? {
                    Some(g) => g,
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(grant))
    }
}

impl<'l> KeyHold<'l> {
    /// A guard of the key, waiting up to `wait`; see [`Lock::lock`]. Fails
    /// as it does, and `invalid` for more permits than the lock has.
    pub fn lock(self) -> Result<Guard<'l>, Error> {
        let want = self.asked()?;
        self.lock
            .guard(self.key, Mode::Wait(ms(self.wait)), want)
            .map(|g| g.expect("a waiting lock grants"))
    }

    /// A guard only if the key is free now (with several permits: if they
    /// fit now and nobody waits); `None` otherwise. Fails `closed`, or
    /// `invalid` for a bad key or more permits than the lock has.
    pub fn try_lock(self) -> Result<Option<Guard<'l>>, Error> {
        let want = self.asked()?;
        self.lock.guard(self.key, Mode::Try, want)
    }

    /// A guard, waiting up to `wait` without blocking the thread; see
    /// [`Lock::lock_async`]. Fails as [`lock`](KeyHold::lock) does.
    // Not an `async fn`: the signature promises `Send`.
    #[allow(clippy::manual_async_fn)]
    pub fn lock_async(self) -> impl Future<Output = Result<Guard<'l>, Error>> + Send + 'l {
        async move {
            let want = self.asked()?;
            let key = KeyText::of(self.key);
            let text = key.as_str();
            let hash = self.lock.shared.table.hash(text);
            let mode = Mode::Wait(ms(self.wait));
            let grant = self.lock.grant_async(text, hash, mode, want).await?;
            let lease = self.lock.closure_lease(key.lease_text(), grant);
            Ok(Guard { lease, key })
        }
    }
}

/// One key of an `Arc<Lock>`, with options, for an [`OwnedGuard`]; from
/// [`Lock::owned_key`].
#[must_use = "an OwnedKeyHold does nothing until .lock(), .try_lock() or .lock_async()"]
pub struct OwnedKeyHold {
    lock: Arc<Lock>,
    key: OwnedKey,
    wait: Duration,
    want: Want,
}

impl OwnedKeyHold {
    hold_options!();

    /// The permits asked for, checked as a [`KeyHold`] checks them.
    fn asked(&self) -> Result<u32, Error> {
        let view = KeyHold {
            lock: &self.lock,
            key: KeyRef::Text(self.key.as_str()),
            wait: self.wait,
            want: self.want,
        };
        view.asked()
    }

    /// An owned guard, waiting up to `wait`; see [`Lock::lock`]. Fails as
    /// it does, and `invalid` for more permits than the lock has.
    pub fn lock(self) -> Result<OwnedGuard, Error> {
        let mode = Mode::Wait(ms(self.wait));
        self.guard(mode).map(|g| g.expect("a waiting lock grants"))
    }

    /// An owned guard only if the key is free now; `None` otherwise. Fails
    /// `closed`, or `invalid` for a bad key or more permits than the lock has.
    pub fn try_lock(self) -> Result<Option<OwnedGuard>, Error> {
        self.guard(Mode::Try)
    }

    fn guard(self, mode: Mode) -> Result<Option<OwnedGuard>, Error> {
        let want = self.asked()?;
        let text = self.key.as_str();
        let hash = self.lock.shared.table.hash(text);
        let Some(grant) = self.lock.acquire_text(text, hash, mode, want)? else {
            return Ok(None);
        };
        Ok(Some(OwnedGuard::new(self.lock, self.key, grant)))
    }

    /// An owned guard, waiting up to `wait` without blocking the thread;
    /// the future is `Send + 'static`. Fails as [`lock`](OwnedKeyHold::lock).
    // Not an `async fn`: the signature promises `Send`.
    #[allow(clippy::manual_async_fn)]
    pub fn lock_async(self) -> impl Future<Output = Result<OwnedGuard, Error>> + Send + 'static {
        async move {
            let want = self.asked()?;
            let text = self.key.as_str();
            let hash = self.lock.shared.table.hash(text);
            let mode = Mode::Wait(ms(self.wait));
            let grant = self.lock.grant_async(text, hash, mode, want).await?;
            Ok(OwnedGuard::new(self.lock, self.key, grant))
        }
    }
}

impl fmt::Debug for Guard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("lock", &self.lease.lock.name)
            .field("key", &self.key())
            .field("fence", &self.fence())
            .finish()
    }
}

impl fmt::Debug for OwnedGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedGuard")
            .field("lock", &self.lease.lock.name)
            .field("key", &self.key())
            .field("fence", &self.fence())
            .finish()
    }
}

impl fmt::Debug for OwnedKeyHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedKeyHold")
            .field("lock", &self.lock.shared.name)
            .field("key", &self.key.as_str())
            .field("wait", &self.wait)
            .finish()
    }
}
