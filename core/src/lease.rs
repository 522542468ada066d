//! Leases: the closure-scoped [`Lease`], the handle-style [`HeldLease`], the
//! shared [`LeaseState`] behind them, and the loss [`Signal`].
//!
//! # A lease's status
//!
//! A `LeaseState`'s [`Status`] starts `Active` and moves once, by one CAS in
//! [`LeaseState::end`], which every path calls:
//!
//! | from     | to         | by                         | when                                   |
//! |----------|------------|----------------------------|----------------------------------------|
//! | `Active` | `Released` | the holder                 | it lets go (release, drop, the closure returned) |
//! | `Active` | `Revoked`  | the timer                  | its maxHold passed since the grant     |
//! | `Active` | `Expired`  | the timer, or a late renewal | its ttl passed since the last renewal |
//! | `Active` | `Closed`   | the holder or the timer    | either of the above, after its store closed |
//!
//! The other statuses are final. The winner of the CAS ends the grant, once:
//! it counts a revocation or expiry, takes the lease's timer off the wheel,
//! lets the key go, and wakes whoever waits for the news. The loser never
//! touches the key's record again, which is what keeps the record pointer
//! valid for the winner: the record cannot be retired while it is `HELD`,
//! and it stays `HELD` until the winner releases it. A lease still `Active`
//! in a closed store is lost too (`close` ends every lease without touching
//! each); its holder's end moves it to `Closed`.
//!
//! A plain `hold` without maxHold has no timer and so no `LeaseState` until
//! `signal()` asks for one: the uncontended path allocates nothing; its
//! holder lets the key go directly. A closure hold with a maxHold has none
//! either: a slot of the store's maxHold watch times it (`hold_watch`),
//! whose word decides between the holder and the timer as the status does
//! here, until `signal()` moves its timing to a `LeaseState`.

use crate::driver::{Driver, Due};
use crate::error::Error;
use crate::heartbeat::HeartbeatState;
use crate::hold_watch::{Ended, WatchedHold};
use crate::lock_shared::LockShared;
use crate::record_ref::{Granted, HeldRecord};
use crate::signal_hub::Watched;
use crate::store_core::StoreCore;
use crate::sync::AtomicBool;
use crate::sync::{lock, Arc, AtomicPtr, AtomicU32, AtomicU64, Mutex, Ordering};
use crate::timer::TimerKey;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The store's shared state, with this crate's leases.
pub(crate) type Core = StoreCore<LeaseState>;

/// Where a lease stands: see the module doc's table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub(crate) enum Status {
    /// Held; no path has ended it yet.
    Active = 0,
    /// Its holder let it go.
    Released = 1,
    /// The timer ended it at its maxHold.
    Revoked = 2,
    /// It ran out at its ttl.
    Expired = 3,
    /// Ended after its store closed.
    Closed = 4,
}

impl Status {
    fn from_u32(v: u32) -> Status {
        match v {
            0 => Status::Active,
            1 => Status::Released,
            2 => Status::Revoked,
            3 => Status::Expired,
            4 => Status::Closed,
            _ => unreachable!("a lease status is only ever written from a Status"),
        }
    }
}

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

/// How a lease was lost: what its `lost` error says.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Loss {
    /// Revoked at its maxHold.
    Revoked,
    /// Ran out at its ttl.
    Expired { ttl_ms: u64 },
    /// Its store closed.
    StoreClosed,
}

impl From<Ended> for Loss {
    fn from(ended: Ended) -> Loss {
        match ended {
            Ended::Revoked => Loss::Revoked,
            Ended::Closed => Loss::StoreClosed,
        }
    }
}

impl Loss {
    /// The error the holder of `key` of lock `lock` gets.
    #[cold]
    pub(crate) fn error_for(self, lock: &str, key: &str) -> Error {
        self.error().for_key(lock, key)
    }

