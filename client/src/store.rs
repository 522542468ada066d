//! The store handle: where its servers are. A single server's commands
//! all go to it; a cluster's (a server whose `CLUSTER SLOTS` answers a
//! map) go to the node that serves their key's slot, through a pool per
//! node (the `node` module). Routing one command, `MOVED` and
//! `CLUSTERDOWN` included, is the `route` module's.

use crate::address::Address;
use crate::cluster::{SlotMap, MAP_REFRESH_NODE_TIMEOUT};
use crate::connection::Connection;
use crate::error::Error;
use crate::node::{Dial, Node, CONNECT_TIMEOUT};
use crate::options::ConnectOptions;
use holdline::wire::Scope;
use holdline::{ErrorKind, IntoKey};
use holdline_resp::Value;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A holdline server, or a cluster of them, reached over TCP (or TLS):
/// `Clone + Send + Sync`, cheap to clone.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<StoreInner>,
}

pub(crate) struct StoreInner {
    pub(crate) dial: Arc<Dial>,
    /// The addresses given, as dialled, in their order.
    seeds: Vec<Arc<str>>,
    /// The node that answered the connect: a single server's commands
    /// all go there.
    home: Arc<Node>,
    /// Every node's pool, by address.
    nodes: Mutex<HashMap<Arc<str>, Arc<Node>>>,
    /// `None`: a single server (its `CLUSTER SLOTS` answered an error).
    cluster: Option<Cluster>,
}

/// A cluster's slot map and its bookkeeping.
struct Cluster {
    map: Mutex<SlotMap>,
    /// One refresh at a time.
    refreshing: tokio::sync::Mutex<()>,
    /// `MOVED` answers followed.
    redirects: AtomicU64,
}

