//! The handle-style lease ([`HeldLease`]), for holders outside the
//! process: it owns a `LeaseState` armed on the store's wheel, runs out
//! `ttl` after its last renewal, and is let go once, by `release` or on
//! drop (never both).

use super::{LeaseState, Loss, Signal};
use crate::error::Error;
use crate::sync::Arc;
use std::fmt;

/// A lease not tied to a closure, for holders outside the process: it waits
/// in the same line, **must be [`renew`](HeldLease::renew)ed within its
/// lock's `ttl` (10 s by default) or it is lost**, and is let go by
/// [`release`](HeldLease::release) or on drop. In process, hold a
/// [`Guard`](crate::Guard) instead: no ttl.
pub struct HeldLease {
    state: Arc<LeaseState>,
    key: Box<str>,
    released: bool,
}

impl HeldLease {
    pub(crate) fn new(state: Arc<LeaseState>, key: &str) -> HeldLease {
        HeldLease {
            state,
            key: key.into(),
            released: false,
        }
    }

    /// The fencing token.
    pub fn fence(&self) -> u64 {
        self.state.fence
    }

    /// How many of the key's permits this lease holds.
    pub fn permits(&self) -> u32 {
        self.state.permits
    }

    pub(crate) fn state(&self) -> &Arc<LeaseState> {
        &self.state
    }

    /// The key, as text.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether the lease was lost (ran out, revoked, or its store closed).
    pub fn is_lost(&self) -> bool {
        self.state.is_lost()
    }

    /// `Err` of kind `Lost` once the lease is lost.
    pub fn check(&self) -> Result<(), Error> {
        match self.state.loss() {
            Some(loss) => Err(self.error(loss)),
            None => Ok(()),
        }
    }

    /// The loss signal.
    pub fn signal(&self) -> Signal {
        Signal {
            state: self.state.clone(),
        }
    }

    /// Keeps the lease: its ttl counts again from now. `Err` (`lost`) when
    /// it already ran out or was revoked.
    pub fn renew(&self) -> Result<(), Error> {
        self.state.renew().map_err(|loss| self.error(loss))
    }

    /// Lets the key go. `Err` (`lost`) when the lease had been lost before.
    pub fn release(mut self) -> Result<(), Error> {
        self.released = true;
        self.state.end_by_holder().map_err(|loss| self.error(loss))
    }

    fn error(&self, loss: Loss) -> Error {
        loss.error().for_key(&self.state.lock.name, &self.key)
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.state.end_by_holder();
        }
    }
}

impl fmt::Debug for HeldLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldLease")
            .field("lock", &self.state.lock.name)
            .field("key", &self.key)
            .field("fence", &self.state.fence)
            .finish()
    }
}
