//! An allocation-counting global allocator: it keeps the number of bytes
//! currently allocated, spread over cache-padded per-thread slots so that
//! counting does not itself become a shared hot line under contention.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering::Relaxed};

const SLOTS: usize = 32;

#[repr(align(128))]
struct Slot(AtomicIsize);

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: Slot = Slot(AtomicIsize::new(0));
static LIVE: [Slot; SLOTS] = [ZERO; SLOTS];
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MY_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn slot() -> &'static AtomicIsize {
    let i = MY_SLOT
        .try_with(|s| {
            let mut i = s.get();
            if i == usize::MAX {
                i = NEXT_SLOT.fetch_add(1, Relaxed) % SLOTS;
                s.set(i);
            }
            i
        })
        .unwrap_or(0);
    &LIVE[i].0
}

/// The system allocator, counting live bytes.
pub struct Counting;

// SAFETY: every call is forwarded unchanged to `System`; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc`, passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            slot().fetch_add(layout.size() as isize, Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            slot().fetch_add(layout.size() as isize, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract: `ptr` came from this allocator
        // (that is, from `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        slot().fetch_sub(layout.size() as isize, Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`, passed on unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            slot().fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        }
        p
    }
}

/// Bytes allocated now (by every thread) and not yet freed.
pub fn live_bytes() -> isize {
    LIVE.iter().map(|s| s.0.load(Relaxed)).sum()
}
