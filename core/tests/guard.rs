//! Guards: held until dropped (panic included), revoked at maxHold, no
//! ttl, permits, the owned guard across `tokio::spawn`, how a guard meets
//! its thread's running holds, and their `Send`/`Sync` bounds.

mod common;

use common::{
    assert_error, revoking_lock, store_with, store_with_permits, ttl_lock, wait_for_within,
};
use holdline::{ErrorKind, Guard, OwnedGuard, Store};
use std::future::Future;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

const SHORT: Duration = Duration::from_millis(30);
const PATIENCE: Duration = Duration::from_secs(10);

#[test]
fn a_guard_excludes_every_other_holder_until_it_is_dropped() {
    let (_store, lock) = store_with("guarded");
    let guard = lock.lock("k").unwrap();
    assert_eq!(guard.key(), "k");
    assert_eq!(guard.permits(), 1);
    assert!(lock.inspect("k").unwrap().held);
    thread::scope(|s| {
        s.spawn(|| {
            assert!(lock.try_lock("k").unwrap().is_none());
            assert!(lock.try_hold("k", |_| ()).unwrap().is_none());
            let e = lock.key("k").wait(SHORT).lock().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InUse, "{e}");
        });
    });
    let fence = guard.fence();
    drop(guard);
    assert!(!lock.inspect("k").unwrap().held);
    let next = lock.try_lock("k").unwrap().expect("free once dropped");
    assert!(next.fence() > fence);
}

#[test]
fn a_waiter_gets_the_key_when_the_guard_is_dropped() {
    let (_store, lock) = store_with("handoff");
    let guard = lock.lock("k").unwrap();
    let fence = guard.fence();
    thread::scope(|s| {
        let waiter = s.spawn(|| lock.lock("k").map(|g| g.fence()));
        wait_for_within("the waiter in line", PATIENCE, || {
            lock.inspect("k").unwrap().waiters == 1
        });
        drop(guard);
        assert!(waiter.join().unwrap().unwrap() > fence);
    });
}

#[test]
fn a_panic_while_the_guard_is_held_lets_the_key_go() {
    let (_store, lock) = store_with("panics");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _guard = lock.lock("k").unwrap();
        panic!("boom");
    }));
    assert!(r.is_err());
    assert!(!lock.inspect("k").unwrap().held);
    assert!(lock.try_lock("k").unwrap().is_some());
}

#[test]
fn release_lets_the_key_go_and_says_it_was_not_lost() {
    let (_store, lock) = store_with("released");
    let guard = lock.lock(9).unwrap();
    assert_eq!(guard.key(), "9"); // a number is its decimal text
    assert!(lock.try_lock("9").unwrap().is_none());
    guard.release().unwrap();
    assert!(lock.try_lock(9u8).unwrap().is_some());
}

#[test]
fn max_hold_revokes_a_guard_and_hands_its_key_on() {
    let store = Store::new();
    let lock = revoking_lock(&store, "revoked", 100);
    let guard = lock.lock("m").unwrap();
    let signal = guard.signal();
    assert!(!guard.is_lost());
    wait_for_within("the guard revoked", PATIENCE, || guard.is_lost());
    assert!(signal.is_aborted());
    let text = r#"lock revoked: key "m": the lease was lost: it was revoked at its maxHold"#;
    assert_error(&guard.check().unwrap_err(), ErrorKind::Lost, text);
    // The key went to the next holder while the revoked guard still lives.
    let next = lock.try_lock("m").unwrap().expect("handed on at maxHold");
    assert!(next.fence() > guard.fence());
    assert_error(&guard.release().unwrap_err(), ErrorKind::Lost, text);
    assert_eq!(lock.stats().revocations, 1);
}

#[test]
fn the_loss_signal_of_a_guard_wakes_its_waiter() {
    let store = Store::new();
    let lock = revoking_lock(&store, "signalled", 100);
    let guard = lock.lock(7).unwrap();
    let signal = guard.signal();
    let woken = thread::spawn(move || signal.wait_timeout(PATIENCE));
    assert!(woken.join().unwrap(), "aborted at maxHold");
    assert_eq!(
        guard.check().unwrap_err().to_string(),
        r#"lock signalled: key "7": the lease was lost: it was revoked at its maxHold"#
    );
}

#[test]
fn a_guard_has_no_ttl() {
    let store = Store::new();
    let lock = ttl_lock(&store, "renewed", 30, None);
    let guard = lock.lock("k").unwrap();
    thread::sleep(Duration::from_millis(200)); // past several ttls
    assert!(!guard.is_lost());
    guard.check().unwrap();
    assert!(lock.try_lock("k").unwrap().is_none());
    guard.release().unwrap();
}

#[test]
fn the_store_closing_loses_a_guard() {
    let (store, lock) = store_with("closing");
    let guard = lock.lock("k").unwrap();
    store.close();
    assert!(guard.is_lost());
    assert_eq!(guard.release().unwrap_err().kind(), ErrorKind::Lost);
}

