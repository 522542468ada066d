//! Loom models of bounded bypass (`Fairness::BoundedBypass`): a release
//! that leaves the key free for the first in line (an offer), the running
//! caller that takes it first, and the bound past which the key is handed
//! over. Same conventions as `models.rs` (run with the same command).
//!
//! Under loom the bypass clock is logical and advances 1 ms a read
//! (`core/src/sync.rs`), so a bound of 1 µs is "within it at the first
//! look, past it at the next", and one of an hour never passes.
#![cfg(loom)]

use holdline::{Fairness, LockBuilder};
use loom::sync::atomic::AtomicUsize;
use loom::sync::Arc;
use loom::thread;
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

mod common;
use common::{check_idle_with, inside, spawn_waiting_holder, FOREVER};

fn bounded_for_an_hour(lock: LockBuilder<'_>) -> LockBuilder<'_> {
    lock.fairness(Fairness::BoundedBypass(Duration::from_secs(3600)))
}

fn bounded_for_a_microsecond(lock: LockBuilder<'_>) -> LockBuilder<'_> {
    lock.fairness(Fairness::BoundedBypass(Duration::from_micros(1)))
}

fn fifo(lock: LockBuilder<'_>) -> LockBuilder<'_> {
    lock.fairness(Fairness::Fifo)
}

/// 26. The holder lets go with a thread first in line, within its bound:
/// the key is left free and offered to it, and the main thread, running,
/// tries to take it at once. One of the two gets it; never both (the
/// offered waiter takes it only under the line lock, seeing it free), and
/// the waiter is always granted in the end (the offer wakes it, and the
/// bypass's release offers it again).
#[test]
fn a_bypassing_take_racing_the_offer() {
    check_idle_with(2, bounded_for_an_hour, |_store, lock| {
        let count = Arc::new(AtomicUsize::new(0));
        let held = lock.acquire("k").unwrap();
        let waiter = spawn_waiting_holder(lock, "k", &count);
        while lock.waiters_of("k") != 1 {
            thread::yield_now();
        }
        held.release().unwrap();
        let bypass = lock.try_hold("k", |l| (inside(&count), l.fence()).1);
        let granted = waiter.join().unwrap();
        if let Some(fence) = bypass.unwrap() {
            // Before the waiter's grant (a bypass) or after its hold.
            assert_ne!(granted, fence, "one grant, one fence");
        }
    });
}

/// 27. A task is first in line (the main thread polls it) and a thread
/// tries to take the key once. The holder's release offers the key to the
/// task within its bound. When the task finds it taken (the thread
/// bypassed it), the thread's release comes after the bound has passed
/// and hands the key over: the main thread's own try, racing that
/// release, never gets in, since either the thread or the task holds it.
#[test]
fn a_head_past_its_bound_is_handed_the_key() {
    // Bound 3: the thread takes the key between the release and the task's
    // look, is preempted while it holds it, and lets go after that look.
    check_idle_with(3, bounded_for_a_microsecond, |_store, lock| {
        let count = Arc::new(AtomicUsize::new(0));
        let held = lock.acquire("k").unwrap();
        let mut task = std::pin::pin!(lock.key("k").wait(FOREVER).acquire_async());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(task.as_mut().poll(&mut cx).is_pending(), "in line");
        let bypass = {
            let (lock, count) = (lock.clone(), count.clone());
            thread::spawn(move || lock.try_hold("k", |_| inside(&count)).unwrap())
        };
        held.release().unwrap();
        if let Poll::Ready(lease) = task.as_mut().poll(&mut cx) {
            // The task took its offer first.
            inside(&count);
            lease.unwrap().release().unwrap();
            bypass.join().unwrap();
            return;
        }
        // Bypassed: the thread holds the key, then hands it to the task.
        let late = lock.try_hold("k", |_| ()).unwrap();
        assert!(late.is_none(), "a head past its bound was bypassed");
        assert!(bypass.join().unwrap().is_some(), "the thread bypassed");
        let lease = loom::future::block_on(task).unwrap();
        inside(&count);
        lease.release().unwrap();
    });
}

/// 28. A task stands first in line (the main thread polls it) while a
/// thread arrives and the holder lets go, FIFO and bounded: in FIFO the
/// release hands the task the key and the thread waits behind it; bounded,
/// the release offers it, and the thread may take it first, whose release
/// offers it again. Either way both hold it, one at a time, and the task
/// is woken to take it (a lost offer is a loom deadlock in `block_on`).
#[test]
fn a_release_racing_an_arriving_thread_in_each_mode() {
    for open in [fifo, bounded_for_an_hour] {
        check_idle_with(2, open, |_store, lock| {
            let count = Arc::new(AtomicUsize::new(0));
            let held = lock.acquire("k").unwrap();
            let mut task = std::pin::pin!(lock.key("k").wait(FOREVER).acquire_async());
            let mut cx = Context::from_waker(Waker::noop());
            assert!(task.as_mut().poll(&mut cx).is_pending(), "in line");
            let arriving = spawn_waiting_holder(lock, "k", &count);
            held.release().unwrap();
            let lease = loom::future::block_on(task).unwrap();
            inside(&count);
            lease.release().unwrap();
            arriving.join().unwrap();
        });
    }
}

/// 29. A read-write key (2 permits) with a writer waiting behind two
/// readers: one reader lets go within the writer's bound, and a new reader
/// joins the one left (the line is open); it lets go past the bound, and
/// from then on no reader joins ahead of the writer, which is granted once
/// the last reader lets go.
#[test]
fn a_reader_joins_ahead_of_a_writer_only_within_its_bound() {
    fn open(lock: LockBuilder<'_>) -> LockBuilder<'_> {
        bounded_for_a_microsecond(lock.permits(2))
    }
    check_idle_with(2, open, |_store, lock| {
        let a = lock.key("k").try_acquire().unwrap().unwrap();
        let b = lock.key("k").try_acquire().unwrap().unwrap();
        let writer = {
            let lock = lock.clone();
            thread::spawn(move || {
                let w = lock.key("k").exclusive().wait(FOREVER).acquire().unwrap();
                let fence = w.fence();
                w.release().unwrap();
                fence
            })
        };
        while lock.waiters_of("k") != 1 {
            thread::yield_now();
        }
        b.release().unwrap();
        let joined = lock.key("k").try_acquire().unwrap();
        let joined = joined.expect("within the writer's bound, a reader joins");
        joined.release().unwrap();
        let late = lock.key("k").try_acquire().unwrap();
        assert!(late.is_none(), "a reader joined past the writer's bound");
        a.release().unwrap();
        writer.join().unwrap();
    });
}

/// 32. A read-write key (2 permits), bounded: a writer sleeps in line
/// behind one reader, which lets go while a new reader arrives. The
/// release offers the sleeping writer its permits (instead of granting
/// them to a thread that must first wake), and the new reader may take
/// one first: the writer and a reader are never in together, and the
/// writer is granted in the end (woken by the offer, or offered again by
/// the reader's release).
#[test]
fn an_offer_to_a_sleeping_writer_racing_a_reader() {
    fn open(lock: LockBuilder<'_>) -> LockBuilder<'_> {
        bounded_for_an_hour(lock.permits(2))
    }
    check_idle_with(2, open, |_store, lock| {
        let count = Arc::new(AtomicUsize::new(0));
        let reader = lock.key("k").try_acquire().unwrap().unwrap();
        let writer = {
            let (lock, count) = (lock.clone(), count.clone());
            thread::spawn(move || {
                let w = lock.key("k").exclusive().wait(FOREVER).acquire().unwrap();
                inside(&count);
                w.release().unwrap();
            })
        };
        while lock.waiters_of("k") != 1 {
            thread::yield_now();
        }
        reader.release().unwrap();
        if let Some(late) = lock.key("k").try_acquire().unwrap() {
            inside(&count);
            late.release().unwrap();
        }
        writer.join().unwrap();
    });
}
