//! What the `cluster` scenario starts and routes by: a private etcd
//! (Debian's `/usr/bin/etcd` on free loopback ports with a data directory
//! of its own; never the system's service), nodes of `holdline serve
//! --etcd`, and the owners read from `CLUSTER SLOTS` (a key's slot is the
//! client's `holdline_client::key_slot`, Redis Cluster's).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use holdline_client::Value;

use crate::servers::ServerProcess;

/// Redis Cluster's slots.
pub const SLOTS: usize = 16384;

/// Partitions the nodes split the slots into (`--partitions`).
pub const PARTITIONS: usize = 16;

/// A node's etcd lease (`--etcd-ttl`).
pub const ETCD_TTL: &str = "5s";

/// What a row of the `cluster` scenario runs against.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Setup {
    /// One `holdline serve` without `--etcd`: the reference row.
    Plain,
    /// This many nodes of one cluster, with their etcd.
    Nodes(usize),
}

impl Setup {
    pub const ALL: [Setup; 4] = [
        Setup::Plain,
        Setup::Nodes(1),
        Setup::Nodes(2),
        Setup::Nodes(3),
    ];

    /// The name in tables (`plain`: the cluster rows' ratios read against it).
    pub fn name(self) -> &'static str {
        match self {
            Setup::Plain => "plain",
            Setup::Nodes(1) => "cluster-1",
            Setup::Nodes(2) => "cluster-2",
            Setup::Nodes(3) => "cluster-3",
            Setup::Nodes(_) => "cluster-n",
        }
    }
}

pub use crate::servers::{etcd_binary, start_etcd, tools_required};

/// One etcd member (`testing/spawn.rs`), killed and its data removed
/// when dropped.
pub type Etcd = crate::spawn::Etcd;

/// A cluster name no other run of this process used.
pub fn cluster_name() -> String {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    format!(
        "harness-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Relaxed)
    )
}

/// A node of cluster `name` on a loopback port it binds, advertised as itself.
pub fn start_node(bin: &Path, etcd: &Etcd, name: &str) -> Result<ServerProcess, String> {
    let partitions = PARTITIONS.to_string();
    let url = etcd.url();
    let args = [
        "--advertise",
        "127.0.0.1:0",
        "--etcd",
        &url,
        "--cluster",
        name,
        "--partitions",
        &partitions,
        "--etcd-ttl",
        ETCD_TTL,
    ];
    ServerProcess::holdline(bin, &args)
}

/// One range of `CLUSTER SLOTS`: first and last slot, the owner's address and id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    pub first: u16,
    pub last: u16,
    pub addr: SocketAddr,
    pub id: String,
}

