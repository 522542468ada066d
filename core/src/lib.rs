//! Keyed locks with leases, in process.
//!
//! One thing at a time per invoice, per chat, per account: a caller holds a
//! *key* of a named [`Lock`] while a closure runs, and everyone else who
//! wants that key waits in line. A lock has any number of keys, each made
//! on first use and forgotten (its memory given back) once idle.
//!
//! - **FIFO waiting.** Waiters for a key are served in the order they
//!   arrived, threads and async tasks in one line; a release hands the key
//!   straight to the first of them.
//! - **Deadlines and tries.** [`Lock::hold`] waits up to 10 s (choose with
//!   [`KeyHold::wait`]); [`Lock::try_hold`] never waits.
//! - **Guards and fallible closures.** [`Lock::lock`] answers a [`Guard`]
//!   held until dropped (panic included), with no ttl, revoked at maxHold
//!   like a closure hold; [`Lock::lock_async`] and the `'static`
//!   [`OwnedGuard`] ([`Lock::lock_owned`]) are its task forms.
//!   [`Lock::hold_with`] takes a closure answering `Result<T, E>` with
//!   `E: From<Error>`, so the hold's errors and the closure's meet in one `?`.
//! - **Fencing tokens.** Every grant of a key carries a [`fence`](Lease::fence)
//!   greater than every earlier grant's, so storage can refuse a writer
//!   whose turn is over ([`Tx::put_fenced`]).
//! - **Losing a lease.** A lock opened with
//!   [`max_hold`](LockBuilder::max_hold) revokes a holder that keeps a key
//!   too long: the key goes to the next in line, the lease's [`Signal`]
//!   aborts, and `hold` answers [`ErrorKind::Lost`]. A handle-style
//!   [`HeldLease`] (for holders outside the process) also runs out `ttl`
//!   after its last renewal.
//! - **Several keys.** [`Lock::hold_many`] takes a set of keys in one
//!   canonical order under one deadline, so two callers never wait on each
//!   other in a cycle.
//! - **Looking without touching.** [`Lock::inspect`] tells whether a key
//!   is held, its fence, for how long, and how many wait for it;
//!   [`Lock::stats`] counts a lock's keys and events.
//! - **A small transactional table** per [`Store`] ([`Store::tx`]), whose
//!   fenced writes are how a revoked holder is kept from writing late.
//!
//! # A first example
//!
//! ```
//! use holdline::{ErrorKind, Store};
//! use std::time::Duration;
//!
//! let store = Store::new();
//! let invoices = store.lock("invoices").max_hold(Duration::from_secs(120)).open()?;
//!
//! // Wait in line (10 s by default) and hold the key while the closure runs.
//! let fence = invoices.hold("inv-9", |lease| {
//!     // Do the work; pass the fence along to whatever it writes.
//!     lease.fence()
//! })?;
//!
//! // Stand in line at most 30 s.
//! let next = invoices.key("inv-9").wait(Duration::from_secs(30)).hold(|lease| lease.fence())?;
//! assert!(next > fence);
//!
//! // Never wait: `None` (the closure not run) when the key is held.
//! let inner = invoices.hold("inv-9", |_| invoices.try_hold("inv-9", |_| ()))?;
//! assert_eq!(inner?, None);
//!
//! // Numbers are their decimal text: 9 and "9" are one key.
//! invoices.hold(9, |_| assert!(invoices.inspect("9").unwrap().held))?;
//!
//! // Errors name the lock and the key, and end with their kind.
//! let err = invoices.hold("inv-9", |_| invoices.hold("inv-9", |_| ()))?.unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::Invalid);
//! assert_eq!(
//!     err.to_string(),
//!     r#"lock invoices: key "inv-9": hold inside a hold of the same key: invalid"#
//! );
//! # Ok::<(), holdline::Error>(())
//! ```
//!
//! # Async tasks
//!
//! [`Lock::hold_async`] and [`Lock::acquire_async`] wait without blocking
//! the thread, in the same line as threads, with the same rules. The crate
//! depends on no runtime; this example uses tokio. A lease's
//! [`Signal::aborted`] resolves when the lease is lost, for `select!`
//! beside the work it guards.
//!
//! ```
//! use holdline::Store;
//! use std::time::Duration;
//!
//! let rt = tokio::runtime::Builder::new_multi_thread()
//!     .worker_threads(2)
//!     .enable_time()
//!     .build()
//!     .unwrap();
//! let store = Store::new();
//! let jobs = store.lock("jobs").max_hold(Duration::from_millis(50)).open()?;
//!
//! rt.block_on(async {
//!     // Hold while an async closure runs.
//!     let fence = jobs
//!         .hold_async("job-1", async |lease| {
//!             tokio::time::sleep(Duration::from_millis(1)).await;
//!             lease.fence()
//!         })
//!         .await?;
//!     assert!(fence > 0);
//!
//!     // Stop the work when the lease is lost (here: at its 50 ms maxHold).
//!     let lease = jobs.key("job-2").wait(Duration::from_secs(5)).acquire_async().await?;
//!     let answer = tokio::select! {
//!         _ = lease.signal().aborted() => "stopped: the lease was lost",
//!         _ = tokio::time::sleep(Duration::from_secs(30)) => "done",
//!     };
//!     assert_eq!(answer, "stopped: the lease was lost");
//!     assert!(lease.release().is_err()); // lost before it was released
//!     Ok::<(), holdline::Error>(())
//! })?;
//! # Ok::<(), holdline::Error>(())
//! ```
//!
//! # Errors
//!
//! Every call fails with one [`Error`] type; branch on its [`ErrorKind`].
//! Its text names the lock and the key, says what happened, and ends with
//! the kind:
//!
//! | kind | when | example text |
//! | --- | --- | --- |
//! | [`InUse`](ErrorKind::InUse) | the wait passed with the key still held | `lock invoices: key "9": held past the hold's wait: in use` |
//! | [`Lost`](ErrorKind::Lost) | the lease was revoked at its maxHold, ran out at its ttl, or its store closed | `lock invoices: key "m": the lease was lost: it was revoked at its maxHold` |
//! | [`Limit`](ErrorKind::Limit) | the key's line already holds [`MAX_WAITERS`] waiters | `lock invoices: key "7": 10000 waiters already stand in line: limit` |
//! | [`Invalid`](ErrorKind::Invalid) | a bad lock name or key, a hold of a key this thread holds, a hold inside a transaction | `lock invoices: key "7": hold inside a hold of the same key: invalid` |
//! | [`Closed`](ErrorKind::Closed) | the store was closed | `lock invoices: key "7": the store is closed: closed` |
//!
//! Lock names are 1 to 128 ASCII letters, digits and `_ - . :`; keys are 1
//! to 1,024 bytes of UTF-8 without control characters.

