//! One connection's state: its protocol version, its authentication and
//! name, its leases (renewed by every command read, let go when it
//! closes) and the keys they hold, the watch over their loss signals, and
//! a small cache of lock handles. What each command does with this state
//! is the `cmd` module's.
//!
//! The session never blocks: a HOLD that must wait comes back as a
//! [`Step::Wait`] holding the future, which the connection polls while it
//! goes on reading; [`Session::granted`] then answers it.

use crate::clients::{ClientState, Clients};
use crate::cluster::{handover, slots, Node, Partition, Route};
use crate::config::Limits;
use crate::events::{self, Event, History, Kind};
use crate::loss_watch::LossWatches;
use crate::metrics::{Metrics, Snapshot};
use crate::observers::{Observers, Outbox, Watch};
use crate::record::{ByLeaseId, HeldKey, Holder, LeaseRecord};
use crate::reply::{self, ErrorReply, ErrorWord, Reply};
use crate::users::{Directory, User};
use holdline::{wire, Error, ErrorKind, Heartbeat, HeldLease, Lock, LockStats, Store};
use holdline_resp::{Proto, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Frames a client may send before it authenticated, when a token is
/// required: enough for HELLO with AUTH, too little to make the server
/// buffer much for a stranger (Redis does the same).
pub const UNAUTHENTICATED_MAX_FRAME: usize = 16 * 1024;

/// What every connection shares: the store (or, in a cluster, the node
/// and the partitions it serves), the server's settings, the registry of
/// connections, the locks opened so far, and the counters.
pub struct Shared {
    /// The one store of a single node (in a cluster: unused but for
    /// checking lock names).
    pub store: Store,
    /// Set when the server is a node of a cluster.
    pub cluster: Option<Arc<Node>>,
    /// Who may connect, and each one's rights.
    pub users: Directory,
    /// What one connection may cost (`--max-output`, `--timeout`, ...).
    pub limits: Limits,
    max_frame: usize,
    next_lease: AtomicU64,
    next_client: AtomicU64,
    pub clients: Clients,
    pub facts: Facts,
    pub counts: Counts,
    /// Recorded into when `--metrics` serves them.
    pub metrics: Option<Arc<Metrics>>,
    /// Grants and ends of leases: `--history`, `--audit-log`.
    pub history: History,
    /// Who observes which key (`OBSERVE`); in a cluster, the node's.
    pub observers: Arc<Observers>,
    /// Set by the first SIGTERM of a single server: HOLD and TRYHOLD are
    /// refused, holders finish.
    draining: AtomicBool,
}

/// What the server is, for INFO.
pub struct Facts {
    pub started: Instant,
    pub port: u16,
    pub tls: bool,
    pub max_clients: usize,
}

/// Server-wide counters (relaxed: each is a tally on its own).
#[derive(Default)]
pub struct Counts {
    pub connections_received: AtomicU64,
    pub connections_rejected: AtomicU64,
    pub commands_processed: AtomicU64,
    pub lost_pushes: AtomicU64,
}

impl Counts {
    pub fn add(counter: &AtomicU64, n: u64) {
        // Relaxed: a tally; nothing is published through it.
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

impl Shared {
    pub fn new(store: Store, users: Directory, max_frame: usize, facts: Facts) -> Shared {
        Shared {
            metrics: None,
            cluster: None,
            store,
            users,
            limits: Limits::default(),
            max_frame,
            next_lease: AtomicU64::new(1),
            next_client: AtomicU64::new(1),
            clients: Clients::default(),
            facts,
            counts: Counts::default(),
            history: History::new(0, None),
            observers: Arc::default(),
            draining: AtomicBool::new(false),
        }
    }

    /// From now on HOLD and TRYHOLD are refused (`reply::draining`).
    pub fn drain(&self) {
        // Relaxed: a flag read by later commands; nothing rides on it.
        self.draining.store(true, Ordering::Relaxed);
    }

    /// A new hold's refusal while draining.
    pub fn refuse_if_draining(&self) -> Result<(), ErrorReply> {
        // Relaxed: as in `drain`.
        match self.draining.load(Ordering::Relaxed) {
            true => Err(reply::draining()),
            false => Ok(()),
        }
    }

    /// Whether any key is held or waited for (a drain waits for neither).
    pub fn holds_or_waits(&self) -> bool {
        self.locks()
            .iter()
            .any(|(_, s)| s.held_keys > 0 || s.waiters > 0)
    }

    /// `/readyz`: ready to serve, or why not (draining; in a cluster, no
    /// live etcd lease, or its share not served).
    pub fn readiness(&self) -> Result<(), String> {
        // Relaxed: as in `drain`.
        if self.draining.load(Ordering::Relaxed) {
            return Err("draining".to_owned());
        }
        match &self.cluster {
            Some(node) => node.readiness(),
            None => Ok(()),
        }
    }

    /// Whether a connection must authenticate before anything else.
    pub fn wants_token(&self) -> bool {
        self.users.now().required()
    }

    /// Every lock the store knows (a handle open or a key in memory), by
    /// name, with its counters; in a cluster, summed over the partitions
    /// served here. A name nobody uses is forgotten by the store, and with
    /// it its metrics.
    pub fn locks(&self) -> Vec<(String, LockStats)> {
        let stores: Vec<Store> = match &self.cluster {
            Some(node) => node.served().iter().map(|p| p.store.clone()).collect(),
            None => vec![self.store.clone()],
        };
        let mut sums: BTreeMap<String, LockStats> = BTreeMap::new();
        for store in stores {
            for (name, stats) in store.locks() {
                add_stats(sums.entry(name).or_default(), &stats);
            }
        }
        if let Some(m) = &self.metrics {
            m.forget_locks_but(|name| sums.contains_key(name));
        }
        sums.into_iter().collect()
    }

    /// One lock's counters (see [`Shared::locks`]); zeros if never opened.
    pub fn lock_stats(&self, name: &str) -> LockStats {
        self.locks()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s)
            .unwrap_or_default()
    }

    /// The figures metrics read at scrape time.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            connections: self.clients.count() as u64,
            accepted: Counts::get(&self.counts.connections_received),
            rejected: Counts::get(&self.counts.connections_rejected),
            blocked: self.clients.blocked() as u64,
            audit_dropped: self.history.audit_dropped(),
            locks: self
                .locks()
                .into_iter()
                .map(|(name, stats)| (name, stats.fields()))
                .collect(),
            cluster: self.cluster.as_ref().map(|node| {
                let left = node.deadline().map_or(0, |d| {
                    d.saturating_duration_since(Instant::now()).as_millis() as u64
                });
                (node.served().len() as u64, left)
            }),
        }
    }
}