/// `CLUSTER SLOTS`' answer, `[[first, last, [host, port, id]], ...]`, as
/// ranges sorted by first slot; `None` for any other shape.
pub fn parse_slots(reply: &Value) -> Option<Vec<Range>> {
    let Value::Array(entries) = reply else {
        return None;
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for e in entries {
        let Value::Array(e) = e else { return None };
        let [Value::Integer(first), Value::Integer(last), Value::Array(node), ..] = e.as_slice()
        else {
            return None;
        };
        let [Value::Bulk(host), Value::Integer(port), Value::Bulk(id), ..] = node.as_slice() else {
            return None;
        };
        let host = String::from_utf8_lossy(host);
        ranges.push(Range {
            first: u16::try_from(*first).ok()?,
            last: u16::try_from(*last).ok()?,
            addr: format!("{host}:{port}").parse().ok()?,
            id: String::from_utf8_lossy(id).into_owned(),
        });
    }
    ranges.sort_by_key(|r| r.first);
    Some(ranges)
}

/// Whether `map` covers every slot, only `nodes` own slots, and each owns
/// exactly its share of the partitions as the nodes compute it (nodes by
/// id, the first `PARTITIONS % n` one more than the others): then no node
/// gives up or claims anything more, and the map stays as it is.
pub fn settled(map: &[Range], nodes: &[SocketAddr]) -> bool {
    let mut next = 0usize;
    for r in map {
        if usize::from(r.first) != next || !nodes.contains(&r.addr) {
            return false;
        }
        next = usize::from(r.last) + 1;
    }
    if next != SLOTS {
        return false;
    }
    let mut ids: Vec<&str> = map.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() != nodes.len() {
        return false;
    }
    let m = ids.len();
    ids.iter().enumerate().all(|(rank, id)| {
        let share = PARTITIONS / m + usize::from(rank < PARTITIONS % m);
        let owned: usize = map
            .iter()
            .filter(|r| r.id == *id)
            .map(|r| usize::from(r.last - r.first) + 1)
            .sum();
        owned == share * (SLOTS / PARTITIONS)
    })
}

/// Each slot's owner, as an index into `nodes`.
pub fn owners(map: &[Range], nodes: &[SocketAddr]) -> Vec<u8> {
    let mut owner = vec![0u8; SLOTS];
    for r in map {
        let i = nodes.iter().position(|a| *a == r.addr).unwrap_or(0);
        owner[usize::from(r.first)..=usize::from(r.last)].fill(i as u8);
    }
    owner
}

/// Partitions per node in `map`, in the order of `nodes`: `6/5/5`.
pub fn shares(map: &[Range], nodes: &[SocketAddr]) -> String {
    let per = SLOTS / PARTITIONS;
    nodes
        .iter()
        .map(|a| {
            let slots: usize = map
                .iter()
                .filter(|r| r.addr == *a)
                .map(|r| usize::from(r.last - r.first) + 1)
                .sum();
            (slots / per).to_string()
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: u16, last: u16, port: u16, id: &str) -> Value {
        Value::Array(vec![
            Value::Integer(first.into()),
            Value::Integer(last.into()),
            Value::Array(vec![
                Value::Bulk(b"127.0.0.1".to_vec()),
                Value::Integer(port.into()),
                Value::Bulk(id.as_bytes().to_vec()),
            ]),
        ])
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn a_map_is_settled_when_each_node_has_its_share_by_id() {
        // Two nodes: 8 partitions each (8192 slots).
        let two = Value::Array(vec![range(8192, 16383, 2, "b"), range(0, 8191, 1, "a")]);
        let map = parse_slots(&two).unwrap();
        assert_eq!((map[0].first, map[0].addr), (0, addr(1)));
        assert!(settled(&map, &[addr(1), addr(2)]));
        assert!(
            !settled(&map, &[addr(1), addr(2), addr(3)]),
            "a node owns nothing yet"
        );
        assert_eq!(shares(&map, &[addr(1), addr(2)]), "8/8");
        let owner = owners(&map, &[addr(1), addr(2)]);
        assert_eq!(
            (owner[0], owner[8191], owner[8192], owner[16383]),
            (0, 0, 1, 1)
        );
        // Three nodes: the lowest id gets 6 partitions, the others 5.
        let three = |a: u16, b: u16| {
            let a_end = a * 1024;
            let b_end = a_end + b * 1024;
            Value::Array(vec![
                range(0, a_end - 1, 1, "a"),
                range(a_end, b_end - 1, 2, "b"),
                range(b_end, 16383, 3, "c"),
            ])
        };
        let nodes = [addr(1), addr(2), addr(3)];
        assert!(settled(&parse_slots(&three(6, 5)).unwrap(), &nodes));
        // Balanced-looking, but "b" is over its share: it will give one up.
        assert!(!settled(&parse_slots(&three(5, 6)).unwrap(), &nodes));
        // A gap: not every slot is served.
        let gap = Value::Array(vec![range(0, 8190, 1, "a"), range(8192, 16383, 2, "b")]);
        assert!(!settled(&parse_slots(&gap).unwrap(), &[addr(1), addr(2)]));
        assert_eq!(parse_slots(&Value::Simple("OK".into())), None);
    }
}
