//! The store's timer: a [`Wheel`] of deadlines behind a mutex, the registry
//! of timed leases beside it, and the background thread that fires what
//! comes due, runs idle-key sweeps, and sleeps until the next deadline.
//!
//! Waiting tasks' deadlines come here as one entry per line, not per task
//! ([`LineDue`]; the record keeps the line timer's invariant), so that a
//! task's wait on a hot key arms and cancels nothing.
//!
//! It knows leases only through the small [`Due`] trait, lines only
//! through [`LineDue`], and sweeps only
//! through the callback its store installs
//! ([`install_sweeper`](Driver::install_sweeper)), so it sits below both.
//!
//! The background thread starts on first need (a timer, or a key created),
//! sleeps on a condition variable until the next deadline or sweep, and
//! sleeps without a timeout, costing nothing, when neither is pending. It
//! holds the driver, not the store: the store's drop shuts it down.
//!
//! Sweeps: creating a key asks for one; it runs `SWEEP_MIN_MS` later and
//! repeats, backing off to `SWEEP_MAX_MS`, while any key (or lock) is live, so a key
//! that goes idle is reclaimed within about a second, and a store whose keys
//! are all gone stops sweeping.

#[cfg(not(loom))]
use crate::hold_watch::IDLE_TICKS;
use crate::hold_watch::TICK_MS;
use crate::sync::{
    downgrade, lock, upgrade, Arc, AtomicBool, Clock, Condvar, Mutex, Ordering, Weak,
};
use crate::table::RandomHasher;
use crate::timer::{TimerKey, Wheel};
use std::collections::HashMap;
#[cfg(not(loom))]
use std::panic::{catch_unwind, AssertUnwindSafe};

const SWEEP_MIN_MS: u64 = 50;
const SWEEP_MAX_MS: u64 = 1000;

/// What the driver needs of a timed lease.
pub(crate) trait Due: Send + Sync + 'static {
    /// When it must end if nothing changes (ms on the store's clock);
    /// `None`: never, and it is never armed.
    fn due_ms(&self) -> Option<u64>;
    /// The driver found it due at `now_ms`: end it. Answers false when it
    /// is not due after all (renewed since it was armed): arm it again.
    fn fire(&self, now_ms: u64) -> bool;
    /// Whether it has not ended yet.
    fn is_active(&self) -> bool;
    /// Its place in the registry of timed leases: its record's address
    /// and its grant's fence (one grant, one fence).
    fn timed_key(&self) -> (usize, u64);
    /// Its pending wheel entry. Only under the wheel lock.
    fn timer_key(&self) -> Option<TimerKey>;
    /// Only under the wheel lock.
    fn set_timer_key(&self, key: Option<TimerKey>);
}

/// What the driver needs of a key's line of waiting tasks.
pub(crate) trait LineDue: Send + Sync + 'static {
    /// An entry came due at `now_ms`: wake every task whose deadline has
    /// passed; answers when the next entry must come (`None`: none needed).
    fn fire(&self, now_ms: u64) -> Option<u64>;
}

/// What a wheel entry does when it comes due.
enum Entry<L> {
    /// A lease reaches its maxHold or ttl (or must be re-armed: renewed).
    Lease(Arc<L>),
    /// A line's earliest task deadline (or one before it): the line wakes
    /// the tasks whose deadline passed, and each leaves on its poll.
    Line(Box<dyn LineDue>),
}

/// Sweeps every idle key of the store; answers how many keys are still
/// live, or `None` once the store is gone.
#[cfg(not(loom))]
pub(crate) type Sweeper = Box<dyn Fn() -> Option<usize> + Send + Sync>;

/// What the thread needs of the store's maxHold watch (`hold_watch`),
/// which it scans every tick while holds may run. Each answers `None`
/// once the store is gone.
#[cfg(not(loom))]
pub(crate) trait Ticked: Send + Sync {
    /// A tick at `now_ms`: revokes the holds past their maxHold; answers
    /// whether a hold ran since the last tick.
    fn tick(&self, now_ms: u64) -> Option<bool>;
    /// Ticking stops: answers whether every slot was parked (`false`: a
    /// hold runs, so ticking goes on).
    fn park(&self) -> Option<bool>;
}

