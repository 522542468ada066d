//! CLUSTER: what Redis Cluster clients ask a node (SLOTS, SHARDS, NODES,
//! INFO, MYID, KEYSLOT), answered from what the node last read of etcd, so
//! `redis-cli -c` and cluster-aware clients find the owner of a key. A
//! single node answers as a Redis without cluster support.

use crate::cluster::slots::{key_slot, partition_range, SLOTS};
use crate::cluster::{Node, View};
use crate::parse::{unknown_subcommand, Parse};
use crate::reply::{ErrorReply, Reply};
use crate::session::Session;
use holdline_resp::Value;

/// `CLUSTER <subcommand> ...`.
#[derive(Debug, PartialEq)]
pub enum Query {
    Slots,
    Shards,
    Nodes,
    Info,
    MyId,
    KeySlot(Vec<u8>),
}

/// Redis's answer when cluster mode is off.
const DISABLED: &str = "This instance has cluster support disabled";

impl Query {
    pub fn parse(p: &mut Parse) -> Result<Query, ErrorReply> {
        let sub = p.next_bytes()?;
        p.subcommand(&sub);
        Ok(match sub.to_ascii_uppercase().as_slice() {
            b"SLOTS" => Query::Slots,
            b"SHARDS" => Query::Shards,
            b"NODES" => Query::Nodes,
            b"INFO" => Query::Info,
            b"MYID" => Query::MyId,
            b"KEYSLOT" => Query::KeySlot(p.next_bytes()?),
            _ => return Err(unknown_subcommand(&sub, "CLUSTER")),
        })
    }

    pub fn apply(self, s: &Session) -> Reply {
        let Some(node) = &s.shared.cluster else {
            return Err(ErrorReply::err(DISABLED));
        };
        let view = node.view();
        Ok(match self {
            Query::Slots => slots(&view, node),
            Query::Shards => shards(&view, node),
            Query::Nodes => Value::Bulk(nodes(&view, node).into_bytes()),
            Query::Info => Value::Bulk(info(&view, node).into_bytes()),
            Query::MyId => Value::bulk(node.id.clone()),
            Query::KeySlot(key) => Value::Integer(i64::from(key_slot(&key))),
        })
    }
}

/// `host:port` as Redis shows it: host without brackets, port a number.
fn host_port(addr: &str) -> (String, i64) {
    let (host, port) = addr.rsplit_once(':').unwrap_or((addr, "0"));
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (host.to_owned(), port.parse().unwrap_or(0))
}

/// Owned slot ranges: (first, last, owner id, owner address), adjacent
/// partitions of one owner merged.
fn ranges(view: &View, node: &Node) -> Vec<(u16, u16, String, String)> {
    let mut out: Vec<(u16, u16, String, String)> = Vec::new();
    for (p, owner) in view.owners.iter().enumerate() {
        let Some((id, addr)) = owner else { continue };
        let (first, last) = partition_range(p as u16, node.partitions);
        match out.last_mut() {
            Some(r) if r.2 == *id && r.1 + 1 == first => r.1 = last,
            _ => out.push((first, last, id.clone(), addr.clone())),
        }
    }
    out
}

fn slots(view: &View, node: &Node) -> Value {
    Value::Array(
        ranges(view, node)
            .into_iter()
            .map(|(first, last, id, addr)| {
                let (host, port) = host_port(&addr);
                Value::Array(vec![
                    Value::Integer(i64::from(first)),
                    Value::Integer(i64::from(last)),
                    Value::Array(vec![
                        Value::bulk(host),
                        Value::Integer(port),
                        Value::bulk(id),
                    ]),
                ])
            })
            .collect(),
    )
}

/// Redis 7's shape: one shard per node, its slot ranges flat.
fn shards(view: &View, node: &Node) -> Value {
    let all = ranges(view, node);
    let mut shards = Vec::new();
    for (id, addr) in &view.nodes {
        let mut slots = Vec::new();
        for (first, last, owner, _) in &all {
            if owner == id {
                slots.push(Value::Integer(i64::from(*first)));
                slots.push(Value::Integer(i64::from(*last)));
            }
        }
        let (host, port) = host_port(addr);
        let member = Value::Map(vec![
            (Value::bulk("id"), Value::bulk(id.clone())),
            (Value::bulk("port"), Value::Integer(port)),
            (Value::bulk("ip"), Value::bulk(host.clone())),
            (Value::bulk("endpoint"), Value::bulk(host)),
            (Value::bulk("role"), Value::bulk("master")),
            (Value::bulk("replication-offset"), Value::Integer(0)),
            (Value::bulk("health"), Value::bulk("online")),
        ]);
        shards.push(Value::Map(vec![
            (Value::bulk("slots"), Value::Array(slots)),
            (Value::bulk("nodes"), Value::Array(vec![member])),
        ]));
    }
    Value::Array(shards)
}

/// Redis's `CLUSTER NODES` lines (every node a master, always connected).
fn nodes(view: &View, node: &Node) -> String {
    let all = ranges(view, node);
    let mut out = String::new();
    for (id, addr) in &view.nodes {
        let (host, port) = host_port(addr);
        let flags = if *id == node.id {
            "myself,master"
        } else {
            "master"
        };
        out.push_str(&format!("{id} {host}:{port}@0 {flags} - 0 0 0 connected"));
        for (first, last, owner, _) in &all {
            if owner == id {
                out.push_str(&format!(" {first}-{last}"));
            }
        }
        out.push('\n');
    }
    out
}

fn info(view: &View, node: &Node) -> String {
    let assigned: u32 = ranges(view, node)
        .iter()
        .map(|(first, last, _, _)| u32::from(last - first) + 1)
        .sum();
    let state = if assigned == u32::from(SLOTS) {
        "ok"
    } else {
        "fail"
    };
    let owners = view
        .nodes
        .iter()
        .filter(|(id, _)| view.owners.iter().flatten().any(|(o, _)| o == id))
        .count();
    format!(
        "cluster_enabled:1\r\ncluster_state:{state}\r\ncluster_slots_assigned:{assigned}\r\n\
         cluster_slots_ok:{assigned}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\n\
         cluster_known_nodes:{}\r\ncluster_size:{owners}\r\ncluster_partitions:{}\r\n\
         cluster_partitions_served_here:{}\r\n",
        view.nodes.len(),
        node.partitions,
        node.served().len(),
    )
}
