//! Cluster mode: several `holdline serve` nodes split the key space, and
//! etcd decides which node owns which part. This module owns the node's
//! side of that: which partitions it serves now (each one a [`Store`] of
//! its own), until when its etcd lease surely lives, what it last read of
//! the other nodes (for `MOVED` and `CLUSTER SLOTS`), and where a key's
//! command goes ([`Node::route`]). The etcd session that changes these
//! lives in `agent`, which uses, as etcd's own `concurrency` package keeps
//! them apart: `etcd` (key names, typed errors), `lease_session` (the
//! lease's keepalive and watchdog), `facts` (reading and watching the
//! cluster's keys) and `claims` (claims, windows, hand-overs); the shares
//! it aims for are in `shares`; slots in `slots`.
//!
//! # Why no two holders overlap, and fences keep rising
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
//! **Two nodes never serve a partition at once.**
//! 1. A node serves a partition only between a claim etcd acknowledged and
//!    the **deadline**: `s + ttl - margin`, `s` the send time (its own
//!    monotonic clock) of the last keepalive (or grant) that etcd answered
//!    with the lease alive (answers on a stream come in the order of the
//!    requests, so each is credited to its own request). The margin is
//!    `max(ttl / 5, 250 ms)`.
//! 2. Every path that could hand out or keep a grant reads the clock first
//!    ([`Node::check_deadline`]: each command read, each grant about to be
//!    answered, each RENEW, RELEASE and PUT); past the deadline it stops
//!    every partition and ends the session before answering (callers wait
//!    for the stop under the session's lock, and no answer about the ended
//!    lease moves the deadline again). A watchdog task does the same when
//!    no command comes. A node paused across its deadline stops at its
//!    first step after waking.
//! 3. Stopping a partition closes its store: every lease on it is lost
//!    (the holder is pushed `lost` or its connection closes), every waiter
//!    fails `closed`; later commands are redirected. A partition given up
//!    is stopped *before* its key is deleted in etcd.
//!
//! **No holder of the old owner still believes when the new one grants.**
//! A client believes in a lease until the send time of the last command
//! answered, plus the lease's ttl, minus a margin. A holder of a node that
//! died or froze cannot be told, so a partition taken over *without a
//! hand-over* grants nothing for the cluster's `max_ttl` after the claim
//! (TRYHOLD answers null, HOLD waits), and no lease may ask for a longer
//! ttl: every command the old node answered was answered before its
//! deadline, which came before the claim. A node that stops a partition on
//! purpose (rebalancing, a spent fence window, SIGTERM) closes its store
//! first: each holder is pushed `lost` (or its connection closes), but one
//! whose link is cut then hears nothing and believes until its own
//! deadline. The close answers when the last lease it ended would have
//! ended anyway (its ttl since the holder was last heard, or its maxHold):
//! a holder's client counts its ttl from a send, before the node read that
//! command, so it stops believing before then. The node then marks the
//! hand-over in the same transaction that deletes its claim (`handed/<p>`
//! = its last window end and that time left, in ms rounded up, counted
//! when the transaction is sent; written only if `fences/<p>` still holds
//! the end, so the mark names that tenure only). The next owner's claim
//! comes after that transaction, and it grants nothing for the time the
//! mark names: at once when no lease was held, and never later than a
//! take-over without a hand-over would. A lease revoked at its maxHold
//! while its holder's link is cut is, as on one server, what fences cover.
//!
//! **Timing assumptions.** (a) During one ttl, a node's monotonic clock
//! runs no slower than the etcd leader's by more than `margin / ttl`
//! (20%), and the clocks of the new owner and of clients run at rates close
//! enough that `max_ttl` measured by one is not shorter than a ttl measured
//! by the other by more than the clients' margin. (b) The monotonic clock
//! counts every moment the node could act: `Instant` stops across a
//! system suspend, and a hypervisor may stop a paused guest's clock, so a
//! node must not run where that happens unnoticed. (c) etcd expires a
//! lease only after its ttl: a stuck old etcd leader can revoke leases
//! early (an etcd bug fixed only in part, in releases after Debian's
//! 3.4.23); the cluster tests run one member, the nemesis suite
//! (`clients/testing/nemesis.py`) three, killing their leader. Network delays and process pauses
//! are not assumed anything about, with one exception of every lock
//! service: an answer decided before a pause (already in the socket's
//! buffer) still goes out after it; its lease is lost by then and its
//! fence is below the new owner's.
//!
//! **Fences, with no clock at all.** `fences/<p>` in etcd holds the end of
//! the highest window of fences ever reserved for the partition (no lease:
//! it outlives owners). A claim reads it as `E` and, in the same
//! transaction (which also checks `fences/<p>` is unchanged), raises it to
//! `E + window`; the new store gives fences above `E` only, a grant whose
//! fence would pass the window's end is refused (the partition stops and
//! is claimed again above it), and the next window is reserved at half by
//! a transaction that checks the claim is still the key's current one. So
//! every window an owner used was reserved, in etcd's order, before the
//! next owner's claim, and that claim starts above it: a key's fences rise
//! across owners even if every timing assumption fails. This needs etcd's
//! history kept (a restored or fresh etcd starts fences again at the
//! clock), and stops claiming, saying so, when a window would pass 2^63.
//!
//! # A planned hand-over that moves leases
//!
//! A partition given up on purpose (SIGTERM, a rebalance, a spent window)
//! to a live node that takes leases (`handover/<id>` in etcd, written by
//! nodes of this release) carries its leases and lines; `handover` has the
//! two halves, `handover-model/` checks the protocol exhaustively
//! (stateright; its README lists the mutants each property catches).
//!
//! 1. The old owner takes the partition out of its table (new commands are
//!    redirected), then **seals** its registry and closes its store under
//!    the registry's lock. Sessions file each grant in the registry before
//!    they answer it and answer nothing the registry refused, so the seal's
//!    export holds every lease a client was told of (lost ones left out),
//!    and every HOLD waiting with a secret, in the order they joined.
//! 2. Each holder with a secret is pushed `moved` before any later answer
//!    on its connection (a connection drains its lost leases before each
//!    command in a cluster): its client counts no answer after that for
//!    the lease. A waiter with a secret is answered `MOVED`.
//! 3. It writes the export to etcd in chunks (no lease: the next owner
//!    reads them after this node is gone; past the range of keys every node
//!    reads and watches), then **gives up** its claim in the transaction
//!    that writes the hand-over mark and `import/<p>`, naming the chunks
//!    and this tenure (its window's end). A failed write leaves no import
//!    mark: the hand-over is the one above.
//! 4. The next owner **claims** as above; its claim transaction checks
//!    `import/<p>` unchanged since it read it and deletes it, so an export
//!    serves the claim right after its hand-over only (a later claim, after
//!    a new owner that crashed, finds the window moved and no mark: the
//!    model's `StaleImport`). It reads the chunks and **imports** them into
//!    the new store before the store is in its table: each lease held again
//!    (its fence as the holder knows it kept beside the store's own), each
//!    wait back in its line. Then it serves at once. A chunk it cannot read
//!    leaves it today's wait (the mark's time).
//!
//! **No two believers.** A holder's client believes until the send of its
//! last answered command plus its ttl. Every command it sent after the
//! seal `X` is answered after the `moved` push, so not counted: it
//! believes until `X + ttl` at most. The new owner reads the mark after the
//! give-up, after `X`, and holds each imported lease until its ttl from
//! when it imported it, later than `X + ttl`; a holder that re-attaches (by
//! its secret, which only it and the nodes know: a lease id is seen on the
//! wire) renews it from then on, with its fence, never past its maxHold.
//! A lease imported without a secret is held as long, then let go.
//!
//! **Fences rise.** An imported lease keeps its old fence, below the new
//! owner's window, which its claim reserved above every earlier one; every
//! grant the new owner makes comes from that window.
//!
//! **A node of the release before** writes no `handover/<id>`: a node
//! giving a partition up to it exports nothing (its holders are told
//! `lost`), and it reads no `import/<p>` (only the mark, whose time still
//! covers every lease the close ended). `kill -9`, a frozen node and a node
//! cut from etcd never seal anything: their partitions are taken over as
//! above.
//!
//! **Timing assumptions**, beyond those above: (d) an imported maxHold
//! counts the time left at the seal from the import, so a holder may run
//! over its maxHold by the transfer's time (the seal to the import: etcd
//! round trips, milliseconds); ttl needs no such bound, since counted late
//! it only holds the key longer.