    /// The error a holder gets, before its lock and key are named.
    pub(crate) fn error(self) -> Error {
        match self {
            Loss::Revoked => Error::lost("it was revoked at its maxHold"),
            Loss::Expired { ttl_ms } => {
                Error::lost(format!("it ran out (ttl {})", show_ms(ttl_ms)))
            }
            Loss::StoreClosed => Error::lost("its store closed"),
        }
    }
}

/// What one grant shares with the timer and with signals.
pub(crate) struct LeaseState {
    /// A [`Status`].
    status: AtomicU32,
    pub(crate) store: Arc<Core>,
    pub(crate) lock: Arc<LockShared>,
    record: HeldRecord,
    pub(crate) fence: u64,
    pub(crate) permits: u32,
    granted_ms: u64,
    /// 0: off.
    max_hold_ms: u64,
    /// 0: renewed for as long as the closure runs (never runs out).
    ttl_ms: u64,
    renewed_ms: AtomicU64,
    /// Renews it too, for every lease of its group at once (`heartbeat`).
    heartbeat: Option<Arc<HeartbeatState<LeaseState>>>,
    /// The pending wheel entry, packed; read and written under the wheel lock.
    timer: AtomicU64,
    /// Tasks awaiting [`Signal::aborted`]; `has_wakers` lets an ending
    /// skip the mutex when there are none (see `wake_aborted`).
    wakers: Mutex<AbortWakers>,
    has_wakers: AtomicBool,
    /// A closure hold's slot in the maxHold watch, which timed it until
    /// `signal()` moved the timing here: freed when the lease ends.
    watched: Option<WatchedHold>,
}

/// The wakers of a lease's [`Aborted`] futures, one slot each.
#[derive(Default)]
struct AbortWakers {
    slots: Vec<Option<Waker>>,
    /// Listed in the store's `SignalHub`, so `close` can reach them.
    watched: bool,
}

impl LeaseState {
    pub(crate) fn new(
        store: &Arc<Core>,
        lock: &Arc<LockShared>,
        granted: Granted,
        max_hold_ms: u64,
        ttl_ms: u64,
        heartbeat: Option<Arc<HeartbeatState<LeaseState>>>,
    ) -> Arc<LeaseState> {
        let now = if max_hold_ms | ttl_ms != 0 {
            store.clock.now_ms()
        } else {
            0
        };
        let mut state = Self::granted_at(store, lock, granted, max_hold_ms, now, None);
        state.ttl_ms = ttl_ms;
        state.heartbeat = heartbeat;
        Arc::new(state)
    }

    /// A lease state without a ttl whose grant came at `now` (ms on the
    /// store's clock), which frees the watch's slot `watched` at its end.
    fn granted_at(
        store: &Arc<Core>,
        lock: &Arc<LockShared>,
        granted: Granted,
        max_hold_ms: u64,
        now: u64,
        watched: Option<WatchedHold>,
    ) -> LeaseState {
        LeaseState {
            status: AtomicU32::new(Status::Active as u32),
            store: store.clone(),
            lock: lock.clone(),
            record: granted.record,
            fence: granted.fence,
            permits: granted.permits,
            granted_ms: now,
            max_hold_ms,
            ttl_ms: 0,
            renewed_ms: AtomicU64::new(now),
            heartbeat: None,
            timer: AtomicU64::new(NO_TIMER),
            wakers: Mutex::new(AbortWakers::default()),
            has_wakers: AtomicBool::new(false),
            watched,
        }
    }

