//! A lock over the connection: `hold`, `try_hold`, `key(..).wait(..)`, and
//! the handle-style [`HeldLease`] they are built on.
//!
//! Each hold takes a pooled connection for itself: `HOLD` (or `TRYHOLD`) on
//! it, the closure, then `RELEASE`, and the connection goes back to the
//! pool. Its background task renews every third of the ttl from the moment
//! `HOLD` is sent. A hold future dropped while its `HOLD` waits closes its
//! connection, which takes it out of the line on the server at once.

use crate::check::{check_key, key_text, wait_ms};
use crate::driver::Conn;
use crate::error::{Error, Scope};
use crate::lease::{Lease, LeaseShared};
use crate::store::{Store, StoreInner};
use crate::texts;
use holdline::{ErrorKind, Key, LockStats, DEFAULT_WAIT};
use holdline_resp::Value;
use std::fmt;
use std::io;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

/// A named lock of a [`Store`] with its `ttl` and `maxHold`:
/// `Clone + Send + Sync`, cheap to clone.
#[derive(Clone)]
pub struct Lock {
    store: Store,
    name: Arc<str>,
    ttl_ms: u64,
    /// `TTL`'s argument, formatted once.
    ttl_arg: Arc<str>,
    /// `MAXHOLD`'s argument; `None`: off.
    max_hold_arg: Option<Arc<str>>,
}

/// How a hold asks for its key.
#[derive(Clone, Copy)]
enum Mode {
    /// `HOLD ... WAIT ms`.
    Wait(u64),
    /// `TRYHOLD`: never waits.
    Try,
}

