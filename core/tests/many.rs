//! Several keys at once: `hold_many`, `try_hold_many`, `key_set`.

mod common;

use common::{assert_error, revoking_lock};
use holdline::{ErrorKind, KeyInfo, Lock, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

fn open(store: &Store) -> Lock {
    store.lock("accounts").open().unwrap()
}

/// Free, whether still in memory or already reclaimed by the sweeper.
fn is_free(lock: &Lock, key: &str) -> bool {
    lock.inspect(key).is_none_or(|i: KeyInfo| !i.held)
}

#[test]
fn keys_are_taken_sorted_by_text_each_once_and_leases_follow_that_order() {
    let store = Store::new();
    let lock = open(&store);
    let seen = lock
        .hold_many(&["carol", "alice", "bob", "alice"], |leases| {
            leases
                .iter()
                .map(|l| {
                    let info = lock.inspect(l.key()).unwrap();
                    assert!(info.held);
                    assert_eq!(info.fence, l.fence());
                    l.key().to_owned()
                })
                .collect::<Vec<_>>()
        })
        .unwrap();
    assert_eq!(seen, ["alice", "bob", "carol"]);
    for k in ["alice", "bob", "carol"] {
        assert!(is_free(&lock, k), "{k}");
    }
}

#[test]
fn a_key_named_twice_is_held_once() {
    let store = Store::new();
    let lock = open(&store);
    // 9 and "9" are one key; numbers sort by their text too.
    let (n, keys, inner_try, inner_hold) = lock
        .hold_many(&[9u32, 10, 9], |leases| {
            (
                leases.len(),
                leases
                    .iter()
                    .map(|l| l.key().to_owned())
                    .collect::<Vec<_>>(),
                lock.try_hold("9", |_| ()).unwrap(),
                lock.hold("9", |_| ()).unwrap_err().to_string(),
            )
        })
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(keys, ["10", "9"]);
    assert_eq!(inner_try, None);
    assert_eq!(
        inner_hold,
        "lock accounts: key \"9\": hold inside a hold of the same key: invalid"
    );
    assert_eq!(lock.stats().held_keys, 0);
}

#[test]
fn two_threads_naming_the_same_keys_in_opposite_orders_never_wait_on_each_other() {
    let store = Store::new();
    let lock = open(&store);
    let inside = Arc::new([(); 4].map(|_| AtomicBool::new(false)));
    const ROUNDS: usize = 2000;
    let run = |keys: [&'static str; 4]| {
        let lock = lock.clone();
        let inside = inside.clone();
        thread::spawn(move || {
            for _ in 0..ROUNDS {
                // Taken in the named order, these two would deadlock and
                // one would fail `in use` after the wait.
                lock.key_set(&keys)
                    .wait(Duration::from_secs(10))
                    .hold(|leases| {
                        assert_eq!(leases.len(), 4);
                        for (i, l) in leases.iter().enumerate() {
                            assert_eq!(l.key(), ["a", "b", "c", "d"][i]);
                            assert!(!inside[i].swap(true, Ordering::SeqCst), "two holders");
                        }
                        std::hint::spin_loop();
                        for flag in inside.iter() {
                            flag.store(false, Ordering::SeqCst);
                        }
                    })
                    .unwrap();
            }
        })
    };
    let forward = run(["a", "b", "c", "d"]);
    let backward = run(["d", "c", "b", "a"]);
    forward.join().unwrap();
    backward.join().unwrap();
    let stats = lock.stats();
    assert_eq!(stats.timeouts, 0);
    assert_eq!(stats.held_keys, 0);
}

#[test]
fn a_timeout_part_way_lets_every_key_taken_go_before_the_error_returns() {
    let store = Store::new();
    let lock = open(&store);
    let blocker = lock.acquire("b").unwrap();
    let started = Instant::now();
    let err = lock
        .key_set(&["c", "b", "a"])
        .wait(Duration::from_millis(100))
        .hold(|_| panic!("must not run"))
        .unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_error(
        &err,
        ErrorKind::InUse,
        "lock accounts: key \"b\": held past the hold's wait: in use",
    );
    // "a" was taken (sorted first) and let go; "c" was never reached.
    assert!(is_free(&lock, "a"));
    assert_eq!(lock.inspect("c"), None);
    assert_eq!(lock.inspect("b").unwrap().fence, blocker.fence());
    assert_eq!(lock.stats().held_keys, 1);
    assert_eq!(lock.try_hold("a", |_| "free").unwrap(), Some("free"));
    blocker.release().unwrap();
    let n = lock
        .hold_many(&["c", "b", "a"], |leases| leases.len())
        .unwrap();
    assert_eq!(n, 3);
}

#[test]
fn the_wait_is_one_deadline_for_the_whole_set() {
    let store = Store::new();
    let lock = open(&store);
    // "a" is let go 1 s into a 2 s wait; "b" stays held. With one deadline
    // the set gives up on "b" about 1 s after it got "a"; with a wait per
    // key it would wait a whole 2 s more. Each margin is about 1 s, so only
    // a stall that long could fail this for the wrong reason.
    let wait = Duration::from_millis(2000);
    let blocker_b = lock.acquire("b").unwrap();
    let (granted_tx, granted_rx) = mpsc::channel();
    let l = lock.clone();
    let holder_a = thread::spawn(move || {
        l.hold("a", |_| {
            granted_tx.send(()).unwrap();
            thread::sleep(Duration::from_millis(1000));
            Instant::now()
        })
        .unwrap()
    });
    granted_rx.recv().unwrap();
    let started = Instant::now();
    let err = lock
        .key_set(&["b", "a"])
        .wait(wait)
        .hold(|_| ())
        .unwrap_err();
    let ended = Instant::now();
    // Let go at or after this instant, so the set had "a" no earlier.
    let a_let_go = holder_a.join().unwrap();
    assert_eq!(
        err.to_string(),
        "lock accounts: key \"b\": held past the hold's wait: in use"
    );
    let took = ended - started;
    assert!(took >= wait, "gave up early: {took:?}");
    let after_a = ended.saturating_duration_since(a_let_go);
    assert!(
        after_a < wait,
        "waited a whole wait again after \"a\": {after_a:?}"
    );
    assert!(is_free(&lock, "a"));
    drop(blocker_b);
}

#[test]
fn try_hold_many_is_all_or_nothing_and_never_waits() {
    let store = Store::new();
    let lock = open(&store);
    let blocker = lock.acquire("b").unwrap();
    let ran = AtomicBool::new(false);
    let r = lock
        .try_hold_many(&["a", "b", "c"], |_| ran.store(true, Ordering::SeqCst))
        .unwrap();
    assert_eq!(r, None);
    assert!(!ran.load(Ordering::SeqCst));
    assert!(is_free(&lock, "a"));
    assert_eq!(lock.inspect("c"), None);
    assert_eq!(lock.stats().held_keys, 1);
    assert_eq!(lock.stats().timeouts, 0);
    blocker.release().unwrap();
    let fences = lock
        .try_hold_many(&["c", "b", "a"], |leases| {
            assert_eq!(lock.stats().held_keys, 3);
            leases
                .iter()
                .map(|l| l.key().to_owned())
                .collect::<Vec<_>>()
        })
        .unwrap();
    assert_eq!(
        fences.as_deref(),
        Some(&["a", "b", "c"].map(String::from)[..])
    );
    assert_eq!(lock.stats().held_keys, 0);
}

#[test]
fn try_hold_many_of_a_key_this_thread_holds_answers_none() {
    let store = Store::new();
    let lock = open(&store);
    let inner = lock
        .hold("b", |_| lock.try_hold_many(&["a", "b"], |_| ()).unwrap())
        .unwrap();
    assert_eq!(inner, None);
    assert_eq!(lock.stats().held_keys, 0);
}

#[test]
fn hold_many_inside_a_transaction_is_invalid_and_try_hold_many_is_allowed() {
    let store = Store::new();
    let lock = open(&store);
    let (held, tried) = store
        .tx(|_| {
            Ok((
                lock.hold_many(&["a", "b"], |_| ()).unwrap_err().to_string(),
                lock.try_hold_many(&["a", "b"], |leases| leases.len())
                    .unwrap(),
            ))
        })
        .unwrap();
    assert_eq!(
        held,
        "lock accounts: key \"a\": hold inside a transaction: hold first, then begin it: invalid"
    );
    assert_eq!(tried, Some(2));
    assert_eq!(lock.stats().held_keys, 0);
}

#[test]
fn an_invalid_key_fails_before_any_key_is_taken() {
    let store = Store::new();
    let lock = open(&store);
    let err = lock.hold_many(&["a", ""], |_| ()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert_eq!(lock.inspect("a"), None);
    assert_eq!(lock.stats().grants, 0);
}

#[test]
fn a_panic_in_the_closure_lets_every_key_go() {
    let store = Store::new();
    let lock = open(&store);
    let l = lock.clone();
    let r = thread::spawn(move || l.hold_many(&["a", "b", "c"], |_| panic!("boom"))).join();
    assert!(r.is_err());
    assert_eq!(lock.stats().held_keys, 0);
    assert_eq!(
        lock.try_hold_many(&["a", "b", "c"], |l| l.len()).unwrap(),
        Some(3)
    );
    // The thread's list of holds was unwound too: holds nest again.
    assert_eq!(
        lock.hold("a", |_| lock.hold("b", |_| 1)).unwrap().unwrap(),
        1
    );
}

#[test]
fn a_lost_lease_in_the_set_answers_lost_and_the_outcome_keeps_the_value() {
    let store = Store::new();
    let lock = revoking_lock(&store, "accounts", 40);
    let outcome = lock
        .key_set(&["b", "a"])
        .hold_outcome(|leases| {
            assert!(leases[0].signal().wait_timeout(Duration::from_secs(20)));
            "moved"
        })
        .unwrap();
    assert_eq!(outcome.value, "moved");
    assert_eq!(
        outcome.lost.unwrap().to_string(),
        "lock accounts: key \"a\": the lease was lost: it was revoked at its maxHold"
    );
    let err = lock
        .hold_many(&["b", "a"], |leases| {
            leases[1].signal().wait_timeout(Duration::from_secs(20));
            leases[0].signal().wait_timeout(Duration::from_secs(20));
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost);
    assert_eq!(lock.stats().held_keys, 0);
}

#[test]
fn a_closed_store_fails_closed_and_an_empty_set_runs_with_no_leases() {
    let store = Store::new();
    let lock = open(&store);
    assert_eq!(lock.hold_many(&[] as &[&str], |l| l.len()).unwrap(), 0);
    store.close();
    let err = lock.hold_many(&["a"], |_| ()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "lock accounts: key \"a\": the store is closed: closed"
    );
    let err = lock.try_hold_many(&[] as &[u8], |_| ()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "lock accounts: the store is closed: closed"
    );
}

#[test]
fn keys_may_be_a_slice_of_keys_or_of_references() {
    let store = Store::new();
    let lock = open(&store);
    let owned = vec![String::from("y"), String::from("x")];
    let by_ref = [&owned[0], &owned[1]];
    let keys = |leases: &[holdline::Lease<'_>]| {
        leases
            .iter()
            .map(|l| l.key().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(lock.hold_many(&owned, keys).unwrap(), ["x", "y"]);
    assert_eq!(lock.hold_many(&by_ref, keys).unwrap(), ["x", "y"]);
    assert_eq!(lock.hold_many(&[2u64, 1], keys).unwrap(), ["1", "2"]);
    assert_eq!(lock.try_hold_many(&["x"], keys).unwrap().unwrap(), ["x"]);
}
