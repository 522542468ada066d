//! Bounded bypass (`Fairness::BoundedBypass`): a running caller may take a
//! free key ahead of the line while the first in line is within its bound;
//! past it, the key passes in line order until the line is served. FIFO
//! stays the default. The waiters here are tasks polled by hand, so each
//! test decides exactly when a waiter runs: a task not polled is a waiter
//! that sleeps.

mod common;

use common::on_threads;
use holdline::{ErrorKind, Fairness, HeldLease, Lock, Store};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::Duration;

type Acquiring<'a> = Pin<Box<dyn Future<Output = Result<HeldLease, holdline::Error>> + Send + 'a>>;

/// A waker that counts its wakes.
#[derive(Default)]
struct Counted(AtomicUsize);

impl Wake for Counted {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A task waiting for a key, polled by hand.
struct Task<'a> {
    future: Acquiring<'a>,
    woken: Arc<Counted>,
}

impl<'a> Task<'a> {
    /// A task waiting for `key` of `lock`, polled once: it comes to the
    /// line (the key must be held).
    fn start(lock: &'a Lock, key: &'static str) -> Task<'a> {
        Task::of(Box::pin(lock.acquire_async(key)))
    }

    fn of(future: Acquiring<'a>) -> Task<'a> {
        let mut task = Task {
            future,
            woken: Arc::default(),
        };
        assert!(task.poll().is_none(), "the key is held: the task waits");
        task
    }

    fn poll(&mut self) -> Option<Result<HeldLease, holdline::Error>> {
        let waker = Waker::from(self.woken.clone());
        match self.future.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(r) => Some(r),
            Poll::Pending => None,
        }
    }

    fn wakes(&self) -> usize {
        self.woken.0.load(Ordering::SeqCst)
    }
}

fn store_and(fairness: Fairness) -> (Store, Lock) {
    let store = Store::new();
    let lock = store.lock("chats").fairness(fairness).open().unwrap();
    (store, lock)
}

fn bounded(bound: Duration) -> (Store, Lock) {
    store_and(Fairness::BoundedBypass(bound))
}

/// Whether a caller that runs now takes the key (and lets it go at once).
fn running_caller_takes(lock: &Lock, key: &str) -> bool {
    lock.try_hold(key, |_| ()).unwrap().is_some()
}

#[test]
fn fifo_is_the_default_and_hands_the_key_to_a_sleeping_waiter() {
    let store = Store::new();
    let lock = store.lock("chats").open().unwrap();
    let holder = lock.acquire("chat-1").unwrap();
    let mut task = Task::start(&lock, "chat-1");
    holder.release().unwrap();
    assert!(
        !running_caller_takes(&lock, "chat-1"),
        "FIFO: the key went to the waiter, asleep or not"
    );
    assert_eq!(task.wakes(), 1, "the grant woke the task");
    let lease = task.poll().expect("granted").unwrap();
    lease.release().unwrap();
}

#[test]
fn a_running_caller_takes_the_key_ahead_of_a_waiter_within_its_bound() {
    let (_store, lock) = bounded(Duration::from_secs(3600));
    let holder = lock.acquire("chat-1").unwrap();
    let first_fence = holder.fence();
    let mut task = Task::start(&lock, "chat-1");
    holder.release().unwrap();
    assert_eq!(task.wakes(), 1, "the offer woke the task");
    let info = lock.inspect("chat-1").unwrap();
    assert!(!info.held, "left free for whoever comes first");
    assert_eq!(info.waiters, 1, "the waiter keeps its place");
    // A running caller comes first: it takes the key, bypassing the task.
    let bypass = lock.acquire("chat-1").unwrap();
    assert_eq!(
        bypass.fence(),
        first_fence + 1,
        "fences rise in grant order"
    );
    assert!(
        task.poll().is_none(),
        "bypassed: the task waits on, in place"
    );
    assert_eq!(lock.inspect("chat-1").unwrap().waiters, 1);
    bypass.release().unwrap();
    assert_eq!(task.wakes(), 2, "offered again");
    let lease = task.poll().expect("the task takes the free key").unwrap();
    assert_eq!(lease.fence(), first_fence + 2);
    let info = lock.inspect("chat-1").unwrap();
    assert!(info.held);
    assert_eq!((info.fence, info.waiters), (first_fence + 2, 0));
    lease.release().unwrap();
    assert!(running_caller_takes(&lock, "chat-1"));
}

