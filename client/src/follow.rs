//! Following a lease to the node its partition was handed to (a planned
//! hand-over: SIGTERM, a rebalance). A node that can hand leases over says
//! `handover` = 1 in `HELLO`; a hold sends it a secret (`SECRET s`), which
//! only the holder and the nodes know. When the node hands the partition
//! over it tells the holder where to (a `moved` push, or `-MOVED` to a
//! `RENEW` or `RELEASE`), and the holder takes the lease there with
//! `REATTACH lock key secret`: a new lease id on that node, the same fence.
//!
//! From the moment it is told, the old connection no longer speaks for
//! the lease (the driver stops crediting its replies to the deadline), so
//! the lease's deadline stands still until the `REATTACH` is answered;
//! then it counts from the `REATTACH`'s send, as any reply's does
//! (texts.json's rule `deadline_chain`). A lease not re-attached by its
//! deadline is lost, `reattach_failed`.

use crate::cluster::{Redirect, CLUSTER_DOWN_PAUSE, MAX_REDIRECTS};
use crate::driver::{local_deadline, Conn};
use crate::error::Error;
use crate::lease::{LeaseShared, Moved, OnMoved};
use crate::node::Node;
use crate::store::StoreInner;
use crate::texts;
use holdline::wire::Scope;
use holdline_resp::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// A fresh secret: 32 lowercase hex digits from the system's random
/// source (a guessable secret would let anyone who learnt a lease's key
/// take it at its next hand-over).
pub(crate) fn new_secret() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 16];
    getrandom::getrandom(&mut bytes).expect("the system's random source");
    let mut hex = String::with_capacity(32);
    for b in bytes {
        hex.push(char::from(HEX[usize::from(b >> 4)]));
        hex.push(char::from(HEX[usize::from(b & 15)]));
    }
    hex
}

/// Where a lease lives: its connection (`None` once released) and that
/// connection's node, whose pool takes the connection back.
pub(crate) struct Home {
    pub(crate) conn: Option<Conn>,
    pub(crate) node: Arc<Node>,
}

/// A lease's home, locked by whoever uses or moves its connection: a
/// re-attach swaps it while nothing else sends on it.
pub(crate) type SharedHome = Arc<Mutex<Home>>;

/// What a lease held with a secret needs to follow its partition.
pub(crate) struct Follow {
    pub(crate) store: Arc<StoreInner>,
    pub(crate) secret: String,
    pub(crate) ttl: Duration,
}

/// A re-attach's answer: the lease's new home and id, and when its
/// `REATTACH` was sent.
struct Reattached {
    node: Arc<Node>,
    conn: Conn,
    id: i64,
    sent: tokio::time::Instant,
}

impl Follow {
    /// What the driver calls when `home`'s lease is told it moved: a task
    /// that follows it, under the home's lock. Holds the home weakly: the
    /// lease (which keeps this) is held by its connection, in the home.
    pub(crate) fn on_moved(self: &Arc<Self>, home: &SharedHome) -> OnMoved {
        let (follow, home) = (self.clone(), Arc::downgrade(home));
        Arc::new(move |lease: &Arc<LeaseShared>| {
            let Some(home) = home.upgrade() else { return };
            let (follow, lease) = (follow.clone(), lease.clone());
            tokio::spawn(async move {
                let mut home = home.lock().await;
                // A failure marks the lease lost: its holder sees that.
                let _ = follow.follow(&lease, &mut home).await;
            });
        })
    }