fn add_stats(sum: &mut LockStats, more: &LockStats) {
    let adds = more.fields();
    for (name, n) in sum.fields() {
        let more = adds.iter().find(|(m, _)| *m == name).map_or(0, |(_, v)| *v);
        sum.set_field(name, n.saturating_add(more));
    }
}

/// Where a key's command runs: the one store, or the partition serving the
/// key's slot on this node.
pub enum Place {
    Single,
    Partition(Arc<Partition>),
}

impl Place {
    pub fn partition(&self) -> Option<&Arc<Partition>> {
        match self {
            Place::Single => None,
            Place::Partition(p) => Some(p),
        }
    }

    fn store_id(&self) -> u64 {
        self.partition().map_or(0, |p| p.store_id)
    }

    /// The store to use: the partition's, else `single`.
    pub fn store<'a>(&'a self, single: &'a Store) -> &'a Store {
        self.partition().map_or(single, |p| &p.store)
    }
}

/// How a lock handle is opened: the options a HOLD or TRYHOLD carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockOptions {
    pub ttl: Duration,
    pub max_hold: Option<Duration>,
    /// Each key's permits: `PERMITS` (default 1) on a HOLD or TRYHOLD;
    /// `None` for a command that names no count and takes the lock's own.
    pub permits: Option<u32>,
    /// `BYPASS ms` on a HOLD or TRYHOLD: the waiter's bounded bypass
    /// (`Fairness::BoundedBypass`); `None`: FIFO.
    pub bypass: Option<Duration>,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: wire::DEFAULT_TTL,
            max_hold: None,
            permits: None,
            bypass: None,
        }
    }
}