/// The timer and its background thread, one per store.
pub(crate) struct Driver<L> {
    state: Mutex<State<L>>,
    cv: Condvar,
    clock: Arc<Clock>,
    /// A key was created since the last sweep began. A hint: see
    /// [`want_sweep`](Driver::want_sweep).
    sweep_wanted: AtomicBool,
    #[cfg(not(loom))]
    sweeper: std::sync::OnceLock<Sweeper>,
    #[cfg(not(loom))]
    ticked: std::sync::OnceLock<Box<dyn Ticked>>,
}

struct State<L> {
    wheel: Wheel<Entry<L>>,
    started: bool,
    shutdown: bool,
    /// While the thread sleeps: when it will wake on its own (`u64::MAX`:
    /// never). 0 while it is awake (it re-reads the wheel before sleeping).
    sleeping_until: u64,
    sweep_at: Option<u64>,
    sweep_delay: u64,
    /// The thread scans the maxHold watch every tick.
    ticking: bool,
    /// A claim found the watch parked since the last try to stop ticking.
    tick_requested: bool,
    /// Ticks in a row that saw no hold.
    idle_ticks: u32,
    /// The timed leases now active, by their record's address and fence
    /// (a key of several permits has several), so `Lock::inspect` can tell
    /// how long a key has been held and how long its lease has left. Kept
    /// beside the wheel so that a lease joins and leaves it under the wheel
    /// lock it takes anyway (a hold with no timer never touches it). An
    /// entry leaves before its grant is let go, so every entry names a
    /// current grant: its record is held, so not retired, and its address
    /// names no other record meanwhile.
    timed: HashMap<(usize, u64), Weak<L>, RandomHasher>,
}

impl<L> Driver<L> {
    pub(crate) fn new(clock: Arc<Clock>) -> Self {
        Driver {
            state: Mutex::new(State {
                wheel: Wheel::new(),
                started: false,
                shutdown: false,
                sleeping_until: 0,
                sweep_at: None,
                sweep_delay: SWEEP_MIN_MS,
                ticking: false,
                tick_requested: false,
                idle_ticks: 0,
                timed: HashMap::default(),
            }),
            cv: Condvar::new(),
            clock,
            sweep_wanted: AtomicBool::new(false),
            #[cfg(not(loom))]
            sweeper: std::sync::OnceLock::new(),
            #[cfg(not(loom))]
            ticked: std::sync::OnceLock::new(),
        }
    }

    /// Installs the maxHold watch the thread ticks; once, before any hold.
    #[cfg(not(loom))]
    pub(crate) fn install_ticked(&self, ticked: Box<dyn Ticked>) {
        if self.ticked.set(ticked).is_err() {
            unreachable!("a store installs its watch once");
        }
    }

    /// Installs how the thread sweeps; once, before any key exists.
    #[cfg(not(loom))]
    pub(crate) fn install_sweeper(&self, sweeper: Sweeper) {
        if self.sweeper.set(sweeper).is_err() {
            unreachable!("a store installs its sweeper once");
        }
    }

    /// The store is gone: the thread ends.
    pub(crate) fn shut_down(&self) {
        let mut st = lock(&self.state);
        st.shutdown = true;
        self.cv.notify_all();
    }

    /// Under loom: how many timers are pending on the wheel.
    #[cfg(loom)]
    pub(crate) fn pending(&self) -> usize {
        lock(&self.state).wheel.len()
    }

    #[cfg(test)]
    pub(crate) fn timed_len(&self) -> usize {
        lock(&self.state).timed.len()
    }
}

