//! One key of a lock with options ([`KeyHold`]): how long to wait and how
//! many permits to take, and the holds it makes.
//!
//! The permits asked for are checked against the lock's count before any
//! hold begins (1 to the count, else `invalid`); a wait is counted in
//! whole milliseconds, sub-millisecond waits rounding up to 1 ms.

use super::{Lock, Mode, DEFAULT_WAIT, DEFAULT_WAIT_MS};
use crate::error::{Error, ErrorKind};
use crate::key::{KeyBuf, KeyRef};
use crate::lease::{HeldLease, Lease};
use crate::outcome::Outcome;
use std::time::Duration;

/// One key of a lock, with options; from [`Lock::key`].
#[derive(Clone, Copy, Debug)]
#[must_use = "a KeyHold does nothing until .hold(), .try_hold() or .acquire()"]
pub struct KeyHold<'l> {
    pub(crate) lock: &'l Lock,
    pub(crate) key: KeyRef<'l>,
    pub(crate) wait: Duration,
    pub(crate) want: Want,
}

/// How many permits a [`KeyHold`] asks for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Want {
    One,
    Permits(u32),
    Exclusive,
}

/// The options a key's builder sets, over its `wait` and `want` fields:
/// one text for [`KeyHold`] and the owned guard's builder.
macro_rules! hold_options {
    () => {
        /// How long to stand in line (default 10 s; zero: fail `in use` at
        /// once if held; below 1 ms rounds up to 1 ms).
        pub fn wait(mut self, wait: Duration) -> Self {
            self.wait = wait;
            self
        }

        /// Takes `permits` of the key's permits (default 1; 1 to the lock's
        /// count, else the hold fails `invalid` at once).
        pub fn permits(mut self, permits: u32) -> Self {
            self.want = $crate::lock::Want::Permits(permits);
            self
        }

        /// Takes all the key's permits: alone with the key (a writer of a
        /// read-write lock).
        pub fn exclusive(mut self) -> Self {
            self.want = $crate::lock::Want::Exclusive;
            self
        }
    };
}
pub(crate) use hold_options;

impl KeyHold<'_> {
    hold_options!();

    /// The permits asked for, checked against the lock's count.
    #[inline(always)]
    pub(crate) fn asked(&self) -> Result<u32, Error> {
        let total = self.lock.shared.permits;
        match self.want {
            Want::One => Ok(1),
            Want::Exclusive => Ok(total),
            Want::Permits(m) if (1..=total).contains(&m) => Ok(m),
            Want::Permits(m) => Err(self.too_many(m, total)),
        }
    }

    /// The refusal of `m` permits of a lock of `total`.
    #[cold]
    #[inline(never)]
    fn too_many(&self, m: u32, total: u32) -> Error {
        let mut buf = KeyBuf::new();
        let text = self.key.text(&mut buf);
        let what = format!("{m} permits asked of a lock of {total}");
        self.lock.error(Error::new(ErrorKind::Invalid, what), text)
    }

    /// Holds the key while `f` runs; see [`Lock::hold`]. Fails as it does
    /// (`in use` past this wait, `limit`, `closed`, `invalid`, `lost`), and
    /// `invalid` for more permits than the lock has.
    pub fn hold<R>(self, f: impl FnOnce(&Lease<'_>) -> R) -> Result<R, Error> {
        self.lock
            .hold_mode(self.key, Mode::Wait(ms(self.wait)), self.asked()?, f)
            .map(|r| r.expect("a waiting hold runs f"))
    }

    /// Runs `f` only if the key is free now; see [`Lock::try_hold`]. With
    /// several permits: only if its permits fit now and nobody waits.
    /// `None` otherwise; fails `closed`, `lost` (the lease lost while `f`
    /// ran), or `invalid` for a bad key or more permits than the lock has.
    pub fn try_hold<R>(self, f: impl FnOnce(&Lease<'_>) -> R) -> Result<Option<R>, Error> {
        self.lock.hold_mode(self.key, Mode::Try, self.asked()?, f)
    }

    /// A handle-style lease, waiting up to `wait`; see [`Lock::acquire`]:
    /// **it runs out `ttl` after its last renewal** (in process, use
    /// [`lock`](KeyHold::lock)). Fails as it does, and `invalid` for more
    /// permits than the lock has.
    pub fn acquire(self) -> Result<HeldLease, Error> {
        self.lock
            .acquire_lease(self.key, Mode::Wait(ms(self.wait)), self.asked()?)
            .map(|l| l.expect("a waiting acquire grants"))
    }

    /// A handle-style lease only if the key is free now: `None` when it is
    /// held (with several permits: when its permits do not fit now or
    /// someone waits). Fails `closed`, or `invalid` for a bad key or more
    /// permits than the lock has.
    pub fn try_acquire(self) -> Result<Option<HeldLease>, Error> {
        self.lock.acquire_lease(self.key, Mode::Try, self.asked()?)
    }
}

impl KeyHold<'_> {
    /// Holds the key while `f` runs, waiting up to `wait`, and answers the
    /// value with the loss; see [`Lock::hold_outcome`].
    pub fn hold_outcome<R>(self, f: impl FnOnce(&Lease<'_>) -> R) -> Result<Outcome<R>, Error> {
        self.lock
            .hold_run(self.key, Mode::Wait(ms(self.wait)), self.asked()?, f)
            .map(|o| o.expect("a waiting hold runs f"))
    }
}

/// A wait in whole milliseconds, as `Mode::Wait` takes it.
#[inline]
pub(crate) fn ms(d: Duration) -> u64 {
    if d == DEFAULT_WAIT {
        // Every hold without `.wait(..)`: no 128-bit division.
        DEFAULT_WAIT_MS
    } else if d.is_zero() {
        0
    } else {
        // Sub-millisecond waits round up to 1 ms.
        d.as_millis().clamp(1, u128::from(u64::MAX / 4)) as u64
    }
}
