//! Permits: semaphores and read-write locks. At most the lock's count of
//! permits held at once, FIFO with no overtaking, a release granting every
//! head waiter that fits, each grant its own lease and rising fence, the
//! exact texts for bad counts, and memory back to zero.

use holdline::{ErrorKind, Lock, Store};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

mod common;
use common::{on_threads, store_with_permits, wait_for};

const LONG: Duration = Duration::from_secs(60);

/// Counts the permits inside holds and fails the moment they exceed `total`.
struct Gauge {
    total: u32,
    inside: AtomicU32,
}

impl Gauge {
    fn new(total: u32) -> Arc<Gauge> {
        Arc::new(Gauge {
            total,
            inside: AtomicU32::new(0),
        })
    }

    fn enter(&self, permits: u32) {
        let now = self.inside.fetch_add(permits, Ordering::SeqCst) + permits;
        assert!(now <= self.total, "{now} permits held of {}", self.total);
    }

    fn leave(&self, permits: u32) {
        self.inside.fetch_sub(permits, Ordering::SeqCst);
    }
}

fn waiters(lock: &Lock, key: &str) -> usize {
    lock.inspect(key).map_or(0, |i| i.waiters)
}

/// Tells each [`holder`] thread to let go, and joins it.
fn let_go(holders: impl IntoIterator<Item = (mpsc::Sender<()>, thread::JoinHandle<()>)>) {
    for (go, t) in holders {
        go.send(()).unwrap();
        t.join().unwrap();
    }
}

