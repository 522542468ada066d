//! The hot paths' guard: the rows a change to the core's fast paths can
//! slow down, run for several cores (revisions, built side by side by
//! `compare_cores.sh --guard`) and their anchors in one process, rounds
//! alternating, and printed as ratios with their spread.
//!
//! Rows (each a rate, operations a second, over [`Bench::span`]):
//! - `hold`: one thread holds and lets go of one key;
//! - `guard`: the `hold` row through a guard (`let _g = lock.lock(k)`),
//!   which must cost what the closure hold costs;
//! - `try-held`: one thread tries a key another thread holds;
//! - `hold-max`: the `hold` row through a lock opened with
//!   `max_hold(120 s)`, as README's first example opens it;
//! - `hold-2t`, `hold-max-2t`: two threads, each holding a key of its own,
//!   through a plain lock and through a `max_hold(120 s)` one;
//! - `lease-ttl`, `lease-ttl-2t`: one and two threads, each on a key of
//!   its own, taking a handle lease (`acquire`, then `release`) through a
//!   lock opened with `ttl(10 s)`, as every server HOLD does: the lease is
//!   armed on the store's timer and disarmed at its release. Besides the
//!   timer (a shard per thread since 4e17495), each lease clones and drops
//!   the store's and the lock's `Arc`s, which both threads share: with two
//!   free cores that is what keeps `lease-ttl-2t` below `lease-ttl`;
//! - `hot-4t`, `hot-8t`: that many threads on one key, more threads than
//!   this machine's cores, so the head of the line is often parked;
//!   `hot-4t-bypass`, `hot-8t-bypass`: the same through a lock opened with
//!   bounded bypass (`Fairness::BOUNDED`);
//! - `async-hot-4`, `async-hot-64`: that many tasks on one key, on a
//!   runtime of one worker per CPU, each yielding after [`BATCH`] holds;
//! - `sem-2x8`: [`SEM_TASKS`] tasks on one key of [`SEM_PERMITS`] permits,
//!   [`work`] inside each hold, so that grants side by side matter;
//! - `read-mostly`: [`RW_THREADS`] threads on [`RW_KEYS`] keys of
//!   [`RW_PERMITS`] permits, 1 hold in [`RW_WRITE_EVERY`] exclusive,
//!   [`work`] inside each; `read-mostly-8t`: the same on 8 threads,
//!   and `read-mostly-8t-bypass` through a lock with bounded bypass;
//! - `rw-tasks`: [`RW_TASKS`] tasks on [`RW_TASK_KEYS`] keys of
//!   [`RW_PERMITS`] permits, 1 hold in [`RW_TASK_WRITE_EVERY`] exclusive,
//!   [`work`] inside each, against tokio's `RwLock`.
//!
//! A design answers `None` for a row it has no way to run (a revision
//! older than permits has no semaphore row, one older than guards no
//! guard row). Ratios are taken round by
//! round between the working tree's core (`now`) and every other design
//! that ran the row: above 1, `now` is faster.

use std::future::Future;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use dashmap::DashMap;
/// The runtime the async rows use, for the cores' rows made by [`guard_core!`].
pub use tokio;
use tokio::runtime::Runtime;

/// Holds between two looks at the stop flag (and, for tasks, a yield).
pub const BATCH: u64 = 64;
/// Permits of the semaphore row's key, and its tasks.
pub const SEM_PERMITS: u32 = 2;
pub const SEM_TASKS: usize = 8;
/// The read-mostly row: permits per key (a read takes one, a write all),
/// keys, threads, and 1 exclusive hold in this many.
pub const RW_PERMITS: u32 = 1024;
pub const RW_KEYS: usize = 16;
pub const RW_THREADS: usize = 2;
pub const RW_WRITE_EVERY: usize = 20;
/// The read-write tasks row: tasks, keys, and 1 exclusive hold in this many.
pub const RW_TASKS: usize = 16;
pub const RW_TASK_KEYS: usize = 4;
pub const RW_TASK_WRITE_EVERY: usize = 10;
/// Rounds of xorshift inside a permits row's hold.
pub const HOLD_WORK: u32 = 64;

