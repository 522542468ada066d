//! Helpers shared by the integration tests.

#![allow(dead_code)]

use holdline::{Error, Lock, Store};
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
