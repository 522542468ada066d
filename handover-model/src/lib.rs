//! A model of the cluster's **planned hand-over** of a partition, checked
//! exhaustively with [stateright]. The server implements it
//! (`server/src/cluster/handover.rs`; the argument with its timing
//! assumptions is the module doc of `server/src/cluster`), carrying the
//! export through etcd rather than node to node:
//!
//! - *Freeze* and *Export* are the seal: the partition's registry of what
//!   its clients may believe is read and its store closed under one lock,
//!   so nothing changes after the export was taken.
//! - *Export*, *Import* and *Give up*: the old owner writes the export to
//!   etcd, then gives up its claim in the transaction that marks the
//!   export and its tenure (`import/<p>`); the next owner reads and
//!   imports it after its claim and before it serves. The model's lossy,
//!   reordering channel with an acknowledgement is the more general case:
//!   an etcd write that fails is a lost message, a mark never written is a
//!   give-up after the timeout.
//! - *Claim*'s tenure check is the claim transaction's compare of
//!   `import/<p>` (and of the window the mark names), which also deletes
//!   it: an export serves one claim.
//!
//! # The protocol
//!
//! One partition with one key moves from the **old** owner to the **new**
//! one. etcd is a linearizable register with leases: it names the owner,
//! a claim succeeds only while nobody owns, and each claim raises an
//! epoch (etcd's revision).
//!
//! 1. **Freeze.** The old owner stops granting and renewing for the
//!    partition: from now on its store does not change.
//! 2. **Export.** It sends its store to the new owner: the lease (holder,
//!    fence, ttl deadline, maxHold deadline), each waiter in order with its
//!    wait deadline, and the key's next fence. It may send it again.
//! 3. **Import.** The new owner, not yet serving, takes the store as its
//!    own and acknowledges. An export that comes after it began serving
//!    is ignored: a store it serves is never replaced.
//! 4. **Give up.** The old owner deletes its etcd claim after the
//!    acknowledgement, or after a timeout (the transfer failed).
//! 5. **Claim.** The new owner claims the partition in etcd once nobody
//!    owns it. The export names the tenure it came from (its etcd epoch),
//!    and the claim uses the import only if it is the first claim after
//!    that tenure (in etcd: the claim's transaction compares the tenure's
//!    mark). With such an import it serves at once; without one (the old
//!    owner died, the export was lost, or it is stale: the new owner
//!    served, crashed and came back to an old export still in flight) it
//!    drops it and takes today's safe path: it grants nothing for the
//!    holders' ttl. Fences: an import carries the key's next fence; a
//!    claim without one counts from the epoch's base.
//! 6. **Re-attach.** A holder renews at the new owner by lease id and a
//!    secret only it knows (the model: the holder's identity). An imported
//!    lease is held until its ttl deadline, the time its holder could still
//!    believe; re-attached, it keeps its fence and its maxHold deadline,
//!    and its ttl is renewed from then on. One that is not re-attached ends
//!    at its deadline as today, and the key goes to the next in line.
//!
//! Either node may crash at any step (the new one may come back once,
//! with nothing); every message may be lost, reordered or duplicated;
//! clients may re-attach late or try a lease id they saw on the wire.
//!
//! # Abstractions and timing assumptions
//!
//! - One clock: time advances in ticks for every process at once. The
//!   server implements this with times *left*, counted from the export's
//!   send on the old side and from its receipt on the new (longer: safe);
//!   maxHold left must be counted so that the new owner's deadline is not
//!   later than the old one's (clock rates close, as the cluster's argument
//!   assumes already).
//! - A client believes until the deadline in the last answer it heard,
//!   the most a correct client may believe (a real client counts from its
//!   send, which is earlier).
//! - etcd expires a crashed owner's claim [`ETCD_TTL`] after its crash; a
//!   live owner keeps its claim (its keepalives are not modelled: a node
//!   cut from etcd keeps today's behaviour and is not a hand-over).
//!
//! # Properties
//!
//! - **one believer**: at most one client believes it holds the key.
//! - **fences rise**: every grant's fence is above every earlier one.
//! - **imports end**: a serving node holds an imported lease that was not
//!   re-attached no longer than its ttl deadline.
//! - **maxHold kept**: no client believes past its lease's maxHold.
//!
//! Each [`Mutant`] breaks one step, and the checker finds a counterexample
//! to the property it names.

use std::collections::BTreeSet;

use stateright::{Model, Property};

/// A lease's ttl, in ticks.
pub const TTL: u8 = 2;
/// How long a lease may be held in all, renewals included.
pub const MAX_HOLD: u8 = 3;
/// How long a waiter waits before it leaves the line.
pub const WAIT: u8 = 2;
/// How long etcd keeps a crashed owner's claim.
pub const ETCD_TTL: u8 = 1;
/// The last tick explored: one bound of the model.
pub const MAX_TIME: u8 = 3;
/// How many messages each client sends in all: the other bound (every
/// counterexample below needs two at most).
pub const SENDS: u8 = 2;
/// Fences of one etcd epoch: a claim without an import counts from
/// `epoch * FENCES_PER_EPOCH`, above anything granted in an earlier one.
const FENCES_PER_EPOCH: u8 = 16;
/// A deadline that never comes (a mutant's).
const NEVER: u8 = u8::MAX;

