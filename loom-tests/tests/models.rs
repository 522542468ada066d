//! Loom models of holdline's synchronisation, run against the shipped core
//! (its `sync` facade switches to loom under `--cfg loom`, and
//! crossbeam-epoch models its reclamation under `--cfg crossbeam_loom`).
//!
//! Run: `RUSTFLAGS="--cfg loom --cfg crossbeam_loom" cargo test --release -p loom-tests`
//! (`LOOM_MAX_PREEMPTIONS` overrides each model's bound; see README.md).
//!
//! Under loom a wait of at least an hour parks for real (a missed wake is a
//! loom deadlock), a shorter one yields and re-reads a logical clock that
//! advances 2 ms per read, so a 1 ms deadline has passed at the next read; timers
//! fire only when a model thread calls `fire_all_timers`.
#![cfg(loom)]

use holdline::{ErrorKind, LockBuilder, Store};
use loom::sync::atomic::AtomicUsize;
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;

mod common;
use common::{check, check_idle, check_idle_with, inside, spawn_waiting_holder, FOREVER};

/// maxHold (60 s) before the ttl (120 s): the timer revokes, never expires.
fn revoked_before_expiry(lock: LockBuilder<'_>) -> LockBuilder<'_> {
    lock.max_hold(Duration::from_secs(60))
        .ttl(Duration::from_secs(120))
}

/// A ttl of a minute: the lease is on the timer wheel.
fn a_minute_ttl(lock: LockBuilder<'_>) -> LockBuilder<'_> {
    lock.ttl(Duration::from_secs(60))
}

/// 1. Two threads hold one key: never both inside, both finish, the key
/// ends free and its state is reclaimed.
#[test]
fn two_holders_of_one_key() {
    check_idle(2, |_store, lock| {
        let count = Arc::new(AtomicUsize::new(0));
        let t = spawn_waiting_holder(lock, "k", &count);
        let mine = lock
            .key("k")
            .wait(FOREVER)
            .hold(|l| (inside(&count), l.fence()).1)
            .unwrap();
        let theirs = t.join().unwrap();
        assert_ne!(mine, theirs, "each grant has its own fence");
    });
}

/// 2. FIFO: a waiter standing in line is granted before anyone who comes
/// later, whatever the interleaving of the release with the waiter's spin,
/// park and wake. The holder lets go and at once asks for the key again, as
/// the newcomer: a barging fast path would let it in first. (The waiter is
/// seen in line before the release, which fixes the arrival order. A third
/// thread as the newcomer multiplies the run time by ~100 for the same
/// race, so the holder plays both parts.)
#[test]
fn the_line_goes_first() {
    check(3, || {
        let store = Store::new();
        let lock = store.lock("l").open().unwrap();
        let order = Arc::new(loom::sync::Mutex::new(Vec::new()));
        let held = lock.acquire("k").unwrap();
        let waiter = {
            let (l, order) = (lock.clone(), order.clone());
            thread::spawn(move || {
                l.key("k")
                    .wait(FOREVER)
                    .hold(|_| order.lock().unwrap().push("waiter"))
                    .unwrap();
            })
        };
        while lock.waiters_of("k") != 1 {
            thread::yield_now();
        }
        held.release().unwrap();
        lock.key("k")
            .wait(FOREVER)
            .hold(|_| order.lock().unwrap().push("newcomer"))
            .unwrap();
        waiter.join().unwrap();
        assert_eq!(*order.lock().unwrap(), vec!["waiter", "newcomer"]);
    });
}

/// 3. A waiter's deadline passes while the holder lets go: the waiter gets
/// the key exactly once or times out and leaves the line; the key is never
/// lost (it ends free) and the waiter's node is unlinked exactly once
/// (loom's cell tracking flags any access to it after its thread left).
#[test]
fn a_deadline_racing_a_release() {
    check_idle(3, |_store, lock| {
        let held = lock.acquire("k").unwrap();
        let t = {
            let l = lock.clone();
            thread::spawn(move || l.key("k").wait(Duration::from_millis(1)).hold(|_| ()))
        };
        held.release().unwrap();
        match t.join().unwrap() {
            Ok(()) => {}
            Err(e) => assert_eq!(e.kind(), ErrorKind::InUse),
        }
    });
}

/// 4. `try_hold` racing a release and a new holder: it never runs its
/// closure while another holder is inside. The main thread is the holder
/// that lets go and then the new holder that takes the key again.
#[test]
fn try_hold_racing_release_and_a_new_holder() {
    check_idle(2, |_store, lock| {
        let count = Arc::new(AtomicUsize::new(0));
        let held = lock.acquire("k").unwrap();
        let trier = {
            let (l, count) = (lock.clone(), count.clone());
            thread::spawn(move || l.try_hold("k", |_| inside(&count)).unwrap())
        };
        held.release().unwrap();
        let again = lock.try_hold("k", |_| inside(&count)).unwrap();
        let tried = trier.join().unwrap();
        assert!(
            again.is_some() || tried.is_some(),
            "a free key is taken by one of them"
        );
    });
}

/// 5. maxHold revocation racing the holder's own release: the key is let go
/// exactly once (the waiter is granted once and the key ends free), fences
/// rise, and the holder sees `lost` exactly when the revocation won.
#[test]
fn revocation_racing_release() {
    check_idle_with(2, revoked_before_expiry, |store, lock| {
        // maxHold comes before the ttl, so the timer revokes (not expires).
        let lease = lock.acquire("k").unwrap();
        let first = lease.fence();
        // The waiter holds through a handle without maxHold, so firing every
        // timer only ever revokes the first lease.
        let plain = store.lock("l").open().unwrap();
        let waiter =
            thread::spawn(move || plain.key("k").wait(FOREVER).hold(|l| l.fence()).unwrap());
        let timer = {
            let s = store.clone();
            thread::spawn(move || s.fire_all_timers())
        };
        let released = lease.release();
        timer.join().unwrap();
        let second = waiter.join().unwrap();
        assert!(second > first);
        let s = lock.stats();
        match released {
            Ok(()) => assert_eq!(s.revocations, 0),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Lost);
                assert_eq!(s.revocations, 1);
            }
        }
        assert_eq!(store.pending_timers(), 0, "nothing left on the wheel");
    });
}

