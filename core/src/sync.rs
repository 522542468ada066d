//! The one place the core takes its synchronisation primitives from.
//!
//! Every atomic, cell, mutex, condition variable, park/unpark call, spin hint
//! and clock read in the crate goes through this module, and this module
//! holds nothing else: how long to spin is `spin.rs`'s business, where
//! fences start is the store's. Normally these are the standard library's;
//! under `cfg(loom)` they are loom's, so the loom models in `loom-tests/`
//! exercise the shipped code rather than a copy.
//!
//! Loom has no clock and no timed park. Under loom:
//! - [`Clock`] is a logical clock that advances two milliseconds per read,
//!   so a short wait's deadline passes at the waiter's next read;
//! - [`park_timeout`] yields (a spurious wake-up) for a finite wait, and parks
//!   for real when the wait is at least [`LOOM_FOREVER`], which lets loom find
//!   a missed wake as a deadlock;
//! - [`instant_now`] and [`wall_clock_ns`] stay the real clocks: the first
//!   only times condition-variable waits (loom's never time out), the
//!   second is read once per store.

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

    /// Sleeps for `d`, leaving the thread's unpark token alone (a grant's
    /// unpark must reach the park it is meant for).
    #[inline]
    pub(crate) fn sleep(d: std::time::Duration) {
        std::thread::sleep(d);
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

    /// A reading of the monotonic clock, for what loom does not model:
    /// condition-variable timeouts (loom's never time out) and calibration.
    #[inline]
    pub(crate) fn instant_now() -> std::time::Instant {
        std::time::Instant::now()
    }

    /// Whole microseconds on a process-wide monotonic clock: for bypass
    /// bounds, which a releaser compares without its store at hand.
    #[inline]
    pub(crate) fn process_us() -> u64 {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        ORIGIN
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_micros() as u64
    }
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
    pub(crate) use loom::thread::{current as current_thread, yield_now, Thread, ThreadId};

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

    /// Loom has no time: a sleep is a yield.
    pub(crate) fn sleep(_: std::time::Duration) {
        loom::thread::yield_now();
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

    /// The monotonic clock, which loom does not model: used only for
    /// condition-variable timeouts, and loom's condition variables never
    /// time out.
    pub(crate) fn instant_now() -> std::time::Instant {
        std::time::Instant::now()
    }

    loom::lazy_static! {
        static ref PROCESS_TICKS: AtomicU64 = AtomicU64::new(0);
    }

    /// The process-wide clock, logical as [`Clock`] is: a millisecond a read.
    pub(crate) fn process_us() -> u64 {
        // Relaxed: a logical clock only needs to be monotonic per reader.
        PROCESS_TICKS.fetch_add(1000, Ordering::Relaxed) + 1000
    }
}

pub(crate) use imp::*;

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

/// Nanoseconds since the Unix epoch on the wall clock (0 before it): where
/// a new store's fences start (`store_core`). Not modelled by loom, which
/// needs none: it is read once per store.
pub(crate) fn wall_clock_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
