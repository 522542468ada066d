//! The timer's side of a slot: its look at each slot in a scan (fixing a
//! new hold's deadline) and its revocation of a hold past it, by the CAS
//! out of `HELD` that the holder's end races.
use super::*;

/// A hold the timer found due, and the word it saw.
pub(super) struct Due {
    slot: NonNull<Slot>,
    word: u64,
}

/// One slot in a scan: answers whether it shows activity, and lists it in
/// `due` if its hold's deadline passed.
pub(super) fn look_at(slot: &Slot, now_ms: u64, all_due: bool, due: &mut Vec<Due>) -> bool {
    // Acquire: pairs with the claim's Release, so the grant's fields are
    // read as the claimer wrote them.
    let w = slot.word.load(Ordering::Acquire);
    // Relaxed: `scanned_seq` is the timer's own, under the watch's mutex
    // (which this scan holds).
    let ran = slot.scanned_seq.swap(seq(w), Ordering::Relaxed) != seq(w);
    if tag(w) != HELD {
        return ran;
    }
    // Acquire: a claim that fixed its own deadline (`seen_at`) wrote
    // `due_ms` first.
    let deadline = if slot.seen_seq.load(Ordering::Acquire) == seq(w) {
        slot.due_ms.load(Ordering::Relaxed)
    } else {
        // Granted before this scan: due a maxHold (and a ms, for the
        // clock's rounding) from now, never earlier.
        let at = now_ms + slot.max_hold_ms.load(Ordering::Relaxed) + 1;
        slot.due_ms.store(at, Ordering::Relaxed);
        // Release: `granted_by_ms` reads `due_ms` after this.
        slot.seen_seq.store(seq(w), Ordering::Release);
        at
    };
    if all_due || deadline <= now_ms {
        due.push(Due {
            slot: NonNull::from(slot),
            word: w,
        });
    }
    true
}

/// Sets a slot's word when the timer is done with it, unwinding included.
struct DoneWithSlot<'a> {
    slot: &'a Slot,
    word: u64,
}

impl Drop for DoneWithSlot<'_> {
    fn drop(&mut self) {
        // Release: the timer's last use of the slot's fields and of the
        // record happen before a holder frees the slot.
        self.slot.word.store(self.word, Ordering::Release);
    }
}

/// The timer revokes a due hold: wins the slot from its holder, counts
/// the revocation and lets the key go. `false`: the holder ended it first.
pub(super) fn revoke(due: &Due, closed: bool) -> bool {
    // SAFETY: pages live as long as the watch, and the scan's caller keeps
    // the store's core (so the watch) alive.
    let slot = unsafe { due.slot.as_ref() };
    let revoking = (due.word & !TAG) | REVOKING;
    // AcqRel: against the holder's CAS out of HELD, one wins.
    if slot
        .word
        .compare_exchange(due.word, revoking, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    let done = DoneWithSlot {
        slot,
        word: (due.word & !TAG) | if closed { CLOSED } else { REVOKED },
    };
    // Relaxed: published by the claim's Release, which the scan's Acquire
    // load of the word (the one this CAS checked) saw.
    let lock = slot.lock.load(Ordering::Relaxed);
    let record = slot.record.load(Ordering::Relaxed);
    let (fence, permits) = (
        slot.fence.load(Ordering::Relaxed),
        slot.permits.load(Ordering::Relaxed),
    );
    // SAFETY: the key is held by this grant, so it is live and its lock is
    // in the store's map, which the scan's caller keeps (module doc).
    let lock = unsafe { &*lock };
    if !closed {
        // Relaxed: the release below publishes it, as in `LeaseState::end`.
        lock.revocations.fetch_add(1, Ordering::Relaxed);
    }
    // SAFETY: we won the slot out of HELD, so the grant is still HELD and
    // this is its one release (the holder will not release it).
    unsafe { HeldRecord::from_ptr(record).release(fence, permits) };
    drop(done);
    true
}