impl Lock {
    pub(crate) fn new(store: Store, name: &str, ttl_ms: u64, max_hold_ms: u64) -> Lock {
        Lock {
            store,
            name: name.into(),
            ttl_ms,
            ttl_arg: ttl_ms.to_string().into(),
            max_hold_arg: (max_hold_ms > 0).then(|| max_hold_ms.to_string().into()),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Holds `key` while `f` runs, waiting in its line up to 10 s; answers
    /// what `f` answered. Fails `in use` past the wait, `lost` if the lease
    /// was lost before `f` returned (the server's text; `f`'s value is
    /// dropped), and with the server's error otherwise.
    pub async fn hold<K: Key + ?Sized, R>(
        &self,
        key: &K,
        f: impl AsyncFnOnce(&Lease) -> R,
    ) -> Result<R, Error> {
        self.key(key).hold(f).await
    }

    /// Runs `f` only if `key` is free now: `Ok(None)`, `f` not run, when held.
    pub async fn try_hold<K: Key + ?Sized, R>(
        &self,
        key: &K,
        f: impl AsyncFnOnce(&Lease) -> R,
    ) -> Result<Option<R>, Error> {
        self.key(key).try_hold(f).await
    }

    /// One key, with options: `lock.key(&k).wait(d).hold(..)`.
    pub fn key<'a, K: Key + ?Sized>(&'a self, key: &'a K) -> KeyHold<'a> {
        KeyHold {
            lock: self,
            key: key_text(key),
            wait: DEFAULT_WAIT,
        }
    }

    /// A handle-style lease, waiting up to 10 s: renewed in the background,
    /// let go by [`HeldLease::release`] or on drop.
    pub async fn acquire<K: Key + ?Sized>(&self, key: &K) -> Result<HeldLease, Error> {
        self.key(key).acquire().await
    }

    /// A handle-style lease only if `key` is free now.
    pub async fn try_acquire<K: Key + ?Sized>(&self, key: &K) -> Result<Option<HeldLease>, Error> {
        self.key(key).try_acquire().await
    }

    /// The lock's counters on the server (`STATS`).
    pub async fn stats(&self) -> Result<LockStats, Error> {
        let reply = self.store.command(&["STATS", &self.name]).await?;
        let pairs: Vec<(Value, Value)> = match reply {
            Value::Map(pairs) => pairs,
            Value::Array(flat) => {
                let mut it = flat.into_iter();
                std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
            }
            other => return Err(unexpected(Scope::Lock(&self.name), &other)),
        };
        let mut stats = LockStats::default();
        for (k, v) in pairs {
            let n = v.as_integer().unwrap_or(0).max(0) as u64;
            match k.as_str() {
                Some("live_keys") => stats.live_keys = n as usize,
                Some("held_keys") => stats.held_keys = n as usize,
                Some("waiters") => stats.waiters = n as usize,
                Some("grants") => stats.grants = n,
                Some("timeouts") => stats.timeouts = n,
                Some("revocations") => stats.revocations = n,
                Some("expirations") => stats.expirations = n,
                _ => {}
            }
        }
        Ok(stats)
    }

    /// `HOLD` or `TRYHOLD` on a connection of its own; `None` when a try
    /// found the key held.
    async fn acquire_text(&self, key: String, mode: Mode) -> Result<Option<HeldLease>, Error> {
        check_key(&self.name, &key)?;
        let scope = Scope::Key(&self.name, &key);
        let inner = &self.store.inner;
        let conn = inner.checkout(scope).await?;
        // Renew while the HOLD waits, too: from now on.
        let ttl = Duration::from_millis(self.ttl_ms);
        conn.renew_for(Some(ttl));
        let wait_arg;
        let mut args: [&[u8]; 9] = [b""; 9];
        let mut n = 0;
        match mode {
            Mode::Wait(ms) => {
                wait_arg = ms.to_string();
                args[..5].copy_from_slice(&[
                    b"HOLD",
                    self.name.as_bytes(),
                    key.as_bytes(),
                    b"WAIT",
                    wait_arg.as_bytes(),
                ]);
                n += 5;
            }
            Mode::Try => {
                args[..3].copy_from_slice(&[b"TRYHOLD", self.name.as_bytes(), key.as_bytes()]);
                n += 3;
            }
        }
        args[n] = b"TTL";
        args[n + 1] = self.ttl_arg.as_bytes();
        n += 2;
        if let Some(max_hold) = &self.max_hold_arg {
            args[n] = b"MAXHOLD";
            args[n + 1] = max_hold.as_bytes();
            n += 2;
        }
        // A server that answers nothing past the wait (and a ttl more) is
        // stalled or cut off: give up rather than hang. Returning drops
        // `conn`, which closes the connection: the server takes the HOLD
        // out of its line, and nothing can be granted to it later.
        let wait = match mode {
            Mode::Wait(ms) => Duration::from_millis(ms),
            Mode::Try => Duration::ZERO,
        };
        let grace = ttl.max(MIN_PATIENCE);
        let Ok(reply) = tokio::time::timeout(wait + grace, conn.request(&args[..n])).await else {
            return Err(texts::wait_silent(&self.name, &key, wait, grace));
        };
        let (id, fence) = match reply {
            Ok(Value::Array(items)) => match (items.first(), items.get(1)) {
                (Some(Value::Integer(id)), Some(Value::Integer(fence))) if *fence >= 0 => {
                    (*id, *fence as u64)
                }
                _ => return Err(unexpected(scope, &Value::Array(items))),
            },
            Ok(Value::Null) if matches!(mode, Mode::Try) => {
                conn.renew_for(None);
                inner.give_back(conn);
                return Ok(None);
            }
            Ok(other) => return Err(unexpected(scope, &other)),
            Err(e) if e.is_connection() => return Err(closed_for_key(&self.name, &key, e)),
            Err(e) => {
                conn.renew_for(None);
                inner.give_back(conn);
                return Err(e);
            }
        };
        let shared = LeaseShared::new(id, fence, self.name.clone(), key.into_boxed_str(), ttl);
        conn.register(&shared);
        Ok(Some(HeldLease {
            lease: Lease { shared },
            conn: Some(conn),
            store: inner.clone(),
            ttl,
        }))
    }
}

tokio::task_local! {
    /// The keys the enclosing holds of this task hold: (store, lock, key).
    static HOLDING: Vec<(usize, Arc<str>, Box<str>)>;
}

/// Runs `f` with `held`'s key added to this task's enclosing holds.
async fn run_holding<R>(held: &HeldLease, f: impl AsyncFnOnce(&Lease) -> R) -> R {
    let mut holding = HOLDING.try_with(Vec::clone).unwrap_or_default();
    holding.push((
        Arc::as_ptr(&held.store) as usize,
        held.lease.shared.lock.clone(),
        held.lease.shared.key.clone(),
    ));
    HOLDING.scope(holding, f(held.lease())).await
}

/// The least a call waits for the server beyond its own wait.
const MIN_PATIENCE: Duration = Duration::from_secs(1);

/// A call about one key lost its connection (before any lease was held).
fn closed_for_key(lock: &str, key: &str, e: Error) -> Error {
    let io = e
        .io_error()
        .map(|io| io::Error::new(io.kind(), io.to_string()))
        .unwrap_or_else(|| io::Error::other(e.to_string()));
    texts::connection_closed_key(lock, key, io)
}

/// A reply of the wrong shape: the server is not holdline, or a newer one.
fn unexpected(scope: Scope<'_>, reply: &Value) -> Error {
    Error::connection(
        ErrorKind::Closed,
        scope,
        "the server's reply made no sense",
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected reply {reply}"),
        ),
    )
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("ttl_ms", &self.ttl_ms)
            .field("max_hold", &self.max_hold_arg)
            .finish()
    }
}

