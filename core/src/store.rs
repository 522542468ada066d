//! The store: its locks, its timer wheel and the background thread that
//! drives it, idle-key sweeps, `close`, and the transaction table.
//!
//! The background thread starts on first need (a timer, or a key created),
//! sleeps on a condition variable until the next deadline or sweep, and
//! sleeps without a timeout, costing nothing, when neither is pending. It
//! keeps only a weak reference to the store, so dropping the last handle
//! ends it.
//!
//! Sweeps: creating a key asks for one; it runs `SWEEP_MIN_MS` later and
//! repeats, backing off to `SWEEP_MAX_MS`, while any key is live, so a key
//! that goes idle is reclaimed within about a second, and a store whose keys
//! are all gone stops sweeping.

use crate::error::{Error, ErrorKind};
use crate::key::check_name;
use crate::lease::{LeaseState, SignalHub};
use crate::lock::{Lock, LockShared};
use crate::sync::{
    downgrade, lock, upgrade, Arc, AtomicBool, Clock, Condvar, Mutex, Ordering, Weak,
};
use crate::timer::{TimerKey, Wheel};
use crate::tx::{Rows, Tx};
use crossbeam_epoch as epoch;
use std::collections::HashMap;
use std::fmt;
use std::task::Waker;
use std::time::Duration;

const SWEEP_MIN_MS: u64 = 50;
const SWEEP_MAX_MS: u64 = 1000;
/// Default `ttl`.
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// An embedded, in-memory store of locks. Cheap to clone; all clones are one
/// store.
#[derive(Clone)]
pub struct Store {
    pub(crate) shared: Arc<StoreShared>,
}

pub(crate) struct StoreShared {
    pub(crate) closed: AtomicBool,
    pub(crate) signals: SignalHub,
    pub(crate) timer: Arc<TimerShared>,
    pub(crate) clock: Arc<Clock>,
    fence_floor: u64,
    locks: Mutex<HashMap<Box<str>, Arc<LockShared>>>,
    pub(crate) rows: Mutex<Rows>,
    sweep_wanted: AtomicBool,
}

pub(crate) struct TimerShared {
    state: Mutex<TimerState>,
    cv: Condvar,
}

/// What a wheel entry does when it comes due.
pub(crate) enum Due {
    /// A lease reaches its maxHold or ttl (or must be re-armed: renewed).
    Lease(Arc<LeaseState>),
    /// A waiting task's deadline: wake it, and it leaves the line.
    Wake(Waker),
}

struct TimerState {
    wheel: Wheel<Due>,
    driver_started: bool,
    shutdown: bool,
    /// While the driver sleeps: when it will wake on its own (`u64::MAX`:
    /// never). 0 while it is awake (it re-reads the wheel before sleeping).
    sleeping_until: u64,
    sweep_at: Option<u64>,
    sweep_delay: u64,
    /// The timed leases now active, by their record's address, so
    /// `Lock::inspect` can tell how long a key has been held and how long
    /// its lease has left. Kept beside the wheel so that a lease joins and
    /// leaves it under the wheel lock it takes anyway (a hold with no timer
    /// never touches it). An entry leaves before its grant is let go, so a
    /// record's entry always names its current grant, if any.
    timed: HashMap<usize, (u64, Weak<LeaseState>)>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    /// A new, empty store.
    pub fn new() -> Store {
        let clock = Arc::new(Clock::new());
        Store {
            shared: Arc::new(StoreShared {
                closed: AtomicBool::new(false),
                signals: SignalHub::new(),
                timer: Arc::new(TimerShared {
                    state: Mutex::new(TimerState {
                        wheel: Wheel::new(),
                        driver_started: false,
                        shutdown: false,
                        sleeping_until: 0,
                        sweep_at: None,
                        sweep_delay: SWEEP_MIN_MS,
                        timed: HashMap::new(),
                    }),
                    cv: Condvar::new(),
                }),
                clock,
                fence_floor: crate::sync::next_store_fence_floor(),
                locks: Mutex::new(HashMap::new()),
                rows: Mutex::new(Rows::default()),
                sweep_wanted: AtomicBool::new(false),
            }),
        }
    }

