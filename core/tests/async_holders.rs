//! Async holders: tasks wait in the same FIFO line as threads, under the
//! same rules (wait, limit, closed, lost, maxHold), and a dropped future
//! leaves the line or hands its grant on.

mod common;

use common::{revoking_lock, store_with, store_with_held, ttl_lock, wait_for};
use holdline::{ErrorKind, Lock, Store};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

fn waiters(lock: &Lock) -> usize {
    lock.stats().waiters
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn hold_async_answers_the_closures_value_with_rising_fences() {
    let (_store, lock) = store_with("chats");
    let rt = current_thread();
    let (a, b) = rt.block_on(async {
        let a = lock
            .hold_async("chat-1", async |lease| {
                tokio::task::yield_now().await;
                lease.fence()
            })
            .await
            .unwrap();
        let b = lock
            .hold_async("chat-1", async |lease| lease.fence())
            .await
            .unwrap();
        (a, b)
    });
    assert!(b > a, "{b} > {a}");
    assert_eq!(lock.stats().held_keys, 0);
}

/// The trial's bug: on a current-thread runtime a task holding a key across
/// an await must not be starved by another task waiting for that key.
#[test]
fn a_waiting_task_does_not_block_the_holder_on_a_current_thread_runtime() {
    let (_store, lock) = store_with("chats");
    let rt = current_thread();
    let order = rt.block_on(async {
        let order = Arc::new(Mutex::new(Vec::new()));
        let (l1, o1) = (lock.clone(), order.clone());
        let first = tokio::spawn(async move {
            l1.hold_async("chat-1", async |_| {
                o1.lock().unwrap().push("first in");
                tokio::time::sleep(Duration::from_millis(50)).await;
                o1.lock().unwrap().push("first out");
            })
            .await
        });
        tokio::task::yield_now().await;
        let (l2, o2) = (lock.clone(), order.clone());
        let second = tokio::spawn(async move {
            l2.key("chat-1")
                .wait(Duration::from_secs(5))
                .hold_async(async |_| o2.lock().unwrap().push("second"))
                .await
        });
        first.await.unwrap().unwrap();
        second.await.unwrap().unwrap();
        Arc::try_unwrap(order).unwrap().into_inner().unwrap()
    });
    assert_eq!(order, ["first in", "first out", "second"]);
}

/// Threads and tasks standing in one line are granted in arrival order:
/// waiter `i` is a task when `is_task(i)`, spawned on `handle`'s runtime
/// (which something else drives), else a thread.
fn mixed_line_is_fifo(handle: &tokio::runtime::Handle, n: usize, is_task: fn(usize) -> bool) {
    let (_store, lock, holder) = store_with_held("mixed", "k");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..n {
        let (l, o) = (lock.clone(), order.clone());
        if is_task(i) {
            tasks.push(handle.spawn(async move {
                l.hold_async("k", async |_| {
                    tokio::task::yield_now().await;
                    o.lock().unwrap().push(i);
                })
                .await
                .unwrap();
            }));
        } else {
            threads.push(thread::spawn(move || {
                l.hold("k", |_| o.lock().unwrap().push(i)).unwrap();
            }));
        }
        // The next one arrives only once this one stands in line.
        wait_for("the waiter to stand in line", || waiters(&lock) == i + 1);
    }
    holder.release().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    handle.block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert_eq!(*order.lock().unwrap(), (0..n).collect::<Vec<_>>());
}

#[test]
fn threads_and_tasks_share_one_fifo_line_on_a_multi_thread_runtime() {
    let rt = multi_thread();
    mixed_line_is_fifo(rt.handle(), 8, |i| i % 2 == 1);
}

#[test]
fn threads_and_tasks_share_one_fifo_line_on_a_current_thread_runtime() {
    // The runtime's one thread drives the tasks while this thread watches.
    let rt = current_thread();
    let handle = rt.handle().clone();
    let stop = Arc::new(tokio::sync::Notify::new());
    let s2 = stop.clone();
    let driver = thread::spawn(move || rt.block_on(s2.notified()));
    mixed_line_is_fifo(&handle, 6, |i| i % 2 == 0);
    stop.notify_one();
    driver.join().unwrap();
}

#[test]
fn a_task_waits_up_to_its_deadline_then_fails_in_use() {
    let (_store, lock, holder) = store_with_held("invoices", "9");
    let rt = current_thread();
    let started = Instant::now();
    let err = rt
        .block_on(
            lock.key(9)
                .wait(Duration::from_millis(100))
                .hold_async(async |_| ()),
        )
        .unwrap_err();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert_eq!(err.kind(), ErrorKind::InUse);
    assert_eq!(
        err.to_string(),
        r#"lock invoices: key "9": held past the hold's wait: in use"#
    );
    // A zero wait fails at once, and leaves nothing in line.
    let err = rt
        .block_on(lock.key("9").wait(Duration::ZERO).acquire_async())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InUse);
    assert_eq!(waiters(&lock), 0);
    assert_eq!(lock.stats().timeouts, 2);
    holder.release().unwrap();
}

