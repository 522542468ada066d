//! Idle keys cost nothing: memory comes back once keys go idle. Counted by
//! a global allocator, so this file holds one test at a time (see `SERIAL`).

mod common;

use common::store_with;
use holdline::Store;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, only counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

static SERIAL: Mutex<()> = Mutex::new(());

fn live() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Waits (up to 30 s from `started`) until the bytes allocated are within
/// 64 KiB of `base`, reclaiming and letting the epoch hand back what it
/// holds: the sweeper's batch is freed once the epoch advances past it,
/// which needs a little activity (reclaim_idle's flushes). Answers the
/// bytes left over `base`.
fn bytes_back_to(base: isize, store: &Store, started: Instant, after: &str) -> isize {
    let mut left = live() - base;
    while left >= 64 * 1024 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{left} bytes left after {after}"
        );
        store.reclaim_idle();
        std::thread::sleep(Duration::from_millis(10));
        left = live() - base;
    }
    left
}

#[test]
fn a_million_idle_keys_give_their_memory_back() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n: u64 = if cfg!(debug_assertions) {
        200_000
    } else {
        1_000_000
    };
    let (store, lock) = store_with("ids");
    // Warm up: the table's shards, the epoch's thread state, the driver.
    lock.hold("warm", |_| ()).unwrap();
    store.reclaim_idle();
    let base = live();
    for id in 0..n {
        lock.hold(id, |_| ()).unwrap();
    }
    let peak = live() - base;
    let started = Instant::now();
    // The background sweeper alone brings it back (no reclaim_idle here).
    while lock.stats().live_keys != 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "idle keys never reclaimed: {:?}",
            lock.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let the epoch hand the memory back: the sweeper's batch is freed once
    // the epoch advances past it, which needs a little activity (here,
    // reclaim_idle's flushes) and that the sweeping thread has unpinned.
    let left = bytes_back_to(base, &store, started, &format!("{n} keys went idle"));
    eprintln!(
        "{n} keys: peak {peak} B over base, {left} B left after idle ({:?} after the last hold)",
        started.elapsed()
    );
    assert_eq!(lock.stats().grants, n + 1);
}

fn nest(lock: &holdline::Lock, depth: u32, at_bottom: &mut dyn FnMut()) {
    if depth == 0 {
        at_bottom();
    } else {
        lock.hold(depth, |_| nest(lock, depth - 1, at_bottom))
            .unwrap();
    }
}

#[test]
fn a_held_key_is_small() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (store, lock) = store_with("sizes");
    // Held keys: 2,000 nested holds, measured at the bottom (on a thread
    // with room for that many frames).
    let depth = 2000;
    let per_key = std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || {
            lock.hold("warm", |_| ()).unwrap();
            // Pre-grow this thread's list of running holds, which is per
            // thread, not per key, so the measure is the keys' own cost.
            nest(&lock, depth, &mut || ());
            store.reclaim_idle();
            let base = live();
            let mut per_key = 0;
            nest(&lock, depth, &mut || {
                per_key = (live() - base) / depth as isize
            });
            per_key
        })
        .unwrap()
        .join()
        .unwrap();
    eprintln!("a held key with no waiters: {per_key} bytes (key text of 1-4 bytes included)");
    assert!(per_key < 128, "{per_key} bytes per held key");
    // A waiter is a node on its own thread's stack (no heap): its size is
    // asserted in the core's unit tests (`record::tests`).
}

/// A lock nobody has a handle of and whose keys are reclaimed is
/// forgotten, counters and all, so names used once cost nothing; a name
/// opened again fences above every grant it made before.
#[test]
fn an_idle_lock_name_is_forgotten_and_fences_on_when_made_again() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (store, kept) = store_with("kept");
    kept.hold("k", |_| ()).unwrap();
    store.reclaim_idle();
    let base = live();
    let mut last = 0;
    // Their handles kept until all are counted: a background sweep (due
    // 50 ms after the first name) may forget an idle name sooner, on a
    // machine slow enough.
    let mut handles = Vec::new();
    for i in 0..1000 {
        let once = store.lock(&format!("once-{i}")).open().unwrap();
        last = once.hold("k", |l| l.fence()).unwrap();
        handles.push(once);
    }
    assert_eq!(
        store.locks().len(),
        1001,
        "all known while their handles live"
    );
    drop(handles);
    store.reclaim_idle();
    let left: Vec<(String, u64)> = store
        .locks()
        .into_iter()
        .map(|(n, s)| (n, s.grants))
        .collect();
    assert_eq!(left, [("kept".to_owned(), 1)], "a handle keeps its lock");
    // A thousand names used once cost (almost) nothing once forgotten: the
    // epoch hands their tables back after a few more flushes.
    bytes_back_to(base, &store, Instant::now(), "1,000 names were forgotten");
    let again = store.lock("once-999").open().unwrap();
    let fence = again.hold("k", |l| l.fence()).unwrap();
    assert!(fence > last, "{fence} after {last}");
    assert_eq!(again.stats().grants, 1, "its counters started afresh");
}
