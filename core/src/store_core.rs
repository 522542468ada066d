//! [`StoreCore`]: what a store's locks and leases share, below both: the
//! closed flag, the clock, the signal hub, the timer's [`Driver`], and the
//! per-lock states by name (which sweeps and `close` walk).
//!
//! Generic over the lease type only so that it can sit below `lease`;
//! `lease::Core` names the one instance.

use crate::driver::{Driver, Due};
use crate::hold_watch::HoldWatch;
use crate::lock_shared::LockShared;
use crate::signal_hub::{SignalHub, Watched};
use crate::sync::{
    instant_now, lock, wall_clock_ns, Arc, AtomicBool, AtomicU64, Clock, Mutex, Ordering,
};
use crossbeam_epoch as epoch;
use std::collections::HashMap;
use std::time::Duration;

/// The shared state of one store.
pub(crate) struct StoreCore<L> {
    pub(crate) closed: AtomicBool,
    pub(crate) clock: Arc<Clock>,
    pub(crate) signals: SignalHub<L>,
    pub(crate) timer: Arc<Driver<L>>,
    /// The closure holds with a maxHold now running, which the timer's
    /// thread scans (see `hold_watch`).
    pub(crate) watch: Arc<HoldWatch>,
    /// The first fence of a lock made now: raised above every fence of a
    /// lock forgotten (see `sweep_all`), so a name made again fences on
    /// from there. Only under `locks`' mutex (which orders it).
    fence_floor: AtomicU64,
    locks: Mutex<HashMap<Box<str>, Arc<LockShared>>>,
}

impl<L: Due + Watched> StoreCore<L> {
    /// A new store's core, its timer's sweeps installed.
    pub(crate) fn new() -> Arc<Self> {
        Self::with_floor(next_store_fence_floor())
    }

    /// A new store's core whose first fence is `fence_floor`.
    pub(crate) fn with_floor(fence_floor: u64) -> Arc<Self> {
        let clock = Arc::new(Clock::new());
        let core = Arc::new(StoreCore {
            closed: AtomicBool::new(false),
            clock: clock.clone(),
            signals: SignalHub::new(),
            timer: Arc::new(Driver::new(clock)),
            watch: Arc::new(HoldWatch::new()),
            fence_floor: AtomicU64::new(fence_floor),
            locks: Mutex::new(HashMap::new()),
        });
        // Weak: the timer's thread must not keep the store alive. (Under
        // loom there is no thread, and no `Weak`.)
        #[cfg(not(loom))]
        {
            let weak = Arc::downgrade(&core);
            core.timer
                .install_sweeper(Box::new(move || weak.upgrade().map(|c| c.sweep_all().1)));
            core.timer
                .install_ticked(Box::new(Ticker(Arc::downgrade(&core))));
        }
        core
    }

    /// The timer's scan of the maxHold watch at `now_ms` (every hold due,
    /// with `all_due`): answers whether a hold ran since the last scan.
    pub(crate) fn scan_watch(&self, now_ms: u64, all_due: bool) -> bool {
        let scan = self
            .watch
            .scan(now_ms, all_due, self.closed.load(Ordering::SeqCst));
        if scan.revoked > 0 {
            // Whoever waits on a lease's signal looks again.
            self.signals.notify();
        }
        scan.active
    }

    /// The state of the lock `name`, made on its first opening (or again
    /// after it was forgotten) with `permits` per key (`None`: whatever
    /// count it has, 1 if new). `Err`: the name is known with another
    /// count (answered).
    pub(crate) fn lock_named(
        &self,
        name: &str,
        permits: Option<u32>,
    ) -> Result<Arc<LockShared>, u32> {
        let mut locks = lock(&self.locks);
        if let Some(known) = locks.get(name) {
            return match permits {
                Some(n) if n != known.permits => Err(known.permits),
                _ => Ok(known.clone()),
            };
        }
        // Relaxed: written and read only under `locks`.
        let floor = self.fence_floor.load(Ordering::Relaxed);
        let made = Arc::new(LockShared::new(name, permits.unwrap_or(1), floor));
        locks.insert(name.into(), made.clone());
        drop(locks);
        // A sweep will come to forget it once nobody uses it.
        Driver::want_sweep(&self.timer);
        Ok(made)
    }

    /// The state of the lock `name` if the store knows it now (a handle
    /// open or a key in memory); never makes it.
    pub(crate) fn lock_known(&self, name: &str) -> Option<Arc<LockShared>> {
        lock(&self.locks).get(name).cloned()
    }

    /// Every lock the store knows now (a handle open or a key in memory).
    pub(crate) fn known_locks(&self) -> Vec<Arc<LockShared>> {
        lock(&self.locks).values().cloned().collect()
    }

