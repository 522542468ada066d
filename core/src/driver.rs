//! The store's timer: the wheels of deadlines, the registry of timed leases
//! beside them, and the background thread that fires what comes due, runs
//! idle-key sweeps, and sleeps until the next deadline.
//!
//! # What it owns
//!
//! - **Lease shards** ([`Shard`]): the timed leases (a handle lease's ttl,
//!   a maxHold the watch could not time) live on `N` shards, each a
//!   [`Wheel`] of leases and the part of the registry of timed leases
//!   whose entries sit on that wheel, behind the shard's own mutex. `N` is
//!   a power of two, twice the CPUs rounded up (4 to 64; 2 under loom).
//! - **Control** ([`Control`], one mutex): the thread's own business: the
//!   wheel of waiting lines' deadlines ([`LineDue`]: one entry per line,
//!   not per task, so a task's wait on a hot key arms and cancels nothing;
//!   the record keeps the line timer's invariant), sweeps, the maxHold
//!   watch's ticking, shutdown.
//! - **The thread's sleep** (`sleeping_until`, an atomic written only
//!   under the control mutex): when the thread will wake on its own, so
//!   that an arm earlier than that wakes it, and no other arm takes the
//!   control mutex.
//!
//! # Why shards
//!
//! Every server HOLD and every `acquire` is a handle lease with a ttl: it
//! arms at its grant and cancels at its release. With one timer mutex for
//! the store, two threads on keys of their own met on that mutex (and its
//! cache line) twice per lease. A lease's shard is its *home*: the number
//! of the thread that made it ([`this_thread_number`], fixed for the
//! lease's life), taken modulo `N`. So threads of their own (up to `N` of
//! them) never share a shard's mutex, whatever keys they hold, and the
//! mutex a lease takes is the one its own thread took last: uncontended,
//! its line already in that core's cache. A lease released on another
//! thread (a handle passed on) still goes to its home shard, so arm,
//! cancel and the timer's firing of one lease always meet on one mutex,
//! which is what decides among them, exactly as the one mutex did.
//!
//! The alternatives weighed: shards picked by the record's address would
//! let two threads' keys collide on a shard by chance (1 in `N` a pair);
//! per-thread wheels need a registry of wheels and a hand-over when a
//! thread ends, for no gain over shards numbered by thread; a lazily armed
//! deadline (a per-thread page, as `hold_watch` does for closure holds)
//! would have the timer scan every page each tick while any handle lease
//! exists, and a handle lease lives for seconds (a server's connection),
//! so the timer would tick for as long as any client holds.
//!
//! The thread serves every shard: each turn it takes what is due from the
//! control wheel and from each shard (each under its own mutex), and its
//! sleep lasts until the earliest of the control's deadlines and every
//! shard's next deadline.
//!
//! # Invariants
//!
//! - A timed lease is on its home shard's wheel (at most once) and in its
//!   home shard's registry while it is active, and on no other shard. Its
//!   `timer_key` is read and written only under its home shard's mutex.
//!   An entry leaves the registry before its grant is let go (the end's
//!   `cancel` comes before the record's release), so every entry names a
//!   current grant: its record is held, so not retired, and its address
//!   names no other record meanwhile.
//! - The end of a lease (one status CAS, `LeaseState::end`) cancels under
//!   its home shard's mutex; the timer re-arms a renewed lease only under
//!   that mutex and only if it is still active: so a lease released is
//!   never put back on a wheel, and a lease ended by the timer is let go
//!   once (the CAS decides).
//! - A shard is `closed` by `close` and `shut_down`, under its mutex:
//!   nothing is armed on it after, so `close` sees every lease armed
//!   before it and none arms after.
//! - **No lost wake.** The thread, holding the control mutex from its
//!   look at the deadlines until it waits on the condition variable, first
//!   stores into `sleeping_until` the earliest of the control's deadlines
//!   (`u64::MAX`: none), then takes each shard's mutex in turn and lowers
//!   `sleeping_until` to that shard's next deadline if earlier. An arm
//!   inserts under its shard's mutex, lets it go, then loads
//!   `sleeping_until`, and wakes the thread (under the control mutex) if
//!   its deadline is earlier. Either the thread's look at that shard came
//!   after the insert, and it saw the entry; or it came before, and then
//!   the thread's store happened before the arm's load (through the
//!   shard's mutex), so the arm reads that value or a later one; the
//!   values the thread stores while planning only go down, so the arm
//!   reads at least the planned sleep, and wakes the thread when its
//!   deadline is earlier than the plan. The wake takes the control mutex,
//!   which the planning thread holds until it waits, so it cannot come
//!   between the plan and the wait. Once awake the thread stores 0 (it
//!   looks at every shard again before it sleeps), and an arm that reads
//!   0 does not wake it.
//!
//! It knows leases only through the small [`Due`] trait, lines only
//! through [`LineDue`], and sweeps only through the callback its store
//! installs ([`install_sweeper`](Driver::install_sweeper)), so it sits
//! below both.
//!
//! The background thread starts on first need (a timer, or a key created),
//! sleeps on a condition variable until the next deadline or sweep, and
//! sleeps without a timeout, costing nothing, when neither is pending. It
//! holds the driver, not the store: the store's drop shuts it down.
//!
//! Sweeps: creating a key asks for one; it runs `SWEEP_MIN_MS` later and
//! repeats, backing off to `SWEEP_MAX_MS`, while any key (or lock) is live,
//! so a key that goes idle is reclaimed within about a second, and a store
//! whose keys are all gone stops sweeping.