/// The guard's rows, in the order they print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Row {
    Hold,
    Guard,
    TryHeld,
    HoldMax,
    Hold2,
    HoldMax2,
    LeaseTtl,
    LeaseTtl2,
    Hot4,
    Hot8,
    Hot4Bypass,
    Hot8Bypass,
    AsyncHot4,
    AsyncHot64,
    Semaphore,
    ReadMostly,
    ReadMostly8,
    ReadMostly8Bypass,
    RwTasks,
}

impl Row {
    pub const ALL: [Row; 19] = [
        Row::Hold,
        Row::Guard,
        Row::TryHeld,
        Row::HoldMax,
        Row::Hold2,
        Row::HoldMax2,
        Row::LeaseTtl,
        Row::LeaseTtl2,
        Row::Hot4,
        Row::Hot8,
        Row::Hot4Bypass,
        Row::Hot8Bypass,
        Row::AsyncHot4,
        Row::AsyncHot64,
        Row::Semaphore,
        Row::ReadMostly,
        Row::ReadMostly8,
        Row::ReadMostly8Bypass,
        Row::RwTasks,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Row::Hold => "hold",
            Row::Guard => "guard",
            Row::TryHeld => "try-held",
            Row::HoldMax => "hold-max",
            Row::Hold2 => "hold-2t",
            Row::HoldMax2 => "hold-max-2t",
            Row::LeaseTtl => "lease-ttl",
            Row::LeaseTtl2 => "lease-ttl-2t",
            Row::Hot4 => "hot-4t",
            Row::Hot8 => "hot-8t",
            Row::Hot4Bypass => "hot-4t-bypass",
            Row::Hot8Bypass => "hot-8t-bypass",
            Row::AsyncHot4 => "async-hot-4",
            Row::AsyncHot64 => "async-hot-64",
            Row::Semaphore => "sem-2x8",
            Row::ReadMostly => "read-mostly",
            Row::ReadMostly8 => "read-mostly-8t",
            Row::ReadMostly8Bypass => "read-mostly-8t-bypass",
            Row::RwTasks => "rw-tasks",
        }
    }

    /// Threads of a thread hot key row.
    pub fn hot_threads(self) -> usize {
        match self {
            Row::Hot8 | Row::Hot8Bypass => 8,
            _ => 4,
        }
    }

    /// Threads of a read-mostly row.
    pub fn rw_threads(self) -> usize {
        match self {
            Row::ReadMostly8 | Row::ReadMostly8Bypass => 8,
            _ => RW_THREADS,
        }
    }

    /// Threads of a row of keys of their own, and whether its lock has a
    /// maxHold.
    pub fn own_keys(self) -> (usize, bool) {
        match self {
            Row::HoldMax => (1, true),
            Row::Hold2 => (2, false),
            Row::HoldMax2 => (2, true),
            Row::LeaseTtl2 => (2, false),
            _ => (1, false),
        }
    }

    /// Tasks of an async hot key row.
    pub fn hot_tasks(self) -> usize {
        match self {
            Row::AsyncHot64 => 64,
            _ => 4,
        }
    }
}

/// What every row runs on: the tasks' runtime and how long a row lasts.
pub struct Bench {
    pub rt: Runtime,
    pub span: Duration,
}

impl Bench {
    /// A runtime of one worker per CPU (as the harness's async rows).
    pub fn new(span: Duration) -> Bench {
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_time()
            .build()
            .expect("tokio runtime");
        Bench { rt, span }
    }
}

/// A design the guard runs: a core revision or an anchor.
pub trait GuardDesign: Send + Sync {
    /// Operations a second of `row`, or `None` when it has no such row.
    fn rate(&self, row: Row, bench: &Bench) -> Option<f64>;
}

/// The fixed work inside a permits row's hold.
#[inline]
pub fn work() {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..HOLD_WORK {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = black_box(x);
    }
}

/// Whether hold `i` of thread or task `t` of the read-mostly row is exclusive.
#[inline]
pub fn rw_exclusive(t: usize, i: usize) -> bool {
    // A match, not `is_multiple_of`: newer than the workspace's rust-version.
    matches!((i + t) % RW_WRITE_EVERY, 0)
}

