//! What each process may do in a state, and what each step changes.

use super::*;

const NODES: [NodeId; 2] = [NodeId::Old, NodeId::New];

impl Handover {
    pub(crate) fn possible_actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < MAX_TIME {
            actions.push(Action::Tick);
        }
        // No action loses a message: one never delivered is lost, and as
        // no property reads the network, dropping it would only add states.
        for msg in &s.net {
            actions.push(Action::Deliver(msg.clone()));
        }
        for (id, client) in s.clients.iter().enumerate() {
            client_sends(s, id as ClientId, client, actions);
        }
        self.node_actions(s, actions);
    }

    fn node_actions(&self, s: &State, actions: &mut Vec<Action>) {
        match s.node(NodeId::Old).phase {
            Phase::Serving { .. } => {
                actions.push(Action::Freeze);
                if self.is(Mutant::ExportBeforeFreeze) {
                    actions.push(Action::Export);
                }
                if self.is(Mutant::GiveUpBeforeFreeze) && s.etcd.owner == Some(NodeId::Old) {
                    actions.push(Action::GiveUp);
                }
            }
            Phase::Frozen => {
                actions.push(Action::Export);
                // A timeout: the transfer failed, or the ack was lost.
                actions.push(Action::GiveUp);
            }
            _ => {}
        }
        let new = s.node(NodeId::New);
        if new.phase == Phase::Standby && s.etcd.owner.is_none() {
            actions.push(Action::Claim);
        }
        if new.phase == Phase::Down && !new.restarted {
            actions.push(Action::Restart);
        }
        for id in NODES {
            if s.node(id).phase != Phase::Down {
                actions.push(Action::Crash(id));
            }
        }
    }

    pub(crate) fn apply(&self, s: &mut State, action: Action) {
        match action {
            Action::Tick => self.tick(s),
            Action::Send(msg) => send(s, msg),
            Action::Deliver(msg) => {
                s.net.remove(&msg);
                self.deliver(s, msg);
            }
            Action::Freeze => s.node_mut(NodeId::Old).phase = Phase::Frozen,
            Action::Export => {
                let store = s.node(NodeId::Old).store.clone();
                s.net.insert(Msg::Export(store));
            }
            Action::GiveUp => give_up(s, self.is(Mutant::GiveUpBeforeFreeze)),
            Action::Claim => self.claim(s),
            Action::Crash(id) => crash(s, id),
            Action::Restart => {
                let new = s.node_mut(NodeId::New);
                *new = Node {
                    phase: Phase::Standby,
                    store: Store::default(),
                    imported: false,
                    restarted: true,
                };
            }
        }
    }

    /// Time passes: etcd expires a dead owner's claim, serving nodes end
    /// leases past their deadline and grant to the next in line, clients
    /// stop waiting and believing.
    fn tick(&self, s: &mut State) {
        s.now += 1;
        let now = s.now;
        if s.etcd.expires.is_some_and(|at| at <= now) {
            s.etcd.owner = None;
            s.etcd.expires = None;
        }
        for id in NODES {
            if let Phase::Serving { grants_from } = s.node(id).phase {
                self.expire(s.node_mut(id), now);
                if now >= grants_from {
                    grant_next_in_line(s, id);
                }
            }
        }
        for client in &mut s.clients {
            let over = match client {
                Client::Waiting { until } => *until <= now,
                Client::Holding { deadline, .. } => *deadline <= now,
                Client::Idle => false,
            };
            if over {
                *client = Client::Idle;
            }
        }
    }

    /// Ends the lease when its deadline passed, and drops waiters whose
    /// wait is over.
    fn expire(&self, node: &mut Node, now: u8) {
        let orphan_kept =
            |l: &Lease| self.is(Mutant::OrphanNeverEnds) && l.imported && !l.reattached;
        let store = &mut node.store;
        if store
            .lease
            .as_ref()
            .is_some_and(|l| l.expiry <= now && !orphan_kept(l))
        {
            store.lease = None;
        }
        store.line.retain(|w| w.until > now);
    }

    fn deliver(&self, s: &mut State, msg: Msg) {
        match msg {
            Msg::Hold { from, to } => {
                if serving_grants(s, to) {
                    hold(s, to, from);
                }
            }
            Msg::Renew { from, to, lease } => {
                if serving(s, to) {
                    self.renew(s, to, from, lease);
                }
            }
            Msg::Grant {
                to,
                lease,
                deadline,
                max_hold,
            } => receive_grant(s, to, lease, deadline, max_hold),
            Msg::Export(store) => self.import(s, store),
            Msg::ImportAck => {
                if s.node(NodeId::Old).phase == Phase::Frozen {
                    give_up(s, false);
                }
            }
        }
    }

    /// A renewal by the holder, or a re-attach: only with the secret
    /// (unless mutated); the fence and maxHold stay, the ttl restarts.
    fn renew(&self, s: &mut State, at: NodeId, from: ClientId, lease_id: u8) {
        let now = s.now;
        let anyone = self.is(Mutant::ReattachWithoutSecret);
        let Some(lease) = s.node_mut(at).store.lease.as_mut() else {
            return;
        };
        let may = lease.holder == from || (anyone && lease.imported);
        if lease.fence != lease_id || !may {
            return;
        }
        lease.holder = from;
        lease.reattached |= lease.imported;
        lease.expiry = lease.expiry.max((now + TTL).min(lease.max_hold));
        let grant = Msg::Grant {
            to: from,
            lease: lease.fence,
            deadline: lease.expiry,
            max_hold: lease.max_hold,
        };
        s.net.insert(grant);
    }

    /// The new owner takes an export as its store, once, and only before
    /// it serves; it acknowledges every export it has.
    fn import(&self, s: &mut State, mut store: Store) {
        let new = s.node(NodeId::New);
        if new.phase != Phase::Standby {
            return;
        }
        if !new.imported {
            if let Some(lease) = store.lease.as_mut() {
                lease.imported = true;
                lease.reattached = false;
                if self.is(Mutant::ImportForgetsMaxHold) {
                    lease.max_hold = NEVER;
                }
                if self.is(Mutant::ImportReusesFence) {
                    store.next_fence = lease.fence;
                }
            }
            let new = s.node_mut(NodeId::New);
            new.store = store;
            new.imported = true;
        }
        s.net.insert(Msg::ImportAck);
    }

    /// The new owner's claim: with an import it serves at once (what it
    /// imported past its deadline ends first); without, it grants nothing
    /// for the holders' ttl and counts fences from the new epoch's base.
    fn claim(&self, s: &mut State) {
        s.etcd.owner = Some(NodeId::New);
        let tenure_before = s.etcd.epoch;
        s.etcd.epoch += 1;
        let (now, epoch) = (s.now, s.etcd.epoch);
        let fallback_wait = if self.is(Mutant::NoFallbackWait) {
            0
        } else {
            TTL
        };
        let any_tenure = self.is(Mutant::StaleImport);
        let new = s.node_mut(NodeId::New);
        if new.imported && new.store.epoch != tenure_before && !any_tenure {
            new.store = Store::default();
            new.imported = false;
        }
        new.store.epoch = epoch;
        let grants_from = if new.imported {
            now
        } else {
            now + fallback_wait
        };
        new.phase = Phase::Serving { grants_from };
        if !new.imported {
            new.store.next_fence = epoch * FENCES_PER_EPOCH;
        }
        self.expire(new, now);
    }
}

