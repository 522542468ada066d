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

    let l = lock.clone();
    let next = thread::spawn(move || {
        l.key("k")
            .wait(Duration::from_secs(20))
            .hold(|lease| lease.fence())
    });
    holder.release().unwrap();
    assert!(next.join().unwrap().is_ok());
}