/// A thread that holds `permits` of `key` (0: exclusive) until told to
/// let go, reporting its grant's fence on `granted`.
fn holder(
    lock: &Lock,
    key: &'static str,
    permits: u32,
    name: &'static str,
    granted: &mpsc::Sender<(&'static str, u64)>,
) -> (mpsc::Sender<()>, thread::JoinHandle<()>) {
    let (go, release) = mpsc::channel::<()>();
    let (lock, granted) = (lock.clone(), granted.clone());
    let t = thread::spawn(move || {
        let hold = lock.key(key).wait(LONG);
        let hold = if permits == 0 {
            hold.exclusive()
        } else {
            hold.permits(permits)
        };
        hold.hold(|lease| {
            granted.send((name, lease.fence())).unwrap();
            let _ = release.recv();
        })
        .unwrap();
    });
    (go, t)
}

#[test]
fn a_semaphore_lets_its_count_in_and_lines_up_the_rest() {
    let (store, lock) = store_with_permits("providers", 3);
    let (granted, grants) = mpsc::channel();
    let mut held = Vec::new();
    for name in ["a", "b", "c"] {
        held.push(holder(&lock, "stripe", 1, name, &granted));
        grants.recv().unwrap();
    }
    let info = lock.inspect("stripe").unwrap();
    assert_eq!((info.holders, info.permits_held, info.waiters), (3, 3, 0));
    let (go_d, d) = holder(&lock, "stripe", 1, "d", &granted);
    wait_for("d in line", || waiters(&lock, "stripe") == 1);
    assert!(grants.try_recv().is_err(), "a fourth got in");
    assert_eq!(lock.try_hold("stripe", |_| ()).unwrap(), None);
    let (go_a, a) = held.remove(0);
    go_a.send(()).unwrap();
    a.join().unwrap();
    assert_eq!(grants.recv().unwrap().0, "d");
    go_d.send(()).unwrap();
    d.join().unwrap();
    let_go(held);
    let s = lock.stats();
    assert_eq!((s.held_keys, s.waiters, s.grants), (0, 0, 4));
    store.reclaim_idle();
    assert_eq!(lock.stats().live_keys, 0, "memory back to zero");
}

#[test]
fn a_waiting_writer_is_never_overtaken_by_readers() {
    let (_store, lock) = store_with_permits("docs", 1024);
    let (granted, grants) = mpsc::channel();
    let (go_r1, r1) = holder(&lock, "d", 1, "r1", &granted);
    assert_eq!(grants.recv().unwrap().0, "r1");
    let (go_w, w) = holder(&lock, "d", 0, "writer", &granted);
    wait_for("the writer in line", || waiters(&lock, "d") == 1);
    // Readers after the writer: their one permit would fit, but they wait.
    let (go_r2, r2) = holder(&lock, "d", 1, "r2", &granted);
    wait_for("r2 in line", || waiters(&lock, "d") == 2);
    let (go_r3, r3) = holder(&lock, "d", 1, "r3", &granted);
    wait_for("r3 in line", || waiters(&lock, "d") == 3);
    assert!(grants.try_recv().is_err(), "someone overtook the writer");
    assert_eq!(lock.try_hold("d", |_| ()).unwrap(), None, "a try overtook");
    go_r1.send(()).unwrap();
    r1.join().unwrap();
    let (who, writer_fence) = grants.recv().unwrap();
    assert_eq!(who, "writer");
    let info = lock.inspect("d").unwrap();
    assert_eq!((info.holders, info.permits_held), (1, 1024));
    assert_eq!(info.fence, writer_fence);
    assert!(
        grants.try_recv().is_err(),
        "a reader inside with the writer"
    );
    go_w.send(()).unwrap();
    w.join().unwrap();
    // One release grants both readers at the head: both inside at once.
    // (A release that served one reader would leave the other waiting
    // for the first to let go, which it does only when told: no grant.)
    let next = || {
        grants
            .recv_timeout(Duration::from_secs(20))
            .expect("granted")
    };
    let mut readers = [next(), next()];
    readers.sort();
    assert_eq!([readers[0].0, readers[1].0], ["r2", "r3"]);
    assert!(readers.iter().all(|r| r.1 > writer_fence));
    assert_ne!(readers[0].1, readers[1].1, "each grant its own fence");
    let info = lock.inspect("d").unwrap();
    assert_eq!((info.holders, info.permits_held, info.waiters), (2, 2, 0));
    assert_eq!(info.fence, readers[0].1.max(readers[1].1));
    let_go([(go_r2, r2), (go_r3, r3)]);
}

#[test]
fn a_head_that_leaves_lets_the_next_in_at_once() {
    let (_store, lock) = store_with_permits("pool", 2);
    let (granted, grants) = mpsc::channel();
    let (go_a, a) = holder(&lock, "k", 1, "a", &granted);
    grants.recv().unwrap();
    // The head asks for both and gives up after 300 ms; the one behind it
    // fits beside `a` and must be let in when the head leaves.
    let lock2 = lock.clone();
    let head = thread::spawn(move || {
        lock2
            .key("k")
            .exclusive()
            .wait(Duration::from_millis(300))
            .hold(|_| ())
    });
    wait_for("the head in line", || waiters(&lock, "k") == 1);
    let (go_b, b) = holder(&lock, "k", 1, "b", &granted);
    let e = head.join().unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InUse);
    assert_eq!(
        grants.recv().unwrap().0,
        "b",
        "b waited behind a head that left"
    );
    let_go([(go_a, a), (go_b, b)]);
}

#[test]
fn try_hold_gets_in_only_when_its_permits_fit_and_nobody_waits() {
    let (_store, lock) = store_with_permits("pool", 3);
    let two = lock.key("k").permits(2).acquire().unwrap();
    assert_eq!(two.permits(), 2);
    assert_eq!(lock.key("k").permits(2).try_hold(|_| ()).unwrap(), None);
    let one = lock.key("k").try_acquire().unwrap().expect("one fits");
    assert!(one.fence() > two.fence());
    assert_eq!(lock.try_hold("k", |_| ()).unwrap(), None, "full");
    one.release().unwrap();
    // A writer waits; a reader's one permit would fit but may not pass it.
    let lock2 = lock.clone();
    let writer = thread::spawn(move || lock2.key("k").exclusive().wait(LONG).hold(|l| l.permits()));
    wait_for("the writer in line", || waiters(&lock, "k") == 1);
    assert_eq!(lock.try_hold("k", |_| ()).unwrap(), None);
    two.release().unwrap();
    assert_eq!(writer.join().unwrap().unwrap(), 3);
    assert_eq!(
        lock.key("k").exclusive().try_hold(|l| l.permits()).unwrap(),
        Some(3)
    );
}