/// The read-mostly row's keys.
pub fn rw_keys() -> Vec<String> {
    (0..RW_KEYS).map(|k| format!("rw-{k}")).collect()
}

/// The key of hold `i` of task `t` in the read-write tasks row, and
/// whether that hold is exclusive.
#[inline]
pub fn rw_task_hold(t: usize, i: usize) -> (usize, bool) {
    let key = (i * 7 + t) % RW_TASK_KEYS;
    (key, matches!((i + t) % RW_TASK_WRITE_EVERY, 0))
}

/// `threads` threads each run `body(t, stop)` until `stop`; answers the
/// sum of what they return (operations) a second.
pub fn thread_rate(
    threads: usize,
    span: Duration,
    body: impl Fn(usize, &AtomicBool) -> u64 + Sync,
) -> f64 {
    let stop = AtomicBool::new(false);
    let start = Barrier::new(threads + 1);
    let (ops, secs) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, start, body) = (&stop, &start, &body);
                s.spawn(move || {
                    start.wait();
                    body(t, stop)
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        std::thread::sleep(span);
        stop.store(true, Relaxed);
        let ops: u64 = handles
            .into_iter()
            .map(|h| h.join().expect("row thread"))
            .sum();
        (ops, t0.elapsed().as_secs_f64())
    });
    ops as f64 / secs
}

/// `tasks` tasks on the bench's runtime, each `body(t, stop)`, until
/// `stop`; answers the sum of what they return a second.
pub fn task_rate<F, Fut>(bench: &Bench, tasks: usize, body: F) -> f64
where
    F: Fn(usize, Arc<AtomicBool>) -> Fut,
    Fut: Future<Output = u64> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let span = bench.span;
    bench.rt.block_on(async {
        let t0 = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|t| tokio::spawn(body(t, stop.clone())))
            .collect();
        tokio::time::sleep(span).await;
        stop.store(true, Relaxed);
        let mut ops = 0;
        for h in handles {
            ops += h.await.expect("row task");
        }
        ops as f64 / t0.elapsed().as_secs_f64()
    })
}

/// The maxHold of the rows that have one: README's.
pub const MAX_HOLD: Duration = Duration::from_secs(120);
/// The ttl of the handle lease rows (the server's default).
pub const TTL: Duration = Duration::from_secs(10);

/// Each thread's key in the rows of keys of their own.
pub const OWN_KEYS: [&str; 2] = ["own-0", "own-1"];

/// Runs `body` while another thread holds a key through `hold_until`
/// (which must call `held.wait()` once it holds, then `done.wait()`).
pub fn beside_a_holder<R>(
    hold_until: impl FnOnce(&Barrier, &Barrier) + Send,
    body: impl FnOnce() -> R,
) -> R {
    let (held, done) = (Barrier::new(2), Barrier::new(2));
    std::thread::scope(|s| {
        s.spawn(|| hold_until(&held, &done));
        held.wait();
        let r = body();
        done.wait();
        r
    })
}