impl<L: Due> Driver<L> {
    /// No more timers, for good (the store closed): pending entries are
    /// dropped, the timed registry emptied, the thread let go. Answers the
    /// latest end (ms on the store's clock) of the leases still active in
    /// the registry: until then a holder nobody could tell may think it
    /// holds (`None`: no timed lease was active).
    pub(crate) fn close(&self) -> Option<u64> {
        let (old, latest) = {
            let mut st = lock(&self.state);
            st.shutdown = true;
            st.sweep_at = None;
            self.cv.notify_all();
            let timed = std::mem::take(&mut st.timed);
            let latest = timed
                .values()
                .filter_map(upgrade)
                .filter(|lease| lease.is_active())
                .filter_map(|lease| lease.due_ms())
                .max();
            ((std::mem::take(&mut st.wheel), timed), latest)
        };
        // Dropped unlocked: a lease's or a waker's drop may take this lock.
        drop(old);
        latest
    }

    /// A hold claimed a parked slot of the maxHold watch: tick again.
    #[cold]
    #[inline(never)]
    pub(crate) fn start_ticking(this: &Arc<Self>) {
        let mut st = lock(&this.state);
        if st.shutdown {
            return;
        }
        st.tick_requested = true;
        if !st.ticking {
            st.ticking = true;
            st.idle_ticks = 0;
            let at = this.clock.now_ms() + TICK_MS;
            Self::wake_thread(this, &mut st, at);
        }
    }

    /// Stops ticking if `park` parks every slot of the watch and no claim
    /// asked for ticks meanwhile (see `hold_watch`'s module doc). `None`:
    /// `park` found the store gone.
    pub(crate) fn try_stop_ticking(&self, park: impl FnOnce() -> Option<bool>) -> Option<()> {
        lock(&self.state).tick_requested = false;
        let parked = park()?;
        let mut st = lock(&self.state);
        // A claim that found its slot parked asked again meanwhile.
        if parked && !st.tick_requested {
            st.ticking = false;
        }
        Some(())
    }

    /// Whether the thread scans the maxHold watch (for loom models and
    /// tests).
    #[cfg(any(loom, test))]
    pub(crate) fn is_ticking(&self) -> bool {
        lock(&self.state).ticking
    }

    /// Puts a lease on the wheel at its expiry (if it has one), and lists it
    /// in the timed registry.
    pub(crate) fn arm(this: &Arc<Self>, lease: &Arc<L>) {
        let Some(at) = lease.due_ms() else {
            return;
        };
        let mut st = lock(&this.state);
        if st.shutdown {
            return;
        }
        let key = st.wheel.insert(Entry::Lease(lease.clone()), at);
        lease.set_timer_key(Some(key));
        st.timed.insert(lease.timed_key(), downgrade(lease));
        Self::wake_thread(this, &mut st, at);
    }

    /// A lease ended: takes its entry off the wheel (if it has not fired)
    /// and out of the timed registry, before its grant is let go (see
    /// `State::timed`).
    pub(crate) fn cancel(&self, lease: &L) {
        if lease.due_ms().is_none() {
            return;
        }
        let entry = {
            let mut st = lock(&self.state);
            let entry = lease.timer_key().and_then(|k| st.wheel.cancel(k));
            lease.set_timer_key(None);
            st.timed.remove(&lease.timed_key());
            entry
        };
        // Dropped outside the wheel lock (it is not the last reference:
        // the caller holds one).
        drop(entry);
    }

    /// The active timed lease of the grant with `fence` on the record at
    /// `record_addr`, if that grant has one.
    pub(crate) fn timed_lease(&self, record_addr: usize, fence: u64) -> Option<Arc<L>> {
        let st = lock(&self.state);
        upgrade(st.timed.get(&(record_addr, fence))?).filter(|l| l.is_active())
    }

    /// Fires `line` at `at_ms` on the store's clock (and again whenever it
    /// answers a time). Nothing once the store is shut down: its lines are
    /// closed, which wakes every task in them.
    pub(crate) fn arm_line(this: &Arc<Self>, at_ms: u64, line: Box<dyn LineDue>) {
        let mut st = lock(&this.state);
        if st.shutdown {
            return;
        }
        st.wheel.insert(Entry::Line(line), at_ms);
        Self::wake_thread(this, &mut st, at_ms);
    }

