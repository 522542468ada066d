//! Loom models of permits (a lock of several permits per key): a release
//! serving every head waiter that fits (a thread and a task), a head
//! leaving the line, an exclusive waiter against shared holders leaving,
//! and a revocation giving permits back. Same conventions as `models.rs`
//! (run with the same command).
//!
//! Each model runs the main thread and one other, and nobody spins for an
//! event: a second waiter is a task whose future the main thread polls
//! itself, and a wait that should end is a join, so a missed grant is a
//! loom deadlock or a failed look, not an endless loop (a third thread, or
//! a spin, multiplies loom's work a hundredfold).
#![cfg(loom)]

use holdline::{ErrorKind, HeldLease, Lock, Store};
use loom::thread;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

mod common;
use common::{assert_idle_and_reclaimed, check, FOREVER};

type Pending<'a> = Pin<Box<dyn Future<Output = Result<HeldLease, holdline::Error>> + Send + 'a>>;

/// A task's wait for `want` permits (0: every permit), polled once: it
/// stands in line (or was granted at once).
fn task_in_line(lock: &Lock, want: u32) -> Pending<'_> {
    let hold = lock.key("k").wait(FOREVER);
    let hold = if want == 0 {
        hold.exclusive()
    } else {
        hold.permits(want)
    };
    let mut fut: Pending<'_> = Box::pin(hold.acquire_async());
    if let Poll::Ready(r) = poll(&mut fut) {
        panic!("granted at once: {:?}", r.map(|l| l.fence()));
    }
    fut
}

fn poll(fut: &mut Pending<'_>) -> Poll<Result<HeldLease, holdline::Error>> {
    fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
}

/// The task's grant, which must have come: one poll.
fn granted(mut fut: Pending<'_>) -> HeldLease {
    match poll(&mut fut) {
        Poll::Ready(lease) => lease.unwrap(),
        Poll::Pending => panic!("a task in line that fits was not granted"),
    }
}

/// Inside a hold: the key's permits held in all are within the count.
fn within_count(lock: &Lock, total: u32) {
    let held = lock.inspect("k").expect("held").permits_held;
    assert!(held <= total, "{held} permits held of {total}");
}

/// 13. An exclusive holder lets go, from another thread, with two tasks
/// in line for one permit each, polled meanwhile: the one release grants
/// both (each one's next poll finds its grant), each with its own greater
/// fence, never past the count.
#[test]
fn a_release_serves_every_head_that_fits() {
    check(2, || {
        let store = Store::new();
        let lock = store.lock("l").permits(2).open().unwrap();
        let writer = lock.key("k").exclusive().acquire().unwrap();
        let writer_fence = writer.fence();
        let mut first = task_in_line(&lock, 1);
        let second = task_in_line(&lock, 1);
        let releaser = thread::spawn(move || writer.release().unwrap());
        // A poll racing the release: pending, or already granted.
        let early = poll(&mut first);
        releaser.join().unwrap();
        let first = match early {
            Poll::Ready(lease) => lease.unwrap(),
            Poll::Pending => granted(first),
        };
        let second = granted(second);
        within_count(&lock, 2);
        assert!(
            writer_fence < first.fence() && first.fence() < second.fence(),
            "in order"
        );
        first.release().unwrap();
        second.release().unwrap();
        assert_idle_and_reclaimed(&store, &lock, "k");
    });
}

/// 14. The head of the line asks for every permit and leaves (its future
/// dropped) while one permit is held; the thread behind it fits beside the
/// holder and must be let in when the head leaves: the holder lets go only
/// after that thread's hold is over (a join: a missed grant is a deadlock).
#[test]
fn a_head_that_leaves_lets_the_next_in() {
    check(2, || {
        let store = Store::new();
        let lock = store.lock("l").permits(2).open().unwrap();
        let held = lock.acquire("k").unwrap();
        let head = task_in_line(&lock, 0);
        let next = {
            let lock = lock.clone();
            thread::spawn(move || {
                lock.key("k")
                    .wait(FOREVER)
                    .hold(|l| {
                        within_count(&lock, 2);
                        l.fence()
                    })
                    .unwrap()
            })
        };
        while lock.waiters_of("k") != 2 {
            thread::yield_now();
        }
        drop(head);
        let fence = next.join().unwrap();
        assert!(fence > held.fence());
        held.release().unwrap();
        assert_idle_and_reclaimed(&store, &lock, "k");
    });
}

/// 15. A thread asks for every permit while the two shared holders let go:
/// it is granted exactly once, only after both, with a greater fence.
#[test]
fn an_exclusive_waiter_while_shared_holders_leave() {
    check(2, || {
        let store = Store::new();
        let lock = store.lock("l").permits(2).open().unwrap();
        let (a, b) = (lock.acquire("k").unwrap(), lock.acquire("k").unwrap());
        let top = a.fence().max(b.fence());
        let writer = {
            let lock = lock.clone();
            thread::spawn(move || {
                lock.key("k")
                    .exclusive()
                    .wait(FOREVER)
                    .hold(|l| {
                        within_count(&lock, 2);
                        l.fence()
                    })
                    .unwrap()
            })
        };
        a.release().unwrap();
        b.release().unwrap();
        assert!(writer.join().unwrap() > top, "fences rise");
        assert_idle_and_reclaimed(&store, &lock, "k");
    });
}

/// 16. A thread waits for every permit behind two holders; one lets go,
/// the other's maxHold revocation gives the last permit back: the waiter
/// is granted once, never past the count, and the revoked lease is lost.
#[test]
fn a_revocation_returns_its_permit_to_the_line() {
    check(2, || {
        let store = Store::new();
        let lock = store
            .lock("l")
            .permits(2)
            .max_hold(Duration::from_secs(60))
            .open()
            .unwrap();
        let (a, b) = (lock.acquire("k").unwrap(), lock.acquire("k").unwrap());
        let writer = {
            let lock = lock.clone();
            thread::spawn(move || {
                lock.key("k")
                    .exclusive()
                    .wait(FOREVER)
                    .hold(|_| within_count(&lock, 2))
                    .unwrap()
            })
        };
        a.release().unwrap();
        store.fire_all_timers();
        writer.join().unwrap();
        assert_eq!(b.release().unwrap_err().kind(), ErrorKind::Lost);
        assert_idle_and_reclaimed(&store, &lock, "k");
    });
}