    /// Starts opening the lock `name` (1 to 128 ASCII letters, digits and
    /// `_ - . :`). Opening a name again gives a handle to the same keys.
    pub fn lock(&self, name: &str) -> LockBuilder<'_> {
        LockBuilder {
            store: self,
            name: name.to_owned(),
            ttl: DEFAULT_TTL,
            max_hold: None,
        }
    }

    /// Runs `f` as the store's one writer over its table (see [`Tx`]):
    /// transactions of one store run one at a time.
    ///
    /// **Commit:** when `f` answers `Ok(v)`, its writes become visible
    /// together and `tx` answers `Ok(v)`, unless a fenced write's lease was
    /// lost meanwhile (then `lost`, and nothing is written).
    /// **Rollback:** when `f` answers `Err(e)` (or panics), none of its
    /// writes are kept and `tx` answers `e` unchanged (or the panic goes on
    /// unwinding; the store stays usable).
    ///
    /// To end a transaction with an error of your own, use
    /// [`tx_with`](Store::tx_with). Fails `closed` after
    /// [`close`](Store::close), and `invalid` inside another transaction.
    /// A blocking `hold` inside `f` fails `invalid` (hold first, then begin
    /// the transaction); `try_hold` is allowed.
    ///
    /// ```
    /// use holdline::Store;
    ///
    /// let store = Store::new();
    /// let n = store.tx(|tx| {
    ///     tx.put("visits", "1");
    ///     Ok(1)
    /// })?;
    /// assert_eq!(n, 1);
    /// store.tx(|tx| {
    ///     assert_eq!(tx.get("visits"), Some(&b"1"[..]));
    ///     Ok(())
    /// })?;
    /// # Ok::<(), holdline::Error>(())
    /// ```
    pub fn tx<R>(&self, f: impl FnOnce(&mut Tx<'_>) -> Result<R, Error>) -> Result<R, Error> {
        crate::tx::run(self, f)
    }

    /// [`tx`](Store::tx) with the caller's own error type: any `Err` rolls
    /// the transaction back and comes back unchanged; the store's own
    /// errors (`closed`, `invalid`, a fenced write found `lost`) reach the
    /// caller converted with `E::from`.
    ///
    /// ```
    /// use holdline::Store;
    ///
    /// #[derive(Debug, PartialEq)]
    /// enum PayError {
    ///     Declined(&'static str),
    ///     Store(String),
    /// }
    /// impl From<holdline::Error> for PayError {
    ///     fn from(e: holdline::Error) -> Self {
    ///         PayError::Store(e.to_string())
    ///     }
    /// }
    ///
    /// let store = Store::new();
    /// store.tx(|tx| {
    ///     tx.put("balance", "100");
    ///     Ok(())
    /// })?;
    ///
    /// let charged: Result<(), PayError> = store.tx_with(|tx| {
    ///     tx.put("balance", "60"); // written, then rolled back
    ///     tx.put("receipt:9", "40");
    ///     Err(PayError::Declined("card declined"))
    /// });
    /// assert_eq!(charged, Err(PayError::Declined("card declined")));
    ///
    /// store.tx(|tx| {
    ///     assert_eq!(tx.get("balance"), Some(&b"100"[..]));
    ///     assert_eq!(tx.get("receipt:9"), None);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), holdline::Error>(())
    /// ```
    pub fn tx_with<R, E: From<Error>>(
        &self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        crate::tx::run(self, f)
    }

    /// Closes the store: every waiter fails `closed` at once, every held
    /// lease is lost, every later call fails `closed`. Idempotent.
    pub fn close(&self) {
        self.shared.close();
    }

    /// Whether [`close`](Store::close) was called.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Reclaims every idle key now (the background thread does it soon
    /// anyway) and pushes the freed memory through epoch reclamation.
    /// Answers how many keys were reclaimed.
    pub fn reclaim_idle(&self) -> usize {
        self.shared.sweep_all().0
    }

    /// Under loom: fires every pending timer as if its deadline had passed.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn fire_all_timers(&self) {
        let due = {
            let mut st = lock(&self.shared.timer.state);
            let mut due = Vec::new();
            st.wheel.advance(u64::MAX / 2, &mut due);
            due
        };
        for due in due {
            match due {
                Due::Lease(lease) => {
                    lease.expire(u64::MAX / 2);
                }
                Due::Wake(w) => w.wake(),
            }
        }
    }
}

impl Store {
    /// Under loom: how many timers are pending on the wheel.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn pending_timers(&self) -> usize {
        lock(&self.shared.timer.state).wheel.len()
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// Options for opening a lock; from [`Store::lock`].
#[derive(Debug)]
#[must_use = "a LockBuilder does nothing until .open()"]
pub struct LockBuilder<'s> {
    store: &'s Store,
    name: String,
    ttl: Duration,
    max_hold: Option<Duration>,
}