/// Tasks in one line share one timer entry per line: a task whose deadline
/// comes before the pending entry's arms its own, and a firing entry covers
/// the tasks still in line. Each task ends at its own deadline, none later:
/// the third task's deadline (300 ms) is covered only by the re-arm after
/// the second's (100 ms) fires, as the first's entry comes at 5 s.
#[test]
fn tasks_of_one_line_each_time_out_at_their_own_deadline() {
    let (_store, lock, holder) = store_with_held("invoices", "k");
    let rt = multi_thread();
    let started = Instant::now();
    let task = |wait_ms: u64| {
        let lock = lock.clone();
        rt.spawn(async move {
            let held = lock
                .key("k")
                .wait(Duration::from_millis(wait_ms))
                .hold_async(async |l| l.fence())
                .await;
            (held, started.elapsed())
        })
    };
    let long = task(5_000);
    wait_for("the first task in line", || waiters(&lock) == 1);
    let short = task(100);
    wait_for("the second task in line", || waiters(&lock) == 2);
    let middle = task(300);
    wait_for("the third task in line", || waiters(&lock) == 3);
    let (short, short_at) = rt.block_on(short).unwrap();
    assert_eq!(short.unwrap_err().kind(), ErrorKind::InUse);
    assert!(short_at >= Duration::from_millis(100), "{short_at:?}");
    let (middle, middle_at) = rt.block_on(middle).unwrap();
    assert_eq!(middle.unwrap_err().kind(), ErrorKind::InUse);
    assert!(middle_at >= Duration::from_millis(300), "{middle_at:?}");
    assert!(
        middle_at < Duration::from_millis(4_000),
        "the 300 ms task waited for the 5 s task's entry: {middle_at:?}"
    );
    // The first is still in line, and is granted at the release.
    assert_eq!(waiters(&lock), 1);
    holder.release().unwrap();
    let (long, _) = rt.block_on(long).unwrap();
    assert!(long.unwrap() > 0);
    assert_eq!(lock.stats().timeouts, 2);
}

#[test]
fn the_10001st_waiter_fails_limit_whether_task_or_thread_and_a_dropped_one_frees_its_place() {
    let (_store, lock, holder) = store_with_held("busy", "7");
    let rt = current_thread();
    let mut tasks = Vec::new();
    rt.block_on(async {
        for _ in 0..10_000 {
            let l = lock.clone();
            tasks.push(tokio::spawn(async move {
                l.key("7")
                    .wait(Duration::from_secs(60))
                    .hold_async(async |_| ())
                    .await
            }));
        }
        while waiters(&lock) < 10_000 {
            tokio::task::yield_now().await;
        }
        let err = lock.acquire_async("7").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Limit);
        assert_eq!(
            err.to_string(),
            r#"lock busy: key "7": 10000 waiters already stand in line: limit"#
        );
    });
    let err = lock.hold("7", |_| ()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Limit);
    // Dropping one waiting future frees its place at once.
    // The JoinHandle is awaited after the holder lets go, below.
    #[allow(clippy::async_yields_async)]
    let last = rt.block_on(async {
        tasks.pop().unwrap().abort();
        while waiters(&lock) != 9_999 {
            tokio::task::yield_now().await;
        }
        let l = lock.clone();
        let last = tokio::spawn(async move { l.hold_async("7", async |_| ()).await });
        while waiters(&lock) != 10_000 {
            tokio::task::yield_now().await;
        }
        for t in &tasks {
            t.abort();
        }
        while waiters(&lock) != 1 {
            tokio::task::yield_now().await;
        }
        last
    });
    holder.release().unwrap();
    rt.block_on(last).unwrap().unwrap();
    assert_eq!(lock.stats().held_keys, 0);
}

