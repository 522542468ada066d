//! The one place the core takes its synchronisation primitives from.
//!
//! Every atomic, cell, mutex, condition variable, park/unpark call, spin hint
//! and clock read in the crate goes through this module. Normally these are
//! the standard library's; under `cfg(loom)` they are loom's, so the loom
//! models in `loom-tests/` exercise the shipped code rather than a copy.
//!
//! Loom has no clock and no timed park. Under loom:
//! - [`Clock`] is a logical clock that advances two milliseconds per read,
//!   so a short wait's deadline passes at the waiter's next read;
//! - [`park_timeout`] yields (a spurious wake-up) for a finite wait, and parks
//!   for real when the wait is at least [`LOOM_FOREVER`], which lets loom find
//!   a missed wake as a deadlock.

#![allow(dead_code)]

#[cfg(not(loom))]
mod imp {
    pub(crate) use std::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

    /// A reference that does not keep its target alive.
    pub(crate) fn downgrade<T>(a: &Arc<T>) -> Weak<T> {
        Arc::downgrade(a)
    }

    pub(crate) fn upgrade<T>(w: &Weak<T>) -> Option<Arc<T>> {
        w.upgrade()
    }
    pub(crate) use std::thread::{current as current_thread, yield_now, Thread};

    /// `std::cell::UnsafeCell` with loom's closure-based API, so call sites are
    /// the same under both.
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }
        #[inline(always)]
        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }
        #[inline(always)]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }

    #[inline(always)]
    pub(crate) fn spin_loop() {
        std::hint::spin_loop();
    }

    /// Parks the current thread for at most `timeout`; may wake spuriously.
    #[inline]
    pub(crate) fn park_timeout(timeout: std::time::Duration) {
        std::thread::park_timeout(timeout);
    }

    /// Milliseconds since an origin fixed when the clock was made.
    #[derive(Debug)]
    pub(crate) struct Clock {
        origin: std::time::Instant,
    }

    impl Clock {
        pub(crate) fn new() -> Self {
            Self {
                origin: std::time::Instant::now(),
            }
        }
        /// Whole milliseconds since this clock was made (rounded down: callers
        /// add one to a deadline so it is never reached early). For timers.
        #[inline]
        pub(crate) fn now_ms(&self) -> u64 {
            self.origin.elapsed().as_millis() as u64
        }

        /// Whole microseconds since this clock was made. For wait deadlines,
        /// which a millisecond clock would overshoot by up to a millisecond.
        #[inline]
        pub(crate) fn now_us(&self) -> u64 {
            self.origin.elapsed().as_micros() as u64
        }
    }

    /// How long the first in line spins before it parks, in pause
    /// instructions, learned per thread from how long its waits took: a spin
    /// pays when the grant comes within about a futex wake's cost (~40 us
    /// here; a handoff to a spinning thread costs ~250 ns). A wait that
    /// parked and was granted within that cost sets the budget to a little
    /// more than that wait (next time the spin catches it); a longer one,
    /// or one that never got the key, halves it (the holder was preempted,
    /// or the line is longer than the cores: spinning only steals the
    /// holder's core). A spin that ended in a grant leaves it as it is.
    /// Never a `yield_now`: beside a CPU-bound process a yield gives it a
    /// whole slice while the key, handed to the yielder, waits. Waiters
    /// behind the first spin only [`SPIN_BEHIND`].
    pub(crate) fn first_in_line_spin_pauses() -> u32 {
        SPIN_BUDGET
            .try_with(std::cell::Cell::get)
            .unwrap_or(SPIN_MIN)
    }

    /// The first in line parked: `waited_us` is how long its wait took if
    /// it ended in a grant (`None`: timed out or closed).
    pub(crate) fn spin_learn(waited_us: Option<u64>) {
        let _ = SPIN_BUDGET.try_with(|b| {
            let r = b.get();
            b.set(match waited_us {
                Some(us) if us.saturating_mul(1000) <= SPIN_PAYS_NS => {
                    let pauses = us.saturating_mul(1000) * 5 / 4 / pause_ns();
                    (pauses as u32).clamp(SPIN_MIN, SPIN_MAX)
                }
                _ => (r / 2).max(SPIN_MIN),
            });
        });
    }

    /// What one pause instruction costs on this machine (ns), measured
    /// once: it ranges from a few cycles to over a hundred across CPUs.
    fn pause_ns() -> u64 {
        static NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        *NS.get_or_init(|| {
            let started = std::time::Instant::now();
            for _ in 0..2_000 {
                std::hint::spin_loop();
            }
            (started.elapsed().as_nanos() as u64 / 2_000).clamp(1, 200)
        })
    }

    std::thread_local! {
        static SPIN_BUDGET: std::cell::Cell<u32> = const { std::cell::Cell::new(SPIN_START) };
    }
    /// Past about a futex wake's cost here, spinning cannot pay.
    const SPIN_PAYS_NS: u64 = 45_000;
    const SPIN_MIN: u32 = 100;
    const SPIN_START: u32 = 512;
    const SPIN_MAX: u32 = 4096;
    /// Pauses in one spin round, at most (the first rounds are shorter, so
    /// a quick handoff is seen at once).
    pub(crate) const SPIN_ROUND: u32 = 8;
    /// Pauses a waiter behind the first spins before it parks.
    pub(crate) const SPIN_BEHIND: u32 = 64;
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
    // loom's Arc has no Weak. Its one user (the signal hub's watch list)
    // drops its entry when the lease ends, so under loom a strong reference
    // stands in: every model ends its leases, and loom's leak check agrees.
    pub(crate) type Weak<T> = Arc<T>;

    pub(crate) fn downgrade<T>(a: &Arc<T>) -> Weak<T> {
        a.clone()
    }

    pub(crate) fn upgrade<T>(w: &Weak<T>) -> Option<Arc<T>> {
        Some(w.clone())
    }
    pub(crate) use loom::thread::{current as current_thread, yield_now, Thread};

    #[inline(always)]
    pub(crate) fn spin_loop() {
        loom::hint::spin_loop();
    }

    /// A finite wait yields (a spurious wake-up: the caller re-checks its
    /// deadline on the logical clock); a wait of [`super::LOOM_FOREVER`] or
    /// more parks for real, so a missed unpark shows up as a loom deadlock.
    pub(crate) fn park_timeout(timeout: std::time::Duration) {
        if timeout >= super::LOOM_FOREVER {
            loom::thread::park();
        } else {
            loom::thread::yield_now();
        }
    }

    /// A logical clock: every read advances it by two milliseconds, so a
    /// 1 ms wait's deadline (read, +1 ms, +1 ms for rounding) has passed at
    /// the waiter's next read: the deadline path then races the release
    /// directly, with no yield in between that would let the releaser finish
    /// first in every schedule.
    #[derive(Debug)]
    pub(crate) struct Clock {
        ticks: AtomicU64,
    }

    impl Clock {
        pub(crate) fn new() -> Self {
            Self {
                ticks: AtomicU64::new(0),
            }
        }
        pub(crate) fn now_ms(&self) -> u64 {
            self.now_us() / 1000
        }
        pub(crate) fn now_us(&self) -> u64 {
            // Relaxed: a logical clock only needs to be monotonic per reader.
            self.ticks.fetch_add(2000, Ordering::Relaxed) + 2000
        }
    }

    // Under loom spinning only multiplies interleavings: check once, then park.
    pub(crate) fn first_in_line_spin_pauses() -> u32 {
        1
    }
    pub(crate) fn spin_learn(_: Option<u64>) {}
    pub(crate) const SPIN_ROUND: u32 = 1;
    pub(crate) const SPIN_BEHIND: u32 = 0;
}

