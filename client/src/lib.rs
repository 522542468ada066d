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
//!
//! // Permits: a semaphore of five per key, and a read-write lock.
//! let providers = store.lock("providers").permits(5).open()?;
//! providers.key("stripe").permits(2).hold(async |lease| lease.permits()).await?;
//! let docs = store.lock("docs").permits(1024).open()?;
//! docs.hold("doc-7", async |_| ()).await?;                    // a reader: one permit
//! docs.key("doc-7").exclusive().hold(async |_| ()).await?;    // a writer: all of them
//! # Ok(()) }
//! ```
//!
//! Module map, bottom-up (each module uses only those above it; checked by
//! `tests/module_graph.rs`):
//! - `error`: the one error type; `texts`: the texts every holdline client
//!   makes itself (`clients/texts.json`); `address`: the address forms;
//! - `options`: [`ConnectOptions`]: the user and token, and TLS's trust and client
//!   certificate;
//! - `slot`: a key's slot ([`key_slot`], CRC16 as Redis Cluster's);
//!   `cluster`: a cluster's slot map and its `MOVED`/`CLUSTERDOWN` answers;
//! - `stream`: the bytes under a connection, plain TCP or TLS;
//! - `connection`: the low-level RESP [`Connection`];
//! - `lease`: a lease, its loss signal and its local deadline;
//! - `driver`: each pooled connection's background task (renewal, replies,
//!   pushes, loss on a dropped or silent connection);
//! - `node`: one server's address and its connection pool;
//! - `store`: the servers (one, or a cluster's nodes and slot map);
//! - `route`: one keyed command to its key's node, following `MOVED` and
//!   `CLUSTERDOWN`;
//! - `lock`: a named lock, its builder, counters and fenced writes;
//! - `follow`: a lease followed to the node its partition was handed to
//!   (`SECRET`, the `moved` push, `REATTACH`);
//! - `hold`: holding keys: `hold`, `try_hold`, `key(..)` (its wait and
//!   permits), [`HeldLease`];
//! - `inspect`: one key's state on the server, [`KeyInfo`], its holders;
//! - `observe`: a key's holder watched (`OBSERVE`), the [`Observer`]
//!   stream of [`Leader`]s;
//! - `election`: [`Election`]s with etcd's shape (campaign, [`Leadership`],
//!   leader, observe), made of a hold with a note and an observer.
//!
//! Names, keys and texts in the core's shape come from `holdline::wire`.

#![warn(missing_docs)]

mod address;
mod cluster;
mod connection;
mod driver;
mod election;
mod error;
mod follow;
mod hold;
mod inspect;
mod lease;
mod lock;
mod node;
mod observe;
mod options;
mod route;
mod slot;
mod store;
mod stream;
#[doc(hidden)]
pub mod texts;

pub use address::DEFAULT_PORT;
// The low-level connection drives any RESP server (the benchmark harness's
// Redis rows use it); it is not the client's API.
#[doc(hidden)]
pub use connection::{Connection, PushHandler, MAX_REPLY_BYTES, MAX_REPLY_FRAME};
pub use election::{Election, Leadership};
pub use error::Error;
pub use hold::{HeldLease, KeyHold};
pub use holdline::wire::DEFAULT_TTL;
pub use holdline::{ErrorKind, Fairness, Key, LockStats};
pub use holdline_resp::Value;
pub use inspect::{Holder, KeyInfo};
pub use lease::{Lease, Signal};
pub use lock::{Lock, LockBuilder};
pub use node::{CONNECT_TIMEOUT, MAX_IDLE_CONNECTIONS};
pub use observe::{Leader, Observer};
pub use options::ConnectOptions;
pub use slot::key_slot;
pub use store::Store;
/// The rustls this client speaks TLS with, for building a `ClientConfig`
/// for [`ConnectOptions::tls_config`] of the same version.
pub use tokio_rustls::rustls;

/// The numbers of `clients/texts.json`'s rules this client keeps, by their
/// names there, for the test that compares them with the table.
#[doc(hidden)]
pub fn rules() -> Vec<(&'static str, u64)> {
    use cluster::{
        CLUSTER_DOWN_PAUSE, CLUSTER_DOWN_TRIES, MAP_REFRESH_NODE_TIMEOUT, MAX_REDIRECTS,
    };
    let ms = |d: std::time::Duration| d.as_millis() as u64;
    vec![
        ("default_port", u64::from(DEFAULT_PORT)),
        ("connect_timeout_ms", ms(CONNECT_TIMEOUT)),
        ("max_redirects", u64::from(MAX_REDIRECTS)),
        ("cluster_down_tries", u64::from(CLUSTER_DOWN_TRIES)),
        ("cluster_down_pause_ms", ms(CLUSTER_DOWN_PAUSE)),
        ("map_refresh_node_timeout_ms", ms(MAP_REFRESH_NODE_TIMEOUT)),
        ("max_reply_bytes", MAX_REPLY_BYTES as u64),
    ]
}

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
