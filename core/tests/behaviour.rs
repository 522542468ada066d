//! The library's rules of behaviour, one test each: values, try, keys,
//! errors, waits, reentrancy, transactions, panics.

use holdline::{ErrorKind, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

mod common;
use common::{assert_error, fails_within, store_with, store_with_held, store_with_rows};

#[test]
fn hold_answers_the_closures_value() {
    let (_store, lock) = store_with("invoices");
    assert_eq!(
        lock.hold("9", |lease| (lease.key().to_owned(), lease.is_lost()))
            .unwrap(),
        ("9".to_owned(), false)
    );
}

#[test]
fn a_hold_lets_the_key_go_when_its_closure_returns() {
    let (_store, lock) = store_with("invoices");
    lock.hold("9", |_| ()).unwrap();
    assert_eq!(
        lock.try_hold("9", |_| 5).unwrap(),
        Some(5),
        "released after hold"
    );
    let s = lock.stats();
    assert_eq!((s.held_keys, s.waiters), (0, 0));
}

#[test]
fn the_key_builder_holds_and_tries_like_the_lock() {
    let (_store, lock) = store_with("invoices");
    assert_eq!(
        lock.key("9")
            .wait(Duration::from_secs(1))
            .hold(|_| 6)
            .unwrap(),
        6
    );
    assert_eq!(lock.key("9").try_hold(|_| 7).unwrap(), Some(7));
    let s = lock.stats();
    assert_eq!((s.held_keys, s.waiters, s.grants), (0, 0, 2));
}

#[test]
fn try_hold_never_runs_f_on_a_held_key() {
    let (_store, lock, holder) = store_with_held("l", "k");
    let ran = AtomicBool::new(false);
    let started = Instant::now();
    assert_eq!(
        lock.try_hold("k", |_| ran.store(true, Ordering::SeqCst))
            .unwrap(),
        None
    );
    assert!(!ran.load(Ordering::SeqCst));
    // A waiting hold would wait out its 10 s default: 5 s tells them
    // apart with room for a stalled machine.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "try_hold never waits"
    );
    holder.release().unwrap();
}

#[test]
fn a_held_key_does_not_hold_up_another_key() {
    let (_store, lock, holder) = store_with_held("l", "k");
    assert_eq!(lock.try_hold("k2", |_| 1).unwrap(), Some(1));
    holder.release().unwrap();
}

#[test]
fn try_hold_takes_the_key_once_its_holder_lets_go() {
    let (_store, lock, holder) = store_with_held("l", "k");
    holder.release().unwrap();
    assert_eq!(lock.try_hold("k", |_| 2).unwrap(), Some(2));
}

#[test]
fn numbers_are_their_decimal_text() {
    let (_store, lock) = store_with("l");
    lock.hold(9u64, |lease| {
        assert_eq!(lease.key(), "9");
        assert_eq!(lock.try_hold("9", |_| ()).unwrap(), None);
        assert_eq!(lock.try_hold(9i8, |_| ()).unwrap(), None);
        assert_eq!(lock.try_hold(&String::from("9"), |_| ()).unwrap(), None);
        assert_eq!(
            lock.try_hold(-9i32, |l| l.key().to_owned())
                .unwrap()
                .as_deref(),
            Some("-9")
        );
    })
    .unwrap();
}

#[test]
fn a_zero_wait_fails_at_once_with_its_text() {
    let (_store, lock) = store_with("invoices");
    lock.hold("9", |_| {
        let l2 = lock.clone();
        let e = thread::spawn(move || {
            let started = Instant::now();
            let e = l2.key("9").wait(Duration::ZERO).hold(|_| ()).unwrap_err();
            (e, started.elapsed())
        })
        .join()
        .unwrap();
        assert_eq!(e.0.kind(), ErrorKind::InUse);
        assert_eq!(
            e.0.to_string(),
            "lock invoices: key \"9\": held past the hold's wait: in use"
        );
        assert!(e.1 < Duration::from_secs(2));
    })
    .unwrap();
    assert_eq!(lock.stats().timeouts, 1);
}