/// Defines `$name`, a [`GuardDesign`] over the core crate `$krate`; with
/// `permits`, the semaphore and read-write rows too (cores since permits);
/// with `permits, guard`, the guard row too (cores since guards); with
/// `permits, guard, bypass`, the bounded bypass rows too (cores since
/// `Fairness`).
#[macro_export]
macro_rules! guard_core {
    ($name:ident, $krate:ident) => {
        $crate::guard_core!(@define $name, $krate);
        $crate::guard_core!(@no_guard $name);
        $crate::guard_core!(@no_bypass $name);
        impl $name {
            fn permit_rate(&self, _row: $crate::guard::Row, _b: &$crate::guard::Bench) -> Option<f64> {
                None
            }
        }
    };
    ($name:ident, $krate:ident, permits) => {
        $crate::guard_core!(@permits $name, $krate);
        $crate::guard_core!(@no_guard $name);
        $crate::guard_core!(@no_bypass $name);
    };
    ($name:ident, $krate:ident, permits, guard) => {
        $crate::guard_core!(@permits $name, $krate);
        $crate::guard_core!(@guard $name);
        $crate::guard_core!(@no_bypass $name);
    };
    ($name:ident, $krate:ident, permits, guard, bypass) => {
        $crate::guard_core!(@permits $name, $krate);
        $crate::guard_core!(@guard $name);
        $crate::guard_core!(@bypass $name, $krate);
    };
    (@hot $lock:ident, $row:ident, $b:ident) => {{
        use ::std::sync::atomic::Ordering::Relaxed;
        Some($crate::guard::thread_rate($row.hot_threads(), $b.span, |_, stop| {
            let mut n = 0;
            while !stop.load(Relaxed) {
                for _ in 0..$crate::guard::BATCH {
                    $lock.hold(::std::hint::black_box("hot"), |_| ()).expect("hold");
                }
                n += $crate::guard::BATCH;
            }
            n
        }))
    }};
    (@read_mostly $lock:ident, $row:ident, $b:ident) => {{
        use $crate::guard::{rw_exclusive, rw_keys, work, BATCH};
        use ::std::sync::atomic::Ordering::Relaxed;
        let keys = rw_keys();
        Some($crate::guard::thread_rate($row.rw_threads(), $b.span, |t, stop| {
            let (mut i, mut n) = (0usize, 0u64);
            while !stop.load(Relaxed) {
                for _ in 0..BATCH {
                    let key = keys[(i + t) % keys.len()].as_str();
                    if rw_exclusive(t, i) {
                        $lock.key(key).exclusive().hold(|_| work()).expect("hold");
                    } else {
                        $lock.hold(key, |_| work()).expect("hold");
                    }
                    i = i.wrapping_add(1);
                }
                n += BATCH;
            }
            n
        }))
    }};
    (@no_bypass $name:ident) => {
        impl $name {
            fn bypass_rate(&self, _row: $crate::guard::Row, _b: &$crate::guard::Bench) -> Option<f64> {
                None
            }
        }
    };
    (@bypass $name:ident, $krate:ident) => {
        impl $name {
            /// The hot key and read-mostly rows through a lock opened with
            /// bounded bypass (`Fairness::BOUNDED`).
            fn bypass_rate(&self, row: $crate::guard::Row, b: &$crate::guard::Bench) -> Option<f64> {
                use $crate::guard::Row;
                let bounded = ::$krate::Fairness::BOUNDED;
                if row == Row::ReadMostly8Bypass {
                    let lock = self.store.lock("guard-rw-bypass").permits($crate::guard::RW_PERMITS)
                        .fairness(bounded).open().expect("open");
                    return $crate::guard_core!(@read_mostly lock, row, b);
                }
                let lock = self.store.lock("guard-bypass").fairness(bounded).open().expect("open");
                $crate::guard_core!(@hot lock, row, b)
            }
        }
    };
    (@guard $name:ident) => {
        impl $name {
            /// The `hold` row through a guard held until dropped.
            fn guard_rate(&self, b: &$crate::guard::Bench) -> Option<f64> {
                use ::std::sync::atomic::Ordering::Relaxed;
                let lock = self.store.lock("guard").open().expect("open");
                Some($crate::guard::thread_rate(1, b.span, |_, stop| {
                    let mut n = 0;
                    while !stop.load(Relaxed) {
                        for _ in 0..$crate::guard::BATCH {
                            let _g = lock.lock(::std::hint::black_box("k")).expect("lock");
                        }
                        n += $crate::guard::BATCH;
                    }
                    n
                }))
            }
        }
    };
    (@no_guard $name:ident) => {
        impl $name {
            fn guard_rate(&self, _b: &$crate::guard::Bench) -> Option<f64> {
                None
            }
        }
    };
    (@permits $name:ident, $krate:ident) => {
        $crate::guard_core!(@define $name, $krate);
        impl $name {
            fn permit_rate(&self, row: $crate::guard::Row, b: &$crate::guard::Bench) -> Option<f64> {
                use $crate::guard::{work, Row, BATCH};
                use ::std::sync::atomic::Ordering::Relaxed;
                match row {
                    Row::Semaphore => {
                        let lock = ::std::sync::Arc::new(
                            self.store.lock("guard-sem").permits($crate::guard::SEM_PERMITS).open().expect("open"),
                        );
                        Some($crate::guard::task_rate(b, $crate::guard::SEM_TASKS, |_, stop| {
                            let lock = lock.clone();
                            async move {
                                let mut n = 0;
                                while !stop.load(Relaxed) {
                                    for _ in 0..BATCH {
                                        lock.hold_async("sem", async |_| work()).await.expect("hold");
                                    }
                                    n += BATCH;
                                    $crate::guard::tokio::task::yield_now().await;
                                }
                                n
                            }
                        }))
                    }
                    Row::ReadMostly | Row::ReadMostly8 => {
                        let lock = self.store.lock("guard-rw").permits($crate::guard::RW_PERMITS).open().expect("open");
                        $crate::guard_core!(@read_mostly lock, row, b)
                    }
                    Row::RwTasks => {
                        let lock = ::std::sync::Arc::new(
                            self.store.lock("guard-rwt").permits($crate::guard::RW_PERMITS).open().expect("open"),
                        );
                        Some($crate::guard::task_rate(b, $crate::guard::RW_TASKS, |t, stop| {
                            let lock = lock.clone();
                            async move {
                                let (mut i, mut n) = (0usize, 0u64);
                                while !stop.load(Relaxed) {
                                    for _ in 0..BATCH {
                                        let (key, exclusive) = $crate::guard::rw_task_hold(t, i);
                                        if exclusive {
                                            lock.key(&key).exclusive().hold_async(async |_| work()).await.expect("hold");
                                        } else {
                                            lock.hold_async(&key, async |_| work()).await.expect("hold");
                                        }
                                        i = i.wrapping_add(1);
                                    }
                                    n += BATCH;
                                    $crate::guard::tokio::task::yield_now().await;
                                }
                                n
                            }
                        }))
                    }
                    _ => None,
                }
            }
        }
    };
    (@define $name:ident, $krate:ident) => {
        /// A core revision, as the guard runs it.
        pub struct $name {
            store: ::$krate::Store,
        }

        impl Default for $name {
            fn default() -> Self {
                $name { store: ::$krate::Store::new() }
            }
        }

        impl $crate::guard::GuardDesign for $name {
            fn rate(&self, row: $crate::guard::Row, b: &$crate::guard::Bench) -> Option<f64> {
                use $crate::guard::{Row, BATCH};
                use ::std::sync::atomic::Ordering::Relaxed;
                let lock = self.store.lock("guard").open().expect("open");
                match row {
                    Row::Hold => Some($crate::guard::thread_rate(1, b.span, |_, stop| {
                        let mut n = 0;
                        while !stop.load(Relaxed) {
                            for _ in 0..BATCH {
                                lock.hold(::std::hint::black_box("k"), |_| ()).expect("hold");
                            }
                            n += BATCH;
                        }
                        n
                    })),
                    Row::HoldMax | Row::Hold2 | Row::HoldMax2 => {
                        let (threads, max) = row.own_keys();
                        let builder = self.store.lock("guard-own");
                        let lock = if max {
                            builder.max_hold($crate::guard::MAX_HOLD).open()
                        } else {
                            builder.open()
                        }
                        .expect("open");
                        Some($crate::guard::thread_rate(threads, b.span, |t, stop| {
                            let key = $crate::guard::OWN_KEYS[t];
                            let mut n = 0;
                            while !stop.load(Relaxed) {
                                for _ in 0..BATCH {
                                    lock.hold(::std::hint::black_box(key), |_| ()).expect("hold");
                                }
                                n += BATCH;
                            }
                            n
                        }))
                    }
                    Row::LeaseTtl | Row::LeaseTtl2 => {
                        let (threads, _) = row.own_keys();
                        let lock = self.store.lock("guard-ttl").ttl($crate::guard::TTL).open().expect("open");
                        Some($crate::guard::thread_rate(threads, b.span, |t, stop| {
                            let key = $crate::guard::OWN_KEYS[t];
                            let mut n = 0;
                            while !stop.load(Relaxed) {
                                for _ in 0..BATCH {
                                    lock.acquire(::std::hint::black_box(key))
                                        .expect("acquire")
                                        .release()
                                        .expect("release");
                                }
                                n += BATCH;
                            }
                            n
                        }))
                    }
                    Row::TryHeld => Some($crate::guard::beside_a_holder(
                        |held, done| {
                            lock.hold("held", |_| {
                                held.wait();
                                done.wait();
                            })
                            .expect("hold");
                        },
                        || {
                            $crate::guard::thread_rate(1, b.span, |_, stop| {
                                let mut n = 0;
                                while !stop.load(Relaxed) {
                                    for _ in 0..BATCH {
                                        let tried = lock.try_hold(::std::hint::black_box("held"), |_| ());
                                        assert!(tried.expect("try_hold").is_none());
                                    }
                                    n += BATCH;
                                }
                                n
                            })
                        },
                    )),
                    Row::Hot4 | Row::Hot8 => $crate::guard_core!(@hot lock, row, b),
                    Row::AsyncHot4 | Row::AsyncHot64 => {
                        let lock = ::std::sync::Arc::new(lock);
                        Some($crate::guard::task_rate(b, row.hot_tasks(), |_, stop| {
                            let lock = lock.clone();
                            async move {
                                let mut n = 0;
                                while !stop.load(Relaxed) {
                                    for _ in 0..BATCH {
                                        lock.hold_async("hot", async |_| ::std::hint::black_box(()))
                                            .await
                                            .expect("hold");
                                    }
                                    n += BATCH;
                                    $crate::guard::tokio::task::yield_now().await;
                                }
                                n
                            }
                        }))
                    }
                    Row::Guard => self.guard_rate(b),
                    Row::Hot4Bypass | Row::Hot8Bypass | Row::ReadMostly8Bypass => {
                        self.bypass_rate(row, b)
                    }
                    _ => self.permit_rate(row, b),
                }
            }
        }
    };
}

