//! The page on the `--metrics` listener: `/` serves [`HTML`] (inline CSS
//! and JS, no external assets) and `/api/state` what it shows, as JSON
//! ([`state_json`]): every lock's counters, the longest lines, every held
//! key's holders, the recent history and, in a cluster, what the node
//! serves. It reads and changes nothing: no lock is made by a look.
//!
//! Bounded, so a server with a million keys still answers a small page:
//! at most [`MAX_HELD`] held keys, [`MAX_LINES`] lines, [`MAX_EVENTS`]
//! events. Its cost is one pass over the connections and their leases.

use crate::cluster::slots::{key_slot, partition_of, partition_range};
use crate::cluster::{Node, View};
use crate::events::{self, Event};
use crate::record::{HeldKey as Key, LeaseRecord};
use crate::session::Shared;
use holdline::{KeyInfo, Lock, Store};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The page itself.
pub const HTML: &str = include_str!("page.html");

/// Most held keys listed (the first by lock, then key).
pub const MAX_HELD: usize = 1000;
/// Most lines listed (the longest).
pub const MAX_LINES: usize = 20;
/// Most events of the history listed (the newest).
pub const MAX_EVENTS: usize = 100;

#[derive(Serialize)]
struct State<'a> {
    server: ServerFacts,
    locks: Vec<LockRow>,
    lines: Vec<Line>,
    held: Vec<HeldKey>,
    /// Held keys in all (the locks' `held_keys`); `held` lists at most
    /// [`MAX_HELD`] of them.
    held_total: u64,
    history: Vec<&'a Event>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<ClusterState>,
}

#[derive(Serialize)]
struct ServerFacts {
    version: &'static str,
    port: u16,
    uptime_ms: u64,
    /// Now, UTC milliseconds: the page's clock for the history's ages.
    time_ms: u64,
    connections: usize,
    /// Connections with a waiting HOLD.
    waiting: usize,
}

#[derive(Serialize)]
struct LockRow {
    name: String,
    /// `LockStats::fields`: live_keys, held_keys, waiters, grants, ...
    #[serde(flatten)]
    counters: BTreeMap<&'static str, u64>,
}

#[derive(Serialize)]
struct Line {
    lock: String,
    key: String,
    /// Connections whose HOLD waits for the key.
    waiters: usize,
}

#[derive(Serialize)]
struct HeldKey {
    lock: String,
    key: String,
    /// The newest grant's fence.
    fence: u64,
    waiters: usize,
    /// Of the longest-held lease; `None` when the core keeps no timer.
    held_for_ms: Option<u64>,
    lease_left_ms: Option<u64>,
    /// Oldest grant first.
    holders: Vec<Holder>,
}

#[derive(Serialize)]
struct Holder {
    client: u64,
    name: Option<String>,
    addr: String,
    note: String,
    fence: u64,
    permits: u32,
    lease: u64,
}

#[derive(Serialize)]
struct ClusterState {
    node: String,
    advertise: String,
    partitions: u16,
    /// The partitions this node serves now.
    served: Vec<u16>,
    /// How long the node's etcd lease surely lives (0: none).
    lease_left_ms: u64,
    /// Owned slot ranges, as etcd last showed them.
    slots: Vec<SlotRange>,
}

#[derive(Serialize)]
struct SlotRange {
    first: u16,
    last: u16,
    node: String,
    addr: String,
}

