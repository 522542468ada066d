//! Losing a lease: maxHold revocation, ttl run-out, store close; and fences.

mod common;

use common::{
    assert_error, assert_error_starts, assert_fails_with, revoking_lock, store_with, ttl_lock,
};
use holdline::{EndReason, ErrorKind, Lock, Store};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// `lock`'s keys held now, and its revocations so far.
fn held_and_revoked(lock: &Lock) -> (usize, u64) {
    let s = lock.stats();
    (s.held_keys, s.revocations)
}

#[test]
fn max_hold_hands_the_key_on_while_the_revoked_closure_still_runs() {
    let store = Store::new();
    let invoices = revoking_lock(&store, "invoices", 150);
    let (granted_tx, granted_rx) = mpsc::channel();
    let (next_tx, next_rx) = mpsc::channel();
    let l = invoices.clone();
    let hung = thread::spawn(move || {
        l.hold("m", |lease| {
            let signal = lease.signal();
            granted_tx.send(lease.fence()).unwrap();
            // A hung holder: it only notices through its signal.
            assert!(signal.wait_timeout(Duration::from_secs(20)), "aborted");
            // The next holder got the key while this closure still runs.
            let next_fence: u64 = next_rx.recv_timeout(Duration::from_secs(20)).unwrap();
            assert!(next_fence > lease.fence());
        })
    });
    let old_fence = granted_rx.recv().unwrap();
    let new_fence = invoices
        .key("m")
        .wait(Duration::from_secs(20))
        .hold(|lease| lease.fence())
        .unwrap();
    next_tx.send(new_fence).unwrap();
    assert!(new_fence > old_fence);
    assert_eq!(hung.join().unwrap().unwrap_err().kind(), ErrorKind::Lost);
}

#[test]
fn a_revoked_hold_answers_lost_with_its_text() {
    let store = Store::new();
    let invoices = revoking_lock(&store, "invoices", 150);
    let err = invoices
        .hold("m", |lease| {
            lease.signal().wait_timeout(Duration::from_secs(20));
        })
        .unwrap_err();
    assert_error(
        &err,
        ErrorKind::Lost,
        "lock invoices: key \"m\": the lease was lost: it was revoked at its maxHold",
    );
    assert_eq!(held_and_revoked(&invoices), (0, 1));
}

#[test]
fn a_revoked_lease_reports_why_and_fails_its_check() {
    let store = Store::new();
    let lock = revoking_lock(&store, "l", 100);
    let started = Instant::now();
    let r = lock.hold("k", |lease| {
        let s = lease.signal();
        assert!(s.wait_timeout(Duration::from_secs(20)), "aborted");
        // Revoked at maxHold, not before.
        let at = started.elapsed();
        assert!(at >= Duration::from_millis(100), "revoked early: {at:?}");
        assert!(lease.is_lost());
        assert_eq!(s.reason(), Some(EndReason::Revoked));
        assert_eq!(lease.check().unwrap_err().kind(), ErrorKind::Lost);
    });
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Lost);
}

#[test]
fn a_hold_within_max_hold_is_untouched() {
    let store = Store::new();
    let lock = revoking_lock(&store, "l", 60_000);
    assert!(!lock.hold("k", |l| l.is_lost()).unwrap());
    assert_eq!(held_and_revoked(&lock), (0, 0));
}

#[test]
fn holds_of_a_handle_without_max_hold_are_never_revoked() {
    let store = Store::new();
    let _revoking = revoking_lock(&store, "l", 100);
    let plain = store.lock("l").open().unwrap();
    let lost = plain
        .hold("k", |lease| {
            thread::sleep(Duration::from_millis(250));
            lease.is_lost()
        })
        .unwrap();
    assert!(!lost);
}

#[test]
fn revocation_is_not_early() {
    let store = Store::new();
    let lock = revoking_lock(&store, "l", 200);
    let started = Instant::now();
    // `hold_outcome` keeps the closure's value with the loss: the instant
    // the closure saw its lease end.
    let outcome = lock
        .hold_outcome("k", |lease| {
            assert!(lease.signal().wait_timeout(Duration::from_secs(20)));
            started.elapsed()
        })
        .unwrap();
    assert_eq!(outcome.lost.unwrap().kind(), ErrorKind::Lost);
    let took = outcome.value;
    assert!(
        took >= Duration::from_millis(200),
        "revoked early: {took:?}"
    );
}

