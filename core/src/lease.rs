//! Leases: the closure-scoped [`Lease`], the handle-style [`HeldLease`], the
//! shared [`LeaseState`] behind them, and the loss [`Signal`].
//!
//! A grant is let go exactly once. While a lease has a `LeaseState`, whoever
//! moves its `status` from `ACTIVE` owns that duty: the holder (to
//! `RELEASED`, or `CLOSED` when its store closed meanwhile) or the timer
//! (to `REVOKED` at maxHold, `EXPIRED` at ttl). The loser of that CAS never
//! touches the key's record again, which is what keeps the record pointer
//! valid for the winner: the record cannot be retired while it is `HELD`,
//! and it stays `HELD` until the winner releases it.
//!
//! A plain `hold` without maxHold has no timer and so no `LeaseState` until
//! `signal()` asks for one: the uncontended path allocates nothing.

use crate::error::Error;
use crate::lock::{Lock, LockShared};
use crate::record::Record;
use crate::store::StoreShared;
use crate::sync::AtomicBool;
use crate::sync::{downgrade, lock, upgrade, Arc, AtomicU32, AtomicU64, Mutex, Ordering, Weak};
use crate::timer::TimerKey;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

const ACTIVE: u32 = 0;
const RELEASED: u32 = 1;
const REVOKED: u32 = 2;
const EXPIRED: u32 = 3;
const CLOSED: u32 = 4;

const NO_TIMER: u64 = u64::MAX;

/// Why a lease ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EndReason {
    /// Its holder let it go.
    Released,
    /// The store revoked it at its `maxHold`.
    Revoked,
    /// Its holder stopped renewing and it ran out at its `ttl`.
    Expired,
    /// Its store closed.
    StoreClosed,
}

/// What one grant shares with the timer and with signals.
pub(crate) struct LeaseState {
    status: AtomicU32,
    pub(crate) store: Arc<StoreShared>,
    pub(crate) lock: Arc<LockShared>,
    record: *const Record,
    pub(crate) fence: u64,
    granted_ms: u64,
    /// 0: off.
    max_hold_ms: u64,
    /// 0: renewed for as long as the closure runs (never runs out).
    ttl_ms: u64,
    renewed_ms: AtomicU64,
    /// The pending wheel entry, packed; read and written under the wheel lock.
    timer: AtomicU64,
    /// Tasks awaiting [`Signal::aborted`]; `has_wakers` lets an ending
    /// skip the mutex when there are none (see `wake_aborted`).
    wakers: Mutex<AbortWakers>,
    has_wakers: AtomicBool,
}

/// The wakers of a lease's [`Aborted`] futures, one slot each.
#[derive(Default)]
struct AbortWakers {
    slots: Vec<Option<Waker>>,
    /// Listed in the store's `SignalHub`, so `close` can reach them.
    watched: bool,
}

// SAFETY: `record` is only dereferenced by the winner of the `status` CAS,
// while the grant it names is still HELD (module doc), which keeps the
// record alive whatever thread does it; everything else is Send + Sync.
unsafe impl Send for LeaseState {}
// SAFETY: as above.
unsafe impl Sync for LeaseState {}

impl LeaseState {
    pub(crate) fn new(
        lock: &Lock,
        record: *const Record,
        fence: u64,
        max_hold_ms: u64,
        ttl_ms: u64,
    ) -> Arc<LeaseState> {
        let now = if max_hold_ms | ttl_ms != 0 {
            lock.store.clock.now_ms()
        } else {
            0
        };
        Arc::new(LeaseState {
            status: AtomicU32::new(ACTIVE),
            store: lock.store.clone(),
            lock: lock.shared.clone(),
            record,
            fence,
            granted_ms: now,
            max_hold_ms,
            ttl_ms,
            renewed_ms: AtomicU64::new(now),
            timer: AtomicU64::new(NO_TIMER),
            wakers: Mutex::new(AbortWakers::default()),
            has_wakers: AtomicBool::new(false),
        })
    }

