//! Helpers shared by the integration tests.

#![allow(dead_code)]

use holdline::{Error, ErrorKind, Lock, Store};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// A hold running on another thread until told to let go.
pub struct Holder {
    go: mpsc::Sender<()>,
    thread: thread::JoinHandle<Result<(), Error>>,
}

impl Holder {
    /// Holds `key` of `lock` on a new thread; answers once it is held.
    pub fn start(lock: &Lock, key: &str) -> Holder {
        let (held_tx, held_rx) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let (lock, key) = (lock.clone(), key.to_owned());
        let thread = thread::spawn(move || {
            lock.hold(key.as_str(), |_| {
                held_tx.send(()).unwrap();
                let _ = go_rx.recv();
            })
        });
        held_rx.recv().expect("the holder thread got the key");
        Holder { go, thread }
    }

    /// Lets the key go and answers what the hold answered.
    pub fn release(self) -> Result<(), Error> {
        let _ = self.go.send(());
        self.thread.join().expect("the holder thread did not panic")
    }
}

/// Runs `body(id)` on a thread of its own for each of `ids`, all at once,
/// and waits for every one (a panic in any fails the test).
pub fn on_threads<T: Send>(ids: impl IntoIterator<Item = T>, body: impl Fn(T) + Sync) {
    thread::scope(|s| {
        for id in ids {
            let body = &body;
            s.spawn(move || body(id));
        }
    });
}

/// Polls `cond` every millisecond, failing the test after a minute.
pub fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    wait_for_within(what, Duration::from_secs(60), cond)
}

/// Polls `cond` every millisecond, failing the test after `patience`.
pub fn wait_for_within(what: &str, patience: Duration, mut cond: impl FnMut() -> bool) {
    let started = Instant::now();
    while !cond() {
        assert!(started.elapsed() < patience, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// `name` opened on `store` with a ttl of `ttl_ms` and, where given, a
/// max hold of `max_hold_ms`.
pub fn ttl_lock(store: &Store, name: &str, ttl_ms: u64, max_hold_ms: Option<u64>) -> Lock {
    let builder = store.lock(name).ttl(Duration::from_millis(ttl_ms));
    match max_hold_ms {
        Some(ms) => builder.max_hold(Duration::from_millis(ms)),
        None => builder,
    }
    .open()
    .unwrap()
}

/// Asserts that `r` failed, with exactly `text` as its error's text.
#[track_caller]
pub fn assert_fails_with<T: std::fmt::Debug>(r: Result<T, Error>, text: &str) {
    assert_eq!(r.unwrap_err().to_string(), text);
}

/// Runs `op`, which must fail within `limit` (at once, not after a
/// wait), and answers its error.
#[track_caller]
pub fn fails_within<T: std::fmt::Debug>(
    limit: Duration,
    op: impl FnOnce() -> Result<T, Error>,
) -> Error {
    let started = Instant::now();
    let e = op().unwrap_err();
    let took = started.elapsed();
    assert!(
        took < limit,
        "failed after {took:?}, not within {limit:?}: {e}"
    );
    e
}

/// Asserts `e`'s kind, and exactly its text.
#[track_caller]
pub fn assert_error(e: &Error, kind: ErrorKind, text: &str) {
    assert_eq!(e.kind(), kind, "{e}");
    assert_eq!(e.to_string(), text);
}

/// Asserts `e`'s kind, and that its text starts with `prefix`.
#[track_caller]
pub fn assert_error_starts(e: &Error, kind: ErrorKind, prefix: &str) {
    assert_eq!(e.kind(), kind, "{e}");
    assert!(e.to_string().starts_with(prefix), "{e}");
}

/// A new store with `rows` (key, value) written by one committed
/// transaction.
pub fn store_with_rows(rows: &[(&str, &str)]) -> Store {
    let store = Store::new();
    store
        .tx(|tx| {
            for &(key, value) in rows {
                tx.put(key, value);
            }
            Ok(())
        })
        .unwrap();
    store
}

/// A new store and its lock `name` of `permits` permits per key.
pub fn store_with_permits(name: &str, permits: u32) -> (Store, Lock) {
    let store = Store::new();
    let lock = store.lock(name).permits(permits).open().unwrap();
    (store, lock)
}

/// A new store and its lock `name`, opened with the defaults, with
/// `key` held by a [`Holder`] thread.
pub fn store_with_held(name: &str, key: &str) -> (Store, Lock, Holder) {
    let (store, lock) = store_with(name);
    let holder = Holder::start(&lock, key);
    (store, lock, holder)
}

/// A new store and its lock `name`, opened with the defaults.
pub fn store_with(name: &str) -> (Store, Lock) {
    let store = Store::new();
    let lock = store.lock(name).open().unwrap();
    (store, lock)
}

/// `name` opened on `store`, its holds revoked `max_hold_ms` after they
/// begin.
pub fn revoking_lock(store: &Store, name: &str, max_hold_ms: u64) -> Lock {
    store
        .lock(name)
        .max_hold(Duration::from_millis(max_hold_ms))
        .open()
        .unwrap()
}
