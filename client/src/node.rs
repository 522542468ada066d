//! One server of a store (the only one, or a node of a cluster): its
//! address, how connections to it are made, and its small pool of idle
//! connections, each with its background task.

use crate::connection::Connection;
use crate::driver::{Conn, Failure};
use crate::error::Error;
use crate::options::{Auth, Tls};
use crate::texts;
use holdline::wire::Scope;
use holdline::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Idle connections kept for reuse, per node; more than this are closed
/// when let go.
pub const MAX_IDLE_CONNECTIONS: usize = 64;

/// How long a new connection may take to connect and answer `HELLO`
/// (no option changes it); a server silent for that long fails the
/// connect `connect_silent` (`store: the server at HOST:PORT answered
/// nothing for 10s: closed`).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What every connection of one store is made with, and the store's flags.
pub(crate) struct Dial {
    /// The user and token said in each `HELLO`.
    pub(crate) auth: Option<Auth>,
    /// The TLS of the first address (its name replaced for each node).
    pub(crate) tls: Option<Tls>,
    /// The largest reply a connection takes (`max_reply_bytes`).
    pub(crate) max_reply: usize,
    pub(crate) closed: AtomicBool,
    /// Set when a connection failed (or could not be made): a cluster's
    /// map may be out of date, and is asked for again before the next
    /// command is routed.
    pub(crate) failed: Arc<AtomicBool>,
}

impl Dial {
    pub(crate) fn new(auth: Option<Auth>, tls: Option<Tls>, max_reply: usize) -> Dial {
        Dial {
            auth,
            tls,
            max_reply,
            closed: AtomicBool::new(false),
            failed: Arc::new(AtomicBool::new(false)),
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// `closed` once the store is.
    pub(crate) fn check_open(&self, scope: Scope<'_>) -> Result<(), Error> {
        if self.is_closed() {
            Err(Error::local(
                ErrorKind::Closed,
                scope,
                "the store is closed",
            ))
        } else {
            Ok(())
        }
    }

    /// Marks the map as worth asking for again.
    pub(crate) fn mark_failed(&self) {
        // Relaxed: a hint, ordered by nothing.
        self.failed.store(true, Ordering::Relaxed);
    }
}

/// One server's address and pool.
pub(crate) struct Node {
    /// `host:port`, as dialled.
    pub(crate) addr: Arc<str>,
    tls: Option<Tls>,
    dial: Arc<Dial>,
    idle: Mutex<Vec<Conn>>,
    /// Set when a connection to it failed (or could not be made), or it
    /// did not answer `CLUSTER SLOTS` in time; cleared when it answers
    /// one. Such a node is asked for the map last.
    failing: Arc<AtomicBool>,
}

impl Node {
    /// The node at `addr` (`host:port`); its TLS, if any, checks `host`.
    pub(crate) fn new(addr: Arc<str>, dial: Arc<Dial>) -> Result<Node, Error> {
        let tls = match &dial.tls {
            Some(tls) => Some(tls.for_host(host_of(&addr))?),
            None => None,
        };
        Ok(Node {
            addr,
            tls,
            dial,
            idle: Mutex::new(Vec::new()),
            failing: Arc::new(AtomicBool::new(false)),
        })
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Conn>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh connection, after `HELLO` (10 s at most).
    pub(crate) async fn new_connection(&self) -> Result<Connection, Error> {
        let addr = &*self.addr;
        let open = Connection::open(
            addr,
            addr.to_owned(),
            self.dial.auth.as_ref(),
            self.tls.as_ref(),
            self.dial.max_reply,
            true,
        );
        let opened = tokio::time::timeout(CONNECT_TIMEOUT, open)
            .await
            .unwrap_or_else(|_| Err(texts::connect_silent(addr, CONNECT_TIMEOUT)));
        if opened.as_ref().is_err_and(Error::is_connection) {
            self.failure().mark();
        }
        opened
    }

    /// What this node's connections mark when they fail.
    fn failure(&self) -> Failure {
        Failure {
            map: self.dial.failed.clone(),
            node: self.failing.clone(),
        }
    }

    /// A fresh pooled connection (not in the pool until given back).
    pub(crate) async fn new_conn(&self) -> Result<Conn, Error> {
        let conn = self.new_connection().await?;
        Ok(Conn::spawn(conn, self.failure()))
    }

    /// An idle connection, or a new one.
    pub(crate) async fn checkout(&self, scope: Scope<'_>) -> Result<Conn, Error> {
        self.dial.check_open(scope)?;
        loop {
            let Some(conn) = self.idle().pop() else { break };
            if !conn.is_dead() {
                return Ok(conn);
            }
        }
        self.new_conn().await
    }

    /// Back to the pool, unless it is dead, the pool full or the store
    /// closed.
    pub(crate) fn give_back(&self, conn: Conn) {
        if conn.is_dead() || self.dial.is_closed() {
            return;
        }
        let mut idle = self.idle();
        if idle.len() < MAX_IDLE_CONNECTIONS {
            idle.push(conn);
        }
    }

    /// This node answered nothing in time: a cluster's map is asked for
    /// again before the next command.
    pub(crate) fn suspect(&self) {
        self.failure().mark();
    }

    /// Whether a connection to it failed since it last answered `CLUSTER
    /// SLOTS` (it is asked for the map last).
    pub(crate) fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    /// It answered `CLUSTER SLOTS` (`false`), or did not in time (`true`).
    pub(crate) fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::Relaxed);
    }

    /// Idle connections in the pool now.
    pub(crate) fn idle_count(&self) -> usize {
        self.idle().len()
    }

    /// Closes the idle connections.
    pub(crate) fn close_idle(&self) {
        let idle = std::mem::take(&mut *self.idle());
        drop(idle);
    }
}

/// The host of `host:port` (an IPv6 host without its brackets).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_an_address() {
        assert_eq!(host_of("127.0.0.1:7001"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7001"), "::1");
        assert_eq!(host_of("locks.internal:7380"), "locks.internal");
    }
}
