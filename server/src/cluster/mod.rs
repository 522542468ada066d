//! Cluster mode: several `holdline serve` nodes split the key space, and
//! etcd decides which node owns which part. This module owns the node's
//! side of that: which partitions it serves now (each one a [`Store`] of
//! its own), until when its etcd lease surely lives, what it last read of
//! the other nodes (for `MOVED` and `CLUSTER SLOTS`), and where a key's
//! command goes ([`Node::route`]). The etcd session that changes these
//! lives in `agent`; the shares it aims for in `shares`; slots in `slots`.
//!
//! # Why a key never has two live owners, and fences keep rising
//!
//! Facts from etcd (linearizable; a revision orders every write):
//! - A node holds one etcd lease of `etcd-ttl` seconds. Its claim of a
//!   partition is the key `owners/<p>`, written by a transaction that
//!   succeeds only if the key does not exist, and attached to that lease:
//!   etcd deletes it when the lease expires or is revoked. So at any etcd
//!   revision a partition has at most one owner, and a new claim succeeds
//!   only after the previous owner's lease was gone or it gave the
//!   partition up (deleted the key after it stopped serving).
//! - etcd's leader expires a lease no earlier than `ttl` after it processed
//!   the last keepalive, and a keepalive is processed after it was sent.
//!
//! What the node does:
//! 1. It serves a partition only between a claim etcd acknowledged and the
//!    **deadline**: `s + ttl - margin`, `s` the send time (its own
//!    monotonic clock) of the last keepalive (or grant) that etcd answered
//!    with the lease alive. The margin is `max(ttl / 5, 250 ms)`.
//! 2. Every path that could hand out or keep a grant reads the clock
//!    first ([`Node::check_deadline`]: each command read, each grant about
//!    to be answered, each RENEW, RELEASE and PUT); past the deadline it
//!    stops every partition before answering. A timer in the agent does
//!    the same when no command comes. A node frozen (SIGSTOP, a VM pause)
//!    across its deadline therefore stops at its first step after waking,
//!    before it answers anything.
//! 3. Stopping a partition closes its store: every lease on it is lost
//!    (the holder is told), every waiter fails `closed`; later commands are
//!    redirected. A partition given up is stopped *before* its key is
//!    deleted in etcd.
//!
//! Timing assumption (the only one): during one `ttl`, the node's
//! monotonic clock runs no slower than the etcd leader's by more than
//! `margin / ttl` (20%). Then the node's deadline comes before etcd's
//! expiry, so it stops serving before any other node can claim; a new
//! owner serves only after etcd granted its claim. Nothing assumes the
//! network's delays or that processes keep running: a pause only delays
//! the node's next step, which checks the deadline first.
//!
//! Fences, with no clock at all: `fences/<p>` in etcd holds the end of the
//! highest window of fences ever reserved for the partition (it has no
//! lease: it outlives owners). A claim reads it as `E` and, in the same
//! transaction (which also checks `fences/<p>` is unchanged), raises it to
//! `E + window`; the new store gives fences above `E` only, and a grant
//! whose fence would pass the window's end is refused (the partition
//! stops) unless the owner reserved the next window, again by a
//! transaction that checks its claim is still the key's current one. So
//! every window an owner used was reserved, in etcd's order, before the
//! next owner's claim, and that claim starts above it: a key's fences rise
//! across owners even if the timing assumption above fails. Fences are
//! what a resource behind the lock should check; the deadline is what
//! keeps two holders from overlapping in the first place.

pub mod agent;
pub mod shares;
pub mod slots;

use holdline::Store;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tracing::warn;

/// What the node knows of the cluster it is in.
pub struct Node {
    /// 40 hex digits, as Redis Cluster's node ids; new at every start.
    pub id: String,
    /// `host:port` other nodes and clients reach this one at.
    pub advertise: String,
    /// Partitions in the cluster (read from etcd at start; fixed).
    pub partitions: u16,
    pub ttl: Duration,
    /// Fences reserved in etcd at a time (`--fence-window`'s default
    /// 2^40: that many grants of one key before the owner must reserve
    /// again, which it does at half, in the background).
    pub window: u64,
    clock: Instant,
    /// Nanoseconds after `clock` until which the etcd lease surely lives;
    /// 0 while there is none. Partitions are served only while it is set.
    deadline: AtomicU64,
    /// The etcd lease the deadline follows: answers about an older one
    /// (a keepalive task being stopped) move nothing.
    lease: AtomicI64,
    /// The partitions served here, by index.
    serving: RwLock<Vec<Option<Arc<Partition>>>>,
    /// What the last reading of etcd said: every partition's owner.
    view: RwLock<View>,
    next_store: AtomicU64,
}