/// What a client may send: a hold when idle; a renewal to either node
/// when holding (to the other one: a re-attach); and the id of another's
/// lease, seen on the wire, offered to the new owner without its secret.
fn client_sends(s: &State, id: ClientId, client: &Client, actions: &mut Vec<Action>) {
    let mut offer = |msg: Msg| {
        if s.sends_left[id as usize] > 0 && !s.net.contains(&msg) {
            actions.push(Action::Send(msg));
        }
    };
    match client {
        Client::Idle => {
            for to in NODES {
                offer(Msg::Hold { from: id, to });
            }
        }
        Client::Holding { lease, .. } => {
            for to in NODES {
                offer(Msg::Renew {
                    from: id,
                    to,
                    lease: *lease,
                });
            }
        }
        Client::Waiting { .. } => {}
    }
    let other = &s.clients[1 - id as usize];
    if let (Client::Holding { lease, .. }, false) =
        (other, matches!(client, Client::Holding { .. }))
    {
        offer(Msg::Renew {
            from: id,
            to: NodeId::New,
            lease: *lease,
        });
    }
}

fn send(s: &mut State, msg: Msg) {
    let from = match msg {
        Msg::Hold { from, .. } | Msg::Renew { from, .. } => from as usize,
        _ => unreachable!("clients send holds and renewals"),
    };
    s.sends_left[from] -= 1;
    if let Msg::Hold { .. } = msg {
        s.clients[from] = Client::Waiting {
            until: s.now + WAIT,
        };
    }
    s.net.insert(msg);
}

