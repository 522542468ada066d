//! The lease a `hold` closure runs under ([`Lease`]): borrowed from its
//! hold's frame, owning its grant from the grant on, and ended once (by
//! its hold, or by its drop when the closure panicked or the future was
//! dropped).
//!
//! What times it is one word, `state`: null for a plain hold (the
//! uncontended path allocates nothing; its end is a load, the release's
//! CAS and a look at the closed flag), a slot of the store's maxHold
//! watch tagged `WATCHED`, or the lease's own `LeaseState` (a strong
//! count the lease gives back at its end). The word moves only forward
//! (null or watched to a state), by CAS, so a racing `signal()` installs
//! one state.

use super::{Core, LeaseState, Loss, Signal};
use crate::driver::Driver;
use crate::error::Error;
use crate::hold_watch::WatchedHold;
use crate::lock_shared::LockShared;
use crate::record_ref::{Granted, HeldRecord};
use crate::sync::{Arc, AtomicPtr, Ordering};
use std::fmt;

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