#[test]
fn a_wait_ends_in_use_after_its_deadline_not_before() {
    let (_store, lock) = store_with("invoices");
    let wait = Duration::from_millis(300);
    lock.hold("9", |_| {
        let l2 = lock.clone();
        let (e, took) = thread::spawn(move || {
            let started = Instant::now();
            let e = l2.key("9").wait(wait).hold(|_| ()).unwrap_err();
            (e, started.elapsed())
        })
        .join()
        .unwrap();
        assert_eq!(
            e.to_string(),
            "lock invoices: key \"9\": held past the hold's wait: in use"
        );
        assert!(took >= wait, "gave up early: {took:?}");
        assert!(
            took < wait + Duration::from_secs(3),
            "gave up late: {took:?}"
        );
    })
    .unwrap();
    let s = lock.stats();
    assert_eq!(
        (s.waiters, s.timeouts),
        (0, 1),
        "the timed-out waiter left the line"
    );
}

#[test]
fn a_waiter_gets_the_key_when_it_is_let_go() {
    let (_store, lock) = store_with("l");
    let (held_tx, held_rx) = mpsc::channel();
    let l2 = lock.clone();
    let holder = thread::spawn(move || {
        l2.hold("k", |lease| {
            held_tx.send(lease.fence()).unwrap();
            thread::sleep(Duration::from_millis(100));
        })
        .unwrap()
    });
    let first = held_rx.recv().unwrap();
    let second = lock.hold("k", |lease| lease.fence()).unwrap();
    holder.join().unwrap();
    assert!(second > first);
}

#[test]
fn hold_of_a_key_this_thread_holds_fails_at_once() {
    let (store, lock) = store_with("invoices");
    let again = store.lock("invoices").open().unwrap(); // same keys, another handle
    lock.hold(7, |_| {
        let e = fails_within(Duration::from_secs(2), || again.hold("7", |_| ()));
        assert_error(
            &e,
            ErrorKind::Invalid,
            "lock invoices: key \"7\": hold inside a hold of the same key: invalid",
        );
    })
    .unwrap();
}

#[test]
fn try_hold_of_a_key_this_thread_holds_answers_none() {
    let (store, lock) = store_with("invoices");
    let again = store.lock("invoices").open().unwrap();
    lock.hold(7, |_| {
        assert_eq!(again.try_hold("7", |_| ()).unwrap(), None);
    })
    .unwrap();
}

#[test]
fn inside_a_hold_other_keys_and_other_locks_can_be_held() {
    let (store, lock) = store_with("invoices");
    lock.hold(7, |_| {
        assert_eq!(lock.hold("8", |_| 1).unwrap(), 1);
        let other = store.lock("other").open().unwrap();
        assert_eq!(other.hold("7", |_| 2).unwrap(), 2);
    })
    .unwrap();
}

#[test]
fn hold_inside_a_transaction_is_invalid() {
    let (store, lock) = store_with("invoices");
    let r = store.tx(|_tx| {
        let e = lock.hold(7, |_| ()).unwrap_err();
        assert_eq!(e.to_string(), "lock invoices: key \"7\": hold inside a transaction: hold first, then begin it: invalid");
        assert_eq!(lock.acquire("y").unwrap_err().kind(), ErrorKind::Invalid);
        Ok(1)
    });
    assert_eq!(r.unwrap(), 1);
}

#[test]
fn try_hold_inside_a_transaction_is_allowed() {
    let (store, lock) = store_with("invoices");
    let r = store.tx(|_tx| Ok(lock.try_hold(7, |_| 3).unwrap()));
    assert_eq!(r.unwrap(), Some(3));
}

#[test]
fn a_transaction_of_any_store_refuses_a_hold() {
    let store = Store::new();
    let other = Store::new();
    let ol = other.lock("o").open().unwrap();
    let r = store.tx(|_tx| {
        assert_eq!(ol.hold("x", |_| ()).unwrap_err().kind(), ErrorKind::Invalid);
        Ok(1)
    });
    assert_eq!(r.unwrap(), 1);
}