#[cfg(not(loom))]
use crate::hold_watch::IDLE_TICKS;
use crate::hold_watch::TICK_MS;
use crate::sync::{
    downgrade, lock, upgrade, Arc, AtomicBool, AtomicU64, AtomicUsize, Clock, Condvar, Mutex,
    Ordering, Weak,
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
    /// Its home: a number fixed for its life (the [`this_thread_number`]
    /// of the thread that made it), which picks its shard.
    fn home(&self) -> usize;
    /// Its pending wheel entry. Only under its shard's lock.
    fn timer_key(&self) -> Option<TimerKey>;
    /// Only under its shard's lock.
    fn set_timer_key(&self, key: Option<TimerKey>);
}

/// What the driver needs of a key's line of waiting tasks.
pub(crate) trait LineDue: Send + Sync + 'static {
    /// An entry came due at `now_ms`: wake every task whose deadline has
    /// passed; answers when the next entry must come (`None`: none needed).
    fn fire(&self, now_ms: u64) -> Option<u64>;
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

/// This thread's number: given once per thread, counting up from 0 in
/// the order threads first ask. A lease's home (see the module doc).
#[cfg(not(loom))]
pub(crate) fn this_thread_number() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::thread_local! {
        // Relaxed: the number only has to differ from other threads',
        // which the read-modify-write gives in any ordering.
        static NUMBER: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    // A thread whose thread-locals are gone (it is ending) shares 0.
    NUMBER.try_with(|n| *n).unwrap_or(0)
}

/// This thread's number, as above, per loom execution.
#[cfg(loom)]
pub(crate) fn this_thread_number() -> usize {
    loom::lazy_static! {
        static ref NEXT: AtomicUsize = AtomicUsize::new(0);
    }
    loom::thread_local! {
        // Relaxed: as above.
        static NUMBER: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|n| *n)
}

/// How many lease shards a store has: a power of two, twice the CPUs
/// rounded up, 4 to 64 (read once per process).
#[cfg(not(loom))]
fn shard_count() -> usize {
    static COUNT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *COUNT.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        (cpus * 2).next_power_of_two().clamp(4, 64)
    })
}

/// Under loom: two shards, so a model's two threads have a shard each.
#[cfg(loom)]
fn shard_count() -> usize {
    2
}

