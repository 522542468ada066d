//! HOLD, TRYHOLD, RELEASE and RENEW: a connection's leases.

use crate::cluster::handover::{self, Orphan};
use crate::events::Kind;
use crate::parse::{Given, OptValue, Parse};
use crate::record::HeldKey;
use crate::reply::{invalid_key, invalid_store, key_not_utf8, ErrorReply, Reply};
use crate::session::{Handing, LockOptions, PendingHold, Place, Session, Step};
use holdline::{wire, ErrorKind, KeyHold, Lock};
use holdline_resp::Value;
use std::time::{Duration, Instant};

/// `HOLD lock key [WAIT ms] [TTL ms] [MAXHOLD ms] [PERMITS n] [TAKE m|ALL]
/// [NOTE text] [BYPASS ms]` (the options the command table lists for it).
#[derive(Debug, PartialEq)]
pub struct Hold {
    lock: Vec<u8>,
    key: Vec<u8>,
    wait: Duration,
    options: Options,
    note: Option<Vec<u8>>,
    secret: Option<Vec<u8>>,
}

impl Hold {
    pub fn parse(p: &mut Parse) -> Result<Hold, ErrorReply> {
        let (lock, key) = (p.next_bytes()?, p.next_bytes()?);
        let mut given = p.options()?;
        Ok(Hold {
            lock,
            key,
            wait: given.millis("WAIT").unwrap_or(wire::DEFAULT_WAIT),
            note: given.bytes("NOTE"),
            secret: given.bytes("SECRET"),
            options: Options::from(&mut given),
        })
    }

    /// Waits in the key's line (the connection polls the future); a key
    /// this connection holds is `invalid` at once: it would wait for itself.
    pub fn apply(self, s: &mut Session) -> Step {
        match self.join_line(s) {
            Ok(pending) => Step::Wait(pending),
            Err(refusal) => Step::Reply(Err(refusal)),
        }
    }

    fn join_line(self, s: &mut Session) -> Result<PendingHold, ErrorReply> {
        s.shared.refuse_if_draining()?;
        let place = s.place(&self.key)?;
        let options = self.options.for_session(s);
        let (lock, key) = lock_and_key(s, &place, &self.lock, self.key, options)?;
        let asked = (options, self.options.take);
        let (note, handed) = note_and_handing(&place, &lock, &key, asked, self.note, self.secret)?;
        let held_key = HeldKey::new(lock.name(), &key);
        if s.client.holds(&held_key) {
            let what = "hold inside a hold of the same key";
            return Err(invalid_key(lock.name(), &key, what));
        }
        within_max_ttl(s, &place, &lock, &key, options)?;
        // The one place the server waits for a key: the core's async
        // acquire, in the same FIFO line as threads, left on drop. A
        // partition just taken over first waits until it opens.
        // Only a partition still closed costs a timer: a zero sleep would
        // still wait for tokio's next millisecond tick.
        let opens = place
            .partition()
            .filter(|p| p.opens_later())
            .map(|p| p.opens);
        let (wait, take) = (self.wait, self.options.take);
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
            take.of(lock.key(key.as_str()).wait(wait))
                .acquire_async()
                .await
        });
        Ok(PendingHold {
            future,
            held_key,
            started: std::time::Instant::now(),
            wait: self.wait,
            partition: place.partition().cloned(),
            note,
            handed,
            filed: None,
        })
    }
}

/// `TRYHOLD lock key [TTL ms] [MAXHOLD ms] [PERMITS n] [TAKE m|ALL]
/// [NOTE text]`.
#[derive(Debug, PartialEq)]
pub struct TryHold {
    lock: Vec<u8>,
    key: Vec<u8>,
    options: Options,
    note: Option<Vec<u8>>,
    secret: Option<Vec<u8>>,
}

impl TryHold {
    pub fn parse(p: &mut Parse) -> Result<TryHold, ErrorReply> {
        let (lock, key) = (p.next_bytes()?, p.next_bytes()?);
        let mut given = p.options()?;
        Ok(TryHold {
            lock,
            key,
            note: given.bytes("NOTE"),
            secret: given.bytes("SECRET"),
            options: Options::from(&mut given),
        })
    }

    pub fn apply(self, s: &mut Session) -> Reply {
        s.shared.refuse_if_draining()?;
        let place = s.place(&self.key)?;
        let options = self.options.for_session(s);
        let (lock, key) = lock_and_key(s, &place, &self.lock, self.key, options)?;
        within_max_ttl(s, &place, &lock, &key, options)?;
        let asked = (options, self.options.take);
        let (note, handed) = note_and_handing(&place, &lock, &key, asked, self.note, self.secret)?;
        let held_key = HeldKey::new(lock.name(), &key);
        // As in process: a try of a key its caller holds answers None; so
        // does any key of a partition just taken over, until it opens (a
        // holder of its last owner may still think it holds the key).
        if s.client.holds(&held_key) || place.partition().is_some_and(|p| p.opens_later()) {
            return Ok(Value::Null);
        }
        match self.options.take.of(lock.key(key.as_str())).try_acquire()? {
            Some(lease) => s.keep(lease, held_key, place.partition().cloned(), note, handed),
            None => Ok(Value::Null),
        }
    }
}