#[test]
fn a_renewed_handle_lease_outlives_its_ttl() {
    // Renewed every 50 ms against a 1 s ttl, for longer than the ttl: only
    // a stall of the test of nearly a second between renewals could lose
    // it, and without renewal it would run out before the loop ends.
    let ttl = Duration::from_secs(1);
    let store = Store::new();
    let lock = store.lock("invoices").ttl(ttl).open().unwrap();
    let kept = lock.acquire("m").unwrap();
    let started = Instant::now();
    while started.elapsed() < ttl + ttl / 2 {
        thread::sleep(Duration::from_millis(50));
        kept.renew().unwrap();
    }
    assert!(!kept.is_lost());
    assert_eq!(lock.try_hold("m", |_| ()).unwrap(), None);
}

#[test]
fn an_unrenewed_handle_lease_runs_out_and_the_next_in_line_gets_the_key() {
    let store = Store::new();
    let lock = ttl_lock(&store, "invoices", 150, None);
    let kept = lock.acquire("m").unwrap();
    let signal = kept.signal();
    let started = Instant::now();
    let fence = lock
        .key("m")
        .wait(Duration::from_secs(20))
        .hold(|l| l.fence())
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert!(fence > kept.fence());
    assert!(kept.is_lost());
    assert!(signal.is_aborted());
    assert_eq!(signal.reason(), Some(EndReason::Expired));
}

#[test]
fn a_lease_that_ran_out_fails_renew_and_release_with_its_ttl_in_the_text() {
    let store = Store::new();
    let lock = ttl_lock(&store, "invoices", 150, None);
    let kept = lock.acquire("m").unwrap();
    assert!(kept.signal().wait_timeout(Duration::from_secs(20)));
    let e = kept.renew().unwrap_err();
    assert_eq!(
        e.to_string(),
        "lock invoices: key \"m\": the lease was lost: it ran out (ttl 150ms)"
    );
    assert_eq!(kept.release().unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(lock.stats().expirations, 1);
}

#[test]
fn in_process_holds_never_run_out_at_ttl() {
    let store = Store::new();
    let lock = ttl_lock(&store, "l", 30, None);
    let r = lock.hold("k", |lease| {
        thread::sleep(Duration::from_millis(200));
        lease.is_lost()
    });
    assert!(!r.unwrap());
}

#[test]
fn max_hold_bounds_a_renewed_handle_lease() {
    let store = Store::new();
    let lock = ttl_lock(&store, "l", 10_000, Some(150));
    let lease = lock.acquire("k").unwrap();
    let started = Instant::now();
    while !lease.is_lost() && started.elapsed() < Duration::from_secs(20) {
        let _ = lease.renew();
        thread::sleep(Duration::from_millis(10));
    }
    assert!(lease.is_lost());
    assert!(started.elapsed() >= Duration::from_millis(140));
    assert_eq!(lease.signal().reason(), Some(EndReason::Revoked));
    assert_fails_with(
        lease.check(),
        "lock l: key \"k\": the lease was lost: it was revoked at its maxHold",
    );
}

#[test]
fn close_fails_every_waiter_at_once() {
    let (store, lock) = store_with("invoices");
    let holder = thread::spawn({
        let lock = lock.clone();
        move || lock.acquire("7").unwrap()
    })
    .join()
    .unwrap();
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let l = lock.clone();
            thread::spawn(move || {
                let started = Instant::now();
                (
                    l.key("7").wait(Duration::from_secs(60)).hold(|_| ()),
                    started.elapsed(),
                )
            })
        })
        .collect();
    let t = Instant::now();
    while lock.stats().waiters < 4 && t.elapsed() < Duration::from_secs(20) {
        thread::sleep(Duration::from_millis(5));
    }
    store.close();
    for w in waiters {
        let (r, took) = w.join().unwrap();
        let e = r.unwrap_err();
        assert_error(
            &e,
            ErrorKind::Closed,
            "lock invoices: key \"7\": the store is closed: closed",
        );
        assert!(
            took < Duration::from_secs(30),
            "failed at close, not at the deadline"
        );
    }
    drop(holder);
}