/// One of the two nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeId {
    Old,
    New,
}

impl NodeId {
    fn index(self) -> usize {
        self as usize
    }
}

/// A client: 0 or 1. Its identity is also its lease's secret.
pub type ClientId = u8;

/// A bug put into the protocol on purpose, to show a property bites.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// The old owner exports while it still serves: it renews after the
    /// snapshot, so the new owner serves a state the old one still
    /// changes. Breaks *one believer*.
    ExportBeforeFreeze,
    /// The new owner re-attaches a lease to whoever names its id, without
    /// the secret. Breaks *one believer*.
    ReattachWithoutSecret,
    /// A new owner without an import serves at once instead of waiting
    /// the holders' ttl. Breaks *one believer*.
    NoFallbackWait,
    /// The import drops the maxHold deadline: renewals at the new owner
    /// are capped by nothing. Breaks *maxHold kept*.
    ImportForgetsMaxHold,
    /// The import counts the key's fences from the imported lease's own
    /// fence (off by one). Breaks *fences rise*.
    ImportReusesFence,
    /// An imported lease nobody re-attaches is kept forever. Breaks
    /// *imports end*.
    OrphanNeverEnds,
    /// The claim uses an import whatever tenure it came from: a new owner
    /// that served, crashed and came back imports a stale copy of the old
    /// owner's export still in flight. Breaks *one believer*.
    StaleImport,
    /// The old owner gives its claim up while it still serves (before it
    /// froze): the new owner serves beside it. Breaks *one believer*.
    GiveUpBeforeFreeze,
}

impl Mutant {
    pub const ALL: [Mutant; 8] = [
        Mutant::ExportBeforeFreeze,
        Mutant::ReattachWithoutSecret,
        Mutant::NoFallbackWait,
        Mutant::ImportForgetsMaxHold,
        Mutant::ImportReusesFence,
        Mutant::OrphanNeverEnds,
        Mutant::StaleImport,
        Mutant::GiveUpBeforeFreeze,
    ];

    /// The property the checker must find broken.
    pub fn breaks(self) -> &'static str {
        match self {
            Mutant::ExportBeforeFreeze
            | Mutant::ReattachWithoutSecret
            | Mutant::NoFallbackWait
            | Mutant::StaleImport
            | Mutant::GiveUpBeforeFreeze => ONE_BELIEVER,
            Mutant::ImportForgetsMaxHold => MAX_HOLD_KEPT,
            Mutant::ImportReusesFence => FENCES_RISE,
            Mutant::OrphanNeverEnds => IMPORTS_END,
        }
    }
}

pub const ONE_BELIEVER: &str = "one believer";
pub const FENCES_RISE: &str = "fences rise";
pub const IMPORTS_END: &str = "imports end";
pub const MAX_HOLD_KEPT: &str = "maxHold kept";
/// Reachable, so the properties are not vacuous.
pub const REATTACHED: &str = "a lease re-attached at the new owner";
pub const FALLBACK_GRANT: &str = "a grant after a failed transfer";

/// A lease as a node keeps it. Its id is its fence.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lease {
    pub holder: ClientId,
    pub fence: u8,
    pub expiry: u8,
    pub max_hold: u8,
    pub imported: bool,
    pub reattached: bool,
}

/// One waiter in the key's line, and when it stops waiting.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Waiter {
    pub client: ClientId,
    pub until: u8,
}

/// The partition's state on a node (one key): what an export carries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Store {
    pub lease: Option<Lease>,
    pub line: Vec<Waiter>,
    pub next_fence: u8,
    /// The etcd epoch of the tenure whose state this is.
    pub epoch: u8,
}

/// Where a node is in the hand-over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Alive, owns nothing (the new owner before its claim).
    Standby,
    /// Owns the partition; grants from `grants_from` on.
    Serving { grants_from: u8 },
    /// Stopped granting and renewing; still owns the claim.
    Frozen,
    /// Deleted its claim; serves nothing of the partition again.
    GaveUp,
    /// Crashed: its memory is gone.
    Down,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub phase: Phase,
    pub store: Store,
    /// Whether `store` came from an import.
    pub imported: bool,
    /// Whether it crashed and came back already (the new owner only).
    pub restarted: bool,
}

