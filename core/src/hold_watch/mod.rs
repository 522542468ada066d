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
//! Submodules: `holder` (a lease's side: the end and the move out of
//! `HELD`), `timer_side` (the scan's look at a slot, and the revocation),
//! `thread_page` (each thread's cached page, given back when it ends).
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

/// A claimed slot, and whether the claim found the timer stopped.
pub(crate) struct Claim {
    pub(crate) watched: WatchedHold,
    pub(crate) parked: bool,
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

mod holder;
#[cfg(not(loom))]
mod thread_page;
mod timer_side;
pub(crate) use holder::WatchedHold;
use timer_side::{look_at, revoke};

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