    /// If `lease` was told it moved: `REATTACH` at its new node until its
    /// deadline, and on success its home is there. `Ok` when it lives in
    /// `home` now (or never moved); else it is marked lost
    /// (`reattach_failed`, or the loss it had already) and that is the error.
    pub(crate) async fn follow(
        &self,
        lease: &Arc<LeaseShared>,
        home: &mut Home,
    ) -> Result<(), Error> {
        let Some(to) = lease.take_moved() else {
            return Ok(());
        };
        if home.conn.is_none() {
            return Ok(()); // released meanwhile
        }
        if let Some(lost) = lease.lost_error() {
            return Err(lost.clone());
        }
        let Some(deadline) = lease.deadline() else {
            return Ok(()); // not granted yet: nothing to follow
        };
        let from = home.node.addr.clone();
        let attempt = self.reattach(lease, &from, to);
        let answered = tokio::time::timeout_at(deadline.into(), attempt).await;
        let failed = || {
            lease.mark_lost(texts::reattach_failed(&lease.lock, &lease.key));
            Err(lease.lost_error().cloned().expect("just marked lost"))
        };
        let Ok(Ok(done)) = answered else {
            return failed();
        };
        // Counted as any reply: from its command's send, if it came in
        // time (a passed deadline is final, and reads as a failure to
        // follow while the lease is between nodes).
        lease.extend_deadline(local_deadline(done.sent, self.ttl));
        if lease.check_clock() {
            return Err(lease.lost_error().cloned().expect("lost"));
        }
        lease.reattached(done.id);
        done.conn.register(lease);
        if let Some(old) = home.conn.replace(done.conn) {
            // It no longer holds the lease; its node is leaving.
            old.renew_for(None);
            old.unregister();
        }
        home.node = done.node;
        Ok(())
    }

    /// `REATTACH` sent to `to`, then wherever `MOVED` sends it, again
    /// after `CLUSTERDOWN` or a failed connection (the partition is
    /// between owners for a moment) until it answers a grant, or an
    /// error that ends it (`LOST`: nothing was handed over under the
    /// secret). The caller bounds it by the lease's deadline.
    async fn reattach(
        &self,
        lease: &LeaseShared,
        from: &str,
        to: Moved,
    ) -> Result<Reattached, Error> {
        let scope = Scope::Key(&lease.lock, &lease.key);
        self.store.moved(to.slot, &to.addr);
        let mut addr = to.addr.clone();
        let mut redirects = 0;
        loop {
            let node = self.store.node(&addr)?;
            let e = match self.send(&node, lease).await {
                Ok(done) => return Ok(done),
                Err(e) => e,
            };
            match Redirect::of(&e) {
                // The new owner has not claimed the partition yet and
                // still names the node that left: wait for the claim.
                Some(Redirect::Moved(_, next)) if next == from => {
                    tokio::time::sleep(CLUSTER_DOWN_PAUSE).await;
                    addr.clone_from(&to.addr);
                }
                Some(Redirect::Moved(slot, next)) => {
                    redirects += 1;
                    if redirects > MAX_REDIRECTS {
                        return Err(texts::moved_loop(scope));
                    }
                    self.store.moved(slot, &next);
                    addr = next;
                }
                Some(Redirect::Down) => tokio::time::sleep(CLUSTER_DOWN_PAUSE).await,
                // A node gone or not there yet: back to the one the
                // hand-over named.
                None if e.is_connection() => {
                    tokio::time::sleep(CLUSTER_DOWN_PAUSE).await;
                    addr.clone_from(&to.addr);
                }
                None => return Err(e),
            }
        }
    }

    /// One `REATTACH` on a connection of `node`: the grant, or the error
    /// reply (or connection failure) it got.
    async fn send(&self, node: &Arc<Node>, lease: &LeaseShared) -> Result<Reattached, Error> {
        let conn = node.checkout(Scope::Key(&lease.lock, &lease.key)).await?;
        // Renew from the send on: the task plans its next renewal when it
        // writes, so this must be set before.
        conn.renew_for(Some(self.ttl));
        let args = ["REATTACH", &lease.lock, &lease.key, &self.secret];
        let (reply, sent) = match conn.request_timed(&args).await {
            Ok(answered) => answered,
            Err(e) => {
                conn.renew_for(None);
                node.give_back(conn);
                return Err(e);
            }
        };
        match grant(&reply) {
            // The fence its holder knows, or this is not its lease.
            Some((id, fence)) if fence == lease.fence => Ok(Reattached {
                node: node.clone(),
                conn,
                id,
                sent,
            }),
            _ => Err(texts::reattach_failed(&lease.lock, &lease.key)),
        }
    }
}

/// `[lease, fence]`, if that is what `v` is.
pub(crate) fn grant(v: &Value) -> Option<(i64, u64)> {
    let Value::Array(items) = v else { return None };
    match (items.first(), items.get(1)) {
        (Some(Value::Integer(id)), Some(Value::Integer(fence))) => {
            Some((*id, u64::try_from(*fence).ok()?))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_32_lowercase_hex_digits_new_each_time() {
        let (a, b) = (new_secret(), new_secret());
        assert_eq!(a.len(), 32);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        assert_ne!(a, b);
    }
}