    /// A key was created: make sure a sweep will come.
    pub(crate) fn want_sweep(this: &Arc<Self>) {
        // Relaxed: a hint; the thread swaps it back under no lock. Loaded
        // first so steady creation does not write a shared line each time.
        if this.sweep_wanted.load(Ordering::Relaxed) {
            return;
        }
        this.sweep_wanted.store(true, Ordering::Relaxed);
        let mut st = lock(&this.state);
        if st.shutdown {
            return;
        }
        let at = this.clock.now_ms() + SWEEP_MIN_MS;
        st.sweep_delay = SWEEP_MIN_MS;
        if st.sweep_at.is_none_or(|t| t > at) {
            st.sweep_at = Some(at);
        }
        Self::wake_thread(this, &mut st, at);
    }

    /// Starts the thread if needed, and wakes it if it sleeps past `at`.
    fn wake_thread(this: &Arc<Self>, st: &mut State<L>, at: u64) {
        if !st.started {
            // Without a thread, timers and sweeps wait for the next caller
            // to try again (reclaim_idle still works by hand).
            st.started = Self::spawn(this);
        } else if at < st.sleeping_until {
            this.cv.notify_one();
        }
    }

    #[cfg(not(loom))]
    fn spawn(this: &Arc<Self>) -> bool {
        let driver = this.clone();
        std::thread::Builder::new()
            .name("holdline-timer".into())
            .spawn(move || driver.run())
            .is_ok()
    }

    /// Under loom there is no clock to drive: models fire timers by hand.
    #[cfg(loom)]
    fn spawn(_: &Arc<Self>) -> bool {
        true
    }

    /// Under loom: fires every pending timer as if its deadline had passed.
    #[cfg(loom)]
    pub(crate) fn fire_all(&self) {
        let mut due = Vec::new();
        lock(&self.state).wheel.advance(u64::MAX / 2, &mut due);
        for entry in due {
            match entry {
                Entry::Lease(lease) => {
                    lease.fire(u64::MAX / 2);
                }
                // Every deadline has passed: nothing is left to cover.
                Entry::Line(line) => {
                    line.fire(u64::MAX / 2);
                }
            }
        }
    }
}

/// The background thread.
#[cfg(not(loom))]
impl<L: Due> Driver<L> {
    /// The thread's loop: fire what is due, sweep when a sweep is due, else
    /// sleep until the next deadline. Ends at shutdown.
    ///
    /// A panic in what a turn runs (a waker's, a sweep's) ends that turn,
    /// not the thread: it was not the timer's, and every store deadline
    /// after it still has to fire.
    fn run(&self) {
        let mut due = Vec::new();
        loop {
            // After a panic, the entries not yet fired stay in `due`, for
            // the next turn.
            if let Ok(false) = catch_unwind(AssertUnwindSafe(|| self.turn(&mut due))) {
                return;
            }
        }
    }

    /// One turn of the loop; answers false at shutdown.
    fn turn(&self, due: &mut Vec<Entry<L>>) -> bool {
        let now = self.clock.now_ms();
        let Some(sweep_now) = self.take_due(now, due) else {
            return false;
        };
        self.fire(now, due);
        if !self.tick(now) {
            return false;
        }
        if sweep_now {
            self.sweep()
        } else {
            self.sleep()
        }
    }

    /// Scans the maxHold watch if ticking; stops ticking once no hold ran
    /// for `IDLE_TICKS` ticks and every slot parked. Answers false once
    /// the store is gone.
    fn tick(&self, now: u64) -> bool {
        let Some(ticked) = self.ticked.get() else {
            return true;
        };
        if !lock(&self.state).ticking {
            return true;
        }
        let Some(active) = ticked.tick(now) else {
            return false;
        };
        if !self.idle_long_enough(active) {
            return true;
        }
        self.try_stop_ticking(|| ticked.park()).is_some()
    }

    /// Counts a tick that saw a hold (`active`) or none; answers whether
    /// `IDLE_TICKS` in a row saw none (and starts counting again).
    fn idle_long_enough(&self, active: bool) -> bool {
        let mut st = lock(&self.state);
        st.idle_ticks = if active { 0 } else { st.idle_ticks + 1 };
        if st.idle_ticks < IDLE_TICKS {
            return false;
        }
        st.idle_ticks = 0;
        true
    }