impl Cluster {
    fn map(&self) -> MutexGuard<'_, SlotMap> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Store {
    /// Connects to `holdline serve` at `addr`: `host:port`, `host` (port
    /// 7380), `[::1]:7380`, `redis://[[user]:token@]host[:port]`, or
    /// `rediss://[[user]:token@]host[:port]` (TLS, trusting Mozilla's roots:
    /// [`connect_with`](Store::connect_with) takes a CA). One connection
    /// is made now and says `HELLO 3`, so a wrong address, a failed TLS
    /// handshake, a server that wants a token, or one that answers nothing
    /// (10 s) fails here. Call it inside a tokio runtime: each pooled
    /// connection's task is spawned on it.
    ///
    /// Several addresses, separated by commas (`"10.0.0.1:7380,10.0.0.2:7380"`),
    /// are tried in order until one answers (the token and TLS of the
    /// first apply to all); if none does, the error is the last one's. A
    /// node of a cluster answers `CLUSTER SLOTS` with its map, and from
    /// then on each key's commands go to the node that serves its slot.
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
    /// [`connect`](Store::connect). Refuses, besides what `connect` does,
    /// options that do not fit together or a certificate file it cannot
    /// read (`invalid`), and a TLS handshake that fails (`closed`).
    pub async fn connect_with(addr: &str, options: ConnectOptions) -> Result<Store, Error> {
        let addresses = addr
            .split(',')
            .map(|part| Address::parse(part.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        let (auth, tls) = options.resolve(&addresses[0])?;
        let dial = Arc::new(Dial::new(auth, tls, options.max_reply()));
        let seeds: Vec<Arc<str>> = addresses.iter().map(|a| a.host_port().into()).collect();
        let mut last = None;
        for seed in &seeds {
            let node = Arc::new(Node::new(seed.clone(), dial.clone())?);
            match node.new_conn().await {
                Ok(conn) => {
                    let reply = conn.request(&["CLUSTER", "SLOTS"]).await;
                    node.give_back(conn);
                    return Store::start(dial, seeds, node, reply);
                }
                // Unreachable, silent or refusing: try the next.
                Err(e) if e.kind() == ErrorKind::Closed => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("split answers at least one address"))
    }

    /// The store, once `home` answered `CLUSTER SLOTS` with `slots`: an
    /// error reply makes it a single server's.
    fn start(
        dial: Arc<Dial>,
        seeds: Vec<Arc<str>>,
        home: Arc<Node>,
        slots: Result<Value, Error>,
    ) -> Result<Store, Error> {
        let host = home.addr.rsplit_once(':').map_or("", |(host, _)| host);
        let map = match slots {
            Ok(reply) => SlotMap::from_reply(&reply, host.trim_matches(['[', ']'])),
            Err(e) if e.is_connection() => return Err(e),
            Err(_) => None,
        };
        let cluster = map.map(|map| Cluster {
            map: Mutex::new(map),
            refreshing: tokio::sync::Mutex::new(()),
            redirects: AtomicU64::new(0),
        });
        let nodes = HashMap::from([(home.addr.clone(), home.clone())]);
        Ok(Store {
            inner: Arc::new(StoreInner {
                dial,
                seeds,
                home,
                nodes: Mutex::new(nodes),
                cluster,
            }),
        })
    }

    /// A fresh low-level connection to the server (the one that answered
    /// the connect; same token and TLS), not pooled: for commands this API
    /// does not wrap. Fails as the connect did, `closed` when the server
    /// is gone since.
    pub async fn connection(&self) -> Result<Connection, Error> {
        self.inner.dial.check_open(Scope::Store)?;
        self.inner.home.new_connection().await
    }

    /// Closes the idle connections; every later call fails `closed`.
    /// Holds in progress keep their connections until they end. Idempotent.
    pub fn close(&self) {
        self.inner.dial.closed.store(true, Ordering::Release);
        for node in self.inner.all_nodes() {
            node.close_idle();
        }
    }

    /// Whether [`close`](Store::close) was called.
    pub fn is_closed(&self) -> bool {
        self.inner.dial.is_closed()
    }

    /// Tells stores apart (two handles of one store answer the same).
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// Idle connections in the pools now (every node's).
    pub fn idle_connections(&self) -> usize {
        self.inner.all_nodes().iter().map(|n| n.idle_count()).sum()
    }

    /// Whether the server is a cluster's node (its `CLUSTER SLOTS`
    /// answered a map), so that each key's commands go to its slot's node.
    pub fn is_cluster(&self) -> bool {
        self.inner.cluster.is_some()
    }

    /// The node (`host:port`) that serves `key`'s slot as far as this
    /// store knows now; `None` for a single server, or a slot no node
    /// serves now.
    pub fn node_for<'k, K: IntoKey<'k>>(&self, key: K) -> Option<String> {
        let key = holdline::wire::key_text(key);
        let cluster = self.inner.cluster.as_ref()?;
        let slot = crate::slot::key_slot(&key);
        cluster.map().node(slot).map(|n| n.to_string())
    }

    /// How many `MOVED` answers this store has followed (0 for a single
    /// server): a count that stays put means the map is right.
    pub fn redirects(&self) -> u64 {
        let cluster = self.inner.cluster.as_ref();
        cluster.map_or(0, |c| c.redirects.load(Ordering::Relaxed))
    }
}

impl StoreInner {
    pub(crate) fn check_open(&self, scope: Scope<'_>) -> Result<(), Error> {
        self.dial.check_open(scope)
    }

    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    fn all_nodes(&self) -> Vec<Arc<Node>> {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes.values().cloned().collect()
    }

    /// The pool of the node at `addr` (`host:port`), made on first use.
    pub(crate) fn node(&self, addr: &str) -> Result<Arc<Node>, Error> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(node) = nodes.get(addr) {
            return Ok(node.clone());
        }
        let node = Arc::new(Node::new(addr.into(), self.dial.clone())?);
        nodes.insert(node.addr.clone(), node.clone());
        Ok(node)
    }

    /// Where a command for `slot` goes now: a single server; the node
    /// that serves the slot (the map asked for again first when a
    /// connection failed or a `MOVED` came since); any known node for a
    /// slot the map has no node for (it answers `MOVED` or `CLUSTERDOWN`).
    pub(crate) async fn node_for(&self, slot: u16) -> Result<Arc<Node>, Error> {
        let Some(cluster) = &self.cluster else {
            return Ok(self.home.clone());
        };
        if self.dial.failed.load(Ordering::Relaxed) {
            self.refresh(false).await;
        }
        let owner = cluster.map().node(slot).cloned();
        match owner {
            Some(addr) => self.node(&addr),
            None => self.any_node(slot),
        }
    }

    /// A node for a command the map cannot place: one of the map's
    /// (chosen by `spread`), else the one that answered the connect.
    fn any_node(&self, spread: u16) -> Result<Arc<Node>, Error> {
        let Some(cluster) = &self.cluster else {
            return Ok(self.home.clone());
        };
        let addr = {
            let map = cluster.map();
            let nodes = map.nodes();
            (!nodes.is_empty()).then(|| nodes[usize::from(spread) % nodes.len()].clone())
        };
        match addr {
            Some(addr) => self.node(&addr),
            None => Ok(self.home.clone()),
        }
    }

    /// A `MOVED` answer: `addr` serves `slot`; the whole map is asked for
    /// again before the next command is routed.
    pub(crate) fn moved(&self, slot: u16, addr: &str) {
        if let Some(cluster) = &self.cluster {
            cluster.map().set(slot, addr);
            cluster.redirects.fetch_add(1, Ordering::Relaxed);
            self.dial.mark_failed();
        }
    }

    /// The nodes of the map, each once (a single server: that one),
    /// after asking for the map again if a connection failed or a `MOVED`
    /// came since.
    pub(crate) async fn map_nodes(&self) -> Result<Vec<Arc<Node>>, Error> {
        let Some(cluster) = &self.cluster else {
            return Ok(vec![self.home.clone()]);
        };
        if self.dial.failed.load(Ordering::Relaxed) {
            self.refresh(false).await;
        }
        let addrs = cluster.map().nodes().to_vec();
        addrs.iter().map(|addr| self.node(addr)).collect()
    }

    /// Asks for the map again (`CLUSTER SLOTS`): from the nodes it names,
    /// then the other nodes known, then the addresses given, those whose
    /// connections failed last; the first that answers with a map wins.
    /// Each node has `MAP_REFRESH_NODE_TIMEOUT` (the connect timeout if
    /// shorter) to answer, connecting included. `force`: even if nothing
    /// failed since the last time. Keeps the old map if none answers (and
    /// asks again before the next command).
    pub(crate) async fn refresh(&self, force: bool) {
        let Some(cluster) = &self.cluster else { return };
        let _one = cluster.refreshing.lock().await;
        if !force && !self.dial.failed.load(Ordering::Relaxed) {
            return; // another refresh just ran
        }
        let mut addrs = cluster.map().nodes().to_vec();
        let mut known: Vec<Arc<str>> = self.all_nodes().iter().map(|n| n.addr.clone()).collect();
        known.sort();
        for addr in known.iter().chain(&self.seeds) {
            if !addrs.contains(addr) {
                addrs.push(addr.clone());
            }
        }
        let mut candidates: Vec<Arc<Node>> =
            addrs.iter().filter_map(|a| self.node(a).ok()).collect();
        // Stable: in that order otherwise.
        candidates.sort_by_key(|node| node.is_failing());
        for node in candidates {
            if let Some(map) = self.slots_from(&node).await {
                *cluster.map() = map;
                self.dial.failed.store(false, Ordering::Relaxed);
                return;
            }
        }
        self.dial.mark_failed();
    }

    /// `node`'s map, if it answers `CLUSTER SLOTS` with one in time. One
    /// that cannot be reached, fails, or answers nothing in time is marked
    /// to be asked last; one that answers, unmarked.
    async fn slots_from(&self, node: &Node) -> Option<SlotMap> {
        let ask = async {
            let conn = node.checkout(Scope::Store).await.ok()?;
            let reply = conn.request(&["CLUSTER", "SLOTS"]).await;
            node.give_back(conn);
            Some(reply)
        };
        // Past its time the connection is dropped (closed) unanswered.
        let patience = MAP_REFRESH_NODE_TIMEOUT.min(CONNECT_TIMEOUT);
        let reply = match tokio::time::timeout(patience, ask).await {
            Ok(Some(Ok(reply))) => reply,
            Ok(Some(Err(e))) if !e.is_connection() => {
                node.set_failing(false);
                return None; // an error reply: no map
            }
            _ => {
                node.set_failing(true);
                return None;
            }
        };
        node.set_failing(false);
        let host = node.addr.rsplit_once(':').map_or("", |(host, _)| host);
        SlotMap::from_reply(&reply, host.trim_matches(['[', ']']))
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("addr", &self.inner.home.addr)
            .field("tls", &self.inner.dial.tls.is_some())
            .field("cluster", &self.is_cluster())
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// Whole milliseconds, kept far from overflow when added to an instant.
pub(crate) fn clamp_ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX / 4)) as u64
}
