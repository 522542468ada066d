//! PUT, GET and STATS: the store's fenced rows and a lock's counters.

use crate::cluster::slots::key_slot;
use crate::parse::{not_an_integer, Parse};
use crate::reply::{core_error, invalid_store, key_not_utf8};
use crate::session::{LockOptions, Place, Session};
use holdline_resp::Value;

/// Redis Cluster's answer when a command's keys are in different slots.
pub const CROSS_SLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// `PUT lock key fence row value`: the fenced write.
#[derive(Debug, PartialEq)]
pub struct Put {
    lock: Vec<u8>,
    key: Vec<u8>,
    fence: u64,
    row: Vec<u8>,
    value: Vec<u8>,
}

impl Put {
    pub fn parse(p: &mut Parse) -> Result<Put, String> {
        let (lock, key) = (p.next_bytes()?, p.next_bytes()?);
        let fence = u64::try_from(p.next_int()?).map_err(|_| not_an_integer())?;
        Ok(Put {
            lock,
            key,
            fence,
            row: p.next_bytes()?,
            value: p.next_bytes()?,
        })
    }

    /// `OK`, or `LOST ...` when a newer grant of the key exists than the
    /// fence shows.
    pub fn apply(self, s: &mut Session) -> Value {
        // As Redis Cluster: keys in two slots are refused before routing.
        if s.shared.cluster.is_some() && key_slot(&self.row) != key_slot(&self.key) {
            return Value::error(CROSS_SLOT);
        }
        let place = match s.place(&self.key) {
            Ok(p) => p,
            Err(redirect) => return redirect,
        };
        // In a cluster: past the node's deadline its leases are lost first.
        s.still_served(place.partition());
        let lock = match s.lock(&place, &self.lock, LockOptions::default()) {
            Ok(l) => l,
            Err(refusal) => return refusal,
        };
        let key = match String::from_utf8(self.key) {
            Ok(key) => key,
            Err(e) => return key_not_utf8(lock.name(), e.as_bytes()),
        };
        let Ok(row) = String::from_utf8(self.row) else {
            return invalid_store("a row name is UTF-8 text".into());
        };
        let (fence, value) = (self.fence, self.value);
        match place
            .store(&s.shared.store)
            .tx(|tx| tx.put_fenced(&lock, key.as_str(), fence, &row, value))
        {
            Ok(()) => Value::ok(),
            Err(e) => core_error(&e),
        }
    }
}

/// `GET row`: the row's value, or a null.
pub fn get(s: &Session, row: Vec<u8>) -> Value {
    let place = match s.place(&row) {
        Ok(p) => p,
        Err(redirect) => return redirect,
    };
    // No row has a name that is not UTF-8.
    let Ok(row) = String::from_utf8(row) else {
        return Value::Null;
    };
    match place
        .store(&s.shared.store)
        .tx(|tx| Ok(tx.get(&row).map(<[u8]>::to_vec)))
    {
        Ok(Some(v)) => Value::Bulk(v),
        Ok(None) => Value::Null,
        Err(e) => core_error(&e),
    }
}

/// `STATS lock`: the lock's counters, by the names the core gives them.
///
/// In a cluster, summed over the partitions this node serves.
pub fn stats(s: &mut Session, name: &[u8]) -> Value {
    let lock = match s.lock(&Place::Single, name, LockOptions::default()) {
        Ok(l) => l,
        Err(refusal) => return refusal,
    };
    let stats = match s.shared.cluster {
        Some(_) => s.shared.lock_stats(lock.name()),
        None => lock.stats(),
    };
    let count = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    Value::Map(
        stats
            .fields()
            .into_iter()
            .map(|(name, n)| (Value::bulk(name), count(n)))
            .collect(),
    )
}