impl LockBuilder<'_> {
    /// How long a handle-style lease lives past its last renewal (default
    /// 10 s; at least 1 ms).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The longest any lease of this handle may be held, from its grant,
    /// however it is renewed (default: off; at least 1 ms).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// Opens the lock.
    pub fn open(self) -> Result<Lock, Error> {
        let shared = &self.store.shared;
        if shared.closed.load(Ordering::Acquire) {
            return Err(Error::closed().for_lock(&self.name));
        }
        check_name(&self.name)?;
        let ms = |d: Duration, what: &'static str| {
            if d < Duration::from_millis(1) {
                Err(Error::new(ErrorKind::Invalid, what).for_lock(&self.name))
            } else {
                Ok(d.as_millis().min(u128::from(u64::MAX / 4)) as u64)
            }
        };
        let ttl_ms = ms(self.ttl, "a ttl is at least 1ms")?;
        let max_hold_ms = match self.max_hold {
            Some(d) => ms(d, "a maxHold is at least 1ms")?,
            None => 0,
        };
        let lock_shared = lock(&shared.locks)
            .entry(self.name.as_str().into())
            .or_insert_with(|| Arc::new(LockShared::new(&self.name, shared.fence_floor)))
            .clone();
        Ok(Lock::new(shared.clone(), lock_shared, ttl_ms, max_hold_ms))
    }
}

impl StoreShared {
    pub(crate) fn id(&self) -> usize {
        self as *const StoreShared as usize
    }

    /// Puts a lease on the wheel at its expiry (if it has one).
    pub(crate) fn arm_timer(this: &Arc<Self>, lease: &Arc<LeaseState>) {
        let Some((at, _)) = lease.expiry_ms() else {
            return;
        };
        let mut st = lock(&this.timer.state);
        if st.shutdown {
            return;
        }
        let key = st.wheel.insert(Due::Lease(lease.clone()), at);
        lease.set_timer_key(Some(key));
        st.timed
            .insert(lease.record_addr(), (lease.fence, downgrade(lease)));
        Self::wake_driver(this, &mut st, at);
    }

    /// The active timed lease of the grant with `fence` on the record at
    /// `record_addr`, if that grant has one.
    pub(crate) fn timed_lease(&self, record_addr: usize, fence: u64) -> Option<Arc<LeaseState>> {
        let st = lock(&self.timer.state);
        let (f, lease) = st.timed.get(&record_addr)?;
        if *f != fence {
            return None;
        }
        upgrade(lease).filter(|l| l.is_active())
    }

    /// A timed lease ended: it leaves the registry (before its grant is let
    /// go; see `TimerState::timed`).
    fn forget_timed(st: &mut TimerState, lease: &LeaseState) {
        let addr = lease.record_addr();
        // One grant, one fence: the entry is this lease's if its fence is.
        if st.timed.get(&addr).is_some_and(|(f, _)| *f == lease.fence) {
            st.timed.remove(&addr);
        }
    }

    /// A timed lease ran out or was revoked: see [`forget_timed`](Self::forget_timed).
    pub(crate) fn forget_expired(&self, lease: &LeaseState) {
        if lease.expiry_ms().is_some() {
            Self::forget_timed(&mut lock(&self.timer.state), lease);
        }
    }

    /// Wakes `waker` at `at_us` on the store's clock (a waiting task's
    /// deadline); `None` once the store is shut down.
    pub(crate) fn arm_wake(this: &Arc<Self>, at_us: u64, waker: Waker) -> Option<TimerKey> {
        // Rounded up: the task must find its deadline passed when woken.
        let at = at_us.div_ceil(1000);
        let mut st = lock(&this.timer.state);
        if st.shutdown {
            return None;
        }
        let key = st.wheel.insert(Due::Wake(waker), at);
        Self::wake_driver(this, &mut st, at);
        Some(key)
    }

    /// Takes a waiting task's deadline off the wheel.
    pub(crate) fn cancel_wake(&self, key: TimerKey) {
        let entry = lock(&self.timer.state).wheel.cancel(key);
        // Dropped unlocked: a waker's drop may run arbitrary code.
        drop(entry);
    }