#[test]
fn a_hold_is_allowed_again_after_the_transaction() {
    let (store, lock) = store_with("invoices");
    store
        .tx(|_tx| {
            assert!(lock.hold(7, |_| ()).is_err());
            Ok(())
        })
        .unwrap();
    assert_eq!(
        lock.hold(7, |_| 4).unwrap(),
        4,
        "allowed again after the transaction"
    );
}

#[test]
fn bad_lock_names_are_invalid() {
    let store = Store::new();
    for name in ["", "has space", "slash/", "ünï", &"n".repeat(129)] {
        let e = store.lock(name).open().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{name:?}");
        assert!(e.to_string().ends_with(": invalid"), "{e}");
    }
    assert!(store.lock(&"n".repeat(128)).open().is_ok());
}

#[test]
fn a_zero_ttl_or_max_hold_is_invalid_and_named() {
    let store = Store::new();
    let e = store.lock("l").ttl(Duration::ZERO).open().unwrap_err();
    assert_eq!(e.to_string(), "lock l: a ttl is at least 1ms: invalid");
    let e = store.lock("l").max_hold(Duration::ZERO).open().unwrap_err();
    assert_eq!(e.to_string(), "lock l: a maxHold is at least 1ms: invalid");
}

#[test]
fn bad_keys_are_invalid_for_every_kind_of_hold() {
    let (_store, lock) = store_with("l");
    for key in ["", "a\nb", "nul\0", "del\u{7f}", "c1\u{9b}"] {
        let e = lock.hold(key, |_| ()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{key:?}");
        assert!(e.to_string().starts_with("lock l: key "), "{e}");
        assert_eq!(
            lock.try_hold(key, |_| ()).unwrap_err().kind(),
            ErrorKind::Invalid
        );
        assert_eq!(lock.acquire(key).unwrap_err().kind(), ErrorKind::Invalid);
    }
}

#[test]
fn a_key_over_1024_bytes_is_invalid_and_shown_cut() {
    let (_store, lock) = store_with("l");
    let long = "k".repeat(1025);
    let e = lock.hold(long.as_str(), |_| ()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "lock l: key \"{}...\": the key is longer than 1024 bytes: invalid",
            "k".repeat(64)
        )
    );
}

#[test]
fn keys_of_1024_bytes_and_of_any_script_are_held() {
    let (_store, lock) = store_with("l");
    assert_eq!(lock.hold("k".repeat(1024).as_str(), |_| 1).unwrap(), 1);
    assert_eq!(
        lock.hold("ключ 🔑", |l| l.key().to_owned()).unwrap(),
        "ключ 🔑"
    );
}

#[test]
fn a_panicking_closure_lets_the_key_go_and_the_panic_continues() {
    let (_store, lock) = store_with("l");
    let l2 = lock.clone();
    let r = thread::spawn(move || l2.hold("k", |_| -> () { panic!("boom") })).join();
    let payload = r.unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom"));
    assert_eq!(lock.try_hold("k", |_| 1).unwrap(), Some(1));
}

#[test]
fn a_panic_caught_on_the_holding_thread_unlists_its_hold() {
    let (_store, lock) = store_with("l");
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        lock.hold("k", |_| panic!("again"))
    }));
    assert!(caught.is_err());
    // Not refused as a hold inside a hold of the same key.
    assert_eq!(lock.hold("k", |_| 2).unwrap(), 2);
}