fn serving(s: &State, id: NodeId) -> bool {
    matches!(s.node(id).phase, Phase::Serving { .. })
}

fn serving_grants(s: &State, id: NodeId) -> bool {
    matches!(s.node(id).phase, Phase::Serving { grants_from } if s.now >= grants_from)
}

/// A hold: granted when the key is free, else the client joins the line.
fn hold(s: &mut State, at: NodeId, from: ClientId) {
    let now = s.now;
    let store = &mut s.node_mut(at).store;
    let Some(lease) = &store.lease else {
        return grant(s, at, from);
    };
    if lease.holder != from && !store.line.iter().any(|w| w.client == from) {
        store.line.push(Waiter {
            client: from,
            until: now + WAIT,
        });
    }
}

fn grant_next_in_line(s: &mut State, at: NodeId) {
    let store = &mut s.node_mut(at).store;
    if store.lease.is_none() && !store.line.is_empty() {
        let first = store.line.remove(0);
        grant(s, at, first.client);
    }
}

/// A new lease on the key, with the next fence; the history notes a fence
/// that did not rise.
fn grant(s: &mut State, at: NodeId, to: ClientId) {
    let now = s.now;
    let node = s.node_mut(at);
    let fallback = at == NodeId::New && !node.imported;
    let fence = node.store.next_fence;
    node.store.next_fence += 1;
    let lease = Lease {
        holder: to,
        fence,
        expiry: now + TTL,
        max_hold: now + MAX_HOLD,
        imported: false,
        reattached: false,
    };
    let msg = Msg::Grant {
        to,
        lease: fence,
        deadline: lease.expiry,
        max_hold: lease.max_hold,
    };
    node.store.lease = Some(lease);
    s.fence_fell |= fence <= s.max_fence;
    s.max_fence = s.max_fence.max(fence);
    s.fallback_granted |= fallback;
    s.net.insert(msg);
}

/// A client hears a grant or a renewal: it believes until the deadline
/// heard last for its lease (never shorter: answers may be reordered).
/// A grant for a lease it does not hold replaces only a lease it no
/// longer believes.
fn receive_grant(s: &mut State, to: ClientId, lease: u8, deadline: u8, max_hold: u8) {
    if deadline <= s.now {
        return;
    }
    let client = &mut s.clients[to as usize];
    match client {
        Client::Holding {
            lease: held,
            deadline: until,
            ..
        } if *held == lease => *until = (*until).max(deadline),
        Client::Holding { .. } => {}
        Client::Idle | Client::Waiting { .. } => {
            *client = Client::Holding {
                lease,
                deadline,
                max_hold,
            }
        }
    }
}

/// The old owner deletes its claim and stops (`keep_serving`: a mutant's
/// old owner still serving, not yet frozen, goes on serving).
fn give_up(s: &mut State, keep_serving: bool) {
    if s.etcd.owner == Some(NodeId::Old) {
        s.etcd.owner = None;
    }
    let old = s.node_mut(NodeId::Old);
    if keep_serving && matches!(old.phase, Phase::Serving { .. }) {
        return;
    }
    old.phase = Phase::GaveUp;
    old.store = Store::default();
}

/// A crash: the node's memory is gone; etcd expires its claim later.
fn crash(s: &mut State, id: NodeId) {
    let restarted = s.node(id).restarted;
    *s.node_mut(id) = Node {
        phase: Phase::Down,
        store: Store::default(),
        imported: false,
        restarted,
    };
    if s.etcd.owner == Some(id) {
        s.etcd.expires = Some(s.now + ETCD_TTL);
    }
}