#[test]
fn past_its_bound_the_waiter_is_handed_the_key_and_the_line_is_served_in_order() {
    let (_store, lock) = bounded(Duration::from_millis(20));
    let holder = lock.acquire("chat-1").unwrap();
    let mut first = Task::start(&lock, "chat-1");
    let mut second = Task::start(&lock, "chat-1");
    // The first release to find `first` first in line starts its bound.
    holder.release().unwrap();
    let bypass = lock.acquire("chat-1").expect("within the bound: bypassed");
    // The first acts on its offer and finds the key taken: the release
    // after that looks at its bound again.
    assert!(first.poll().is_none(), "bypassed");
    thread::sleep(Duration::from_millis(60));
    bypass.release().unwrap();
    assert!(
        !running_caller_takes(&lock, "chat-1"),
        "the first waited past its bound: handed the key"
    );
    let lease = first.poll().expect("granted").unwrap();
    lease.release().unwrap();
    assert!(
        !running_caller_takes(&lock, "chat-1"),
        "the line as it stood is served in order, the second's bound unstarted"
    );
    let lease = second.poll().expect("granted").unwrap();
    lease.release().unwrap();
    // The run was served: bypass is allowed again.
    let holder = lock.acquire("chat-1").unwrap();
    let mut third = Task::start(&lock, "chat-1");
    holder.release().unwrap();
    assert!(
        running_caller_takes(&lock, "chat-1"),
        "a new head, a new bound"
    );
    third
        .poll()
        .expect("the third takes it")
        .unwrap()
        .release()
        .unwrap();
}

#[test]
fn an_offered_waiter_that_leaves_passes_the_key_on() {
    let (store, lock) = bounded(Duration::from_secs(3600));
    let fifo = store.lock("chats").fairness(Fairness::Fifo).open().unwrap();
    let holder = lock.acquire("chat-1").unwrap();
    let wait = Duration::from_millis(30);
    let mut leaving = Task::of(Box::pin(lock.key("chat-1").wait(wait).acquire_async()));
    let mut next = Task::start(&fifo, "chat-1");
    holder.release().unwrap();
    assert_eq!(leaving.wakes(), 1, "offered");
    thread::sleep(Duration::from_millis(60));
    let err = leaving.poll().expect("its wait ended").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InUse);
    // The next in line came through a FIFO handle: it is handed the key.
    assert!(!running_caller_takes(&lock, "chat-1"));
    assert_eq!(next.wakes(), 1);
    next.poll().expect("granted").unwrap().release().unwrap();
    assert_eq!(lock.inspect("chat-1").map(|i| i.waiters), Some(0));
}

#[test]
fn threads_on_a_hot_key_exclude_each_other_with_fences_rising() {
    let (_store, lock) = bounded(Duration::from_micros(200));
    let last_fence = Mutex::new(0u64);
    let inside = AtomicU64::new(0);
    on_threads(0..6, |_| {
        for _ in 0..3000 {
            lock.hold("hot", |lease| {
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                let mut last = last_fence.lock().unwrap();
                assert!(lease.fence() > *last, "fences rise in grant order");
                *last = lease.fence();
                drop(last);
                inside.fetch_sub(1, Ordering::SeqCst);
            })
            .unwrap();
        }
    });
    assert_eq!(lock.stats().grants, 6 * 3000);
    assert_eq!(lock.stats().waiters, 0);
    assert_eq!(lock.inspect("hot").map(|i| i.held), Some(false));
}

/// A read-write key (2 permits: readers take one, writers both) with a
/// writer task waiting behind two readers, one of which lets go.
fn readers_and_a_waiting_writer(lock: &Lock) -> (HeldLease, Task<'_>) {
    let a = lock.key("doc").try_acquire().unwrap().expect("reader a");
    let b = lock.key("doc").try_acquire().unwrap().expect("reader b");
    let writer = Task::of(Box::pin(lock.key("doc").exclusive().acquire_async()));
    b.release().unwrap();
    (a, writer)
}

fn rw_lock(store: &Store, fairness: Fairness) -> Lock {
    store
        .lock("docs")
        .permits(2)
        .fairness(fairness)
        .open()
        .unwrap()
}

#[test]
fn fifo_readers_never_join_ahead_of_a_waiting_writer() {
    let store = Store::new();
    let lock = rw_lock(&store, Fairness::Fifo);
    let (a, mut writer) = readers_and_a_waiting_writer(&lock);
    assert!(lock.key("doc").try_acquire().unwrap().is_none());
    a.release().unwrap();
    writer.poll().expect("granted").unwrap().release().unwrap();
}

#[test]
fn a_reader_joins_readers_ahead_of_a_waiting_writer_only_within_its_bound() {
    let store = Store::new();
    let lock = rw_lock(&store, Fairness::BoundedBypass(Duration::from_millis(20)));
    let (a, mut writer) = readers_and_a_waiting_writer(&lock);
    let c = lock.key("doc").try_acquire().unwrap();
    let c = c.expect("within the writer's bound: a reader joins");
    assert!(writer.poll().is_none(), "the writer waits on, in place");
    thread::sleep(Duration::from_millis(60));
    c.release().unwrap();
    assert!(
        lock.key("doc").try_acquire().unwrap().is_none(),
        "past the writer's bound: no reader joins"
    );
    a.release().unwrap();
    let w = writer.poll().expect("the writer is granted").unwrap();
    assert!(lock.key("doc").try_acquire().unwrap().is_none());
    w.release().unwrap();
    let info = lock.inspect("doc").unwrap();
    assert_eq!((info.holders, info.waiters), (0, 0));
}