guard_core!(HoldlineGuard, holdline, permits, guard, bypass);

/// The anchors: the dashmap + parking_lot pattern for the thread rows,
/// tokio's mutex per key for the async hot key, tokio's `Semaphore` for
/// the semaphore row, `parking_lot::RwLock` for the read-mostly row, each
/// in a `DashMap` per key as a user would keep them.
#[derive(Default)]
pub struct Anchors {
    mutexes: crate::DashPl,
    tokio_mutexes: Arc<DashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    semaphores: Arc<DashMap<String, Arc<tokio::sync::Semaphore>>>,
    rwlocks: DashMap<String, Arc<parking_lot::RwLock<()>>>,
    tokio_rwlocks: Arc<DashMap<usize, Arc<tokio::sync::RwLock<()>>>>,
}

/// The value of `key` in `map`, made by `make` on first use.
fn entry<K, Q, V>(map: &DashMap<K, V>, key: &Q, make: impl FnOnce() -> V) -> V
where
    K: std::hash::Hash + Eq + std::borrow::Borrow<Q>,
    Q: std::hash::Hash + Eq + ToOwned<Owned = K> + ?Sized,
    V: Clone,
{
    if let Some(v) = map.get(key) {
        return v.value().clone();
    }
    map.entry(key.to_owned())
        .or_insert_with(make)
        .value()
        .clone()
}