#[test]
fn close_loses_a_handle_lease() {
    let (store, lock) = store_with("invoices");
    let handle = lock.acquire("8").unwrap();
    store.close();
    assert!(handle.is_lost());
    assert_fails_with(
        handle.renew(),
        "lock invoices: key \"8\": the lease was lost: its store closed",
    );
}

#[test]
fn close_loses_a_running_hold() {
    let (store, lock) = store_with("invoices");
    let (held_tx, held_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let l = lock.clone();
    let holder = thread::spawn(move || {
        l.hold("7", |lease| {
            let s = lease.signal();
            held_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            assert!(lease.is_lost());
            assert!(s.is_aborted());
            assert_eq!(s.reason(), Some(EndReason::StoreClosed));
            assert_fails_with(
                lease.check(),
                "lock invoices: key \"7\": the lease was lost: its store closed",
            );
        })
    });
    held_rx.recv().unwrap();
    store.close();
    go_tx.send(()).unwrap();
    let e = holder.join().unwrap().unwrap_err();
    assert_eq!(
        e.to_string(),
        "lock invoices: key \"7\": the lease was lost: its store closed"
    );
}

/// What a close reports: until the latest end of the leases it ended,
/// from the last renewal (a heartbeat's beat included) or maxHold.
#[test]
fn close_reports_until_when_the_leases_it_ended_could_still_be_believed() {
    let store = Store::new();
    let heartbeat = store.heartbeat();
    let beaten = store
        .lock("beaten")
        .ttl(Duration::from_secs(4))
        .heartbeat(&heartbeat)
        .open()
        .unwrap();
    let short = ttl_lock(&store, "short", 60_000, Some(2_000));
    let released = ttl_lock(&store, "released", 30_000, None);
    let _held = beaten.acquire("a").unwrap();
    let _revocable = short.acquire("b").unwrap();
    released.acquire("c").unwrap().release().unwrap();
    thread::sleep(Duration::from_millis(500));
    heartbeat.beat();
    let beat = Instant::now();
    let tail = store.close_reporting_last_expiry();
    // The 4 s ttl from the beat, not the 2 s maxHold from the grant, nor
    // the released 30 s lease.
    assert!(tail <= Duration::from_millis(4_002), "{tail:?}");
    assert!(
        tail + beat.elapsed() >= Duration::from_millis(3_990),
        "{tail:?}"
    );
    assert_eq!(store.close_reporting_last_expiry(), Duration::ZERO);

    let quiet = Store::new();
    let lock = ttl_lock(&quiet, "q", 10_000, None);
    lock.acquire("x").unwrap().release().unwrap();
    assert_eq!(quiet.close_reporting_last_expiry(), Duration::ZERO);
}

#[test]
fn close_is_idempotent() {
    let (store, lock) = store_with("invoices");
    let handle = lock.acquire("8").unwrap();
    store.close();
    store.close();
    assert!(store.is_closed());
    assert!(handle.is_lost());
}

#[test]
fn every_call_after_close_fails_closed() {
    let (store, lock) = store_with("invoices");
    store.close();
    // Closed, not None.
    assert_eq!(
        lock.hold("1", |_| ()).unwrap_err().kind(),
        ErrorKind::Closed
    );
    let e = lock.try_hold("1", |_| ()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "lock invoices: key \"1\": the store is closed: closed"
    );
    assert_fails_with(
        store.lock("x").open(),
        "lock x: the store is closed: closed",
    );
    assert_fails_with(store.tx(|_| Ok(())), "store: the store is closed: closed");
    assert_eq!(lock.acquire("2").unwrap_err().kind(), ErrorKind::Closed);
}

#[test]
fn fences_rise_across_grants() {
    let (_store, lock) = store_with("l");
    let mut last = 0;
    for round in 0..50 {
        let f = lock.hold("k", |l| l.fence()).unwrap();
        assert!(f > last, "round {round}: {f} <= {last}");
        last = f;
    }
}

#[test]
fn fences_rise_across_a_revocation() {
    let store = Store::new();
    let lock = revoking_lock(&store, "l", 20);
    let before = lock.hold("k", |l| l.fence()).unwrap();
    let (tx, rx) = mpsc::channel();
    let revoked = lock.hold("k", |l| {
        l.signal().wait_timeout(Duration::from_secs(20));
        tx.send(l.fence()).unwrap();
    });
    assert!(revoked.is_err());
    let revoked_fence = rx.recv().unwrap();
    let after = lock.hold("k", |l| l.fence()).unwrap();
    assert!(before < revoked_fence && revoked_fence < after);
}

#[test]
fn fences_rise_across_a_reclaimed_key() {
    let (store, lock) = store_with("l");
    let last = lock.hold("k", |l| l.fence()).unwrap();
    // The key's state is reclaimed, then made again: still rising.
    assert!(store.reclaim_idle() >= 1);
    assert_eq!(lock.stats().live_keys, 0);
    let f = lock.hold("k", |l| l.fence()).unwrap();
    assert!(f > last, "{f} <= {last} after reclaim");
}

#[test]
fn fences_rise_across_stores_of_one_process() {
    let (store, lock) = store_with("l");
    let mut last = 0;
    // A burst of grants, then a store opened again in this process.
    for _ in 0..10_000 {
        last = lock.hold("k", |l| l.fence()).unwrap().max(last);
    }
    drop(lock);
    store.close();
    let again = Store::new();
    let lock = again.lock("l").open().unwrap();
    let f = lock.hold("k", |l| l.fence()).unwrap();
    assert!(f > last, "{f} <= {last} in a new store");
}

#[test]
fn a_stores_first_fences_are_seeded_from_the_clock() {
    // So a new process starts above the last one too.
    let (_store, lock) = store_with("l");
    let f = lock.hold("k", |l| l.fence()).unwrap();
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    assert!(f > now_ns - 60_000_000_000);
}

#[test]
fn a_fenced_write_is_accepted_while_its_fence_holds_the_key() {
    let (store, lock) = store_with("invoices");
    let fence = lock
        .hold("9", |lease| {
            store
                .tx(|tx| tx.put_fenced(&lock, "9", lease.fence(), "row", "a"))
                .unwrap();
            lease.fence()
        })
        .unwrap();
    let row = store
        .tx(|tx| Ok((tx.get("row").map(<[u8]>::to_vec), tx.fence_of("row"))))
        .unwrap();
    assert_eq!(row, (Some(b"a".to_vec()), Some(fence)));
}

#[test]
fn a_fenced_write_is_refused_once_the_key_is_let_go() {
    let (store, lock) = store_with("invoices");
    let fence = lock.hold("9", |lease| lease.fence()).unwrap();
    let e = store
        .tx(|tx| tx.put_fenced(&lock, "9", fence, "row", "b"))
        .unwrap_err();
    assert_error_starts(
        &e,
        ErrorKind::Lost,
        "lock invoices: key \"9\": the lease was lost: ",
    );
}

#[test]
fn a_revoked_holder_stalled_past_max_hold_cannot_write() {
    let store = Store::new();
    let lock = revoking_lock(&store, "invoices", 100);
    let (tx_done, rx_done) = mpsc::channel();
    let l = lock.clone();
    let s = store.clone();
    let stalled = thread::spawn(move || {
        l.hold("9", |lease| {
            lease.signal().wait_timeout(Duration::from_secs(20));
            let _ = rx_done.recv();
            s.tx(|tx| tx.put_fenced(&l, "9", lease.fence(), "row", "stale"))
        })
    });
    let newer = lock.key("9").wait(Duration::from_secs(20)).hold(|lease| {
        store
            .tx(|tx| tx.put_fenced(&lock, "9", lease.fence(), "row", "new"))
            .unwrap();
        tx_done.send(()).unwrap();
        // Still held by us while the stale write is attempted.
        thread::sleep(Duration::from_millis(50));
        lease.fence()
    });
    assert!(newer.is_ok());
    let outcome = stalled.join().unwrap();
    assert_eq!(
        outcome.unwrap_err().kind(),
        ErrorKind::Lost,
        "hold itself was lost"
    );
    let row = store
        .tx(|tx| Ok((tx.get("row").map(<[u8]>::to_vec), tx.fence_of("row"))))
        .unwrap();
    assert_eq!(row, (Some(b"new".to_vec()), Some(newer.unwrap())));
}

/// Fences of different keys are not comparable (every key's first fence
/// is the same floor): a row's first fenced write binds it to its lock
/// and key, and a fenced write under any other guard is refused, whether
/// its fence is lower or higher, until the row is deleted.
#[test]
fn a_row_is_bound_to_the_lock_and_key_of_its_first_fenced_write() {
    let (store, fresh) = store_with("fresh");
    let other = store.lock("other").open().unwrap();
    let mut p_fence = 0;
    for _ in 0..5 {
        p_fence = fresh.hold("p", |l| l.fence()).unwrap();
    }
    // A fenced write of `key` (its own name as the value) under a hold of
    // it: the row binds to fresh's `key` if nothing guards it.
    let bind = |key: &str| {
        fresh
            .hold(key, |l| {
                store
                    .tx(|tx| tx.put_fenced(&fresh, key, l.fence(), "shared", key))
                    .unwrap()
            })
            .unwrap()
    };
    bind("p");
    let refused = |lock: &holdline::Lock, key: &str, raise: usize| {
        // An attacker raises its key's fence above the guard's first.
        for _ in 0..raise {
            lock.hold(key, |_| ()).unwrap();
        }
        lock.hold(key, |lease| {
            store
                .tx(|tx| tx.put_fenced(lock, key, lease.fence(), "shared", "evil"))
                .unwrap_err()
        })
        .unwrap()
    };
    let behind = refused(&fresh, "q", 0);
    assert_eq!(behind.kind(), ErrorKind::Invalid);
    assert_eq!(
        behind.to_string(),
        r#"lock fresh: key "q": row "shared" is guarded by lock fresh key "p": invalid"#
    );
    let ahead = refused(&other, "p", 20);
    assert!(other.hold("p", |l| l.fence()).unwrap() > p_fence);
    assert_eq!(
        ahead.to_string(),
        r#"lock other: key "p": row "shared" is guarded by lock fresh key "p": invalid"#
    );
    let row = store
        .tx(|tx| Ok(tx.get("shared").map(<[u8]>::to_vec)))
        .unwrap();
    assert_eq!(row.as_deref(), Some(&b"p"[..]), "nothing was poisoned");
    // A plain write keeps the guard; a delete lets the next fenced write bind.
    store
        .tx(|tx| {
            tx.put("shared", "plain");
            Ok(())
        })
        .unwrap();
    assert_eq!(refused(&fresh, "q", 0).kind(), ErrorKind::Invalid);
    store
        .tx(|tx| {
            tx.delete("shared");
            Ok(())
        })
        .unwrap();
    bind("q");
    let guard = store
        .tx(|tx| {
            Ok(tx
                .guard_of("shared")
                .map(|(l, k)| (l.to_owned(), k.to_owned())))
        })
        .unwrap();
    assert_eq!(guard, Some(("fresh".to_owned(), "q".to_owned())));
}

/// One beat of a heartbeat renews every lease taken through locks opened
/// with it; once the beats stop, each runs out its ttl after the last.
#[test]
fn a_heartbeat_renews_all_its_leases_at_once_and_they_run_out_when_it_stops() {
    let store = Store::new();
    let heartbeat = store.heartbeat();
    let ttl = Duration::from_millis(300);
    let lock = store
        .lock("hb")
        .ttl(ttl)
        .heartbeat(&heartbeat)
        .open()
        .unwrap();
    let plain = store.lock("plain").ttl(ttl).open().unwrap();
    let leases: Vec<_> = (0..100).map(|i| lock.acquire(i).unwrap()).collect();
    let alone = plain.acquire("x").unwrap();
    let started = Instant::now();
    // Read just before each beat: the beat's own clock reading is no
    // earlier, so no lease may end before this plus the ttl.
    let mut last_beat = started;
    while started.elapsed() < ttl * 3 {
        last_beat = Instant::now();
        heartbeat.beat();
        thread::sleep(Duration::from_millis(30));
    }
    for l in &leases {
        l.check()
            .expect("beaten: every lease lives past three ttls");
    }
    let e = alone.check().unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Lost,
        "a lease without the heartbeat ran out"
    );
    for l in &leases {
        assert!(
            l.signal().wait_timeout(Duration::from_secs(20)),
            "it runs out"
        );
        assert_eq!(l.signal().reason(), Some(EndReason::Expired));
    }
    // From the last beat, not from the end of the loop: a test thread
    // descheduled after its last beat (a loaded machine) would otherwise
    // see the leases end "early".
    assert!(
        last_beat.elapsed() >= ttl - Duration::from_millis(30),
        "{:?}",
        last_beat.elapsed()
    );
    // A beat after the end revives nothing: the key is granted again.
    heartbeat.beat();
    assert!(leases[0].check().is_err());
    assert!(lock.key(0).try_acquire().unwrap().is_some());
}