/// `RELEASE lease`: `OK`, or the loss (once: the lease is forgotten).
pub fn release(s: &mut Session, id: i64) -> Reply {
    let Some((lease_id, held)) = u64::try_from(id)
        .ok()
        .and_then(|id| Some((id, s.leases.remove(&id)?)))
    else {
        return Err(not_ours(id));
    };
    // In a cluster: past the node's deadline the lease is lost first.
    s.still_served(held.partition.as_ref());
    s.let_go(&held);
    if let Some(moved) = Session::moved(&held) {
        s.losses.forget(lease_id);
        held.record.forget_signal();
        return Err(moved);
    }
    s.losses.forget(lease_id);
    if !held.ended {
        // Before the core lets the key go: see `tell_observers_end`.
        s.tell_observers_end(&held, || match held.lease.is_lost() {
            true => Kind::of_loss(held.lease.signal().reason()),
            false => Kind::Released,
        });
    }
    let event = s
        .event(&held, Kind::Released, None)
        .filter(|_| !held.ended)
        .map(|e| (e, held.lease.signal()));
    let released = held.lease.release();
    if let Some((mut event, signal)) = event {
        if released.is_err() {
            event.event = Kind::of_loss(signal.reason());
        }
        s.shared.history.record(event);
    }
    // Its observers were told: the record keeps none of the core's state.
    held.record.forget_signal();
    released?;
    Ok(Value::ok())
}

