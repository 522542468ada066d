//! From a grant to a lease: a closure's [`Lease`] with its maxHold timed
//! (by a slot of the store's watch, or a state on the wheel), and a
//! handle's [`HeldLease`] with its ttl armed.
//!
//! The lease owns its grant before anything that could panic runs, so a
//! grant always reaches its lease (only allocation can fail here, and it
//! aborts). A state on the wheel is armed before its lease owns it: if the
//! timer ends the grant first, the lease's end finds the state ended.

use super::{Grant, Lock};
use crate::driver::Driver;
use crate::hold_watch::HoldWatch;
use crate::lease::{watched_word, HeldLease, Lease, LeaseState};
use crate::record_ref::{Granted, HeldRecord};
use crate::sync::Arc;

impl Lock {
    /// A closure's lease over `grant`, with its maxHold timer armed. The
    /// lease owns the grant before anything that could panic runs.
    #[inline(always)]
    pub(crate) fn closure_lease<'a>(&'a self, text: &'a str, grant: Grant) -> Lease<'a> {
        let granted = grant.into_parts();
        let state = match self.max_hold_ms {
            0 => std::ptr::null_mut(),
            _ => self.time_max_hold(granted.record, granted.fence, granted.permits),
        };
        Lease::new(&self.store, &self.shared, text, granted, state)
    }

    /// How a closure lease's maxHold is timed: by a slot of the store's
    /// watch (no lock, no allocation, no clock), or, when the thread has
    /// none free, by a state on the wheel. Out of line, so the plain
    /// hold's inlined path stays as small; nothing here can panic once
    /// the grant is given (only allocation, which aborts), so the grant
    /// always reaches its lease.
    /// (The grant comes as its parts, in registers.)
    #[inline(never)]
    fn time_max_hold(&self, record: HeldRecord, fence: u64, permits: u32) -> *mut LeaseState {
        let granted = Granted {
            record,
            fence,
            permits,
        };
        let Some(claim) =
            HoldWatch::claim(&self.store.watch, &granted, &self.shared, self.max_hold_ms)
        else {
            return self.arm_max_hold(&granted);
        };
        if claim.parked {
            claim.watched.seen_at(self.store.clock.now_ms());
            Driver::start_ticking(&self.store.timer);
        }
        watched_word(claim.watched)
    }

    /// A maxHold lease's state and timer on the store's wheel: for a
    /// thread with every slot of the watch taken. Armed before its lease
    /// owns it: if the timer ends the grant first, the lease's end finds
    /// the state ended.
    #[cold]
    #[inline(never)]
    fn arm_max_hold(&self, granted: &Granted) -> *mut LeaseState {
        let state = LeaseState::new(
            &self.store,
            &self.shared,
            *granted,
            self.max_hold_ms,
            0,
            None,
        );
        Driver::arm(&self.store.timer, &state);
        Arc::into_raw(state).cast_mut()
    }

    /// A handle-style lease over `grant`, its timer armed. The lease owns
    /// the grant before anything that could panic runs.
    pub(crate) fn held_lease(&self, text: &str, grant: Grant) -> HeldLease {
        let state = LeaseState::new(
            &self.store,
            &self.shared,
            grant.into_parts(),
            self.max_hold_ms,
            self.ttl_ms,
            self.heartbeat.clone(),
        );
        let lease = HeldLease::new(state, text);
        Driver::arm(&self.store.timer, lease.state());
        lease
    }
}
