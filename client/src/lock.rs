//! A named lock of a store: its options (`ttl`, `maxHold`, `permits`),
//! how it is opened (checked locally with the core's rules and texts: no round trip,
//! the server opens locks on first use), its counters, and fenced writes.
//! Holding its keys is the `hold` module's.

use crate::error::Error;
use crate::store::{clamp_ms, Store};
use holdline::wire::{self, Scope};
use holdline::{ErrorKind, Fairness, LockStats, MAX_PERMITS};
use holdline_resp::Value;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// A named lock of a [`Store`] with its `ttl`, `maxHold` and permits per
/// key: `Clone + Send + Sync`, cheap to clone.
#[derive(Clone)]
pub struct Lock {
    pub(crate) store: Store,
    pub(crate) name: Arc<str>,
    pub(crate) ttl_ms: u64,
    /// `TTL`'s argument, formatted once.
    pub(crate) ttl_arg: Arc<str>,
    /// `MAXHOLD`'s argument; `None`: off.
    pub(crate) max_hold_arg: Option<Arc<str>>,
    /// Permits per key (1: a keyed mutex).
    pub(crate) permits: u32,
    /// `PERMITS`'s argument; `None` for 1, which is never sent (servers
    /// without permits keep working for plain locks).
    pub(crate) permits_arg: Option<Arc<str>>,
    /// `BYPASS`'s argument (ms); `None`: FIFO, never sent.
    pub(crate) bypass_arg: Option<Arc<str>>,
}

impl Lock {
    pub(crate) fn new(
        store: Store,
        name: &str,
        ttl_ms: u64,
        max_hold_ms: u64,
        permits: u32,
    ) -> Lock {
        Lock {
            store,
            name: name.into(),
            ttl_ms,
            ttl_arg: ttl_ms.to_string().into(),
            max_hold_arg: (max_hold_ms > 0).then(|| max_hold_ms.to_string().into()),
            permits,
            permits_arg: (permits != 1).then(|| permits.to_string().into()),
            bypass_arg: None,
        }
    }

