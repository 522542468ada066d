//! The one cluster starter of the Rust tests and the harness: a private
//! etcd member (`spawn::Etcd`: Debian's `/usr/bin/etcd` on free loopback
//! ports with a data directory of its own, never the system's service),
//! nodes of `holdline serve --etcd` on ports they bind themselves, each
//! node's `CLUSTER SLOTS`, and the wait until every node answers the same
//! settled map.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use holdline_resp::{encode_command, Decoder, Value};

use crate::spawn::{Etcd, Holdline, PATIENCE};

/// Redis Cluster's slots.
pub const SLOTS: usize = 16384;

/// etcd's flags for a cluster's member: a short election timeout, so it
/// leads within a fraction of a second.
pub const ETCD_FLAGS: [&str; 4] = ["--heartbeat-interval", "20", "--election-timeout", "200"];

/// A private etcd member for a cluster (other ports tried when one was
/// taken).
pub fn start_etcd() -> Result<Etcd, String> {
    Etcd::start_with(&ETCD_FLAGS)
}

/// A cluster name no other cluster of this process used.
pub fn cluster_name(prefix: &str) -> String {
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    // Relaxed: the count only has to be unique.
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

/// A node's flags after `--listen`: advertised as the address it binds,
/// of cluster `name` over `partitions` partitions, with an etcd lease of
/// `etcd_ttl` (`5s`, `1500ms`).
pub fn node_args(etcd: &Etcd, name: &str, partitions: u16, etcd_ttl: &str) -> Vec<String> {
    [
        "--advertise",
        "127.0.0.1:0",
        "--etcd",
        &etcd.url(),
        "--cluster",
        name,
        "--partitions",
        &partitions.to_string(),
        "--etcd-ttl",
        etcd_ttl,
    ]
    .map(String::from)
    .into()
}

/// `bin serve --listen 127.0.0.1:0` and [`node_args`] and `extra`
/// (`--max-ttl 10s`): a node on a loopback port it binds itself.
pub fn start_node(
    bin: &Path,
    etcd: &Etcd,
    name: &str,
    partitions: u16,
    etcd_ttl: &str,
    extra: &[&str],
) -> Result<Holdline, String> {
    let node = node_args(etcd, name, partitions, etcd_ttl);
    let mut args = vec!["--listen", "127.0.0.1:0"];
    args.extend(node.iter().map(String::as_str));
    args.extend_from_slice(extra);
    Holdline::spawn(bin, &args)
}

/// One range of `CLUSTER SLOTS`: first and last slot, the owner's address
/// and id.
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

/// The `CLUSTER SLOTS` answer a node gives for `ranges` (first, last,
/// the owner's loopback port, its id): what a test of a map's reader
/// feeds it.
pub fn slots_reply(ranges: &[(u16, u16, u16, &str)]) -> Value {
    let range = |&(first, last, port, id): &(u16, u16, u16, &str)| {
        Value::Array(vec![
            Value::Integer(first.into()),
            Value::Integer(last.into()),
            Value::Array(vec![
                Value::Bulk(b"127.0.0.1".to_vec()),
                Value::Integer(port.into()),
                Value::Bulk(id.as_bytes().to_vec()),
            ]),
        ])
    };
    Value::Array(ranges.iter().map(range).collect())
}

/// `127.0.0.1:port`, as [`slots_reply`] names a node.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// One command to `addr` on a connection of its own, and its answer.
pub fn call(addr: SocketAddr, args: &[&str]) -> Result<Value, String> {
    let mut stream = TcpStream::connect_timeout(&addr, PATIENCE).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(PATIENCE)).ok();
    let mut out = Vec::new();
    encode_command(args, &mut out);
    stream.write_all(&out).map_err(|e| e.to_string())?;
    let mut decoder = Decoder::new(usize::MAX);
    let mut buf = BytesMut::new();
    loop {
        if let Some(v) = decoder.decode(&mut buf).map_err(|e| e.to_string())? {
            return Ok(v);
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) => return Err(format!("{addr} closed the connection")),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// `CLUSTER SLOTS` of the node at `addr`; empty while it answers none.
pub fn slot_map(addr: SocketAddr) -> Vec<Range> {
    call(addr, &["CLUSTER", "SLOTS"])
        .ok()
        .and_then(|reply| parse_slots(&reply))
        .unwrap_or_default()
}

/// Whether `map` covers every slot, only `nodes` own slots, and each owns
/// exactly its share of the `partitions` as the nodes compute it (nodes
/// by id, the first `partitions % n` one more than the others): then no
/// node gives up or claims anything more, and the map stays as it is.
pub fn settled(map: &[Range], nodes: &[SocketAddr], partitions: u16) -> bool {
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
    // Each partition's owner: the node owning its first slot (the nodes
    // cut partition p at slots p * SLOTS / n up to (p + 1) * SLOTS / n).
    let (m, n) = (ids.len(), usize::from(partitions));
    let owner_of = |p: usize| {
        let slot = p * SLOTS / n;
        let range = map
            .iter()
            .find(|r| (usize::from(r.first)..=usize::from(r.last)).contains(&slot));
        range.map(|r| r.id.as_str())
    };
    let owners: Vec<Option<&str>> = (0..n).map(owner_of).collect();
    ids.iter().enumerate().all(|(rank, id)| {
        let share = n / m + usize::from(rank < n % m);
        owners.iter().filter(|o| **o == Some(*id)).count() == share
    })
}

/// Waits until every node of `nodes` answers the same map and it is
/// [`settled`]; answers that map.
pub fn await_settled(
    nodes: &[SocketAddr],
    partitions: u16,
    within: Duration,
) -> Result<Vec<Range>, String> {
    let deadline = Instant::now() + within;
    loop {
        let maps: Vec<Vec<Range>> = nodes.iter().map(|&n| slot_map(n)).collect();
        let map = &maps[0];
        if settled(map, nodes, partitions) && maps.iter().all(|m| m == map) {
            return Ok(map.clone());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "not settled over {nodes:?} within {within:?}: {maps:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A private cluster: its etcd and its nodes, killed (and etcd's data
/// removed) when dropped.
pub struct Cluster {
    /// The nodes, in the order they were started (dropped before etcd).
    pub nodes: Vec<Holdline>,
    pub etcd: Etcd,
    pub name: String,
    /// The map every node answered once it settled.
    pub map: Vec<Range>,
}

impl Cluster {
    /// etcd, then `nodes` nodes of `bin` over `partitions` partitions with
    /// etcd leases of `etcd_ttl` and `extra` flags (`--max-ttl 10s`), then
    /// a wait until every node answers the same settled map.
    pub fn start(
        bin: &Path,
        nodes: usize,
        partitions: u16,
        etcd_ttl: &str,
        extra: &[&str],
    ) -> Result<Cluster, String> {
        let etcd = start_etcd()?;
        let name = cluster_name("test");
        let nodes = (0..nodes)
            .map(|_| start_node(bin, &etcd, &name, partitions, etcd_ttl, extra))
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();
        let map = await_settled(&addrs, partitions, 2 * PATIENCE)?;
        Ok(Cluster {
            nodes,
            etcd,
            name,
            map,
        })
    }

    /// The index of the node that owned `slot` when the map settled.
    pub fn owner(&self, slot: u16) -> Option<usize> {
        let range = self
            .map
            .iter()
            .find(|r| (r.first..=r.last).contains(&slot))?;
        self.nodes.iter().position(|n| n.addr == range.addr)
    }

    /// The slot ranges node `i` owned when the map settled, inclusive.
    pub fn slots_of(&self, i: usize) -> Vec<(u16, u16)> {
        let addr = self.nodes[i].addr;
        let mine = self.map.iter().filter(|r| r.addr == addr);
        mine.map(|r| (r.first, r.last)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use loopback as addr;

    #[test]
    fn a_map_is_settled_when_each_node_has_its_share_by_id() {
        // Two nodes: 8 of 16 partitions each (8192 slots).
        let two = slots_reply(&[(8192, 16383, 2, "b"), (0, 8191, 1, "a")]);
        let map = parse_slots(&two).unwrap();
        assert_eq!((map[0].first, map[0].addr), (0, addr(1)));
        assert!(settled(&map, &[addr(1), addr(2)], 16));
        assert!(
            !settled(&map, &[addr(1), addr(2), addr(3)], 16),
            "a node owns nothing yet"
        );
        // Three nodes of 16: the lowest id gets 6 partitions, the others 5.
        let three = |a: u16, b: u16| {
            let (a_end, b_end) = (a * 1024, (a + b) * 1024);
            let ranges = [
                (0, a_end - 1, 1, "a"),
                (a_end, b_end - 1, 2, "b"),
                (b_end, 16383, 3, "c"),
            ];
            parse_slots(&slots_reply(&ranges)).unwrap()
        };
        let nodes = [addr(1), addr(2), addr(3)];
        assert!(settled(&three(6, 5), &nodes, 16));
        // Balanced-looking, but "b" is over its share: it will give one up.
        assert!(!settled(&three(5, 6), &nodes, 16));
        // Three partitions that do not divide the slots: one each.
        let uneven = slots_reply(&[
            (0, 5460, 1, "a"),
            (5461, 10921, 2, "b"),
            (10922, 16383, 3, "c"),
        ]);
        assert!(settled(&parse_slots(&uneven).unwrap(), &nodes, 3));
        // A gap: not every slot is served.
        let gap = slots_reply(&[(0, 8190, 1, "a"), (8192, 16383, 2, "b")]);
        assert!(!settled(
            &parse_slots(&gap).unwrap(),
            &[addr(1), addr(2)],
            16
        ));
        assert_eq!(parse_slots(&Value::Simple("OK".into())), None);
    }
}
