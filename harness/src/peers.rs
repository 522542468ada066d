//! The clients of the peers the server rows measure holdline against,
//! each driven as its users drive it:
//!
//! - etcd: one `etcd_client::Client` per client (its own gRPC channel),
//!   a lease granted once per client (its session, as etcd's concurrency
//!   recipe makes one), then v3's `Lock(name, lease)` RPC, answered when
//!   the lock is granted (FIFO by the revision of the waiter's key), and
//!   `Unlock(key)` with the key Lock answered.
//! - PostgreSQL: one session (`tokio_postgres`) per client, the key's
//!   64-bit hash as the lock id, prepared `SELECT pg_advisory_lock($1)`
//!   (waits in the lock manager's queue, answered on grant) and
//!   `SELECT pg_advisory_unlock($1)` (the tests: `pg_try_advisory_lock`).

use std::net::SocketAddr;

use etcd_client::LockOptions;
use tokio_postgres::{NoTls, Statement};

use crate::servers::ServerProcess;

/// Time to live of a client's etcd lease: longer than any row (no
/// keep-alive needed while one runs).
pub const ETCD_LEASE_TTL: i64 = 120;

/// An etcd client with its lease (the client boxed: it is some 3.5 KB).
pub struct EtcdSession {
    client: Box<etcd_client::Client>,
    lease: i64,
}

impl EtcdSession {
    pub async fn connect(addr: SocketAddr) -> Result<EtcdSession, String> {
        let url = format!("http://{addr}");
        let mut client = etcd_client::Client::connect([url.as_str()], None)
            .await
            .map_err(|e| format!("connect to etcd at {url}: {e}"))?;
        let lease = client
            .lease_grant(ETCD_LEASE_TTL, None)
            .await
            .map_err(|e| format!("etcd lease grant: {e}"))?
            .id();
        Ok(EtcdSession {
            client: Box::new(client),
            lease,
        })
    }

    /// `Lock(key)` under the session's lease: answered once granted, with
    /// the key that holds the lock (`key/<lease>`).
    pub async fn lock(&mut self, key: &str) -> Vec<u8> {
        let options = LockOptions::new().with_lease(self.lease);
        let held = self
            .client
            .lock(key, Some(options))
            .await
            .unwrap_or_else(|e| panic!("etcd Lock {key}: {e}"));
        held.key().to_vec()
    }

    /// `Unlock(key)` of what [`lock`](EtcdSession::lock) answered.
    pub async fn unlock(&mut self, held: Vec<u8>) {
        self.client
            .unlock(held)
            .await
            .unwrap_or_else(|e| panic!("etcd Unlock: {e}"));
    }
}

/// A PostgreSQL session with its statements prepared.
pub struct PgSession {
    client: tokio_postgres::Client,
    lock: Statement,
    unlock: Statement,
}

/// A key's advisory lock id: FNV-1a of its bytes, as a signed 64-bit number.
pub fn lock_id(key: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(h.to_ne_bytes())
}

impl PgSession {
    pub async fn connect(server: &ServerProcess) -> Result<PgSession, String> {
        let conninfo = server
            .postgres()
            .ok_or("not a PostgreSQL server")?
            .conninfo();
        let (client, connection) = tokio_postgres::connect(&conninfo, NoTls)
            .await
            .map_err(|e| format!("connect to PostgreSQL ({conninfo}): {e}"))?;
        // The connection does the I/O; it ends when the client is dropped.
        tokio::spawn(connection);
        let prepare = |sql: &'static str| {
            let client = &client;
            async move {
                client
                    .prepare(sql)
                    .await
                    .map_err(|e| format!("prepare {sql}: {e}"))
            }
        };
        let lock = prepare("SELECT pg_advisory_lock($1)").await?;
        let unlock = prepare("SELECT pg_advisory_unlock($1)").await?;
        Ok(PgSession {
            client,
            lock,
            unlock,
        })
    }

    /// `pg_advisory_lock`: answered once granted.
    pub async fn lock(&mut self, key: &str) {
        self.client
            .execute(&self.lock, &[&lock_id(key)])
            .await
            .unwrap_or_else(|e| panic!("pg_advisory_lock ({key}): {e}"));
    }

    /// `pg_try_advisory_lock`: whether it was granted.
    #[cfg(test)]
    pub async fn try_lock(&mut self, key: &str) -> bool {
        let row = self
            .client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&lock_id(key)])
            .await
            .unwrap_or_else(|e| panic!("pg_try_advisory_lock ({key}): {e}"));
        row.get(0)
    }

    /// `pg_advisory_unlock`, which must find the lock this session's.
    pub async fn unlock(&mut self, key: &str) {
        let row = self
            .client
            .query_one(&self.unlock, &[&lock_id(key)])
            .await
            .unwrap_or_else(|e| panic!("pg_advisory_unlock ({key}): {e}"));
        let released: bool = row.get(0);
        assert!(
            released,
            "pg_advisory_unlock ({key}): not held by this session"
        );
    }
}

/// A client of a peer.
pub enum PeerClient {
    Etcd(EtcdSession),
    Postgres(PgSession),
}

/// What a peer's hold answered: etcd's lock key (PostgreSQL's lock is the session's).
pub enum PeerHeld {
    Etcd(Vec<u8>),
    Postgres,
}

impl PeerClient {
    /// Holds `key`, waiting in the server's line.
    pub async fn hold(&mut self, key: &str) -> PeerHeld {
        match self {
            PeerClient::Etcd(c) => PeerHeld::Etcd(c.lock(key).await),
            PeerClient::Postgres(c) => {
                c.lock(key).await;
                PeerHeld::Postgres
            }
        }
    }

    pub async fn release(&mut self, key: &str, held: PeerHeld) {
        match (self, held) {
            (PeerClient::Etcd(c), PeerHeld::Etcd(k)) => c.unlock(k).await,
            (PeerClient::Postgres(c), PeerHeld::Postgres) => c.unlock(key).await,
            _ => panic!("a release of another peer's hold"),
        }
    }

    /// Whether a hold of `key` is granted within `patience` (etcd's Lock
    /// has no try: it is given up after `patience`).
    #[cfg(test)]
    pub async fn try_hold(&mut self, key: &str, patience: std::time::Duration) -> Option<PeerHeld> {
        match self {
            PeerClient::Postgres(c) => c.try_lock(key).await.then_some(PeerHeld::Postgres),
            PeerClient::Etcd(_) => tokio::time::timeout(patience, self.hold(key)).await.ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_ids_are_fnv1a_and_differ_by_key() {
        // FNV-1a of the empty string is its offset basis.
        assert_eq!(
            lock_id(""),
            i64::from_ne_bytes(0xcbf2_9ce4_8422_2325u64.to_ne_bytes())
        );
        assert_ne!(lock_id("own-1"), lock_id("own-2"));
        assert_eq!(lock_id("hot"), lock_id("hot"));
    }
}