pub(crate) use imp::*;

/// Waiting for the `QLOCK` bit: held for a few pointer writes, but its owner
/// may be preempted on an oversubscribed machine, so spin, then yield.
pub(crate) struct Backoff(u32);

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff(0)
    }

    pub(crate) fn snooze(&mut self) {
        // 1 + 2 + ... + 512 pauses (~21 us here) before the first yield:
        // the bit is held for a few pointer writes, so a wait longer than
        // that means its owner was preempted, and only then does giving up
        // the slice (to it, with luck) help.
        if self.0 < 10 {
            for _ in 0..1u32 << self.0 {
                spin_loop();
            }
            self.0 += 1;
        } else {
            crate::counters::count(crate::counters::Event::LineLockYield);
            yield_now();
        }
    }
}

/// Under loom, a wait at least this long parks for real instead of yielding.
pub(crate) const LOOM_FOREVER: std::time::Duration = std::time::Duration::from_secs(3600);

/// Locks a mutex whose data stays consistent across a panic (every critical
/// section in this crate either completes or changes nothing), so poisoning
/// carries no information here.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// The first fence of a new store: nanoseconds since the Unix epoch, and
/// above every earlier store's of this process. A key cannot be granted more
/// than once a nanosecond, so every fence a store handed out is below its
/// floor plus the nanoseconds since it opened: the next store starts at the
/// later of the clock and that bound, which holds even if the wall clock
/// stands still or steps back, and stays within the clock when it does not.
///
/// This process-wide mutex is std's even under loom: it is taken once per
/// store and takes no part in any modelled race.
pub(crate) fn next_store_fence_floor() -> u64 {
    static LAST: std::sync::Mutex<Option<(u64, std::time::Instant)>> = std::sync::Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let floor = match *last {
        Some((floor, at)) => wall.max(
            floor
                .saturating_add(at.elapsed().as_nanos() as u64)
                .saturating_add(1),
        ),
        None => wall,
    };
    *last = Some((floor, std::time::Instant::now()));
    floor
}