/// etcd's view of the partition's owner.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Etcd {
    pub owner: Option<NodeId>,
    pub epoch: u8,
    /// When a crashed owner's claim expires.
    pub expires: Option<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Client {
    Idle,
    Waiting {
        until: u8,
    },
    /// Believes while `now < deadline`; `max_hold` is from its grant.
    Holding {
        lease: u8,
        deadline: u8,
        max_hold: u8,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    Hold {
        from: ClientId,
        to: NodeId,
    },
    /// A renewal, or a re-attach when sent to the node the lease moved to.
    /// `from` is the secret.
    Renew {
        from: ClientId,
        to: NodeId,
        lease: u8,
    },
    Grant {
        to: ClientId,
        lease: u8,
        deadline: u8,
        max_hold: u8,
    },
    Export(Store),
    ImportAck,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Tick,
    Send(Msg),
    Deliver(Msg),
    Freeze,
    Export,
    GiveUp,
    Claim,
    Crash(NodeId),
    Restart,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: u8,
    pub etcd: Etcd,
    pub nodes: [Node; 2],
    pub clients: [Client; 2],
    /// How many more messages each client may send.
    pub sends_left: [u8; 2],
    /// Messages in flight: any may be delivered, in any order, or never
    /// (lost); one sent again may arrive twice.
    pub net: BTreeSet<Msg>,
    /// The highest fence granted so far, and whether a grant fell to it.
    pub max_fence: u8,
    pub fence_fell: bool,
    pub fallback_granted: bool,
}

impl State {
    fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id.index()]
    }

    fn believers(&self) -> usize {
        self.clients.iter().filter(|c| self.believes(c)).count()
    }

    fn believes(&self, client: &Client) -> bool {
        matches!(client, Client::Holding { deadline, .. } if self.now < *deadline)
    }
}

/// The hand-over, with or without one mutant.
#[derive(Clone, Debug, Default)]
pub struct Handover {
    pub mutant: Option<Mutant>,
}

impl Handover {
    pub fn with(mutant: Mutant) -> Self {
        Handover {
            mutant: Some(mutant),
        }
    }

    fn is(&self, mutant: Mutant) -> bool {
        self.mutant == Some(mutant)
    }
}

mod steps;

impl Model for Handover {
    type State = State;
    type Action = Action;

    /// The hand-over is what is explored, not the first grant: client 0
    /// holds a lease of the old owner, just granted, and client 1 is idle
    /// or waits in its line.
    fn init_states(&self) -> Vec<State> {
        let first = Lease {
            holder: 0,
            fence: FENCES_PER_EPOCH,
            expiry: TTL,
            max_hold: MAX_HOLD,
            imported: false,
            reattached: false,
        };
        let held = Client::Holding {
            lease: first.fence,
            deadline: first.expiry,
            max_hold: first.max_hold,
        };
        let waiter = Waiter {
            client: 1,
            until: WAIT,
        };
        [
            (Client::Idle, vec![]),
            (Client::Waiting { until: WAIT }, vec![waiter]),
        ]
        .into_iter()
        .map(|(second, line)| {
            let store = Store {
                lease: Some(first.clone()),
                line,
                next_fence: first.fence + 1,
                epoch: 1,
            };
            initial_state(store, [held.clone(), second])
        })
        .collect()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        self.possible_actions(state, actions);
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        self.apply(&mut next, action);
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_BELIEVER, |_, s: &State| s.believers() <= 1),
            Property::always(FENCES_RISE, |_, s: &State| !s.fence_fell),
            Property::always(IMPORTS_END, |_, s: &State| {
                !s.nodes.iter().any(holds_orphan_past_deadline(s.now))
            }),
            Property::always(MAX_HOLD_KEPT, |_, s: &State| {
                s.clients.iter().all(|c| match c {
                    Client::Holding {
                        deadline, max_hold, ..
                    } => !s.believes(c) || deadline <= max_hold,
                    _ => true,
                })
            }),
            Property::sometimes(REATTACHED, |_, s: &State| {
                let lease = &s.node(NodeId::New).store.lease;
                lease.as_ref().is_some_and(|l| l.reattached)
            }),
            Property::sometimes(FALLBACK_GRANT, |_, s: &State| s.fallback_granted),
        ]
    }
}

fn initial_state(old_store: Store, clients: [Client; 2]) -> State {
    let max_fence = old_store.lease.as_ref().map_or(0, |l| l.fence);
    let old = Node {
        phase: Phase::Serving { grants_from: 0 },
        store: old_store,
        imported: false,
        restarted: false,
    };
    let new = Node {
        phase: Phase::Standby,
        store: Store::default(),
        imported: false,
        restarted: false,
    };
    State {
        now: 0,
        etcd: Etcd {
            owner: Some(NodeId::Old),
            epoch: 1,
            expires: None,
        },
        nodes: [old, new],
        clients,
        sends_left: [SENDS; 2],
        net: BTreeSet::new(),
        max_fence,
        fence_fell: false,
        fallback_granted: false,
    }
}

/// Whether a node serves an imported lease nobody re-attached past its
/// ttl deadline.
fn holds_orphan_past_deadline(now: u8) -> impl Fn(&Node) -> bool {
    move |node| {
        matches!(node.phase, Phase::Serving { .. })
            && node
                .store
                .lease
                .as_ref()
                .is_some_and(|l| l.imported && !l.reattached && l.expiry <= now)
    }
}