#[test]
fn bad_counts_fail_invalid_with_the_lock_and_key_named() {
    let store = Store::new();
    let text = |r: Result<Lock, holdline::Error>| {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid);
        e.to_string()
    };
    assert_eq!(
        text(store.lock("providers").permits(0).open()),
        "lock providers: a lock has 1 to 1000000 permits, not 0: invalid"
    );
    assert_eq!(
        text(store.lock("providers").permits(1_000_001).open()),
        "lock providers: a lock has 1 to 1000000 permits, not 1000001: invalid"
    );
    let docs = store.lock("docs").permits(1024).open().unwrap();
    assert_eq!(
        text(store.lock("docs").permits(8).open()),
        "lock docs: opened with 1024 permits, not 8: invalid"
    );
    // Without a count, a known name keeps its own.
    let again = store.lock("docs").open().unwrap();
    assert_eq!(
        again.key("d").exclusive().hold(|l| l.permits()).unwrap(),
        1024
    );
    let providers = store.lock("providers").permits(5).open().unwrap();
    for asked in [6, 0] {
        let e = providers
            .key("stripe")
            .permits(asked)
            .hold(|_| ())
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert_eq!(
            e.to_string(),
            format!(
                "lock providers: key \"stripe\": {asked} permits asked of a lock of 5: invalid"
            )
        );
    }
    let e = providers
        .key("stripe")
        .permits(6)
        .try_acquire()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    // A lock of one permit: asking for two is as wrong.
    let plain = store.lock("plain").open().unwrap();
    let e = plain.key("k").permits(2).hold(|_| ()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "lock plain: key \"k\": 2 permits asked of a lock of 1: invalid"
    );
    drop(docs);
}

#[test]
fn the_same_thread_may_not_hold_a_key_twice_with_any_permits() {
    let (_store, lock) = store_with_permits("docs", 8);
    let e = lock
        .hold("d", |_| lock.key("d").permits(2).hold(|_| ()))
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert_eq!(
        lock.hold("d", |_| lock.try_hold("d", |_| ()).unwrap())
            .unwrap(),
        None
    );
}

#[test]
fn a_revoked_holder_gives_its_permits_back_to_the_line() {
    let store = Store::new();
    let lock = store
        .lock("pool")
        .permits(2)
        .max_hold(Duration::from_millis(100))
        .open()
        .unwrap();
    let stuck = lock.key("k").exclusive().acquire().unwrap();
    let lock2 = lock.clone();
    let waiter = thread::spawn(move || lock2.key("k").wait(LONG).hold(|l| l.fence()));
    let fence = waiter.join().unwrap().unwrap();
    assert!(fence > stuck.fence());
    assert!(stuck.is_lost());
    assert_eq!(stuck.release().unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(lock.stats().revocations, 1);
}

#[test]
fn a_panic_inside_a_hold_gives_its_permits_back() {
    let (_store, lock) = store_with_permits("pool", 4);
    let lock2 = lock.clone();
    let panicked = thread::spawn(move || lock2.key("k").permits(3).hold(|_| panic!("boom")));
    assert!(panicked.join().is_err());
    assert_eq!(
        lock.key("k").exclusive().try_hold(|l| l.permits()).unwrap(),
        Some(4)
    );
}

#[test]
fn a_fenced_write_is_taken_from_any_current_holder_and_refused_after() {
    let (store, lock) = store_with_permits("docs", 4);
    let a = lock.acquire("d").unwrap();
    let b = lock.acquire("d").unwrap();
    store
        .tx(|tx| {
            tx.put_fenced(&lock, "d", a.fence(), "row-a", "1")?;
            tx.put_fenced(&lock, "d", b.fence(), "row-b", "1")
        })
        .unwrap();
    let (fa, fb) = (a.fence(), b.fence());
    b.release().unwrap();
    let e = store
        .tx(|tx| tx.put_fenced(&lock, "d", fb, "row-b", "2"))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("lock docs: key \"d\": the lease was lost: the grant of fence {fb} has ended")
    );
    store
        .tx(|tx| tx.put_fenced(&lock, "d", fa, "row-a", "2"))
        .unwrap();
    a.release().unwrap();
}

