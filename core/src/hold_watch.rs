//! The watch on closure holds with a maxHold: how such a hold is timed
//! without a lock the whole store shares, an allocation or a clock read
//! on its path.
//!
//! Each thread that holds through a lock with a maxHold gets a [`Page`] of
//! [`SLOTS`] slots of its own in its store's [`HoldWatch`]. A hold claims a
//! free slot of its thread's page (one CAS, on a line only that thread
//! writes between the timer's visits), writes its grant there, and frees
//! the slot at its end (one CAS). It reads no clock: while any hold may
//! run, the store's timer thread scans the pages every [`TICK_MS`], and the
//! first scan that sees a hold fixes its deadline at that scan's reading
//! plus the maxHold (plus one, for the clock's whole milliseconds). The
//! hold was granted before that scan, so it is never revoked early; it was
//! not there at the scan before, so it is revoked at most a tick (and the
//! timer thread's own lateness) after its maxHold.
//!
//! # A slot's word
//!
//! `seq << 4 | PARKED | tag`. `seq` rises at each claim, so the timer tells
//! a new hold from one it has seen. Each move of the tag is one CAS:
//!
//! | from | to | by | when |
//! | --- | --- | --- | --- |
//! | `FREE` | `HELD` | the page's thread | a grant; its fields written first |
//! | `HELD` | `FREE` | the holder | its end, before it lets the key go |
//! | `HELD` | `REVOKING` | the timer | the hold's deadline passed |
//! | `REVOKING` | `REVOKED`, `CLOSED` | the timer | the key let go (`CLOSED`: its store had closed) |
//! | `REVOKED`, `CLOSED` | `FREE` | the holder | its end, which answers lost |
//! | `HELD` | `MOVED` | the holder's `signal()` | a `LeaseState` took the timing over |
//! | `MOVED` | `FREE` | the holder | its end, through that state |
//!
//! The CAS out of `HELD` decides who lets the key go: the holder (to
//! `FREE`, `MOVED`) or the timer (to `REVOKING`), never both. A holder that
//! finds `REVOKING` waits for the timer to finish with its slot, which
//! names the holder's lock and record, before it frees the slot.
//!
//! # When the timer stops ticking
//!
//! Ticking costs a wake-up a tick, so the timer stops once no hold has run
//! for [`IDLE_TICKS`] ticks: it sets `PARKED` on every free slot by CAS
//! ([`HoldWatch::park_all`]), and gives up if it meets a hold. A claim's
//! CAS clears `PARKED` and answers that it found it, and the claimer then
//! starts the timer again (`Driver::start_ticking`). The walk and the
//! claims meet on each slot's word, so one of the two CASes of a slot
//! comes first: either the walk finds the hold, or the claim finds the
//! bit. A new page starts parked.
//!
//! # Lifetimes
//!
//! Pages are boxed and live as long as the watch (the store's core), so a
//! slot's address stays valid for every lease of that store. A slot names
//! its grant's record and lock by pointer; the timer follows them only
//! after its CAS out of `HELD`, while the record is still `HELD` by that
//! grant (so not retired) and the key is live (so its lock is in the
//! store's map, which the timer's scan keeps alive), even if the hold's
//! lease was leaked.

use crate::lock_shared::LockShared;
use crate::record::Record;
use crate::record_ref::{Granted, HeldRecord};
use crate::sync::{lock, yield_now, AtomicPtr, AtomicU32, AtomicU64, Mutex, Ordering};
use std::ptr::NonNull;

/// Slots in a thread's page: holds with a maxHold one thread can have
/// running at once before the next falls back to the store's wheel.
pub(crate) const SLOTS: usize = 8;
/// The timer's scan period while holds may run, in ms: how late past its
/// maxHold a hold can be revoked.
pub(crate) const TICK_MS: u64 = 1;
/// Ticks without a hold before the timer stops ticking.
pub(crate) const IDLE_TICKS: u32 = 64;

const TAG: u64 = 0b0111;
const FREE: u64 = 0;
const HELD: u64 = 1;
const REVOKING: u64 = 2;
const REVOKED: u64 = 3;
const CLOSED: u64 = 4;
const MOVED: u64 = 5;
/// On a free slot: the timer stopped ticking; whoever claims starts it.
const PARKED: u64 = 0b1000;
const SEQ_SHIFT: u32 = 4;

fn tag(w: u64) -> u64 {
    w & TAG
}

fn seq(w: u64) -> u64 {
    w >> SEQ_SHIFT
}

/// How a watched hold was ended by the timer rather than its holder.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Ended {
    /// Revoked at its maxHold.
    Revoked,
    /// Revoked at its maxHold after its store closed.
    Closed,
}