/// `/api/state`'s body.
pub fn state_json(shared: &Shared) -> String {
    let locks = shared.locks();
    let held_total = locks.iter().map(|(_, s)| s.held_keys as u64).sum();
    let events = shared.history.recent(None, None, MAX_EVENTS, |_| true);
    let state = State {
        server: server_facts(shared),
        locks: locks
            .into_iter()
            .map(|(name, stats)| LockRow {
                name,
                counters: stats.fields().into_iter().collect(),
            })
            .collect(),
        lines: lines(shared),
        held: held(shared),
        held_total,
        history: events.iter().map(Arc::as_ref).collect(),
        cluster: shared.cluster.as_deref().map(cluster_state),
    };
    serde_json::to_string(&state).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

fn server_facts(shared: &Shared) -> ServerFacts {
    ServerFacts {
        version: env!("CARGO_PKG_VERSION"),
        port: shared.facts.port,
        uptime_ms: ms(shared.facts.started.elapsed()),
        time_ms: events::now_ms(),
        connections: shared.clients.count(),
        waiting: shared.clients.blocked(),
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The keys most connections wait for, longest line first.
fn lines(shared: &Shared) -> Vec<Line> {
    let mut counts: HashMap<Key, usize> = HashMap::new();
    for client in shared.clients.all() {
        if let Some(held_key) = client.waiting() {
            *counts.entry(held_key).or_default() += 1;
        }
    }
    let mut longest: Vec<(Key, usize)> = counts.into_iter().collect();
    longest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    longest
        .into_iter()
        .take(MAX_LINES)
        .map(|(held_key, waiters)| Line {
            lock: held_key.lock().to_owned(),
            key: held_key.key().to_owned(),
            waiters,
        })
        .collect()
}

/// Every held key (the first [`MAX_HELD`] by lock and key) with its
/// holders, and what the core says of its line and its oldest lease; a
/// key the core says is free (its lease lost, its client not told yet)
/// is not held.
fn held(shared: &Shared) -> Vec<HeldKey> {
    let mut keys: BTreeMap<Key, Vec<Holder>> = BTreeMap::new();
    for client in shared.clients.all() {
        let name = client
            .name()
            .map(|n| String::from_utf8_lossy(&n).into_owned());
        let addr = client.addr.to_string();
        client.each_held(|by| {
            let held_key = &by.held_key;
            let full = keys.len() >= MAX_HELD && !keys.contains_key(held_key);
            // Full: a key past the last kept one stays out; one before it
            // pushes the last out, so the first MAX_HELD are kept.
            if full && keys.last_key_value().is_some_and(|(k, _)| k < held_key) {
                return;
            }
            let holder = holder(client.id, &name, &addr, by);
            keys.entry(held_key.clone()).or_default().push(holder);
            if keys.len() > MAX_HELD {
                keys.pop_last();
            }
        });
    }
    let mut opened = Opened::default();
    keys.into_iter()
        .filter_map(|(held_key, holders)| {
            let (lock, key) = (held_key.lock(), held_key.key());
            let info = opened.inspect(shared, lock, key).filter(|i| i.held)?;
            Some(HeldKey {
                lock: lock.to_owned(),
                key: key.to_owned(),
                fence: info.fence,
                waiters: info.waiters,
                held_for_ms: info.held_for.map(ms),
                lease_left_ms: info.lease_left.map(ms),
                holders: current(holders, &info),
            })
        })
        .collect()
}

/// The holders the core still counts, oldest grant first. A lease that
/// expired or was revoked stays on its connection until its client hears
/// of it (RELEASE, or the close): the core's count of holders and its
/// newest fence say which are current; the older ones are the lost ones
/// (a grant's fence is above every earlier one).
fn current(mut holders: Vec<Holder>, info: &KeyInfo) -> Vec<Holder> {
    holders.retain(|h| h.fence <= info.fence);
    holders.sort_by_key(|h| h.fence);
    let stale = holders.len().saturating_sub(info.holders as usize);
    holders.split_off(stale)
}

fn holder(client: u64, name: &Option<String>, addr: &str, by: &LeaseRecord) -> Holder {
    Holder {
        client,
        name: name.clone(),
        addr: addr.to_owned(),
        note: by.note().to_string(),
        fence: by.fence,
        permits: by.permits,
        lease: by.id,
    }
}

/// Lock handles opened for a look, by store and name: one open per lock,
/// not per key.
#[derive(Default)]
struct Opened {
    locks: HashMap<(u64, String), Option<Lock>>,
}

impl Opened {
    /// What the core says of `key`: its line, its oldest lease's times.
    fn inspect(&mut self, shared: &Shared, lock: &str, key: &str) -> Option<KeyInfo> {
        let (store_id, store) = store_of(shared, key)?;
        let handle = self
            .locks
            .entry((store_id, lock.to_owned()))
            // A look makes no lock: that would fix its count of permits.
            .or_insert_with(|| store.lock(lock).open_if_known().ok().flatten());
        handle.as_ref()?.inspect(key)
    }
}

/// The store holding `key`: the one store, or the served partition of
/// its slot (`None`: not served here any more).
fn store_of(shared: &Shared, key: &str) -> Option<(u64, Store)> {
    let Some(node) = &shared.cluster else {
        return Some((0, shared.store.clone()));
    };
    let p = partition_of(key_slot(key.as_bytes()), node.partitions);
    let served = node.served();
    let part = served.iter().find(|part| part.index == p)?;
    Some((part.store_id, part.store.clone()))
}

fn cluster_state(node: &Node) -> ClusterState {
    let lease_left_ms = node
        .deadline()
        .map_or(0, |d| ms(d.saturating_duration_since(Instant::now())));
    ClusterState {
        node: node.id.clone(),
        advertise: node.advertise.clone(),
        partitions: node.partitions,
        served: node.served().iter().map(|p| p.index).collect(),
        lease_left_ms,
        slots: slot_ranges(&node.view(), node.partitions),
    }
}

/// Owned slot ranges, adjacent partitions of one owner merged (as
/// CLUSTER SLOTS shows them).
fn slot_ranges(view: &View, partitions: u16) -> Vec<SlotRange> {
    let mut out: Vec<SlotRange> = Vec::new();
    for (p, owner) in view.owners.iter().enumerate() {
        let Some((id, addr)) = owner else { continue };
        let (first, last) = partition_range(p as u16, partitions);
        match out.last_mut() {
            Some(r) if r.node == *id && r.last + 1 == first => r.last = last,
            _ => out.push(SlotRange {
                first,
                last,
                node: id.clone(),
                addr: addr.clone(),
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_ranges_merge_one_owners_adjacent_partitions() {
        let a = Some(("a".to_owned(), "h:1".to_owned()));
        let b = Some(("b".to_owned(), "h:2".to_owned()));
        let view = View {
            takers: Vec::new(),
            owners: vec![a.clone(), a, None, b],
            nodes: Vec::new(),
        };
        let ranges = slot_ranges(&view, 4);
        let shown: Vec<(u16, u16, &str)> = ranges
            .iter()
            .map(|r| (r.first, r.last, r.node.as_str()))
            .collect();
        assert_eq!(shown, [(0, 8191, "a"), (12288, 16383, "b")]);
    }

    fn holder_of(fence: u64) -> Holder {
        let store = holdline::Store::new();
        let lease = store.lock("l").open().unwrap().acquire("k").unwrap();
        let who = Arc::new(crate::record::Holder {
            id: 1,
            name: None,
            addr: "127.0.0.1:1".into(),
        });
        let key = Key::new("l", "k");
        let by = LeaseRecord::new(fence, key, 0, fence, 1, who, lease.signal(), "".into());
        holder(1, &None, "127.0.0.1:1", &by)
    }

    #[test]
    fn a_lost_lease_its_client_still_keeps_is_no_holder() {
        let info = |fence, holders| KeyInfo {
            held: true,
            fence,
            held_for: None,
            lease_left: None,
            waiters: 0,
            holders,
            permits_held: holders,
        };
        let fences = |hs: Vec<Holder>| hs.iter().map(|h| h.fence).collect::<Vec<_>>();
        // Expired at 5, granted again at 7: the client of 5 was not told yet.
        let holders = vec![holder_of(7), holder_of(5)];
        assert_eq!(fences(current(holders, &info(7, 1))), [7]);
        // Two permits held, 3 lost before 8 and 9 were granted.
        let holders = vec![holder_of(9), holder_of(3), holder_of(8)];
        assert_eq!(fences(current(holders, &info(9, 2))), [8, 9]);
        // A grant racing the look (fence above the core's): not yet shown.
        assert!(current(vec![holder_of(10)], &info(9, 1)).is_empty());
    }
}