#[test]
fn a_heartbeat_of_another_store_is_refused() {
    let (a, b) = (Store::new(), Store::new());
    let err = a.lock("x").heartbeat(&b.heartbeat()).open().unwrap_err();
    assert_error(
        &err,
        ErrorKind::Invalid,
        "lock x: a heartbeat of another store: invalid",
    );
}

/// A store opened above a floor gives every fence above it, across keys
/// and after an idle key's state was reclaimed and made again.
#[test]
fn a_store_opened_above_a_floor_fences_above_it() {
    let floor = 5_000_000_000_000_000_000;
    let store = Store::with_fences_above(floor);
    let lock = store.lock("floor").open().unwrap();
    let first = lock.hold("a", |l| l.fence()).unwrap();
    assert_eq!(
        first,
        floor + 1,
        "the first fence is the one above the floor"
    );
    let second = lock.hold("a", |l| l.fence()).unwrap();
    assert!(second > first);
    assert!(lock.hold("b", |l| l.fence()).unwrap() > floor);
    store.reclaim_idle();
    assert!(lock.hold("a", |l| l.fence()).unwrap() > second);
    // A plain store's fences come from the clock, far below this floor.
    let plain = Store::new().lock("floor").open().unwrap();
    assert!(plain.hold("a", |l| l.fence()).unwrap() < floor);
}

