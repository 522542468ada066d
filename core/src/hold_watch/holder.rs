//! The holder's side of a slot: a lease's [`WatchedHold`], which ends
//! the hold (or hands its timing to a `LeaseState`) by the CAS out of
//! `HELD` that the timer's revocation races.
use super::*;

/// Whether the holder's end ignores the timer (a mutant: the key is let
/// go twice when a revocation races the end).
#[inline(always)]
fn holdline_mutant_blind_end() -> bool {
    cfg!(holdline_mutant = "watch_end_blind")
}

/// A lease's slot in the watch. While the lease lives, the slot is its
/// own: nothing claims it again before the lease frees it, so its word
/// names the lease's hold (its tag says who ended it).
#[derive(Clone, Copy)]
pub(crate) struct WatchedHold {
    pub(super) slot: NonNull<Slot>,
}

// SAFETY: a `Slot` is all atomics, and it lives in a boxed page as long as
// the store's core, which every lease's holder keeps alive: any thread may
// end a hold that a task began on another.
unsafe impl Send for WatchedHold {}
// SAFETY: as for `Send`; shared, it only reads the slot's word.
unsafe impl Sync for WatchedHold {}

impl WatchedHold {
    fn slot(&self) -> &Slot {
        // SAFETY: the page lives as long as the watch (type doc).
        unsafe { self.slot.as_ref() }
    }

    /// The slot's address, for a lease's tagged state word.
    pub(crate) fn as_ptr(self) -> *mut Slot {
        self.slot.as_ptr()
    }

    /// The hold of slot `slot`, from [`as_ptr`](Self::as_ptr).
    ///
    /// # Safety
    /// `slot` came from `as_ptr` of a hold whose lease still lives.
    pub(crate) unsafe fn from_ptr(slot: *mut Slot) -> WatchedHold {
        WatchedHold {
            // SAFETY: from `as_ptr`, so not null (the caller's promise).
            slot: unsafe { NonNull::new_unchecked(slot) },
        }
    }

    /// The word of the hold's claim: the slot's, but `HELD`. Only the
    /// timer or this holder change it meanwhile, and both keep `seq`.
    fn held_word(&self) -> u64 {
        // Relaxed: only `seq` is used, which nobody changes under a lease.
        (self.slot().word.load(Ordering::Relaxed) & !TAG) | HELD
    }

    /// Whether the timer ended the hold (or is ending it), and how.
    pub(crate) fn ended(&self) -> Option<Ended> {
        // Acquire: a holder that sees the end sees the revocation's count.
        Ended::of_tag(tag(self.slot().word.load(Ordering::Acquire)))
    }

    /// The holder ends the hold. `Ok`: it was still held, the slot is
    /// free, and the caller lets the key go. `Err`: the timer let it go
    /// (the caller must not), and the slot is free again.
    #[inline]
    pub(crate) fn end_by_holder(&self) -> Result<(), Ended> {
        if holdline_mutant_blind_end() {
            // The slot freed by a store: the timer's revocation is missed.
            self.slot().word.swap(FREE, Ordering::AcqRel);
            return Ok(());
        }
        self.leave_held(FREE).map_err(|now| {
            // Release: the timer is done with the slot; the next claim
            // (this page's thread) reads it fresh.
            self.slot()
                .word
                .store((now & !TAG) | FREE, Ordering::Release);
            Ended::of_tag(tag(now)).unwrap_or(Ended::Revoked)
        })
    }

    /// `signal()` hands the timing over to a `LeaseState`. `Ok`: the
    /// slot is `MOVED` and the caller arms the state; `Err`: the timer
    /// had ended the hold (it let the key go).
    pub(crate) fn move_out(&self) -> Result<(), Ended> {
        self.leave_held(MOVED)
            .map_err(|now| Ended::of_tag(tag(now)).unwrap_or(Ended::Revoked))
    }

    /// The holder moves its slot out of `HELD` to `to`. `Err`: the timer
    /// won the slot first; answers its word once the timer has let the
    /// key go (waiting while it is `REVOKING`, since the timer still uses
    /// the slot's fields then).
    #[inline]
    fn leave_held(&self, to: u64) -> Result<(), u64> {
        let slot = self.slot();
        let held = self.held_word();
        // AcqRel: against the timer's CAS out of HELD, one wins; Acquire
        // on failure, to see the timer's word.
        match slot.word.compare_exchange(
            held,
            (held & !TAG) | to,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Ok(()),
            Err(now) => Err(Self::after_timer(slot, now)),
        }
    }

    /// Waits while the timer is revoking through `slot`; answers its word.
    #[cold]
    fn after_timer(slot: &Slot, mut now: u64) -> u64 {
        while tag(now) == REVOKING {
            yield_now();
            // Acquire: the timer's release of the slot (its last use).
            now = slot.word.load(Ordering::Acquire);
        }
        now
    }

    /// A moved (or timer-ended) slot's holder is done: frees the slot.
    pub(crate) fn free(&self) {
        // Release: as in `free_after_timer`.
        let slot = self.slot();
        // Relaxed: only `seq` is kept, which nobody changes under a lease.
        let word = slot.word.load(Ordering::Relaxed);
        slot.word.store((word & !TAG) | FREE, Ordering::Release);
    }

    /// A claim that found its slot parked (so the timer was not ticking
    /// and will not see the hold for a while) fixes the hold's deadline
    /// itself, from `now_ms` read just after its grant: on that cold path
    /// a clock read costs nothing that matters, and the hold's times (its
    /// maxHold, `inspect`'s held-for) are then exact rather than counted
    /// from the timer's first look.
    pub(crate) fn seen_at(&self, now_ms: u64) {
        let slot = self.slot();
        let max = slot.max_hold_ms.load(Ordering::Relaxed);
        slot.due_ms.store(now_ms + max + 1, Ordering::Relaxed);
        // Release: as in `look_at`, which skips a hold whose seq it finds.
        slot.seen_seq
            .store(seq(self.held_word()), Ordering::Release);
    }

    /// The maxHold the hold was claimed with.
    pub(crate) fn max_hold_ms(&self) -> u64 {
        // Relaxed: written by the claim, on this holder's own thread or
        // before its task moved (which synchronised).
        self.slot().max_hold_ms.load(Ordering::Relaxed)
    }

    /// The latest the hold can have been granted (ms on the store's
    /// clock): when the timer first saw it, else `now_ms`.
    pub(crate) fn granted_by_ms(&self, now_ms: u64) -> u64 {
        let slot = self.slot();
        // Acquire: pairs with the timer's Release of `seen_seq`, after it
        // wrote `due_ms`.
        if slot.seen_seq.load(Ordering::Acquire) == seq(self.held_word()) {
            let due = slot.due_ms.load(Ordering::Relaxed);
            let max = slot.max_hold_ms.load(Ordering::Relaxed);
            return due.saturating_sub(max + 1).min(now_ms);
        }
        now_ms
    }
}
