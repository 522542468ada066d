//! The client against a real `holdline serve`: holds, tries, waits, FIFO,
//! fences, renewal, loss (maxHold, a dropped connection) and the errors'
//! texts byte for byte.

mod common;

use common::{assert_error, assert_takes, granted_at, Server, PATIENCE};
use holdline_client::{Connection, ErrorKind, Store, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::time::{sleep, timeout};

/// The error a waiting task's call ended with, within the patience: it
/// must be `closed`.
async fn failed_closed<T: std::fmt::Debug>(
    waiting: tokio::task::JoinHandle<Result<T, holdline_client::Error>>,
) -> holdline_client::Error {
    let err = timeout(PATIENCE, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_answers_the_closure_and_try_hold_never_waits() {
    let server = Server::start();
    let (_s, invoices) = server.lock("invoices", None, None).await;

    let (fence, key) = invoices
        .hold(&9, async |lease| (lease.fence(), lease.key().to_owned()))
        .await
        .unwrap();
    assert!(fence > 0);
    assert_eq!(key, "9");

    // Held by another client: try_hold answers None without running f;
    // a zero wait fails `in use` at once with the core's text.
    let (_other, other_invoices) = server.lock("invoices", None, None).await;
    let held = invoices.acquire("9").await.unwrap();
    let mut ran = false;
    let tried = other_invoices
        .try_hold(&9u32, async |_| ran = true)
        .await
        .unwrap();
    assert_eq!(tried, None);
    assert!(!ran);
    let err = other_invoices
        .key("9")
        .wait(Duration::ZERO)
        .hold(async |_| ())
        .await
        .unwrap_err();
    assert_error(
        &err,
        ErrorKind::InUse,
        "lock invoices: key \"9\": held past the hold's wait: in use",
    );
    assert!(!err.is_connection());

    // A wait runs its course, then `in use`.
    let started = Instant::now();
    let err = other_invoices
        .key(9)
        .wait(Duration::from_millis(300))
        .hold(async |_| ())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InUse);
    assert!(started.elapsed() >= Duration::from_millis(290));

    // Released: the try runs, with a higher fence.
    held.release().await.unwrap();
    let later = other_invoices
        .try_hold("9", async |lease| lease.fence())
        .await
        .unwrap()
        .expect("free now");
    assert!(later > fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_from_several_clients_are_granted_in_arrival_order() {
    let server = Server::start();
    let (_holder_store, lock) = server.lock("fifo", None, None).await;
    let held = lock.acquire("k").await.unwrap();

    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let s = server.store().await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let lock = s.lock("fifo").open().unwrap();
            lock.key("k")
                .wait(PATIENCE)
                .hold(async |lease| {
                    order.lock().unwrap().push((i, lease.fence()));
                    sleep(Duration::from_millis(10)).await;
                })
                .await
                .unwrap();
        }));
        // The next one starts only once this one stands in line.
        let deadline = Instant::now() + PATIENCE;
        while lock.stats().await.unwrap().waiters < i + 1 {
            assert!(Instant::now() < deadline, "waiter {i} never got in line");
            sleep(Duration::from_millis(5)).await;
        }
    }
    held.release().await.unwrap();
    for t in tasks {
        timeout(PATIENCE, t).await.unwrap().unwrap();
    }
    let order = order.lock().unwrap().clone();
    let who: Vec<usize> = order.iter().map(|&(i, _)| i).collect();
    assert_eq!(who, (0..6).collect::<Vec<_>>());
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1), "{order:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_rise_across_grants_and_clients() {
    let server = Server::start();
    let a = server.store().await;
    let b = server.store().await;
    let la = a.lock("fences").open().unwrap();
    let lb = b.lock("fences").open().unwrap();
    let mut last = 0;
    for i in 0..20 {
        let lock = if i % 2 == 0 { &la } else { &lb };
        let fence = lock.hold("k", async |l| l.fence()).await.unwrap();
        assert!(fence > last, "{fence} after {last}");
        last = fence;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_revokes_fires_the_signal_and_hold_answers_lost() {
    let server = Server::start();
    let (_s, lock) = server.lock("invoices", None, Some(300)).await;
    let (_waiter_store, waiter) = server.lock("invoices", None, None).await;

    let granted = Instant::now();
    let result = lock
        .hold("m", async |lease| {
            let signal = lease.signal();
            assert!(!signal.is_aborted());
            // Someone waits; on revocation they get the key at once.
            let next = granted_at(waiter.clone(), "m");
            timeout(PATIENCE, signal.aborted())
                .await
                .expect("the signal aborts");
            let aborted_after = granted.elapsed();
            assert!(signal.is_aborted() && lease.is_lost());
            let err = lease.check().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Lost);
            (aborted_after, next.await.unwrap().unwrap(), lease.fence())
        })
        .await;
    let err = result.unwrap_err();
    assert_error(
        &err,
        ErrorKind::Lost,
        "lock invoices: key \"m\": the lease was lost: it was revoked at its maxHold",
    );
    // The same hold again, returning its values through a channel instead.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let _ = lock
        .hold("m", async |lease| {
            let aborted = timeout(PATIENCE, lease.signal().aborted()).await.is_ok();
            let _ = tx.send((granted.elapsed(), aborted, lease.check().err()));
        })
        .await;
    let (_, aborted, check) = rx.await.unwrap();
    assert!(aborted);
    assert_eq!(
        check.unwrap().to_string(),
        "lock invoices: key \"m\": the lease was lost: it was revoked at its maxHold"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signal_fires_promptly_and_the_next_waiter_gets_the_key() {
    let server = Server::start();
    let (_s, lock) = server.lock("prompt", None, Some(300)).await;
    let (_other, waiter) = server.lock("prompt", None, None).await;
    let held = lock.acquire("k").await.unwrap();
    let granted = Instant::now();
    let next = granted_at(waiter, "k");
    timeout(PATIENCE, held.signal().aborted()).await.unwrap();
    let aborted_at = Instant::now();
    // Revoked at 300 ms, told well within a generous margin.
    assert!(aborted_at - granted >= Duration::from_millis(290));
    assert!(aborted_at - granted < Duration::from_secs(5));
    let (next_at, _) = timeout(PATIENCE, next).await.unwrap().unwrap().unwrap();
    assert!(next_at - granted < Duration::from_secs(5));
    let err = held.release().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "lock prompt: key \"k\": the lease was lost: it was revoked at its maxHold"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_a_lease_past_its_ttl_while_the_closure_sleeps() {
    let server = Server::start();
    let (_s, lock) = server.lock("renew", Some(800), None).await;
    let (_other, prober) = server.lock("renew", None, None).await;
    let fence = lock
        .hold("k", async |lease| {
            // Three ttls: without renewal the lease would run out. (A
            // renewal every third of the ttl leaves room for a stall of
            // half a ttl on a busy machine.)
            for _ in 0..10 {
                sleep(Duration::from_millis(250)).await;
                let tried = prober.try_hold("k", async |_| ()).await.unwrap();
                assert_eq!(tried, None, "the key stayed held");
            }
            assert!(!lease.is_lost());
            lease.fence()
        })
        .await
        .unwrap();
    assert!(fence > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_hold_renews_and_delays_no_other_hold() {
    let server = Server::start();
    let (_s, short) = server.lock("renew", Some(800), None).await;
    let (_blocker_store, blocker) = server.lock("renew", None, None).await;
    let b = blocker.acquire("b").await.unwrap();

    // One task of this store holds `a` past several ttls; another task of
    // the same store waits for `b` meanwhile, on its own connection.
    let waiting = tokio::spawn({
        let short = short.clone();
        async move {
            short
                .key("b")
                .wait(PATIENCE)
                .hold(async |lease| {
                    // Granted after waiting longer than its ttl: its own
                    // renewals kept it (and now keep the lease) alive.
                    sleep(Duration::from_millis(1600)).await;
                    lease.is_lost()
                })
                .await
        }
    });
    let held_a = short
        .hold("a", async |lease| {
            sleep(Duration::from_millis(2500)).await;
            lease.is_lost()
        })
        .await
        .unwrap();
    assert!(!held_a, "the lease on a was renewed while b's HOLD waited");
    b.release().await.unwrap();
    let lost_b = timeout(PATIENCE, waiting).await.unwrap().unwrap().unwrap();
    assert!(!lost_b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_aborts_the_signal_and_fails_calls() {
    let mut server = Server::start();
    let (_s, lock) = server.lock("drop", None, None).await;
    let (_other, other_lock) = server.lock("drop", None, None).await;
    let held = lock.acquire("k").await.unwrap();
    let waiting =
        tokio::spawn(async move { other_lock.key("k").wait(PATIENCE).hold(async |_| ()).await });
    let signal = held.signal();
    sleep(Duration::from_millis(100)).await;
    assert!(!signal.is_aborted());
    server.kill();
    timeout(PATIENCE, signal.aborted())
        .await
        .expect("a dropped connection aborts the signal");
    assert!(held.is_lost());
    let lost = held.check().unwrap_err();
    assert_eq!(lost.kind(), ErrorKind::Lost);
    assert_eq!(
        lost.to_string(),
        common::expected_text("lost_connection", &[("lock", "drop"), ("key", "\"k\"")])
    );
    let err = held.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lost);
    // The waiting HOLD's call fails `closed`: the store cannot be reached.
    let err = failed_closed(waiting).await;
    assert!(err.is_connection());
    let vars = [("lock", "drop"), ("key", "\"k\"")];
    assert_eq!(
        err.to_string(),
        common::expected_text("connection_closed_key", &vars)
    );
    // So does a new call, which cannot connect (naming where it dialled).
    let err = lock.hold("k", async |_| ()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    let dialled = format!("store: cannot connect to {} (", server.addr);
    assert!(err.to_string().starts_with(&dialled), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_dropped_while_waiting_leaves_the_line() {
    let server = Server::start();
    let (_s, lock) = server.lock("leave", None, None).await;
    let (_other, other_lock) = server.lock("leave", None, None).await;
    let held = lock.acquire("k").await.unwrap();
    let gave_up = timeout(
        Duration::from_millis(200),
        other_lock.key("k").wait(PATIENCE).hold(async |_| ()),
    )
    .await;
    assert!(gave_up.is_err());
    let deadline = Instant::now() + PATIENCE;
    while lock.stats().await.unwrap().waiters != 0 {
        assert!(Instant::now() < deadline, "the dropped HOLD stayed in line");
        sleep(Duration::from_millis(10)).await;
    }
    held.release().await.unwrap();
    // Free at once: nobody stands in line.
    let tried = other_lock.try_hold("k", async |_| 1).await.unwrap();
    assert_eq!(tried, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_held_lease_lets_the_key_go_and_keeps_its_connection() {
    let server = Server::start();
    let (s, lock) = server.lock("dropped", None, None).await;
    let held = lock.acquire("k").await.unwrap();
    drop(held);
    assert_takes(&lock, "k", Duration::from_secs(5)).await;
    assert!(s.idle_connections() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_checks_say_what_the_server_says() {
    let server = Server::start();
    let (s, lock) = server.lock("checks", None, None).await;
    let mut raw = Connection::connect(&server.addr).await.unwrap();
    let long = "k".repeat(1025);
    for key in ["", "a\nb", long.as_str()] {
        let local = lock.hold(key, async |_| ()).await.unwrap_err();
        assert_eq!(local.kind(), ErrorKind::Invalid);
        let reply = raw.command(&["HOLD", "checks", key]).await.unwrap();
        let Value::Error(text) = reply else {
            panic!("{reply:?}")
        };
        assert_eq!(format!("INVALID {local}"), text);
    }
    let local = s.lock("bad name").open().unwrap_err();
    let Value::Error(text) = raw.command(&["HOLD", "bad name", "k"]).await.unwrap() else {
        panic!()
    };
    assert_eq!(format!("INVALID {local}"), text);
    let local = s.lock("l").ttl(Duration::ZERO).open().unwrap_err();
    assert_eq!(local.kind(), ErrorKind::Invalid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_keep_their_text_byte_for_byte() {
    let server = Server::start();
    let mut raw = Connection::connect(&server.addr).await.unwrap();
    // RELEASE of a lease this connection never had: INVALID, the text as sent.
    let Value::Error(text) = raw.command(&["RELEASE", "999999"]).await.unwrap() else {
        panic!()
    };
    let e = holdline_client::Error::from_reply(&text);
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert_eq!(format!("INVALID {e}"), text);
    // A lost lease: RELEASE answers the core's text, which the client keeps.
    let (_s, lock) = server.lock("bytes", None, Some(50)).await;
    let held = lock.acquire("m").await.unwrap();
    timeout(PATIENCE, held.signal().aborted()).await.unwrap();
    let pushed = held.check().unwrap_err();
    let released = held.release().await.unwrap_err();
    assert_eq!(pushed, released);
    assert_eq!(
        released.to_string(),
        "lock bytes: key \"m\": the lease was lost: it was revoked at its maxHold"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_server_fails_waiters_closed() {
    let mut server = Server::start();
    let (_s, lock) = server.lock("closing", None, None).await;
    let held = lock.acquire("k").await.unwrap();
    let (_other, waiter) = server.lock("closing", None, None).await;
    let waiting =
        tokio::spawn(async move { waiter.key("k").wait(PATIENCE).hold(async |_| ()).await });
    let deadline = Instant::now() + PATIENCE;
    while lock.stats().await.unwrap().waiters == 0 {
        assert!(Instant::now() < deadline);
        sleep(Duration::from_millis(10)).await;
    }
    server.terminate();
    let err = failed_closed(waiting).await;
    // The server answers the waiter before it closes the connection.
    assert!(!err.is_connection(), "{err}");
    assert_eq!(
        err.to_string(),
        "lock closing: key \"k\": the store is closed: closed"
    );
    timeout(PATIENCE, held.signal().aborted()).await.unwrap();
    assert_eq!(held.check().unwrap_err().kind(), ErrorKind::Lost);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_required_and_checked() {
    let server = Server::start_with_token("s3cret-token");
    let err = Store::connect_with_token(&server.addr, "wrong")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert!(!err.is_connection(), "{err}");
    // Without the token, connecting itself fails (HELLO is refused).
    let err = Store::connect(&server.addr).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert_eq!(err.to_string(), common::expected_text("token_missing", &[]));
    let s = Store::connect_with_token(&server.addr, "s3cret-token")
        .await
        .unwrap();
    let lock = s.lock("t").open().unwrap();
    assert!(lock.hold("k", async |l| l.fence()).await.unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_connection_pipelines_and_routes_pushes() {
    let server = Server::start();
    let mut conn = Connection::connect(&server.addr).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    conn.set_push_handler(move |items| {
        let _ = tx.send(items);
    });
    conn.queue(&["PING"]);
    conn.queue(&["ECHO", "hi"]);
    conn.queue(&["HOLD", "raw", "k", "MAXHOLD", "100"]);
    conn.flush().await.unwrap();
    assert_eq!(conn.read_reply().await.unwrap(), Value::simple("PONG"));
    assert_eq!(conn.read_reply().await.unwrap(), Value::bulk("hi"));
    let Value::Array(grant) = conn.read_reply().await.unwrap() else {
        panic!()
    };
    let id = grant[0].as_integer().unwrap();
    // The push arrives unasked; reading the next reply routes it.
    sleep(Duration::from_millis(300)).await;
    let reply = conn.command(&["PING"]).await.unwrap();
    assert_eq!(reply, Value::simple("PONG"));
    let push = rx.try_recv().expect("the lost push was routed");
    assert_eq!(push[0].as_str(), Some("lost"));
    assert_eq!(push[1].as_integer(), Some(id));
    assert_eq!(
        push[2].as_str(),
        Some("lock raw: key \"k\": the lease was lost: it was revoked at its maxHold")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_run_on_spawned_tasks_and_exclude_each_other() {
    let server = Server::start();
    let (s, lock) = server.lock("excl", None, None).await;
    let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let lock = lock.clone();
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                lock.key("k")
                    .wait(PATIENCE)
                    .hold(async |_| {
                        use std::sync::atomic::Ordering::SeqCst;
                        assert_eq!(inside.fetch_add(1, SeqCst), 0, "two holders at once");
                        tokio::task::yield_now().await;
                        inside.fetch_sub(1, SeqCst);
                    })
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        timeout(PATIENCE, t).await.unwrap().unwrap();
    }
    assert!(s.idle_connections() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_inside_a_hold_of_the_same_key_is_invalid() {
    let server = Server::start();
    let (_s, lock) = server.lock("nest", None, None).await;
    let (inner, other, tried, spawned) = lock
        .hold("k", async |_| {
            let started = Instant::now();
            let inner = lock.hold("k", async |_| ()).await.unwrap_err();
            assert!(started.elapsed() < Duration::from_secs(5), "failed at once");
            let other = lock.hold("j", async |_| 1).await.unwrap();
            let tried = lock.try_hold("k", async |_| ()).await.unwrap();
            // Another task is another holder: it waits, then `in use`.
            let l2 = lock.clone();
            let spawned =
                tokio::spawn(
                    async move { l2.key("k").wait(Duration::ZERO).hold(async |_| ()).await },
                )
                .await
                .unwrap()
                .unwrap_err();
            (inner, other, tried, spawned)
        })
        .await
        .unwrap();
    assert_error(
        &inner,
        ErrorKind::Invalid,
        "lock nest: key \"k\": hold inside a hold of the same key: invalid",
    );
    assert_eq!(other, 1);
    assert_eq!(tried, None);
    assert_eq!(spawned.kind(), ErrorKind::InUse);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_loses_the_lease_after_its_ttl_without_hanging() {
    let mut server = Server::start();
    let (_s, lock) = server.lock("stall", Some(500), None).await;
    let held = lock.acquire("k").await.unwrap();
    // Renewals are answered: nothing is lost over several ttls.
    sleep(Duration::from_millis(1200)).await;
    assert!(!held.is_lost());
    let stalled = Instant::now();
    server.stop();
    timeout(PATIENCE, held.signal().aborted())
        .await
        .expect("the lease is taken for lost when the server stays silent");
    // Not before the server could have let it go: a renewal sent at most a
    // third of the ttl before the stall keeps it at least two thirds after.
    assert!(stalled.elapsed() >= Duration::from_millis(300));
    let lost = held.check().unwrap_err();
    assert_error(&lost, ErrorKind::Lost, "lock stall: key \"k\": the lease was lost: the server answered nothing for its ttl (500ms)");
    // Release does not wait for the stalled server.
    let released = timeout(Duration::from_secs(5), held.release())
        .await
        .expect("release returns at once");
    assert_eq!(released.unwrap_err(), lost);
    server.resume();
    // The server, running again, serves the next holder (the stalled
    // connection was closed, so the key is free or runs out at its ttl).
    assert_takes(&lock, "k", PATIENCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_refuse_a_stale_fence() {
    let server = Server::start();
    let (s, lock) = server.lock("fenced", None, None).await;
    let old = lock
        .hold("k", async |lease| {
            s.put_fenced(&lock, lease.key(), lease.fence(), "row", b"first")
                .await
                .unwrap();
            lease.fence()
        })
        .await
        .unwrap();
    assert_eq!(s.get("row").await.unwrap().as_deref(), Some(&b"first"[..]));
    lock.hold("k", async |lease| {
        let err = s
            .put_fenced(&lock, "k", old, "row", b"stale")
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Lost);
        s.put_fenced(&lock, "k", lease.fence(), "row", b"second")
            .await
            .unwrap();
    })
    .await
    .unwrap();
    assert_eq!(s.get("row").await.unwrap().as_deref(), Some(&b"second"[..]));
    assert_eq!(s.get("nothing").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_closure_lets_the_key_go() {
    let server = Server::start();
    let (_s, lock) = server.lock("panics", None, None).await;
    let l2 = lock.clone();
    let joined =
        tokio::spawn(async move { l2.hold("k", async |_| -> () { panic!("boom") }).await }).await;
    assert!(joined.unwrap_err().is_panic());
    // Let go at once (RELEASE on drop), not at the ttl (10 s).
    assert_takes(&lock, "k", Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_answers_ok_then_the_loss() {
    let server = Server::start();
    let (_s, lock) = server.lock("renewing", None, Some(300)).await;
    let held = lock.acquire(&7).await.unwrap();
    held.renew().await.unwrap();
    timeout(PATIENCE, held.signal().aborted()).await.unwrap();
    let err = held.renew().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "lock renewing: key \"7\": the lease was lost: it was revoked at its maxHold"
    );
    assert_eq!(held.release().await.unwrap_err(), err);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_holder_the_fence_and_the_line() {
    let server = Server::start();
    let (_s, lock) = server.lock("seen", Some(5000), None).await;
    assert_eq!(lock.inspect("k").await.unwrap(), None, "never used");

    let held = lock.acquire("k").await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.key("k").wait(PATIENCE).hold(async |l| l.fence()).await })
    };
    // The waiter is in line once the server counts it.
    let deadline = Instant::now() + PATIENCE;
    let info = loop {
        let info = lock.inspect("k").await.unwrap().expect("held, so known");
        if info.waiters == 1 || Instant::now() > deadline {
            break info;
        }
        sleep(Duration::from_millis(20)).await;
    };
    assert!(info.held);
    assert_eq!(info.fence, held.fence());
    assert_eq!(info.waiters, 1);
    assert!(info.held_for.is_some_and(|d| d < PATIENCE), "{info:?}");
    assert!(
        info.lease_left.is_some_and(|d| d <= Duration::from_secs(5)),
        "{info:?}"
    );
    let holder = info.holder.expect("a held key names its holder");
    assert_eq!(holder.lease, held.id());
    assert_eq!(holder.name, None);
    assert!(holder.addr.starts_with("127.0.0.1:"), "{holder:?}");
    assert!(holder.id > 0);

    held.release().await.unwrap();
    let next_fence = timeout(PATIENCE, waiter).await.unwrap().unwrap().unwrap();
    assert!(next_fence > info.fence);
    // Free now: the last grant's fence, no holder (unless already reclaimed).
    if let Some(free) = lock.inspect("k").await.unwrap() {
        assert!(!free.held);
        assert_eq!(free.fence, next_fence);
        assert_eq!((free.holder, free.waiters), (None, 0));
    }
}

/// The longest wait the client takes (`Duration::MAX`, sent as the core's
/// largest) waits as long as it takes: not ended while the key is held,
/// granted once it is let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_wait_waits_until_the_key_is_let_go() {
    let server = Server::start();
    let (_s, lock) = server.lock("longest", None, None).await;
    let (_t, other) = server.lock("longest", None, None).await;
    let held = other.acquire("l").await.unwrap();
    let waiting = tokio::spawn(async move {
        lock.key("l")
            .wait(Duration::MAX)
            .hold(async |lease| lease.fence())
            .await
    });
    sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the wait has not ended");
    held.release().await.unwrap();
    let fence = timeout(PATIENCE, waiting).await.unwrap().unwrap().unwrap();
    assert!(fence > 0);
}

/// A handle opened with bounded bypass sends `BYPASS ms` with its holds:
/// the server takes it, and its waiter is granted in turn as ever (a
/// second client holds, a bounded waiter waits, the holder lets go).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_handle_holds_and_waits_through_the_server() {
    let server = Server::start();
    let (_a, plain) = server.lock("chats", None, None).await;
    let store = server.store().await;
    let bounded = store
        .lock("chats")
        .fairness(holdline_client::Fairness::BOUNDED)
        .open()
        .unwrap();
    assert!(format!("{bounded:?}").contains("bypass_ms: Some(\"1\")"));
    let held = plain.acquire("chat-1").await.unwrap();
    let waiter = tokio::spawn(async move {
        bounded
            .key("chat-1")
            .wait(PATIENCE)
            .hold(async |lease| lease.fence())
            .await
    });
    sleep(Duration::from_millis(50)).await;
    let first = held.fence();
    held.release().await.unwrap();
    let fence = timeout(PATIENCE, waiter).await.unwrap().unwrap().unwrap();
    assert!(
        fence > first,
        "granted after the holder, with a greater fence"
    );
}