    /// The handle with its holds' waits served as `fairness` says: a
    /// bounded bypass is sent as `BYPASS ms` (whole ms, at least 1).
    fn with_fairness(mut self, fairness: Fairness) -> Lock {
        self.bypass_arg = match fairness {
            Fairness::Fifo => None,
            Fairness::BoundedBypass(d) => Some(clamp_ms(d).max(1).to_string().into()),
        };
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits each key of this lock has (1 unless opened with
    /// [`LockBuilder::permits`]).
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The lock's counters on the server (`STATS`). In a cluster, the
    /// sums of every node's of the map: a node that cannot be reached, or
    /// fails, fails the call with its error.
    pub async fn stats(&self) -> Result<LockStats, Error> {
        self.store.inner.check_open(Scope::Store)?;
        let mut total = LockStats::default();
        for node in self.store.inner.map_nodes().await? {
            let conn = node.checkout(Scope::Store).await?;
            let reply = conn.request(&["STATS", &self.name]).await;
            node.give_back(conn);
            add(&mut total, &self.read_stats(reply?)?);
        }
        Ok(total)
    }

    /// One node's `STATS` answer.
    fn read_stats(&self, reply: Value) -> Result<LockStats, Error> {
        let pairs: Vec<(Value, Value)> = match reply {
            Value::Map(pairs) => pairs,
            Value::Array(flat) => {
                let mut it = flat.into_iter();
                std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
            }
            other => return Err(unexpected(Scope::Lock(&self.name), &other)),
        };
        let mut stats = LockStats::default();
        for (k, v) in pairs {
            let n = u64::try_from(v.as_integer().unwrap_or(0)).unwrap_or(0);
            // Names this client does not know (a newer server's) are skipped.
            let _ = k.as_str().is_some_and(|name| stats.set_field(name, n));
        }
        Ok(stats)
    }
}

/// Adds `more`'s counters to `total`'s.
fn add(total: &mut LockStats, more: &LockStats) {
    total.live_keys = total.live_keys.saturating_add(more.live_keys);
    total.held_keys = total.held_keys.saturating_add(more.held_keys);
    total.waiters = total.waiters.saturating_add(more.waiters);
    total.grants = total.grants.saturating_add(more.grants);
    total.timeouts = total.timeouts.saturating_add(more.timeouts);
    total.revocations = total.revocations.saturating_add(more.revocations);
    total.expirations = total.expirations.saturating_add(more.expirations);
}

impl Store {
    /// Options for a lock of this store; `.open()` checks them locally (no
    /// round trip: the server opens locks on first use).
    pub fn lock(&self, name: &str) -> LockBuilder<'_> {
        LockBuilder {
            store: self,
            name: name.to_owned(),
            ttl: wire::DEFAULT_TTL,
            max_hold: None,
            permits: 1,
            fairness: Fairness::Fifo,
        }
    }

    /// A fenced write: `PUT lock key fence row value`. `lost` when a newer
    /// grant of the key exists than `fence` shows. In a cluster it goes to
    /// the node that serves `key`, and `row` must hash to the same slot
    /// (hash tags: key `{inv-7}`, row `{inv-7}:status`).
    pub async fn put_fenced(
        &self,
        lock: &Lock,
        key: &str,
        fence: u64,
        row: &str,
        value: &[u8],
    ) -> Result<(), Error> {
        let fence = fence.to_string();
        let args: [&[u8]; 6] = [
            b"PUT",
            lock.name().as_bytes(),
            key.as_bytes(),
            fence.as_bytes(),
            row.as_bytes(),
            value,
        ];
        let scope = Scope::Key(lock.name(), key);
        self.inner.keyed(key, scope, &args).await.map(drop)
    }
}

/// Options for opening a lock; from [`Store::lock`].
#[derive(Debug)]
#[must_use = "a LockBuilder does nothing until .open()"]
pub struct LockBuilder<'s> {
    store: &'s Store,
    name: String,
    ttl: Duration,
    max_hold: Option<Duration>,
    permits: u32,
    fairness: Fairness,
}

impl LockBuilder<'_> {
    /// How many permits each key has (default 1: a keyed mutex; 1 to
    /// 1,000,000, else `open()` fails `invalid`). A hold takes one unless
    /// it asks for more ([`KeyHold::permits`](crate::KeyHold::permits)) or
    /// for all ([`exclusive`](crate::KeyHold::exclusive)): a semaphore per
    /// key, or a read-write lock whose readers take one and writers all.
    /// The server fixes a lock's count at the first command naming it,
    /// until no key of it is held or waited for; a hold naming another
    /// count meanwhile fails `invalid`
    /// (`lock docs: opened with 1024 permits, not 8: invalid`).
    pub fn permits(mut self, permits: u32) -> Self {
        self.permits = permits;
        self
    }

    /// How long a lease lives past the last command its connection sent
    /// (default 10 s; at least 1 ms). The client renews every third of it.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The longest any lease of this handle may be held, from its grant,
    /// however it is renewed (default: off; at least 1 ms).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// How this handle's waiters are served: [`Fairness::Fifo`] (the
    /// default) or [`Fairness::BoundedBypass`], sent with each hold as
    /// `BYPASS ms`: while such a waiter is first in line and within its
    /// bound, a caller that comes later may take the key ahead of it (the
    /// guide's *Fairness*). A server without the option refuses it.
    pub fn fairness(mut self, fairness: Fairness) -> Self {
        self.fairness = fairness;
        self
    }

    /// Opens the lock (checked locally, with the core's texts): fails
    /// `closed` once the store is closed, and `invalid` for a bad name, a
    /// `ttl` or `max_hold` below 1 ms, or a count of permits outside 1 to
    /// 1,000,000.
    pub fn open(self) -> Result<Lock, Error> {
        self.store.inner.check_open(Scope::Lock(&self.name))?;
        wire::check_name(&self.name).map_err(|e| Error::from_core(&e))?;
        let ttl_ms = lease_ms(&self.name, self.ttl, "a ttl is at least 1ms")?;
        let max_hold_ms = match self.max_hold {
            Some(d) => lease_ms(&self.name, d, "a maxHold is at least 1ms")?,
            None => 0,
        };
        check_permits(&self.name, self.permits)?;
        Ok(Lock::new(
            self.store.clone(),
            &self.name,
            ttl_ms,
            max_hold_ms,
            self.permits,
        )
        .with_fairness(self.fairness))
    }
}