/// A HOLD waiting in its key's line. Dropping it leaves the line.
pub use crate::cluster::handover::HoldFuture;

/// A HOLD whose answer is still to come.
pub struct PendingHold {
    pub future: HoldFuture,
    /// The key it waits for, filed as held once granted.
    pub held_key: HeldKey,
    /// When the HOLD was read (its wait, for the metrics).
    pub started: Instant,
    /// How long it waits from then.
    pub wait: Duration,
    /// The partition it waits in, in a cluster.
    pub partition: Option<Arc<Partition>>,
    /// The note the lease will carry (`NOTE text`).
    pub note: Box<str>,
    /// What a hand-over carries of it and of its lease (in a cluster).
    pub handed: Option<Box<Handing>>,
    /// Its place in its partition's registry while it waits with a
    /// secret (filed by the connection once it waits).
    pub filed: Option<WaitFiled>,
}

/// What a hand-over carries of a hold besides its key: how it opened its
/// lock, its maxHold, its secret; and for one that re-attached, the
/// heartbeat its lease renews by and the fence its holder knows.
pub struct Handing {
    pub opened: handover::Opened,
    pub max_hold: Option<Duration>,
    pub secret: Option<Box<str>>,
    pub heartbeat: Option<Heartbeat>,
    pub fence: Option<u64>,
}

/// A waiting HOLD's number in its partition's registry: out of it when
/// the wait ends, however it ends.
pub struct WaitFiled {
    pub partition: Arc<Partition>,
    pub number: u64,
}

impl Drop for WaitFiled {
    fn drop(&mut self) {
        self.partition.registry.wait_ended(self.number);
    }
}

impl PendingHold {
    /// Files the HOLD in its partition's registry now that it waits, if
    /// it has a secret (only then can its holder follow it).
    pub fn file_wait(&mut self) {
        let (Some(part), Some(handed)) = (&self.partition, &self.handed) else {
            return;
        };
        let Some(secret) = &handed.secret else {
            return;
        };
        let filed = handover::FiledWait {
            opened: handed.opened.clone(),
            max_hold: handed.max_hold,
            until: self.started + self.wait,
            secret: secret.to_string(),
        };
        self.filed = part.registry.wait(filed).map(|number| WaitFiled {
            partition: part.clone(),
            number,
        });
    }
}

/// What carrying out one command leads to.
pub enum Step {
    Reply(Reply),
    /// A HOLD must wait: poll its future, then call [`Session::granted`].
    Wait(PendingHold),
    /// Answer, then close the connection (QUIT).
    Close(Reply),
}

/// A lease this connection holds: the core's handle, and the record
/// everyone else reads.
pub struct Held {
    pub record: Arc<LeaseRecord>,
    pub lease: HeldLease,
    /// When it was granted (its hold time, for the metrics).
    pub granted: Instant,
    /// The partition it is held in, in a cluster.
    pub partition: Option<Arc<Partition>>,
    /// Whether its end was recorded (a loss is seen before its RELEASE).
    pub ended: bool,
    /// Its holder's secret: it follows its partition when handed over.
    pub secret: Option<Box<str>>,
    /// Its entry in its partition's registry, if filed.
    pub filed: Option<LeaseFiled>,
}

