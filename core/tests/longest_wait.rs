//! The longest wait: `Duration::MAX` (and any wait past the clock's range)
//! means "as long as it takes" at every entry that takes a wait. Each test
//! holds the key, checks that the wait has not ended after a moment, then
//! lets go and checks that the waiter is granted.

mod common;

use common::{store_with, store_with_permits, Holder};
use holdline::Lock;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// The waits that must never end on their own.
const LONGEST: [Duration; 3] = [
    Duration::MAX,
    Duration::from_secs(u64::MAX / 4),
    Duration::from_secs(100 * 365 * 24 * 3600),
];

/// How long a wait that ended at once would already have ended in.
const A_MOMENT: Duration = Duration::from_millis(300);

/// Runs `wait` (which must answer the fence it was granted) on a thread
/// while `lock`'s key `k` is held, checks it is still waiting after a
/// moment, lets go, and checks it was granted.
fn waits_until_let_go(lock: &Lock, wait: impl FnOnce(Lock) -> u64 + Send + 'static) {
    let holder = Holder::start(lock, "k");
    let (done_tx, done_rx) = mpsc::channel();
    let l = lock.clone();
    let waiter = thread::spawn(move || done_tx.send(wait(l)).unwrap());
    assert!(
        done_rx.recv_timeout(A_MOMENT).is_err(),
        "the longest wait ended while the key was held"
    );
    holder.release().unwrap();
    let fence = done_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("granted once let go");
    assert!(fence > 0);
    waiter.join().unwrap();
}

#[test]
fn a_threads_hold_waits_as_long_as_it_takes() {
    for wait in LONGEST {
        let (_store, lock) = store_with("l");
        waits_until_let_go(&lock, move |l| {
            l.key("k").wait(wait).hold(|lease| lease.fence()).unwrap()
        });
    }
}

#[test]
fn a_handle_lease_waits_as_long_as_it_takes() {
    for wait in LONGEST {
        let (_store, lock) = store_with("l");
        waits_until_let_go(&lock, move |l| {
            let lease = l.key("k").wait(wait).acquire().unwrap();
            let fence = lease.fence();
            lease.release().unwrap();
            fence
        });
    }
}

#[test]
fn a_tasks_hold_waits_as_long_as_it_takes() {
    for wait in LONGEST {
        let (_store, lock) = store_with("l");
        waits_until_let_go(&lock, move |l| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                l.key("k")
                    .wait(wait)
                    .hold_async(async |lease| lease.fence())
                    .await
                    .unwrap()
            })
        });
    }
}

#[test]
fn a_hold_of_several_keys_waits_as_long_as_it_takes() {
    for wait in LONGEST {
        let (_store, lock) = store_with("l");
        waits_until_let_go(&lock, move |l| {
            l.key_set(&["j", "k"])
                .wait(wait)
                .hold(|leases| leases[1].fence())
                .unwrap()
        });
    }
}

#[test]
fn a_hold_of_every_permit_waits_as_long_as_it_takes() {
    for wait in LONGEST {
        let (_store, lock) = store_with_permits("p", 2);
        waits_until_let_go(&lock, move |l| {
            l.key("k")
                .wait(wait)
                .exclusive()
                .hold(|lease| lease.fence())
                .unwrap()
        });
    }
}
