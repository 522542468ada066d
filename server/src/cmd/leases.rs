//! HOLD, TRYHOLD, RELEASE and RENEW: a connection's leases.

use crate::parse::{milliseconds, syntax_error, Parse};
use crate::reply::{core_error, invalid_key, invalid_store, key_not_utf8};
use crate::session::{slot, LockOptions, PendingHold, Place, Session, Step};
use holdline::{wire, ErrorKind, Lock};
use holdline_resp::Value;
use std::time::{Duration, Instant};

/// `HOLD lock key [WAIT ms] [TTL ms] [MAXHOLD ms]`.
#[derive(Debug, PartialEq)]
pub struct Hold {
    lock: Vec<u8>,
    key: Vec<u8>,
    wait: Duration,
    options: Options,
}

impl Hold {
    pub fn parse(p: &mut Parse) -> Result<Hold, String> {
        let (lock, key) = (p.next_bytes()?, p.next_bytes()?);
        let (wait, options) = options(p, true)?;
        Ok(Hold {
            lock,
            key,
            wait: wait.unwrap_or(wire::DEFAULT_WAIT),
            options,
        })
    }

    /// Waits in the key's line (the connection polls the future); a key
    /// this connection holds is `invalid` at once: it would wait for itself.
    pub fn apply(self, s: &mut Session) -> Step {
        let place = match s.place(&self.key) {
            Ok(p) => p,
            Err(redirect) => return Step::Reply(redirect),
        };
        let options = self.options.for_session(s);
        let (lock, key) = match lock_and_key(s, &place, &self.lock, self.key, options) {
            Ok(v) => v,
            Err(refusal) => return Step::Reply(refusal),
        };
        let slot = slot(lock.name(), &key);
        if s.client.holds(&slot) {
            let what = "hold inside a hold of the same key";
            return Step::Reply(invalid_key(lock.name(), &key, what));
        }
        if let Err(refusal) = within_max_ttl(s, &place, &lock, &key, options) {
            return Step::Reply(refusal);
        }
        // The one place the server waits for a key: the core's async
        // acquire, in the same FIFO line as threads, left on drop. A
        // partition just taken over first waits until it opens.
        // Only a partition still closed costs a timer: a zero sleep would
        // still wait for tokio's next millisecond tick.
        let opens = place
            .partition()
            .filter(|p| p.opens_later())
            .map(|p| p.opens);
        let wait = self.wait;
        let future = Box::pin(async move {
            let wait = match opens.map(|o| until_open(o, wait)) {
                Some(Err(wait)) => {
                    tokio::time::sleep(wait).await;
                    let what = "held past the hold's wait";
                    let scope = wire::Scope::Key(lock.name(), &key);
                    return Err(wire::error(ErrorKind::InUse, scope, what));
                }
                Some(Ok((gap, left))) => {
                    if !gap.is_zero() {
                        tokio::time::sleep(gap).await;
                    }
                    left
                }
                None => wait,
            };
            lock.key(key.as_str()).wait(wait).acquire_async().await
        });
        Step::Wait(PendingHold {
            future,
            slot,
            started: std::time::Instant::now(),
            partition: place.partition().cloned(),
        })
    }
}

/// `TRYHOLD lock key [TTL ms] [MAXHOLD ms]`.
#[derive(Debug, PartialEq)]
pub struct TryHold {
    lock: Vec<u8>,
    key: Vec<u8>,
    options: Options,
}

impl TryHold {
    pub fn parse(p: &mut Parse) -> Result<TryHold, String> {
        let (lock, key) = (p.next_bytes()?, p.next_bytes()?);
        let (_, options) = options(p, false)?;
        Ok(TryHold { lock, key, options })
    }

    pub fn apply(self, s: &mut Session) -> Value {
        let place = match s.place(&self.key) {
            Ok(p) => p,
            Err(redirect) => return redirect,
        };
        let options = self.options.for_session(s);
        let (lock, key) = match lock_and_key(s, &place, &self.lock, self.key, options) {
            Ok(v) => v,
            Err(refusal) => return refusal,
        };
        if let Err(refusal) = within_max_ttl(s, &place, &lock, &key, options) {
            return refusal;
        }
        let slot = slot(lock.name(), &key);
        // As in process: a try of a key its caller holds answers None; so
        // does any key of a partition just taken over, until it opens (a
        // holder of its last owner may still think it holds the key).
        if s.client.holds(&slot) || place.partition().is_some_and(|p| p.opens_later()) {
            return Value::Null;
        }
        match lock.key(key.as_str()).try_acquire() {
            Ok(Some(lease)) => s.keep(lease, slot, place.partition().cloned()),
            Ok(None) => Value::Null,
            Err(e) => core_error(&e),
        }
    }
}

/// `RELEASE lease`: `OK`, or the loss (once: the lease is forgotten).
pub fn release(s: &mut Session, id: i64) -> Value {
    let Some((lease_id, held)) = u64::try_from(id)
        .ok()
        .and_then(|id| Some((id, s.leases.remove(&id)?)))
    else {
        return not_ours(id);
    };
    // In a cluster: past the node's deadline the lease is lost first.
    s.still_served(held.partition.as_ref());
    s.let_go(&held);
    s.losses.forget(lease_id);
    match held.lease.release() {
        Ok(()) => Value::ok(),
        Err(e) => core_error(&e),
    }
}