#[test]
fn tasks_and_threads_share_one_line_of_permits() {
    let (_store, lock) = store_with_permits("docs", 2);
    let writer = lock.key("d").exclusive().acquire().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let task = {
        let (lock, order) = (lock.clone(), order.clone());
        rt.spawn(async move {
            lock.key("d")
                .wait(LONG)
                .hold_async(async |l| order.lock().unwrap().push(("task", l.fence())))
                .await
        })
    };
    wait_for("the task in line", || waiters(&lock, "d") == 1);
    let (granted, grants) = mpsc::channel();
    let (go, reader) = holder(&lock, "d", 1, "thread", &granted);
    wait_for("the thread in line", || waiters(&lock, "d") == 2);
    writer.release().unwrap();
    let (_, thread_fence) = grants.recv().unwrap();
    rt.block_on(task).unwrap().unwrap();
    let task_fence = order.lock().unwrap()[0].1;
    assert!(task_fence < thread_fence, "granted in arrival order");
    go.send(()).unwrap();
    reader.join().unwrap();
}

/// Readers and writers hammering one key: the permits inside never exceed
/// the count, writers are alone, and over a million holds go through.
#[test]
fn a_million_holds_never_exceed_the_count() {
    const TOTAL: u32 = 4;
    const THREADS: u64 = 4;
    const HOLDS: u64 = 1_000_000 / THREADS + 1;
    let (store, lock) = store_with_permits("rw", TOTAL);
    let gauge = Gauge::new(TOTAL);
    let writes = Arc::new(AtomicU64::new(0));
    on_threads(0..THREADS, |t| {
        for i in 0..HOLDS {
            // One hold in ten is a writer; the rest take 1 or 2.
            let permits = match (i + t) % 10 {
                0 => TOTAL,
                n => 1 + (n as u32 % 2),
            };
            lock.key("k")
                .permits(permits)
                .wait(LONG)
                .hold(|l| {
                    assert_eq!(l.permits(), permits);
                    gauge.enter(permits);
                    if permits == TOTAL {
                        writes.fetch_add(1, Ordering::Relaxed);
                    }
                    gauge.leave(permits);
                })
                .unwrap();
        }
    });
    let s = lock.stats();
    assert_eq!(s.grants, THREADS * HOLDS);
    assert_eq!((s.held_keys, s.waiters), (0, 0));
    assert!(writes.load(Ordering::Relaxed) > 0);
    store.reclaim_idle();
    assert_eq!(lock.stats().live_keys, 0, "memory back to zero");
}

/// A key of several permits whose record is reclaimed while free starts
/// its next record above every fence the old one gave: fences keep rising
/// across the reclaim, and the grants are all counted.
#[test]
fn fences_keep_rising_across_a_reclaimed_key_of_several_permits() {
    let (store, lock) = store_with_permits("sem", 3);
    let mut last = 0;
    for round in 0..5 {
        let a = lock.key("k").acquire().unwrap();
        let b = lock.key("k").permits(2).acquire().unwrap();
        assert!(a.fence() > last && b.fence() > a.fence(), "round {round}");
        last = b.fence();
        assert_eq!(lock.inspect("k").unwrap().fence, last);
        drop((a, b));
        assert_eq!(
            lock.inspect("k").unwrap().fence,
            last,
            "the last grant's when free"
        );
        store.reclaim_idle();
        assert_eq!(lock.stats().live_keys, 0, "round {round}");
    }
    assert_eq!(lock.stats().grants, 10);
}