    /// When the lease must end if nothing changes, and what it then moves
    /// to: the earlier of maxHold (from the grant, `Revoked`) and ttl (from
    /// the last renewal or heartbeat, `Expired`). `None`: never.
    fn expiry_ms(&self) -> Option<(u64, Status)> {
        // +1: the clock reads whole milliseconds, so this never ends early.
        let by_max = (self.max_hold_ms != 0)
            .then(|| (self.granted_ms + self.max_hold_ms + 1, Status::Revoked));
        let by_ttl = (self.ttl_ms != 0).then(|| {
            let own = self.renewed_ms.load(Ordering::Relaxed);
            let heard = self.heartbeat.as_ref().map_or(0, |h| h.heard_ms());
            (own.max(heard) + self.ttl_ms + 1, Status::Expired)
        });
        match (by_max, by_ttl) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
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

    fn status(&self) -> Status {
        Status::from_u32(self.status.load(Ordering::SeqCst))
    }

    /// Why it ended, if it has; a lease still active in a closed store has
    /// lost it too.
    pub(crate) fn end_reason(&self) -> Option<EndReason> {
        match self.status() {
            Status::Released => Some(EndReason::Released),
            Status::Revoked => Some(EndReason::Revoked),
            Status::Expired => Some(EndReason::Expired),
            Status::Closed => Some(EndReason::StoreClosed),
            Status::Active if self.store.closed.load(Ordering::SeqCst) => {
                Some(EndReason::StoreClosed)
            }
            Status::Active => None,
        }
    }

    /// How it was lost, if it was (released is not lost).
    pub(crate) fn loss(&self) -> Option<Loss> {
        // The watch's timer may have ended it while `signal()` moved it.
        if let Some(ended) = self.watched.as_ref().and_then(WatchedHold::ended) {
            return Some(ended.into());
        }
        match self.end_reason()? {
            EndReason::Released => None,
            EndReason::Revoked => Some(Loss::Revoked),
            EndReason::Expired => Some(Loss::Expired {
                ttl_ms: self.ttl_ms,
            }),
            EndReason::StoreClosed => Some(Loss::StoreClosed),
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.loss().is_some()
    }

    /// Ends the lease: moves it from `Active` to `to` and, if that won,
    /// ends its grant (see the module doc). `Err`: another path ended it
    /// first, with the status it left.
    fn end(&self, to: Status) -> Result<(), Status> {
        debug_assert_ne!(to, Status::Active);
        // SeqCst: a signal waiter reads `status` after announcing itself in
        // the hub's SeqCst counter (see `SignalHub`).
        if let Err(now) = self.status.compare_exchange(
            Status::Active as u32,
            to as u32,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            return Err(Status::from_u32(now));
        }
        let counter = match to {
            Status::Revoked => Some(&self.lock.revocations),
            Status::Expired => Some(&self.lock.expirations),
            _ => None,
        };
        // Counted before the key moves on, so whoever the key goes to
        // (and whoever hears from them) sees the count. Relaxed: the
        // release below publishes it.
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        // Off the wheel and out of the timed registry before the key moves
        // on, so the record's entry never names a grant that has ended.
        self.store.timer.cancel(self);
        // SAFETY: we won the CAS, so no other path will release: the grant
        // is still HELD by this lease and the record alive (module doc).
        unsafe { self.record.release(self.fence, self.permits) };
        self.store.signals.notify();
        self.wake_aborted();
        Ok(())
    }

    /// The maxHold watch's timer ended the grant (and let the key go)
    /// before this state took its timing over: the state ends as lost,
    /// releasing nothing, and wakes whoever awaits its signal.
    fn ended_by_watch(&self, ended: Ended) {
        let to = match ended {
            Ended::Revoked => Status::Revoked,
            Ended::Closed => Status::Closed,
        };
        // SeqCst: as in `end`.
        if self
            .status
            .compare_exchange(
                Status::Active as u32,
                to as u32,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
        {
            self.wake_aborted();
        }
    }

    /// The holder lets go. `Ok`: it still owned the grant, and the key has
    /// been let go; `Err`: the lease was lost (the timer ended it first, or
    /// the store closed). Out of line, so that `Lease::end`, inlined into
    /// every hold, stays small.
    #[inline(never)]
    pub(crate) fn end_by_holder(&self) -> Result<(), Loss> {
        let closed = self.store.closed.load(Ordering::SeqCst);
        let to = if closed {
            Status::Closed
        } else {
            Status::Released
        };
        match self.end(to) {
            Ok(()) if closed => Err(Loss::StoreClosed),
            Ok(()) => Ok(()),
            Err(by) => Err(self.lost_to(by)),
        }
    }

    /// The loss behind a final status another path left. The holder ends
    /// its lease once, so that status is never `Released`.
    fn lost_to(&self, by: Status) -> Loss {
        match by {
            Status::Revoked => Loss::Revoked,
            Status::Expired => Loss::Expired {
                ttl_ms: self.ttl_ms,
            },
            Status::Closed => Loss::StoreClosed,
            Status::Active | Status::Released => {
                unreachable!("a lease ended by another path has a lost status")
            }
        }
    }

    /// The lease's time is up at `now`: end it, `Revoked` or `Expired` (or
    /// `Closed`, its store closed meanwhile). Answers false when it is not
    /// due after all (renewed) and should be re-armed.
    fn end_if_due(&self, now: u64) -> bool {
        let Some((at, to)) = self.expiry_ms() else {
            return true;
        };
        if now < at {
            return false;
        }
        let to = if self.store.closed.load(Ordering::SeqCst) {
            Status::Closed
        } else {
            to
        };
        // Lost the race: the holder (or a renewal) ended it first.
        let _ = self.end(to);
        true
    }

    /// After the lease ended (its status moved, SeqCst) or its store closed:
    /// wakes the tasks awaiting its loss.
    fn wake_aborted(&self) {
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
    fn renew(&self) -> Result<(), Loss> {
        if let Some(loss) = self.loss() {
            return Err(loss);
        }
        let now = self.store.clock.now_ms();
        if self.expiry_ms().is_some_and(|(at, _)| now >= at) {
            // Too late: it ran out before this renewal. End it now rather
            // than answer Ok and let the timer end it a moment later.
            self.end_if_due(now);
            // A renewal racing this one on another thread may have saved it.
            return Err(self.loss().unwrap_or(Loss::Expired {
                ttl_ms: self.ttl_ms,
            }));
        }
        // Relaxed: the timer re-reads it when it fires; a renewal racing the
        // expiry may lose, which is the ttl's meaning.
        self.renewed_ms.store(now, Ordering::Relaxed);
        match self.loss() {
            Some(loss) => Err(loss),
            None => Ok(()),
        }
    }
}

impl Due for LeaseState {
    fn due_ms(&self) -> Option<u64> {
        self.expiry_ms().map(|(at, _)| at)
    }

    fn fire(&self, now_ms: u64) -> bool {
        self.end_if_due(now_ms)
    }

    fn is_active(&self) -> bool {
        self.status() == Status::Active
    }

    fn timed_key(&self) -> (usize, u64) {
        (self.record.addr(), self.fence)
    }

    /// Only under the wheel lock (which orders this Relaxed load).
    fn timer_key(&self) -> Option<TimerKey> {
        TimerKey::unpack(self.timer.load(Ordering::Relaxed))
    }

    /// Only under the wheel lock (which orders this Relaxed store).
    fn set_timer_key(&self, key: Option<TimerKey>) {
        self.timer
            .store(key.map_or(NO_TIMER, TimerKey::pack), Ordering::Relaxed);
    }
}

impl Watched for LeaseState {
    fn wake_aborted(&self) {
        LeaseState::wake_aborted(self);
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
    pub(crate) store: &'a Arc<Core>,
    pub(crate) lock: &'a Arc<LockShared>,
    pub(crate) key: &'a str,
    pub(crate) record: HeldRecord,
    pub(crate) fence: u64,
    permits: u32,
    /// What times the lease, one word: null for a plain hold (until
    /// `signal()` asks for a state); a slot of the store's maxHold watch
    /// tagged [`WATCHED`] (a closure hold with a maxHold, until `signal()`
    /// moves its timing to a state); or the lease's [`LeaseState`], one
    /// strong count of an `Arc` the lease owns and gives back when it
    /// ends. One word, so a plain hold's end looks at one null pointer.
    state: AtomicPtr<LeaseState>,
}

/// The low bit of a lease's `state` word: it points at a slot of the
/// watch, not at a `LeaseState` (both are aligned to 8).
const WATCHED: usize = 1;

/// What a lease's `state` word points at.
enum TimedBy<'s> {
    Nothing,
    Watch(WatchedHold),
    State(&'s LeaseState),
}

/// A lease's `state` word for its watch slot `watched`.
pub(crate) fn watched_word(watched: WatchedHold) -> *mut LeaseState {
    watched.as_ptr().map_addr(|a| a | WATCHED).cast()
}

impl<'a> Lease<'a> {
    /// A lease over `granted`, owning it from now on: its end (or its
    /// drop) releases it once; `state` is its `state` word (what times
    /// it), whose strong count (if a state) it takes over.
    #[inline(always)]
    pub(crate) fn new(
        store: &'a Arc<Core>,
        lock: &'a Arc<LockShared>,
        key: &'a str,
        granted: Granted,
        state: *mut LeaseState,
    ) -> Lease<'a> {
        Lease {
            store,
            lock,
            key,
            record: granted.record,
            fence: granted.fence,
            permits: granted.permits,
            state: AtomicPtr::new(state),
        }
    }

    /// The grant this lease owns.
    pub(crate) fn granted(&self) -> Granted {
        Granted {
            record: self.record,
            fence: self.fence,
            permits: self.permits,
        }
    }

    /// The fencing token: greater than every earlier grant's of this key.
    #[inline]
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// How many of the key's permits this lease holds (1 unless the hold
    /// asked for more, or for all).
    #[inline]
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The key, as text.
    #[inline]
    pub fn key(&self) -> &str {
        self.key
    }

    /// Whether the lease was lost (revoked at maxHold, or its store closed).
    pub fn is_lost(&self) -> bool {
        self.loss().is_some()
    }

    /// `Err` of kind `Lost` once the lease is lost.
    pub fn check(&self) -> Result<(), Error> {
        match self.loss() {
            None => Ok(()),
            Some(loss) => Err(loss.error().for_key(&self.lock.name, self.key)),
        }
    }

    pub(crate) fn loss(&self) -> Option<Loss> {
        match self.timed_by() {
            TimedBy::State(s) => s.loss(),
            TimedBy::Watch(w) => w.ended().map(Loss::from).or_else(|| self.closed_loss()),
            TimedBy::Nothing => self.closed_loss(),
        }
    }

    /// `StoreClosed` once the store closed.
    fn closed_loss(&self) -> Option<Loss> {
        self.store
            .closed
            .load(Ordering::Acquire)
            .then_some(Loss::StoreClosed)
    }

    /// What times the lease now.
    #[inline]
    fn timed_by(&self) -> TimedBy<'_> {
        // Acquire: pairs with the Release of `install_state`, so the state
        // is seen initialised.
        let p = self.state.load(Ordering::Acquire);
        if p.is_null() {
            TimedBy::Nothing
        } else if p.addr() & WATCHED != 0 {
            // SAFETY: a tagged word is the slot the claim gave this lease.
            TimedBy::Watch(unsafe { WatchedHold::from_ptr(p.map_addr(|a| a & !WATCHED).cast()) })
        } else {
            // SAFETY: an untagged pointer is an Arc the lease owns until it
            // ends.
            TimedBy::State(unsafe { &*p })
        }
    }

    /// Gives the lease `state` in place of the word `was` (null, or its
    /// watch slot's) unless it got one first (a racing `signal()`);
    /// answers the one it keeps.
    fn install_state(&self, was: *mut LeaseState, state: Arc<LeaseState>) -> &LeaseState {
        let p = Arc::into_raw(state).cast_mut();
        // Release: publishes the initialised state to `timed_by`'s Acquire;
        // Acquire on failure: to see the winner's initialised.
        match self
            .state
            .compare_exchange(was, p, Ordering::Release, Ordering::Acquire)
        {
            // SAFETY: the lease now owns the count `p` carries.
            Ok(_) => unsafe { &*p },
            Err(winner) => {
                // SAFETY: `p` came from `into_raw` above and was not shared.
                drop(unsafe { Arc::from_raw(p) });
                // SAFETY: the winner's count is owned by the lease.
                unsafe { &*winner }
            }
        }
    }

    /// A handle that aborts when the lease is lost, and tells why it ended.
    pub fn signal(&self) -> Signal {
        let state = match self.timed_by() {
            TimedBy::State(s) => s,
            TimedBy::Watch(watched) => self.move_timing(watched),
            TimedBy::Nothing => self.install_state(
                std::ptr::null_mut(),
                LeaseState::new(self.store, self.lock, self.granted(), 0, 0, None),
            ),
        };
        let p: *const LeaseState = state;
        // SAFETY: `p` is an Arc's pointer whose count the lease keeps alive
        // for this call: one more count, taken over by the signal.
        let state = unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        };
        Signal { state }
    }

    /// A watched hold's first `signal()`: a `LeaseState` takes its timing
    /// over, armed on the store's wheel at the maxHold counted from the
    /// latest the grant can have come (so never early), and the slot is
    /// moved out of the watch. If the watch's timer revoked it first, the
    /// state is made lost instead.
    #[cold]
    fn move_timing(&self, watched: WatchedHold) -> &LeaseState {
        let granted_ms = watched.granted_by_ms(self.store.clock.now_ms());
        let made = Arc::new(LeaseState::granted_at(
            self.store,
            self.lock,
            self.granted(),
            watched.max_hold_ms(),
            granted_ms,
            Some(watched),
        ));
        let state = self.install_state(watched_word(watched), made.clone());
        if !std::ptr::eq(state, &*made) {
            // A `signal()` on another thread won: it moves the timing.
            return state;
        }
        match watched.move_out() {
            Ok(()) => Driver::arm(&self.store.timer, &made),
            Err(ended) => state.ended_by_watch(ended),
        }
        state
    }

    /// Ends the hold: lets the key go unless it was taken away. Always
    /// inlined: on the uncontended path (no `LeaseState`) it is a load,
    /// the release's CAS and a look at the closed flag.
    #[inline(always)]
    pub(crate) fn end(self) -> Result<(), Loss> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again.
        unsafe { this.end_in_place() }
    }

    /// The end `end` and `drop` share.
    ///
    /// # Safety
    /// Once per lease; the lease is not used afterwards.
    #[inline(always)]
    unsafe fn end_in_place(&self) -> Result<(), Loss> {
        // Acquire: as in `timed_by`.
        let p = self.state.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: the caller's promise, passed on.
            return unsafe { self.end_timed() };
        }
        // SAFETY: nothing times the lease: only we can let this grant go,
        // so it is still HELD by us and the record alive.
        unsafe { self.record.release(self.fence, self.permits) };
        self.closed_loss().map_or(Ok(()), Err)
    }