/// 6. `close()` racing a waiter: the waiter ends `closed` (or `lost`, if it
/// took the key after the release), never parked forever (a missed wake is a loom
/// deadlock), and the holder's lease is lost to the close.
#[test]
fn close_racing_a_waiter() {
    check(2, || {
        let store = Store::new();
        let lock = store.lock("l").open().unwrap();
        let held = lock.acquire("k").unwrap();
        let waiter = {
            let l = lock.clone();
            thread::spawn(move || l.key("k").wait(FOREVER).hold(|_| ()))
        };
        store.close();
        assert!(held.is_lost());
        assert_eq!(held.release().unwrap_err().kind(), ErrorKind::Lost);
        // `closed` in line, or `lost` when it took the freed key in a store
        // that had closed; never Ok.
        let e = waiter.join().unwrap().unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Closed | ErrorKind::Lost),
            "{e}"
        );
        assert_eq!(
            lock.hold("k", |_| ()).unwrap_err().kind(),
            ErrorKind::Closed
        );
    });
}

/// 7. An idle key's record retired while a newcomer looks it up: the
/// newcomer finds the old record before it is retired or makes a fresh one;
/// never a use after free (the epoch is modelled), never two records for
/// one key (which would let two holders in: the sweeping thread tries the
/// key too), and fences keep rising across the two records.
#[test]
fn reclaim_racing_a_lookup() {
    check_idle(2, |store, lock| {
        let count = Arc::new(AtomicUsize::new(0));
        let first = lock.hold("k", |l| l.fence()).unwrap();
        let sweeper = {
            let (s, l, count) = (store.clone(), lock.clone(), count.clone());
            thread::spawn(move || {
                s.reclaim_idle();
                l.try_hold("k", |l| (inside(&count), l.fence()).1).unwrap()
            })
        };
        let second = lock.hold("k", |l| (inside(&count), l.fence()).1).unwrap();
        let third = sweeper.join().unwrap();
        assert!(second > first);
        if let Some(third) = third {
            assert!(third > first && third != second);
        }
        assert!(lock.stats().live_keys <= 1, "never two records for one key");
    });
}

