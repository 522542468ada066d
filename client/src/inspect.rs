//! One key's state on the server (`INSPECT lock key`): whether it is held,
//! its fence, how long it has been held and has left, its line, and which
//! connections hold it with how many permits each.

use crate::error::Error;
use crate::lock::{unexpected, Lock};
use holdline::wire::{self, Scope};
use holdline::IntoKey;
use holdline_resp::Value;
use std::time::Duration;

/// A snapshot of one key on the server, from [`Lock::inspect`]: the
/// embedded core's `KeyInfo`, plus who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyInfo {
    /// Whether the key has a holder (`holders > 0`).
    pub held: bool,
    /// While held, the highest fence among the current grants; while free,
    /// the last grant's. Every later grant's fence is greater.
    pub fence: u64,
    /// How long the longest-held current grant has been held (to the
    /// millisecond), when the server knows it; `None` when the key is free.
    pub held_for: Option<Duration>,
    /// How long that lease has left before it is revoked at its `maxHold`
    /// or runs out at its ttl, whichever comes first (renewals push the
    /// ttl back); `None` when the key is free or unknown.
    pub lease_left: Option<Duration>,
    /// How many wait in the key's line (the holders not counted).
    pub waiters: usize,
    /// How many leases hold the key (at most 1 for a lock of one permit).
    pub holders: u32,
    /// How many of the key's permits they hold in all.
    pub permits_held: u32,
    /// The oldest current holder, while the key is held.
    pub holder: Option<Holder>,
    /// Every current holder, the oldest grant first.
    pub holder_list: Vec<Holder>,
}

/// The connection that holds a key, as the server sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The connection's id (`CLIENT KILL ID <id>` closes it, and the key
    /// goes to the next in line).
    pub id: u64,
    /// Its `CLIENT SETNAME`, if it set one.
    pub name: Option<String>,
    /// Its address, `host:port`, as the server sees it.
    pub addr: String,
    /// The lease's id ([`Lease::id`](crate::Lease::id) on the holder's side).
    pub lease: i64,
    /// The lease's fence ([`Lease::fence`](crate::Lease::fence)).
    pub fence: u64,
    /// How many of the key's permits the lease holds
    /// ([`Lease::permits`](crate::Lease::permits)).
    pub permits: u32,
    /// The lease's note ([`KeyHold::note`](crate::KeyHold::note),
    /// [`HeldLease::set_note`](crate::HeldLease::set_note)); empty when
    /// it has none (or the server is older than notes).
    pub note: String,
}

impl Lock {
    /// `key`'s state on the server now; `None` when the key has no state
    /// (never used, or idle and already reclaimed: an idle key lingers
    /// about a second, answering `held: false`).
    pub async fn inspect<'k, K: IntoKey<'k>>(&self, key: K) -> Result<Option<KeyInfo>, Error> {
        let key = wire::key_text(key);
        let args = ["INSPECT", &*self.name, key.as_str()];
        let scope = Scope::Key(&self.name, &key);
        let reply = self.store.inner.keyed(&key, scope, &args).await?;
        match reply {
            Value::Null => Ok(None),
            reply => key_info(&reply)
                .map(Some)
                .ok_or_else(|| unexpected(Scope::Key(&self.name, &key), &reply)),
        }
    }
}

/// A map's pairs (a flat array of them from a RESP2 server).
fn pairs(v: &Value) -> Option<Vec<(&Value, &Value)>> {
    match v {
        Value::Map(pairs) => Some(pairs.iter().map(|(k, v)| (k, v)).collect()),
        Value::Array(flat) if flat.len() % 2 == 0 => {
            Some(flat.chunks(2).map(|kv| (&kv[0], &kv[1])).collect())
        }
        _ => None,
    }
}

/// `INSPECT`'s map; `None` if a field has the wrong shape. Fields this
/// client does not know (from a newer server) are skipped.
fn key_info(reply: &Value) -> Option<KeyInfo> {
    let mut info = KeyInfo {
        held: false,
        fence: 0,
        held_for: None,
        lease_left: None,
        waiters: 0,
        holders: 0,
        permits_held: 0,
        holder: None,
        holder_list: Vec::new(),
    };
    // A server without permits sends none of these three: see below.
    let (mut holders, mut permits_held, mut list) = (None, None, None);
    for (k, v) in pairs(reply)? {
        match k.as_str()? {
            "held" => info.held = boolean(v)?,
            "fence" => info.fence = u64::try_from(v.as_integer()?).ok()?,
            "held_for_ms" => info.held_for = millis(v)?,
            "lease_left_ms" => info.lease_left = millis(v)?,
            "waiters" => info.waiters = usize::try_from(v.as_integer()?).ok()?,
            "holders" => holders = Some(count(v)?),
            "permits_held" => permits_held = Some(count(v)?),
            "holder" => info.holder = holder(v)?,
            "holder_list" => list = Some(holder_list(v)?),
            _ => {}
        }
    }
    // A server of one permit per key: its one holder holds that permit,
    // under the key's fence.
    if let Some(h) = info.holder.as_mut().filter(|_| list.is_none()) {
        h.fence = info.fence;
        h.permits = 1;
    }
    let held = u32::from(info.held);
    info.holders = holders.unwrap_or(held);
    info.permits_held = permits_held.unwrap_or(held);
    info.holder_list = list.unwrap_or_else(|| info.holder.iter().cloned().collect());
    Some(info)
}

/// A non-negative integer that fits a `u32`.
fn count(v: &Value) -> Option<u32> {
    u32::try_from(v.as_integer()?).ok()
}

