//! How waiters spent their wait, counted behind the `wait-counters` cargo
//! feature (off by default: then every `count` compiles to nothing).
//!
//! Relaxed process-wide counters: diagnostics for the busy-machine work
//! (`examples/contention.rs`), never read by the core itself.

/// What a waiter did, or what happened at a handoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Event {
    /// A waiter saw its grant while spinning.
    GrantedSpinning,
    /// A waiter saw its grant after parking.
    GrantedParked,
    /// A waiter parked (one `park_timeout` call).
    Park,
    /// A releaser handed the key to a waiter that was spinning (no wake).
    HandoffToSpinner,
    /// A releaser handed the key to a parked waiter (a wake).
    HandoffToParked,
    /// A spin on the line's `QLOCK` bit gave up its slice (`yield_now`).
    LineLockYield,
    /// A wait for the line's `QLOCK` bit parked (its owner was preempted
    /// for longer than a few yields).
    LineLockPark,
    /// A task yielded before taking a free key, to a task that a release
    /// on its thread had just granted.
    YieldedToGranted,
    /// A release left the key free for its first waiter, who may be
    /// bypassed (bounded bypass).
    Offered,
    /// A waiter offered the key found it taken ahead of it.
    Bypassed,
}

const EVENTS: usize = 10;

#[cfg(feature = "wait-counters")]
static COUNTS: [std::sync::atomic::AtomicU64; EVENTS] =
    [const { std::sync::atomic::AtomicU64::new(0) }; EVENTS];

/// Counts `e` (nothing without the `wait-counters` feature).
#[inline(always)]
pub(crate) fn count(e: Event) {
    #[cfg(feature = "wait-counters")]
    // Relaxed: a statistic; nothing is published through it.
    COUNTS[e as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(feature = "wait-counters"))]
    let _ = e;
}

/// The counts so far, in [`Event`] order (all zero without the feature).
pub fn snapshot() -> [(Event, u64); EVENTS] {
    use Event::*;
    let all = [
        GrantedSpinning,
        GrantedParked,
        Park,
        HandoffToSpinner,
        HandoffToParked,
        LineLockYield,
        LineLockPark,
        YieldedToGranted,
        Offered,
        Bypassed,
    ];
    all.map(|e| {
        #[cfg(feature = "wait-counters")]
        let n = COUNTS[e as usize].load(std::sync::atomic::Ordering::Relaxed);
        #[cfg(not(feature = "wait-counters"))]
        let n = 0;
        (e, n)
    })
}