/// `RENEW lease`: `OK`, or the loss (every time).
pub fn renew(s: &mut Session, id: i64) -> Value {
    match u64::try_from(id).ok().and_then(|id| s.leases.get(&id)) {
        None => not_ours(id),
        Some(held) if !s.still_served(held.partition.as_ref()) => held
            .lease
            .check()
            .err()
            .map_or_else(Value::ok, |e| core_error(&e)),
        Some(held) => match held.lease.renew() {
            Ok(()) => Value::ok(),
            Err(e) => core_error(&e),
        },
    }
}

/// A lease may not ask for a ttl or maxHold above the server's max ttl
/// (`--max-ttl`, an hour by default); in a cluster, nor for a ttl above
/// the cluster's (a partition taken over waits that long before granting).
fn within_max_ttl(
    s: &Session,
    place: &Place,
    lock: &Lock,
    key: &str,
    options: LockOptions,
) -> Result<(), Value> {
    let server = s.shared.limits.max_ttl;
    let cluster = match (&s.shared.cluster, place.partition()) {
        (Some(node), Some(_)) => Some(node.max_ttl),
        _ => None,
    };
    let over = match (cluster, options.max_hold) {
        (Some(max), _) if options.ttl > max => Some(("ttl", options.ttl, "the cluster's", max)),
        (None, _) if options.ttl > server => Some(("ttl", options.ttl, "the server's", server)),
        (_, Some(held)) if held > server => Some(("maxHold", held, "the server's", server)),
        _ => None,
    };
    let Some((what, asked, whose, max)) = over else {
        return Ok(());
    };
    let what = format!(
        "{what} {} is above {whose} max ttl ({})",
        wire::duration_text(asked),
        wire::duration_text(max)
    );
    let scope = wire::Scope::Key(lock.name(), key);
    Err(core_error(&wire::error(ErrorKind::Invalid, scope, what)))
}

/// How long a HOLD waiting `wait` sleeps before a partition opening at
/// `opens` lets it into the line, and the wait left then; `Err(wait)`
/// when it would not open within the wait.
fn until_open(opens: Instant, wait: Duration) -> Result<(Duration, Duration), Duration> {
    let gap = opens.saturating_duration_since(Instant::now());
    if gap.is_zero() {
        Ok((gap, wait))
    } else if gap >= wait {
        Err(wait)
    } else {
        Ok((gap, wait - gap))
    }
}

fn not_ours(id: i64) -> Value {
    invalid_store(format!("lease {id} is not held by this connection"))
}

/// `[WAIT ms] [TTL ms] [MAXHOLD ms]`, any order, case-insensitive, each at
/// most once (a repeated option is a syntax error: which one was meant?).
///
/// A TTL left out is the default, or in a cluster the cluster's max ttl if
/// that is lower (marked by `LockOptions::ttl_given` being false).
fn options(p: &mut Parse, wait_allowed: bool) -> Result<(Option<Duration>, Options), String> {
    let (mut wait, mut ttl, mut max_hold) = (None, None, None);
    while let Some(word) = p.next_if_any() {
        // An option word without its value is a syntax error, as in Redis.
        let value = p.next_if_any().ok_or_else(syntax_error)?;
        let ms = milliseconds(&value)?;
        let option = match word.to_ascii_uppercase().as_slice() {
            b"WAIT" if wait_allowed => &mut wait,
            b"TTL" => &mut ttl,
            b"MAXHOLD" => &mut max_hold,
            _ => return Err(syntax_error()),
        };
        if option.replace(ms).is_some() {
            return Err(syntax_error());
        }
    }
    let mut options = LockOptions::default();
    if let Some(ttl) = ttl {
        options.ttl = ttl;
    }
    options.max_hold = max_hold;
    Ok((
        wait,
        Options {
            lock: options,
            ttl_given: ttl.is_some(),
        },
    ))
}

/// A HOLD's or TRYHOLD's lock options, and whether its TTL was given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    lock: LockOptions,
    ttl_given: bool,
}

impl Options {
    /// The options to open the lock with on this server.
    fn for_session(self, s: &Session) -> LockOptions {
        let mut lock = self.lock;
        if let (Some(node), false) = (&s.shared.cluster, self.ttl_given) {
            lock.ttl = lock.ttl.min(node.max_ttl);
        }
        lock
    }
}

/// The lock and the key as text, or the refusal to answer.
fn lock_and_key(
    s: &mut Session,
    place: &Place,
    name: &[u8],
    key: Vec<u8>,
    options: LockOptions,
) -> Result<(Lock, String), Value> {
    let lock = s.lock(place, name, options)?;
    let key = String::from_utf8(key).map_err(|e| key_not_utf8(lock.name(), e.as_bytes()))?;
    Ok((lock, key))
}
