//! `Lock::inspect`: a key's state read without taking or disturbing it.

mod common;

use common::{revoking_lock, store_with, ttl_lock, wait_for_within};
use holdline::{KeyInfo, Store};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Holds `key` once and inspects it free. The store's sweeper reclaims an
/// idle key about 50 ms after its creation, so on a slow machine the key
/// may already be gone: try again (a new record, a later fence).
fn hold_then_inspect_free(lock: &holdline::Lock, key: &str) -> (u64, KeyInfo) {
    for _ in 0..100 {
        let fence = lock.hold(key, |lease| lease.fence()).unwrap();
        if let Some(info) = lock.inspect(key) {
            return (fence, info);
        }
    }
    panic!("the key was reclaimed before every one of 100 inspections");
}

/// A free key's times: none, whether it is still in memory or reclaimed.
fn assert_free(info: Option<KeyInfo>) {
    if let Some(info) = info {
        assert_eq!(
            (info.held, info.held_for, info.lease_left, info.waiters),
            (false, None, None, 0)
        );
    }
}

#[test]
fn a_key_never_used_has_no_state_and_inspect_makes_none() {
    let (_store, lock) = store_with("jobs");
    assert_eq!(lock.inspect("job-1"), None);
    assert_eq!(lock.inspect(7u32), None);
    // An invalid key has no state either.
    assert_eq!(lock.inspect(""), None);
    assert_eq!(lock.inspect("a\nb"), None);
    assert_eq!(lock.stats().live_keys, 0);
}

#[test]
fn a_free_key_shows_its_last_fence_until_it_is_reclaimed() {
    let (store, lock) = store_with("jobs");
    let (fence, info) = hold_then_inspect_free(&lock, "job-1");
    assert_eq!(
        Some(info),
        Some(KeyInfo {
            held: false,
            fence,
            held_for: None,
            lease_left: None,
            waiters: 0,
            holders: 0,
            permits_held: 0,
        })
    );
    store.reclaim_idle();
    assert_eq!(lock.inspect("job-1"), None);
}

#[test]
fn a_plain_hold_shows_held_with_its_fence_and_no_times() {
    let (_store, lock) = store_with("jobs");
    let (seen, fence) = lock
        .hold("job-1", |lease| (lock.inspect("job-1"), lease.fence()))
        .unwrap();
    // No maxHold: the hold read no clock, so it has no times to tell.
    assert_eq!(
        seen,
        Some(KeyInfo {
            held: true,
            fence,
            held_for: None,
            lease_left: None,
            waiters: 0,
            holders: 1,
            permits_held: 1,
        })
    );
    // Numbers are their text: 9 and "9" are one key.
    let (fence9, seen9) = lock
        .hold(9u8, |lease| {
            assert_eq!(lock.inspect("9"), lock.inspect(9i64));
            (lease.fence(), lock.inspect("9").unwrap())
        })
        .unwrap();
    assert_eq!((seen9.held, seen9.fence), (true, fence9));
}

#[test]
fn a_max_hold_lease_tells_how_long_it_was_held_and_how_long_it_has_left() {
    let store = Store::new();
    let lock = revoking_lock(&store, "jobs", 60_000);
    let (first, later, fence) = lock
        .hold("job-1", |lease| {
            let first = lock.inspect("job-1").unwrap();
            thread::sleep(Duration::from_millis(120));
            (first, lock.inspect("job-1").unwrap(), lease.fence())
        })
        .unwrap();
    assert!(first.held && later.held);
    assert_eq!((first.fence, later.fence), (fence, fence));
    let (h1, h2) = (first.held_for.unwrap(), later.held_for.unwrap());
    let (l1, l2) = (first.lease_left.unwrap(), later.lease_left.unwrap());
    assert!(h1 < Duration::from_secs(60), "{h1:?}");
    assert!(h2 >= h1 + Duration::from_millis(110), "{h1:?} then {h2:?}");
    assert!(l1 <= Duration::from_secs(60), "{l1:?}");
    assert!(l1 > Duration::from_secs(50), "{l1:?}");
    assert!(l2 + Duration::from_millis(110) <= l1, "{l1:?} then {l2:?}");
    // Held for plus left is the maxHold, to the millisecond.
    assert_eq!(h2 + l2, Duration::from_secs(60));
    // Let go: no times.
    assert_free(lock.inspect("job-1"));
}

