//! The node's etcd session: joins (reads or fixes the partition count),
//! takes a lease and keeps it alive, registers the node, and every tick
//! reads the cluster's keys and acts on [`shares::plan`]: claims, gives
//! up, reserves fence windows, stops what etcd no longer says is ours.
//! When the lease is gone (or its deadline passed) it stops everything and
//! starts a new session; a shutdown gives every partition up at once.
//!
//! Keys under `/holdline/<cluster>/`: `partitions` (the count, written
//! once), `nodes/<id>` = advertised address and `owners/<p>` = node id
//! (both under the node's lease), `fences/<p>` = the end of the highest
//! fence window reserved (no lease). The safety argument is in the module
//! doc of `cluster`.

use super::{shares, Node, View};
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// How often the cluster's keys are read.
const TICK: Duration = Duration::from_millis(250);

/// The longest any one etcd request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the node's etcd is and what it joins.
pub type Settings = crate::config::ClusterSettings;

/// The running session's handles.
pub struct Agent {
    client: Client,
    node: Arc<Node>,
    prefix: String,
    /// Leases of ended sessions, revoked as soon as etcd answers.
    stale: Vec<i64>,
    /// Set after a failed session, until one holds again.
    quiet: bool,
}

async fn timed<T, E: std::fmt::Display>(
    what: &str,
    f: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("etcd {what}: {e}")),
        Err(_) => Err(format!("etcd {what}: no answer in {REQUEST_TIMEOUT:?}")),
    }
}

/// Connects to etcd and reads the cluster's partition count (written now
/// if the cluster is new): a node cannot serve before it knows it.
pub async fn join(settings: &Settings) -> Result<Agent, String> {
    let options = ConnectOptions::new()
        .with_connect_timeout(REQUEST_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT);
    let mut client = timed(
        "connect",
        Client::connect(&settings.endpoints, Some(options)),
    )
    .await?;
    let prefix = format!("/holdline/{}/", settings.cluster);
    let key = format!("{prefix}partitions");
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key.clone(),
            settings.partitions.to_string(),
            None,
        )])
        .or_else([TxnOp::get(key.clone(), None)]);
    let resp = timed("txn", client.txn(txn)).await?;
    let partitions = if resp.succeeded() {
        settings.partitions
    } else {
        let got = timed("get", client.get(key.clone(), None)).await?;
        let text = got
            .kvs()
            .first()
            .and_then(|kv| kv.value_str().ok().map(str::to_owned))
            .unwrap_or_default();
        let n: u16 = text
            .parse()
            .map_err(|_| format!("etcd key {key} holds {text:?}, not a partition count"))?;
        if n != settings.partitions {
            warn!(
                cluster = settings.cluster,
                partitions = n,
                "the cluster was created with another --partitions: its count stands"
            );
        }
        n
    };
    let node = Arc::new(Node::new(
        super::new_node_id(),
        settings.advertise.clone(),
        partitions,
        settings.ttl,
        settings.fence_window,
    ));
    Ok(Agent {
        client,
        node,
        prefix,
        stale: Vec::new(),
        quiet: false,
    })
}

impl Agent {
    pub fn node(&self) -> Arc<Node> {
        self.node.clone()
    }