/// Polls `lease.is_lost()` (which reads the maxHold watch's slot, and
/// asks for no signal) until it turns, `limit` at most; answers when.
fn until_lost(lease: &holdline::Lease<'_>, started: Instant, limit: Duration) -> Duration {
    while !lease.is_lost() {
        assert!(started.elapsed() < limit, "never lost");
        thread::sleep(Duration::from_millis(2));
    }
    started.elapsed()
}

/// A closure hold with a maxHold whose signal nobody asks for is timed by
/// the store's watch: revoked at its maxHold, never before, the key handed
/// on, the revocation counted, and the hold answers `lost` with its text.
#[test]
fn a_hold_nobody_signals_is_revoked_at_its_max_hold() {
    let store = Store::new();
    let invoices = revoking_lock(&store, "invoices", 100);
    let started = Instant::now();
    let (lost_tx, lost_rx) = mpsc::channel();
    let l = invoices.clone();
    let hung = thread::spawn(move || {
        l.hold("m", |lease| {
            lost_tx
                .send(until_lost(lease, started, Duration::from_secs(20)))
                .unwrap();
            lease.check().unwrap_err()
        })
    });
    let at = lost_rx.recv().unwrap();
    assert!(at >= Duration::from_millis(100), "revoked early: {at:?}");
    // The key went on while the revoked closure still ran.
    let next = invoices
        .key("m")
        .wait(Duration::from_secs(20))
        .hold(|l| l.fence());
    assert!(next.is_ok());
    let ended = match hung.join().unwrap() {
        Err(e) => e,
        Ok(checked) => panic!("a revoked hold answered Ok (its check: {checked})"),
    };
    assert_error(
        &ended,
        ErrorKind::Lost,
        "lock invoices: key \"m\": the lease was lost: it was revoked at its maxHold",
    );
    assert_eq!(held_and_revoked(&invoices), (0, 1));
}

