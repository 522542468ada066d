//! [`LeaseState`]: what one grant shares with the timer and with signals
//! (its status, its timing, its record), and the one `end` that every path
//! takes.
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

use super::signal::AbortWakers;
use super::{Core, EndReason, Loss};
use crate::driver::{this_thread_number, Due};
use crate::heartbeat::HeartbeatState;
use crate::hold_watch::{Ended, WatchedHold};
use crate::lock_shared::LockShared;
use crate::record_ref::{Granted, HeldRecord};
use crate::sync::AtomicBool;
use crate::sync::{Arc, AtomicU32, AtomicU64, Mutex, Ordering};
use crate::timer::TimerKey;
use std::time::Duration;

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
    /// Picks its shard of the store's timer: the number of the thread
    /// that made it (see `driver`'s module doc).
    home: usize,
    /// The pending wheel entry, packed; read and written under its shard's
    /// lock.
    timer: AtomicU64,
    /// Tasks awaiting [`Signal::aborted`](super::Signal::aborted);
    /// `has_wakers` lets an ending skip the mutex when there are none (see
    /// `wake_aborted`).
    pub(super) wakers: Mutex<AbortWakers>,
    pub(super) has_wakers: AtomicBool,
    /// A closure hold's slot in the maxHold watch, which timed it until
    /// `signal()` moved the timing here: freed when the lease ends.
    pub(super) watched: Option<WatchedHold>,
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
    pub(super) fn granted_at(
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
            home: this_thread_number(),
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
    pub(super) fn ended_by_watch(&self, ended: Ended) {
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

    /// Renews a handle-style lease: its ttl counts again from now.
    pub(super) fn renew(&self) -> Result<(), Loss> {
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

    fn home(&self) -> usize {
        self.home
    }

    /// Only under its shard's lock (which orders this Relaxed load).
    fn timer_key(&self) -> Option<TimerKey> {
        TimerKey::unpack(self.timer.load(Ordering::Relaxed))
    }

    /// Only under its shard's lock (which orders this Relaxed store).
    fn set_timer_key(&self, key: Option<TimerKey>) {
        self.timer
            .store(key.map_or(NO_TIMER, TimerKey::pack), Ordering::Relaxed);
    }
}
