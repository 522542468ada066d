//! A private etcd (Debian's `/usr/bin/etcd`, `testing/spawn.rs`) and
//! cluster nodes of `holdline serve --etcd` on ports they bind themselves,
//! for the cluster tests.

#![allow(dead_code)]

use super::{Client, Server};
use holdline_resp::Value;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

// Each test binary uses a part of what it is handed.
#[allow(unused_imports)]
pub use super::spawn::{etcd_available, Etcd, ETCD};

/// A private etcd member (other ports tried when one was taken).
pub fn start_etcd() -> Etcd {
    Etcd::start().unwrap_or_else(|why| panic!("{why}"))
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
    let (url, partitions, ttl) = (etcd.url(), partitions.to_string(), format!("{ttl}s"));
    let addr = "127.0.0.1:0";
    let mut args = vec!["--listen", addr, "--advertise", addr, "--etcd", &url];
    args.extend([
        "--cluster",
        name,
        "--partitions",
        &partitions,
        "--etcd-ttl",
        &ttl,
    ]);
    args.extend_from_slice(extra);
    Server::serve(&args)
}

/// `CLUSTER SLOTS` of the node at `addr`: (first, last, owner address).
pub fn slot_map(addr: SocketAddr) -> Vec<(u16, u16, String)> {
    let Ok(stream) = TcpStream::connect(addr) else {
        return Vec::new();
    };
    drop(stream);
    let mut c = Client::connect(addr);
    let Value::Array(ranges) = c.call(&["CLUSTER", "SLOTS"]) else {
        return Vec::new();
    };
    ranges
        .into_iter()
        .filter_map(|r| {
            let Value::Array(r) = r else { return None };
            let (Value::Integer(first), Value::Integer(last), Value::Array(node)) =
                (&r[0], &r[1], &r[2])
            else {
                return None;
            };
            let (Value::Bulk(host), Value::Integer(port)) = (&node[0], &node[1]) else {
                return None;
            };
            let host = String::from_utf8_lossy(host);
            Some((*first as u16, *last as u16, format!("{host}:{port}")))
        })
        .collect()
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
/// owners among `nodes` only, and is even (no node owns more than one
/// partition's slots beyond another): the cluster has settled.
pub fn await_settled(
    nodes: &[SocketAddr],
    partitions: u16,
    within: Duration,
) -> Vec<(u16, u16, String)> {
    let names: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    let deadline = Instant::now() + within;
    let per_partition = 16384 / u32::from(partitions) + 1;
    loop {
        let maps: Vec<_> = nodes.iter().map(|&n| slot_map(n)).collect();
        let map = &maps[0];
        let owned: Vec<u32> = names
            .iter()
            .map(|n| {
                map.iter()
                    .filter(|(_, _, a)| a == n)
                    .map(|(f, l, _)| u32::from(l - f) + 1)
                    .sum()
            })
            .collect();
        let even = owned.iter().max().unwrap() - owned.iter().min().unwrap() <= per_partition;
        if covers(map, &names) && even && maps.iter().all(|m| m == map) {
            return map.clone();
        }
        assert!(
            Instant::now() < deadline,
            "not settled within {within:?}: {maps:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
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
