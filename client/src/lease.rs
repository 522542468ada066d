//! A lease granted by the server, and its loss signal.
//!
//! The connection's background task marks a lease lost the moment the
//! server pushes `lost` for it, or the connection drops; the [`Signal`]
//! wakes both async waiters (`aborted()`) and threads (`wait_timeout`).
//!
//! A lease also carries its local deadline: the instant by which the
//! server may have let it go because nothing this client sent was read
//! (see the connection task's module for the rule). Every look at the
//! lease (`is_lost`, `check`, the signal) compares the clock with it first,
//! so a holder whose own process was stopped past it learns the loss on
//! its first look, before any timer of the task has run.

use crate::error::Error;
use crate::texts;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// What a lease, its signals and its connection's task share.
pub(crate) struct LeaseShared {
    /// The server's id of the lease; a re-attach on another node gives it
    /// a new one there.
    id: AtomicI64,
    pub(crate) fence: u64,
    /// How many of the key's permits the lease holds.
    pub(crate) permits: u32,
    pub(crate) lock: Arc<str>,
    pub(crate) key: Box<str>,
    /// The lock's ttl, for the text of a loss by silence.
    ttl: Duration,
    /// The local deadline in nanoseconds after [`clock_base`]; `NO_DEADLINE`
    /// until the task sets one. It only moves later (`fetch_max`).
    deadline_ns: AtomicU64,
    /// Why it was lost, once it was.
    lost: OnceLock<Error>,
    /// Wakes `aborted()` futures.
    notify: Notify,
    /// Wakes threads in `wait_timeout`; the flag mirrors `lost`.
    lost_flag: Mutex<bool>,
    lost_cv: Condvar,
    /// Where the server said the lease went (a planned hand-over), until
    /// it is followed there.
    moved: Mutex<Option<Moved>>,
    /// From the first `moved` until a re-attach succeeds: a loss by
    /// silence meanwhile is a failure to follow (`reattach_failed`).
    moving: AtomicBool,
    /// What follows the lease when it moves (only for a lease held with
    /// a secret, which alone can follow).
    on_moved: Mutex<Option<OnMoved>>,
}

/// A node's word that a lease moved: `["moved", lease, slot, addr]`, or
/// `-MOVED slot addr` to its `RENEW` or `RELEASE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Moved {
    pub(crate) slot: u16,
    pub(crate) addr: String,
}

/// Called (from the connection's task) when the lease is told it moved:
/// starts its re-attach. Type-erased so this module needs no connection.
pub(crate) type OnMoved = Arc<dyn Fn(&Arc<LeaseShared>) + Send + Sync>;

const NO_DEADLINE: u64 = u64::MAX;

/// The instant deadlines are counted from (the first time one is needed).
fn clock_base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// `at` as nanoseconds after the base; an instant before it counts as the
/// base itself (earlier is never later than the truth).
fn to_ns(at: Instant) -> u64 {
    let ns = at.saturating_duration_since(clock_base()).as_nanos();
    u64::try_from(ns).unwrap_or(NO_DEADLINE - 1)
}

impl LeaseShared {
    pub(crate) fn new(
        id: i64,
        fence: u64,
        permits: u32,
        lock: Arc<str>,
        key: Box<str>,
        ttl: Duration,
    ) -> Arc<LeaseShared> {
        Arc::new(LeaseShared {
            id: AtomicI64::new(id),
            fence,
            permits,
            lock,
            key,
            ttl,
            deadline_ns: AtomicU64::new(NO_DEADLINE),
            lost: OnceLock::new(),
            notify: Notify::new(),
            lost_flag: Mutex::new(false),
            lost_cv: Condvar::new(),
            moved: Mutex::new(None),
            moving: AtomicBool::new(false),
            on_moved: Mutex::new(None),
        })
    }

    /// The lock's ttl.
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The server's id of the lease now.
    pub(crate) fn id(&self) -> i64 {
        // Relaxed: set by a re-attach before the lease is registered on its
        // new connection (under that connection's lock) and used there.
        self.id.load(Ordering::Relaxed)
    }

    /// What to call when the lease is told it moved; `None` forgets it.
    pub(crate) fn set_on_moved(&self, on_moved: Option<OnMoved>) {
        *self.on_moved.lock().unwrap_or_else(|p| p.into_inner()) = on_moved;
    }

    /// The lease's node handed it over to `to`: remembered for whoever
    /// follows it, and its follower started.
    pub(crate) fn moved(self: &Arc<Self>, to: Moved) {
        // Release: a loss by silence seen after this reads as a failure
        // to follow.
        self.moving.store(true, Ordering::Release);
        *self.moved.lock().unwrap_or_else(|p| p.into_inner()) = Some(to);
        let on_moved = self
            .on_moved
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(on_moved) = on_moved {
            on_moved(self);
        }
    }