#[test]
fn close_fails_waiting_tasks_at_once_and_loses_held_ones() {
    let (store, lock) = store_with("jobs");
    let rt = multi_thread();
    let (l, held) = (lock.clone(), Arc::new(tokio::sync::Notify::new()));
    let h2 = held.clone();
    let holding = rt.spawn(async move {
        l.hold_async("j", async |lease| {
            h2.notify_one();
            lease.signal().aborted().await;
            lease.is_lost()
        })
        .await
    });
    rt.block_on(held.notified());
    let l = lock.clone();
    let waiting = rt.spawn(async move {
        let started = Instant::now();
        let r = l
            .key("j")
            .wait(Duration::from_secs(30))
            .hold_async(async |_| ())
            .await;
        (r, started.elapsed())
    });
    wait_for("the task in line", || waiters(&lock) == 1);
    store.close();
    let (r, waited) = rt.block_on(waiting).unwrap();
    let err = r.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    assert_eq!(
        err.to_string(),
        r#"lock jobs: key "j": the store is closed: closed"#
    );
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    let err = rt.block_on(holding).unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost);
    assert_eq!(
        err.to_string(),
        r#"lock jobs: key "j": the lease was lost: its store closed"#
    );
}

#[test]
fn max_hold_revokes_a_task_hands_the_key_on_and_aborts_its_signal() {
    let store = Store::new();
    let lock = revoking_lock(&store, "invoices", 50);
    let rt = multi_thread();
    let next_got_it = Arc::new(AtomicBool::new(false));
    let (l, n) = (lock.clone(), next_got_it.clone());
    let revoked = rt.spawn(async move {
        l.hold_async("m", async |lease| {
            let first = lease.fence();
            lease.signal().aborted().await;
            // Revoked, and still running: the next holder already has it.
            while !n.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            first
        })
        .await
    });
    wait_for("the first grant", || lock.stats().grants == 1);
    let l = lock.clone();
    let next = rt.block_on(async move {
        l.key("m")
            .wait(Duration::from_secs(10))
            .hold_async(async |lease| {
                next_got_it.store(true, Ordering::SeqCst);
                lease.fence()
            })
            .await
    });
    let err = rt.block_on(revoked).unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost);
    assert_eq!(
        err.to_string(),
        r#"lock invoices: key "m": the lease was lost: it was revoked at its maxHold"#
    );
    assert!(next.unwrap() > 0);
    assert_eq!(lock.stats().revocations, 1);
}

#[test]
fn the_loss_signal_can_be_selected_beside_the_work() {
    let store = Store::new();
    let lock = revoking_lock(&store, "chats", 30);
    let rt = multi_thread();
    let outcome = rt.block_on(lock.hold_async("c", async |lease| {
        tokio::select! {
            _ = lease.signal().aborted() => "lost",
            _ = tokio::time::sleep(Duration::from_secs(20)) => "finished",
        }
    }));
    assert_eq!(outcome.unwrap_err().kind(), ErrorKind::Lost);
    // And a released lease's `aborted()` never resolves.
    let signal = rt.block_on(lock.acquire_async("d")).unwrap();
    let s = signal.signal();
    signal.release().unwrap();
    let r =
        rt.block_on(async { tokio::time::timeout(Duration::from_millis(50), s.aborted()).await });
    assert!(r.is_err(), "a release is not a loss");
}

