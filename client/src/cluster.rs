//! What a cluster tells its clients: the slot map (`CLUSTER SLOTS`), and
//! the two answers that send a command elsewhere (`MOVED slot host:port`,
//! `CLUSTERDOWN ...`).

use crate::error::Error;
use crate::slot::SLOTS;
use holdline_resp::Value;
use std::sync::Arc;

/// The most `MOVED` answers one command follows; the next fails
/// `moved_loop`.
pub(crate) const MAX_REDIRECTS: u32 = 5;

/// The most `CLUSTERDOWN` answers one command takes: the last fails
/// `slot_unserved`.
pub(crate) const CLUSTER_DOWN_TRIES: u32 = 10;

/// The pause before a command that answered `CLUSTERDOWN` is sent again.
pub(crate) const CLUSTER_DOWN_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// How long one node has to answer `CLUSTER SLOTS` when the map is asked
/// for again, connecting included (the connect timeout, if shorter); then
/// the next node is asked, and this one is asked last from then on.
pub(crate) const MAP_REFRESH_NODE_TIMEOUT: std::time::Duration =
    std::time::Duration::from_millis(2000);

/// No node serves the slot.
const NONE: u16 = u16::MAX;

/// Which node serves each slot, as far as this client knows.
#[derive(Clone)]
pub(crate) struct SlotMap {
    /// The nodes' `host:port`, each once.
    nodes: Vec<Arc<str>>,
    /// Per slot, an index into `nodes`, or `NONE`.
    owner: Box<[u16]>,
}

impl SlotMap {
    /// A map in which no node serves any slot.
    pub(crate) fn empty() -> SlotMap {
        SlotMap {
            nodes: Vec::new(),
            owner: vec![NONE; usize::from(SLOTS)].into_boxed_slice(),
        }
    }

    /// The map a `CLUSTER SLOTS` reply gives: `[start, end, [host, port,
    /// id, ...], replicas...]` per served range (`asked_host` stands in for
    /// an empty host, as in Redis). `None` if the reply has another shape.
    pub(crate) fn from_reply(reply: &Value, asked_host: &str) -> Option<SlotMap> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut map = SlotMap::empty();
        for range in ranges {
            let Value::Array(items) = range else {
                return None;
            };
            let (start, end) = (slot_of(items.first()?)?, slot_of(items.get(1)?)?);
            let Value::Array(primary) = items.get(2)? else {
                return None;
            };
            let host = primary.first()?.as_str()?;
            let host = if host.is_empty() { asked_host } else { host };
            let port = u16::try_from(primary.get(1)?.as_integer()?).ok()?;
            let node = map.index_of(&node_addr(host, port));
            for slot in start..=end {
                map.owner[usize::from(slot)] = node;
            }
        }
        Some(map)
    }

    /// The node that serves `slot`, if one does.
    pub(crate) fn node(&self, slot: u16) -> Option<&Arc<str>> {
        match self.owner.get(usize::from(slot)) {
            Some(&i) if i != NONE => self.nodes.get(usize::from(i)),
            _ => None,
        }
    }

    /// Every node the map names, in the order first seen.
    pub(crate) fn nodes(&self) -> &[Arc<str>] {
        &self.nodes
    }

    /// Records that `node` serves `slot` (a `MOVED` answer said so).
    pub(crate) fn set(&mut self, slot: u16, node: &str) {
        if slot < SLOTS {
            self.owner[usize::from(slot)] = self.index_of(node);
        }
    }

    fn index_of(&mut self, node: &str) -> u16 {
        if let Some(i) = self.nodes.iter().position(|n| &**n == node) {
            return i as u16;
        }
        self.nodes.push(node.into());
        (self.nodes.len() - 1) as u16
    }
}

fn slot_of(v: &Value) -> Option<u16> {
    u16::try_from(v.as_integer()?).ok().filter(|&s| s < SLOTS)
}

