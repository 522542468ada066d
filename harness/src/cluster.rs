//! What the `cluster` scenario runs against and routes by: the setups,
//! the nodes' partitions and etcd lease, and each slot's owner read from
//! the settled `CLUSTER SLOTS` map (a key's slot is the client's
//! `holdline_client::key_slot`, Redis Cluster's). Starting a cluster (a
//! private etcd, the nodes, the wait until their map settles) is the
//! tests' one cluster starter, `holdline_testing::cluster::Cluster`.

use std::net::SocketAddr;

pub use holdline_testing::cluster::{Cluster, Range, SLOTS};

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

pub use crate::servers::{etcd_binary, tools_required};

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
    use holdline_testing::cluster::{loopback, parse_slots, settled, slots_reply};

    #[test]
    fn owners_and_shares_read_the_settled_map() {
        let nodes = [loopback(1), loopback(2)];
        // Two nodes: 8 partitions each (8192 slots).
        let map = parse_slots(&slots_reply(&[(8192, 16383, 2, "b"), (0, 8191, 1, "a")])).unwrap();
        assert!(settled(&map, &nodes, PARTITIONS as u16));
        assert_eq!(shares(&map, &nodes), "8/8");
        let owner = owners(&map, &nodes);
        assert_eq!(
            (owner[0], owner[8191], owner[8192], owner[16383]),
            (0, 0, 1, 1)
        );
    }
}
