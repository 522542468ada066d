//! What the `cluster` scenario starts and routes by: a private etcd
//! (Debian's `/usr/bin/etcd` on free loopback ports with a data directory
//! of its own; never the system's service), nodes of `holdline serve
//! --etcd`, and the owners read from `CLUSTER SLOTS` (a key's slot is the
//! client's `holdline_client::key_slot`, Redis Cluster's). The nodes'
//! flags, the slot map and when it has settled are the tests' cluster
//! starter's (`holdline_testing::cluster`).

use std::net::SocketAddr;
use std::path::Path;

use holdline_testing::cluster as shared;

use crate::servers::ServerProcess;

pub use holdline_testing::cluster::{parse_slots, Range, SLOTS};

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

/// One etcd member (`holdline_testing::spawn`), killed and its data
/// removed when dropped.
pub type Etcd = crate::spawn::Etcd;

/// A cluster name no other run of this process used.
pub fn cluster_name() -> String {
    shared::cluster_name("harness")
}

/// A node of cluster `name` on a loopback port it binds, advertised as itself.
pub fn start_node(bin: &Path, etcd: &Etcd, name: &str) -> Result<ServerProcess, String> {
    let args = shared::node_args(etcd, name, PARTITIONS as u16, ETCD_TTL);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ServerProcess::holdline(bin, &args)
}

/// Whether `map` covers every slot, only `nodes` own slots, and each owns
/// exactly its share of the partitions (`holdline_testing::cluster::settled`).
pub fn settled(map: &[Range], nodes: &[SocketAddr]) -> bool {
    shared::settled(map, nodes, PARTITIONS as u16)
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
    use holdline_testing::cluster::{loopback, slots_reply};

    #[test]
    fn owners_and_shares_read_the_settled_map() {
        let nodes = [loopback(1), loopback(2)];
        // Two nodes: 8 partitions each (8192 slots).
        let map = parse_slots(&slots_reply(&[(8192, 16383, 2, "b"), (0, 8191, 1, "a")])).unwrap();
        assert!(settled(&map, &nodes));
        assert_eq!(shares(&map, &nodes), "8/8");
        let owner = owners(&map, &nodes);
        assert_eq!(
            (owner[0], owner[8191], owner[8192], owner[16383]),
            (0, 0, 1, 1)
        );
    }
}