/// Where a waiting HOLD went, if its partition was handed over with it in
/// line: the `MOVED` it answers.
fn moved_wait(filed: &WaitFiled) -> Option<ErrorReply> {
    let registry = &filed.partition.registry;
    let to = registry.sealed()?;
    let slot = registry.exported_wait_slot(filed.number)?;
    Some(reply::moved(slot, &to))
}

/// A lease's entry in its partition's registry: out of it when the lease
/// leaves its connection, however it leaves.
pub struct LeaseFiled {
    partition: Arc<Partition>,
    id: u64,
}

impl Drop for LeaseFiled {
    fn drop(&mut self) {
        self.partition.registry.forget(self.id);
    }
}

impl Held {
    /// The lock's name.
    pub fn lock(&self) -> &str {
        self.record.lock()
    }

    /// Where its observers watch it: its store and its held key.
    fn watch(&self) -> Watch {
        (self.record.store, self.record.held_key.clone())
    }
}

/// Opens the lock handles of a connection's commands, each with the
/// connection's heartbeat of its store, which renews all the leases taken
/// through it at once.
///
/// A handle is opened per command and not kept: a handle open keeps its
/// lock known to the store, and with it the lock's count of permits, which
/// must be free to change once no key of the lock is held or waited for.
/// (Opening costs one look in the store's map of names.)
#[derive(Default)]
struct LockOpener {
    /// One per store the connection opened locks of (one on a single
    /// node; a partition's each in a cluster), by store id. Never dropped
    /// while its store is open: its leases read it.
    heartbeats: Vec<(u64, Heartbeat)>,
    /// Heartbeats of leases handed over and re-attached here, each its
    /// own, by lease id: beaten with the rest.
    adopted: Vec<(u64, Heartbeat)>,
}

impl LockOpener {
    /// The connection's heartbeat of `store` (`store_id`), made on first use.
    fn heartbeat(&mut self, store_id: u64, store: &Store) -> &Heartbeat {
        let at = match self.heartbeats.iter().position(|(id, _)| *id == store_id) {
            Some(at) => at,
            None => {
                self.heartbeats.retain(|(_, h)| !h.is_store_closed());
                self.heartbeats.push((store_id, store.heartbeat()));
                self.heartbeats.len() - 1
            }
        };
        &self.heartbeats[at].1
    }

    /// The connection was heard from: every lease of it counts its ttl
    /// from now. O(stores), whatever the number of leases.
    fn beat(&self) {
        for (_, heartbeat) in self.heartbeats.iter().chain(&self.adopted) {
            heartbeat.beat();
        }
    }

    /// The handle, or `None` when `known_only` and the store does not
    /// know the lock (a look that must not make it).
    fn open(
        &mut self,
        shared: &Shared,
        place: &Place,
        name: &[u8],
        options: LockOptions,
        known_only: bool,
    ) -> Result<Option<Lock>, ErrorReply> {
        let store_id = place.store_id();
        // A name that is not UTF-8 is no valid name: the core refuses the
        // replacement character with its own text.
        let text = String::from_utf8_lossy(name);
        let store = place.store(&shared.store);
        let heartbeat = self.heartbeat(store_id, store).clone();
        let mut builder = store.lock(&text).ttl(options.ttl).heartbeat(&heartbeat);
        if let Some(max_hold) = options.max_hold {
            builder = builder.max_hold(max_hold);
        }
        if let Some(permits) = options.permits {
            builder = builder.permits(permits);
        }
        if let Some(bound) = options.bypass {
            builder = builder.fairness(holdline::Fairness::BoundedBypass(bound));
        }
        if known_only {
            return Ok(builder.open_if_known()?);
        }
        Ok(Some(builder.open()?))
    }
}

