//! Holding as a task: [`Lock::hold_async`], [`Lock::acquire_async`] and
//! their [`KeyHold`] forms. The fast path is the threads' own; past it a
//! task waits in the same line through a [`LineWait`], and its closure's
//! future is polled with the hold listed on the polling thread.
//!
//! A release hands the key to the head of its line, and a task granted so
//! is queued by its runtime on the releasing thread, where the releaser
//! runs on: a releaser that went on to take free keys would keep the
//! granted key held by a task that is not running, and other threads'
//! tasks asking for it would wait behind it. So a task whose thread has
//! granted a waiting task since its last pending wait yields once before
//! it takes a free key (not a held one: its wait lets the granted task run
//! anyway). [`Lock::take_fast`] decides; the slow path yields.

use crate::ctx;
use crate::error::Error;
use crate::key::{IntoKey, KeyBuf};
use crate::lease::{HeldLease, Lease};
use crate::line_wait::LineWait;
use crate::lock::{ms, Grant, KeyHold, Lock, Mode, DEFAULT_WAIT_MS};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

impl Lock {
    /// Holds `key` while the future `f` makes runs, waiting in line (up to
    /// 10 s) without blocking the thread: the async [`hold`](Lock::hold).
    /// Same rules: FIFO with threads, `in use`, `limit`, `closed`, `lost`,
    /// and `invalid` for a bad key or a hold of a key inside the future of
    /// a hold of that key.
    /// Dropping the returned future leaves the line, or lets the key go.
    pub async fn hold_async<'k, K: IntoKey<'k>, R>(
        &self,
        key: K,
        f: impl AsyncFnOnce(&Lease<'_>) -> R,
    ) -> Result<R, Error> {
        self.hold_async_mode(key, DEFAULT_WAIT_MS, 1, f).await
    }

    /// The body of every async hold: `key`, waiting up to `wait_ms`, for
    /// `want` permits. It tries [`take_fast`] first,
    /// whose answer is a pointer: see there why the task's hot path must
    /// not carry a whole [`Fast`](crate::lock::Fast). The key comes as the
    /// caller's reference, and its [`KeyRef`](crate::key::KeyRef) is made here, in registers: a
    /// `KeyRef` made by the caller was stored field by field into the
    /// future and read back with wider loads, which stalled every hold.
    ///
    /// [`take_fast`]: Lock::take_fast
    async fn hold_async_mode<'k, K: IntoKey<'k>, R>(
        &self,
        key: K,
        wait_ms: u64,
        want: u32,
        f: impl AsyncFnOnce(&Lease<'_>) -> R,
    ) -> Result<R, Error> {
        let mut buf = KeyBuf::new();
        let text = key.into_key().text(&mut buf);
        let hash = self.shared.table.hash(text);
        let grant = match self.take_fast(text, hash, want) {
            Some(taken) => Grant::of_taken(taken, want),
            None => {
                self.wait_in_line(text, hash, Mode::Wait(wait_ms), want)
                    .await?
            }
        };
        let lease = self.closure_lease(text, grant);
        let r = Listed {
            inner: f(&lease),
            lock: self.shared.id(),
            hash,
            key: text,
        }
        .await;
        match lease.end() {
            Ok(()) => Ok(r),
            Err(loss) => Err(loss.error_for(&self.shared.name, text)),
        }
    }

    /// A handle-style lease on `key`, waiting (up to 10 s) without blocking
    /// the thread: the async [`acquire`](Lock::acquire), and like it **runs
    /// out `ttl` after its last renewal** (in process, use
    /// [`lock_async`](Lock::lock_async)). Fails as it does
    /// (`in use` past the wait, `limit`, `closed`, `invalid`).
    pub fn acquire_async<'a, K: IntoKey<'a>>(
        &'a self,
        key: K,
    ) -> impl Future<Output = Result<HeldLease, Error>> + Send + 'a {
        self.key(key.into_key()).acquire_async()
    }

    /// The grant of `want` permits of `text`, waited for as a task (`mode`
    /// waits, so a wait ends granted or with an error).
    pub(crate) async fn grant_async(
        &self,
        text: &str,
        hash: u64,
        mode: Mode,
        want: u32,
    ) -> Result<Grant, Error> {
        match self.take_fast(text, hash, want) {
            Some(taken) => Ok(Grant::of_taken(taken, want)),
            None => self.wait_in_line(text, hash, mode, want).await,
        }
    }

    /// Past [`take_fast`](Lock::take_fast): the refusals, then the line,
    /// whose entry takes the key itself if it came free meanwhile (so the
    /// fast path's lookup and CAS are not made twice).
    async fn wait_in_line(
        &self,
        text: &str,
        hash: u64,
        mode: Mode,
        want: u32,
    ) -> Result<Grant, Error> {
        if ctx::take_yield_owed() {
            // `take_fast` found the key free but owed the task that a
            // release on this thread granted a turn first; no second yield
            // after it (the line's entry takes the key if still free), so
            // a task whose thread keeps granting others still gets on.
            YieldOnce(false).await;
        }
        let admitted = self.admitted(text, hash, mode)?;
        debug_assert!(admitted, "only a Try is answered None, and a task waits");
        let waited = LineWait::new(self, text, hash, mode, want).await?;
        Ok(waited.expect("a waiting hold grants"))
    }
}

impl<'l> KeyHold<'l> {
    /// Holds the key while the future `f` makes runs, waiting up to `wait`
    /// without blocking the thread; see [`Lock::hold_async`]. Fails as it
    /// does, and `invalid` for more permits than the lock has.
    pub async fn hold_async<R>(self, f: impl AsyncFnOnce(&Lease<'_>) -> R) -> Result<R, Error> {
        let want = self.asked()?;
        self.lock
            .hold_async_mode(&self.key, ms(self.wait), want, f)
            .await
    }

    /// A handle-style lease, waiting up to `wait` without blocking the
    /// thread; see [`Lock::acquire_async`]. Fails as it does, and
    /// `invalid` for more permits than the lock has.
    // Not an `async fn`: the signature promises `Send`, which an `async fn`
    // would leave to inference (and to breaking silently).
    #[allow(clippy::manual_async_fn)]
    pub fn acquire_async(self) -> impl Future<Output = Result<HeldLease, Error>> + Send + 'l {
        async move {
            let lock = self.lock;
            let want = self.asked()?;
            let mut buf = KeyBuf::new();
            let text = self.key.text(&mut buf);
            let hash = lock.shared.table.hash(text);
            let grant = lock
                .grant_async(text, hash, Mode::Wait(ms(self.wait)), want)
                .await?;
            Ok(lock.held_lease(text, grant))
        }
    }
}

/// Pending once, waking itself: the task goes to the back of its
/// runtime's queue, behind the tasks a release just granted.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Polls a hold's future with the hold listed in the polling thread's
/// context, so a hold of the same key made inside it (async or blocking)
/// is refused at once, as it is for a thread. Listing per poll, not for
/// the whole hold, because other tasks run on the thread between polls.
struct Listed<'k, F> {
    inner: F,
    lock: usize,
    hash: u64,
    key: &'k str,
}

impl<F: Future> Future for Listed<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `inner` is structurally pinned: never moved out, and
        // dropped in place with the wrapper.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: the guard is dropped before the poll returns (unwinding
        // too), and `key` outlives the poll.
        let _listed = unsafe { ctx::list_hold(this.lock, this.hash, this.key) };
        // SAFETY: see above: `inner` is pinned with `self`.
        unsafe { Pin::new_unchecked(&mut this.inner) }.poll(cx)
    }
}