/// `RENEW lease`: `OK`, or the loss (every time).
pub fn renew(s: &mut Session, id: i64) -> Reply {
    match u64::try_from(id).ok().and_then(|id| s.leases.get(&id)) {
        None => return Err(not_ours(id)),
        Some(held) if Session::moved(held).is_some() => {
            return Err(Session::moved(held).expect("just seen"))
        }
        Some(held) if !s.still_served(held.partition.as_ref()) => held.lease.check()?,
        Some(held) => held.lease.renew()?,
    }
    Ok(Value::ok())
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
) -> Result<(), ErrorReply> {
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
    Err(ErrorReply::core(&wire::error(
        ErrorKind::Invalid,
        scope,
        what,
    )))
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

/// A HOLD's or TRYHOLD's note, and what a hand-over carries of it.
fn note_and_handing(
    place: &Place,
    lock: &Lock,
    key: &str,
    (options, take): (LockOptions, Take),
    note: Option<Vec<u8>>,
    secret: Option<Vec<u8>>,
) -> Result<(Box<str>, Option<Box<Handing>>), ErrorReply> {
    let note = note_text(lock.name(), key, note)?;
    let handed = handing(place, lock, key, options, take, &note, secret)?;
    Ok((note, handed))
}

/// What a hand-over carries of a HOLD or TRYHOLD (in a partition only:
/// a single server hands nothing over); its secret checked.
fn handing(
    place: &Place,
    lock: &Lock,
    key: &str,
    options: LockOptions,
    take: Take,
    note: &str,
    secret: Option<Vec<u8>>,
) -> Result<Option<Box<Handing>>, ErrorReply> {
    let secret = match secret {
        Some(s) if handover::secret_ok(&s) => Some(String::from_utf8_lossy(&s).into()),
        Some(_) => {
            let what = "a secret is 16 to 64 letters, digits, '-' or '_'";
            return Err(invalid_key(lock.name(), key, what));
        }
        None => None,
    };
    if place.partition().is_none() {
        return Ok(None);
    }
    let opened = handover::Opened {
        lock: lock.name().to_owned(),
        key: key.to_owned(),
        lock_permits: options.permits.unwrap_or(1),
        take: match take {
            Take::All => 0,
            Take::Permits(m) => m,
        },
        ttl_ms: options.ttl.as_millis() as u64,
        bypass_ms: options.bypass.map(|b| b.as_millis() as u64),
        note: note.to_owned(),
    };
    Ok(Some(Box::new(Handing {
        opened,
        max_hold: options.max_hold,
        secret,
        heartbeat: None,
        fence: None,
    })))
}

/// `REATTACH lock key secret`: a lease handed over from another node,
/// taken by its holder's secret (`[lease, fence]`, the fence it had), or
/// its place in line (waits as HOLD does).
#[derive(Debug, PartialEq)]
pub struct Reattach {
    lock: Vec<u8>,
    key: Vec<u8>,
    secret: Vec<u8>,
}

impl Reattach {
    pub fn parse(p: &mut Parse) -> Result<Reattach, ErrorReply> {
        Ok(Reattach {
            lock: p.next_bytes()?,
            key: p.next_bytes()?,
            secret: p.next_bytes()?,
        })
    }

    pub fn apply(self, s: &mut Session) -> Step {
        match self.take(s) {
            Ok(step) => step,
            Err(refusal) => Step::Reply(Err(refusal)),
        }
    }

    fn take(self, s: &mut Session) -> Result<Step, ErrorReply> {
        let place = s.place(&self.key)?;
        s.may_use(&self.lock)?;
        let lock = String::from_utf8_lossy(&self.lock).into_owned();
        let key = String::from_utf8(self.key).map_err(|e| key_not_utf8(&lock, e.as_bytes()))?;
        let secret = String::from_utf8_lossy(&self.secret);
        let orphan = place
            .partition()
            .and_then(|p| p.orphans.take(&secret, &lock, &key));
        let nothing = || {
            let scope = wire::Scope::Key(&lock, &key);
            let what = "nothing was handed over under its secret";
            ErrorReply::core(&wire::error(ErrorKind::Lost, scope, what))
        };
        let Some(orphan) = orphan else {
            return Err(nothing());
        };
        let held_key = HeldKey::new(&lock, &key);
        let partition = place.partition().cloned();
        let secret: Box<str> = secret.into();
        Ok(match orphan {
            // Never filed under a secret: only held while a store closes.
            Orphan::Held { .. } => return Err(nothing()),
            Orphan::Lease {
                lease,
                heartbeat,
                out,
            } => {
                let note = out.opened.note.clone().into_boxed_str();
                let handed = Handing {
                    max_hold: out.max_hold_left_ms.map(Duration::from_millis),
                    secret: Some(secret),
                    heartbeat: Some(heartbeat),
                    fence: Some(out.fence),
                    opened: out.opened,
                };
                let handed = Some(Box::new(handed));
                Step::Reply(s.keep(lease, held_key, partition, note, handed))
            }
            Orphan::Wait {
                future,
                heartbeat,
                out,
            } => Step::Wait(PendingHold {
                future,
                held_key,
                started: Instant::now(),
                wait: Duration::from_millis(out.wait_left_ms),
                partition,
                note: out.opened.note.clone().into_boxed_str(),
                handed: Some(Box::new(Handing {
                    max_hold: out.max_hold_ms.map(Duration::from_millis),
                    secret: Some(secret),
                    heartbeat: Some(heartbeat),
                    fence: None,
                    opened: out.opened,
                })),
                filed: None,
            }),
        })
    }
}

fn not_ours(id: i64) -> ErrorReply {
    invalid_store(format!("lease {id} is not held by this connection"))
}

impl Options {
    /// `TTL`, `MAXHOLD`, `PERMITS` and `TAKE`, as given. A TTL left out is
    /// the default, or in a cluster the cluster's max ttl if that is lower
    /// (marked by `ttl_given` being false).
    fn from(given: &mut Given) -> Options {
        let ttl = given.millis("TTL");
        let lock = LockOptions {
            ttl: ttl.unwrap_or(LockOptions::default().ttl),
            max_hold: given.millis("MAXHOLD"),
            // A HOLD names the count, 1 when it says none.
            permits: Some(given.count("PERMITS").unwrap_or(1)),
            bypass: given.millis("BYPASS"),
        };
        let take = match given.take("TAKE") {
            Some(OptValue::All) => Take::All,
            Some(OptValue::Count(m)) => Take::Permits(m),
            _ => Take::Permits(1),
        };
        Options {
            lock,
            ttl_given: ttl.is_some(),
            take,
        }
    }
}

/// Most bytes of a note.
const MAX_NOTE: usize = 1024;

/// A note's text: 1 to 1,024 bytes of UTF-8 without control characters
/// (none given: empty).
fn note_text(lock: &str, key: &str, note: Option<Vec<u8>>) -> Result<Box<str>, ErrorReply> {
    let Some(note) = note else {
        return Ok("".into());
    };
    match String::from_utf8(note) {
        Ok(text) if (1..=MAX_NOTE).contains(&text.len()) && !text.chars().any(char::is_control) => {
            Ok(text.into_boxed_str())
        }
        _ => Err(invalid_key(
            lock,
            key,
            "a note is 1 to 1024 bytes of UTF-8 without control characters",
        )),
    }
}

/// `NOTE lease text`: the lease's note replaced (`OK`), or its loss.
pub fn note(s: &mut Session, id: i64, text: Vec<u8>) -> Reply {
    let Some(held) = u64::try_from(id).ok().and_then(|id| s.leases.get(&id)) else {
        return Err(not_ours(id));
    };
    held.lease.check()?;
    let note = note_text(held.record.lock(), held.record.key(), Some(text))?;
    s.set_note(u64::try_from(id).expect("a lease id"), note);
    Ok(Value::ok())
}

/// A HOLD's or TRYHOLD's lock options, whether its TTL was given, and
/// what it takes of the key's permits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    lock: LockOptions,
    ttl_given: bool,
    take: Take,
}

/// `TAKE m` or `TAKE ALL`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Take {
    Permits(u32),
    All,
}

impl Take {
    /// `hold`, asking for these permits.
    fn of(self, hold: KeyHold<'_>) -> KeyHold<'_> {
        match self {
            Take::Permits(1) => hold,
            Take::Permits(m) => hold.permits(m),
            Take::All => hold.exclusive(),
        }
    }
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
) -> Result<(Lock, String), ErrorReply> {
    let lock = s.lock(place, name, options)?;
    let key = String::from_utf8(key).map_err(|e| key_not_utf8(lock.name(), e.as_bytes()))?;
    Ok((lock, key))
}