/// A signal asked for after the watch revoked the hold is aborted at once,
/// and tells why.
#[test]
fn a_signal_asked_after_the_watch_revoked_is_aborted() {
    let store = Store::new();
    let lock = revoking_lock(&store, "l", 50);
    let r = lock.hold("k", |lease| {
        until_lost(lease, Instant::now(), Duration::from_secs(20));
        let signal = lease.signal();
        assert!(signal.is_aborted());
        assert_eq!(signal.reason(), Some(EndReason::Revoked));
        assert!(signal.wait_timeout(Duration::ZERO));
    });
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(held_and_revoked(&lock), (0, 1));
}

/// A signal asked for midway moves the hold's timing to the wheel with its
/// deadline still counted from the grant: revoked at 1 s, not 1 s after
/// the signal (1.8 s).
#[test]
fn a_signal_asked_midway_keeps_the_deadline_from_the_grant() {
    let store = Store::new();
    let lock = revoking_lock(&store, "l", 1000);
    let (at_tx, at_rx) = mpsc::channel();
    let r = lock.hold("k", |lease| {
        let started = Instant::now();
        thread::sleep(Duration::from_millis(800));
        let signal = lease.signal();
        assert!(!signal.is_aborted());
        assert!(signal.wait_timeout(Duration::from_secs(20)), "aborted");
        at_tx.send(started.elapsed()).unwrap();
    });
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Lost);
    let at = at_rx.recv().unwrap();
    assert!(at >= Duration::from_millis(1000), "revoked early: {at:?}");
    assert!(
        at < Duration::from_millis(1700),
        "counted from the signal: {at:?}"
    );
}

