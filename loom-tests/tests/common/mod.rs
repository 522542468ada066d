//! What the loom models share: the model runner, the "never two inside"
//! check every holder's body runs through, and the end-state check.

#![allow(dead_code)]

use holdline::{Lock, LockBuilder, Store};
use loom::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A wait that parks for real under loom (see `models.rs`).
pub const FOREVER: Duration = Duration::from_secs(2 * 3600);

/// Runs `f` in every interleaving with at most `bound` preemptions (unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise). Bugs in this code are races of
/// two or three steps (a CAS against a store, a wake against a park), which
/// a bound of 2 to 3 preemptions reaches; the loom authors report most
/// real bugs need no more than 2.
pub fn check(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    // The store's setup and the final checks (stats, reclaim) run many
    // steps on one thread; they add branches but no interleavings.
    b.max_branches = 1_000_000;
    if std::env::var("LOOM_MAX_PREEMPTIONS").is_err() {
        b.preemption_bound = Some(bound);
    }
    b.check(f);
}

/// Never two inside: every holder's body runs through this, with one
/// counter per key.
pub fn inside(count: &AtomicUsize) {
    assert_eq!(
        count.fetch_add(1, Ordering::SeqCst),
        0,
        "two holders inside"
    );
    count.fetch_sub(1, Ordering::SeqCst);
}

/// Asserts a key is free and nobody waits, then that its state goes away.
pub fn assert_idle_and_reclaimed(store: &Store, lock: &Lock, key: &str) {
    assert_eq!(
        lock.try_hold(key, |_| ()).unwrap(),
        Some(()),
        "the key ends free"
    );
    let s = lock.stats();
    assert_eq!((s.held_keys, s.waiters), (0, 0));
    store.reclaim_idle();
    assert_eq!(
        lock.stats().live_keys,
        0,
        "the idle key's state is reclaimed"
    );
}

/// How a model opens its lock: the builder's settings.
pub type Open = for<'s> fn(LockBuilder<'s>) -> LockBuilder<'s>;

/// A lock of `N` permits per key.
pub fn permits<const N: u32>(lock: LockBuilder<'_>) -> LockBuilder<'_> {
    lock.permits(N)
}

/// Runs `body` in every interleaving (see [`check`]) against a new store
/// and its lock `l`, opened with the defaults; after it, key `k` must be
/// free, with nobody waiting, and its state reclaimed.
pub fn check_idle(bound: usize, body: impl Fn(&Store, &Lock) + Sync + Send + 'static) {
    check_idle_with(bound, |lock| lock, body);
}

/// [`check_idle`] with the lock opened as `open` sets it up.
pub fn check_idle_with(
    bound: usize,
    open: Open,
    body: impl Fn(&Store, &Lock) + Sync + Send + 'static,
) {
    check(bound, move || {
        let store = Store::new();
        let lock = open(store.lock("l")).open().unwrap();
        body(&store, &lock);
        assert_idle_and_reclaimed(&store, &lock, "k");
    });
}

/// A thread that waits in line for `key` as long as it takes, holds it
/// through [`inside`], and answers its grant's fence.
pub fn spawn_waiting_holder(
    lock: &Lock,
    key: &'static str,
    count: &loom::sync::Arc<AtomicUsize>,
) -> loom::thread::JoinHandle<u64> {
    let (lock, count) = (lock.clone(), count.clone());
    loom::thread::spawn(move || {
        lock.key(key)
            .wait(FOREVER)
            .hold(|l| (inside(&count), l.fence()).1)
            .unwrap()
    })
}