/// The shard a lease's cancel looks in: its home's. (Mutant
/// `cancel_on_own_shard`: the ending thread's, which is another shard
/// when the timer ends it.)
fn shard_number_of_cancel<L: Due>(lease: &L) -> usize {
    if cfg!(holdline_mutant = "cancel_on_own_shard") {
        return this_thread_number();
    }
    lease.home()
}

/// Whether the thread publishes its planned sleep before it looks at
/// each shard (the module doc's "No lost wake"). (Mutant
/// `plan_publishes_late`: only once it has looked at every shard, so an
/// arm between its look and its publishing reads "awake" and wakes
/// nobody.)
fn publishes_before_looking() -> bool {
    !cfg!(holdline_mutant = "plan_publishes_late")
}

/// One lease shard: its wheel and registry behind its own mutex, on a
/// cache line of its own so that shards of different threads share none.
#[repr(align(128))]
struct Shard<L> {
    leases: Mutex<Leases<L>>,
}

/// A shard's leases.
struct Leases<L> {
    wheel: Wheel<Arc<L>>,
    /// The timed leases of this shard now active, by their record's
    /// address and fence (a key of several permits has several), so
    /// `Lock::inspect` can tell how long a key has been held and how long
    /// its lease has left. Kept beside the wheel so that a lease joins and
    /// leaves it under the shard lock it takes anyway (a hold with no timer
    /// never touches it). See the module doc's invariants.
    timed: HashMap<(usize, u64), Weak<L>, RandomHasher>,
    /// Closed (`close`, `shut_down`): nothing is armed here any more.
    closed: bool,
}

impl<L> Shard<L> {
    fn new() -> Self {
        Shard {
            leases: Mutex::new(Leases {
                wheel: Wheel::new(),
                timed: HashMap::default(),
                closed: false,
            }),
        }
    }
}

/// The timer and its background thread, one per store.
pub(crate) struct Driver<L> {
    control: Mutex<Control>,
    cv: Condvar,
    shards: Box<[Shard<L>]>,
    /// While the thread sleeps: when it will wake on its own (`u64::MAX`:
    /// never). 0 while it is awake (it looks at every wheel again before
    /// sleeping). Written only under `control`; an arm reads it without
    /// (see the module doc's "No lost wake").
    sleeping_until: AtomicU64,
    /// The thread was started. Written only under `control`.
    started: AtomicBool,
    /// Under loom: how many times the thread was woken (models check
    /// that an arm its sleep missed woke it).
    #[cfg(loom)]
    wakes: AtomicUsize,
    clock: Arc<Clock>,
    /// A key was created since the last sweep began. A hint: see
    /// [`want_sweep`](Driver::want_sweep).
    sweep_wanted: AtomicBool,
    #[cfg(not(loom))]
    sweeper: std::sync::OnceLock<Sweeper>,
    #[cfg(not(loom))]
    ticked: std::sync::OnceLock<Box<dyn Ticked>>,
}

/// The thread's own business, under one mutex.
struct Control {
    /// Lines' deadlines.
    lines: Wheel<Box<dyn LineDue>>,
    shutdown: bool,
    sweep_at: Option<u64>,
    sweep_delay: u64,
    /// The thread scans the maxHold watch every tick.
    ticking: bool,
    /// A claim found the watch parked since the last try to stop ticking.
    tick_requested: bool,
    /// Ticks in a row that saw no hold.
    idle_ticks: u32,
}

/// What a turn of the thread found due, fired outside every lock.
struct DueNow<L> {
    leases: Vec<Arc<L>>,
    lines: Vec<Box<dyn LineDue>>,
}

impl<L> DueNow<L> {
    fn new() -> Self {
        DueNow {
            leases: Vec::new(),
            lines: Vec::new(),
        }
    }
}

