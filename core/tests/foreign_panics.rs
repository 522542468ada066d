//! Panics in foreign code reach only the caller whose code panicked: a
//! task's waker that panics on wake leaves the store's timer running (its
//! deadlines, maxHold and ttl keep firing) and the key usable by others.

mod common;

use common::{revoking_lock, store_with, wait_for_within, Holder};
use holdline::ErrorKind;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::Duration;

/// A waker whose `wake` panics.
struct PanicsOnWake;

impl Wake for PanicsOnWake {
    fn wake(self: Arc<Self>) {
        panic!("a waker that panics on wake");
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A task waiting 50 ms behind a holder, polled with a waker that panics
/// on wake: the store's timer wakes it when its wait runs out (the wake
/// panics there), and the timer goes on: the task then answers `in use`,
/// a maxHold of 100 ms still revokes, another task's deadline still fires,
/// and the key is still granted to the next in line.
#[test]
fn a_waker_that_panics_on_wake_leaves_the_timer_running() {
    let (store, lock) = store_with("l");
    let holder = Holder::start(&lock, "k");
    let waker = Waker::from(Arc::new(PanicsOnWake));
    let mut cx = Context::from_waker(&waker);
    let mut waiting = Box::pin(
        lock.key("k")
            .wait(Duration::from_millis(50))
            .hold_async(async |_| ()),
    );
    assert!(waiting.as_mut().poll(&mut cx).is_pending());
    // Its wait runs out; the timer's wake of it panics.
    thread::sleep(Duration::from_millis(300));
    match waiting.as_mut().poll(&mut cx) {
        Poll::Ready(r) => assert_eq!(r.unwrap_err().kind(), ErrorKind::InUse),
        Poll::Pending => panic!("its wait ran out, yet it waits"),
    }
    drop(waiting);

    let revoking = revoking_lock(&store, "r", 100);
    let lease = revoking.acquire("m").unwrap();
    wait_for_within("the maxHold revocation", Duration::from_secs(20), || {
        lease.is_lost()
    });

    let l = lock.clone();
    let timed_out = runtime().block_on(async move {
        l.key("k")
            .wait(Duration::from_millis(50))
            .hold_async(async |_| ())
            .await
    });
    assert_eq!(timed_out.unwrap_err().kind(), ErrorKind::InUse);

    the_key_passes_on(&lock, holder);
}

/// Wakers whose clone panics, or whose clones panic when dropped; every
/// other call is a no-op.
mod odd_wakers {
    use std::ptr::null;
    use std::task::{RawWaker, RawWakerVTable, Waker};

    fn noop(_: *const ()) {}

    fn clone_panics(_: *const ()) -> RawWaker {
        panic!("a waker that panics on clone");
    }

    fn clone_to_drop_panics(_: *const ()) -> RawWaker {
        RawWaker::new(null(), &DROP_PANICS)
    }

    fn drop_panics(_: *const ()) {
        panic!("a waker that panics on drop");
    }

    fn clone_plain(_: *const ()) -> RawWaker {
        RawWaker::new(null(), &PLAIN)
    }

    static CLONE_PANICS: RawWakerVTable = RawWakerVTable::new(clone_panics, noop, noop, noop);
    static CLONES_PANIC_ON_DROP: RawWakerVTable =
        RawWakerVTable::new(clone_to_drop_panics, noop, noop, noop);
    static DROP_PANICS: RawWakerVTable = RawWakerVTable::new(clone_plain, noop, noop, drop_panics);
    static PLAIN: RawWakerVTable = RawWakerVTable::new(clone_plain, noop, noop, noop);

    /// Its clone panics.
    pub fn panics_on_clone() -> Waker {
        // SAFETY: every function of the table ignores its data pointer.
        unsafe { Waker::from_raw(RawWaker::new(null(), &CLONE_PANICS)) }
    }

    /// Its clones panic when dropped (it does not).
    pub fn clones_panic_on_drop() -> Waker {
        // SAFETY: as above.
        unsafe { Waker::from_raw(RawWaker::new(null(), &CLONES_PANIC_ON_DROP)) }
    }
}

/// Polls a task waiting behind a holder with `first`, then with `second`
/// (that poll must panic: a foreign waker's clone or drop), and checks the
/// panic reached only that task: the future can be dropped (it leaves the
/// line), the key passes to the next in line, and the store closes; each
/// step within 20 s (a line lock left held would hang it).
fn a_panicking_poll_leaves_the_line_usable(first: Waker, second: Waker) {
    let (store, lock) = store_with("l");
    let holder = Holder::start(&lock, "k");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let l = lock.clone();
    thread::spawn(move || {
        let mut waiting = Box::pin(
            l.key("k")
                .wait(Duration::from_secs(60))
                .hold_async(async |_| ()),
        );
        let mut cx = Context::from_waker(&first);
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut cx = Context::from_waker(&second);
            let _ = waiting.as_mut().poll(&mut cx);
        }));
        assert!(
            polled.is_err(),
            "the foreign waker's panic reached its task"
        );
        drop(waiting);
        done_tx.send(()).unwrap();
    });
    done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the task's future dropped");
    assert_eq!(lock.stats().waiters, 0, "it left the line");
    the_key_passes_on(&lock, holder);
    store.close();
}

#[test]
fn a_waker_that_panics_on_clone_reaches_only_its_task() {
    a_panicking_poll_leaves_the_line_usable(Waker::noop().clone(), odd_wakers::panics_on_clone());
}

#[test]
fn a_waker_that_panics_on_drop_reaches_only_its_task() {
    a_panicking_poll_leaves_the_line_usable(
        odd_wakers::clones_panic_on_drop(),
        Waker::noop().clone(),
    );
}

/// The key is still usable: a thread waiting for it is granted once
/// `holder` lets go.
fn the_key_passes_on(lock: &holdline::Lock, holder: Holder) {
    let l = lock.clone();
    let next = thread::spawn(move || {
        l.key("k")
            .wait(Duration::from_secs(20))
            .hold(|lease| lease.fence())
    });
    holder.release().unwrap();
    assert!(next.join().unwrap().is_ok());
}
