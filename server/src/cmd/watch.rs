//! OBSERVE and UNOBSERVE: a connection told of every change of a key's
//! holders, by pushes (the `observers` module keeps who observes what).

use crate::observers::{Holding, Outbox, Watch, MAX_OBSERVED_KEYS};
use crate::record::HeldKey;
use crate::reply::{key_not_utf8, ErrorReply, Reply};
use crate::session::Session;
use holdline::{wire, ErrorKind, Lock};
use holdline_resp::{Proto, Value};
use std::sync::Arc;

/// The refusal on a RESP2 connection: pushes need RESP3.
const NEEDS_RESP3: &str = "OBSERVE needs RESP3: send HELLO 3 first";

/// `OBSERVE lock key`: `OK`, then the key's present state and every
/// change of its holders, pushed.
pub fn observe(s: &mut Session, lock: &[u8], key: Vec<u8>) -> Reply {
    if s.proto != Proto::Resp3 {
        return Err(ErrorReply::err(NEEDS_RESP3));
    }
    let (watch, known, name, key) = watch_of(s, lock, key)?;
    let outbox = s
        .outbox
        .get_or_insert_with(|| Arc::new(Outbox::new(s.client.clone())))
        .clone();
    let shared = s.shared.clone();
    let present = || present_state(&shared.clients, &watch, known.as_ref(), &key);
    if shared
        .observers
        .observe(watch.clone(), &outbox, present)
        .is_err()
    {
        let what = format!("a connection observes at most {MAX_OBSERVED_KEYS} keys");
        let scope = wire::Scope::Key(&name, &key);
        return Err(ErrorReply::core(&wire::error(
            ErrorKind::Limit,
            scope,
            what,
        )));
    }
    Ok(Value::ok())
}

/// `UNOBSERVE lock key`: `OK`; no more pushes for it (none were due when
/// the key was not observed).
pub fn unobserve(s: &mut Session, lock: &[u8], key: Vec<u8>) -> Reply {
    let (watch, ..) = watch_of(s, lock, key)?;
    if let Some(outbox) = &s.outbox {
        s.shared.observers.unobserve(&watch, outbox);
    }
    Ok(Value::ok())
}

/// HELLO 2: pushes cannot be read on RESP2, so nothing is observed more.
pub fn unobserve_all(s: &mut Session) {
    if let Some(outbox) = &s.outbox {
        s.shared.observers.forget(outbox);
    }
}

/// Where `lock`'s `key` is observed, the lock if its store knows it, and
/// the two as text; or the refusal (no right to the lock, MOVED, a key
/// that is no key).
fn watch_of(
    s: &mut Session,
    lock: &[u8],
    key: Vec<u8>,
) -> Result<(Watch, Option<Lock>, String, String), ErrorReply> {
    let place = s.place(&key)?;
    // A look makes no lock: that would fix its count of permits.
    let known = s.lock_if_known(&place, lock)?;
    let name = String::from_utf8_lossy(lock).into_owned();
    let key = String::from_utf8(key).map_err(|e| key_not_utf8(&name, e.as_bytes()))?;
    wire::check_key(&name, &key).map_err(|e| ErrorReply::core(&e))?;
    let store = place.partition().map_or(0, |p| p.store_id);
    Ok(((store, HeldKey::new(&name, &key)), known, name, key))
}

/// The key's holders now (from the connections' maps) and its last fence
/// (from the core: 0 for a key never held).
fn present_state(
    clients: &crate::clients::Clients,
    watch: &Watch,
    lock: Option<&Lock>,
    key: &str,
) -> (Vec<Holding>, u64) {
    let holders = clients
        .holders_of(&watch.1)
        .into_iter()
        .map(|(_, record)| record)
        .collect();
    let last_fence = lock
        .and_then(|l| l.inspect(key))
        .map_or(0, |info| info.fence);
    (holders, last_fence)
}