#[test]
fn keys_are_independent() {
    let (_store, lock) = store_with("l");
    let n = 64;
    let barrier = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (lock, barrier) = (lock.clone(), barrier.clone());
            // Every thread holds its own key until all of them hold theirs:
            // if any key made another wait, this would hit the wait deadline.
            thread::spawn(move || {
                lock.key(i).wait(Duration::from_secs(30)).hold(|_| {
                    barrier.wait();
                })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
}

fn row(store: &Store, key: &str) -> Option<Vec<u8>> {
    store.tx(|tx| Ok(tx.get(key).map(<[u8]>::to_vec))).unwrap()
}

#[test]
fn a_transaction_that_answers_ok_commits_its_writes() {
    let store = Store::new();
    store
        .tx(|tx| {
            tx.put("a", "1");
            assert_eq!(tx.get("a"), Some(&b"1"[..]), "sees its own write");
            Ok(())
        })
        .unwrap();
    assert_eq!(row(&store, "a"), Some(b"1".to_vec()));
}

#[test]
fn a_transaction_that_answers_err_discards_its_writes_and_answers_the_error() {
    let store = store_with_rows(&[("a", "1")]);
    let e = store
        .tx(|tx| -> Result<(), holdline::Error> {
            tx.put("a", "2");
            tx.put("b", "2");
            Err(store.lock("bad name").open().unwrap_err())
        })
        .unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Invalid,
        "the closure's own error, unchanged"
    );
    assert_eq!(
        (row(&store, "a"), row(&store, "b")),
        (Some(b"1".to_vec()), None)
    );
}

#[test]
fn a_transaction_that_panics_discards_its_writes() {
    let store = store_with_rows(&[("a", "1")]);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.tx(|tx| -> Result<(), holdline::Error> {
            tx.put("a", "3");
            panic!("mid-transaction")
        })
    }));
    assert!(caught.is_err());
    assert_eq!(row(&store, "a"), Some(b"1".to_vec()));
}

#[test]
fn a_transaction_deletes_a_row() {
    let store = store_with_rows(&[("a", "1")]);
    store
        .tx(|tx| {
            tx.delete("a");
            Ok(())
        })
        .unwrap();
    assert!(store.tx(|tx| Ok(tx.get("a").is_none())).unwrap());
}

#[test]
fn a_transaction_inside_a_transaction_is_invalid() {
    let store = Store::new();
    let e = store.tx(|_| store.tx(|_| Ok(()))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
}

#[test]
fn a_transaction_of_another_store_inside_a_transaction_is_invalid() {
    // Two threads nesting in opposite orders could otherwise deadlock.
    let store = Store::new();
    let other = Store::new();
    let e = store.tx(|_| other.tx(|_| Ok(()))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "store: a transaction inside a transaction: invalid"
    );
    assert!(other.tx(|_| Ok(())).is_ok(), "usable after");
}

#[test]
fn a_held_lease_keeps_others_out_of_the_key() {
    let (_store, lock) = store_with("l");
    let lease = lock.acquire("k").unwrap();
    assert_eq!(lease.key(), "k");
    assert_eq!(lock.try_hold("k", |_| ()).unwrap(), None);
    assert!(lock.key("k").try_acquire().unwrap().is_none());
    let e = lock
        .key("k")
        .wait(Duration::from_millis(20))
        .acquire()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InUse);
    drop(lease);
}

#[test]
fn a_released_lease_hands_on_the_key_with_a_greater_fence() {
    let (_store, lock) = store_with("l");
    let lease = lock.acquire("k").unwrap();
    let f1 = lease.fence();
    lease.renew().unwrap();
    lease.check().unwrap();
    lease.release().unwrap();
    let f2 = lock.hold("k", |l| l.fence()).unwrap();
    assert!(f2 > f1);
}

#[test]
fn dropping_a_lease_releases_it() {
    let (_store, lock) = store_with("l");
    {
        let _dropped = lock.acquire("k").unwrap();
        assert_eq!(lock.try_hold("k", |_| ()).unwrap(), None);
    }
    assert_eq!(lock.try_hold("k", |_| 1).unwrap(), Some(1), "drop releases");
}

#[test]
fn a_lease_can_be_released_on_another_thread() {
    let (_store, lock) = store_with("l");
    let lease = lock.acquire("m").unwrap();
    thread::spawn(move || lease.release().unwrap())
        .join()
        .unwrap();
    assert_eq!(lock.try_hold("m", |_| 1).unwrap(), Some(1));
}

#[test]
fn the_signal_of_a_running_hold_has_not_ended() {
    let (_store, lock) = store_with("l");
    lock.hold("k", |lease| {
        let s = lease.signal();
        assert!(!s.is_aborted());
        assert_eq!(s.reason(), None);
        assert!(!s.wait_timeout(Duration::from_millis(10)));
    })
    .unwrap();
}