/// One partition served here: a store of its own, opened above the fences
/// of every earlier owner.
pub struct Partition {
    pub index: u16,
    pub store: Store,
    /// Names this store among all this process ever opened (never 0).
    pub store_id: u64,
    /// The etcd revision of this node's claim (its owner key's creation).
    pub claim: i64,
    /// The last fence this partition may give; raised by a new window.
    fence_end: AtomicU64,
    /// Set when a grant passed half of the current window.
    pub wants_window: AtomicBool,
    window_start: AtomicU64,
}

/// Owners as etcd last showed them.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Each partition's owner: (node id, its advertised address).
    pub owners: Vec<Option<(String, String)>>,
    /// Every live node: (id, address), by id.
    pub nodes: Vec<(String, String)>,
}

/// Where a key's command goes.
pub enum Route {
    Here(Arc<Partition>),
    /// Another node serves the slot: `MOVED slot addr`.
    Moved(u16, String),
    /// Nobody serves it now (a failover or hand-off under way).
    Down,
}

impl Node {
    pub fn new(id: String, advertise: String, partitions: u16, ttl: Duration, window: u64) -> Node {
        Node {
            id,
            advertise,
            partitions,
            ttl,
            window,
            clock: Instant::now(),
            deadline: AtomicU64::new(0),
            lease: AtomicI64::new(0),
            serving: RwLock::new(vec![None; usize::from(partitions)]),
            view: RwLock::new(View {
                owners: vec![None; usize::from(partitions)],
                nodes: Vec::new(),
            }),
            next_store: AtomicU64::new(1),
        }
    }

    /// The margin the deadline keeps before etcd's expiry.
    pub fn margin(&self) -> Duration {
        (self.ttl / 5).max(Duration::from_millis(250))
    }