    /// Takes a finished lease's entry off the wheel.
    pub(crate) fn cancel_timer(&self, lease: &LeaseState) {
        if lease.expiry_ms().is_none() {
            return;
        }
        let entry = {
            let mut st = lock(&self.timer.state);
            let entry = lease.timer_key().and_then(|k| st.wheel.cancel(k));
            lease.set_timer_key(None);
            Self::forget_timed(&mut st, lease);
            entry
        };
        // Dropped outside the wheel lock (it is not the last reference:
        // the caller holds one).
        drop(entry);
    }

    /// A key was created: make sure a sweep will come.
    pub(crate) fn want_sweep(this: &Arc<Self>) {
        // Relaxed: a hint; the driver swaps it back under no lock. Loaded
        // first so steady creation does not write a shared line each time.
        if this.sweep_wanted.load(Ordering::Relaxed) {
            return;
        }
        this.sweep_wanted.store(true, Ordering::Relaxed);
        let mut st = lock(&this.timer.state);
        if st.shutdown {
            return;
        }
        let at = this.clock.now_ms() + SWEEP_MIN_MS;
        st.sweep_delay = SWEEP_MIN_MS;
        if st.sweep_at.is_none_or(|t| t > at) {
            st.sweep_at = Some(at);
        }
        Self::wake_driver(this, &mut st, at);
    }

    /// Starts the driver if needed, and wakes it if it sleeps past `at`.
    fn wake_driver(this: &Arc<Self>, st: &mut TimerState, at: u64) {
        if !st.driver_started {
            // Without a thread, timers and sweeps wait for the next caller
            // to try again (reclaim_idle still works by hand).
            st.driver_started = Self::spawn_driver(this);
        } else if at < st.sleeping_until {
            this.timer.cv.notify_one();
        }
    }

    #[cfg(not(loom))]
    fn spawn_driver(this: &Arc<Self>) -> bool {
        let store = Arc::downgrade(this);
        let timer = this.timer.clone();
        let clock = this.clock.clone();
        std::thread::Builder::new()
            .name("holdline-timer".into())
            .spawn(move || drive(store, timer, clock))
            .is_ok()
    }

    /// Under loom there is no clock to drive: models fire timers by hand.
    #[cfg(loom)]
    fn spawn_driver(_: &Arc<Self>) -> bool {
        true
    }

    /// Sweeps every lock; answers (reclaimed, still live).
    pub(crate) fn sweep_all(&self) -> (usize, usize) {
        let locks: Vec<Arc<LockShared>> = lock(&self.locks).values().cloned().collect();
        let mut reclaimed = 0;
        let mut live = 0;
        {
            let guard = epoch::pin();
            for l in &locks {
                reclaimed += l.table.sweep(&guard);
                live += l.table.live();
            }
        }
        // Push this thread's deferred frees to the global queue and let the
        // epoch advance past them: each flush may advance the epoch once and
        // frees a few expired bags, so a burst of garbage (a million keys'
        // worth of bucket arrays) takes a few dozen; each costs ~100 ns.
        for _ in 0..if cfg!(loom) { 4 } else { 64 } {
            epoch::pin().flush();
        }
        (reclaimed, live)
    }

    fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        // Every waiter fails `closed`. A waiter that enqueues after we pass
        // its record saw `closed` under that record's line lock, which we
        // took after setting it (see `Record::close_line`).
        let locks: Vec<Arc<LockShared>> = lock(&self.locks).values().cloned().collect();
        let mut wake = Vec::new();
        {
            let guard = epoch::pin();
            for l in &locks {
                l.table.for_each(&guard, |r| r.close_line(&mut wake));
            }
        }
        crate::record::wake_all(wake);
        self.signals.notify();
        self.signals.wake_all_aborted();
        // No more timers: leases are lost now. Entries dropped unlocked.
        let old = {
            let mut st = lock(&self.timer.state);
            st.shutdown = true;
            st.sweep_at = None;
            self.timer.cv.notify_all();
            (std::mem::take(&mut st.wheel), std::mem::take(&mut st.timed))
        };
        drop(old);
    }
}

impl Drop for StoreShared {
    fn drop(&mut self) {
        let mut st = lock(&self.timer.state);
        st.shutdown = true;
        self.timer.cv.notify_all();
    }
}

