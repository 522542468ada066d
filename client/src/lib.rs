//! The Rust client of `holdline serve`: the embedded API's shape over a
//! connection, async, on tokio.
//!
//! ```no_run
//! use holdline_client::{ErrorKind, Store};
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), holdline_client::Error> {
//! let store = Store::connect("127.0.0.1:7380").await?;
//! let invoices = store.lock("invoices").max_hold(Duration::from_secs(120)).open()?;
//!
//! let fence = invoices.hold("inv-9", async |lease| {
//!     // Do the work; pass the fence to whatever it writes to, and stop
//!     // when `lease.signal().aborted()` resolves.
//!     lease.fence()
//! }).await?;
//! assert!(fence > 0);
//!
//! let tried = invoices.key(&9).wait(Duration::ZERO).hold(async |_| ()).await;
//! if let Err(e) = tried {
//!     assert_eq!(e.kind(), ErrorKind::InUse); // someone else holds it
//! }
//! # Ok(()) }
//! ```
//!
//! Module map: `connection` is the low-level RESP [`Connection`]; `driver`
//! is the background task of each pooled connection (renewal, pushes, loss
//! on a dropped connection); `store`, `lock` and `lease` are the public
//! surface; `check` holds the local checks; `address` the address forms;
//! `texts` the client-made texts every holdline client shares; `error` the
//! one error type.

#![warn(missing_docs)]

mod address;
mod check;
mod connection;
mod driver;
mod error;
mod lease;
mod lock;
mod store;
#[doc(hidden)]
pub mod texts;

pub use address::DEFAULT_PORT;
pub use connection::{Connection, PushHandler, MAX_REPLY_FRAME};
pub use error::Error;
pub use holdline::{ErrorKind, Key, LockStats};
pub use holdline_resp::Value;
pub use lease::{Lease, Signal};
pub use lock::{HeldLease, KeyHold, Lock};
pub use store::{LockBuilder, Store, CONNECT_TIMEOUT, DEFAULT_TTL, MAX_IDLE_CONNECTIONS};

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
