//! The store: the public [`Store`] handle, opening locks ([`LockBuilder`]),
//! `close`, and transactions. Its shared state lives in the core below the
//! locks (`store_core.rs`); its timer, background thread and sweeps in
//! `driver.rs`.

use crate::error::{Error, ErrorKind};
use crate::heartbeat::HeartbeatState;
use crate::key::check_name;
use crate::lease::Core;
use crate::lease::LeaseState;
use crate::lock::{Fairness, Lock, LockStats};
use crate::sync::{Arc, Mutex, Ordering};
use crate::tx::{Rows, Tx};
use std::fmt;
use std::time::Duration;

/// Default `ttl`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// An embedded, in-memory store of locks. Cheap to clone; all clones are one
/// store.
#[derive(Clone)]
pub struct Store {
    pub(crate) shared: Arc<StoreShared>,
}

/// What a store's handles share: the core its locks and leases share too,
/// and the transaction table, which only the store reaches.
pub(crate) struct StoreShared {
    pub(crate) core: Arc<Core>,
    pub(crate) rows: Mutex<Rows>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    /// A new, empty store.
    pub fn new() -> Store {
        Store::with_core(Core::new())
    }

    /// A new, empty store whose every fence is greater than `floor`, for a
    /// store that carries on where another left off (a partition moving to
    /// another process, say) and knows the highest fence that one could
    /// have given. [`Store::new`] seeds its fences from the clock instead.
    /// Fences travel as signed 64-bit integers over the wire, so a floor
    /// should leave room below 2^63.
    pub fn with_fences_above(floor: u64) -> Store {
        Store::with_core(Core::with_floor(floor.saturating_add(1)))
    }

    fn with_core(core: Arc<Core>) -> Store {
        Store {
            shared: Arc::new(StoreShared {
                core,
                rows: Mutex::new(Rows::default()),
            }),
        }
    }

    /// A new heartbeat of this store: locks opened with it
    /// ([`LockBuilder::heartbeat`]) give leases that one
    /// [`beat`](Heartbeat::beat) renews all at once.
    pub fn heartbeat(&self) -> Heartbeat {
        Heartbeat {
            state: Arc::new(HeartbeatState::new(&self.shared.core)),
        }
    }

    /// Every lock this store knows, by name, with its counters: those with
    /// a handle open somewhere or a key in memory. A lock nobody has a
    /// handle of and whose keys are all reclaimed is forgotten (counters
    /// and all) by the store's background sweep or [`reclaim_idle`]; a
    /// name opened again starts from zero, its fences above every earlier one.
    ///
    /// [`reclaim_idle`]: Store::reclaim_idle
    pub fn locks(&self) -> Vec<(String, LockStats)> {
        let core = &self.shared.core;
        let mut all: Vec<(String, LockStats)> = core
            .known_locks()
            .into_iter()
            .map(|shared| {
                let name = shared.name.to_string();
                (name, Lock::new(core.clone(), shared, 0, 0, None).stats())
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Starts opening the lock `name` (1 to 128 ASCII letters, digits and
    /// `_ - . :`). Opening a name again gives a handle to the same keys.
    pub fn lock(&self, name: &str) -> LockBuilder<'_> {
        LockBuilder {
            store: self,
            name: name.to_owned(),
            ttl: DEFAULT_TTL,
            max_hold: None,
            heartbeat: None,
            permits: None,
            fairness: Fairness::Fifo,
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
        crate::tx::run(&self.shared.core, &self.shared.rows, f)
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
        crate::tx::run(&self.shared.core, &self.shared.rows, f)
    }

    /// Closes the store: every waiter fails `closed` at once, every held
    /// lease is lost, every later call fails `closed`. Idempotent.
    pub fn close(&self) {
        self.shared.core.close();
    }

    /// Closes the store as [`close`](Store::close) does, and answers how
    /// long from now a holder nobody could tell might still think it holds
    /// one of the leases the close ended: until the latest of their ends
    /// (ttl since the last renewal, or maxHold, whichever is first). Zero
    /// when no lease with a ttl or a maxHold was held, or the store was
    /// closed already. A lease with neither is not counted: only its signal
    /// tells its holder. A cluster node waits this long before another
    /// node may grant the keys.
    pub fn close_reporting_last_expiry(&self) -> Duration {
        self.shared.core.close()
    }

    /// Whether [`close`](Store::close) was called.
    pub fn is_closed(&self) -> bool {
        self.shared.core.closed.load(Ordering::Acquire)
    }

    /// Reclaims every idle key now (the background thread does it soon
    /// anyway) and pushes the freed memory through epoch reclamation.
    /// Answers how many keys were reclaimed.
    pub fn reclaim_idle(&self) -> usize {
        self.shared.core.sweep_all().0
    }

    /// Under loom: fires every pending timer as if its deadline had passed.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn fire_all_timers(&self) {
        // The watch first: a hold the wheel's revocations grant claims its
        // slot after this scan, so (as a lease armed on the wheel after its
        // firing began) it is not revoked by this same call.
        self.shared.core.scan_watch(u64::MAX / 2, true);
        self.shared.core.timer.fire_all();
    }

    /// Under loom: the timer's try to stop ticking, as its thread makes it
    /// after a while without holds.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn try_stop_ticking(&self) {
        let core = &self.shared.core;
        let _ = core.timer.try_stop_ticking(|| Some(core.watch.park_all()));
    }

    /// Under loom: whether the timer scans the maxHold watch.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn is_ticking(&self) -> bool {
        self.shared.core.timer.is_ticking()
    }

    /// Under loom: a reading of the store's logical clock, in ms (which
    /// moves it on, as every reading does).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn clock_ms(&self) -> u64 {
        self.shared.core.clock.now_ms()
    }

