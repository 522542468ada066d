//! The node's etcd session: joins (reads or fixes the partition count),
//! takes a lease and keeps it alive (`lease_session`), registers the node,
//! and reads the cluster's keys (`facts`) whenever etcd says one changed
//! (a watch from the revision read last; a slow tick besides, for windows
//! and retries), acting on [`shares::plan`] through its claims (`claims`):
//! claims, gives up, reserves fence windows, stops what etcd no longer
//! says is ours. When the lease is gone (or its deadline passed) it stops
//! everything and starts a new session; a shutdown gives every partition
//! up at once. The safety argument is in the module doc of `cluster`.

use super::claims::Claims;
use super::etcd::{timed, EtcdError, Keys, REQUEST_TIMEOUT};
use super::facts::{Changes, Facts};
use super::lease_session::{keep_alive, watchdog, AbortOnDrop};
use super::{shares, Node};
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// How often the cluster's keys are read when the watch says nothing: the
/// watch reports every change at once; this tick reserves fence windows
/// and retries what failed.
const TICK: Duration = Duration::from_millis(1000);

/// How long a session that ended waits before the next.
const PAUSE: Duration = Duration::from_millis(250);

/// Where the node's etcd is and what it joins.
pub type Settings = crate::config::ClusterSettings;

/// The running session's handles.
pub struct Agent {
    claims: Claims,
    /// Leases of ended sessions, revoked as soon as etcd answers.
    stale: Vec<i64>,
    /// Set after a failed session, until one holds again.
    quiet: bool,
}

/// Timeouts, and TLS and a user when asked for.
fn connect_options(access: &crate::config::EtcdAccess) -> ConnectOptions {
    use etcd_client::{Certificate, Identity, TlsOptions};
    let mut options = ConnectOptions::new()
        .with_connect_timeout(REQUEST_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT);
    if let Some(ca) = &access.ca {
        let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
        if let Some((cert, key)) = &access.identity {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        options = options.with_tls(tls);
    }
    if let Some((user, password)) = &access.user {
        options = options.with_user(user, &password.0);
    }
    options
}

/// Connects to etcd and reads the cluster's partition count (written now
/// if the cluster is new): a node cannot serve before it knows it.
pub async fn join(settings: &Settings) -> Result<Agent, EtcdError> {
    let options = connect_options(&settings.access);
    let mut client = timed(
        "connect",
        Client::connect(&settings.endpoints, Some(options)),
    )
    .await?;
    let keys = Keys::new(&settings.cluster);
    let wanted = settings.partitions.into();
    let partitions = setting(&mut client, &keys, "partitions", wanted).await?;
    let partitions = u16::try_from(partitions)
        .ok()
        .filter(|n| (1..=1024).contains(n))
        .ok_or_else(|| {
            let key = keys.setting("partitions");
            EtcdError::Unreadable(format!("etcd key {key} holds {partitions}"))
        })?;
    let max_ttl_ms = settings.max_ttl.as_millis() as u64;
    let max_ttl_ms = setting(&mut client, &keys, "max_ttl_ms", max_ttl_ms).await?;
    let node = Arc::new(Node::new(
        super::new_node_id(),
        settings.advertise.clone(),
        partitions,
        (settings.ttl, Duration::from_millis(max_ttl_ms)),
        settings.fence_window,
    ));
    Ok(Agent {
        claims: Claims { client, keys, node },
        stale: Vec::new(),
        quiet: false,
    })
}

/// A setting fixed when the cluster is created: written now if the cluster
/// is new, else the cluster's value (a different flag is logged, not used).
async fn setting(
    client: &mut Client,
    keys: &Keys,
    name: &str,
    wanted: u64,
) -> Result<u64, EtcdError> {
    let key = keys.setting(name);
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key.clone(), wanted.to_string(), None)]);
    if timed("txn", client.txn(txn)).await?.succeeded() {
        return Ok(wanted);
    }
    let got = timed("get", client.get(key.clone(), None)).await?;
    let text = got
        .kvs()
        .first()
        .and_then(|kv| kv.value_str().ok().map(str::to_owned))
        .unwrap_or_default();
    let value: u64 = text.parse().map_err(|_| {
        EtcdError::Unreadable(format!("etcd key {key} holds {text:?}, not a number"))
    })?;
    if value != wanted {
        warn!(
            key,
            value,
            flag = wanted,
            "the cluster was created with another value: its value stands"
        );
    }
    Ok(value)
}

impl Agent {
    pub fn node(&self) -> Arc<Node> {
        self.claims.node.clone()
    }