/// More holds with a maxHold on one thread than its page has slots: the
/// ones past them are timed on the wheel, and every one is revoked.
#[test]
fn holds_past_a_threads_slots_are_revoked_too() {
    fn nest(lock: &Lock, depth: usize, lost: &mut Vec<bool>) {
        if depth == 0 {
            return;
        }
        let r = lock.hold(&format!("k{depth}"), |lease| {
            nest(lock, depth - 1, lost);
            until_lost(lease, Instant::now(), Duration::from_secs(20));
        });
        lost.push(r.unwrap_err().kind() == ErrorKind::Lost);
    }
    let store = Store::new();
    let lock = revoking_lock(&store, "deep", 50);
    let mut lost = Vec::new();
    nest(&lock, 12, &mut lost);
    assert_eq!(lost, vec![true; 12]);
    assert_eq!(held_and_revoked(&lock), (0, 12));
}

/// Handle leases made on many threads (more than the timer has shards)
/// each run out at their ttl, though the timer went to sleep for a lease
/// of a minute first, whichever shard each lands on. (Here the sweeps the
/// new keys ask for wake the timer too; the driver's unit test
/// `an_earlier_lease_on_any_shard_wakes_the_sleeping_thread` checks the
/// wake alone.)
#[test]
fn short_leases_armed_on_every_thread_wake_a_timer_asleep_for_a_long_one() {
    let store = Store::new();
    let long = ttl_lock(&store, "long", 60_000, None);
    let short = ttl_lock(&store, "short", 150, None);
    let kept = long.acquire("m").unwrap();
    // Let the timer plan its sleep for the minute.
    thread::sleep(Duration::from_millis(50));
    let threads: Vec<_> = (0..40)
        .map(|t| {
            let short = short.clone();
            thread::spawn(move || {
                let lease = short.acquire(format!("k{t}").as_str()).unwrap();
                let started = Instant::now();
                assert!(lease.signal().wait_timeout(Duration::from_secs(20)));
                assert!(started.elapsed() < Duration::from_secs(20));
                assert_eq!(lease.signal().reason(), Some(EndReason::Expired));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(short.stats().expirations, 40);
    assert!(!kept.is_lost());
    kept.release().unwrap();
}

/// A handle lease made on one thread and released on another lets its key
/// go once, is never run out after, and `inspect` finds its times from
/// any thread.
#[test]
fn a_lease_released_on_another_thread_leaves_its_timer_behind() {
    let store = Store::new();
    let lock = ttl_lock(&store, "invoices", 300, None);
    let l = lock.clone();
    let lease = thread::spawn(move || l.acquire("m").unwrap())
        .join()
        .unwrap();
    let info = lock.inspect("m").unwrap();
    assert!(info.held && info.held_for.is_some() && info.lease_left.is_some());
    lease.release().unwrap();
    assert_eq!(lock.try_hold("m", |_| ()).unwrap(), Some(()));
    thread::sleep(Duration::from_millis(500));
    let s = lock.stats();
    assert_eq!((s.held_keys, s.expirations), (0, 0));
}