impl GuardDesign for Anchors {
    fn rate(&self, row: Row, b: &Bench) -> Option<f64> {
        Some(match row {
            // parking_lot's guard is the anchor of both: a mutex per key
            // in the map, held until its guard drops.
            Row::Hold | Row::Guard => thread_rate(1, b.span, |_, stop| {
                let mut n = 0;
                while !stop.load(Relaxed) {
                    for _ in 0..BATCH {
                        let m = crate::dash_get(&self.mutexes, black_box("k"));
                        let _g = m.lock();
                    }
                    n += BATCH;
                }
                n
            }),
            Row::HoldMax | Row::Hold2 | Row::HoldMax2 | Row::LeaseTtl | Row::LeaseTtl2 => {
                thread_rate(row.own_keys().0, b.span, |t, stop| {
                    let mut n = 0;
                    while !stop.load(Relaxed) {
                        for _ in 0..BATCH {
                            let m = crate::dash_get(&self.mutexes, black_box(OWN_KEYS[t]));
                            let _g = m.lock();
                        }
                        n += BATCH;
                    }
                    n
                })
            }
            Row::Hot4 | Row::Hot8 | Row::Hot4Bypass | Row::Hot8Bypass => {
                thread_rate(row.hot_threads(), b.span, |_, stop| {
                    let mut n = 0;
                    while !stop.load(Relaxed) {
                        for _ in 0..BATCH {
                            let m = crate::dash_get(&self.mutexes, black_box("hot"));
                            let _g = m.lock();
                        }
                        n += BATCH;
                    }
                    n
                })
            }
            Row::TryHeld => beside_a_holder(
                |held, done| {
                    let m = crate::dash_get(&self.mutexes, "held");
                    let _g = m.lock();
                    held.wait();
                    done.wait();
                },
                || {
                    thread_rate(1, b.span, |_, stop| {
                        let mut n = 0;
                        while !stop.load(Relaxed) {
                            for _ in 0..BATCH {
                                let m = crate::dash_get(&self.mutexes, black_box("held"));
                                assert!(m.try_lock().is_none());
                            }
                            n += BATCH;
                        }
                        n
                    })
                },
            ),
            Row::AsyncHot4 | Row::AsyncHot64 => task_rate(b, row.hot_tasks(), |_, stop| {
                let map = self.tokio_mutexes.clone();
                async move {
                    let mut n = 0;
                    while !stop.load(Relaxed) {
                        for _ in 0..BATCH {
                            let m = entry(&map, "hot", Default::default);
                            let _g = m.lock().await;
                            black_box(());
                        }
                        n += BATCH;
                        tokio::task::yield_now().await;
                    }
                    n
                }
            }),
            Row::Semaphore => task_rate(b, SEM_TASKS, |_, stop| {
                let map = self.semaphores.clone();
                async move {
                    let mut n = 0;
                    while !stop.load(Relaxed) {
                        for _ in 0..BATCH {
                            let s = entry(&map, "sem", || {
                                Arc::new(tokio::sync::Semaphore::new(SEM_PERMITS as usize))
                            });
                            let _p = s.acquire().await.expect("open");
                            work();
                        }
                        n += BATCH;
                        tokio::task::yield_now().await;
                    }
                    n
                }
            }),
            Row::RwTasks => task_rate(b, RW_TASKS, |t, stop| {
                let map = self.tokio_rwlocks.clone();
                async move {
                    let (mut i, mut n) = (0usize, 0u64);
                    while !stop.load(Relaxed) {
                        for _ in 0..BATCH {
                            let (key, exclusive) = rw_task_hold(t, i);
                            let l = entry(&map, &key, Default::default);
                            if exclusive {
                                let _g = l.write().await;
                                work();
                            } else {
                                let _g = l.read().await;
                                work();
                            }
                            i = i.wrapping_add(1);
                        }
                        n += BATCH;
                        tokio::task::yield_now().await;
                    }
                    n
                }
            }),
            Row::ReadMostly | Row::ReadMostly8 | Row::ReadMostly8Bypass => {
                let keys = rw_keys();
                thread_rate(row.rw_threads(), b.span, |t, stop| {
                    let (mut i, mut n) = (0usize, 0u64);
                    while !stop.load(Relaxed) {
                        for _ in 0..BATCH {
                            let key = keys[(i + t) % keys.len()].as_str();
                            let l = entry(&self.rwlocks, key, Default::default);
                            if rw_exclusive(t, i) {
                                let _g = l.write();
                                work();
                            } else {
                                let _g = l.read();
                                work();
                            }
                            i = i.wrapping_add(1);
                        }
                        n += BATCH;
                    }
                    n
                })
            }
        })
    }
}