/// `holder_list`: an array of holder maps (no nulls).
fn holder_list(v: &Value) -> Option<Vec<Holder>> {
    let Value::Array(items) = v else { return None };
    items.iter().map(|item| holder(item)?).collect()
}

fn holder(v: &Value) -> Option<Option<Holder>> {
    if *v == Value::Null {
        return Some(None);
    }
    let mut holder = Holder {
        id: 0,
        name: None,
        addr: String::new(),
        lease: 0,
        fence: 0,
        permits: 1,
        note: String::new(),
    };
    for (k, v) in pairs(v)? {
        match k.as_str()? {
            "id" => holder.id = u64::try_from(v.as_integer()?).ok()?,
            "name" if *v == Value::Null => holder.name = None,
            "name" => holder.name = Some(String::from_utf8_lossy(v.as_bytes()?).into_owned()),
            "addr" => holder.addr = v.as_str()?.to_owned(),
            "lease" => holder.lease = v.as_integer()?,
            "fence" => holder.fence = u64::try_from(v.as_integer()?).ok()?,
            "permits" => holder.permits = count(v)?,
            "note" => holder.note = String::from_utf8_lossy(v.as_bytes()?).into_owned(),
            _ => {}
        }
    }
    Some(Some(holder))
}

/// `#t`/`#f` (RESP3), or `1`/`0` (RESP2).
fn boolean(v: &Value) -> Option<bool> {
    match v {
        Value::Boolean(b) => Some(*b),
        Value::Integer(0) => Some(false),
        Value::Integer(1) => Some(true),
        _ => None,
    }
}

/// Milliseconds, or null: `Some(None)`; a wrong shape: `None`.
fn millis(v: &Value) -> Option<Option<Duration>> {
    match v {
        Value::Null => Some(None),
        v => Some(Some(Duration::from_millis(
            u64::try_from(v.as_integer()?).ok()?,
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resp2_flat_array_reads_as_the_map() {
        let flat = Value::Array(vec![
            Value::bulk("held"),
            Value::Integer(1),
            Value::bulk("fence"),
            Value::Integer(7),
            Value::bulk("held_for_ms"),
            Value::Integer(12),
            Value::bulk("lease_left_ms"),
            Value::Null,
            Value::bulk("waiters"),
            Value::Integer(2),
            Value::bulk("newer_field"),
            Value::bulk("x"),
        ]);
        let info = key_info(&flat).unwrap();
        assert!(info.held);
        assert_eq!(info.fence, 7);
        assert_eq!(info.held_for, Some(Duration::from_millis(12)));
        assert_eq!(info.lease_left, None);
        assert_eq!(info.waiters, 2);
        assert_eq!(info.holder, None);
        // No permits fields (an older server): one holder of one permit.
        assert_eq!((info.holders, info.permits_held), (1, 1));
        assert!(info.holder_list.is_empty());
        let wrong = Value::Map(vec![(Value::bulk("fence"), Value::bulk("x"))]);
        assert!(key_info(&wrong).is_none());
        assert!(key_info(&Value::Integer(1)).is_none());
    }

    fn holder_map(lease: i64, fence: i64, permits: i64) -> Value {
        Value::Map(vec![
            (Value::bulk("id"), Value::Integer(lease + 100)),
            (Value::bulk("name"), Value::Null),
            (Value::bulk("addr"), Value::bulk("127.0.0.1:5000")),
            (Value::bulk("lease"), Value::Integer(lease)),
            (Value::bulk("fence"), Value::Integer(fence)),
            (Value::bulk("permits"), Value::Integer(permits)),
            (Value::bulk("note"), Value::bulk(format!("note {lease}"))),
        ])
    }

    #[test]
    fn the_holder_list_reads_every_holder() {
        let reply = Value::Map(vec![
            (Value::bulk("held"), Value::Boolean(true)),
            (Value::bulk("fence"), Value::Integer(9)),
            (Value::bulk("waiters"), Value::Integer(1)),
            (Value::bulk("holders"), Value::Integer(2)),
            (Value::bulk("permits_held"), Value::Integer(3)),
            (Value::bulk("holder"), holder_map(1, 8, 1)),
            (
                Value::bulk("holder_list"),
                Value::Array(vec![holder_map(1, 8, 1), holder_map(2, 9, 2)]),
            ),
        ]);
        let info = key_info(&reply).unwrap();
        assert_eq!((info.holders, info.permits_held), (2, 3));
        let seen: Vec<_> = info
            .holder_list
            .iter()
            .map(|h| (h.lease, h.fence, h.permits, h.id, h.note.as_str()))
            .collect();
        assert_eq!(seen, [(1, 8, 1, 101, "note 1"), (2, 9, 2, 102, "note 2")]);
        assert_eq!(info.holder.as_ref(), info.holder_list.first());
        let bad = Value::Map(vec![(Value::bulk("holder_list"), Value::Integer(1))]);
        assert!(key_info(&bad).is_none());
    }

    #[test]
    fn an_older_servers_holder_holds_one_permit_under_the_fence() {
        let old = Value::Map(vec![
            (Value::bulk("held"), Value::Boolean(true)),
            (Value::bulk("fence"), Value::Integer(4)),
            (
                Value::bulk("holder"),
                Value::Map(vec![(Value::bulk("lease"), Value::Integer(7))]),
            ),
        ]);
        let info = key_info(&old).unwrap();
        assert_eq!((info.holders, info.permits_held), (1, 1));
        let h = info.holder.clone().unwrap();
        assert_eq!((h.lease, h.fence, h.permits), (7, 4, 1));
        assert_eq!(info.holder_list, vec![h]);
    }
}