impl<L> Driver<L> {
    pub(crate) fn new(clock: Arc<Clock>) -> Self {
        Driver {
            control: Mutex::new(Control {
                lines: Wheel::new(),
                shutdown: false,
                sweep_at: None,
                sweep_delay: SWEEP_MIN_MS,
                ticking: false,
                tick_requested: false,
                idle_ticks: 0,
            }),
            cv: Condvar::new(),
            shards: (0..shard_count()).map(|_| Shard::new()).collect(),
            sleeping_until: AtomicU64::new(0),
            started: AtomicBool::new(false),
            #[cfg(loom)]
            wakes: AtomicUsize::new(0),
            clock,
            sweep_wanted: AtomicBool::new(false),
            #[cfg(not(loom))]
            sweeper: std::sync::OnceLock::new(),
            #[cfg(not(loom))]
            ticked: std::sync::OnceLock::new(),
        }
    }

    /// The shard whose number is `n` (modulo the shard count).
    fn shard(&self, n: usize) -> &Mutex<Leases<L>> {
        // The count is a power of two.
        &self.shards[n & (self.shards.len() - 1)].leases
    }

    /// Under the control lock, before the thread waits: publishes when it
    /// will wake, `own` (the control's earliest deadline) first, then
    /// lowered to each shard's next deadline, shard by shard (see the
    /// module doc's "No lost wake"). Answers the earliest of all.
    fn plan_sleep(&self, own: Option<u64>) -> Option<u64> {
        let mut next = own;
        // Relaxed: each store comes before the thread takes the next
        // shard's lock, and an arm of that shard takes it after, so the
        // lock's release and acquire order the store before the arm's
        // load.
        if publishes_before_looking() {
            self.sleeping_until
                .store(next.unwrap_or(u64::MAX), Ordering::Relaxed);
        }
        for shard in self.shards.iter() {
            let shard_next = lock(&shard.leases).wheel.next_deadline();
            if let Some(at) = shard_next.filter(|&at| next.is_none_or(|n| at < n)) {
                next = Some(at);
                if publishes_before_looking() {
                    self.sleeping_until.store(at, Ordering::Relaxed);
                }
            }
        }
        if !publishes_before_looking() {
            self.sleeping_until
                .store(next.unwrap_or(u64::MAX), Ordering::Relaxed);
        }
        next
    }

    /// Under loom: the thread's plan of its sleep with nothing of its own
    /// pending (only the shards' deadlines), as it makes it before it
    /// waits; the plan stays published, as while the thread waits.
    #[cfg(loom)]
    pub(crate) fn plan_sleep_on_leases(&self) -> Option<u64> {
        let _control = lock(&self.control);
        self.plan_sleep(None)
    }

    /// Under loom: how many times an arm (or any caller) woke the thread.
    #[cfg(loom)]
    pub(crate) fn wakes(&self) -> usize {
        // Relaxed: read after the model joined every thread.
        self.wakes.load(Ordering::Relaxed)
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

    /// The store is gone: the thread ends, and nothing is armed any more.
    pub(crate) fn shut_down(&self) {
        {
            let mut control = lock(&self.control);
            control.shutdown = true;
            self.cv.notify_all();
        }
        for shard in self.shards.iter() {
            lock(&shard.leases).closed = true;
        }
    }

    /// Under loom: how many timers are pending on the wheels.
    #[cfg(loom)]
    pub(crate) fn pending(&self) -> usize {
        let lines = lock(&self.control).lines.len();
        let leases: usize = self
            .shards
            .iter()
            .map(|s| lock(&s.leases).wheel.len())
            .sum();
        lines + leases
    }

    /// How many leases the timed registry lists.
    #[cfg(any(test, loom))]
    pub(crate) fn timed_len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| lock(&s.leases).timed.len())
            .sum()
    }
}