#[test]
fn a_task_holding_a_key_that_awaits_a_hold_of_it_is_refused_at_once() {
    let (_store, lock) = store_with("chats");
    let rt = current_thread();
    let started = Instant::now();
    let inner = rt
        .block_on(lock.hold_async("c", async |_| {
            let nested = lock.hold_async("c", async |_| ()).await;
            let blocking = lock.hold("c", |_| ());
            let other_key = lock.hold_async("d", async |_| ()).await;
            (nested, blocking, other_key)
        }))
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    for e in [inner.0.unwrap_err(), inner.1.unwrap_err()] {
        assert_eq!(
            e.to_string(),
            r#"lock chats: key "c": hold inside a hold of the same key: invalid"#
        );
    }
    inner.2.unwrap();
}

#[test]
fn bad_keys_are_invalid_for_a_task_too_and_never_make_a_record() {
    let (_store, lock) = store_with("l");
    let rt = current_thread();
    for key in ["", "a\nb", "nul\0", "del\u{7f}"] {
        let held = rt.block_on(lock.hold_async(key, async |_| ()));
        let e = held.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{key:?}");
        assert!(e.to_string().starts_with("lock l: key "), "{e}");
        let acquired = rt.block_on(lock.acquire_async(key));
        assert_eq!(acquired.unwrap_err().kind(), ErrorKind::Invalid);
    }
    assert_eq!(lock.stats().live_keys, 0);
}

#[test]
fn an_acquired_async_lease_renews_and_releases_like_a_blocking_one() {
    let store = Store::new();
    let lock = ttl_lock(&store, "leases", 100, None);
    let rt = current_thread();
    let lease = rt.block_on(lock.acquire_async(&42)).unwrap();
    assert_eq!(lease.key(), "42");
    for _ in 0..5 {
        thread::sleep(Duration::from_millis(40));
        lease.renew().unwrap();
    }
    assert!(lock.try_hold(42, |_| ()).unwrap().is_none());
    lease.release().unwrap();
    assert!(lock.try_hold(42, |_| ()).unwrap().is_some());
}