/// The anchor's name for `row`, as the summary prints it.
pub fn anchor_name(row: Row) -> &'static str {
    match row {
        Row::Hold
        | Row::Guard
        | Row::TryHeld
        | Row::HoldMax
        | Row::Hold2
        | Row::HoldMax2
        | Row::LeaseTtl
        | Row::LeaseTtl2
        | Row::Hot4
        | Row::Hot8
        | Row::Hot4Bypass
        | Row::Hot8Bypass => "dashmap+pl",
        Row::AsyncHot4 | Row::AsyncHot64 => "tokio-mutex",
        Row::Semaphore => "tokio-sem",
        Row::ReadMostly | Row::ReadMostly8 | Row::ReadMostly8Bypass => "pl-rwlock",
        Row::RwTasks => "tokio-rwlock",
    }
}

/// The median of `xs` (sorted here), and its least and greatest.
fn spread(xs: &mut [f64]) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    let median = if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    };
    (median, xs[0], xs[n - 1])
}

/// `compare_cores.sh --guard`'s program: `rounds` rounds of every row,
/// each design in turn (the order rotated each round), then per row each
/// design's median rate and `now`'s ratio to each other design, round by
/// round: median [least, greatest].
pub fn guard_main(cores: &[(&str, Box<dyn GuardDesign>)]) {
    let rounds: usize = std::env::var("GUARD_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let ms: u64 = std::env::var("GUARD_MS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(300);
    let bench = Bench::new(Duration::from_millis(ms));
    let anchors = Anchors::default();
    let rows: Vec<Row> = match std::env::var("GUARD_ROWS") {
        Ok(names) => Row::ALL
            .into_iter()
            .filter(|r| names.split(',').any(|n| n == r.name()))
            .collect(),
        Err(_) => Row::ALL.to_vec(),
    };
    println!(
        "guard: {rounds} rounds of {ms} ms a row, {} workers; rates in M ops/s",
        std::thread::available_parallelism().map_or(2, |n| n.get())
    );
    for row in rows {
        let mut designs: Vec<(&str, &dyn GuardDesign)> =
            cores.iter().map(|(n, d)| (*n, d.as_ref())).collect();
        designs.push((anchor_name(row), &anchors));
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); designs.len()];
        for round in 0..rounds {
            for k in 0..designs.len() {
                let at = (k + round) % designs.len();
                if let Some(r) = designs[at].1.rate(row, &bench) {
                    rates[at].push(r);
                }
            }
        }
        print_row(row, &designs, &rates);
    }
}

