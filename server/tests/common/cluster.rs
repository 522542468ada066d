//! The cluster tests' view of `holdline_testing::cluster` (the one cluster
//! starter: a private etcd, nodes of `holdline serve --etcd` on ports they
//! bind themselves, `CLUSTER SLOTS` and the wait until the map settles),
//! with the slot map as `(first, last, owner address)`.

#![allow(dead_code)]

use super::{Client, Server};
use holdline_resp::Value;
use holdline_testing::cluster;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

// Each test binary uses a part of what it is handed.
#[allow(unused_imports)]
pub use holdline_testing::spawn::{etcd_available, Etcd, ETCD};

/// A private etcd member (other ports tried when one was taken).
pub fn start_etcd() -> Etcd {
    cluster::start_etcd().unwrap_or_else(|why| panic!("{why}"))
}

/// Starts a node of cluster `name` on a port it binds itself, advertised
/// as itself.
pub fn start_node(etcd: &Etcd, name: &str, partitions: u16, ttl_secs: u64) -> Server {
    start_node_with(etcd, name, partitions, ttl_secs, &[])
}

/// A node with more flags.
pub fn start_node_with(
    etcd: &Etcd,
    name: &str,
    partitions: u16,
    ttl: u64,
    extra: &[&str],
) -> Server {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_holdline"));
    let ttl = format!("{ttl}s");
    let node = cluster::start_node(bin, etcd, name, partitions, &ttl, extra);
    Server(node.unwrap_or_else(|why| panic!("{why}")))
}

fn triples(map: Vec<cluster::Range>) -> Vec<(u16, u16, String)> {
    let triple = |r: cluster::Range| (r.first, r.last, r.addr.to_string());
    map.into_iter().map(triple).collect()
}

/// `CLUSTER SLOTS` of the node at `addr`: (first, last, owner address).
pub fn slot_map(addr: SocketAddr) -> Vec<(u16, u16, String)> {
    triples(cluster::slot_map(addr))
}

/// The owner of `slot` in a map.
pub fn owner_of(map: &[(u16, u16, String)], slot: u16) -> Option<String> {
    map.iter()
        .find(|(f, l, _)| (*f..=*l).contains(&slot))
        .map(|(_, _, a)| a.clone())
}

/// Whether the map covers every slot, each owned by one of `nodes`.
pub fn covers(map: &[(u16, u16, String)], nodes: &[String]) -> bool {
    let mut next = 0u32;
    for (f, l, a) in map {
        if u32::from(*f) != next || !nodes.contains(a) {
            return false;
        }
        next = u32::from(*l) + 1;
    }
    next == 16384
}

/// Waits until `addr`'s map covers every slot with owners among `nodes`
/// only, each of them owning some.
pub fn await_spread(
    addr: SocketAddr,
    nodes: &[String],
    within: Duration,
) -> Vec<(u16, u16, String)> {
    let deadline = Instant::now() + within;
    loop {
        let map = slot_map(addr);
        let everyone = nodes.iter().all(|n| map.iter().any(|(_, _, a)| a == n));
        if covers(&map, nodes) && everyone {
            return map;
        }
        assert!(
            Instant::now() < deadline,
            "no full map over {nodes:?} within {within:?}: {map:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until every node's map is the same, covers every slot with
/// owners among `nodes` only, and each node owns its share of the
/// partitions: the cluster has settled.
pub fn await_settled(
    nodes: &[SocketAddr],
    partitions: u16,
    within: Duration,
) -> Vec<(u16, u16, String)> {
    let map = cluster::await_settled(nodes, partitions, within);
    triples(map.unwrap_or_else(|why| panic!("{why}")))
}

/// The slot of `key` as the node computes it.
pub fn key_slot(c: &mut Client, key: &str) -> u16 {
    match c.call(&["CLUSTER", "KEYSLOT", key]) {
        Value::Integer(n) => n as u16,
        other => panic!("KEYSLOT {key}: {other:?}"),
    }
}

/// A key's slot as the wire crate computes it (checked there against
/// Redis's own vectors): what every node's map and KEYSLOT must agree with.
pub fn slot(key: &str) -> u16 {
    holdline_resp::slot::key_slot(key.as_bytes())
}