/// `host:port` as a dialler takes it (an IPv6 host in brackets).
pub(crate) fn node_addr(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// An error reply that sends the command elsewhere.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// `MOVED slot host:port`: that node serves the slot.
    Moved(u16, String),
    /// `CLUSTERDOWN ...`: no node serves the slot right now.
    Down,
}

impl Redirect {
    /// What the server's error `e` says about routing, if anything.
    pub(crate) fn of(e: &Error) -> Option<Redirect> {
        if e.is_connection() {
            return None;
        }
        let text = e.to_string();
        let mut words = text.split(' ');
        match words.next()? {
            "CLUSTERDOWN" => Some(Redirect::Down),
            "MOVED" => {
                let slot = words.next()?.parse::<u16>().ok().filter(|&s| s < SLOTS)?;
                let (host, port) = words.next()?.rsplit_once(':')?;
                let port = port.parse::<u16>().ok()?;
                let host = host.trim_start_matches('[').trim_end_matches(']');
                Some(Redirect::Moved(slot, node_addr(host, port)))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: i64, end: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Integer(start),
            Value::Integer(end),
            Value::Array(vec![
                Value::bulk(host),
                Value::Integer(port),
                Value::bulk("a".repeat(40)),
            ]),
        ])
    }

    #[test]
    fn cluster_slots_reads_as_a_map() {
        let reply = Value::Array(vec![
            range(0, 5460, "127.0.0.1", 7001),
            range(5461, 10922, "127.0.0.1", 7002),
            range(12000, 16383, "::1", 7003),
            range(10923, 10923, "", 7001),
        ]);
        let map = SlotMap::from_reply(&reply, "10.0.0.9").unwrap();
        assert_eq!(map.node(0).map(|n| &**n), Some("127.0.0.1:7001"));
        assert_eq!(map.node(5460).map(|n| &**n), Some("127.0.0.1:7001"));
        assert_eq!(map.node(5461).map(|n| &**n), Some("127.0.0.1:7002"));
        assert_eq!(map.node(10923).map(|n| &**n), Some("10.0.0.9:7001"));
        assert_eq!(map.node(11000), None);
        assert_eq!(map.node(16383).map(|n| &**n), Some("[::1]:7003"));
        assert_eq!(map.node(SLOTS), None);
        assert_eq!(map.nodes().len(), 4);
        let mut map = map;
        map.set(11000, "127.0.0.1:7002");
        assert_eq!(map.node(11000).map(|n| &**n), Some("127.0.0.1:7002"));
        assert_eq!(map.nodes().len(), 4);
        assert!(SlotMap::from_reply(&Value::Array(vec![]), "h").is_some());
        for bad in [
            Value::error("ERR This instance has cluster support disabled"),
            Value::Array(vec![range(0, 16384, "h", 1)]),
            Value::Array(vec![range(0, 1, "h", 70000)]),
            Value::Array(vec![Value::Integer(1)]),
        ] {
            assert!(SlotMap::from_reply(&bad, "h").is_none(), "{bad}");
        }
    }

    #[test]
    fn moved_and_clusterdown_are_read_from_the_reply() {
        let moved = Error::from_reply("MOVED 12182 127.0.0.1:7002");
        assert_eq!(
            Redirect::of(&moved),
            Some(Redirect::Moved(12182, "127.0.0.1:7002".into()))
        );
        let v6 = Error::from_reply("MOVED 1 ::1:7002");
        assert_eq!(
            Redirect::of(&v6),
            Some(Redirect::Moved(1, "[::1]:7002".into()))
        );
        let down = Error::from_reply("CLUSTERDOWN Hash slot not served");
        assert_eq!(Redirect::of(&down), Some(Redirect::Down));
        for other in [
            "ERR nope",
            "MOVED",
            "MOVED x h:1",
            "MOVED 16384 h:1",
            "MOVED 1 h",
            "INUSE lock l: key \"MOVED 1 h:2\": held past the hold's wait: in use",
        ] {
            assert_eq!(Redirect::of(&Error::from_reply(other)), None, "{other}");
        }
    }
}
