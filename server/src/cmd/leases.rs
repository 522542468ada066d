//! HOLD, TRYHOLD, RELEASE and RENEW: a connection's leases.

use crate::parse::{milliseconds, syntax_error, Parse};
use crate::reply::{core_error, invalid_key, invalid_store, key_not_utf8};
use crate::session::{slot, LockOptions, PendingHold, Place, Session, Step};
use holdline::{wire, Lock};
use holdline_resp::Value;
use std::time::Duration;

/// `HOLD lock key [WAIT ms] [TTL ms] [MAXHOLD ms]`.
#[derive(Debug, PartialEq)]
pub struct Hold {
    lock: Vec<u8>,
    key: Vec<u8>,
    wait: Duration,
    options: LockOptions,
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
        let (lock, key) = match lock_and_key(s, &place, &self.lock, self.key, self.options) {
            Ok(v) => v,
            Err(refusal) => return Step::Reply(refusal),
        };
        let slot = slot(lock.name(), &key);
        if s.client.holds(&slot) {
            let what = "hold inside a hold of the same key";
            return Step::Reply(invalid_key(lock.name(), &key, what));
        }
        // The one place the server waits for a key: the core's async
        // acquire, in the same FIFO line as threads, left on drop.
        let wait = self.wait;
        let future =
            Box::pin(async move { lock.key(key.as_str()).wait(wait).acquire_async().await });
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
    options: LockOptions,
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
        let (lock, key) = match lock_and_key(s, &place, &self.lock, self.key, self.options) {
            Ok(v) => v,
            Err(refusal) => return refusal,
        };
        let slot = slot(lock.name(), &key);
        if s.client.holds(&slot) {
            // As in process: a try of a key its caller holds answers None.
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

fn not_ours(id: i64) -> Value {
    invalid_store(format!("lease {id} is not held by this connection"))
}

/// `[WAIT ms] [TTL ms] [MAXHOLD ms]`, any order, case-insensitive, each at
/// most once (a repeated option is a syntax error: which one was meant?).
fn options(p: &mut Parse, wait_allowed: bool) -> Result<(Option<Duration>, LockOptions), String> {
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
    Ok((wait, options))
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
