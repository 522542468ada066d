//! The store handle: where the server is, and a small pool of idle
//! connections, each with its background task. One connection per
//! concurrent hold, so a waiting `HOLD` never delays another hold's
//! renewal or release.

use crate::address::Address;
use crate::connection::Connection;
use crate::driver::Conn;
use crate::error::Error;
use crate::options::{ConnectOptions, Tls};
use crate::texts;
use holdline::wire::Scope;
use holdline::ErrorKind;
use holdline_resp::Value;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Idle connections kept for reuse; more than this are closed when let go.
pub const MAX_IDLE_CONNECTIONS: usize = 64;

/// How long a new connection may take to connect and answer `HELLO`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A holdline server reached over TCP (or TLS): `Clone + Send + Sync`,
/// cheap to clone.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<StoreInner>,
}

pub(crate) struct StoreInner {
    /// `host:port`, as dialled.
    addr: String,
    token: Option<String>,
    tls: Option<Tls>,
    idle: Mutex<Vec<Conn>>,
    closed: AtomicBool,
}

impl Store {
    /// Connects to `holdline serve` at `addr`: `host:port`, `host` (port
    /// 7380), `[::1]:7380`, `redis://[:token@]host[:port]`, or
    /// `rediss://[:token@]host[:port]` (TLS, trusting Mozilla's roots:
    /// [`connect_with`](Store::connect_with) takes a CA). One connection
    /// is made now and says `HELLO 3`, so a wrong address, a failed TLS
    /// handshake, a server that wants a token, or one that answers nothing
    /// (10 s) fails here. Call it inside a tokio runtime: each pooled
    /// connection's task is spawned on it.
    pub async fn connect(addr: &str) -> Result<Store, Error> {
        Store::connect_with(addr, ConnectOptions::new()).await
    }

    /// Connects with the server's token (`HELLO 3 AUTH default <token>`);
    /// it wins over a token in a `redis://` address. A wrong token fails
    /// here, kind `invalid`.
    pub async fn connect_with_token(addr: &str, token: &str) -> Result<Store, Error> {
        Store::connect_with(addr, ConnectOptions::new().token(token)).await
    }

    /// Connects with [`ConnectOptions`]: a token, TLS with a CA file, a
    /// client certificate, or a whole rustls `ClientConfig`. Otherwise as
    /// [`connect`](Store::connect).
    pub async fn connect_with(addr: &str, options: ConnectOptions) -> Result<Store, Error> {
        let address = Address::parse(addr)?;
        let (token, tls) = options.resolve(&address)?;
        let store = Store {
            inner: Arc::new(StoreInner {
                addr: address.host_port(),
                token,
                tls,
                idle: Mutex::new(Vec::new()),
                closed: AtomicBool::new(false),
            }),
        };
        let first = store.inner.new_conn().await?;
        store.inner.idle().push(first);
        Ok(store)
    }

    /// A fresh low-level connection to the same server (same token and
    /// TLS), not pooled: for commands this API does not wrap.
    pub async fn connection(&self) -> Result<Connection, Error> {
        self.inner.check_open(Scope::Store)?;
        self.inner.new_connection().await
    }

    /// A row's value, or `None`.
    pub async fn get(&self, row: &str) -> Result<Option<Vec<u8>>, Error> {
        match self.command(&["GET", row]).await? {
            Value::Null => Ok(None),
            Value::Bulk(b) => Ok(Some(b)),
            other => Ok(other.as_bytes().map(<[u8]>::to_vec)),
        }
    }

    /// One command on a pooled connection.
    pub(crate) async fn command<A: AsRef<[u8]>>(&self, args: &[A]) -> Result<Value, Error> {
        let conn = self.inner.checkout(Scope::Store).await?;
        let reply = conn.request(args).await;
        self.inner.give_back(conn);
        reply
    }

    /// Closes the idle connections; every later call fails `closed`.
    /// Holds in progress keep their connections until they end. Idempotent.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let idle = std::mem::take(&mut *self.inner.idle());
        drop(idle);
    }

    /// Whether [`close`](Store::close) was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Tells stores apart (two handles of one store answer the same).
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// Idle connections in the pool now.
    pub fn idle_connections(&self) -> usize {
        self.inner.idle().len()
    }
}

impl StoreInner {
    fn idle(&self) -> MutexGuard<'_, Vec<Conn>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn check_open(&self, scope: Scope<'_>) -> Result<(), Error> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::local(
                ErrorKind::Closed,
                scope,
                "the store is closed",
            ))
        } else {
            Ok(())
        }
    }

    async fn new_connection(&self) -> Result<Connection, Error> {
        let addr = self.addr.as_str();
        let open = Connection::open(addr, self.token.as_deref(), self.tls.as_ref());
        tokio::time::timeout(CONNECT_TIMEOUT, open)
            .await
            .unwrap_or_else(|_| Err(texts::connect_silent(addr, CONNECT_TIMEOUT)))
    }

    async fn new_conn(&self) -> Result<Conn, Error> {
        Ok(Conn::spawn(self.new_connection().await?))
    }

    /// An idle connection, or a new one.
    pub(crate) async fn checkout(&self, scope: Scope<'_>) -> Result<Conn, Error> {
        self.check_open(scope)?;
        loop {
            let Some(conn) = self.idle().pop() else { break };
            if !conn.is_dead() {
                return Ok(conn);
            }
        }
        self.new_conn().await
    }

    /// Back to the pool, unless it is dead, the pool full or the store closed.
    pub(crate) fn give_back(&self, conn: Conn) {
        if conn.is_dead() || self.closed.load(Ordering::Acquire) {
            return;
        }
        let mut idle = self.idle();
        if idle.len() < MAX_IDLE_CONNECTIONS {
            idle.push(conn);
        }
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("addr", &self.inner.addr)
            .field("tls", &self.inner.tls.is_some())
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// Whole milliseconds, kept far from overflow when added to an instant.
pub(crate) fn clamp_ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX / 4)) as u64
}
