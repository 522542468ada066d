//! The line of waiters: FIFO handoff, the 10,000 limit, timeouts racing
//! releases.

use holdline::ErrorKind;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

mod common;
use common::{
    assert_error, fails_within, on_threads, store_with, store_with_held, wait_for, Holder,
};

/// Lines up `n` waiters behind a holder, one at a time (each seen in line
/// before the next comes), lets the key go, and answers each grant's
/// (ticket, fence) in the order the grants came.
fn grants_of_a_line(n: usize) -> Vec<(usize, u64)> {
    let (_store, lock) = store_with("fifo");
    let order = Arc::new(Mutex::new(Vec::new()));
    let holder = Holder::start(&lock, "k");
    let mut waiters = Vec::new();
    for ticket in 0..n {
        let (l, order) = (lock.clone(), order.clone());
        waiters.push(thread::spawn(move || {
            l.key("k").wait(Duration::from_secs(60)).hold(|lease| {
                order.lock().unwrap().push((ticket, lease.fence()));
                // Make barging visible if it ever happened.
                if ticket % 3 == 0 {
                    thread::yield_now();
                }
            })
        }));
        wait_for("the waiter to stand in line", || {
            lock.stats().waiters == ticket + 1
        });
    }
    holder.release().unwrap();
    for w in waiters {
        w.join().unwrap().unwrap();
    }
    let order = order.lock().unwrap();
    order.clone()
}

/// Waiters take tickets as they arrive; grants must follow the tickets
/// exactly.
#[test]
fn grants_follow_arrival_order() {
    for (round, n) in [8usize, 32, 64].into_iter().enumerate() {
        let tickets: Vec<usize> = grants_of_a_line(n).iter().map(|&(t, _)| t).collect();
        assert_eq!(
            tickets,
            (0..n).collect::<Vec<_>>(),
            "round {round}: grants out of arrival order"
        );
    }
}

#[test]
fn fences_rise_along_the_line() {
    let order = grants_of_a_line(32);
    assert_eq!(order.len(), 32);
    assert!(
        order.windows(2).all(|w| w[0].1 < w[1].1),
        "fences rise along the line"
    );
}

/// A newcomer arriving while a line exists goes to its back, even at the
/// instant the key is let go (no barging past waiters).
#[test]
fn a_release_hands_the_key_to_the_first_waiter_not_a_newcomer() {
    let (_store, lock) = store_with("l");
    for _ in 0..20 {
        let holder = Holder::start(&lock, "k");
        let l = lock.clone();
        let had_it = Arc::new(AtomicUsize::new(0));
        let h = had_it.clone();
        let waiter = thread::spawn(move || {
            l.key("k").wait(Duration::from_secs(60)).hold(|_| {
                h.store(1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(30));
            })
        });
        wait_for("the waiter", || lock.stats().waiters == 1);
        let released = thread::spawn(move || holder.release());
        // Hammer try_hold around the release: it may only ever get the key
        // once the waiter has had it.
        let started = Instant::now();
        loop {
            if lock.try_hold("k", |_| ()).unwrap().is_some() {
                assert_eq!(
                    had_it.load(Ordering::SeqCst),
                    1,
                    "a try_hold barged past a waiter"
                );
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(30));
        }
        released.join().unwrap().unwrap();
        waiter.join().unwrap().unwrap();
    }
}

#[test]
fn the_ten_thousand_and_first_waiter_fails_limit() {
    let (_store, lock, holder) = store_with_held("invoices", "7");
    let granted = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..10_000)
        .map(|_| {
            let (l, granted) = (lock.clone(), granted.clone());
            thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    l.key(7).wait(Duration::from_secs(300)).hold(|_| {
                        granted.fetch_add(1, Ordering::Relaxed);
                    })
                })
                .unwrap()
        })
        .collect();
    wait_for("10,000 waiters", || lock.stats().waiters == 10_000);
    let e = fails_within(Duration::from_secs(10), || {
        lock.key(7).wait(Duration::from_secs(60)).hold(|_| ())
    });
    assert_error(
        &e,
        ErrorKind::Limit,
        "lock invoices: key \"7\": 10000 waiters already stand in line: limit",
    );
    assert_eq!(lock.acquire(7).unwrap_err().kind(), ErrorKind::Limit);
    holder.release().unwrap();
    for w in waiters {
        w.join().unwrap().unwrap();
    }
    assert_eq!(granted.load(Ordering::Relaxed), 10_000);
    let s = lock.stats();
    assert_eq!((s.waiters, s.held_keys, s.grants), (0, 0, 10_001));
}

/// Short deadlines expiring while the key is handed along: every grant is
/// used exactly once, nobody is left in line, and the key ends free.
#[test]
fn timeouts_racing_releases_lose_no_grant() {
    let (_store, lock) = store_with("l");
    let threads = 6;
    let rounds = if cfg!(debug_assertions) { 300 } else { 3000 };
    let inside = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicUsize::new(0));
    on_threads(0..threads, |t| {
        for i in 0..rounds {
            let wait = Duration::from_millis(((t + i) % 3) as u64);
            let r = lock.key("hot").wait(wait).hold(|_| {
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                if i % 7 == 0 {
                    thread::sleep(Duration::from_micros(200));
                }
                inside.fetch_sub(1, Ordering::SeqCst);
            });
            match r {
                Ok(()) => {
                    ok.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => assert_eq!(e.kind(), ErrorKind::InUse),
            }
        }
    });
    let s = lock.stats();
    assert_eq!((s.held_keys, s.waiters), (0, 0));
    assert_eq!(
        s.grants as usize,
        ok.load(Ordering::Relaxed),
        "every grant reached a holder"
    );
    assert_eq!(
        s.timeouts as usize,
        threads * rounds - ok.load(Ordering::Relaxed)
    );
    assert_eq!(
        lock.try_hold("hot", |_| 1).unwrap(),
        Some(1),
        "the key ends free"
    );
}