#[test]
fn lease_left_shrinks_for_a_ttl_lease_and_a_renewal_pushes_it_back() {
    let store = Store::new();
    let lock = ttl_lock(&store, "conns", 10_000, None);
    let lease = lock.acquire("c1").unwrap();
    let a = lock.inspect("c1").unwrap();
    assert!(a.held);
    assert_eq!(a.fence, lease.fence());
    thread::sleep(Duration::from_millis(150));
    let b = lock.inspect("c1").unwrap();
    let (la, lb) = (a.lease_left.unwrap(), b.lease_left.unwrap());
    assert!(la <= Duration::from_secs(10), "{la:?}");
    assert!(lb + Duration::from_millis(140) <= la, "{la:?} then {lb:?}");
    assert!(b.held_for.unwrap() >= Duration::from_millis(140));
    lease.renew().unwrap();
    let c = lock.inspect("c1").unwrap();
    let lc = c.lease_left.unwrap();
    assert!(lc >= lb + Duration::from_millis(140), "{lb:?} then {lc:?}");
    // The renewal does not reset how long it has been held.
    assert!(c.held_for.unwrap() >= b.held_for.unwrap());
    lease.release().unwrap();
    assert_free(lock.inspect("c1"));
}

#[test]
fn lease_left_is_the_earlier_of_max_hold_and_ttl() {
    let store = Store::new();
    let lock = ttl_lock(&store, "conns", 10_000, Some(2000));
    let _lease = lock.acquire("c1").unwrap();
    let left = lock.inspect("c1").unwrap().lease_left.unwrap();
    assert!(left <= Duration::from_secs(2), "{left:?}");
    assert!(left > Duration::from_secs(1), "{left:?}");
}

#[test]
fn after_a_revocation_inspect_shows_the_next_holder() {
    let store = Store::new();
    let lock = revoking_lock(&store, "jobs", 50);
    let hung = lock.acquire("job-1").unwrap();
    let old = hung.fence();
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let l = lock.clone();
    let next = thread::spawn(move || {
        l.key("job-1")
            .wait(Duration::from_secs(20))
            .hold(|lease| {
                tx.send(lease.fence()).unwrap();
                done_rx.recv().unwrap();
            })
            .unwrap();
    });
    let new = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(hung.is_lost());
    let info = lock.inspect("job-1").unwrap();
    assert!(info.held);
    assert_eq!(info.fence, new);
    assert!(new > old);
    assert!(info.lease_left.unwrap() <= Duration::from_millis(50));
    done_tx.send(()).unwrap();
    next.join().unwrap();
}

#[test]
fn inspect_counts_waiters_and_leaves_the_line_in_fifo_order() {
    let (_store, lock) = store_with("jobs");
    let holder = lock.acquire("job-1").unwrap();
    let grants_before = lock.stats().grants;
    let (order_tx, order_rx) = mpsc::channel();
    let mut waiters = Vec::new();
    for name in ["first", "second", "third"] {
        let l = lock.clone();
        let order_tx = order_tx.clone();
        let expected = waiters.len() + 1;
        waiters.push(thread::spawn(move || {
            l.key("job-1")
                .wait(Duration::from_secs(30))
                .hold(|lease| order_tx.send((name, lease.fence())).unwrap())
                .unwrap();
        }));
        // Each joins the line before the next starts; inspect is how we know.
        wait_for_within("a waiter in line", Duration::from_secs(20), || {
            lock.inspect("job-1").unwrap().waiters == expected
        });
    }
    // Reading many times takes nothing and moves nobody.
    for _ in 0..10_000 {
        let info = lock.inspect("job-1").unwrap();
        assert_eq!(
            (info.held, info.fence, info.waiters),
            (true, holder.fence(), 3)
        );
    }
    assert_eq!(lock.stats().grants, grants_before);
    let old = holder.fence();
    holder.release().unwrap();
    let got: Vec<(&str, u64)> = (0..3)
        .map(|_| order_rx.recv_timeout(Duration::from_secs(30)).unwrap())
        .collect();
    for w in waiters {
        w.join().unwrap();
    }
    let names: Vec<&str> = got.iter().map(|g| g.0).collect();
    assert_eq!(names, ["first", "second", "third"]);
    assert!(old < got[0].1 && got[0].1 < got[1].1 && got[1].1 < got[2].1);
    assert_free(lock.inspect("job-1"));
}

#[test]
fn inspect_of_a_free_key_does_not_take_it() {
    let (_store, lock) = store_with("jobs");
    let (fence, before) = hold_then_inspect_free(&lock, "job-1");
    assert_eq!((before.held, before.fence), (false, fence));
    // Still free: the next grant is the one right after the last.
    assert_eq!(
        lock.try_hold("job-1", |lease| lease.fence()).unwrap(),
        Some(fence + 1)
    );
}

#[test]
fn an_async_hold_with_max_hold_has_times_too() {
    let store = Store::new();
    let lock = revoking_lock(&store, "jobs", 30_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let info = rt
        .block_on(lock.hold_async("job-1", async |lease| {
            tokio::time::sleep(Duration::from_millis(30)).await;
            (lock.inspect("job-1").unwrap(), lease.fence())
        }))
        .unwrap();
    assert_eq!(info.0.fence, info.1);
    assert!(info.0.held_for.unwrap() >= Duration::from_millis(29));
    assert!(info.0.lease_left.unwrap() <= Duration::from_secs(30));
}