/// One key of a lock, with options; from [`Lock::key`].
#[derive(Debug)]
#[must_use = "a KeyHold does nothing until .hold(), .try_hold() or .acquire()"]
pub struct KeyHold<'l> {
    lock: &'l Lock,
    key: String,
    wait: Duration,
}

impl KeyHold<'_> {
    /// How long to stand in line (default 10 s; zero: fail `in use` at once
    /// if held; below 1 ms rounds up to 1 ms).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Holds the key while `f` runs; see [`Lock::hold`]. A hold of a key
    /// that an enclosing hold of this task holds fails `invalid` at once
    /// (it would wait for itself).
    pub async fn hold<R>(self, f: impl AsyncFnOnce(&Lease) -> R) -> Result<R, Error> {
        let store = self.lock.store.id();
        let name = &self.lock.name;
        let nested = HOLDING
            .try_with(|held| {
                held.iter()
                    .any(|(s, n, k)| *s == store && n == name && **k == *self.key)
            })
            .unwrap_or(false);
        if nested {
            return Err(Error::local(
                ErrorKind::Invalid,
                Scope::Key(name, &self.key),
                "hold inside a hold of the same key",
            ));
        }
        let held = self.acquire().await?;
        let r = run_holding(&held, f).await;
        held.release().await.map(|()| r)
    }

    /// Runs `f` only if the key is free now; see [`Lock::try_hold`].
    pub async fn try_hold<R>(self, f: impl AsyncFnOnce(&Lease) -> R) -> Result<Option<R>, Error> {
        let Some(held) = self.try_acquire().await? else {
            return Ok(None);
        };
        let r = run_holding(&held, f).await;
        held.release().await.map(|()| Some(r))
    }

    /// A handle-style lease, waiting up to `wait`.
    pub async fn acquire(self) -> Result<HeldLease, Error> {
        let mode = Mode::Wait(wait_ms(self.wait));
        let held = self.lock.acquire_text(self.key, mode).await?;
        // A waiting HOLD answers a grant or an error, never a null.
        held.ok_or_else(|| unexpected(Scope::Lock(&self.lock.name), &Value::Null))
    }

    /// A handle-style lease only if the key is free now.
    pub async fn try_acquire(self) -> Result<Option<HeldLease>, Error> {
        self.lock.acquire_text(self.key, Mode::Try).await
    }
}