    /// Moves the entries due by `now` into `due`; answers whether a sweep is
    /// due too, or `None` at shutdown.
    fn take_due(&self, now: u64, due: &mut Vec<Entry<L>>) -> Option<bool> {
        let mut st = lock(&self.state);
        if st.shutdown {
            return None;
        }
        st.wheel.advance(now, due);
        let sweep_now = st.sweep_at.is_some_and(|t| t <= now);
        if sweep_now {
            st.sweep_at = None;
            // Relaxed: a hint (see `want_sweep`); a creation racing this
            // store asks again, or is caught by the next sweep.
            self.sweep_wanted.store(false, Ordering::Relaxed);
        }
        Some(sweep_now)
    }

    /// Fires the entries in `due` (outside the wheel lock: a lease's end
    /// takes it), re-arming a lease renewed since it was armed.
    ///
    /// Entries are taken one at a time, so a panic leaves the rest in
    /// `due` for the next turn. A line whose firing panicked (a waker's)
    /// is fired again a tick later, for the tasks it did not reach.
    fn fire(&self, now: u64, due: &mut Vec<Entry<L>>) {
        while let Some(entry) = due.pop() {
            let lease = match entry {
                Entry::Lease(lease) => lease,
                Entry::Line(line) => {
                    let again = match catch_unwind(AssertUnwindSafe(|| line.fire(now))) {
                        Ok(at) => at,
                        Err(_) => Some(now + TICK_MS),
                    };
                    if let Some(at) = again {
                        let mut st = lock(&self.state);
                        if !st.shutdown {
                            st.wheel.insert(Entry::Line(line), at);
                        }
                    }
                    continue;
                }
            };
            if !lease.fire(now) {
                // Renewed since it was armed: arm it again at its new expiry,
                // unless its holder let go meanwhile (checked under the wheel
                // lock, which its end takes after its status CAS).
                let mut st = lock(&self.state);
                if lease.is_active() && !st.shutdown {
                    if let Some(at) = lease.due_ms() {
                        let key = st.wheel.insert(Entry::Lease(lease.clone()), at);
                        lease.set_timer_key(Some(key));
                    }
                }
            }
        }
    }

    /// Sweeps the store's idle keys, and plans the next sweep while any key
    /// is live. Answers false once the store is gone.
    fn sweep(&self) -> bool {
        let Some(live) = self.sweeper.get().and_then(|sweep| sweep()) else {
            return false;
        };
        let mut st = lock(&self.state);
        if live > 0 && st.sweep_at.is_none() && !st.shutdown {
            st.sweep_delay = (st.sweep_delay * 2).min(SWEEP_MAX_MS);
            st.sweep_at = Some(self.clock.now_ms() + st.sweep_delay);
        }
        true
    }

    /// Sleeps until the next deadline or sweep (or a wake for an earlier
    /// one). Answers false at shutdown.
    fn sleep(&self) -> bool {
        let mut st = lock(&self.state);
        if st.shutdown {
            return false;
        }
        let now = self.clock.now_ms();
        let tick_at = st.ticking.then_some(now + TICK_MS);
        let next = [st.wheel.next_deadline(), st.sweep_at, tick_at]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(at) if at <= now => return true,
            Some(at) => {
                st.sleeping_until = at;
                st = self.wait(st, Some(at - now));
            }
            None => {
                st.sleeping_until = u64::MAX;
                st = self.wait(st, None);
            }
        }
        st.sleeping_until = 0;
        true
    }

    /// Waits on the condition variable, `ms` at most (`None`: untimed).
    fn wait<'a>(
        &self,
        st: crate::sync::MutexGuard<'a, State<L>>,
        ms: Option<u64>,
    ) -> crate::sync::MutexGuard<'a, State<L>> {
        match ms {
            Some(ms) => match self
                .cv
                .wait_timeout(st, std::time::Duration::from_millis(ms))
            {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            },
            None => match self.cv.wait(st) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            },
        }
    }
}
