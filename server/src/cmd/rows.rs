//! PUT, GET, DEL and STATS: the store's fenced rows and a lock's counters.

use crate::cluster::slots::key_slot;
use crate::parse::{not_an_integer, Parse};
use crate::reply::{self, invalid_store, key_not_utf8, ErrorReply, Reply};
use crate::session::{LockOptions, Place, Session};
use holdline::wire::{self, Scope};
use holdline::ErrorKind;
use holdline_resp::Value;

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
    pub fn parse(p: &mut Parse) -> Result<Put, ErrorReply> {
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
    pub fn apply(self, s: &mut Session) -> Reply {
        // As Redis Cluster: keys in two slots are refused before routing.
        if s.shared.cluster.is_some() && key_slot(&self.row) != key_slot(&self.key) {
            return Err(reply::cross_slot());
        }
        let place = s.place(&self.key)?;
        // In a cluster: past the node's deadline its leases are lost first.
        s.still_served(place.partition());
        let lock = s.lock(&place, &self.lock, LockOptions::default())?;
        let key =
            String::from_utf8(self.key).map_err(|e| key_not_utf8(lock.name(), e.as_bytes()))?;
        let Ok(row) = String::from_utf8(self.row) else {
            return Err(invalid_store("a row name is UTF-8 text".into()));
        };
        // A lease handed over keeps its holder's fence: the store knows
        // its grant by one of its own.
        let fence = place.partition().map_or(self.fence, |p| {
            p.orphans.store_fence(lock.name(), &key, self.fence)
        });
        let value = self.value;
        let max = s.shared.limits.max_rows;
        place.store(&s.shared.store).tx(|tx| {
            let old = tx.get(&row).map_or(0, |v| row.len() + v.len());
            let bytes = tx.committed_bytes() - old + row.len() + value.len();
            if bytes > max {
                let what = format!("the rows would take {bytes} bytes, past --max-rows ({max})");
                return Err(wire::error(
                    ErrorKind::Limit,
                    Scope::Key(lock.name(), &key),
                    what,
                ));
            }
            tx.put_fenced(&lock, key.as_str(), fence, &row, value)
        })?;
        Ok(Value::ok())
    }
}

/// `GET row`: the row's value, or a null.
pub fn get(s: &Session, row: Vec<u8>) -> Reply {
    let place = s.place(&row)?;
    // No row has a name that is not UTF-8.
    let Ok(row) = String::from_utf8(row) else {
        return Ok(Value::Null);
    };
    // A row is read by those who may name the lock that guards it.
    let (guard, value) = place.store(&s.shared.store).tx(|tx| {
        let guard = tx.guard_of(&row).map(|(lock, _)| lock.to_owned());
        Ok((guard, tx.get(&row).map(<[u8]>::to_vec)))
    })?;
    if let Some(guard) = guard {
        s.may_use(guard.as_bytes())?;
    }
    Ok(value.map_or(Value::Null, Value::Bulk))
}

/// `DEL row [row ...]`'s rows.
pub fn del_args(p: &mut Parse) -> Result<Vec<Vec<u8>>, ErrorReply> {
    let mut rows = vec![p.next_bytes()?];
    rows.extend(p.rest());
    Ok(rows)
}

/// `DEL row [row ...]`: the count of rows deleted. Every row must be one
/// the user may read (its guarding lock one it may name: NOPERM
/// otherwise, and nothing is deleted); in a cluster, all in one slot.
pub fn del(s: &Session, rows: Vec<Vec<u8>>) -> Reply {
    if s.shared.cluster.is_some() && rows.iter().any(|r| key_slot(r) != key_slot(&rows[0])) {
        return Err(reply::cross_slot());
    }
    let place = s.place(&rows[0])?;
    // No row has a name that is not UTF-8.
    let rows: Vec<String> = rows
        .into_iter()
        .filter_map(|r| String::from_utf8(r).ok())
        .collect();
    let deleted = place.store(&s.shared.store).tx(|tx| {
        for row in &rows {
            if let Some((lock, _)) = tx.guard_of(row) {
                if let Err(refused) = s.may_use(lock.as_bytes()) {
                    return Ok(Err(refused));
                }
            }
        }
        let present: Vec<&String> = rows.iter().filter(|r| tx.get(r).is_some()).collect();
        for row in &present {
            tx.delete(row);
        }
        Ok(Ok(present.len()))
    });
    Ok(Value::Integer(deleted?? as i64))
}

/// `STATS lock`: the lock's counters, by the names the core gives them.
///
/// In a cluster, summed over the partitions this node serves.
pub fn stats(s: &mut Session, name: &[u8]) -> Reply {
    let lock = s.lock(&Place::Single, name, LockOptions::default())?;
    let stats = match s.shared.cluster {
        Some(_) => s.shared.lock_stats(lock.name()),
        None => lock.stats(),
    };
    let count = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    Ok(Value::Map(
        stats
            .fields()
            .into_iter()
            .map(|(name, n)| (Value::bulk(name), count(n)))
            .collect(),
    ))
}