    /// Now, on the node's monotonic clock.
    pub fn now(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    /// etcd answered a keepalive (or the grant) sent at `sent` with the
    /// lease alive for `granted`: the deadline moves to `sent + ttl -
    /// margin` (never back).
    pub fn lease_confirmed(&self, lease: i64, sent: u64, granted: Duration) {
        if self.lease.load(Ordering::SeqCst) != lease {
            return;
        }
        let ttl = granted.min(self.ttl);
        let until = sent + ttl.saturating_sub(self.margin()).as_nanos() as u64;
        // SeqCst: the deadline is read on every command beside the serving
        // table; one total order keeps the argument short.
        self.deadline.fetch_max(until, Ordering::SeqCst);
    }

    /// A session begins with `lease`: only its answers count from now.
    pub fn new_lease(&self, lease: i64) {
        self.lease.store(lease, Ordering::SeqCst);
    }

    /// The instant the deadline falls, if there is a lease.
    pub fn deadline(&self) -> Option<Instant> {
        match self.deadline.load(Ordering::SeqCst) {
            0 => None,
            ns => Some(self.clock + Duration::from_nanos(ns)),
        }
    }

    /// Whether the lease surely lives now; past the deadline, stops
    /// serving everything first (see the module doc).
    pub fn check_deadline(&self) -> bool {
        let deadline = self.deadline.load(Ordering::SeqCst);
        if deadline == 0 {
            // Another thread may be stopping everything right now: wait for
            // it (the stop holds the table), so a caller told "no" never
            // finds a store of the old session still open.
            self.stop_all();
            return false;
        }
        if self.now() < deadline {
            return true;
        }
        // One caller does the stopping; the rest find 0.
        if self
            .deadline
            .compare_exchange(deadline, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            warn!("the etcd lease may lapse: stopped serving every partition");
            self.stop_all();
        }
        false
    }

    /// The session ended (lease gone, revoked, or the node shutting down):
    /// no deadline, nothing served.
    pub fn end_lease(&self) {
        self.lease.store(0, Ordering::SeqCst);
        self.deadline.store(0, Ordering::SeqCst);
        self.stop_all();
    }

    /// Where a command for `slot` goes.
    pub fn route(&self, slot: u16) -> Route {
        let p = slots::partition_of(slot, self.partitions);
        if self.check_deadline() {
            let serving = self.serving.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(part) = &serving[usize::from(p)] {
                return Route::Here(part.clone());
            }
        }
        let view = self.view.read().unwrap_or_else(PoisonError::into_inner);
        match &view.owners[usize::from(p)] {
            Some((id, addr)) if *id != self.id => Route::Moved(slot, addr.clone()),
            _ => Route::Down,
        }
    }

    /// Whether `part` may answer a grant (or keep a lease) now.
    pub fn serves(&self, part: &Partition) -> bool {
        self.check_deadline() && !part.store.is_closed()
    }

    /// Whether a grant with `fence` may be answered: within the window.
    pub fn fence_allowed(&self, part: &Partition, fence: u64) -> bool {
        // SeqCst: read beside the window's start, written by the agent.
        let end = part.fence_end.load(Ordering::SeqCst);
        if fence > end {
            warn!(partition = part.index, "out of reserved fences: stopping");
            self.stop(part.index);
            return false;
        }
        let start = part.window_start.load(Ordering::SeqCst);
        if fence - start > self.window / 2 {
            part.wants_window.store(true, Ordering::SeqCst);
        }
        true
    }

    /// Starts serving partition `p` with fences above `floor` (etcd granted
    /// the claim at revision `claim` and reserved up to `floor + window`).
    pub fn serve(&self, p: u16, floor: u64, claim: i64) {
        // Relaxed: hands out ids; nothing is published through it.
        let store_id = self.next_store.fetch_add(1, Ordering::Relaxed);
        let part = Arc::new(Partition {
            index: p,
            store: Store::with_fences_above(floor),
            store_id,
            claim,
            fence_end: AtomicU64::new(floor + self.window),
            wants_window: AtomicBool::new(false),
            window_start: AtomicU64::new(floor),
        });
        let mut serving = self.serving.write().unwrap_or_else(PoisonError::into_inner);
        serving[usize::from(p)] = Some(part);
    }

    /// A new window for `p` was reserved up to `end`.
    pub fn window_reserved(&self, part: &Partition, end: u64) {
        part.window_start.store(end - self.window, Ordering::SeqCst);
        part.fence_end.store(end, Ordering::SeqCst);
        part.wants_window.store(false, Ordering::SeqCst);
    }

    /// Stops serving `p`: removed first (new commands are redirected), then
    /// its store closed (holders lost, waiters `closed`).
    ///
    /// The store closes while the table is held, so whoever next reads the
    /// table finds the partition gone and its store closed.
    pub fn stop(&self, p: u16) {
        let mut serving = self.serving.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(part) = serving[usize::from(p)].take() {
            part.store.close();
        }
    }

    fn stop_all(&self) {
        let mut serving = self.serving.write().unwrap_or_else(PoisonError::into_inner);
        for part in serving.iter_mut().filter_map(Option::take) {
            part.store.close();
        }
    }

    /// The partitions served here now.
    pub fn served(&self) -> Vec<Arc<Partition>> {
        let serving = self.serving.read().unwrap_or_else(PoisonError::into_inner);
        serving.iter().flatten().cloned().collect()
    }

    /// What etcd last said.
    pub fn view(&self) -> View {
        self.view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn set_view(&self, view: View) {
        *self.view.write().unwrap_or_else(PoisonError::into_inner) = view;
    }
}

/// A new node id: 40 hex digits from the clock, the process id and
/// std's randomly keyed hasher.
pub fn new_node_id() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut id = String::with_capacity(40);
    for i in 0..3u64 {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(i);
        h.write_u32(std::process::id());
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        id.push_str(&format!("{:016x}", h.finish()));
    }
    id.truncate(40);
    id
}