    /// Under loom: how many timers are pending on the wheel.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn pending_timers(&self) -> usize {
        self.shared.core.timer.pending()
    }

    /// Under loom: the timer thread's plan of its sleep (when it would
    /// wake; `None`: never), made as the thread makes it before it waits,
    /// with only the leases' deadlines pending.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn plan_timer_sleep(&self) -> Option<u64> {
        self.shared.core.timer.plan_sleep_on_leases()
    }

    /// Under loom: how many times the timer thread was woken.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn timer_wakes(&self) -> usize {
        self.shared.core.timer.wakes()
    }

    /// Under loom: how many leases the timer's registry of timed leases
    /// lists, over all its shards.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn timed_leases(&self) -> usize {
        self.shared.core.timer.timed_len()
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// When a group of handle-style leases was last heard of; from
/// [`Store::heartbeat`]. Locks opened with it ([`LockBuilder::heartbeat`])
/// give leases that run out `ttl` after the later of their own last
/// renewal and the heartbeat's last [`beat`](Heartbeat::beat): one beat
/// renews them all, whatever their number (a server renewing a
/// connection's leases whenever it hears from it). Cheap to clone: clones
/// beat for the same group.
///
/// A beat only moves the time forward and never revives a lease that
/// ended; one that lands after a lease's deadline but before its timer
/// fired keeps it (nobody else was granted its key in between).
#[derive(Clone)]
pub struct Heartbeat {
    pub(crate) state: Arc<HeartbeatState<LeaseState>>,
}

impl Heartbeat {
    /// The holder was heard from: every lease of this heartbeat counts its
    /// ttl from now. One clock reading and one atomic max.
    pub fn beat(&self) {
        self.state.beat();
    }

    /// Whether its store was closed (its leases are all lost: beating it
    /// is no use any more).
    pub fn is_store_closed(&self) -> bool {
        self.state.is_store_closed()
    }

    /// Under loom: the last beat's clock reading.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn heard_ms(&self) -> u64 {
        self.state.heard_ms()
    }
}

impl fmt::Debug for Heartbeat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Heartbeat")
            .field("heard_ms", &self.state.heard_ms())
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
    heartbeat: Option<Heartbeat>,
    permits: Option<u32>,
    fairness: Fairness,
}

/// Most permits a key of a lock may have.
pub const MAX_PERMITS: u32 = 1_000_000;

