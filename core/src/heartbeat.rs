//! A heartbeat: when a group of handle-style leases was last heard of,
//! kept in one word so that hearing from their holder renews all of them
//! in O(1), whatever their number (a server's connection and the leases
//! it holds; etcd's lease and the keys attached to it).
//!
//! A lease opened through a lock with a heartbeat runs out `ttl` after
//! the later of its own last renewal (its grant, [`HeldLease::renew`])
//! and the heartbeat's last [`beat`](crate::Heartbeat::beat). Its timer, when it
//! fires, reads both and arms itself again if a beat came since; nothing
//! walks the leases.
//!
//! A beat only moves the time forward and never revives a lease that
//! ended: one whose timer fired first is gone. A beat that lands after a
//! lease's deadline but before its timer fired keeps it: nobody else was
//! granted its key in between, which is what a ttl protects.
//!
//! [`HeldLease::renew`]: crate::HeldLease::renew

use crate::store_core::StoreCore;
use crate::sync::{Arc, AtomicU64, Ordering};

/// What a heartbeat's leases read (behind [`Heartbeat`]).
///
/// [`Heartbeat`]: crate::Heartbeat
pub(crate) struct HeartbeatState<L> {
    /// Its store: the clock the beats are read from, and the leases'.
    pub(crate) store: Arc<StoreCore<L>>,
    /// The store clock's reading at the last beat, in ms.
    heard_ms: AtomicU64,
}

impl<L> HeartbeatState<L> {
    pub(crate) fn new(store: &Arc<StoreCore<L>>) -> HeartbeatState<L> {
        HeartbeatState {
            store: store.clone(),
            heard_ms: AtomicU64::new(store.clock.now_ms()),
        }
    }

    /// The holder was heard from now.
    pub(crate) fn beat(&self) {
        let now = self.store.clock.now_ms();
        // Relaxed, as a lease's own renewal: the timer reads it when it
        // fires, and a beat racing the expiry may lose, which is the ttl's
        // meaning. fetch_max: beats from two threads never move it back.
        if cfg!(holdline_mutant = "beat_stores") {
            self.heard_ms.store(now, Ordering::Relaxed);
        } else {
            self.heard_ms.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// The store clock's reading at the last beat, in ms.
    pub(crate) fn heard_ms(&self) -> u64 {
        // Relaxed: see `beat`.
        self.heard_ms.load(Ordering::Relaxed)
    }

    pub(crate) fn is_store_closed(&self) -> bool {
        self.store.closed.load(Ordering::Acquire)
    }
}