/// 8. The timer wheel: a lease let go while its deadline fires (the
/// holder's cancel racing the wheel's advance). Either way the key is let go
/// once and nothing stays on the wheel.
#[test]
fn release_racing_the_timer() {
    check_idle_with(3, a_minute_ttl, |store, lock| {
        let lease = lock.acquire("k").unwrap();
        let timer = {
            let s = store.clone();
            thread::spawn(move || s.fire_all_timers())
        };
        let released = lease.release();
        timer.join().unwrap();
        if let Err(e) = released {
            assert_eq!(e.kind(), ErrorKind::Lost);
            assert_eq!(lock.stats().expirations, 1);
        }
        assert_eq!(
            store.pending_timers(),
            0,
            "a released lease leaves nothing on the wheel"
        );
    });
}

/// 12. Two beats of one heartbeat from two threads (a connection's reader
/// and its RENEW racing, say): the heartbeat keeps the later clock
/// reading, so no lease of it counts its ttl from an earlier moment than
/// its holder was heard. (Mutant `beat_stores`: a plain store lets the
/// earlier reading land last.)
#[test]
fn two_beats_keep_the_later_reading() {
    check(3, || {
        let store = Store::new();
        let heartbeat = store.heartbeat();
        let beats: Vec<_> = (0..2)
            .map(|_| {
                let h = heartbeat.clone();
                thread::spawn(move || h.beat())
            })
            .collect();
        for b in beats {
            b.join().unwrap();
        }
        // Each reading moves the logical clock 2 ms: the later beat read
        // 2 ms before this one.
        let now = store.clock_ms();
        assert_eq!(heartbeat.heard_ms(), now - 2, "a beat moved the time back");
    });
}

/// A lock whose closure holds the maxHold watch times (a minute: only
/// `fire_all_timers` revokes).
fn watched(lock: LockBuilder<'_>) -> LockBuilder<'_> {
    lock.max_hold(Duration::from_secs(60))
}

/// 22. A closure hold timed by the maxHold watch, revoked by the timer
/// while it ends and a waiter stands in line: the key is let go once (by
/// the holder or by the timer), the waiter is granted once with a greater
/// fence, and the hold answers `lost` exactly when the revocation won.
#[test]
fn a_watched_hold_racing_its_revocation() {
    check_idle_with(2, watched, |store, lock| {
        // The waiter and the timer start while the hold runs, so the hold
        // is first in line; its end then races both.
        let mut others = None;
        let held = lock.hold("k", |l| {
            let plain = store.lock("l").open().unwrap();
            let waiter =
                thread::spawn(move || plain.key("k").wait(FOREVER).hold(|l| l.fence()).unwrap());
            let s = store.clone();
            let timer = thread::spawn(move || s.fire_all_timers());
            others = Some((waiter, timer));
            l.fence()
        });
        let (waiter, timer) = others.unwrap();
        timer.join().unwrap();
        let second = waiter.join().unwrap();
        let revocations = lock.stats().revocations;
        match held {
            Ok(first) => {
                assert!(second > first);
                assert_eq!(revocations, 0);
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Lost);
                assert_eq!(revocations, 1);
            }
        }
    });
}

/// 23. The timer stops ticking (it parks the watch's free slots) while a
/// hold claims a slot: either the walk finds the hold and ticking goes on,
/// or the claim finds its slot parked and starts ticking again. Never a
/// hold running with nobody ticking (its maxHold would never fire).
#[test]
fn a_claim_racing_the_timer_stopping() {
    check(2, || {
        let store = Store::new();
        let lock = watched(store.lock("l")).open().unwrap();
        // A first hold makes the thread's page and starts ticking.
        lock.hold("k", |_| ()).unwrap();
        assert!(store.is_ticking());
        let stop = {
            let s = store.clone();
            thread::spawn(move || s.try_stop_ticking())
        };
        let mut stop = Some(stop);
        lock.hold("k", |_| {
            stop.take().unwrap().join().unwrap();
            assert!(store.is_ticking(), "a hold runs and nobody ticks");
        })
        .unwrap();
    });
}