impl Ended {
    fn of_tag(t: u64) -> Option<Ended> {
        match t {
            REVOKING | REVOKED => Some(Ended::Revoked),
            CLOSED => Some(Ended::Closed),
            _ => None,
        }
    }
}

/// One running hold's place in the watch.
pub(crate) struct Slot {
    word: AtomicU64,
    // The grant, written by the claimer before its CAS publishes them.
    record: AtomicPtr<Record>,
    lock: AtomicPtr<LockShared>,
    fence: AtomicU64,
    permits: AtomicU32,
    max_hold_ms: AtomicU64,
    // The timer's own: the seq of the hold whose deadline it fixed, and
    // that deadline; the seq it saw at its last scan.
    seen_seq: AtomicU64,
    due_ms: AtomicU64,
    scanned_seq: AtomicU64,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            // Parked: a new page's first claim starts the timer.
            word: AtomicU64::new(PARKED),
            record: AtomicPtr::new(std::ptr::null_mut()),
            lock: AtomicPtr::new(std::ptr::null_mut()),
            fence: AtomicU64::new(0),
            permits: AtomicU32::new(0),
            max_hold_ms: AtomicU64::new(0),
            seen_seq: AtomicU64::new(0),
            due_ms: AtomicU64::new(0),
            scanned_seq: AtomicU64::new(0),
        }
    }
}

/// A thread's slots.
#[repr(align(128))]
pub(crate) struct Page {
    slots: [Slot; SLOTS],
}

impl Page {
    fn new() -> Box<Page> {
        Box::new(Page {
            slots: std::array::from_fn(|_| Slot::new()),
        })
    }

    /// Claims a free slot for `granted`; `None`: every slot is taken.
    /// Only the page's thread claims, so a free slot stays free until its
    /// CAS, except for the timer's `PARKED` bit.
    #[inline]
    fn claim(&self, granted: &Granted, lock: &LockShared, max_hold_ms: u64) -> Option<Claim> {
        for slot in &self.slots {
            // Relaxed: only this thread moves a slot out of FREE, and the
            // CAS below checks the word.
            let mut w = slot.word.load(Ordering::Relaxed);
            if tag(w) != FREE {
                continue;
            }
            slot.record
                .store(granted.record.as_ptr().cast_mut(), Ordering::Relaxed);
            slot.lock
                .store((lock as *const LockShared).cast_mut(), Ordering::Relaxed);
            slot.fence.store(granted.fence, Ordering::Relaxed);
            slot.permits.store(granted.permits, Ordering::Relaxed);
            slot.max_hold_ms.store(max_hold_ms, Ordering::Relaxed);
            loop {
                let held = ((seq(w) + 1) << SEQ_SHIFT) | HELD;
                // Release: publishes the fields above to the timer's
                // Acquire load of the word. Relaxed on failure: the timer
                // set PARKED; the word is read again.
                match slot
                    .word
                    .compare_exchange_weak(w, held, Ordering::Release, Ordering::Relaxed)
                {
                    Ok(_) => {
                        return Some(Claim {
                            watched: WatchedHold {
                                slot: NonNull::from(slot),
                            },
                            parked: holdline_mutant_parked(w),
                        })
                    }
                    Err(now) => w = now,
                }
            }
        }
        None
    }
}

/// Whether a claim that replaced `w` must start the timer.
#[inline(always)]
fn holdline_mutant_parked(w: u64) -> bool {
    // The mutant forgets the bit: a walk that parked this slot stops the
    // timer while the hold runs, and nothing revokes it.
    if cfg!(holdline_mutant = "claim_ignores_park") {
        return false;
    }
    w & PARKED != 0
}

/// Whether the holder's end ignores the timer (a mutant: the key is let
/// go twice when a revocation races the end).
#[inline(always)]
fn holdline_mutant_blind_end() -> bool {
    cfg!(holdline_mutant = "watch_end_blind")
}

/// A claimed slot, and whether the claim found the timer stopped.
pub(crate) struct Claim {
    pub(crate) watched: WatchedHold,
    pub(crate) parked: bool,
}

