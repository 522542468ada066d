//! Mutual exclusion under stress: many threads, many keys, every way in
//! (hold, try_hold, zero and short waits, handle leases), with idle keys
//! reclaimed underneath. In release mode (the CI run) over a million holds.

mod common;

use common::store_with;
use holdline::ErrorKind;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// xorshift: a deterministic, cheap per-thread key picker.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn never_two_holders_of_one_key() {
    let threads = 8;
    let per_thread: u64 = if cfg!(debug_assertions) {
        20_000
    } else {
        160_000
    };
    let keys = 24;
    let (store, lock) = store_with("stress");
    let inside: Arc<Vec<AtomicU32>> = Arc::new((0..keys).map(|_| AtomicU32::new(0)).collect());
    let last_fence: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let granted = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));

    // Reclaims idle keys all along, racing lookups and creations.
    let sweeper = {
        let (store, stop) = (store.clone(), stop.clone());
        thread::spawn(move || {
            let mut swept = 0;
            while !stop.load(Ordering::Relaxed) {
                swept += store.reclaim_idle();
                thread::sleep(Duration::from_micros(300));
            }
            swept
        })
    };

    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (lock, inside, last_fence, granted) = (
                lock.clone(),
                inside.clone(),
                last_fence.clone(),
                granted.clone(),
            );
            thread::spawn(move || {
                let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
                for i in 0..per_thread {
                    let r = next(&mut rng);
                    // Skewed: a few hot keys, many cold ones.
                    let k = if r % 4 == 0 {
                        (r >> 8) % 3
                    } else {
                        (r >> 8) % keys as u64
                    } as usize;
                    let body = |fence: u64| {
                        assert_eq!(
                            inside[k].fetch_add(1, Ordering::SeqCst),
                            0,
                            "two holders of key {k}"
                        );
                        let prev = last_fence[k].swap(fence, Ordering::SeqCst);
                        assert!(
                            fence > prev,
                            "fence went backwards on key {k}: {fence} <= {prev}"
                        );
                        if i % 1024 == 0 {
                            thread::yield_now();
                        }
                        inside[k].fetch_sub(1, Ordering::SeqCst);
                    };
                    let done = match r % 16 {
                        0 => lock.try_hold(k, |l| body(l.fence())).unwrap().is_some(),
                        1 => match lock.key(k).wait(Duration::ZERO).hold(|l| body(l.fence())) {
                            Ok(()) => true,
                            Err(e) if e.kind() == ErrorKind::InUse => false,
                            Err(e) => panic!("{e}"),
                        },
                        2 => match lock
                            .key(k)
                            .wait(Duration::from_millis(1))
                            .hold(|l| body(l.fence()))
                        {
                            Ok(()) => true,
                            Err(e) if e.kind() == ErrorKind::InUse => false,
                            Err(e) => panic!("{e}"),
                        },
                        3 => {
                            let lease =
                                lock.key(k).wait(Duration::from_secs(60)).acquire().unwrap();
                            body(lease.fence());
                            lease.release().unwrap();
                            true
                        }
                        _ => {
                            lock.key(k)
                                .wait(Duration::from_secs(60))
                                .hold(|l| body(l.fence()))
                                .unwrap();
                            true
                        }
                    };
                    if done {
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let swept = sweeper.join().unwrap();
    let total = granted.load(Ordering::Relaxed);
    if !cfg!(debug_assertions) {
        assert!(total >= 1_000_000, "only {total} holds");
    }
    let s = lock.stats();
    assert_eq!((s.held_keys, s.waiters), (0, 0));
    assert_eq!(s.grants, total, "grants counted across reclaimed records");
    assert!(swept > 0, "the sweeper raced the holds");
    store.reclaim_idle();
    assert_eq!(lock.stats().live_keys, 0);
    eprintln!("{total} holds, {swept} key states reclaimed meanwhile");
}