/// A lease not tied to a closure: its connection's task renews it every
/// third of the ttl until [`release`](HeldLease::release) or drop (which
/// sends `RELEASE` without waiting for the answer). Derefs to [`Lease`].
pub struct HeldLease {
    lease: Lease,
    /// `None` once released.
    conn: Option<Conn>,
    store: Arc<StoreInner>,
    ttl: Duration,
}

impl HeldLease {
    /// The lease (what a `hold` closure gets).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Renews now (`RENEW`); `Err` (`lost`, the server's text) once lost.
    pub async fn renew(&self) -> Result<(), Error> {
        let conn = self
            .conn
            .as_ref()
            .expect("a HeldLease has its connection until released");
        let id = self.lease.id().to_string();
        match self.answered(conn.request(&["RENEW", &id])).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_connection() => Err(self.lost_on_failure(e)),
            Err(e) => Err(e),
        }
    }

    /// Lets the key go (`RELEASE`). `Err` (`lost`, the server's text) when
    /// the lease had been lost before, or the connection dropped.
    pub async fn release(mut self) -> Result<(), Error> {
        let conn = self
            .conn
            .take()
            .expect("a HeldLease has its connection until released");
        if conn.went_silent() || self.lease.shared.past_deadline() {
            // Lost by silence: the server may not read this connection for
            // a long while, and a late `OK` must not turn the loss into a
            // success. Dropping the connection closes it, which lets the
            // key go whenever the server reads again.
            return Err(self.lost_on_failure(Error::new(ErrorKind::Lost, "")));
        }
        let id = self.lease.id().to_string();
        let reply = self.answered(conn.request(&["RELEASE", &id])).await;
        conn.renew_for(None);
        conn.unregister();
        match reply {
            Ok(_) => {
                self.store.give_back(conn);
                Ok(())
            }
            Err(e) if e.is_connection() => Err(self.lost_on_failure(e)),
            Err(e) => {
                self.store.give_back(conn);
                Err(e)
            }
        }
    }

    /// The reply of `request`, or a time-out error when the server answers
    /// nothing for a ttl (the lease is lost by then).
    async fn answered(
        &self,
        request: impl std::future::Future<Output = Result<Value, Error>>,
    ) -> Result<Value, Error> {
        let patience = self.ttl.max(MIN_PATIENCE);
        tokio::time::timeout(patience, request)
            .await
            .unwrap_or_else(|_| {
                let e = io::Error::new(io::ErrorKind::TimedOut, "nothing within the ttl");
                Err(texts::connection_closed(e))
            })
    }

    /// The connection failed under the lease: its task marked it lost (or
    /// the server answered nothing for a ttl, which loses it too).
    fn lost_on_failure(&self, e: Error) -> Error {
        if let Some(lost) = self.lease.shared.lost_error() {
            return lost.clone();
        }
        let (lock, key) = (self.lease.lock_name(), self.lease.key());
        let lost = match e.io_error().map(io::Error::kind) {
            Some(io::ErrorKind::TimedOut) => texts::lost_silent(lock, key, self.ttl),
            _ => {
                let io = io::Error::other(e.to_string());
                texts::lost_connection(lock, key, io)
            }
        };
        self.lease.shared.mark_lost(lost.clone());
        lost
    }
}

impl Deref for HeldLease {
    type Target = Lease;

    fn deref(&self) -> &Lease {
        &self.lease
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // The task writes it and discards the answer; the connection is
            // reusable at once, its next command queued behind this one.
            conn.send_detached(&["RELEASE", &self.lease.id().to_string()]);
            conn.renew_for(None);
            conn.unregister();
            self.store.give_back(conn);
        }
    }
}

impl fmt::Debug for HeldLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HeldLease").field(&self.lease).finish()
    }
}
