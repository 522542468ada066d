//! How a lock's lines are served ([`Fairness`]): strictly in order, or
//! with bounded bypass. The mechanism is the line's (`record`'s `line` and
//! `waiter`); this module owns the option and its one conversion.

use std::time::Duration;

/// How a lock's keys pass from one holder to the next, chosen when a
/// handle is opened ([`LockBuilder::fairness`](crate::LockBuilder::fairness)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fairness {
    /// Waiters get a key in the order they came: a release with waiters
    /// hands the key straight to the first of them, even while it sleeps,
    /// and nobody takes it ahead of them. The default.
    #[default]
    Fifo,
    /// A caller that is running may take a free key ahead of the line until
    /// the first in line has waited longer than the bound; from then on the
    /// key passes in line order until the line is served. A release leaves
    /// the key free (and tells the first in line) instead of handing it to a
    /// thread that must first be woken, so on a machine with more threads
    /// than cores the key does not sit idle while one wakes up.
    ///
    /// What it gives up: a waiter still within its bound may see the key
    /// taken by callers that came after it, any number of times. The bound
    /// is looked at by the release after the waiter has acted on its last
    /// offer, so the worst a waiter first in line is kept waiting past its
    /// turn is the bound, plus the time it takes to run once offered the
    /// key (a thread's wake-up, a task's next poll), plus one hold.
    BoundedBypass(Duration),
}

impl Fairness {
    /// Bounded bypass with the default bound, 1 ms.
    pub const BOUNDED: Fairness = Fairness::BoundedBypass(DEFAULT_BYPASS_BOUND);

    /// The bound in µs for a waiter's node (0: strict FIFO). A bound below
    /// 1 µs counts as 1 µs; one past the clock's range saturates.
    pub(crate) fn bound_us(self) -> u64 {
        match self {
            Fairness::Fifo => 0,
            Fairness::BoundedBypass(d) => d.as_micros().clamp(1, u128::from(u64::MAX / 4)) as u64,
        }
    }
}

/// How long a waiter may be bypassed under [`Fairness::BOUNDED`].
pub const DEFAULT_BYPASS_BOUND: Duration = Duration::from_millis(1);