/// A lease's slot in the watch. While the lease lives, the slot is its
/// own: nothing claims it again before the lease frees it, so its word
/// names the lease's hold (its tag says who ended it).
#[derive(Clone, Copy)]
pub(crate) struct WatchedHold {
    slot: NonNull<Slot>,
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

/// A hold the timer found due, and the word it saw.
struct Due {
    slot: NonNull<Slot>,
    word: u64,
}

/// What a scan found.
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct Scan {
    /// A hold is running or ran since the last scan.
    pub(crate) active: bool,
    /// Holds the timer revoked.
    pub(crate) revoked: usize,
}

/// Names a live thread: the address of its thread-local cache (no other
/// live thread has it; one that ends gives its pages up first).
#[cfg(not(loom))]
type Owner = usize;
#[cfg(loom)]
type Owner = crate::sync::ThreadId;

struct PageEntry {
    page: Box<Page>,
    /// The thread whose holds claim its slots; `None`: free to adopt.
    owner: Option<Owner>,
}

/// A store's watch: every thread's page.
pub(crate) struct HoldWatch {
    /// Names the watch in a thread's cache (never reused in a process).
    id: u64,
    pages: Mutex<Vec<PageEntry>>,
}

#[cfg(not(loom))]
mod thread_page {
    //! Each thread's page of the store it last held in with a maxHold,
    //! and the giving back of its pages when the thread ends.
    use super::{HoldWatch, Page};
    use std::cell::{Cell, RefCell};
    use std::sync::{Arc, Weak};

    std::thread_local! {
        /// (watch id, page): no destructor, so reading it is a plain load.
        static CACHED: Cell<(u64, *const Page)> = const { Cell::new((0, std::ptr::null())) };
        /// Every page this thread owns, given back when it ends.
        static OWNED: RefCell<Owned> = const { RefCell::new(Owned(Vec::new())) };
    }

    struct Owned(Vec<(Weak<HoldWatch>, *const Page)>);

    impl Drop for Owned {
        fn drop(&mut self) {
            let _ = CACHED.try_with(|c| c.set((0, std::ptr::null())));
            for (watch, page) in self.0.drain(..) {
                if let Some(watch) = watch.upgrade() {
                    watch.disown(page);
                }
            }
        }
    }

    /// This thread's name as a page's owner; `None` once its
    /// thread-locals are gone (it is ending).
    pub(super) fn identity() -> Option<usize> {
        CACHED.try_with(|c| c as *const _ as usize).ok()
    }

    /// This thread's page of `watch`, if it is the cached one.
    #[inline(always)]
    pub(super) fn cached(id: u64) -> Option<*const Page> {
        CACHED
            .try_with(|c| {
                let (cached_id, page) = c.get();
                (cached_id == id).then_some(page)
            })
            .ok()
            .flatten()
    }

    /// Remembers `page` as this thread's in `watch`; `false` when the
    /// thread is ending (its thread-locals are gone).
    pub(super) fn remember(watch: &Arc<HoldWatch>, page: *const Page, new: bool) -> bool {
        if new {
            let listed = OWNED.try_with(|o| match o.try_borrow_mut() {
                Ok(mut o) => {
                    o.0.push((Arc::downgrade(watch), page));
                    true
                }
                Err(_) => false,
            });
            if listed != Ok(true) {
                return false;
            }
        }
        CACHED.try_with(|c| c.set((watch.id, page))).is_ok()
    }
}

impl HoldWatch {
    pub(crate) fn new() -> HoldWatch {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        HoldWatch {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            pages: Mutex::new(Vec::new()),
        }
    }

    /// Claims a slot of this thread's page for a grant of `lock` with a
    /// maxHold of `max_hold_ms`. `None`: no slot (the thread has that many
    /// holds running, or is ending): the caller times the hold otherwise.
    #[inline]
    pub(crate) fn claim(
        this: &crate::sync::Arc<Self>,
        granted: &Granted,
        lock: &LockShared,
        max_hold_ms: u64,
    ) -> Option<Claim> {
        let page = Self::page_of_this_thread(this)?;
        // SAFETY: pages live as long as the watch, which `this` keeps.
        unsafe { &*page }.claim(granted, lock, max_hold_ms)
    }

    #[cfg(not(loom))]
    #[inline(always)]
    fn page_of_this_thread(this: &crate::sync::Arc<Self>) -> Option<*const Page> {
        match thread_page::cached(this.id) {
            Some(page) => Some(page),
            None => this.find_page(),
        }
    }

    /// Under loom, threads have no thread-locals of loom's: every claim
    /// looks its page up under the mutex.
    #[cfg(loom)]
    fn page_of_this_thread(this: &crate::sync::Arc<Self>) -> Option<*const Page> {
        Some(this.own_page(crate::sync::current_thread().id()).0)
    }

    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn find_page(self: &crate::sync::Arc<Self>) -> Option<*const Page> {
        let (page, new) = self.own_page(thread_page::identity()?);
        if thread_page::remember(self, page, new) {
            return Some(page);
        }
        if new {
            // The thread is ending: its pages are not listed to be given
            // back, so give this one back now.
            self.disown(page);
        }
        None
    }