/// 24. The line's lock bit, contended: a thread enqueues behind a holder
/// (it owns `QLOCK` while it links its node) while the holder lets go, and
/// the release finds `QLOCK` taken. Under loom a waiter for `QLOCK` looks
/// once and then parks (it marks the word `QSLEEP` and sleeps in the
/// parking table): the owner's unlock must wake it, or the release never
/// grants the waiter and both sleep for ever (a loom deadlock). The holder
/// is a handle lease, so its release runs on this thread while the other
/// may be anywhere in its enqueue.
#[test]
fn a_release_sleeping_on_the_line_lock_is_woken() {
    check_idle(3, |_store, lock| {
        let count = Arc::new(AtomicUsize::new(0));
        let held = lock.acquire("k").unwrap();
        let t = spawn_waiting_holder(lock, "k", &count);
        let mine = held.fence();
        held.release().unwrap();
        assert!(t.join().unwrap() > mine, "the waiter's grant comes later");
    });
}

/// 30. A handle lease with a ttl is armed on its thread's shard of the
/// timer and released by its holder while the timer fires on another
/// thread (whose own shard is the other one): the firing finds nothing
/// (not yet armed), ends it (the holder's release answers `lost`), or
/// finds it gone (released). The key is let go once, a released lease is
/// never ended by the timer after, a revocation is counted once, and
/// nothing of the lease is left on any shard: neither its wheel entry nor
/// its registry entry. (Mutant `cancel_on_own_shard`: the end looks for
/// the lease on the ending thread's shard, so the timer's end leaves it
/// listed on its home shard.)
#[test]
fn a_lease_armed_on_its_shard_racing_release_and_the_timer() {
    check_idle_with(3, a_minute_ttl, |store, lock| {
        let holder = {
            let l = lock.clone();
            thread::spawn(move || {
                let lease = l.acquire("k").unwrap();
                (lease.fence(), lease.release())
            })
        };
        store.fire_all_timers();
        let (fence, released) = holder.join().unwrap();
        let expired = lock.stats().expirations;
        match released {
            Ok(()) => assert_eq!(expired, 0, "a released lease was ended by the timer"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Lost);
                assert_eq!(expired, 1, "a revocation was lost or counted twice");
            }
        }
        assert_eq!(store.pending_timers(), 0, "a lease left on a wheel");
        assert_eq!(store.timed_leases(), 0, "a lease left in a registry");
        // A later firing finds nothing to end.
        store.fire_all_timers();
        assert_eq!(lock.stats().expirations, expired);
        let next = lock.hold("k", |l| l.fence()).unwrap();
        assert!(next > fence, "fences rise past the lease's grant");
    });
}

/// 31. The timer thread plans its sleep (it publishes when it will wake,
/// then looks at each shard's next deadline) while a thread arms a lease
/// on its shard: either the plan saw the lease, or the arm woke the
/// thread; never a thread asleep past a lease nobody told it of. (The key
/// exists before, so its sweep, which would wake the thread too, was
/// asked for before the race. Mutant `plan_publishes_late`: the plan is
/// published only after every shard was looked at, so the arm reads the
/// thread as awake and wakes nobody.)
#[test]
fn a_timer_planning_its_sleep_racing_an_arm() {
    check_idle_with(3, a_minute_ttl, |store, lock| {
        lock.hold("k", |_| ()).unwrap();
        let holder = {
            let l = lock.clone();
            thread::spawn(move || l.acquire("k").unwrap())
        };
        let planned = store.plan_timer_sleep();
        let lease = holder.join().unwrap();
        assert!(
            planned.is_some() || store.timer_wakes() > 0,
            "the timer sleeps past a lease armed while it planned, and nobody woke it"
        );
        lease.release().unwrap();
    });
}