/// Cancellation under load: thousands of tasks with random timeouts on a
/// few keys. Nobody is ever inside a key with another, no grant is lost
/// (every key ends free, with nobody in line), and timed-out tasks left.
#[test]
fn dropped_futures_never_lose_or_keep_a_grant() {
    let (_store, lock) = store_with("stress");
    let rt = multi_thread();
    const KEYS: usize = 4;
    let inside: Arc<Vec<AtomicBool>> =
        Arc::new((0..KEYS).map(|_| AtomicBool::new(false)).collect());
    let done = Arc::new(AtomicUsize::new(0));
    let timed_out = Arc::new(AtomicUsize::new(0));
    rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..4_000u64 {
            let (l, inside, done, timed_out) = (
                lock.clone(),
                inside.clone(),
                done.clone(),
                timed_out.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let key = (i as usize * 7) % KEYS;
                let budget = Duration::from_micros(rand::random_range(0..2_000));
                let hold = l.hold_async(&key, async |_| {
                    // Out again when the closure ends or is dropped with
                    // its future (a timeout while inside).
                    struct Inside<'a>(&'a AtomicBool);
                    impl Drop for Inside<'_> {
                        fn drop(&mut self) {
                            self.0.store(false, Ordering::SeqCst);
                        }
                    }
                    assert!(!inside[key].swap(true, Ordering::SeqCst), "two inside");
                    let _inside = Inside(&inside[key]);
                    if i % 3 == 0 {
                        tokio::task::yield_now().await;
                    }
                });
                match tokio::time::timeout(budget, hold).await {
                    Ok(r) => {
                        r.unwrap();
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        timed_out.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let stats = lock.stats();
    assert_eq!(stats.held_keys, 0, "{stats:?}");
    assert_eq!(stats.waiters, 0, "{stats:?}");
    assert_eq!(
        done.load(Ordering::Relaxed) + timed_out.load(Ordering::Relaxed),
        4_000
    );
    // Every key is free now, for a thread too.
    for k in 0..KEYS {
        assert!(lock.try_hold(k, |_| ()).unwrap().is_some());
    }
}

/// A lock of two permits whose key `j` keeps a record (one permit held by
/// the returned handle) and has one free, so a hold of `j` is granted at
/// once.
fn lock_with_j_free_and_kept() -> (Store, Arc<Lock>, holdline::HeldLease) {
    let store = Store::new();
    let lock = Arc::new(store.lock("invoices").permits(2).open().unwrap());
    let keeps_j = lock.acquire("j").unwrap();
    (store, lock, keeps_j)
}

/// A release that grants a key to a waiting task leaves that task queued
/// on the releasing thread; a task there that went on to take another
/// free key would keep the granted key held by a task that is not
/// running. So the releaser's next hold of a free key yields to it first.
#[test]
fn a_release_that_grants_a_task_lets_it_run_before_the_releaser_takes_a_free_key() {
    let (_store, lock, _keeps_j) = lock_with_j_free_and_kept();
    let order = Arc::new(Mutex::new(Vec::new()));
    let rt = current_thread();
    rt.block_on(async {
        let waiter = {
            let (lock, order) = (lock.clone(), order.clone());
            tokio::spawn(async move {
                let seen = order.clone();
                lock.hold_async("k", async |_| seen.lock().unwrap().push("waiter holds k"))
                    .await
                    .unwrap();
            })
        };
        lock.key("k")
            .exclusive()
            .hold_async(async |_| {
                // The waiter runs and stands in line for `k`.
                while lock.stats().waiters == 0 {
                    tokio::task::yield_now().await;
                }
            })
            .await
            .unwrap();
        // `k` was just granted to the waiter, which has not run since.
        let seen = order.clone();
        lock.hold_async("j", async |_| seen.lock().unwrap().push("releaser holds j"))
            .await
            .unwrap();
        waiter.await.unwrap();
    });
    assert_eq!(
        *order.lock().unwrap(),
        ["waiter holds k", "releaser holds j"]
    );
}

/// The yield above is made once a hold: while it yields, the task it
/// yielded to may grant another (as here), and the releaser then takes
/// its free key without yielding again, so a thread that keeps granting
/// tasks cannot keep it from its own.
#[test]
fn a_task_yields_to_granted_tasks_at_most_once_a_hold() {
    let (_store, lock, _keeps_j) = lock_with_j_free_and_kept();
    let order = Arc::new(Mutex::new(Vec::new()));
    let rt = current_thread();
    let hold_k = |name: &'static str| {
        let (lock, order) = (lock.clone(), order.clone());
        async move {
            lock.key("k")
                .exclusive()
                .hold_async(async |_| order.lock().unwrap().push(name))
                .await
                .unwrap();
        }
    };
    // A spawned task, as the waiters are: the runtime queues them in turn.
    let releaser = {
        let (lock, order) = (lock.clone(), order.clone());
        async move {
            lock.key("k")
                .exclusive()
                .hold_async(async |_| {
                    while lock.stats().waiters < 2 {
                        tokio::task::yield_now().await;
                    }
                })
                .await
                .unwrap();
            lock.hold_async("j", async |_| {
                order.lock().unwrap().push("releaser holds j")
            })
            .await
            .unwrap();
        }
    };
    rt.block_on(async {
        let releaser = tokio::spawn(releaser);
        let first = tokio::spawn(hold_k("first waiter holds k"));
        let second = tokio::spawn(hold_k("second waiter holds k"));
        for task in [releaser, first, second] {
            task.await.unwrap();
        }
    });
    let order = order.lock().unwrap();
    assert_eq!(
        *order,
        [
            "first waiter holds k",
            "releaser holds j",
            "second waiter holds k"
        ]
    );
}