/// One connection's state.
pub struct Session {
    pub shared: Arc<Shared>,
    /// What operators see of this connection (its held keys among it).
    pub client: Arc<ClientState>,
    pub proto: Proto,
    pub authenticated: bool,
    /// Who it authenticated as (everyone is `default` with every right on
    /// a server without authentication); `None` before it has.
    pub user: Option<Arc<User>>,
    /// AUTHs refused so far (the tenth closes the connection).
    pub failed_auths: u32,
    locks: LockOpener,
    pub leases: ByLeaseId<Held>,
    /// Which leases were lost, polled by the connection.
    pub losses: LossWatches,
    /// Its pushes to write, once it observes a key (`OBSERVE`).
    pub outbox: Option<Arc<Outbox>>,
    /// Who it is, as its leases' records name it: made at its first
    /// grant, forgotten when its name changes.
    pub holder: Option<Arc<Holder>>,
}

impl Session {
    pub fn new(shared: Arc<Shared>, addr: SocketAddr) -> Session {
        // Relaxed: a counter handing out ids; nothing is published by it.
        let id = shared.next_client.fetch_add(1, Ordering::Relaxed);
        let client = Arc::new(ClientState::new(id, addr));
        shared.clients.add(client.clone());
        Counts::add(&shared.counts.connections_received, 1);
        let user = shared.users.now().anonymous();
        if let Some(u) = &user {
            client.set_user(&u.name);
        }
        Session {
            shared,
            client,
            proto: Proto::Resp2,
            authenticated: user.is_some(),
            user,
            failed_auths: 0,
            locks: LockOpener::default(),
            leases: ByLeaseId::default(),
            losses: LossWatches::default(),
            outbox: None,
            holder: None,
        }
    }

    pub fn id(&self) -> u64 {
        self.client.id
    }

    /// The frame limit for this connection now.
    pub fn frame_limit(&self) -> usize {
        if self.authenticated {
            self.shared.max_frame
        } else {
            self.shared.max_frame.min(UNAUTHENTICATED_MAX_FRAME)
        }
    }

    /// A command was read: the connection is alive, so all its leases are.
    /// O(1) in the leases (one beat of the connection's heartbeat, which
    /// their expiry reads), so a connection holding 10,000 leases costs
    /// nobody anything; a silent connection still loses each lease exactly
    /// its `ttl` after the last command read, as its client counts on.
    pub fn renew_all(&self) {
        // In a cluster, past the node's deadline nothing is renewed: every
        // partition stops first.
        if let Some(node) = &self.shared.cluster {
            node.check_deadline();
        }
        // A lease granted later counts its ttl from its grant.
        if !self.leases.is_empty() {
            self.locks.beat();
        }
    }

    /// The handle of lock `name` with `options` in `place`, or the refusal
    /// to answer.
    pub fn lock(
        &mut self,
        place: &Place,
        name: &[u8],
        options: LockOptions,
    ) -> Result<Lock, ErrorReply> {
        self.may_use(name)?;
        let lock = self.locks.open(&self.shared, place, name, options, false)?;
        Ok(lock.expect("made if unknown"))
    }

    /// The handle of lock `name` in `place` if its store knows it now,
    /// with its own count of permits (for a look that must not make it).
    pub fn lock_if_known(
        &mut self,
        place: &Place,
        name: &[u8],
    ) -> Result<Option<Lock>, ErrorReply> {
        self.may_use(name)?;
        let options = LockOptions::default();
        self.locks.open(&self.shared, place, name, options, true)
    }

    /// `Ok` when this connection's user may name lock `name`, else the
    /// NOPERM to answer.
    pub fn may_use(&self, name: &[u8]) -> Result<(), ErrorReply> {
        let name = String::from_utf8_lossy(name);
        match &self.user {
            Some(user) if user.may_use(&name) => Ok(()),
            Some(user) => Err(ErrorReply::new(ErrorWord::NoPerm, user.refusal(&name))),
            None => Err(reply::noauth()),
        }
    }

    /// Whether this connection's user sees connection `other` (its own,
    /// or every one for an admin).
    pub fn sees(&self, other: &ClientState) -> bool {
        self.user
            .as_ref()
            .is_some_and(|u| u.admin || other.user().as_deref() == Some(u.name.as_str()))
    }