fn print_row(row: Row, designs: &[(&str, &dyn GuardDesign)], rates: &[Vec<f64>]) {
    println!("{}", row.name());
    let now = designs.iter().position(|(n, _)| *n == "now");
    for (k, (name, _)) in designs.iter().enumerate() {
        if rates[k].is_empty() {
            println!("  {name:<14} -");
            continue;
        }
        let (m, lo, hi) = spread(&mut rates[k].clone());
        let mut line = format!(
            "  {name:<14} {:>7.2} [{:.2}-{:.2}]",
            m / 1e6,
            lo / 1e6,
            hi / 1e6
        );
        if let Some(now) = now.filter(|&n| n != k && rates[n].len() == rates[k].len()) {
            let mut ratios: Vec<f64> = rates[now]
                .iter()
                .zip(&rates[k])
                .map(|(a, b)| a / b)
                .collect();
            let (m, lo, hi) = spread(&mut ratios);
            line += &format!("   now/{name}: {m:.2}x [{lo:.2}-{hi:.2}]");
        }
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every design runs every row, and each row counts operations.
    #[test]
    fn every_row_runs_for_the_core_and_the_anchors() {
        let bench = Bench::new(Duration::from_millis(20));
        let (core, anchors) = (HoldlineGuard::default(), Anchors::default());
        for row in Row::ALL {
            for d in [&core as &dyn GuardDesign, &anchors] {
                let rate = d.rate(row, &bench).expect("a row of every design");
                assert!(rate > 0.0, "{}: no operations", row.name());
            }
        }
    }

    #[test]
    fn spread_is_the_median_and_the_ends() {
        assert_eq!(spread(&mut [3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(spread(&mut [4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    }
}