    /// Forgets every lock nobody has a handle of and that has no key left:
    /// a name used once costs nothing once idle (its counters go with it).
    /// The store's floor is raised above the fences each granted, so a
    /// name made again fences on above them. Answers how many were forgotten.
    pub(crate) fn forget_idle_locks(&self) -> usize {
        let mut locks = lock(&self.locks);
        let before = locks.len();
        let mut floor = self.fence_floor.load(Ordering::Relaxed);
        // Only the map holds an idle lock's Arc: no handle, hold, lease or
        // waiter can reach it, and none can get it without `locks`.
        locks.retain(|_, l| {
            let idle = Arc::strong_count(l) == 1 && l.table.live() == 0;
            if idle {
                floor = floor.max(l.table.floor());
            }
            !idle
        });
        // Relaxed: under `locks`, as in `lock_named`.
        self.fence_floor.store(floor, Ordering::Relaxed);
        // The map's room for names gone goes too.
        if locks.capacity() > 4 * locks.len().max(16) {
            locks.shrink_to_fit();
        }
        before - locks.len()
    }

    /// Sweeps every lock, then forgets the idle ones; answers (reclaimed,
    /// still live), counting as live a lock kept only by a handle, so that
    /// sweeps go on (backing off) until it is forgotten too.
    pub(crate) fn sweep_all(&self) -> (usize, usize) {
        let (reclaimed, live) = self.sweep_keys();
        self.forget_idle_locks();
        (reclaimed, live + lock(&self.locks).len())
    }

    /// Sweeps every lock's keys; answers (reclaimed, still live).
    fn sweep_keys(&self) -> (usize, usize) {
        let locks: Vec<Arc<LockShared>> = lock(&self.locks).values().cloned().collect();
        let mut reclaimed = 0;
        let mut live = 0;
        {
            let guard = epoch::pin();
            for l in &locks {
                reclaimed += l.table.sweep(&guard);
                // Retired records not freed yet keep the sweeps coming too.
                live += l.table.live() + l.table.pending_batches();
            }
        }
        // Let the locks go before the flushes: a lock is forgotten only
        // while nobody else holds its Arc, this sweep included.
        drop(locks);
        // Push this thread's deferred frees to the global queue and let the
        // epoch advance past them: each flush may advance the epoch once and
        // frees a few expired bags, so a burst of garbage (a million keys'
        // worth of bucket arrays) takes a few dozen; each costs ~100 ns.
        for _ in 0..if cfg!(loom) { 4 } else { 64 } {
            epoch::pin().flush();
        }
        (reclaimed, live)
    }

    /// Closes the store: see `Store::close`. Answers how long from now a
    /// lease it ended could still be thought held (see
    /// `Store::close_reporting_last_expiry`).
    pub(crate) fn close(&self) -> Duration {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Duration::ZERO;
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
        // No more timers: leases are lost now. A grant that races the close
        // lists its lease before its caller can look at `closed`; one listed
        // after this point finds `closed` set, and a server answers no
        // grant of a closed store. So every answered lease is counted here.
        let now = self.clock.now_ms();
        let latest = self.timer.close().max(self.watch.latest_due(now));
        Duration::from_millis(latest.map_or(0, |due| due.saturating_sub(now)))
    }
}

/// The timer thread's way to the store's maxHold watch: the store's core,
/// not kept alive by it.
#[cfg(not(loom))]
struct Ticker<L>(std::sync::Weak<StoreCore<L>>);

#[cfg(not(loom))]
impl<L: Due + Watched> crate::driver::Ticked for Ticker<L> {
    fn tick(&self, now_ms: u64) -> Option<bool> {
        Some(self.0.upgrade()?.scan_watch(now_ms, false))
    }

    fn park(&self) -> Option<bool> {
        Some(self.0.upgrade()?.watch.park_all())
    }
}

impl<L> StoreCore<L> {
    /// Names the store: equal for every handle of one store.
    pub(crate) fn id(&self) -> usize {
        self as *const Self as usize
    }
}

impl<L> Drop for StoreCore<L> {
    fn drop(&mut self) {
        self.timer.shut_down();
    }
}

/// The first fence of a new store: nanoseconds since the Unix epoch, and
/// above every earlier store's of this process. A key cannot be granted more
/// than once a nanosecond, so every fence a store handed out is below its
/// floor plus the nanoseconds since it opened: the next store starts at the
/// later of the clock and that bound, which holds even if the wall clock
/// stands still or steps back, and stays within the clock when it does not.
///
/// This process-wide mutex and the `Instant` beside the floor are std's even
/// under loom: they are used once per store and take no part in any
/// modelled race.
fn next_store_fence_floor() -> u64 {
    static LAST: std::sync::Mutex<Option<(u64, std::time::Instant)>> = std::sync::Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let wall = wall_clock_ns();
    let floor = match *last {
        Some((floor, at)) => wall.max(
            floor
                .saturating_add(at.elapsed().as_nanos() as u64)
                .saturating_add(1),
        ),
        None => wall,
    };
    *last = Some((floor, instant_now()));
    floor
}