// Module map, bottom-up: each module uses only modules listed before it
// (none imports one that imports it back).
//
// - `counters`: how waiters waited (only with the `wait-counters` feature).
//   `sync`: the loom facade every atomic, lock, park and clock read goes
//   through, and nothing else. `spin`: how long a waiter spins before it
//   parks, and the line lock's backoff. `parking`: where a thread sleeps
//   while a word's bit is held, a table of buckets by the word's address. `error`: the one error type. `ctx`:
//   a thread's running holds, each listed by a drop guard. `timer`: the
//   wheel, a plain data structure. `line_list`: the intrusive circular
//   list, known by its tail, that a key's waiters stand in (uses only
//   `sync`).
// - `key`: key and lock-name text. `outcome`: a hold's value with its loss.
// - `permits`: the book of a key of several permits, which grants hold
//   it (a lock of one permit needs none).
// - `record`: one key's state word and waiter line. `record_ref`: the
//   pointers to a record a grant or a waiter keeps, and what keeps each
//   alive. `table`: key text to records, reclaiming idle ones. `board`: an
//   election's board (its term, version and waiting observers).
//   `lock_shared`: a lock's table, counters and election boards.
//   `hold_watch`: the closure holds with a maxHold now running, a slot
//   each in their thread's page, which the timer scans every tick.
// - `signal_hub`: wakes who waits on lease signals. `driver`: the timer
//   wheel, the registry of timed leases and the background thread (fires
//   due leases through its `Due` trait, sweeps through a callback).
// - `store_core`: what a store's locks and leases share (closed flag,
//   clock, signal hub, driver, locks by name); sweeps and `close`.
//   `heartbeat`: when a group of leases was last heard of (one beat
//   renews them all).
// - `lease`: a lease's status machine and its one `end`; `Lease`,
//   `HeldLease`, `Signal`.
// - `lock`: `Lock`, `KeyHold`, `Grant`; the fast path and a thread's wait.
//   `line_wait`: a task's wait in a line. `hold_async`: the async holds.
// - `inspect`, `many`, `tx`: a key's snapshot, several keys, transactions.
//   `guard`: holds until a guard is dropped (borrowed, owned, async).
//   `fallible`: closure holds whose error type absorbs holdline's.
// - `election`: elections among a process's threads and tasks in etcd's
//   shape (campaign, leader, observe, proclaim, resign), made of holds.
// - `store`: the `Store` handle, opening locks, `close`, `tx`; the
//   `Heartbeat` handle.
// - `wire`: what the server and the clients share with the core, the
//   texts and defaults a lock speaks on the wire (kind words, durations,
//   checks of names and keys), read from the modules above.

#![warn(missing_docs)]
// Under loom the background thread and some clock helpers are not built.
#![cfg_attr(loom, allow(dead_code))]

mod board;
/// Wait diagnostics (counted only with the `wait-counters` feature).
pub mod counters;
mod ctx;
mod driver;
mod election;
mod error;
mod fallible;
mod guard;
mod heartbeat;
mod hold_async;
mod hold_watch;
mod inspect;
mod key;
mod lease;
mod line_list;
mod line_wait;
mod lock;
mod lock_shared;
mod many;
mod outcome;
mod parking;
mod permits;
mod record;
mod record_ref;
mod signal_hub;
mod spin;
mod store;
mod store_core;
mod sync;
mod table;
mod timer;
mod tx;
#[doc(hidden)]
pub mod wire;

pub use election::{Election, Leader, Leadership, Observer};
pub use error::{Error, ErrorKind};
pub use guard::{Guard, OwnedGuard, OwnedKeyHold};
pub use inspect::KeyInfo;
pub use key::{IntoKey, Key, KeyRef, MAX_KEY_BYTES, MAX_NAME_BYTES};
pub use lease::{Aborted, EndReason, HeldLease, Lease, Signal};
pub use lock::{
    Fairness, KeyHold, Lock, LockStats, DEFAULT_BYPASS_BOUND, DEFAULT_WAIT, MAX_WAITERS,
};
pub use many::KeySet;
pub use outcome::Outcome;
pub use store::{Heartbeat, LockBuilder, Store, DEFAULT_TTL, MAX_PERMITS};
pub use tx::Tx;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
