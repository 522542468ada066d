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

use holdline::{ErrorKind, HeldLease, Lock, LockBuilder};
use loom::thread;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

mod common;
use common::{check_idle_with, permits, FOREVER};

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

/// A thread that waits (forever) for `want` permits of "k" (0: every
/// permit), checks inside its hold that the key is within `total`, and
/// answers its grant's fence.
fn holder_thread(lock: &Lock, want: u32, total: u32) -> thread::JoinHandle<u64> {
    let lock = lock.clone();
    thread::spawn(move || {
        let hold = lock.key("k").wait(FOREVER);
        let hold = if want == 0 {
            hold.exclusive()
        } else {
            hold.permits(want)
        };
        hold.hold(|l| {
            within_count(&lock, total);
            l.fence()
        })
        .unwrap()
    })
}

/// Two permits per key, each hold revoked at its maxHold (60 s).
fn two_permits_revoked(lock: LockBuilder<'_>) -> LockBuilder<'_> {
    lock.permits(2).max_hold(Duration::from_secs(60))
}

/// 13. An exclusive holder lets go, from another thread, with two tasks
/// in line for one permit each, polled meanwhile: the one release grants
/// both (each one's next poll finds its grant), each with its own greater
/// fence, never past the count.
#[test]
fn a_release_serves_every_head_that_fits() {
    check_idle_with(2, permits::<2>, |_store, lock| {
        let writer = lock.key("k").exclusive().acquire().unwrap();
        let writer_fence = writer.fence();
        let mut first = task_in_line(lock, 1);
        let second = task_in_line(lock, 1);
        let releaser = thread::spawn(move || writer.release().unwrap());
        // A poll racing the release: pending, or already granted.
        let early = poll(&mut first);
        releaser.join().unwrap();
        let first = match early {
            Poll::Ready(lease) => lease.unwrap(),
            Poll::Pending => granted(first),
        };
        let second = granted(second);
        within_count(lock, 2);
        assert!(
            writer_fence < first.fence() && first.fence() < second.fence(),
            "in order"
        );
        first.release().unwrap();
        second.release().unwrap();
    });
}

/// 14. The head of the line asks for every permit and leaves (its future
/// dropped) while one permit is held; the thread behind it fits beside the
/// holder and must be let in when the head leaves: the holder lets go only
/// after that thread's hold is over (a join: a missed grant is a deadlock).
#[test]
fn a_head_that_leaves_lets_the_next_in() {
    check_idle_with(2, permits::<2>, |_store, lock| {
        let held = lock.acquire("k").unwrap();
        let head = task_in_line(lock, 0);
        let next = holder_thread(lock, 1, 2);
        while lock.waiters_of("k") != 2 {
            thread::yield_now();
        }
        drop(head);
        let fence = next.join().unwrap();
        assert!(fence > held.fence());
        held.release().unwrap();
    });
}

/// 15. A thread asks for every permit while the two shared holders let go:
/// it is granted exactly once, only after both, with a greater fence.
#[test]
fn an_exclusive_waiter_while_shared_holders_leave() {
    check_idle_with(2, permits::<2>, |_store, lock| {
        let (a, b) = (lock.acquire("k").unwrap(), lock.acquire("k").unwrap());
        let top = a.fence().max(b.fence());
        let writer = holder_thread(lock, 0, 2);
        a.release().unwrap();
        b.release().unwrap();
        assert!(writer.join().unwrap() > top, "fences rise");
    });
}

/// 16. A thread waits for every permit behind two holders; one lets go,
/// the other's maxHold revocation gives the last permit back: the waiter
/// is granted once, never past the count, and the revoked lease is lost.
#[test]
fn a_revocation_returns_its_permit_to_the_line() {
    check_idle_with(2, two_permits_revoked, |store, lock| {
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
    });
}

/// 18. A newcomer's CAS for one permit races a thread that finds the key
/// too full and stands in line for all of it, while the holder lets go:
/// the waiter is granted once everything is given back (a waiter linked
/// after the permits it wanted came free would wait forever: a loom
/// deadlock), never past the count, after the newcomer if it got in.
#[test]
fn a_fast_take_racing_a_waiter_that_enqueues() {
    check_idle_with(2, permits::<2>, |_store, lock| {
        let held = lock.acquire("k").unwrap();
        let writer = holder_thread(lock, 0, 2);
        let tried = lock.key("k").try_acquire().unwrap();
        held.release().unwrap();
        let newcomer = tried.map(|l| {
            let fence = l.fence();
            l.release().unwrap();
            fence
        });
        let writer = writer.join().unwrap();
        assert!(newcomer.is_none_or(|f| f < writer), "fences rise");
    });
}

/// 19. Two holders give their permits back while a newcomer takes one
/// with its CAS: every permit comes back (the key ends free), the newcomer
/// is in only while one fits, and its fence is above both holders'.
#[test]
fn a_release_racing_a_fast_take() {
    check_idle_with(2, permits::<2>, |_store, lock| {
        let (a, b) = (lock.acquire("k").unwrap(), lock.acquire("k").unwrap());
        let top = a.fence().max(b.fence());
        let newcomer = {
            let lock = lock.clone();
            thread::spawn(move || {
                lock.key("k").try_acquire().unwrap().map(|l| {
                    within_count(&lock, 2);
                    let fence = l.fence();
                    l.release().unwrap();
                    fence
                })
            })
        };
        a.release().unwrap();
        b.release().unwrap();
        if let Some(fence) = newcomer.join().unwrap() {
            assert!(fence > top, "fences rise");
        }
    });
}

/// 20. The head of the line (a task asking for every permit) times out
/// while another holder gives a permit back from another thread; behind
/// it a task asks for one permit, which fits beside the holder still in:
/// the head's departure must let that task in at once (the release must
/// not, past the head), whichever came first.
#[test]
fn the_head_timing_out_while_permits_come_free() {
    check_idle_with(2, permits::<3>, |_store, lock| {
        let (a, b) = (lock.acquire("k").unwrap(), lock.acquire("k").unwrap());
        let hold = lock.key("k").exclusive().wait(Duration::from_millis(10));
        let mut head: Pending<'_> = Box::pin(hold.acquire_async());
        assert!(poll(&mut head).is_pending(), "the head stands in line");
        let behind = task_in_line(lock, 1);
        let releaser = thread::spawn(move || a.release().unwrap());
        // Each poll reads the store's clock, which moves 2 ms a read under
        // loom: the head's deadline passes within a few.
        let ended = loop {
            if let Poll::Ready(r) = poll(&mut head) {
                break r;
            }
        };
        assert_eq!(
            ended.map(|l| l.fence()).unwrap_err().kind(),
            ErrorKind::InUse
        );
        let behind = granted(behind);
        within_count(lock, 3);
        assert!(behind.fence() > b.fence(), "fences rise");
        releaser.join().unwrap();
        behind.release().unwrap();
        b.release().unwrap();
    });
}

/// 21. A writer waits in line for every permit while the reader holding
/// one lets go, and a new reader tries one with its CAS meanwhile: the new
/// reader never gets in ahead of the writer (one permit is free until the
/// release, and all of them after it, but the writer waits first).
#[test]
fn a_waiting_writer_is_not_overtaken_by_a_fast_reader() {
    check_idle_with(2, permits::<2>, |_store, lock| {
        let reader = lock.acquire("k").unwrap();
        let writer = task_in_line(lock, 0);
        let newcomer = {
            let lock = lock.clone();
            thread::spawn(move || lock.key("k").try_acquire().unwrap().map(|l| l.fence()))
        };
        reader.release().unwrap();
        assert_eq!(
            newcomer.join().unwrap(),
            None,
            "a reader overtook the writer"
        );
        let writer = granted(writer);
        assert_eq!(writer.permits(), 2);
        writer.release().unwrap();
    });
}