impl LockBuilder<'_> {
    /// How many permits each key has (1 to 1,000,000; a lock opened
    /// without a count has the one it was first opened with, else 1: a
    /// keyed mutex). A hold takes one unless it asks for more
    /// ([`KeyHold::permits`](crate::KeyHold::permits)) or for all
    /// ([`exclusive`](crate::KeyHold::exclusive)): a semaphore per key, or
    /// a read-write lock whose readers take one and writers all. The count
    /// belongs to the name: opening it again on this store with another
    /// count fails `invalid` while the name is known (a handle open, or a
    /// key in memory).
    pub fn permits(mut self, permits: u32) -> Self {
        self.permits = Some(permits);
        self
    }

    /// Every handle-style lease taken through the lock also counts its ttl
    /// from `heartbeat`'s last beat: one beat renews them all (a server
    /// renewing a connection's leases whenever it hears from it). The
    /// heartbeat must be this store's.
    pub fn heartbeat(mut self, heartbeat: &Heartbeat) -> Self {
        self.heartbeat = Some(heartbeat.clone());
        self
    }

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

    /// How this handle's lines are served: [`Fairness::Fifo`] (the default)
    /// or [`Fairness::BoundedBypass`]. It belongs to the handle, as its ttl
    /// does: the bound is its waiters'. A waiter that came through a
    /// bounded handle may be bypassed by anyone for up to its bound; one
    /// that came through a FIFO handle is handed the key when it is first
    /// in line, never bypassed there (behind a bounded waiter, it waits as
    /// long as that waiter does, bypasses included).
    pub fn fairness(mut self, fairness: Fairness) -> Self {
        self.fairness = fairness;
        self
    }

    /// Opens the lock only if the store knows it now (a handle open or a
    /// key in memory), with its own count of permits; `Ok(None)` otherwise.
    /// For a look at a lock that must not make it (and so fix its count).
    pub fn open_if_known(self) -> Result<Option<Lock>, Error> {
        if self.permits.is_some() {
            let what = "open_if_known takes the lock's own count: give no permits";
            return Err(Error::new(ErrorKind::Invalid, what).for_lock(&self.name));
        }
        self.opened(false)
    }

    /// Opens the lock, made if the store does not know it yet.
    ///
    /// Fails `closed` once the store is closed, and `invalid` for a bad name
    /// (1 to 128 ASCII letters, digits and `_ - . :`), a `ttl` or `max_hold`
    /// below 1 ms, a count of permits outside 1 to [`MAX_PERMITS`], or a
    /// count other than the one a known lock of that name already has.
    pub fn open(self) -> Result<Lock, Error> {
        self.opened(true).map(|lock| lock.expect("made if unknown"))
    }

    /// Opens the lock, made if unknown when `make`.
    fn opened(self, make: bool) -> Result<Option<Lock>, Error> {
        let core = &self.store.shared.core;
        if core.closed.load(Ordering::Acquire) {
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
        let heartbeat = self.heartbeat.map(|h| h.state);
        if heartbeat
            .as_ref()
            .is_some_and(|h| !Arc::ptr_eq(&h.store, core))
        {
            let what = "a heartbeat of another store";
            return Err(Error::new(ErrorKind::Invalid, what).for_lock(&self.name));
        }
        if let Some(n) = self.permits.filter(|n| !(1..=MAX_PERMITS).contains(n)) {
            let what = format!("a lock has 1 to {MAX_PERMITS} permits, not {n}");
            return Err(Error::new(ErrorKind::Invalid, what).for_lock(&self.name));
        }
        let lock_shared = if make {
            core.lock_named(&self.name, self.permits).map_err(|known| {
                let asked = self.permits.unwrap_or(1);
                let what = format!("opened with {known} permits, not {asked}");
                Error::new(ErrorKind::Invalid, what).for_lock(&self.name)
            })?
        } else {
            let Some(known) = core.lock_known(&self.name) else {
                return Ok(None);
            };
            known
        };
        Ok(Some(
            Lock::new(core.clone(), lock_shared, ttl_ms, max_hold_ms, heartbeat)
                .with_fairness(self.fairness),
        ))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn timed(store: &Store) -> usize {
        store.shared.core.timer.timed_len()
    }

    #[test]
    fn the_timed_registry_lists_a_timed_lease_only_while_it_is_active() {
        let store = Store::new();
        let jobs = store
            .lock("jobs")
            .max_hold(Duration::from_secs(60))
            .open()
            .unwrap();
        // A closure hold is timed by the maxHold watch until its signal is
        // asked for, which moves its timing to the wheel.
        assert_eq!(jobs.hold("a", |_| timed(&store)).unwrap(), 0);
        let moved = jobs.hold("a", |lease| {
            let _signal = lease.signal();
            timed(&store)
        });
        assert_eq!(moved.unwrap(), 1);
        assert_eq!(timed(&store), 0);
        let lease = jobs.acquire("b").unwrap();
        assert_eq!(timed(&store), 1);
        lease.release().unwrap();
        assert_eq!(timed(&store), 0);
        // A plain hold without maxHold never touches it.
        let plain = store.lock("plain").open().unwrap();
        assert_eq!(plain.hold("a", |_| timed(&store)).unwrap(), 0);
        // A lease made on another thread (another shard of the timer)
        // and released here leaves its shard's registry.
        let theirs = std::thread::scope(|s| s.spawn(|| jobs.acquire("c").unwrap()).join());
        assert_eq!(timed(&store), 1);
        theirs.unwrap().release().unwrap();
        assert_eq!(timed(&store), 0);
    }

    /// A thread's page of the maxHold watch is given up when the thread
    /// ends, and the next thread adopts it: threads come and go, the
    /// pages stay as many as the threads alive at once.
    #[test]
    fn an_ended_threads_watch_page_is_adopted() {
        let store = Store::new();
        let jobs = store
            .lock("jobs")
            .max_hold(Duration::from_secs(60))
            .open()
            .unwrap();
        for _ in 0..50 {
            let jobs = jobs.clone();
            std::thread::spawn(move || jobs.hold("a", |_| ()).unwrap())
                .join()
                .unwrap();
        }
        assert_eq!(store.shared.core.watch.page_count(), 1);
    }

    /// The timer stops ticking once no hold ran for a while, and a hold
    /// claiming a parked slot starts it again: that hold is still revoked
    /// at its maxHold.
    #[test]
    fn the_timer_stops_ticking_when_idle_and_a_hold_starts_it_again() {
        let store = Store::new();
        let core = &store.shared.core;
        let jobs = store
            .lock("jobs")
            .max_hold(Duration::from_millis(50))
            .open()
            .unwrap();
        jobs.hold("a", |_| ()).unwrap();
        assert!(core.timer.is_ticking());
        let started = std::time::Instant::now();
        while core.timer.is_ticking() {
            assert!(started.elapsed() < Duration::from_secs(20), "never idle");
            std::thread::sleep(Duration::from_millis(10));
        }
        let r = jobs.hold("a", |lease| {
            assert!(core.timer.is_ticking());
            let started = std::time::Instant::now();
            while !lease.is_lost() {
                assert!(started.elapsed() < Duration::from_secs(20), "never revoked");
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        assert_eq!(r.unwrap_err().kind(), crate::ErrorKind::Lost);
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