    /// Sessions until the node leaves (the server's shutdown calls
    /// [`Node::leave`]; `shutdown` turning true does the same); then hands
    /// every partition over in etcd and revokes the lease, so other nodes
    /// take over at once instead of waiting out the ttl.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let node = self.node();
        while !node.is_leaving() {
            let ended = tokio::select! {
                r = self.session() => r,
                _ = shutdown.wait_for(|s| *s) => break,
            };
            if node.is_leaving() {
                break;
            }
            node.end_lease();
            if let Err(why) = ended {
                // Once per outage at warn: etcd away means a line a pause.
                if self.quiet {
                    debug!(%why, "etcd session ended again");
                } else {
                    warn!(%why, "etcd session ended; starting others until one holds");
                }
                self.quiet = true;
            }
            tokio::select! {
                _ = tokio::time::sleep(PAUSE) => {}
                _ = shutdown.wait_for(|s| *s) => break,
            }
        }
        node.leave();
        if let Err(why) = self.claims.hand_over_stopped().await {
            warn!(%why, "could not hand every partition over; the rest move when the lease runs out");
        }
        node.end_lease();
        self.revoke_stale().await;
        info!("left the cluster");
    }

    async fn revoke_stale(&mut self) {
        let mut left = Vec::new();
        for id in std::mem::take(&mut self.stale) {
            let revoked = timed("revoke", self.claims.client.lease_revoke(id)).await;
            // Not found means it ran out already: nothing to keep.
            if revoked.is_err_and(|why| !why.is_not_found()) {
                left.push(id);
            }
        }
        self.stale = left;
    }

    /// One lease's life: ends (with why) when it is gone or its deadline
    /// passed; `Ok` only when the node leaves.
    async fn session(&mut self) -> Result<(), SessionEnd> {
        self.revoke_stale().await;
        let node = self.node();
        let client = &mut self.claims.client;
        let ttl_secs = node.ttl.as_secs().max(1) as i64;
        let sent = node.now();
        let grant = timed("lease grant", client.lease_grant(ttl_secs, None)).await?;
        let lease = grant.id();
        self.stale.push(lease);
        node.new_lease(lease);
        node.lease_confirmed(lease, sent, Duration::from_secs(grant.ttl().max(0) as u64));
        let register = PutOptions::new().with_lease(lease);
        let key = self.claims.keys.node(&node.id);
        let advertise = node.advertise.clone();
        // One transaction: a node is never seen without its `handover/`
        // key (a hand-over to it would end its leases for nothing).
        let mut puts = vec![TxnOp::put(key, advertise, Some(register.clone()))];
        if !super::claims::ignores_imports() {
            let taker = self.claims.keys.taker(&node.id);
            puts.push(TxnOp::put(taker, "1", Some(register)));
        }
        timed("register", client.txn(Txn::new().and_then(puts))).await?;
        info!(lease, node = node.id, "joined the cluster");
        self.quiet = false;
        let keeper = keep_alive(client.clone(), node.clone(), lease);
        let _keeper = AbortOnDrop(tokio::spawn(keeper));
        // Its own task: a reading of etcd that hangs must not delay the stop.
        let _watchdog = AbortOnDrop(tokio::spawn(watchdog(node.clone())));
        self.follow_until_over().await
    }

    /// Reads the cluster's keys, then again each time the watch says one
    /// changed (or the tick passes), until the lease ends or the node
    /// leaves.
    async fn follow_until_over(&mut self) -> Result<(), SessionEnd> {
        let node = self.node();
        let mut changes = Changes::new();
        loop {
            match self.reconcile().await {
                Ok(facts) => {
                    let claims = &mut self.claims;
                    changes
                        .read_up_to(&mut claims.client, &claims.keys, &facts)
                        .await;
                }
                Err(why) => debug!(%why, "reading the cluster failed"),
            }
            let Some(deadline) = node.deadline() else {
                return Err(SessionEnd::LeaseGone);
            };
            tokio::select! {
                _ = changes.next() => {}
                _ = tokio::time::sleep(TICK) => {}
                _ = tokio::time::sleep_until(deadline.into()) => {}
            }
            if node.is_leaving() {
                return Ok(());
            }
            if !node.check_deadline() {
                return Err(SessionEnd::DeadlinePassed);
            }
        }
    }

    /// Reads the cluster's keys and acts on them; answers the reading.
    async fn reconcile(&mut self) -> Result<Facts, EtcdError> {
        let claims = &mut self.claims;
        let node = claims.node.clone();
        let facts = Facts::get(&mut claims.client, &claims.keys, node.partitions).await?;
        node.set_view(facts.view());
        claims.hand_over_stopped().await?;
        claims.drop_what_etcd_denies(&facts).await;
        let plan = shares::plan(&node.id, &facts.live(), &facts.owner_ids());
        for p in plan.give_up {
            node.stop(p);
            info!(partition = p, "gave the partition up");
        }
        claims.hand_over_stopped().await?;
        for p in plan.claim {
            claims.claim(p, &facts).await?;
        }
        claims.reserve_windows(&facts).await?;
        Ok(facts)
    }
}

/// Why a session ended.
#[derive(Debug)]
enum SessionEnd {
    Etcd(EtcdError),
    LeaseGone,
    DeadlinePassed,
}

impl From<EtcdError> for SessionEnd {
    fn from(e: EtcdError) -> SessionEnd {
        SessionEnd::Etcd(e)
    }
}

impl std::fmt::Display for SessionEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionEnd::Etcd(e) => e.fmt(f),
            SessionEnd::LeaseGone => f.write_str("the lease ran out or was lost"),
            SessionEnd::DeadlinePassed => f.write_str("the lease's deadline passed"),
        }
    }
}
