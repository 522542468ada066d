//! Sending one keyed command to the node that serves its key: a single
//! server takes every command; in a cluster the slot map picks the node,
//! `MOVED slot host:port` sends the command on to that node (at most 5
//! times, then `moved_loop`), and `CLUSTERDOWN` asks for the map again and
//! sends it again 100 ms later (10 answers at most, then `slot_unserved`).
//! A connection that cannot be made or fails is not retried here: the
//! command fails as it would on a single server, and the map is asked for
//! again before the next command is routed.

use crate::cluster::{Redirect, CLUSTER_DOWN_PAUSE, CLUSTER_DOWN_TRIES, MAX_REDIRECTS};
use crate::error::Error;
use crate::node::Node;
use crate::slot::key_slot;
use crate::store::{Store, StoreInner};
use crate::texts;
use holdline::wire::Scope;
use holdline_resp::Value;
use std::sync::Arc;

/// One command's way to its node: where it goes next, and the redirects
/// it took.
pub(crate) struct Route<'a> {
    inner: &'a StoreInner,
    /// What the routing errors are about.
    scope: Scope<'a>,
    /// The key's slot (0 for a single server: not used).
    slot: u16,
    /// Where the last `MOVED` answer sent it.
    next: Option<String>,
    moved: u32,
    down: u32,
}

impl<'a> Route<'a> {
    /// The route of a command about `key` (its text: the slot's input).
    pub(crate) fn new(inner: &'a StoreInner, key: &str, scope: Scope<'a>) -> Route<'a> {
        let slot = if inner.is_cluster() { key_slot(key) } else { 0 };
        Route {
            inner,
            scope,
            slot,
            next: None,
            moved: 0,
            down: 0,
        }
    }

    /// The node the next try goes to.
    pub(crate) async fn node(&mut self) -> Result<Arc<Node>, Error> {
        match self.next.take() {
            Some(addr) => self.inner.node(&addr),
            None => self.inner.node_for(self.slot).await,
        }
    }

    /// Sends the next try to `addr` (a hand-over named it).
    pub(crate) fn to(&mut self, addr: String) {
        self.next = Some(addr);
    }

    /// After the error reply `e`: `Ok` when the command is to be sent
    /// again (to [`node`](Route::node)), else the command's error: `e`
    /// itself (any error of a single server, and every error but `MOVED`
    /// and `CLUSTERDOWN`), `moved_loop` or `slot_unserved`.
    pub(crate) async fn again_after(&mut self, e: Error) -> Result<(), Error> {
        if !self.inner.is_cluster() {
            return Err(e);
        }
        match Redirect::of(&e) {
            None => Err(e),
            Some(Redirect::Moved(slot, addr)) => {
                self.moved += 1;
                if self.moved > MAX_REDIRECTS {
                    return Err(texts::moved_loop(self.scope));
                }
                self.inner.moved(slot, &addr);
                self.next = Some(addr);
                Ok(())
            }
            Some(Redirect::Down) => {
                self.down += 1;
                if self.down >= CLUSTER_DOWN_TRIES {
                    return Err(texts::slot_unserved(self.scope, self.slot));
                }
                self.inner.refresh(true).await;
                tokio::time::sleep(CLUSTER_DOWN_PAUSE).await;
                Ok(())
            }
        }
    }
}

impl StoreInner {
    /// One command about `key` on a pooled connection of its node,
    /// following `MOVED` and `CLUSTERDOWN`; `scope` is what the routing
    /// errors name.
    pub(crate) async fn keyed<A: AsRef<[u8]>>(
        &self,
        key: &str,
        scope: Scope<'_>,
        args: &[A],
    ) -> Result<Value, Error> {
        let mut route = Route::new(self, key, scope);
        loop {
            let node = route.node().await?;
            let conn = node.checkout(Scope::Store).await?;
            let reply = conn.request(args).await;
            node.give_back(conn);
            match reply {
                Err(e) if !e.is_connection() => route.again_after(e).await?,
                reply => return reply,
            }
        }
    }
}

impl Store {
    /// A row's value, or `None` (in a cluster, from the node that serves
    /// the row's slot).
    pub async fn get(&self, row: &str) -> Result<Option<Vec<u8>>, Error> {
        match self.inner.keyed(row, Scope::Store, &["GET", row]).await? {
            Value::Null => Ok(None),
            Value::Bulk(b) => Ok(Some(b)),
            other => Ok(other.as_bytes().map(<[u8]>::to_vec)),
        }
    }
}