#[test]
fn the_signal_reports_a_normal_end_without_aborting() {
    let (_store, lock) = store_with("l");
    let signal = lock.hold("k", |lease| lease.signal()).unwrap();
    assert_eq!(signal.reason(), Some(holdline::EndReason::Released));
    assert!(!signal.is_aborted());
    assert!(
        !signal.wait_timeout(Duration::from_secs(5)),
        "ended: answers at once"
    );
    assert!(
        !signal.wait_timeout(Duration::MAX),
        "no overflow on a huge timeout"
    );
}

#[test]
fn a_thread_waiting_on_the_signal_learns_when_the_hold_is_over() {
    let (_store, lock) = store_with("l");
    let (tx, rx) = mpsc::channel();
    lock.hold("k", |lease| {
        let s = lease.signal();
        thread::spawn(move || {
            let started = Instant::now();
            let aborted = s.wait_timeout(Duration::from_secs(20));
            tx.send((aborted, started.elapsed(), s.reason())).unwrap();
        });
        thread::sleep(Duration::from_millis(50));
    })
    .unwrap();
    let (aborted, took, reason) = rx.recv().unwrap();
    assert!(!aborted);
    assert!(took < Duration::from_secs(10));
    assert_eq!(reason, Some(holdline::EndReason::Released));
}

#[test]
fn the_same_key_rule_holds_at_any_nesting_depth() {
    fn nest(lock: &holdline::Lock, depth: u32, at_bottom: &dyn Fn()) {
        if depth == 0 {
            at_bottom();
        } else {
            lock.hold(depth, |_| nest(lock, depth - 1, at_bottom))
                .unwrap();
        }
    }
    let (_store, lock) = store_with("l");
    // Nine nested holds: deeper than the inline list, so some spill.
    nest(&lock, 9, &|| {
        for k in 1..=9u32 {
            let e = lock.hold(k, |_| ()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Invalid, "key {k}");
            assert_eq!(lock.try_hold(k, |_| ()).unwrap(), None);
        }
        assert_eq!(lock.hold(10u32, |_| 1).unwrap(), 1);
    });
    // All unlisted again afterwards.
    for k in 1..=9u32 {
        assert_eq!(lock.hold(k, |_| k).unwrap(), k);
    }
}

#[test]
fn numbers_are_keys_by_value_at_every_call() {
    let (_store, lock) = store_with("jobs");
    let lock = Arc::new(lock);
    let by_text = lock.hold("9", |lease| lease.fence()).unwrap();
    let by_value = lock.hold(9, |lease| (lease.key().to_owned(), lease.fence()));
    assert_eq!(by_value.unwrap(), ("9".to_owned(), by_text + 1));
    assert_eq!(
        lock.try_hold(9u64, |l| l.fence()).unwrap(),
        Some(by_text + 2)
    );
    let id = String::from("9");
    assert_eq!(lock.hold(&id, |l| l.fence()).unwrap(), by_text + 3);
    {
        let guard = lock.lock(-9i8).unwrap();
        assert_eq!(guard.key(), "-9");
        assert!(lock.inspect(-9).unwrap().held);
        assert!(lock.try_lock(-9).unwrap().is_none(), "one key, by any name");
        assert!(lock.try_hold("-9", |_| ()).unwrap().is_none());
    }
    let owned = Arc::clone(&lock).lock_owned(9usize).unwrap();
    assert_eq!(owned.key(), "9");
    assert!(lock.try_hold(9, |_| ()).unwrap().is_none());
    drop(owned);
    let waited = lock.key(9).wait(Duration::ZERO).hold(|l| l.fence());
    assert_eq!(waited.unwrap(), by_text + 5);
    let tried: Result<u64, holdline::Error> = lock.hold_with(9, |l| Ok(l.fence()));
    assert_eq!(tried.unwrap(), by_text + 6);
    let lease = lock.acquire(u128::MAX).unwrap();
    assert_eq!(lease.key(), u128::MAX.to_string());
    lease.release().unwrap();
}