impl<L: Due> Driver<L> {
    /// No more timers, for good (the store closed): pending entries are
    /// dropped, the timed registry emptied, the thread let go. Answers the
    /// latest end (ms on the store's clock) of the leases still active in
    /// the registry: until then a holder nobody could tell may think it
    /// holds (`None`: no timed lease was active).
    pub(crate) fn close(&self) -> Option<u64> {
        let lines = {
            let mut control = lock(&self.control);
            control.shutdown = true;
            control.sweep_at = None;
            self.cv.notify_all();
            std::mem::take(&mut control.lines)
        };
        let mut latest = None;
        for shard in self.shards.iter() {
            let (wheel, timed) = {
                let mut leases = lock(&shard.leases);
                leases.closed = true;
                (
                    std::mem::take(&mut leases.wheel),
                    std::mem::take(&mut leases.timed),
                )
            };
            // Looked at and dropped unlocked: a lease's drop may take a
            // shard's lock.
            let shard_latest = timed
                .values()
                .filter_map(upgrade)
                .filter(|lease| lease.is_active())
                .filter_map(|lease| lease.due_ms())
                .max();
            latest = latest.max(shard_latest);
            drop((wheel, timed));
        }
        // Dropped unlocked: a waker's drop may take the control lock.
        drop(lines);
        latest
    }

    /// A hold claimed a parked slot of the maxHold watch: tick again.
    #[cold]
    #[inline(never)]
    pub(crate) fn start_ticking(this: &Arc<Self>) {
        let mut control = lock(&this.control);
        if control.shutdown {
            return;
        }
        control.tick_requested = true;
        if !control.ticking {
            control.ticking = true;
            control.idle_ticks = 0;
            let at = this.clock.now_ms() + TICK_MS;
            Self::wake_thread(this, at);
        }
    }

    /// Stops ticking if `park` parks every slot of the watch and no claim
    /// asked for ticks meanwhile (see `hold_watch`'s module doc). `None`:
    /// `park` found the store gone.
    pub(crate) fn try_stop_ticking(&self, park: impl FnOnce() -> Option<bool>) -> Option<()> {
        lock(&self.control).tick_requested = false;
        let parked = park()?;
        let mut control = lock(&self.control);
        // A claim that found its slot parked asked again meanwhile.
        if parked && !control.tick_requested {
            control.ticking = false;
        }
        Some(())
    }

    /// Whether the thread scans the maxHold watch (for loom models and
    /// tests).
    #[cfg(any(loom, test))]
    pub(crate) fn is_ticking(&self) -> bool {
        lock(&self.control).ticking
    }

    /// Puts a lease on its home shard's wheel at its expiry (if it has
    /// one), lists it in that shard's registry, and wakes the thread if it
    /// sleeps past that expiry. Takes no lock but the shard's, unless the
    /// thread must be started or woken.
    pub(crate) fn arm(this: &Arc<Self>, lease: &Arc<L>) {
        let Some(at) = lease.due_ms() else {
            return;
        };
        {
            let mut leases = lock(this.shard(lease.home()));
            if leases.closed {
                return;
            }
            let key = leases.wheel.insert(lease.clone(), at);
            lease.set_timer_key(Some(key));
            leases.timed.insert(lease.timed_key(), downgrade(lease));
        }
        Self::wake_for_lease(this, at);
    }

    /// A lease ended: takes its entry off its shard's wheel (if it has not
    /// fired) and out of the registry, before its grant is let go (see the
    /// module doc's invariants).
    pub(crate) fn cancel(&self, lease: &L) {
        if lease.due_ms().is_none() {
            return;
        }
        let entry = {
            let mut leases = lock(self.shard(shard_number_of_cancel(lease)));
            let entry = lease.timer_key().and_then(|k| leases.wheel.cancel(k));
            lease.set_timer_key(None);
            leases.timed.remove(&lease.timed_key());
            entry
        };
        // Dropped outside the shard lock (it is not the last reference:
        // the caller holds one).
        drop(entry);
    }

    /// The active timed lease of the grant with `fence` on the record at
    /// `record_addr`, if that grant has one. Looks in every shard (the
    /// grant's lease may have been made on any thread): for `inspect`,
    /// not for a hot path.
    pub(crate) fn timed_lease(&self, record_addr: usize, fence: u64) -> Option<Arc<L>> {
        self.shards.iter().find_map(|shard| {
            let leases = lock(&shard.leases);
            upgrade(leases.timed.get(&(record_addr, fence))?).filter(|l| l.is_active())
        })
    }

