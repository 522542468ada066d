//! The connection's watch over its leases' loss signals: which of its
//! leases were lost (maxHold, ttl, store closed), so that a RESP3 client is
//! pushed `["lost", lease, text]` the moment it happens.
//!
//! Each lease's [`Aborted`] future is polled with a waker of its own that
//! files the lease's id in a ready list and wakes the connection's task;
//! the task then re-polls only those leases. Letting a lease go just drops
//! its future, which takes its waker out of the core's list: no wake, no
//! extra turn of the connection's loop per RELEASE (a `FuturesUnordered`
//! with a cancel channel per lease would wake the task on every release,
//! and the multi-thread runtime would then wake a second worker).

use crate::record::ByLeaseId;
use holdline::Aborted;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

/// Ids of leases whose signal fired, and the task to tell.
#[derive(Default)]
struct Ready {
    state: Mutex<ReadyState>,
}

#[derive(Default)]
struct ReadyState {
    ids: Vec<u64>,
    task: Option<Waker>,
}

impl Ready {
    fn lock(&self) -> std::sync::MutexGuard<'_, ReadyState> {
        // Nothing panics while it is held; a poisoned list is still a list.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One lease's waker: files its id, wakes the connection.
struct LeaseWaker {
    id: u64,
    ready: Arc<Ready>,
}

impl Wake for LeaseWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let task = {
            let mut state = self.ready.lock();
            state.ids.push(self.id);
            state.task.take()
        };
        if let Some(task) = task {
            task.wake();
        }
    }
}

struct Watch {
    aborted: Aborted,
    waker: Waker,
}

/// The loss watches of one connection's leases.
#[derive(Default)]
pub struct LossWatches {
    watches: ByLeaseId<Watch>,
    ready: Arc<Ready>,
    /// Leases found lost, not yet handed out.
    lost: Vec<u64>,
}

impl LossWatches {
    /// Starts watching lease `id`.
    pub fn watch(&mut self, id: u64, aborted: Aborted) {
        let waker = Waker::from(Arc::new(LeaseWaker {
            id,
            ready: self.ready.clone(),
        }));
        let mut watch = Watch { aborted, waker };
        if poll_watch(&mut watch).is_ready() {
            self.lost.push(id);
        } else {
            self.watches.insert(id, watch);
        }
    }

    /// Stops watching lease `id` (let go): its waker leaves the core's list.
    pub fn forget(&mut self, id: u64) {
        self.watches.remove(&id);
        self.lost.retain(|&lost| lost != id);
    }

    /// The next lease found lost; pending until one is.
    pub fn next_lost(&mut self) -> impl Future<Output = u64> + '_ {
        poll_fn(|cx| self.poll_lost(cx))
    }

    /// A lease already found lost, without waiting.
    pub fn lost_now(&mut self) -> Option<u64> {
        let waker = Waker::noop();
        match self.poll_lost(&mut Context::from_waker(waker)) {
            Poll::Ready(id) => Some(id),
            Poll::Pending => None,
        }
    }

    fn poll_lost(&mut self, cx: &mut Context<'_>) -> Poll<u64> {
        let fired = {
            let mut state = self.ready.lock();
            if state.ids.is_empty() && self.lost.is_empty() {
                // Registered under the lock a lease waker takes: a wake
                // after this finds it.
                match &state.task {
                    Some(task) if task.will_wake(cx.waker()) => {}
                    _ => state.task = Some(cx.waker().clone()),
                }
                return Poll::Pending;
            }
            std::mem::take(&mut state.ids)
        };
        for id in fired {
            // An id may be filed twice, or after its lease was let go.
            if let Some(watch) = self.watches.get_mut(&id) {
                if poll_watch(watch).is_ready() {
                    self.watches.remove(&id);
                    self.lost.push(id);
                }
            }
        }
        match self.lost.pop() {
            Some(id) => Poll::Ready(id),
            // Only spurious wakes: wait again.
            None => self.poll_lost(cx),
        }
    }
}

fn poll_watch(watch: &mut Watch) -> Poll<()> {
    Pin::new(&mut watch.aborted).poll(&mut Context::from_waker(&watch.waker))
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdline::Store;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Counts the wakes of the connection's task.
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_lease_let_go_wakes_nobody_and_a_lost_one_is_reported() {
        let store = Store::new();
        let plain = store.lock("watch").open().unwrap();
        let short = store
            .lock("watched")
            .max_hold(Duration::from_millis(30))
            .open()
            .unwrap();
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut cx = Context::from_waker(&waker);
        let mut watches = LossWatches::default();

        let released = plain.key("a").try_acquire().unwrap().unwrap();
        watches.watch(1, released.signal().aborted());
        let revoked = short.key("b").try_acquire().unwrap().unwrap();
        watches.watch(2, revoked.signal().aborted());
        assert!(watches.poll_lost(&mut cx).is_pending());

        watches.forget(1);
        released.release().unwrap();
        assert_eq!(
            counter.0.load(Ordering::SeqCst),
            0,
            "a release woke the task"
        );

        // maxHold revokes lease 2: the task is woken and told which.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while counter.0.load(Ordering::SeqCst) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "no wake for a lost lease"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(watches.poll_lost(&mut cx), Poll::Ready(2));
        assert!(watches.poll_lost(&mut cx).is_pending());
        assert!(revoked.is_lost());
    }

    #[test]
    fn a_lease_lost_before_it_is_watched_is_reported_at_once() {
        let store = Store::new();
        let lock = store.lock("gone").open().unwrap();
        let lease = lock.key("k").try_acquire().unwrap().unwrap();
        let aborted = lease.signal().aborted();
        store.close();
        let mut watches = LossWatches::default();
        watches.watch(7, aborted);
        assert_eq!(watches.lost_now(), Some(7));
        assert_eq!(watches.lost_now(), None);
    }
}
