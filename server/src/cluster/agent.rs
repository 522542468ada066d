//! The node's etcd session: joins (reads or fixes the partition count),
//! takes a lease and keeps it alive, registers the node, and every tick
//! reads the cluster's keys and acts on [`shares::plan`]: claims, gives
//! up, reserves fence windows, stops what etcd no longer says is ours.
//! When the lease is gone (or its deadline passed) it stops everything and
//! starts a new session; a shutdown gives every partition up at once.
//!
//! Keys under `/holdline/<cluster>/`: `partitions` and `max_ttl_ms`
//! (written once, when the cluster is created), `nodes/<id>` = advertised
//! address and `owners/<p>` = node id (both under the node's lease),
//! `fences/<p>` = the end of the highest fence window reserved and
//! `handed/<p>` = the window end of the last clean hand-over (no lease).
//! The safety argument is in the module doc of `cluster`.

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
    let partitions = setting(
        &mut client,
        &prefix,
        "partitions",
        settings.partitions.into(),
    )
    .await?;
    let partitions = u16::try_from(partitions)
        .ok()
        .filter(|n| (1..=1024).contains(n))
        .ok_or_else(|| format!("etcd key {prefix}partitions holds {partitions}"))?;
    let max_ttl_ms = settings.max_ttl.as_millis() as u64;
    let max_ttl_ms = setting(&mut client, &prefix, "max_ttl_ms", max_ttl_ms).await?;
    let node = Arc::new(Node::new(
        super::new_node_id(),
        settings.advertise.clone(),
        partitions,
        (settings.ttl, Duration::from_millis(max_ttl_ms)),
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

/// A setting fixed when the cluster is created: written now if the cluster
/// is new, else the cluster's value (a different flag is logged, not used).
async fn setting(
    client: &mut Client,
    prefix: &str,
    name: &str,
    wanted: u64,
) -> Result<u64, String> {
    let key = format!("{prefix}{name}");
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
    let value: u64 = text
        .parse()
        .map_err(|_| format!("etcd key {key} holds {text:?}, not a number"))?;
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
        self.node.clone()
    }

    /// Sessions until the node leaves (the server's shutdown calls
    /// [`Node::leave`]; `shutdown` turning true does the same); then hands
    /// every partition over in etcd and revokes the lease, so other nodes
    /// take over at once instead of waiting out the ttl.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        while !self.node.is_leaving() {
            let ended = tokio::select! {
                r = self.session() => r,
                _ = shutdown.wait_for(|s| *s) => break,
            };
            if self.node.is_leaving() {
                break;
            }
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
        self.node.leave();
        if let Err(why) = self.hand_over_stopped().await {
            warn!(%why, "could not hand every partition over; the rest move when the lease runs out");
        }
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
    /// passed; `Ok` only when the node leaves.
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
            if self.node.is_leaving() {
                return Ok(());
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
        self.hand_over_stopped().await?;
        self.drop_what_etcd_denies(&facts).await;
        let owners: Vec<Option<String>> = facts
            .owners
            .iter()
            .map(|o| o.as_ref().map(|(id, _)| id.clone()))
            .collect();
        let plan = shares::plan(&self.node.id, &facts.live(), &owners);
        for p in plan.give_up {
            self.node.stop(p);
            info!(partition = p, "gave the partition up");
        }
        self.hand_over_stopped().await?;
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

    /// Hands over in etcd every partition the node stopped on purpose.
    async fn hand_over_stopped(&mut self) -> Result<(), String> {
        for (p, claim, end) in self.node.left() {
            self.hand_over(p, claim, Some(end)).await?;
        }
        Ok(())
    }

    /// Deletes our claim of `p` (revision `rev`), which we no longer
    /// serve. With `end`, the end of our last window, it also marks the
    /// hand-over clean (`handed/<p>` = that end, in the same transaction,
    /// only if no window was reserved since): every holder was told it
    /// lost its lease, so the next owner need not wait out their ttls.
    async fn hand_over(&mut self, p: u16, rev: i64, end: Option<u64>) -> Result<(), String> {
        let owner = format!("{}owners/{p}", self.prefix);
        if let Some(end) = end {
            let fences = format!("{}fences/{p}", self.prefix);
            let handed = format!("{}handed/{p}", self.prefix);
            let txn = Txn::new()
                .when([
                    Compare::create_revision(owner.clone(), CompareOp::Equal, rev),
                    Compare::value(fences, CompareOp::Equal, end.to_string()),
                ])
                .and_then([
                    TxnOp::delete(owner, None),
                    TxnOp::put(handed, end.to_string(), None),
                ]);
            if timed("txn", self.client.txn(txn)).await?.succeeded() {
                return Ok(());
            }
        }
        self.delete_claim(p, rev).await
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
        let lease = self.node.lease();
        if lease == 0 || self.node.is_leaving() {
            return Ok(());
        }
        let owner = format!("{}owners/{p}", self.prefix);
        let fences = format!("{}fences/{p}", self.prefix);
        let (floor, fences_rev) = facts.fences[usize::from(p)].unwrap_or((wall_clock_ns(), 0));
        // Fences travel as signed 64-bit integers: a window must end below.
        let Some(end) = floor
            .checked_add(self.node.window)
            .filter(|&e| e < i64::MAX as u64)
        else {
            warn!(
                partition = p,
                floor, "no fences left below 2^63 (or fences/<p> is not a number): not claiming"
            );
            return Ok(());
        };
        let handed_over = facts.handed_over(p);
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
            self.node.serve(p, floor, revision, handed_over);
            if handed_over {
                info!(partition = p, "serving the partition");
            } else {
                info!(partition = p, wait = ?self.node.max_ttl, "serving the partition once no holder of its last owner can think it holds a key");
            }
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

/// Keeps the lease alive: a keepalive every ttl/4 on one stream, each
/// answer credited to the send time of the request it answers (etcd
/// answers a stream's requests in order), so a slow answer still counts
/// for what it proves. A stream with a request unanswered for a ttl is
/// dropped for a new one (whose opening is itself a keepalive). etcd
/// saying the lease is gone ends the session.
async fn keep_alive(mut client: Client, node: Arc<Node>, lease: i64) {
    let every = node.ttl / 4;
    loop {
        let sent = node.now();
        let (mut keeper, mut answers) =
            match timed("keepalive", client.lease_keep_alive(lease)).await {
                Ok(stream) => stream,
                Err(why) if why.contains("lease not found") => {
                    warn!(lease, "etcd says the lease is gone");
                    node.lease_gone(lease);
                    return;
                }
                Err(_) => {
                    tokio::time::sleep(every / 2).await;
                    continue;
                }
            };
        // Opening the stream sent a keepalive and read its answer (alive).
        node.lease_confirmed(lease, sent, node.ttl);
        if !keep_stream(&node, lease, &mut keeper, &mut answers, every).await {
            return;
        }
    }
}

/// One keepalive stream's life: `false` once the lease is gone.
async fn keep_stream(
    node: &Node,
    lease: i64,
    keeper: &mut etcd_client::LeaseKeeper,
    answers: &mut etcd_client::LeaseKeepAliveStream,
    every: Duration,
) -> bool {
    let mut sent: std::collections::VecDeque<u64> = std::collections::VecDeque::new();
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let stuck = sent
                    .front()
                    .is_some_and(|s| node.now() - s > node.ttl.as_nanos() as u64);
                if stuck {
                    return true;
                }
                sent.push_back(node.now());
                if keeper.keep_alive().await.is_err() {
                    return true;
                }
            }
            answer = answers.message() => match answer {
                Ok(Some(a)) => {
                    let Some(at) = sent.pop_front() else { return true };
                    if a.ttl() <= 0 {
                        warn!(lease, "etcd says the lease is gone");
                        node.lease_gone(lease);
                        return false;
                    }
                    node.lease_confirmed(lease, at, Duration::from_secs(a.ttl() as u64));
                }
                _ => return true,
            },
        }
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
    /// Each partition's last clean hand-over: the window end it was at.
    handed: Vec<Option<u64>>,
}

impl Facts {
    fn read(prefix: &str, partitions: u16, kvs: &[etcd_client::KeyValue]) -> Facts {
        let n = usize::from(partitions);
        let mut facts = Facts {
            nodes: Vec::new(),
            owners: vec![None; n],
            fences: vec![None; n],
            handed: vec![None; n],
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
                    // A value that is not a number leaves no window to use.
                    let end = value.parse().unwrap_or(u64::MAX);
                    facts.fences[p] = Some((end, kv.mod_revision()));
                }
                ("handed", Some(p)) => facts.handed[p] = value.parse().ok(),
                _ => {}
            }
        }
        facts
    }

    /// Whether `p`'s last owner handed it over cleanly: its mark names
    /// the window still current (a later claim would have moved it), or no
    /// owner ever claimed it.
    fn handed_over(&self, p: u16) -> bool {
        match self.fences[usize::from(p)] {
            None => true,
            Some((end, _)) => self.handed[usize::from(p)] == Some(end),
        }
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