    /// Fires `line` at `at_ms` on the store's clock (and again whenever it
    /// answers a time). Nothing once the store is shut down: its lines are
    /// closed, which wakes every task in them.
    pub(crate) fn arm_line(this: &Arc<Self>, at_ms: u64, line: Box<dyn LineDue>) {
        let mut control = lock(&this.control);
        if control.shutdown {
            return;
        }
        control.lines.insert(line, at_ms);
        Self::wake_thread(this, at_ms);
    }

    /// A key was created: make sure a sweep will come.
    pub(crate) fn want_sweep(this: &Arc<Self>) {
        // Relaxed: a hint; the thread swaps it back under no lock. Loaded
        // first so steady creation does not write a shared line each time.
        if this.sweep_wanted.load(Ordering::Relaxed) {
            return;
        }
        this.sweep_wanted.store(true, Ordering::Relaxed);
        let mut control = lock(&this.control);
        if control.shutdown {
            return;
        }
        let at = this.clock.now_ms() + SWEEP_MIN_MS;
        control.sweep_delay = SWEEP_MIN_MS;
        if control.sweep_at.is_none_or(|t| t > at) {
            control.sweep_at = Some(at);
        }
        Self::wake_thread(this, at);
    }

    /// After a lease was put on a shard's wheel at `at` (and the shard's
    /// lock let go): starts the thread if needed, and wakes it if it
    /// sleeps past `at`. Takes the control lock only then.
    fn wake_for_lease(this: &Arc<Self>, at: u64) {
        // Relaxed, both: a look that decides only whether to take the
        // control lock, under which `wake_thread` looks again. Why a
        // stale `sleeping_until` is never too late: the module doc's
        // "No lost wake" (the shard's lock orders the thread's store
        // before this load).
        if this.started.load(Ordering::Relaxed) && at >= this.sleeping_until.load(Ordering::Relaxed)
        {
            return;
        }
        let control = lock(&this.control);
        if control.shutdown {
            return;
        }
        Self::wake_thread(this, at);
        drop(control);
    }