    /// Authenticated as `user`: the connection shows its name.
    pub fn authenticated_as(&mut self, user: Arc<User>) {
        self.client.set_user(&user.name);
        self.user = Some(user);
        self.authenticated = true;
    }

    /// Where a command for `key` runs, or the redirection to answer
    /// (`MOVED slot host:port`, or `CLUSTERDOWN` while nobody serves it).
    pub fn place(&self, key: &[u8]) -> Result<Place, ErrorReply> {
        let Some(node) = &self.shared.cluster else {
            return Ok(Place::Single);
        };
        let slot = slots::key_slot(key);
        match node.route(slot) {
            Route::Here(part) => Ok(Place::Partition(part)),
            Route::Moved(slot, addr) => Err(reply::moved(slot, &addr)),
            Route::Down => Err(reply::cluster_down()),
        }
    }

    /// Whether a lease in `partition` may still be granted or kept: in a
    /// cluster, reads the clock (past the node's deadline every partition
    /// stops first).
    pub fn still_served(&self, partition: Option<&Arc<Partition>>) -> bool {
        match (partition, &self.shared.cluster) {
            (Some(part), Some(node)) => node.serves(part),
            _ => true,
        }
    }

    /// The answer to a HOLD that waited.
    pub fn granted(&mut self, result: Result<HeldLease, Error>, mut pending: PendingHold) -> Reply {
        match result {
            Ok(lease) => {
                if let Some(m) = &self.shared.metrics {
                    m.waited(pending.held_key.lock(), pending.started.elapsed());
                }
                // Granted as its partition was sealed with it in line:
                // its place went with the export, where it follows it.
                if let Some(moved) = pending.filed.as_ref().and_then(moved_wait) {
                    drop(lease);
                    return Err(moved);
                }
                drop(pending.filed.take());
                let handed = pending.handed.take();
                self.keep(
                    lease,
                    pending.held_key,
                    pending.partition,
                    pending.note,
                    handed,
                )
            }
            // A wait handed over with its partition: told where to follow.
            Err(e) if e.kind() == ErrorKind::Closed => Err(pending
                .filed
                .as_ref()
                .and_then(moved_wait)
                .unwrap_or_else(|| e.into())),
            Err(e) => Err(e.into()),
        }
    }

    /// Where lease `held` went, if its partition was handed over with it:
    /// the `MOVED` its RENEW and RELEASE answer.
    pub fn moved(held: &Held) -> Option<ErrorReply> {
        let part = held.partition.as_ref()?;
        held.secret.as_ref()?;
        if held.lease.signal().reason() != Some(holdline::EndReason::StoreClosed) {
            return None;
        }
        let to = part.registry.sealed()?;
        Some(reply::moved(
            slots::key_slot(held.record.key().as_bytes()),
            &to,
        ))
    }