    /// This thread's page: its own, an orphan's, or a new one; and
    /// whether it is newly this thread's.
    fn own_page(&self, me: Owner) -> (*const Page, bool) {
        let mut pages = lock(&self.pages);
        if let Some(e) = pages.iter().find(|e| e.owner == Some(me)) {
            return (&*e.page as *const Page, false);
        }
        if let Some(e) = pages.iter_mut().find(|e| e.owner.is_none()) {
            e.owner = Some(me);
            return (&*e.page as *const Page, true);
        }
        let page = Page::new();
        let p = &*page as *const Page;
        pages.push(PageEntry {
            page,
            owner: Some(me),
        });
        (p, true)
    }

    /// A thread ended: its page may be adopted (slots a task of it still
    /// holds stay claimed until that task's hold ends).
    #[cfg(not(loom))]
    fn disown(&self, page: *const Page) {
        let mut pages = lock(&self.pages);
        if let Some(e) = pages.iter_mut().find(|e| std::ptr::eq(&*e.page, page)) {
            e.owner = None;
        }
    }

    /// How many pages the watch has (for tests).
    #[cfg(test)]
    pub(crate) fn page_count(&self) -> usize {
        lock(&self.pages).len()
    }

    /// The timer's scan at `now_ms`: fixes the deadline of each hold seen
    /// for the first time, and revokes each hold past it (every one, with
    /// `all_due`). `closed`: the store closed (the revoked end `CLOSED`).
    /// `on_panic` is told of a revocation whose hand-over panicked (a
    /// waker's); the scan goes on.
    pub(crate) fn scan(&self, now_ms: u64, all_due: bool, closed: bool) -> Scan {
        let mut scan = Scan::default();
        let mut due = Vec::new();
        {
            let pages = lock(&self.pages);
            for slot in pages.iter().flat_map(|e| e.page.slots.iter()) {
                scan.active |= look_at(slot, now_ms, all_due, &mut due);
            }
        }
        // Revoked outside the mutex: a hand-over may run a waker, which
        // may hold (and claim) again.
        for d in due {
            if revoke(&d, closed) {
                scan.revoked += 1;
            }
        }
        scan
    }

    /// The timer stops ticking: parks every free slot. `false`: a hold is
    /// running (the walk stopped there), so ticking goes on.
    pub(crate) fn park_all(&self) -> bool {
        let pages = lock(&self.pages);
        for slot in pages.iter().flat_map(|e| e.page.slots.iter()) {
            // Relaxed: the CAS below decides; its value is only a guess.
            let mut w = slot.word.load(Ordering::Relaxed);
            loop {
                if tag(w) != FREE {
                    return false;
                }
                if w & PARKED != 0 {
                    break;
                }
                // Relaxed: the CAS's place in the slot's order against a
                // claim's CAS is all the argument needs (module doc).
                match slot.word.compare_exchange_weak(
                    w,
                    w | PARKED,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(now) => w = now,
                }
            }
        }
        true
    }

    /// How long the hold of grant `fence` on `record` has run and has left
    /// at `now_ms`, if a slot holds it.
    pub(crate) fn timing(
        &self,
        record: *const Record,
        fence: u64,
        now_ms: u64,
    ) -> Option<(u64, u64)> {
        let pages = lock(&self.pages);
        let slot = pages.iter().flat_map(|e| e.page.slots.iter()).find(|s| {
            // Acquire: the claim's fields, published by its CAS.
            tag(s.word.load(Ordering::Acquire)) == HELD
                && std::ptr::eq(s.record.load(Ordering::Relaxed), record)
                && s.fence.load(Ordering::Relaxed) == fence
        })?;
        let max = slot.max_hold_ms.load(Ordering::Relaxed);
        let granted = WatchedHold {
            slot: NonNull::from(slot),
        }
        .granted_by_ms(now_ms);
        let left = (granted + max).saturating_sub(now_ms);
        Some((now_ms - granted, left))
    }

    /// The latest deadline of the holds running now (ms on the store's
    /// clock), counting one not seen yet from `now_ms`.
    pub(crate) fn latest_due(&self, now_ms: u64) -> Option<u64> {
        let pages = lock(&self.pages);
        pages
            .iter()
            .flat_map(|e| e.page.slots.iter())
            .filter_map(|s| {
                let w = s.word.load(Ordering::Acquire);
                (tag(w) == HELD).then(|| {
                    let max = s.max_hold_ms.load(Ordering::Relaxed);
                    let watched = WatchedHold {
                        slot: NonNull::from(s),
                    };
                    watched.granted_by_ms(now_ms) + max + 1
                })
            })
            .max()
    }
}

/// One slot in a scan: answers whether it shows activity, and lists it in
/// `due` if its hold's deadline passed.
fn look_at(slot: &Slot, now_ms: u64, all_due: bool, due: &mut Vec<Due>) -> bool {
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
fn revoke(due: &Due, closed: bool) -> bool {
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