    /// When the lease must end if nothing changes: the earlier of maxHold
    /// (from the grant) and ttl (from the last renewal). `None`: never.
    pub(crate) fn expiry_ms(&self) -> Option<(u64, u32)> {
        // +1: the clock reads whole milliseconds, so this never ends early.
        let by_max =
            (self.max_hold_ms != 0).then(|| (self.granted_ms + self.max_hold_ms + 1, REVOKED));
        let by_ttl = (self.ttl_ms != 0).then(|| {
            (
                self.renewed_ms.load(Ordering::Relaxed) + self.ttl_ms + 1,
                EXPIRED,
            )
        });
        match (by_max, by_ttl) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// The address of the grant's record: the key of the store's registry
    /// of timed leases.
    pub(crate) fn record_addr(&self) -> usize {
        self.record as usize
    }

    /// How long the grant has been held, and how long it has left before
    /// its maxHold or ttl ends it (`None`: neither applies), at `now_ms` on
    /// the store's clock. Meaningful only for a lease with a timer, whose
    /// grant time was read at the grant.
    pub(crate) fn timing(&self, now_ms: u64) -> (Duration, Option<Duration>) {
        let held = now_ms.saturating_sub(self.granted_ms);
        // `expiry_ms` adds 1 ms so the timer never fires early; take it off.
        let left = self
            .expiry_ms()
            .map(|(at, _)| Duration::from_millis(at.saturating_sub(1).saturating_sub(now_ms)));
        (Duration::from_millis(held), left)
    }

    /// Only under the wheel lock (which orders this Relaxed load).
    pub(crate) fn timer_key(&self) -> Option<TimerKey> {
        TimerKey::unpack(self.timer.load(Ordering::Relaxed))
    }

    /// Only under the wheel lock (which orders these Relaxed accesses).
    pub(crate) fn set_timer_key(&self, key: Option<TimerKey>) {
        self.timer
            .store(key.map_or(NO_TIMER, TimerKey::pack), Ordering::Relaxed);
    }

    pub(crate) fn is_active(&self) -> bool {
        self.status.load(Ordering::SeqCst) == ACTIVE
    }

    /// Why it ended, if it has; a lease still active in a closed store has
    /// lost it too.
    pub(crate) fn end_reason(&self) -> Option<EndReason> {
        match self.status.load(Ordering::SeqCst) {
            RELEASED => Some(EndReason::Released),
            REVOKED => Some(EndReason::Revoked),
            EXPIRED => Some(EndReason::Expired),
            CLOSED => Some(EndReason::StoreClosed),
            _ if self.store.closed.load(Ordering::SeqCst) => Some(EndReason::StoreClosed),
            _ => None,
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        !matches!(self.end_reason(), None | Some(EndReason::Released))
    }

    pub(crate) fn lost_error(&self, reason: EndReason) -> Error {
        lost_error(reason, self.ttl_ms)
    }

    /// The holder ends its grant. `Ok`: it still owned it, and the key has
    /// been let go; `Err`: the timer took it first (the key is already gone).
    pub(crate) fn finish(&self) -> Result<(), EndReason> {
        let closed = self.store.closed.load(Ordering::SeqCst);
        let to = if closed { CLOSED } else { RELEASED };
        // SeqCst: a signal waiter reads `status` after announcing itself in
        // the hub's SeqCst counter (see `SignalHub`).
        match self
            .status
            .compare_exchange(ACTIVE, to, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => {
                self.store.cancel_timer(self);
                // SAFETY: we won the CAS, so the grant is still HELD by us and
                // the record alive (module doc).
                unsafe { (*self.record).release(self.fence) };
                self.store.signals.notify();
                self.wake_aborted();
                if closed {
                    Err(EndReason::StoreClosed)
                } else {
                    Ok(())
                }
            }
            Err(_) => Err(self.end_reason().unwrap_or(EndReason::StoreClosed)),
        }
    }

    /// The timer found the lease due at `now`. Answers false when it is not
    /// due after all (renewed) and should be re-armed.
    pub(crate) fn expire(&self, now: u64) -> bool {
        let Some((at, to)) = self.expiry_ms() else {
            return true;
        };
        if now < at {
            return false;
        }
        // A store closed meanwhile: its leases are lost to the close.
        let to = if self.store.closed.load(Ordering::SeqCst) {
            CLOSED
        } else {
            to
        };
        if self
            .status
            .compare_exchange(ACTIVE, to, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            let counter = match to {
                REVOKED => Some(&self.lock.revocations),
                EXPIRED => Some(&self.lock.expirations),
                _ => None,
            };
            // Counted before the key moves on, so whoever the key goes to
            // (and whoever hears from them) sees the count. Relaxed: the
            // release below publishes it.
            if let Some(counter) = counter {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            // Out of the timed registry before the key moves on, so the
            // record's entry never names a grant that has ended.
            self.store.forget_expired(self);
            // SAFETY: we won the CAS: the holder will not release, so the
            // grant is still HELD and the record alive.
            unsafe { (*self.record).release(self.fence) };
            self.store.signals.notify();
            self.wake_aborted();
        }
        true
    }

    /// After the lease ended (its status moved, SeqCst) or its store closed:
    /// wakes the tasks awaiting its loss.
    pub(crate) fn wake_aborted(&self) {
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

    /// Renews a handle-style lease: its ttl counts again from now.
    pub(crate) fn renew(&self) -> Result<(), EndReason> {
        if let Some(r) = self.end_reason() {
            return Err(r);
        }
        let now = self.store.clock.now_ms();
        if self.expiry_ms().is_some_and(|(at, _)| now >= at) {
            // Too late: it ran out before this renewal. End it now rather
            // than answer Ok and let the timer end it a moment later.
            self.expire(now);
            return Err(self.end_reason().unwrap_or(EndReason::Expired));
        }
        // Relaxed: the timer re-reads it when it fires; a renewal racing the
        // expiry may lose, which is the ttl's meaning.
        self.renewed_ms.store(now, Ordering::Relaxed);
        match self.end_reason() {
            Some(r) => Err(r),
            None => Ok(()),
        }
    }
}

fn lost_error(reason: EndReason, ttl_ms: u64) -> Error {
    match reason {
        EndReason::Revoked => Error::lost("it was revoked at its maxHold"),
        EndReason::Expired => Error::lost(format!("it ran out (ttl {})", show_ms(ttl_ms))),
        EndReason::StoreClosed | EndReason::Released => Error::lost("its store closed"),
    }
}

/// `10s`, `1500ms`, `2m`: the shortest exact form.
pub(crate) fn show_ms(ms: u64) -> String {
    if ms != 0 && ms % 60_000 == 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// The lease a `hold` closure runs under. `Sync`, so an async closure can
/// keep `&Lease` across its awaits on a multi-thread runtime.
pub struct Lease<'a> {
    pub(crate) lock: &'a Lock,
    pub(crate) key: &'a str,
    pub(crate) record: *const Record,
    pub(crate) fence: u64,
    pub(crate) state: OnceLock<Arc<LeaseState>>,
    /// Set once by the lease's owner (the hold), which alone ends it.
    pub(crate) ended: AtomicBool,
    /// Whether the hold is listed in its thread's context (blocking holds).
    pub(crate) listed: bool,
}

// SAFETY: `record` is dereferenced only by `end` (run by the hold that owns
// the lease, once) and handed to a `LeaseState` (Send + Sync by its own
// argument); every other field is Send + Sync or a shared reference to one.
unsafe impl Send for Lease<'_> {}
// SAFETY: as for `Send`; `&Lease` offers only reads and `signal()`, whose
// `OnceLock` makes a racing first call safe.
unsafe impl Sync for Lease<'_> {}

impl<'a> Lease<'a> {
    /// The fencing token: greater than every earlier grant's of this key.
    #[inline]
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The key, as text.
    #[inline]
    pub fn key(&self) -> &str {
        self.key
    }

    /// Whether the lease was lost (revoked at maxHold, or its store closed).
    pub fn is_lost(&self) -> bool {
        match self.state.get() {
            Some(s) => s.is_lost(),
            None => self.lock.store.closed.load(Ordering::Acquire),
        }
    }

    /// `Err` of kind `Lost` once the lease is lost.
    pub fn check(&self) -> Result<(), Error> {
        if !self.is_lost() {
            return Ok(());
        }
        let reason = self
            .state
            .get()
            .and_then(|s| s.end_reason())
            .unwrap_or(EndReason::StoreClosed);
        Err(lost_error(reason, 0).for_key(&self.lock.shared.name, self.key))
    }

    /// A handle that aborts when the lease is lost, and tells why it ended.
    pub fn signal(&self) -> Signal {
        let state = self
            .state
            .get_or_init(|| LeaseState::new(self.lock, self.record, self.fence, 0, 0));
        Signal {
            state: state.clone(),
        }
    }

    /// Ends the hold: lets the key go unless it was taken away. Idempotent.
    #[inline]
    pub(crate) fn end(&self) -> Result<(), EndReason> {
        // Relaxed: only the owning hold reads or writes `ended`, in program
        // order (a load and a store, no read-modify-write on the hot path).
        if self.ended.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.ended.store(true, Ordering::Relaxed);
        if self.listed {
            crate::ctx::pop_hold();
        }
        match self.state.get() {
            Some(s) => s.finish(),
            None => {
                // SAFETY: no LeaseState means no timer: only we can let this
                // grant go, so it is still HELD by us and the record alive.
                unsafe { (*self.record).release(self.fence) };
                if self.lock.store.closed.load(Ordering::Acquire) {
                    Err(EndReason::StoreClosed)
                } else {
                    Ok(())
                }
            }
        }
    }

    #[cold]
    pub(crate) fn lost_error(&self, reason: EndReason) -> Error {
        lost_error(reason, self.lock.ttl_ms).for_key(&self.lock.shared.name, self.key)
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        // Reached with `ended` unset only when the closure panicked: let the
        // key go and let the panic continue.
        let _ = self.end();
    }
}

impl fmt::Debug for Lease<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("lock", &self.lock.shared.name)
            .field("key", &self.key)
            .field("fence", &self.fence)
            .finish()
    }
}

/// A lease's loss signal: cheap to clone, usable from any thread, alive
/// after the lease ended.
#[derive(Clone)]
pub struct Signal {
    state: Arc<LeaseState>,
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

/// A lease not tied to a closure, for holders outside the process: it waits
/// in the same line, must be [`renew`](HeldLease::renew)ed within its lock's
/// `ttl`, and is let go by [`release`](HeldLease::release) or on drop.
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
        match self.state.end_reason() {
            Some(r) if r != EndReason::Released => Err(self.error(r)),
            _ => Ok(()),
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
        self.state.renew().map_err(|r| self.error(r))
    }

    /// Lets the key go. `Err` (`lost`) when the lease had been lost before.
    pub fn release(mut self) -> Result<(), Error> {
        self.released = true;
        self.state.finish().map_err(|r| self.error(r))
    }

    fn error(&self, reason: EndReason) -> Error {
        self.state
            .lost_error(reason)
            .for_key(&self.state.lock.name, &self.key)
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.state.finish();
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

/// Wakes threads waiting on signals. One per store: lease endings are rare
/// next to grants, and a waiter re-checks its own lease after every wake.
/// Also lists the leases that tasks await (`Signal::aborted`), so that
/// `close`, which ends every lease at once without touching each, can wake
/// those tasks.
pub(crate) struct SignalHub {
    mutex: crate::sync::Mutex<()>,
    cv: crate::sync::Condvar,
    waiting: crate::sync::AtomicUsize,
    watched: Mutex<HashMap<usize, Weak<LeaseState>>>,
}

impl SignalHub {
    pub(crate) fn new() -> Self {
        SignalHub {
            mutex: crate::sync::Mutex::new(()),
            cv: crate::sync::Condvar::new(),
            waiting: crate::sync::AtomicUsize::new(0),
            watched: Mutex::new(HashMap::new()),
        }
    }

    fn watch(&self, lease: &Arc<LeaseState>) {
        let id = Arc::as_ptr(lease) as usize;
        lock(&self.watched).insert(id, downgrade(lease));
    }

    fn unwatch(&self, lease: &LeaseState) {
        lock(&self.watched).remove(&(lease as *const LeaseState as usize));
    }

    /// The store closed: every awaited lease is lost; wake its tasks.
    pub(crate) fn wake_all_aborted(&self) {
        let leases: Vec<Weak<LeaseState>> = lock(&self.watched).values().cloned().collect();
        for lease in leases.iter().filter_map(upgrade) {
            lease.wake_aborted();
        }
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

    pub(crate) fn wait_until(&self, timeout: Duration, done: impl Fn() -> bool) {
        if done() {
            return;
        }
        // No deadline at all when `timeout` is too long to add to now.
        let deadline = std::time::Instant::now().checked_add(timeout);
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut g = lock(&self.mutex);
        while !done() {
            let left = match deadline {
                Some(d) => d.saturating_duration_since(std::time::Instant::now()),
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