    /// Under the control lock: starts the thread if needed, and wakes it if
    /// it sleeps past `at`.
    fn wake_thread(this: &Arc<Self>, at: u64) {
        // Relaxed, both: written only under the control lock, which the
        // caller holds.
        if !this.started.load(Ordering::Relaxed) {
            // Without a thread, timers and sweeps wait for the next caller
            // to try again (reclaim_idle still works by hand).
            if Self::spawn(this) {
                this.started.store(true, Ordering::Relaxed);
            }
        } else if at < this.sleeping_until.load(Ordering::Relaxed) {
            this.cv.notify_one();
            // Relaxed: a count the model reads after joining.
            #[cfg(loom)]
            this.wakes.fetch_add(1, Ordering::Relaxed);
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

    /// Moves the entries due by `now` into `due`: the lines', then each
    /// shard's (each under its own lock, taken in turn).
    fn take_due_entries(&self, control: &mut Control, now: u64, due: &mut DueNow<L>) {
        control.lines.advance(now, &mut due.lines);
        for shard in self.shards.iter() {
            lock(&shard.leases).wheel.advance(now, &mut due.leases);
        }
    }

    /// Under loom: fires every pending timer as if its deadline had passed.
    #[cfg(loom)]
    pub(crate) fn fire_all(&self) {
        let mut due = DueNow::new();
        let now = u64::MAX / 2;
        self.take_due_entries(&mut lock(&self.control), now, &mut due);
        for lease in due.leases {
            lease.fire(now);
        }
        // Every deadline has passed: nothing is left to cover.
        for line in due.lines {
            line.fire(now);
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
        let mut due = DueNow::new();
        loop {
            // After a panic, the entries not yet fired stay in `due`, for
            // the next turn.
            if let Ok(false) = catch_unwind(AssertUnwindSafe(|| self.turn(&mut due))) {
                return;
            }
        }
    }

    /// One turn of the loop; answers false at shutdown.
    fn turn(&self, due: &mut DueNow<L>) -> bool {
        let now = self.clock.now_ms();
        let Some(sweep_now) = self.take_due(now, due) else {
            return false;
        };
        self.fire_lines(now, &mut due.lines);
        self.fire_leases(now, &mut due.leases);
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
        if !lock(&self.control).ticking {
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
        let mut control = lock(&self.control);
        control.idle_ticks = if active { 0 } else { control.idle_ticks + 1 };
        if control.idle_ticks < IDLE_TICKS {
            return false;
        }
        control.idle_ticks = 0;
        true
    }

    /// Moves the entries due by `now` into `due`; answers whether a sweep is
    /// due too, or `None` at shutdown.
    fn take_due(&self, now: u64, due: &mut DueNow<L>) -> Option<bool> {
        let mut control = lock(&self.control);
        if control.shutdown {
            return None;
        }
        self.take_due_entries(&mut control, now, due);
        let sweep_now = control.sweep_at.is_some_and(|t| t <= now);
        if sweep_now {
            control.sweep_at = None;
            // Relaxed: a hint (see `want_sweep`); a creation racing this
            // store asks again, or is caught by the next sweep.
            self.sweep_wanted.store(false, Ordering::Relaxed);
        }
        Some(sweep_now)
    }

    /// Fires the lines in `due` (outside every lock: a waker may take
    /// one). Taken one at a time, so a panic leaves the rest for the next
    /// turn; a line whose firing panicked (a waker's) is fired again a tick
    /// later, for the tasks it did not reach.
    fn fire_lines(&self, now: u64, due: &mut Vec<Box<dyn LineDue>>) {
        while let Some(line) = due.pop() {
            let again = match catch_unwind(AssertUnwindSafe(|| line.fire(now))) {
                Ok(at) => at,
                Err(_) => Some(now + TICK_MS),
            };
            if let Some(at) = again {
                let mut control = lock(&self.control);
                if !control.shutdown {
                    control.lines.insert(line, at);
                }
            }
        }
    }

    /// Fires the leases in `due` (outside every lock: a lease's end takes
    /// its shard's), re-arming a lease renewed since it was armed. Taken
    /// one at a time, so a panic leaves the rest for the next turn.
    fn fire_leases(&self, now: u64, due: &mut Vec<Arc<L>>) {
        while let Some(lease) = due.pop() {
            if !lease.fire(now) {
                self.rearm(&lease);
            }
        }
    }

    /// Arms a lease renewed since it was armed again at its new expiry,
    /// unless its holder let go meanwhile: checked under its shard's lock,
    /// which its end takes (in `cancel`) after its status CAS, so a lease
    /// that ended is never put back.
    fn rearm(&self, lease: &Arc<L>) {
        let mut leases = lock(self.shard(lease.home()));
        if lease.is_active() && !leases.closed {
            if let Some(at) = lease.due_ms() {
                let key = leases.wheel.insert(lease.clone(), at);
                lease.set_timer_key(Some(key));
            }
        }
    }

    /// Sweeps the store's idle keys, and plans the next sweep while any key
    /// is live. Answers false once the store is gone.
    fn sweep(&self) -> bool {
        let Some(live) = self.sweeper.get().and_then(|sweep| sweep()) else {
            return false;
        };
        let mut control = lock(&self.control);
        if live > 0 && control.sweep_at.is_none() && !control.shutdown {
            control.sweep_delay = (control.sweep_delay * 2).min(SWEEP_MAX_MS);
            control.sweep_at = Some(self.clock.now_ms() + control.sweep_delay);
        }
        true
    }

    /// Sleeps until the next deadline or sweep (or a wake for an earlier
    /// one). Answers false at shutdown.
    fn sleep(&self) -> bool {
        let mut control = lock(&self.control);
        if control.shutdown {
            return false;
        }
        let now = self.clock.now_ms();
        let tick_at = control.ticking.then_some(now + TICK_MS);
        let own = [control.lines.next_deadline(), control.sweep_at, tick_at]
            .into_iter()
            .flatten()
            .min();
        match self.plan_sleep(own) {
            Some(at) if at <= now => {}
            Some(at) => control = self.wait(control, Some(at - now)),
            None => control = self.wait(control, None),
        }
        // Relaxed: written under the control lock, which `wake_thread`
        // reads it under; an arm that reads 0 leaves the thread be, and
        // the thread looks at its shard before it sleeps again.
        self.sleeping_until.store(0, Ordering::Relaxed);
        drop(control);
        true
    }

    /// Waits on the condition variable, `ms` at most (`None`: untimed).
    fn wait<'a>(
        &self,
        control: crate::sync::MutexGuard<'a, Control>,
        ms: Option<u64>,
    ) -> crate::sync::MutexGuard<'a, Control> {
        match ms {
            Some(ms) => match self
                .cv
                .wait_timeout(control, std::time::Duration::from_millis(ms))
            {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            },
            None => match self.cv.wait(control) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            },
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A lease that only reports its firing.
    struct Fake {
        due_ms: u64,
        home: usize,
        timer: AtomicU64,
        fired: mpsc::SyncSender<u64>,
        ended: AtomicBool,
    }

    impl Due for Fake {
        fn due_ms(&self) -> Option<u64> {
            Some(self.due_ms)
        }
        fn fire(&self, now_ms: u64) -> bool {
            if now_ms < self.due_ms {
                return false;
            }
            self.ended.store(true, Ordering::SeqCst);
            let _ = self.fired.send(now_ms);
            true
        }
        fn is_active(&self) -> bool {
            !self.ended.load(Ordering::SeqCst)
        }
        fn timed_key(&self) -> (usize, u64) {
            (self as *const Fake as usize, 0)
        }
        fn home(&self) -> usize {
            self.home
        }
        fn timer_key(&self) -> Option<TimerKey> {
            TimerKey::unpack(self.timer.load(Ordering::Relaxed))
        }
        fn set_timer_key(&self, key: Option<TimerKey>) {
            let v = key.map_or(u64::MAX, TimerKey::pack);
            self.timer.store(v, Ordering::Relaxed);
        }
    }

    fn fake(driver: &Driver<Fake>, in_ms: u64, tx: &mpsc::SyncSender<u64>) -> Arc<Fake> {
        Arc::new(Fake {
            due_ms: driver.clock.now_ms() + in_ms,
            home: this_thread_number(),
            timer: AtomicU64::new(u64::MAX),
            fired: tx.clone(),
            ended: AtomicBool::new(false),
        })
    }

    /// The thread sleeps for a lease a minute away; leases armed later on
    /// other threads (every shard, several on each) for 100 ms from now
    /// wake it, each fires at or after its deadline, and none is lost. (No
    /// sweeper is installed, so nothing else wakes the thread: a lost wake
    /// is the minute, which the 20 s bound catches.)
    #[test]
    fn an_earlier_lease_on_any_shard_wakes_the_sleeping_thread() {
        let driver = Arc::new(Driver::new(Arc::new(Clock::new())));
        let (tx, rx) = mpsc::sync_channel(1024);
        let long = fake(&driver, 60_000, &tx);
        Driver::arm(&driver, &long);
        std::thread::sleep(Duration::from_millis(50));
        let threads = 3 * shard_count();
        let leases: Vec<Arc<Fake>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let lease = fake(&driver, 100, &tx);
                        Driver::arm(&driver, &lease);
                        lease
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for _ in 0..threads {
            let fired_at = rx
                .recv_timeout(Duration::from_secs(20))
                .expect("a lost wake");
            assert!(leases.iter().any(|l| l.due_ms <= fired_at));
        }
        assert!(leases.iter().all(|l| !l.is_active()));
        assert!(long.is_active());
        // A fake's firing does not end it as a lease's does (whose end
        // cancels): each is cancelled here, from this one thread, on its
        // own home shard.
        assert_eq!(driver.timed_len(), threads + 1);
        for lease in leases.iter().chain([&long]) {
            driver.cancel(lease);
        }
        assert_eq!(driver.timed_len(), 0);
        driver.shut_down();
    }
}