#[test]
fn guards_of_permits_share_a_key_and_exclusive_ones_do_not() {
    let (_store, lock) = store_with_permits("pool", 2);
    let a = lock.lock("k").unwrap();
    let b = lock
        .key("k")
        .permits(1)
        .try_lock()
        .unwrap()
        .expect("a second permit");
    assert!(lock.try_lock("k").unwrap().is_none(), "both permits taken");
    assert!(lock.key("k").exclusive().try_lock().unwrap().is_none());
    drop(a);
    assert!(lock.key("k").exclusive().try_lock().unwrap().is_none());
    drop(b);
    let all = lock.key("k").exclusive().lock().unwrap();
    assert_eq!(all.permits(), 2);
    assert!(lock.try_lock("k").unwrap().is_none());
    let e = lock.key("k").permits(3).lock().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
}

#[test]
fn a_guard_is_not_listed_in_its_threads_running_holds() {
    let (store, lock) = store_with("ctx");
    let guard = lock.lock("k").unwrap();
    // On the guard's own thread the key waits like anyone else's.
    assert_eq!(
        lock.key("k").wait(SHORT).lock().unwrap_err().kind(),
        ErrorKind::InUse
    );
    let e = lock.key("k").wait(SHORT).hold(|_| ()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InUse, "{e}");
    assert!(lock.try_hold("k", |_| ()).unwrap().is_none());
    // Guards may be dropped in any order.
    let other = lock.lock("j").unwrap();
    drop(guard);
    assert!(lock.try_lock("k").unwrap().is_some());
    drop(other);
    // Inside a closure hold of the key (which is listed) it fails at once.
    let e = lock
        .hold("k", |_| lock.lock("k").map(drop))
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    // A waiting guard inside a transaction is refused as a hold is.
    let e = store.tx(|_| lock.lock("t").map(drop)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
}

#[test]
fn a_guard_moves_to_another_thread_and_is_released_there() {
    let (_store, lock) = store_with("moved");
    let guard = lock.lock("k").unwrap();
    thread::scope(|s| {
        s.spawn(move || drop(guard));
    });
    assert!(lock.try_lock("k").unwrap().is_some());
}

#[test]
fn an_owned_guard_crosses_tokio_spawn() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let store = Store::new();
    let lock = Arc::new(store.lock("owned").open().unwrap());
    rt.block_on(async {
        let guard = lock.clone().lock_owned_async("job").await.unwrap();
        let fence = guard.fence();
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(guard.key(), "job");
            drop(guard); // released on the task's thread
        });
        assert!(lock.try_lock("job").unwrap().is_none());
        // This waits in line until the task drops its guard.
        let next = lock.clone().lock_owned_async("job").await.unwrap();
        assert!(next.fence() > fence);
        task.await.unwrap();
        assert_eq!(next.lock().name(), "owned");
    });
    let long = "x".repeat(100);
    let owned = lock.clone().owned_key(&long).wait(SHORT).lock().unwrap();
    assert_eq!(owned.key(), long);
    assert!(lock.clone().owned_key(&long).try_lock().unwrap().is_none());
    drop(owned);
    assert!(lock.clone().try_lock_owned(&long).unwrap().is_some());
}

#[test]
fn guards_past_the_threads_watch_slots_are_revoked_too() {
    // More guards with a maxHold than a thread's page of the watch has
    // slots: the rest are timed on the store's wheel, as closure holds are.
    let store = Store::new();
    let lock = revoking_lock(&store, "many", 100);
    let keys: Vec<u32> = (0..20).collect();
    let guards: Vec<Guard<'_>> = keys.iter().map(|k| lock.lock(k).unwrap()).collect();
    wait_for_within("every guard revoked", PATIENCE, || {
        guards.iter().all(Guard::is_lost)
    });
    assert_eq!(lock.stats().revocations, 20);
    assert_eq!(lock.stats().held_keys, 0);
}

#[test]
fn async_guards_wait_in_line_with_threads() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (_store, lock) = store_with("async");
    let held = lock.lock("k").unwrap();
    rt.block_on(async {
        let e = lock.key("k").wait(SHORT).lock_async().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InUse, "{e}");
        drop(held);
        let guard = lock.lock_async("k").await.unwrap();
        assert!(lock.try_lock("k").unwrap().is_none());
        drop(guard);
    });
}

#[test]
fn an_owned_guard_is_revoked_at_max_hold_and_aborts_its_future() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let store = Store::new();
    let lock = Arc::new(revoking_lock(&store, "owned-max", 100));
    rt.block_on(async {
        let guard = lock.clone().lock_owned_async("m").await.unwrap();
        let answer = tokio::select! {
            _ = guard.signal().aborted() => "lost",
            _ = tokio::time::sleep(PATIENCE) => "done",
        };
        assert_eq!(answer, "lost");
        assert!(guard.is_lost());
    });
}

fn assert_send<T: Send>() {}
fn assert_sync<T: Sync>() {}
fn assert_send_val<T: Send>(_: &T) {}

#[test]
fn guards_and_their_futures_are_send() {
    assert_send::<Guard<'static>>();
    assert_sync::<Guard<'static>>();
    assert_send::<OwnedGuard>();
    assert_sync::<OwnedGuard>();
    fn is_static<T: 'static>() {}
    is_static::<OwnedGuard>();
    let (_store, lock) = store_with("bounds");
    let lock = Arc::new(lock);
    let borrowed = lock.lock_async("k");
    assert_send_val(&borrowed);
    let owned = lock.clone().lock_owned_async(&9);
    assert_send_val(&owned);
    fn is_static_future<F: Future + Send + 'static>(_: &F) {}
    is_static_future(&owned);
    let keyed = lock.key("k").exclusive().lock_async();
    assert_send_val(&keyed);
}