pub mod agent;
mod claims;
mod etcd;
mod facts;
pub mod handover;
mod lease_session;
pub mod shares;
pub mod slots;

use crate::observers::Observers;
use holdline::Store;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// What the node knows of the cluster it is in.
pub struct Node {
    /// 40 hex digits, as Redis Cluster's node ids; new at every start.
    pub id: String,
    /// `host:port` other nodes and clients reach this one at.
    pub advertise: String,
    /// Partitions in the cluster (read from etcd at start; fixed).
    pub partitions: u16,
    /// The etcd lease's ttl.
    pub ttl: Duration,
    /// The longest lease ttl a holder may ask for in this cluster; how long
    /// a partition taken over without a hand-over grants nothing.
    pub max_ttl: Duration,
    /// Fences reserved in etcd at a time (`--fence-window`'s default
    /// 2^40: that many grants of one key before the owner must reserve
    /// again, which it does at half, in the background).
    pub window: u64,
    clock: Instant,
    /// Nanoseconds after `clock` until which the etcd lease surely lives;
    /// 0 while there is none. Partitions are served only while it is set.
    deadline: AtomicU64,
    /// The etcd lease of the session, 0 between sessions. Its lock orders
    /// every write of `deadline` (see `check_deadline`).
    session: Mutex<i64>,
    /// Set at shutdown: nothing more is claimed.
    leaving: AtomicBool,
    /// The partitions stopped on purpose, to hand over in etcd.
    left: Mutex<Vec<Stopped>>,
    /// The partitions served here, by index.
    serving: RwLock<Vec<Option<Arc<Partition>>>>,
    /// How many of them (changed under `serving`'s write lock, after a
    /// store closed).
    live: AtomicUsize,
    /// What the last reading of etcd said: every partition's owner.
    view: RwLock<View>,
    next_store: AtomicU64,
    /// Who observes keys of the partitions served here: told when a
    /// partition's store closes.
    pub observers: Arc<Observers>,
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
    /// Before this, the partition grants nothing (see "Taking over").
    pub opens: Instant,
    /// What its clients may believe, sealed when it is handed over.
    pub registry: handover::Registry,
    /// What its last owner handed over, until re-attached or run out.
    pub orphans: handover::Orphans,
}