    /// Files a granted lease under a fresh id: `[lease, fence]`. In a
    /// cluster, a grant its partition may no longer answer (the node's
    /// deadline passed, the partition stopped, or its fence is past the
    /// reserved window) is let go and answered as a waiter is when its
    /// store closes.
    pub fn keep(
        &mut self,
        lease: HeldLease,
        held_key: HeldKey,
        partition: Option<Arc<Partition>>,
        note: Box<str>,
        handed: Option<Box<Handing>>,
    ) -> Reply {
        if let (Some(part), Some(node)) = (&partition, &self.shared.cluster) {
            let served = node.serves(part);
            if !served || !node.fence_allowed(part, lease.fence()) {
                drop(lease);
                if served {
                    node.window_spent(part);
                }
                let scope = wire::Scope::Key(held_key.lock(), held_key.key());
                let closed = wire::error(ErrorKind::Closed, scope, "the store is closed");
                return Err(ErrorReply::core(&closed));
            }
        }
        // A HOLD that waited was granted a moment ago, while commands may
        // have been read: its ttl counts from now. (A lost lease stays
        // lost; the watch tells.)
        let _ = lease.renew();
        let fence = handed.as_ref().and_then(|h| h.fence);
        let mut held = self.record(lease, held_key, partition, note, fence);
        let (id, fence) = (held.record.id, held.record.fence);
        // Filed before it is answered: a partition sealed meanwhile (its
        // hand-over under way) must not answer a grant it did not export.
        if let (Some(part), Some(handed)) = (held.partition.clone(), handed) {
            let Handing {
                opened,
                max_hold,
                secret,
                heartbeat,
                fence: _,
            } = *handed;
            held.secret = secret;
            if let Some(heartbeat) = heartbeat {
                self.locks.adopted.push((id, heartbeat));
            }
            let filed = handover::Filed {
                opened,
                fence,
                secret: held.secret.as_ref().map(|s| s.to_string()),
                granted: held.granted,
                max_hold,
                signal: held.lease.signal(),
            };
            if !part.registry.admit(id, filed) {
                let scope = wire::Scope::Key(held.record.lock(), held.record.key());
                let closed = wire::error(ErrorKind::Closed, scope, "the store is closed");
                return Err(ErrorReply::core(&closed));
            }
            held.filed = Some(LeaseFiled {
                partition: part.clone(),
                id,
            });
        }
        self.losses.watch(id, held.lease.signal().aborted());
        self.client.held(held.record.clone());
        if let Some(event) = self.event(&held, Kind::Granted, None) {
            self.shared.history.record(event);
        }
        // After the connection's map of held keys: see `Observers::is_empty`.
        if !self.shared.observers.is_empty() {
            let record = held.record.clone();
            self.shared.observers.granted(&held.watch(), record);
        }
        self.leases.insert(id, held);
        // Fences stay below 2^63, so they travel as RESP integers.
        Ok(Value::Array(vec![
            Value::Integer(id as i64),
            Value::Integer(i64::try_from(fence).unwrap_or(i64::MAX)),
        ]))
    }

    /// A granted lease's record, under a fresh id.
    fn record(
        &mut self,
        lease: HeldLease,
        held_key: HeldKey,
        partition: Option<Arc<Partition>>,
        note: Box<str>,
        fence: Option<u64>,
    ) -> Held {
        // Relaxed: a counter handing out ids; nothing is published by it.
        let id = self.shared.next_lease.fetch_add(1, Ordering::Relaxed);
        let store = partition.as_ref().map_or(0, |p| p.store_id);
        let record = LeaseRecord::new(
            id,
            held_key,
            store,
            // A lease handed over keeps the fence its holder knows.
            fence.unwrap_or(lease.fence()),
            lease.permits(),
            self.holder(),
            lease.signal(),
            Arc::from(note),
        );
        Held {
            record: Arc::new(record),
            lease,
            granted: Instant::now(),
            partition,
            ended: false,
            secret: None,
            filed: None,
        }
    }

    /// The push telling a RESP3 client its lease `id` was lost, if it is.
    pub fn loss_push(&self, id: u64) -> Option<Value> {
        if self.proto != Proto::Resp3 {
            return None;
        }
        let held = self.leases.get(&id)?;
        if let (Some(part), Some(_)) = (&held.partition, Self::moved(held)) {
            // ["moved", lease, slot, host:port]: it follows its partition.
            let to = part.registry.sealed()?;
            let slot = slots::key_slot(held.record.key().as_bytes());
            return Some(Value::Push(vec![
                Value::bulk("moved"),
                Value::Integer(id as i64),
                Value::Integer(i64::from(slot)),
                Value::bulk(to.to_string()),
            ]));
        }
        let error = held.lease.check().err()?;
        Some(Value::Push(vec![
            Value::bulk("lost"),
            Value::Integer(id as i64),
            Value::bulk(error.to_string()),
        ]))
    }
}

