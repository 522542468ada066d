//! Loom models of async holders: a task's future in the same line as
//! threads, its waker registration, and its drop (cancellation).
//! Same conventions as `models.rs` (run with the same command).
#![cfg(loom)]

use loom::sync::atomic::AtomicUsize;
use loom::sync::Arc;
use loom::thread;
use std::future::Future;
use std::task::{Context, Poll, Waker};

mod common;
use common::{check_idle, inside, spawn_waiting_holder, FOREVER};

/// 9. A task's future is dropped while the holder lets go: either it left
/// the line first (the key goes free) or the grant reached it first and
/// the drop hands it on. Never lost, never left held.
#[test]
fn a_dropped_future_racing_a_grant() {
    check_idle(3, |_store, lock| {
        let held = lock.acquire("k").unwrap();
        let task = {
            let lock = lock.clone();
            thread::spawn(move || {
                let mut fut = std::pin::pin!(lock.key("k").wait(FOREVER).acquire_async());
                let mut cx = Context::from_waker(Waker::noop());
                match fut.as_mut().poll(&mut cx) {
                    // The release came first: it is ours; let it go.
                    Poll::Ready(lease) => drop(lease.unwrap()),
                    // In line (or granted since): dropped here, either way.
                    Poll::Pending => {}
                }
            })
        };
        held.release().unwrap();
        task.join().unwrap();
    });
}

/// 10. A task parks (loom's `block_on` sleeps until its waker is called)
/// while the holder lets go: the grant always wakes it (a lost wake-up is
/// a loom deadlock).
#[test]
fn waker_registration_racing_a_release() {
    check_idle(3, |_store, lock| {
        let count = Arc::new(AtomicUsize::new(0));
        let held = lock.acquire("k").unwrap();
        let task = {
            let (lock, count) = (lock.clone(), count.clone());
            thread::spawn(move || {
                let lease =
                    loom::future::block_on(lock.key("k").wait(FOREVER).acquire_async()).unwrap();
                inside(&count);
                lease.release().unwrap();
            })
        };
        held.release().unwrap();
        task.join().unwrap();
    });
}

/// 11. A thread and a task in one line: granted in arrival order, one at a
/// time, and the task woken through the waker of its latest poll (it first
/// polls with a no-op waker, then `block_on` polls with its own, racing the
/// grants). The main thread plays the holder and the task, so the model
/// needs two threads, not three.
#[test]
fn a_thread_and_a_task_in_one_line() {
    check_idle(2, |_store, lock| {
        let count = Arc::new(AtomicUsize::new(0));
        let order = Arc::new(loom::sync::Mutex::new(Vec::new()));
        let held = lock.acquire("k").unwrap();
        let thread_waiter = {
            let (lock, count, order) = (lock.clone(), count.clone(), order.clone());
            thread::spawn(move || {
                lock.key("k")
                    .wait(FOREVER)
                    .hold(|_| {
                        inside(&count);
                        order.lock().unwrap().push("thread");
                    })
                    .unwrap();
            })
        };
        while lock.waiters_of("k") != 1 {
            thread::yield_now();
        }
        let mut task = std::pin::pin!(lock.key("k").wait(FOREVER).acquire_async());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(task.as_mut().poll(&mut cx).is_pending(), "the key is held");
        assert_eq!(lock.waiters_of("k"), 2, "the task stands behind the thread");
        held.release().unwrap();
        let lease = loom::future::block_on(task).unwrap();
        inside(&count);
        order.lock().unwrap().push("task");
        lease.release().unwrap();
        thread_waiter.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["thread", "task"]);
    });
}

/// What a model's hand-polled task is woken through: it unparks the
/// model thread that polls it, so a wake that never comes is a deadlock.
struct Unpark(thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.unpark();
    }
}

/// 17. A task in line with a deadline, the holder never letting go (a
/// closure hold, which has no timer of its own): the line's timer entry,
/// fired while the task's thread parks, wakes it, and it leaves the line
/// `in use`. A task arms no timer of its own: its enqueue covers its
/// deadline with its line's entry, so a missing cover is a deadlock here.
#[test]
fn a_task_s_deadline_fires_through_its_line() {
    check_idle(3, |store, lock| {
        let held = lock.hold("k", |_| {
            let (enqueued, in_line) = loom::sync::mpsc::channel();
            let task = {
                let lock = lock.clone();
                thread::spawn(move || {
                    let waker = Waker::from(std::sync::Arc::new(Unpark(thread::current())));
                    let mut cx = Context::from_waker(&waker);
                    // The logical clock passes a 1 ms deadline by the next read.
                    let mut fut = std::pin::pin!(lock
                        .key("k")
                        .wait(std::time::Duration::from_millis(1))
                        .acquire_async());
                    assert!(fut.as_mut().poll(&mut cx).is_pending(), "in line");
                    enqueued.send(()).unwrap();
                    // Woken by the line's entry (a lost wake is a deadlock).
                    thread::park();
                    match fut.as_mut().poll(&mut cx) {
                        Poll::Ready(r) => r.unwrap_err().kind(),
                        Poll::Pending => panic!("woken, but its deadline had not passed"),
                    }
                })
            };
            in_line.recv().unwrap();
            store.fire_all_timers();
            task.join().unwrap()
        });
        assert_eq!(held.unwrap(), holdline::ErrorKind::InUse);
        assert_eq!(lock.stats().waiters, 0);
        assert_eq!(store.pending_timers(), 0, "nothing left on the wheel");
    });
}

/// 25. A task at the head of a line and a thread behind it, both behind a
/// holder: the release that grants the task rouses the thread (it was
/// asleep; its status goes back from `PARKED` to `WAITING` and it spins as
/// the next in line), and the task's release grants the thread. A rouse
/// that flips the status without unparking leaves the thread asleep with a
/// status a grant takes for a spinner's, so it is never woken (a loom
/// deadlock). The main thread plays the holder and the task.
#[test]
fn a_rouse_racing_the_next_grant() {
    check_idle(2, |_store, lock| {
        let count = Arc::new(AtomicUsize::new(0));
        let held = lock.acquire("k").unwrap();
        let mut task = std::pin::pin!(lock.key("k").wait(FOREVER).acquire_async());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(task.as_mut().poll(&mut cx).is_pending(), "in line");
        let thread_waiter = spawn_waiting_holder(lock, "k", &count);
        while lock.waiters_of("k") != 2 {
            thread::yield_now();
        }
        held.release().unwrap();
        let lease = loom::future::block_on(task).unwrap();
        inside(&count);
        let task_fence = lease.fence();
        lease.release().unwrap();
        assert!(thread_waiter.join().unwrap() > task_fence, "in line order");
    });
}
