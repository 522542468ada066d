//! How a waiter spends its time before it parks: the first in line's
//! learned spin budget, the short spin of those behind it, and the
//! [`Backoff`] of a thread waiting for a line's lock bit. Policy only: the
//! pause, yield and clock it uses come from [`crate::sync`]. (The models:
//! crossbeam-utils' `backoff.rs`, parking_lot_core's `spinwait.rs`.)

#[cfg(not(loom))]
mod imp {
    use crate::sync::{instant_now, spin_loop};

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

    /// The first in line spun `spun` pauses and then parked: `parked_us` is
    /// how long it slept if its wait ended in a grant (`None`: timed out or
    /// closed); the whole wait is that plus the spin.
    pub(crate) fn spin_learn(parked_us: Option<u64>, spun: u32) {
        let waited_us = parked_us.map(|us| us + u64::from(spun) * pause_ns() / 1000);
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
            let started = instant_now();
            for _ in 0..2_000 {
                spin_loop();
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
    // Under loom spinning only multiplies interleavings: check once, then park.
    pub(crate) fn first_in_line_spin_pauses() -> u32 {
        1
    }
    pub(crate) fn spin_learn(_: Option<u64>, _: u32) {}
    pub(crate) const SPIN_ROUND: u32 = 1;
    pub(crate) const SPIN_BEHIND: u32 = 0;
}

pub(crate) use imp::*;

use crate::counters::{count, Event};
use crate::sync::{spin_loop, yield_now};

/// Rounds of [`Backoff::snooze`] that spin before it yields.
#[cfg(not(loom))]
const SNOOZE_ROUNDS: u32 = 128;
/// Yields after the spin, before the waiter parks.
#[cfg(not(loom))]
const YIELD_ROUNDS: u32 = 4;
// Under loom no spin: loom runs a spinning (yielding) thread again only
// once the others are blocked, by which time the bit's owner has let it
// go, so a waiter that spun first would never park. It parks at once, so
// every model that contends for a line's lock bit checks the park and its
// wake.
#[cfg(loom)]
const SNOOZE_ROUNDS: u32 = 0;
#[cfg(loom)]
const YIELD_ROUNDS: u32 = 0;

/// Waiting for a line's `QLOCK` bit: held for a few pointer writes, but its
/// owner may be preempted on an oversubscribed machine, so spin, then
/// yield a few times, then park until the owner lets the bit go (the
/// record's `QSLEEP` bit and [`crate::parking`]): with more threads than
/// cores, a thread that yields or sleeps in a loop stays runnable and takes
/// slices from the preempted owner it waits for, or oversleeps its unlock;
/// a parked one is woken by it.
pub(crate) struct Backoff(u32);

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff(0)
    }

    /// Spends one round of the wait: `true` when the caller should look at
    /// the bit again now, `false` when it is time to park instead.
    pub(crate) fn snooze(&mut self) -> bool {
        // 1 + 2 + 4 + 8 pauses, then rounds of 8 up to about 1,000 in all
        // (~21 us here) before the first yield: the bit is held for a few
        // pointer writes, so a wait longer than that means its owner was
        // preempted, and only then does giving up the slice (to it, with
        // luck) help. The rounds stay short, so the bit let go is seen
        // within 8 pauses: a doubling wait overshot the owner's brief hold
        // by hundreds of pauses on a key two cores take in turn.
        if self.0 < SNOOZE_ROUNDS {
            for _ in 0..1u32 << self.0.min(3) {
                spin_loop();
            }
        } else if self.0 < SNOOZE_ROUNDS + YIELD_ROUNDS {
            count(Event::LineLockYield);
            yield_now();
        } else {
            return false;
        }
        self.0 += 1;
        true
    }
}