impl Session {
    /// A lease leaves the connection (released, forgotten, or closed with
    /// it): its hold time goes to the metrics.
    pub fn let_go(&mut self, held: &Held) {
        self.locks.adopted.retain(|(id, _)| *id != held.record.id);
        self.client.let_go(&held.record.held_key);
        self.held_for_metrics(held);
    }

    /// Replaces lease `id`'s note (the caller checked it is this
    /// connection's and well formed).
    pub fn set_note(&mut self, id: u64, note: Box<str>) {
        if let Some(held) = self.leases.get(&id) {
            held.record.set_note(Arc::from(note));
            if !self.shared.observers.is_empty() {
                self.shared.observers.noted(&held.watch(), id);
            }
        }
    }

    /// Records the end of lease `id` (`kind`), once: a loss is seen (and
    /// recorded) before the RELEASE or the close that follows it.
    pub fn record_end(&mut self, id: u64, kind: Kind, reason: Option<&'static str>) {
        let Some(held) = self.leases.get(&id).filter(|h| !h.ended) else {
            return;
        };
        if let Some(event) = self.event(held, kind, reason) {
            self.shared.history.record(event);
        }
        self.tell_observers_end(held, || kind);
        if let Some(held) = self.leases.get_mut(&id) {
            held.ended = true;
        }
    }

    /// Tells the key's observers (if any) that `held` ended (`kind`, asked
    /// only then); a RELEASE or a closing connection does so before the
    /// core lets the key go, so the next holder's grant is told after it.
    pub fn tell_observers_end(&self, held: &Held, kind: impl FnOnce() -> Kind) {
        if !self.shared.observers.is_empty() {
            let id = held.record.id;
            self.shared.observers.ended(&held.watch(), id, kind());
        }
    }

    /// The event of a lease's grant (`Granted`) or end: `None` when no
    /// events are kept. One allocation: the rest is the lease's record.
    pub fn event(&self, held: &Held, kind: Kind, reason: Option<&'static str>) -> Option<Event> {
        if !self.shared.history.is_on() {
            return None;
        }
        let held_ms = (kind != Kind::Granted)
            .then(|| u64::try_from(held.granted.elapsed().as_millis()).unwrap_or(u64::MAX));
        Some(Event {
            time_ms: events::now_ms(),
            event: kind,
            of: held.record.clone(),
            note: held.record.note(),
            held_ms,
            reason,
        })
    }

    /// Who this connection is, as its leases' records name it: made at its
    /// first grant, again after its name changed.
    fn holder(&mut self) -> Arc<Holder> {
        let client = &self.client;
        self.holder
            .get_or_insert_with(|| {
                Arc::new(Holder {
                    id: client.id,
                    name: client
                        .name()
                        .map(|n| String::from_utf8_lossy(&n).into_owned()),
                    addr: client.addr.to_string(),
                })
            })
            .clone()
    }

    fn held_for_metrics(&self, held: &Held) {
        if let Some(m) = &self.shared.metrics {
            m.held(held.lock(), held.granted.elapsed());
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let reason = self.client.closed_because();
        let ends: Vec<(u64, Kind)> = self
            .leases
            .iter()
            .map(|(&id, held)| match held.lease.is_lost() {
                true => (id, Kind::of_loss(held.lease.signal().reason())),
                false => (id, Kind::Disconnected),
            })
            .collect();
        for (id, kind) in ends {
            let reason = (kind == Kind::Disconnected).then_some(reason).flatten();
            self.record_end(id, kind, reason);
        }
        for held in self.leases.values() {
            self.held_for_metrics(held);
            // Its observers were told (`record_end`).
            held.record.forget_signal();
        }
        if let Some(outbox) = &self.outbox {
            self.shared.observers.forget(outbox);
        }
        self.shared.clients.remove(self.client.id);
    }
}