    /// Whether it was told it moved and is not re-attached yet.
    pub(crate) fn is_moving(&self) -> bool {
        self.moving.load(Ordering::Acquire)
    }

    /// Where the lease was told it went, if not followed yet (taken).
    pub(crate) fn take_moved(&self) -> Option<Moved> {
        self.moved.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Re-attached under `id` on its new node.
    pub(crate) fn reattached(&self, id: i64) {
        self.id.store(id, Ordering::Relaxed);
        self.moving.store(false, Ordering::Release);
    }

    /// Sets the first deadline, or moves it to `at` if that is later and
    /// the current one has not passed: a reply that arrives after the
    /// deadline proves nothing (see the connection task's module).
    pub(crate) fn extend_deadline(&self, at: Instant) {
        // Relaxed: the number is the whole message (no other data is
        // published through it), and `fetch_max` keeps it monotonic
        // whatever order two updates land in.
        let ns = to_ns(at);
        let now = to_ns(Instant::now());
        let mut current = self.deadline_ns.load(Ordering::Relaxed);
        loop {
            let moved = match current {
                NO_DEADLINE => ns,
                d if d <= now || ns <= d => return,
                _ => ns,
            };
            match self.deadline_ns.compare_exchange_weak(
                current,
                moved,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// The local deadline, once set.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self.deadline_ns.load(Ordering::Relaxed) {
            NO_DEADLINE => None,
            ns => Some(clock_base() + Duration::from_nanos(ns)),
        }
    }

    /// Whether the local deadline has passed (the lease is lost by silence).
    pub(crate) fn past_deadline(&self) -> bool {
        self.deadline().is_some_and(|at| Instant::now() >= at)
    }

    /// Marks the lease lost by silence if its deadline has passed; answers
    /// whether it is lost (for any reason).
    pub(crate) fn check_clock(&self) -> bool {
        if self.lost.get().is_some() {
            return true;
        }
        if !self.past_deadline() {
            return false;
        }
        // Acquire: pairs with `moved`'s Release.
        let why = if self.moving.load(Ordering::Acquire) {
            texts::reattach_failed(&self.lock, &self.key)
        } else {
            texts::lost_silent(&self.lock, &self.key, self.ttl)
        };
        self.mark_lost(why);
        true
    }

    /// Marks the lease lost (the first reason wins) and wakes every waiter.
    pub(crate) fn mark_lost(&self, why: Error) {
        if self.lost.set(why).is_err() {
            return;
        }
        *self.lost_flag.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.lost_cv.notify_all();
        self.notify.notify_waiters();
    }

    /// Why the lease was lost, once it was (the clock consulted first).
    pub(crate) fn lost_error(&self) -> Option<&Error> {
        self.check_clock();
        self.lost.get()
    }
}

/// The lease a `hold` closure runs under (and that a
/// [`HeldLease`](crate::HeldLease) derefs to).
pub struct Lease {
    pub(crate) shared: Arc<LeaseShared>,
}

impl Lease {
    /// The fencing token: greater than every earlier grant's of this key.
    pub fn fence(&self) -> u64 {
        self.shared.fence
    }

    /// How many of the key's permits this lease holds (1 unless the hold
    /// asked for more, or for all with `exclusive()`).
    pub fn permits(&self) -> u32 {
        self.shared.permits
    }

    /// The key, as text.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// The lock's name.
    pub fn lock_name(&self) -> &str {
        &self.shared.lock
    }

    /// The server's id of this lease (what `RENEW` and `RELEASE` name);
    /// after a planned hand-over, its id on the node it followed.
    pub fn id(&self) -> i64 {
        self.shared.id()
    }

    /// Whether the lease was lost: the server reported it revoked, run out
    /// or its store closed, or the connection dropped.
    pub fn is_lost(&self) -> bool {
        self.shared.check_clock()
    }

    /// `Err` of kind `Lost` once the lease is lost, with the server's text.
    pub fn check(&self) -> Result<(), Error> {
        match self.shared.lost_error() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// A handle that aborts when the lease is lost.
    pub fn signal(&self) -> Signal {
        Signal {
            shared: self.shared.clone(),
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("lock", &self.shared.lock)
            .field("key", &self.shared.key)
            .field("fence", &self.shared.fence)
            .field("permits", &self.shared.permits)
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// A lease's loss signal: cheap to clone, usable from any task or thread,
/// alive after the lease ended. It aborts only on a loss, never on a
/// normal release.
#[derive(Clone)]
pub struct Signal {
    shared: Arc<LeaseShared>,
}

impl Signal {
    /// Whether the lease was lost.
    pub fn is_aborted(&self) -> bool {
        self.shared.check_clock()
    }

    /// Why the lease was lost (the server's text), once it was.
    pub fn lost_error(&self) -> Option<Error> {
        self.shared.lost_error().cloned()
    }

    /// Resolves once the lease is lost (pending forever otherwise).
    pub fn aborted(&self) -> impl Future<Output = ()> + Send + 'static {
        let shared = self.shared.clone();
        async move {
            loop {
                let notified = shared.notify.notified();
                tokio::pin!(notified);
                // Registered before the check, so a loss between the two
                // still wakes us.
                notified.as_mut().enable();
                if shared.check_clock() {
                    return;
                }
                // The connection's task marks the loss at the deadline;
                // waking here too keeps this future exact on its own.
                match shared.deadline() {
                    Some(at) => {
                        let at = tokio::time::Instant::from_std(at);
                        let _ = tokio::time::timeout_at(at, notified).await;
                    }
                    None => notified.await,
                }
            }
        }
    }

    /// Blocks the thread until the lease is lost or `timeout` passes;
    /// answers whether it was lost. For work handed to a thread.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        let mut flag = self
            .shared
            .lost_flag
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        loop {
            if *flag {
                return true;
            }
            // The deadline may fall first: wake for it and look at the clock.
            let wake = self.shared.deadline().map_or(until, |d| d.min(until));
            let now = Instant::now();
            if now >= wake {
                drop(flag);
                return self.shared.check_clock();
            }
            flag = self
                .shared
                .lost_cv
                .wait_timeout(flag, wake - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signal")
            .field("aborted", &self.is_aborted())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdline::ErrorKind;

    fn lease() -> Lease {
        Lease {
            shared: LeaseShared::new(1, 7, 1, "l".into(), "k".into(), Duration::from_secs(2)),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_loss_wakes_futures_and_threads_once() {
        let lease = lease();
        let signal = lease.signal();
        assert!(!signal.is_aborted());
        assert!(lease.check().is_ok());
        let waiting = tokio::spawn(signal.aborted());
        let thread_signal = signal.clone();
        let thread =
            std::thread::spawn(move || thread_signal.wait_timeout(Duration::from_secs(30)));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        lease.shared.mark_lost(Error::new(ErrorKind::Lost, "first"));
        lease
            .shared
            .mark_lost(Error::new(ErrorKind::Lost, "second"));
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("aborted() resolves")
            .unwrap();
        assert!(thread.join().unwrap());
        assert!(lease.is_lost() && signal.is_aborted());
        assert_eq!(lease.check().unwrap_err().to_string(), "first");
        // Resolves at once after the fact, too.
        signal.aborted().await;
    }

    #[test]
    fn the_first_look_past_the_deadline_answers_lost() {
        let lease = lease();
        lease
            .shared
            .extend_deadline(Instant::now() + Duration::from_millis(50));
        assert!(!lease.is_lost());
        // No task runs here: only the clock can tell.
        std::thread::sleep(Duration::from_millis(80));
        let lost = lease.check().unwrap_err();
        assert_eq!(lost.kind(), holdline::ErrorKind::Lost);
        assert_eq!(
            lost.to_string(),
            "lock l: key \"k\": the lease was lost: the server answered nothing for its ttl (2s)"
        );
        assert!(lease.signal().is_aborted());
    }

    #[test]
    fn wait_timeout_wakes_at_the_deadline() {
        let lease = lease();
        let signal = lease.signal();
        lease
            .shared
            .extend_deadline(Instant::now() + Duration::from_millis(50));
        let started = Instant::now();
        assert!(signal.wait_timeout(Duration::from_secs(30)));
        assert!(started.elapsed() < Duration::from_secs(20));
        // A later deadline moves it on; an earlier one does not.
        let lease = self::lease();
        let far = Instant::now() + Duration::from_secs(60);
        lease.shared.extend_deadline(far);
        lease.shared.extend_deadline(Instant::now());
        assert!(!lease.is_lost());
        // A passed deadline is final: a late reply moves nothing.
        let lease = self::lease();
        lease.shared.extend_deadline(Instant::now());
        std::thread::sleep(Duration::from_millis(5));
        lease.shared.extend_deadline(far);
        assert!(lease.is_lost());
    }

    #[test]
    fn without_a_loss_wait_timeout_answers_false() {
        let lease = lease();
        assert!(!lease.signal().wait_timeout(Duration::from_millis(20)));
    }
}