/// A ttl or maxHold in whole milliseconds: at least 1 ms, else `invalid`
/// with `what` (the core's "a ttl is at least 1ms").
fn lease_ms(lock: &str, d: Duration, what: &'static str) -> Result<u64, Error> {
    if d < Duration::from_millis(1) {
        Err(Error::local(ErrorKind::Invalid, Scope::Lock(lock), what))
    } else {
        Ok(clamp_ms(d))
    }
}

/// A lock's count of permits: 1 to [`MAX_PERMITS`], else `invalid` with
/// the core's (and the server's) text.
fn check_permits(lock: &str, permits: u32) -> Result<(), Error> {
    if (1..=MAX_PERMITS).contains(&permits) {
        return Ok(());
    }
    let what = format!("a lock has 1 to {MAX_PERMITS} permits, not {permits}");
    let kind = ErrorKind::Invalid;
    Err(Error::new(
        kind,
        wire::error(kind, Scope::Lock(lock), what).to_string(),
    ))
}

/// A reply of the wrong shape: the server is not holdline, or a newer one.
pub(crate) fn unexpected(scope: Scope<'_>, reply: &Value) -> Error {
    Error::connection(
        ErrorKind::Closed,
        scope,
        "the server's reply made no sense",
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected reply {reply}"),
        ),
    )
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("ttl_ms", &self.ttl_ms)
            .field("max_hold", &self.max_hold_arg)
            .field("permits", &self.permits)
            .field("bypass_ms", &self.bypass_arg)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same durations through the core, whose texts every client matches.
    #[test]
    fn lease_durations_fail_as_the_core_does() {
        let store = holdline::Store::new();
        let core = store.lock("l").ttl(Duration::ZERO).open().unwrap_err();
        let ours = lease_ms("l", Duration::ZERO, "a ttl is at least 1ms").unwrap_err();
        assert_eq!(ours.to_string(), core.to_string());
        let core = store
            .lock("l")
            .max_hold(Duration::from_micros(999))
            .open()
            .unwrap_err();
        let ours =
            lease_ms("l", Duration::from_micros(999), "a maxHold is at least 1ms").unwrap_err();
        assert_eq!(
            (ours.kind(), ours.to_string()),
            (core.kind(), core.to_string())
        );
        assert_eq!(lease_ms("l", Duration::from_millis(1), "x").unwrap(), 1);
    }

    /// A lock's count of permits, through the core: the same kind and text.
    #[test]
    fn permit_counts_fail_as_the_core_does() {
        let store = holdline::Store::new();
        for bad in [0, MAX_PERMITS + 1, u32::MAX] {
            let core = store.lock("p").permits(bad).open().unwrap_err();
            let ours = check_permits("p", bad).unwrap_err();
            assert_eq!(
                (ours.kind(), ours.to_string()),
                (core.kind(), core.to_string())
            );
        }
        assert_eq!(
            check_permits("providers", 0).unwrap_err().to_string(),
            "lock providers: a lock has 1 to 1000000 permits, not 0: invalid"
        );
        for good in [1, 5, MAX_PERMITS] {
            assert!(check_permits("p", good).is_ok());
        }
    }
}
