//! Keyed locks with leases.
//!
//! A [`Store`] holds named [`Lock`]s; a lock holds any number of keys, each
//! created on first use and forgotten when idle. [`Lock::hold`] waits in a
//! FIFO line for a key (up to a deadline), holds it while a closure runs, and
//! lets it go after. Each grant carries a fencing token ([`Lease::fence`])
//! and a loss [`Signal`]; `max_hold` revokes a hung holder, and `ttl` lets a
//! handle-style [`HeldLease`] run out when its holder stops renewing.
//!
//! ```
//! use holdline::{Store, ErrorKind};
//! use std::time::Duration;
//!
//! let store = Store::new();
//! let invoices = store.lock("invoices").max_hold(Duration::from_secs(120)).open()?;
//!
//! let charged = invoices.hold("inv-9", |lease| {
//!     // Do the work; pass the fence to whatever it writes to.
//!     lease.fence()
//! })?;
//! assert!(charged > 0);
//!
//! // Numbers are their decimal text: 9 and "9" are one key.
//! let inner = invoices.hold(&9, |_| invoices.try_hold("9", |_| ()))?;
//! assert_eq!(inner?, None); // held (by us), so not run
//!
//! let err = invoices.key("").hold(|_| ()).unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::Invalid);
//! # Ok::<(), holdline::Error>(())
//! ```
//!
//! Module map: [`sync`](crate) is the loom facade every atomic goes through;
//! `record` is one key's state word and waiter line; `table` maps key text to
//! records and reclaims idle ones; `timer` is the wheel behind maxHold and
//! ttl; `lease`, `lock`, `store` and `tx` are the public surface.

#![warn(missing_docs)]
// Under loom the background thread and some clock helpers are not built.
#![cfg_attr(loom, allow(dead_code))]

mod ctx;
mod error;
mod inspect;
mod key;
mod lease;
mod line_wait;
mod lock;
mod many;
mod outcome;
mod record;
mod store;
mod sync;
mod table;
mod timer;
mod tx;

pub use error::{Error, ErrorKind};
pub use inspect::KeyInfo;
pub use key::{Key, KeyRef, MAX_KEY_BYTES, MAX_NAME_BYTES};
pub use lease::{Aborted, EndReason, HeldLease, Lease, Signal};
pub use lock::{KeyHold, Lock, LockStats, DEFAULT_WAIT, MAX_WAITERS};
pub use many::KeySet;
pub use outcome::Outcome;
pub use store::{LockBuilder, Store};
pub use tx::Tx;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