    /// Sessions until `shutdown` turns true; then gives everything up.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        loop {
            let ended = tokio::select! {
                r = self.session() => r,
                _ = shutdown.wait_for(|s| *s) => break,
            };
            self.node.end_lease();
            if let Err(why) = ended {
                // Once per outage at warn: etcd away means a line a tick.
                if self.quiet {
                    debug!(%why, "etcd session ended again");
                } else {
                    warn!(%why, "etcd session ended; starting others until one holds");
                }
                self.quiet = true;
            }
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = shutdown.wait_for(|s| *s) => break,
            }
        }
        // Stop serving, then let etcd forget our claims at once (so other
        // nodes need not wait for the lease to run out).
        self.node.end_lease();
        self.revoke_stale().await;
        info!("left the cluster");
    }

    async fn revoke_stale(&mut self) {
        let mut left = Vec::new();
        for id in std::mem::take(&mut self.stale) {
            if let Err(why) = timed("revoke", self.client.lease_revoke(id)).await {
                // Not found means it ran out already: nothing to keep.
                if !why.contains("not found") {
                    left.push(id);
                }
            }
        }
        self.stale = left;
    }

    /// One lease's life: ends (with why) when it is gone or its deadline
    /// passed. Never returns `Ok`.
    async fn session(&mut self) -> Result<(), String> {
        self.revoke_stale().await;
        let ttl_secs = self.node.ttl.as_secs().max(1) as i64;
        let sent = self.node.now();
        let grant = timed("lease grant", self.client.lease_grant(ttl_secs, None)).await?;
        let lease = grant.id();
        self.stale.push(lease);
        self.node.new_lease(lease);
        self.node
            .lease_confirmed(lease, sent, Duration::from_secs(grant.ttl().max(0) as u64));
        let register = PutOptions::new().with_lease(lease);
        let key = format!("{}nodes/{}", self.prefix, self.node.id);
        timed(
            "register",
            self.client
                .put(key, self.node.advertise.clone(), Some(register)),
        )
        .await?;
        info!(lease, node = self.node.id, "joined the cluster");
        self.quiet = false;
        let _keeper = AbortOnDrop(tokio::spawn(keep_alive(
            self.client.clone(),
            self.node.clone(),
            lease,
        )));
        // Its own task: a reading of etcd that hangs must not delay the stop.
        let _watchdog = AbortOnDrop(tokio::spawn(watchdog(self.node.clone())));
        self.tick_until_over().await
    }

    async fn tick_until_over(&mut self) -> Result<(), String> {
        loop {
            let deadline = self.node.deadline();
            let Some(deadline) = deadline else {
                return Err("the lease ran out or was lost".into());
            };
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = tokio::time::sleep_until(deadline.into()) => {}
            }
            if !self.node.check_deadline() {
                return Err("the lease's deadline passed".into());
            }
            if let Err(why) = self.reconcile().await {
                debug!(%why, "reading the cluster failed");
            }
        }
    }

    /// Reads the cluster's keys and acts on them.
    async fn reconcile(&mut self) -> Result<(), String> {
        let all = timed(
            "get",
            self.client
                .get(self.prefix.clone(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
        let facts = Facts::read(&self.prefix, self.node.partitions, all.kvs());
        self.node.set_view(facts.view());
        self.drop_what_etcd_denies(&facts).await;
        let owners: Vec<Option<String>> = facts
            .owners
            .iter()
            .map(|o| o.as_ref().map(|(id, _)| id.clone()))
            .collect();
        let plan = shares::plan(&self.node.id, &facts.live(), &owners);
        for p in plan.give_up {
            self.give_up(p, &facts).await?;
        }
        for p in plan.claim {
            self.claim(p, &facts).await?;
        }
        self.reserve_windows(&facts).await
    }

    /// Stops partitions etcd does not show as ours (claim and all), and
    /// gives up any claim of ours that is not served (a stopped one, or a
    /// claim left by an ended session).
    async fn drop_what_etcd_denies(&mut self, facts: &Facts) {
        for part in self.node.served() {
            let ok = matches!(&facts.owners[usize::from(part.index)],
                Some((id, rev)) if *id == self.node.id && *rev == part.claim);
            if !ok {
                warn!(
                    partition = part.index,
                    "etcd no longer shows our claim: stopping"
                );
                self.node.stop(part.index);
            }
        }
        let served: Vec<u16> = self.node.served().iter().map(|p| p.index).collect();
        for (p, owner) in facts.owners.iter().enumerate() {
            if let Some((id, rev)) = owner {
                if *id == self.node.id && !served.contains(&(p as u16)) {
                    let _ = self.delete_claim(p as u16, *rev).await;
                }
            }
        }
    }

    async fn give_up(&mut self, p: u16, facts: &Facts) -> Result<(), String> {
        // Stop first: nothing is granted once the key is gone.
        self.node.stop(p);
        if let Some((_, rev)) = &facts.owners[usize::from(p)] {
            self.delete_claim(p, *rev).await?;
        }
        info!(partition = p, "gave the partition up");
        Ok(())
    }

    async fn delete_claim(&mut self, p: u16, rev: i64) -> Result<(), String> {
        let key = format!("{}owners/{p}", self.prefix);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::delete(key, None)]);
        timed("txn", self.client.txn(txn)).await.map(drop)
    }

    /// Claims `p` and reserves a fence window in one transaction; serves it
    /// if etcd granted both.
    async fn claim(&mut self, p: u16, facts: &Facts) -> Result<(), String> {
        let Some(lease) = self.stale.last().copied() else {
            return Ok(());
        };
        let owner = format!("{}owners/{p}", self.prefix);
        let fences = format!("{}fences/{p}", self.prefix);
        let (floor, fences_rev) = facts.fences[usize::from(p)].unwrap_or((wall_clock_ns(), 0));
        let end = floor + self.node.window;
        let txn = Txn::new()
            .when([
                Compare::create_revision(owner.clone(), CompareOp::Equal, 0),
                Compare::mod_revision(fences.clone(), CompareOp::Equal, fences_rev),
            ])
            .and_then([
                TxnOp::put(
                    owner,
                    self.node.id.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::put(fences, end.to_string(), None),
            ]);
        let resp = timed("claim", self.client.txn(txn)).await?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        if resp.succeeded() && self.node.check_deadline() {
            self.node.serve(p, floor, revision);
            info!(partition = p, "serving the partition");
        }
        Ok(())
    }

    /// Reserves the next window for every partition past half its own.
    async fn reserve_windows(&mut self, facts: &Facts) -> Result<(), String> {
        for part in self.node.served() {
            if !part.wants_window.load(std::sync::atomic::Ordering::SeqCst) {
                continue;
            }
            let Some((end, rev)) = facts.fences[usize::from(part.index)] else {
                continue;
            };
            let owner = format!("{}owners/{}", self.prefix, part.index);
            let fences = format!("{}fences/{}", self.prefix, part.index);
            let next = end + self.node.window;
            let txn = Txn::new()
                .when([
                    Compare::create_revision(owner, CompareOp::Equal, part.claim),
                    Compare::mod_revision(fences.clone(), CompareOp::Equal, rev),
                ])
                .and_then([TxnOp::put(fences, next.to_string(), None)]);
            if timed("reserve", self.client.txn(txn)).await?.succeeded() {
                self.node.window_reserved(&part, next);
            }
        }
        Ok(())
    }
}

/// Keeps the lease alive every ttl/4, moving the node's deadline on each
/// answer by the send time of the request it answers; ends the session
/// (no deadline) when etcd says the lease is gone. A request unanswered in
/// ttl/4 drops the stream, so a late answer is never credited to a later
/// request's send time.
async fn keep_alive(mut client: Client, node: Arc<Node>, lease: i64) {
    let every = node.ttl / 4;
    let mut stream = None;
    loop {
        if stream.is_none() {
            stream = timed("keepalive", client.lease_keep_alive(lease))
                .await
                .ok();
        }
        if let Some((keeper, answers)) = stream.as_mut() {
            let sent = node.now();
            let answer = tokio::time::timeout(every, async {
                keeper.keep_alive().await?;
                answers.message().await
            })
            .await;
            match answer {
                Ok(Ok(Some(a))) if a.ttl() > 0 => {
                    node.lease_confirmed(lease, sent, Duration::from_secs(a.ttl() as u64));
                }
                Ok(Ok(Some(_))) => {
                    warn!(lease, "etcd says the lease is gone");
                    node.end_lease();
                    return;
                }
                _ => stream = None,
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// Stops every partition when the deadline passes, even if no command
/// comes to check it; ends when the session has no deadline any more.
async fn watchdog(node: Arc<Node>) {
    while let Some(deadline) = node.deadline() {
        tokio::time::sleep_until(deadline.into()).await;
        node.check_deadline();
    }
}

/// Ends the keepalive and watchdog tasks with the session, however the session ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One reading of the cluster's keys.
struct Facts {
    /// Live nodes: id and address.
    nodes: Vec<(String, String)>,
    /// Each partition's owner id and its claim's revision.
    owners: Vec<Option<(String, i64)>>,
    /// Each partition's reserved window end and its key's revision.
    fences: Vec<Option<(u64, i64)>>,
}

impl Facts {
    fn read(prefix: &str, partitions: u16, kvs: &[etcd_client::KeyValue]) -> Facts {
        let n = usize::from(partitions);
        let mut facts = Facts {
            nodes: Vec::new(),
            owners: vec![None; n],
            fences: vec![None; n],
        };
        for kv in kvs {
            let (Ok(key), Ok(value)) = (kv.key_str(), kv.value_str()) else {
                continue;
            };
            let Some(rest) = key.strip_prefix(prefix) else {
                continue;
            };
            let (kind, name) = rest.split_once('/').unwrap_or((rest, ""));
            let index = name.parse::<usize>().ok().filter(|&p| p < n);
            match (kind, index) {
                ("nodes", _) => facts.nodes.push((name.to_owned(), value.to_owned())),
                ("owners", Some(p)) => {
                    facts.owners[p] = Some((value.to_owned(), kv.create_revision()))
                }
                ("fences", Some(p)) => {
                    facts.fences[p] = value.parse().ok().map(|e| (e, kv.mod_revision()));
                }
                _ => {}
            }
        }
        facts
    }

    fn live(&self) -> Vec<String> {
        self.nodes.iter().map(|(id, _)| id.clone()).collect()
    }

    fn view(&self) -> View {
        let addr = |id: &str| {
            self.nodes
                .iter()
                .find(|(n, _)| n == id)
                .map(|(_, a)| a.clone())
        };
        let mut nodes = self.nodes.clone();
        nodes.sort();
        View {
            nodes,
            owners: self
                .owners
                .iter()
                .map(|o| {
                    let (id, _) = o.as_ref()?;
                    Some((id.clone(), addr(id)?))
                })
                .collect(),
        }
    }
}

/// Nanoseconds since the Unix epoch: a new partition's first window starts
/// there, level with a single node's fences.
fn wall_clock_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