/// The background thread's loop.
#[cfg(not(loom))]
fn drive(store: std::sync::Weak<StoreShared>, timer: Arc<TimerShared>, clock: Arc<Clock>) {
    let mut due = Vec::new();
    loop {
        let Some(shared) = store.upgrade() else {
            return;
        };
        let now = clock.now_ms();
        let sweep_now = {
            let mut st = lock(&timer.state);
            if st.shutdown {
                return;
            }
            st.wheel.advance(now, &mut due);
            let sweep_now = st.sweep_at.is_some_and(|t| t <= now);
            if sweep_now {
                st.sweep_at = None;
                // Relaxed: a hint (see `want_sweep`); a creation racing
                // this store asks again, or is caught by the next sweep.
                shared.sweep_wanted.store(false, Ordering::Relaxed);
            }
            sweep_now
        };
        for due in due.drain(..) {
            let lease = match due {
                Due::Lease(lease) => lease,
                Due::Wake(w) => {
                    w.wake();
                    continue;
                }
            };
            if !lease.expire(now) {
                // Renewed since it was armed: arm it again at its new expiry,
                // unless its holder let go meanwhile (checked under the wheel
                // lock, which its cancel takes after its status CAS).
                let mut st = lock(&timer.state);
                if lease.is_active() && !st.shutdown {
                    if let Some((at, _)) = lease.expiry_ms() {
                        let key = st.wheel.insert(Due::Lease(lease.clone()), at);
                        lease.set_timer_key(Some(key));
                    }
                }
            }
        }
        if sweep_now {
            let (_, live) = shared.sweep_all();
            let mut st = lock(&timer.state);
            if live > 0 && st.sweep_at.is_none() && !st.shutdown {
                st.sweep_delay = (st.sweep_delay * 2).min(SWEEP_MAX_MS);
                st.sweep_at = Some(clock.now_ms() + st.sweep_delay);
            }
            continue;
        }
        // Nothing to do now: sleep without keeping the store alive.
        drop(shared);
        let mut st = lock(&timer.state);
        if st.shutdown {
            return;
        }
        let now = clock.now_ms();
        let next = match (st.wheel.next_deadline(), st.sweep_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match next {
            Some(at) if at <= now => continue,
            Some(at) => {
                st.sleeping_until = at;
                st = match timer.cv.wait_timeout(st, Duration::from_millis(at - now)) {
                    Ok((g, _)) => g,
                    Err(p) => p.into_inner().0,
                };
            }
            None => {
                st.sleeping_until = u64::MAX;
                st = match timer.cv.wait(st) {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
            }
        }
        st.sleeping_until = 0;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn timed(store: &Store) -> usize {
        lock(&store.shared.timer.state).timed.len()
    }

    #[test]
    fn the_timed_registry_lists_a_timed_lease_only_while_it_is_active() {
        let store = Store::new();
        let jobs = store
            .lock("jobs")
            .max_hold(Duration::from_secs(60))
            .open()
            .unwrap();
        assert_eq!(jobs.hold("a", |_| timed(&store)).unwrap(), 1);
        assert_eq!(timed(&store), 0);
        let lease = jobs.acquire("b").unwrap();
        assert_eq!(timed(&store), 1);
        lease.release().unwrap();
        assert_eq!(timed(&store), 0);
        // A plain hold without maxHold never touches it.
        let plain = store.lock("plain").open().unwrap();
        assert_eq!(plain.hold("a", |_| timed(&store)).unwrap(), 0);
    }

    #[test]
    fn a_revoked_or_expired_lease_leaves_the_timed_registry() {
        let store = Store::new();
        let short = store
            .lock("jobs")
            .max_hold(Duration::from_millis(20))
            .open()
            .unwrap();
        let err = short
            .hold("a", |lease| {
                assert!(lease.signal().wait_timeout(Duration::from_secs(20)));
            })
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Lost);
        assert_eq!(timed(&store), 0);
        let conns = store
            .lock("conns")
            .ttl(Duration::from_millis(20))
            .open()
            .unwrap();
        let lease = conns.acquire("c").unwrap();
        assert!(lease.signal().wait_timeout(Duration::from_secs(20)));
        // Ran out, not yet dropped: already gone from the registry.
        assert_eq!(timed(&store), 0);
        drop(lease);
    }

    #[test]
    fn close_empties_the_timed_registry() {
        let store = Store::new();
        let conns = store.lock("conns").open().unwrap();
        let lease = conns.acquire("c").unwrap();
        assert_eq!(timed(&store), 1);
        store.close();
        assert_eq!(timed(&store), 0);
        assert_eq!(lease.release().unwrap_err().kind(), ErrorKind::Lost);
        assert_eq!(timed(&store), 0);
    }
}
