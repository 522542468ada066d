//! The [`SignalHub`]: one per store, it wakes the threads waiting on lease
//! signals and lists the leases that tasks await, so that `close`, which
//! ends every lease at once without touching each, can wake those tasks.
//!
//! It knows a lease only as something it can tell to wake its tasks
//! ([`Watched`]), so it sits below `lease`.

use crate::sync::{
    downgrade, instant_now, lock, upgrade, Arc, AtomicUsize, Condvar, Mutex, Ordering, Weak,
};
use crate::table::RandomHasher;
use std::collections::HashMap;
use std::time::Duration;

/// A lease whose loss tasks await.
pub(crate) trait Watched {
    /// The lease ended or its store closed: wake the tasks awaiting it.
    fn wake_aborted(&self);
}

/// Wakes threads waiting on signals. One per store: lease endings are rare
/// next to grants, and a waiter re-checks its own lease after every wake.
pub(crate) struct SignalHub<L> {
    mutex: Mutex<()>,
    cv: Condvar,
    waiting: AtomicUsize,
    watched: Mutex<HashMap<usize, Weak<L>, RandomHasher>>,
}

impl<L> SignalHub<L> {
    pub(crate) fn new() -> Self {
        SignalHub {
            mutex: Mutex::new(()),
            cv: Condvar::new(),
            waiting: AtomicUsize::new(0),
            watched: Mutex::new(HashMap::default()),
        }
    }

    /// Lists `lease` as awaited by tasks.
    pub(crate) fn watch(&self, lease: &Arc<L>) {
        let id = Arc::as_ptr(lease) as usize;
        lock(&self.watched).insert(id, downgrade(lease));
    }

    /// `lease` is no longer awaited (it ended and woke its tasks).
    pub(crate) fn unwatch(&self, lease: &L) {
        lock(&self.watched).remove(&(lease as *const L as usize));
    }

    /// After a lease's status changed (SeqCst): wakes the waiters, if any.
    pub(crate) fn notify(&self) {
        // SeqCst: with the status write before it and the waiter's SeqCst
        // increment-then-read, either we see the waiter or it sees the status.
        if self.waiting.load(Ordering::SeqCst) != 0 {
            let _g = lock(&self.mutex);
            self.cv.notify_all();
        }
    }

    /// Waits until `done` answers true or `timeout` passes.
    pub(crate) fn wait_until(&self, timeout: Duration, done: impl Fn() -> bool) {
        if done() {
            return;
        }
        // No deadline at all when `timeout` is too long to add to now.
        let deadline = instant_now().checked_add(timeout);
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut g = lock(&self.mutex);
        while !done() {
            let left = match deadline {
                Some(d) => d.saturating_duration_since(instant_now()),
                None => Duration::from_secs(86_400),
            };
            if left.is_zero() {
                break;
            }
            g = match self.cv.wait_timeout(g, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        drop(g);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<L: Watched> SignalHub<L> {
    /// The store closed: every awaited lease is lost; wake its tasks.
    pub(crate) fn wake_all_aborted(&self) {
        let leases: Vec<Weak<L>> = lock(&self.watched).values().cloned().collect();
        for lease in leases.iter().filter_map(upgrade) {
            lease.wake_aborted();
        }
    }
}