    /// The end of a lease something times: its watch slot or its state
    /// decides whether the holder or the timer lets the key go.
    ///
    /// # Safety
    /// As for `end_in_place`.
    #[inline(never)]
    unsafe fn end_timed(&self) -> Result<(), Loss> {
        match self.timed_by() {
            TimedBy::Watch(watched) => {
                // The watch's timer let the key go first.
                watched.end_by_holder().map_err(Loss::from)?;
                // SAFETY: we freed the slot while it was HELD: the grant
                // is ours to let go, still HELD and the record alive.
                unsafe { self.record.release(self.fence, self.permits) };
                self.closed_loss().map_or(Ok(()), Err)
            }
            TimedBy::State(state) => {
                // SAFETY: the lease's own count, given back here, once.
                let state = unsafe { Arc::from_raw(state) };
                let ended = state.end_by_holder();
                // Moved from the watch: the slot has no more use.
                if let Some(watched) = &state.watched {
                    watched.free();
                }
                ended
            }
            TimedBy::Nothing => unreachable!("a timed lease has a non-null state word"),
        }
    }
}

impl Drop for Lease<'_> {
    /// Reached only when the lease was not ended: its closure panicked, or
    /// its hold's future was dropped. Lets the key go.
    fn drop(&mut self) {
        // SAFETY: `end` forgets the lease, so this is the first and last end.
        let _ = unsafe { self.end_in_place() };
    }
}

impl fmt::Debug for Lease<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("lock", &self.lock.name)
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
