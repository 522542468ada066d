//! The loss [`Signal`] of a lease and its [`Aborted`] future, and the
//! wakers a lease's end wakes.
//!
//! A signal keeps its `LeaseState` alive after the lease ended. An
//! `Aborted` future never resolves for a lease released normally. No
//! wake is missed: the ending's SeqCst status write comes before its
//! SeqCst look at `has_wakers`, and a poller's SeqCst `has_wakers` store
//! before its re-check of the status, so either the end sees the waker
//! or the poller sees the end. A lease with wakers is listed in its
//! store's signal hub until its end, so `close` can reach them.

use super::{EndReason, LeaseState};
use crate::signal_hub::Watched;
use crate::sync::{lock, Arc, Ordering};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The wakers of a lease's [`Aborted`] futures, one slot each.
#[derive(Default)]
pub(super) struct AbortWakers {
    slots: Vec<Option<Waker>>,
    /// Listed in the store's `SignalHub`, so `close` can reach them.
    watched: bool,
}

impl LeaseState {
    /// After the lease ended (its status moved, SeqCst) or its store closed:
    /// wakes the tasks awaiting its loss.
    pub(super) fn wake_aborted(&self) {
        // SeqCst: with the ending's SeqCst write before this load and the
        // poller's SeqCst `has_wakers` store before its re-check of the
        // status, either we see its waker or it sees the end.
        if !self.has_wakers.load(Ordering::SeqCst) {
            return;
        }
        let (wakers, watched) = {
            let mut w = lock(&self.wakers);
            (std::mem::take(&mut w.slots), std::mem::take(&mut w.watched))
        };
        if watched {
            self.store.signals.unwatch(self);
        }
        for w in wakers.into_iter().flatten() {
            w.wake();
        }
    }

    /// Registers (or refreshes) an `Aborted` future's waker; answers its slot.
    fn watch(this: &Arc<Self>, slot: Option<usize>, waker: &Waker) -> usize {
        let mut w = lock(&this.wakers);
        let slot = match slot {
            Some(i) if i < w.slots.len() => {
                match &mut w.slots[i] {
                    Some(old) if old.will_wake(waker) => {}
                    s => *s = Some(waker.clone()),
                }
                i
            }
            _ => {
                w.slots.push(Some(waker.clone()));
                w.slots.len() - 1
            }
        };
        if !w.watched {
            w.watched = true;
            this.store.signals.watch(this);
        }
        drop(w);
        this.has_wakers.store(true, Ordering::SeqCst);
        slot
    }

    /// An `Aborted` future went away: forget its waker.
    fn unwatch_slot(&self, slot: usize) {
        if let Some(s) = lock(&self.wakers).slots.get_mut(slot) {
            *s = None;
        }
    }
}

impl Watched for LeaseState {
    fn wake_aborted(&self) {
        LeaseState::wake_aborted(self);
    }
}

/// A lease's loss signal: cheap to clone, usable from any thread, alive
/// after the lease ended.
#[derive(Clone)]
pub struct Signal {
    pub(super) state: Arc<LeaseState>,
}

impl Signal {
    /// Whether the lease was lost (not merely released).
    pub fn is_aborted(&self) -> bool {
        self.state.is_lost()
    }

    /// Why the lease ended, once it has.
    pub fn reason(&self) -> Option<EndReason> {
        self.state.end_reason()
    }

    /// A future that resolves once the lease is lost (revoked, ran out, or
    /// its store closed); it never resolves for a lease released normally.
    /// Made for `select!` beside the work the lease guards:
    ///
    /// ```
    /// # use holdline::Store;
    /// # use std::time::Duration;
    /// # let store = Store::new();
    /// # let lock = store.lock("jobs").max_hold(Duration::from_millis(20)).open()?;
    /// let lease = lock.acquire("job-1")?;
    /// let lost = lease.signal().aborted();
    /// # use std::future::Future;
    /// # let waker = std::task::Waker::noop();
    /// # let mut cx = std::task::Context::from_waker(&waker);
    /// # let mut lost = std::pin::pin!(lost);
    /// # while lost.as_mut().poll(&mut cx).is_pending() { std::thread::sleep(Duration::from_millis(5)); }
    /// assert!(lease.is_lost()); // revoked at its 20 ms maxHold
    /// # Ok::<(), holdline::Error>(())
    /// ```
    pub fn aborted(&self) -> Aborted {
        Aborted {
            state: self.state.clone(),
            slot: None,
        }
    }

    /// Waits until the lease ends or `timeout` passes; answers whether it
    /// was lost (`true`), not merely released or still running (`false`).
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        self.state
            .store
            .signals
            .wait_until(timeout, || self.state.end_reason().is_some());
        self.is_aborted()
    }
}

/// Resolves once its lease is lost; from [`Signal::aborted`].
#[must_use = "futures do nothing unless awaited"]
pub struct Aborted {
    state: Arc<LeaseState>,
    slot: Option<usize>,
}

impl Future for Aborted {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.state.end_reason() {
            Some(EndReason::Released) => return Poll::Pending,
            Some(_) => return Poll::Ready(()),
            None => {}
        }
        let slot = LeaseState::watch(&self.state, self.slot, cx.waker());
        self.slot = Some(slot);
        // Re-checked after announcing the waker (see `wake_aborted`).
        match self.state.end_reason() {
            Some(EndReason::Released) | None => Poll::Pending,
            Some(_) => Poll::Ready(()),
        }
    }
}

impl Drop for Aborted {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            self.state.unwatch_slot(slot);
        }
    }
}

impl fmt::Debug for Aborted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Aborted")
            .field("reason", &self.state.end_reason())
            .finish()
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signal")
            .field("reason", &self.reason())
            .finish()
    }
}