impl Partition {
    /// The last fence of the windows reserved so far.
    pub fn fence_end(&self) -> u64 {
        self.fence_end.load(Ordering::SeqCst)
    }

    /// Whether grants wait for the partition to open (a take-over).
    pub fn opens_later(&self) -> bool {
        Instant::now() < self.opens
    }
}

/// A partition stopped on purpose, to hand over in etcd.
#[derive(Debug)]
pub struct Stopped {
    pub index: u16,
    /// The etcd revision of the claim it was served under.
    pub claim: i64,
    /// The last fence of its windows.
    pub fence_end: u64,
    /// Until when a holder its close could not tell (a cut link) might
    /// still think it holds: the latest end of the leases it ended.
    pub believed_until: Instant,
    /// What it hands over (sealed before its store closed), when another
    /// live node was there to take it.
    pub export: Option<handover::Export>,
}

/// Owners as etcd last showed them.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Each partition's owner: (node id, its advertised address).
    pub owners: Vec<Option<(String, String)>>,
    /// Every live node: (id, address), by id.
    pub nodes: Vec<(String, String)>,
    /// The live nodes that take a hand-over's leases (this release on).
    pub takers: Vec<String>,
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
    /// `ttls`: the etcd lease's, and the longest a lease of a holder may
    /// ask for (the cluster's `max_ttl`).
    pub fn new(
        id: String,
        advertise: String,
        partitions: u16,
        ttls: (Duration, Duration),
        window: u64,
    ) -> Node {
        Node {
            id,
            advertise,
            partitions,
            ttl: ttls.0,
            max_ttl: ttls.1,
            window,
            clock: Instant::now(),
            deadline: AtomicU64::new(0),
            session: Mutex::new(0),
            leaving: AtomicBool::new(false),
            left: Mutex::new(Vec::new()),
            serving: RwLock::new(vec![None; usize::from(partitions)]),
            live: AtomicUsize::new(0),
            view: RwLock::new(View {
                owners: vec![None; usize::from(partitions)],
                nodes: Vec::new(),
                takers: Vec::new(),
            }),
            next_store: AtomicU64::new(1),
            observers: Arc::default(),
        }
    }

    /// Closes `part`'s store (holders lost, waiters `closed`), then tells
    /// its observers, who observe again where the slot went. Answers what
    /// a hand-over of it needs.
    fn close(&self, part: &Partition) -> Stopped {
        self.close_handing_to(part, None)
    }

    /// As [`Node::close`]; with `to` (the node expected to take the
    /// partition), the registry is sealed first and its export kept.
    fn close_handing_to(&self, part: &Partition, to: Option<&str>) -> Stopped {
        let close = || part.store.close_reporting_last_expiry();
        let (export, believed) = match to {
            Some(to) => {
                // What was handed here and not re-attached yet goes on too,
                // its waits ahead of those that joined here.
                let orphaned_then_close = || (part.orphans.export(Instant::now()), close());
                let (mut export, ((orphaned, remains, held), believed)) =
                    part.registry.seal(to, orphaned_then_close);
                // Closed now: what they held may go.
                drop((remains, held));
                export.leases.extend(orphaned.leases);
                let joined = std::mem::replace(&mut export.waits, orphaned.waits);
                export.waits.extend(joined);
                (Some(export), believed)
            }
            None => (None, close()),
        };
        self.observers.store_closed(part.store_id);
        Stopped {
            index: part.index,
            claim: part.claim,
            fence_end: part.fence_end(),
            believed_until: Instant::now() + believed,
            export,
        }
    }

    /// Where partition `p` goes once this node gives it up (`leaving`:
    /// once this node is gone): the address of the live node that will
    /// claim it as every node plans its share (the plans settled as claims
    /// would settle them), else of the first other node that takes leases.
    /// The export goes through etcd to whoever claims; the address is the
    /// holders' first try. `None` when no other live node takes leases, or
    /// the one that will claim is of a release that does not: then there is
    /// no export, and holders are told `lost`, as that release would.
    fn next_owner(&self, p: u16, leaving: bool) -> Option<String> {
        if takes_no_handover() {
            return None;
        }
        let view = self.view.read().unwrap_or_else(PoisonError::into_inner);
        let live: Vec<String> = view
            .nodes
            .iter()
            .map(|(id, _)| id.clone())
            .filter(|id| !leaving || *id != self.id)
            .collect();
        let mut owners: Vec<Option<String>> = view
            .owners
            .iter()
            .map(|o| o.as_ref().map(|(id, _)| id.clone()))
            .collect();
        owners[usize::from(p)] = None;
        if leaving {
            for o in owners.iter_mut() {
                if o.as_deref() == Some(self.id.as_str()) {
                    *o = None;
                }
            }
        }
        let taker = |id: &String| *id != self.id && view.takers.contains(id);
        let next = match shares::settle(&live, &mut owners)[usize::from(p)].clone() {
            Some(id) if id == self.id => return None,
            Some(id) => id,
            None => live.iter().find(|id| taker(id))?.clone(),
        };
        if !taker(&next) {
            return None;
        }
        view.nodes
            .iter()
            .find(|(n, _)| *n == next)
            .map(|(_, addr)| addr.clone())
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
    /// margin` (never back). Answers about any other lease than the
    /// session's (an ended one) move nothing.
    pub fn lease_confirmed(&self, lease: i64, sent: u64, granted: Duration) {
        let session = lock(&self.session);
        if *session != lease || lease == 0 {
            return;
        }
        let ttl = granted.min(self.ttl);
        let until = sent + ttl.saturating_sub(self.margin()).as_nanos() as u64;
        // SeqCst (and written only under `session`): the deadline is read
        // on every command beside the serving table; one total order keeps
        // the argument short.
        self.deadline.fetch_max(until, Ordering::SeqCst);
    }

    /// A session begins with `lease`: only its answers count from now.
    pub fn new_lease(&self, lease: i64) {
        *lock(&self.session) = lease;
    }

    /// The session's lease, 0 when none.
    pub fn lease(&self) -> i64 {
        *lock(&self.session)
    }

    /// The instant the deadline falls, if there is a lease.
    pub fn deadline(&self) -> Option<Instant> {
        match self.deadline.load(Ordering::SeqCst) {
            0 => None,
            ns => Some(self.clock + Duration::from_nanos(ns)),
        }
    }

    /// Whether the lease surely lives now; past the deadline, stops
    /// serving everything first and ends the session (see the module doc).
    /// A caller told `false` finds every store of the session closed.
    pub fn check_deadline(&self) -> bool {
        let deadline = self.deadline.load(Ordering::SeqCst);
        if deadline != 0 && self.now() < deadline {
            return true;
        }
        // No session and nothing served (every store taken out of the
        // table was closed before the count fell): nothing to stop, and no
        // lock for every command while etcd is away.
        if deadline == 0 && self.live.load(Ordering::SeqCst) == 0 {
            return false;
        }
        // Past it (or no session): stop under the session's lock, so that
        // every caller waits for the one stopping, and no answer about the
        // ended lease can raise the deadline again.
        let mut session = lock(&self.session);
        let deadline = self.deadline.load(Ordering::SeqCst);
        if deadline != 0 && self.now() < deadline {
            // Raised meanwhile by a fresh answer: serving goes on, but this
            // caller already read a passed deadline; "no" is the safe answer.
            return false;
        }
        if *session != 0 {
            warn!("the etcd lease may lapse: stopped serving every partition");
        }
        *session = 0;
        self.deadline.store(0, Ordering::SeqCst);
        self.stop_all();
        false
    }

    /// The session ended (lease gone, revoked, or the node shutting down):
    /// no deadline, nothing served.
    pub fn end_lease(&self) {
        let mut session = lock(&self.session);
        *session = 0;
        self.deadline.store(0, Ordering::SeqCst);
        self.stop_all();
    }

    /// etcd said `lease` is gone: ends the session if it is still that one.
    pub fn lease_gone(&self, lease: i64) {
        let mut session = lock(&self.session);
        if *session == lease {
            *session = 0;
            self.deadline.store(0, Ordering::SeqCst);
            self.stop_all();
        }
    }

    /// The node is shutting down: every partition stops now (holders told,
    /// waiters answered) and nothing more is claimed; the agent then hands
    /// the stopped ones over in etcd ([`Node::left`]).
    pub fn leave(&self) {
        self.leaving.store(true, Ordering::SeqCst);
        let mut serving = self.serving.write().unwrap_or_else(PoisonError::into_inner);
        let mut left = lock_left(&self.left);
        for part in serving.iter_mut().filter_map(Option::take) {
            let to = self.next_owner(part.index, true);
            left.push(self.close_handing_to(&part, to.as_deref()));
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// What [`Node::leave`] and [`Node::stop`] stopped, to hand over.
    pub fn left(&self) -> Vec<Stopped> {
        std::mem::take(&mut *lock_left(&self.left))
    }

    pub fn is_leaving(&self) -> bool {
        self.leaving.load(Ordering::SeqCst)
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
    /// Past it, the caller lets the grant go, then stops the partition
    /// ([`Node::window_spent`]).
    pub fn fence_allowed(&self, part: &Partition, fence: u64) -> bool {
        // SeqCst: written by the agent when it reserved a window.
        let end = part.fence_end.load(Ordering::SeqCst);
        if fence > end {
            return false;
        }
        // Less than half a window left: time to reserve the next one.
        if end - fence < self.window / 2 {
            part.wants_window.store(true, Ordering::SeqCst);
        }
        true
    }

    /// Starts serving partition `p` with fences above `floor` (etcd granted
    /// the claim at revision `claim` and reserved up to `floor + window`);
    /// it grants nothing for `quiet` (what its last owner's hand-over
    /// said, at most `max_ttl`; `max_ttl` after a take-over without one).
    ///
    /// With `import` (its last owner's hand-over, read from etcd), each
    /// lease it carries is held again and each wait is back in its line
    /// before anything else can reach the store; their holders re-attach
    /// ([`handover::Orphans`]).
    pub fn serve(
        &self,
        p: u16,
        floor: u64,
        claim: i64,
        quiet: Duration,
        import: Option<handover::Export>,
    ) {
        let mut opens = Instant::now() + quiet;
        let store = Store::with_fences_above(floor);
        let orphans = handover::Orphans::default();
        let imported = import.is_some();
        if let Some(export) = import {
            let (leases, waits) = (export.leases.len(), export.waits.len());
            let failed = orphans.import(&store, export);
            for why in &failed {
                warn!(partition = p, %why, "a handed-over lease could not be imported");
            }
            // Every lease a holder may believe in is held again: nothing
            // else to wait for. A lease left out is waited out as today.
            if failed.is_empty() {
                opens = Instant::now();
            }
            info!(
                partition = p,
                leases, waits, "imported the partition's leases and lines"
            );
        }
        // Relaxed: hands out ids; nothing is published through it.
        let store_id = self.next_store.fetch_add(1, Ordering::Relaxed);
        let part = Arc::new(Partition {
            index: p,
            store,
            store_id,
            claim,
            fence_end: AtomicU64::new(floor + self.window),
            wants_window: AtomicBool::new(false),
            opens,
            registry: handover::Registry::default(),
            orphans,
        });
        if imported {
            tokio::spawn(reap_orphans(Arc::downgrade(&part)));
        }
        let mut serving = self.serving.write().unwrap_or_else(PoisonError::into_inner);
        match serving[usize::from(p)].replace(part) {
            Some(old) => {
                self.close(&old);
            }
            None => {
                self.live.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// A new window for `p` was reserved up to `end`.
    pub fn window_reserved(&self, part: &Partition, end: u64) {
        part.fence_end.store(end, Ordering::SeqCst);
        part.wants_window.store(false, Ordering::SeqCst);
    }

    /// Stops serving `p`: removed first (new commands are redirected), then
    /// its store closed (holders lost, waiters `closed`).
    ///
    /// The store closes while the table is held, so whoever next reads the
    /// table finds the partition gone and its store closed.
    ///
    /// A stop the node chose (not its lease's deadline) is a clean one:
    /// every holder is told, so it is queued for [`Node::left`] and handed
    /// over in etcd.
    pub fn stop(&self, p: u16) {
        let mut serving = self.serving.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(part) = serving[usize::from(p)].take() {
            let to = self.next_owner(p, false);
            let stopped = self.close_handing_to(&part, to.as_deref());
            self.live.fetch_sub(1, Ordering::SeqCst);
            lock_left(&self.left).push(stopped);
        }
    }

    /// `part`'s window is spent: it stops, to be claimed again above it.
    /// Called once the grant that passed the window was let go, so that
    /// the hand-over does not wait out a lease nobody was told of.
    pub fn window_spent(&self, part: &Partition) {
        warn!(partition = part.index, "out of reserved fences: stopping");
        self.stop_store(part);
    }

    /// Stops `part` if it is still the store served at its index.
    fn stop_store(&self, part: &Partition) {
        let same = {
            let serving = self.serving.read().unwrap_or_else(PoisonError::into_inner);
            serving[usize::from(part.index)]
                .as_ref()
                .is_some_and(|p| p.store_id == part.store_id)
        };
        if same {
            self.stop(part.index);
        }
    }

    fn stop_all(&self) {
        let mut serving = self.serving.write().unwrap_or_else(PoisonError::into_inner);
        for part in serving.iter_mut().filter_map(Option::take) {
            self.close(&part);
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// `/readyz` in a cluster: ready while the etcd lease surely lives
    /// and every partition etcd names this node the owner of is served
    /// here, with no unowned partition of its share left to claim.
    pub fn readiness(&self) -> Result<(), String> {
        if self.is_leaving() {
            return Err("leaving the cluster".to_owned());
        }
        if self.deadline().is_none_or(|d| Instant::now() >= d) {
            return Err("no live etcd lease".to_owned());
        }
        let view = self.view();
        let served: Vec<u16> = self.served().iter().map(|p| p.index).collect();
        let owners: Vec<Option<String>> = view
            .owners
            .iter()
            .map(|o| o.as_ref().map(|(id, _)| id.clone()))
            .collect();
        let unserved: Vec<u16> = (0..owners.len() as u16)
            .filter(|p| owners[*p as usize].as_deref() == Some(&self.id) && !served.contains(p))
            .collect();
        if !unserved.is_empty() {
            return Err(format!(
                "partitions {unserved:?} claimed but not served yet"
            ));
        }
        let live: Vec<String> = view.nodes.iter().map(|(id, _)| id.clone()).collect();
        let plan = shares::plan(&self.id, &live, &owners);
        match plan.claim.len() {
            0 if live.contains(&self.id) => Ok(()),
            0 => Err("not registered in etcd".to_owned()),
            n => Err(format!("{n} partitions of its share not claimed yet")),
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

/// Whether this node stands in for a release before hand-overs carried
/// leases (the version-skew test's switch).
pub fn takes_no_handover() -> bool {
    claims::ignores_imports()
}

/// Lets go of what was handed over and not re-attached in time, until
/// the partition's store closes or nothing is left.
async fn reap_orphans(part: std::sync::Weak<Partition>) {
    loop {
        let next = match part.upgrade() {
            Some(part) if !part.store.is_closed() => part.orphans.reap(Instant::now()),
            _ => return,
        };
        let Some(next) = next else { return };
        // At most a second: a closed store is noticed soon.
        let wake = next.min(Instant::now() + Duration::from_secs(1));
        tokio::time::sleep_until(wake.into()).await;
    }
}

fn lock(m: &Mutex<i64>) -> MutexGuard<'_, i64> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn lock_left(m: &Mutex<Vec<Stopped>>) -> MutexGuard<'_, Vec<Stopped>> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
