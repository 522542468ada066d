//! A planned hand-over's two halves (the argument is in the module doc of
//! `cluster`).
//!
//! On the old owner, each partition keeps a [`Registry`] of what its
//! clients may believe: every lease answered to a client, and every HOLD
//! waiting with a secret. Sessions file into it before they answer a grant,
//! and it is [sealed](Registry::seal) once, under its lock, just before the
//! partition's store closes: from then on nothing is filed, so every grant
//! a client was told of is in the [`Export`] or was refused.
//!
//! On the new owner, an imported export becomes [`Orphans`]: each lease
//! held again in the new store (its fence as the client knows it kept
//! beside the new store's own), each wait back in its key's line in the
//! order it had, until its holder re-attaches with its secret or its time
//! runs out.
//!
//! The export travels through etcd in chunks of at most [`CHUNK`] bytes
//! (etcd refuses requests above 1.5 MiB by default), one JSON line per
//! lease or wait.

use holdline::{Error, Heartbeat, HeldLease, Signal, Store};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Most bytes of one chunk of an export in etcd.
pub const CHUNK: usize = 1 << 20;

/// A secret's shortest and longest length.
pub const SECRET_LEN: std::ops::RangeInclusive<usize> = 16..=64;

/// Whether `secret` is 16 to 64 letters, digits, `-` or `_`.
pub fn secret_ok(secret: &[u8]) -> bool {
    SECRET_LEN.contains(&secret.len())
        && secret
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
}

/// A HOLD waiting in a key's line (the server's async acquire).
pub type HoldFuture = Pin<Box<dyn Future<Output = Result<HeldLease, Error>> + Send>>;

/// How a lease or a wait opens its lock: what its HOLD said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Opened {
    pub lock: String,
    pub key: String,
    /// The lock's permits per key.
    pub lock_permits: u32,
    /// Permits taken (0: all of them, `TAKE ALL`).
    pub take: u32,
    pub ttl_ms: u64,
    pub bypass_ms: Option<u64>,
    pub note: String,
}

/// One lease, as exported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseOut {
    pub opened: Opened,
    /// The fence its holder knows.
    pub fence: u64,
    /// Its maxHold left when the partition was sealed.
    pub max_hold_left_ms: Option<u64>,
    /// Without one, nobody can re-attach: the lease is held for its ttl
    /// (its holder may believe that long), then let go.
    pub secret: Option<String>,
}

/// One waiting HOLD, as exported (only those with a secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitOut {
    pub opened: Opened,
    pub max_hold_ms: Option<u64>,
    /// Its wait left when the partition was sealed.
    pub wait_left_ms: u64,
    pub secret: String,
}

/// One line of an export.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Line {
    #[serde(rename = "l")]
    Lease(LeaseOut),
    #[serde(rename = "w")]
    Wait(WaitOut),
}

/// A sealed partition's leases, and its waits in line order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Export {
    pub leases: Vec<LeaseOut>,
    pub waits: Vec<WaitOut>,
}

impl Export {
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty() && self.waits.is_empty()
    }

    /// The export as chunks of whole lines, each at most [`CHUNK`] bytes
    /// (a line is far shorter: a key, a lock name and a note are bounded).
    pub fn chunks(&self) -> Vec<String> {
        let lines = self
            .leases
            .iter()
            .cloned()
            .map(Line::Lease)
            .chain(self.waits.iter().cloned().map(Line::Wait));
        let mut chunks = vec![String::new()];
        for line in lines {
            let text = serde_json::to_string(&line).expect("plain data serializes");
            let last = chunks.last_mut().expect("never empty");
            if !last.is_empty() && last.len() + text.len() + 1 > CHUNK {
                chunks.push(String::new());
            }
            let last = chunks.last_mut().expect("never empty");
            last.push_str(&text);
            last.push('\n');
        }
        chunks
    }

    /// The export the chunks hold, in order; `None` if one is unreadable.
    pub fn from_chunks<'a>(chunks: impl IntoIterator<Item = &'a str>) -> Option<Export> {
        let mut export = Export::default();
        for line in chunks.into_iter().flat_map(str::lines) {
            match serde_json::from_str(line).ok()? {
                Line::Lease(l) => export.leases.push(l),
                Line::Wait(w) => export.waits.push(w),
            }
        }
        Some(export)
    }
}

/// A lease filed in the registry.
pub struct Filed {
    pub opened: Opened,
    pub fence: u64,
    pub secret: Option<String>,
    pub granted: Instant,
    pub max_hold: Option<Duration>,
    /// Read at the seal: a lease lost before it is not exported.
    pub signal: Signal,
}

/// A waiting HOLD filed in the registry.
pub struct FiledWait {
    pub opened: Opened,
    pub max_hold: Option<Duration>,
    /// When its wait ends.
    pub until: Instant,
    pub secret: String,
}

#[derive(Default)]
struct RegistryState {
    /// The node the partition was handed to, once sealed.
    sealed: Option<Arc<str>>,
    leases: HashMap<u64, Filed>,
    waits: BTreeMap<u64, FiledWait>,
    next_wait: u64,
    /// The waits the seal exported: their number, their key's slot.
    exported: Vec<(u64, u16)>,
}

/// What the clients of one partition may believe, on its owner.
#[derive(Default)]
pub struct Registry {
    state: Mutex<RegistryState>,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, RegistryState> {
        // Nothing panics under it; a poisoned registry is still whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Files lease `id` before its grant is answered; `false` once sealed
    /// (the grant must then not be answered).
    pub fn admit(&self, id: u64, filed: Filed) -> bool {
        let mut state = self.lock();
        if state.sealed.is_some() {
            return false;
        }
        state.leases.insert(id, filed);
        true
    }

    /// Lease `id` ended (released, lost, or its connection closed).
    pub fn forget(&self, id: u64) {
        self.lock().leases.remove(&id);
    }

    /// Files a HOLD that waits with a secret; its number, `None` once sealed.
    pub fn wait(&self, filed: FiledWait) -> Option<u64> {
        let mut state = self.lock();
        if state.sealed.is_some() {
            return None;
        }
        let n = state.next_wait;
        state.next_wait += 1;
        state.waits.insert(n, filed);
        Some(n)
    }

    /// Wait `n` ended (granted, failed, or its connection closed).
    pub fn wait_ended(&self, n: u64) {
        self.lock().waits.remove(&n);
    }

    /// Where the partition went, once sealed.
    pub fn sealed(&self) -> Option<Arc<str>> {
        self.lock().sealed.clone()
    }

    /// The slot of wait `n`'s key, if the seal exported it.
    pub fn exported_wait_slot(&self, n: u64) -> Option<u16> {
        let state = self.lock();
        state
            .exported
            .iter()
            .find(|(m, _)| *m == n)
            .map(|(_, slot)| *slot)
    }

    /// Seals the registry (nothing is filed after) and answers what it
    /// holds: the leases not lost, and the waits in the order they came,
    /// with what each has left now. `run` (the store's close) runs under
    /// the registry's lock, so no grant is filed between the two.
    pub fn seal<R>(&self, to: &str, run: impl FnOnce() -> R) -> (Export, R) {
        let mut state = self.lock();
        state.sealed = Some(Arc::from(to));
        let now = Instant::now();
        let leases = state
            .leases
            .values()
            .filter(|f| !f.signal.is_aborted())
            .map(|f| LeaseOut {
                opened: f.opened.clone(),
                fence: f.fence,
                max_hold_left_ms: f
                    .max_hold
                    .map(|m| millis((f.granted + m).saturating_duration_since(now))),
                secret: f.secret.clone(),
            })
            .collect();
        let exported: Vec<(u64, WaitOut)> = state
            .waits
            .iter()
            .filter(|(_, w)| w.until > now)
            .map(|(&n, w)| {
                let out = WaitOut {
                    opened: w.opened.clone(),
                    max_hold_ms: w.max_hold.map(millis),
                    wait_left_ms: millis(w.until - now),
                    secret: w.secret.clone(),
                };
                (n, out)
            })
            .collect();
        state.exported = exported
            .iter()
            .map(|(n, w)| (*n, super::slots::key_slot(w.opened.key.as_bytes())))
            .collect();
        let waits = exported.into_iter().map(|(_, w)| w).collect();
        let ran = run();
        (Export { leases, waits }, ran)
    }
}

/// Whole milliseconds, rounded down (a time left is never overstated).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// An imported lease or wait, until its holder re-attaches.
pub enum Orphan {
    Lease {
        lease: HeldLease,
        /// Beaten by nobody until a connection adopts it.
        heartbeat: Heartbeat,
        out: LeaseOut,
    },
    Wait {
        future: HoldFuture,
        heartbeat: Heartbeat,
        out: WaitOut,
    },
    /// A wait granted as it was exported on: held until its store closes.
    Held { _lease: HeldLease },
}

impl Orphan {
    /// How it opened its lock (`None`: nobody takes it any more).
    pub fn opened(&self) -> Option<&Opened> {
        match self {
            Orphan::Lease { out, .. } => Some(&out.opened),
            Orphan::Wait { out, .. } => Some(&out.opened),
            Orphan::Held { .. } => None,
        }
    }
}

struct Kept {
    orphan: Orphan,
    /// When it is let go if nobody re-attached.
    until: Instant,
    /// When it was imported (its maxHold and wait left count from then).
    imported: Instant,
    /// A wait's place among the waits imported with it.
    order: usize,
}

/// A partition's imported leases and waits, by secret.
#[derive(Default)]
pub struct Orphans {
    state: Mutex<HashMap<String, Kept>>,
    /// Leases imported without a secret: held until their time, then let go.
    anonymous: Mutex<Vec<(Instant, HeldLease, LeaseOut)>>,
    /// Each imported lease's fence as its holder knows it, by lock, key
    /// and the store's own fence of that grant: a fenced write names the
    /// one, the store checks the other. Kept while the store lives (a
    /// later grant of the key has a greater fence of the store's, so an
    /// old entry matches nothing current).
    fences: Mutex<HashMap<(String, String, u64), u64>>,
}

impl Orphans {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Kept>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The orphan under `secret` for `lock`'s `key`, taken (once).
    pub fn take(&self, secret: &str, lock: &str, key: &str) -> Option<Orphan> {
        let mut state = self.lock();
        let kept = state.get(secret)?;
        let opened = kept.orphan.opened()?;
        if opened.lock != lock || opened.key != key {
            return None;
        }
        state.remove(secret).map(|k| k.orphan)
    }

    /// The store's fence of the imported grant of `lock`'s `key` that its
    /// holder knows as `fence`; `fence` itself if none.
    pub fn store_fence(&self, lock: &str, key: &str, fence: u64) -> u64 {
        let fences = self.fences.lock().unwrap_or_else(PoisonError::into_inner);
        if fences.is_empty() {
            return fence;
        }
        let found = fences
            .iter()
            .find(|((l, k, _), f)| l == lock && k == key && **f == fence);
        found.map_or(fence, |((_, _, store), _)| *store)
    }

    /// The fence the holder of the store's grant `store` of `lock`'s `key`
    /// knows: the imported one, if that grant was imported.
    pub fn holder_fence(&self, lock: &str, key: &str, store: u64) -> u64 {
        let fences = self.fences.lock().unwrap_or_else(PoisonError::into_inner);
        let k = (lock.to_owned(), key.to_owned(), store);
        fences.get(&k).copied().unwrap_or(store)
    }

    /// Lets go of what ran out by `now` (dropped outside the lock: a
    /// release hands keys on); answers when the next one runs out.
    pub fn reap(&self, now: Instant) -> Option<Instant> {
        let mut gone = Vec::new();
        let next_named = {
            let mut state = self.lock();
            let ended: Vec<String> = state
                .iter()
                .filter(|(_, k)| k.until <= now)
                .map(|(s, _)| s.clone())
                .collect();
            for secret in ended {
                gone.extend(state.remove(&secret));
            }
            state.values().map(|k| k.until).min()
        };
        let mut anonymous = self
            .anonymous
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (ended, kept): (Vec<_>, Vec<_>) = anonymous.drain(..).partition(|(t, ..)| *t <= now);
        *anonymous = kept;
        let next_anonymous = anonymous.iter().map(|(t, ..)| *t).min();
        drop(anonymous);
        drop(gone);
        drop(ended);
        next_named.into_iter().chain(next_anonymous).min()
    }

    /// Imports `export` into `store` (which serves nothing yet): each lease
    /// held again, each wait back in line in order. Answers what could not
    /// be imported (a lease whose key is taken: never in a fresh store).
    pub fn import(&self, store: &Store, export: Export) -> Vec<String> {
        let now = Instant::now();
        let mut failed = Vec::new();
        for out in export.leases {
            match import_lease(store, &out) {
                Ok((lease, heartbeat)) => {
                    let o = &out.opened;
                    let k = (o.lock.clone(), o.key.clone(), lease.fence());
                    self.fences
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(k, out.fence);
                    let until = now + Duration::from_millis(out.opened.ttl_ms);
                    match out.secret.clone() {
                        Some(secret) => {
                            let orphan = Orphan::Lease {
                                lease,
                                heartbeat,
                                out,
                            };
                            self.keep(secret, orphan, (now, until), 0);
                        }
                        None => self
                            .anonymous
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push((until, lease, out)),
                    }
                }
                Err(why) => failed.push(why),
            }
        }
        for (order, out) in export.waits.into_iter().enumerate() {
            match import_wait(store, &out) {
                Ok((future, heartbeat)) => {
                    let left = out.wait_left_ms.min(out.opened.ttl_ms);
                    let until = now + Duration::from_millis(left);
                    let secret = out.secret.clone();
                    let orphan = Orphan::Wait {
                        future,
                        heartbeat,
                        out,
                    };
                    self.keep(secret, orphan, (now, until), order);
                }
                Err(why) => failed.push(why),
            }
        }
        failed
    }

    /// Files `orphan` under `secret`: imported at `times.0`, kept until
    /// `times.1`, `order`-th of the waits imported with it.
    fn keep(&self, secret: String, orphan: Orphan, times: (Instant, Instant), order: usize) {
        let (imported, until) = times;
        let kept = Kept {
            orphan,
            until,
            imported,
            order,
        };
        self.lock().insert(secret, kept);
    }

    /// What is still imported and not re-attached, as an export of its
    /// own (the store closes next: a partition handed on again before its
    /// holders came back carries them on). Waits come in the order they
    /// had, before any wait that joined here. The leases and waits stay
    /// held in the store until the caller drops what is answered beside
    /// the export, after the store closed: letting one go first would hand
    /// its key on to a wait already exported.
    pub fn export(&self, now: Instant) -> (Export, Vec<Orphan>, Vec<HeldLease>) {
        let mut export = Export::default();
        let mut remains = Vec::new();
        let mut kept: Vec<(String, Kept)> = self.lock().drain().collect();
        kept.sort_by_key(|(_, k)| k.order);
        for (secret, mut k) in kept {
            let spent = now.saturating_duration_since(k.imported);
            let left = |ms: u64| millis(Duration::from_millis(ms).saturating_sub(spent));
            match &mut k.orphan {
                Orphan::Lease { lease, out, .. } if !lease.is_lost() => {
                    export.leases.push(LeaseOut {
                        max_hold_left_ms: out.max_hold_left_ms.map(left),
                        ..out.clone()
                    });
                }
                Orphan::Lease { .. } => {}
                Orphan::Wait { future, out, .. } => match poll_once(future) {
                    Some(Ok(lease)) => {
                        export.leases.push(LeaseOut {
                            fence: lease.fence(),
                            max_hold_left_ms: out.max_hold_ms,
                            secret: Some(secret),
                            opened: out.opened.clone(),
                        });
                        remains.push(Orphan::Held { _lease: lease });
                    }
                    Some(Err(_)) => {}
                    None => export.waits.push(WaitOut {
                        wait_left_ms: left(out.wait_left_ms),
                        ..out.clone()
                    }),
                },
                Orphan::Held { .. } => {}
            }
            remains.push(k.orphan);
        }
        let anonymous = std::mem::take(
            &mut *self
                .anonymous
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let mut held = Vec::new();
        for (_, lease, out) in anonymous {
            if !lease.is_lost() {
                export.leases.push(out);
            }
            held.push(lease);
        }
        (export, remains, held)
    }
}

/// The future's answer if it has one now (a wait already granted).
fn poll_once(future: &mut HoldFuture) -> Option<Result<HeldLease, Error>> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(r) => Some(r),
        std::task::Poll::Pending => None,
    }
}

/// The lock handle an imported lease or wait opens, with a heartbeat of
/// its own: nobody renews it until a connection adopts it.
fn open(
    store: &Store,
    o: &Opened,
    max_hold: Option<u64>,
) -> Result<(holdline::Lock, Heartbeat), Error> {
    let heartbeat = store.heartbeat();
    let mut builder = store
        .lock(&o.lock)
        .ttl(Duration::from_millis(o.ttl_ms))
        .permits(o.lock_permits)
        .heartbeat(&heartbeat);
    if let Some(ms) = max_hold {
        builder = builder.max_hold(Duration::from_millis(ms.max(1)));
    }
    if let Some(ms) = o.bypass_ms {
        builder = builder.fairness(holdline::Fairness::BoundedBypass(Duration::from_millis(ms)));
    }
    Ok((builder.open()?, heartbeat))
}

fn take<'a>(o: &Opened, hold: holdline::KeyHold<'a>) -> holdline::KeyHold<'a> {
    match o.take {
        0 => hold.exclusive(),
        1 => hold,
        m => hold.permits(m),
    }
}

fn import_lease(store: &Store, out: &LeaseOut) -> Result<(HeldLease, Heartbeat), String> {
    let o = &out.opened;
    let (lock, heartbeat) = open(store, o, out.max_hold_left_ms).map_err(|e| e.to_string())?;
    match take(o, lock.key(o.key.as_str())).try_acquire() {
        Ok(Some(lease)) => Ok((lease, heartbeat)),
        Ok(None) => Err(format!("lock {}: key {:?}: held already", o.lock, o.key)),
        Err(e) => Err(e.to_string()),
    }
}

fn import_wait(store: &Store, out: &WaitOut) -> Result<(HoldFuture, Heartbeat), String> {
    let o = out.opened.clone();
    let (lock, heartbeat) = open(store, &o, out.max_hold_ms).map_err(|e| e.to_string())?;
    let wait = Duration::from_millis(out.wait_left_ms);
    let mut future: HoldFuture = Box::pin(async move {
        take(&o, lock.key(o.key.as_str()).wait(wait))
            .acquire_async()
            .await
    });
    // One poll joins the line now, in the export's order.
    if let Some(result) = poll_once(&mut future) {
        let lease = result.map_err(|e| e.to_string())?;
        future = Box::pin(std::future::ready(Ok(lease)));
    }
    Ok((future, heartbeat))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(key: &str) -> Opened {
        Opened {
            lock: "invoices".into(),
            key: key.into(),
            lock_permits: 1,
            take: 1,
            ttl_ms: 2000,
            bypass_ms: None,
            note: String::new(),
        }
    }

    #[test]
    fn an_export_reads_back_from_its_chunks_in_order() {
        let export = Export {
            leases: (0..3000)
                .map(|i| LeaseOut {
                    opened: opened(&format!("{i:0>400}")),
                    fence: i,
                    max_hold_left_ms: Some(i),
                    secret: Some(format!("{i:0>32}")),
                })
                .collect(),
            waits: vec![WaitOut {
                opened: opened("w"),
                max_hold_ms: None,
                wait_left_ms: 5,
                secret: "s".repeat(32),
            }],
        };
        let chunks = export.chunks();
        assert!(chunks.len() > 1, "1.3 MB must not fit one chunk");
        assert!(chunks.iter().all(|c| c.len() <= CHUNK));
        let back = Export::from_chunks(chunks.iter().map(String::as_str));
        assert_eq!(back, Some(export));
        assert_eq!(Export::from_chunks(["{\"l\":1}\n"]), None);
    }

    #[test]
    fn what_was_imported_and_not_taken_is_exported_on_in_order() {
        let store = Store::new();
        let wait = |s: &str| WaitOut {
            opened: opened("a"),
            max_hold_ms: None,
            wait_left_ms: 10_000,
            secret: s.repeat(32),
        };
        let lease = LeaseOut {
            opened: opened("a"),
            fence: 5,
            max_hold_left_ms: Some(60_000),
            secret: Some("s".repeat(32)),
        };
        let orphans = Orphans::default();
        let export = Export {
            leases: vec![lease.clone()],
            waits: vec![wait("c"), wait("b"), wait("a")],
        };
        assert!(orphans.import(&store, export).is_empty());
        let (again, _remains, _held) = orphans.export(Instant::now());
        assert_eq!(again.leases.len(), 1);
        assert_eq!(again.leases[0].fence, 5, "the fence its holder knows");
        assert!(again.leases[0].max_hold_left_ms.unwrap() <= 60_000);
        let order: Vec<&str> = again.waits.iter().map(|w| &w.secret[..1]).collect();
        assert_eq!(order, ["c", "b", "a"], "the line's order");
        assert!(
            orphans.take(&"s".repeat(32), "invoices", "a").is_none(),
            "taken out"
        );
    }

    #[test]
    fn a_partition_of_100_000_leases_moves_in_chunks_etcd_takes() {
        let export = Export {
            leases: (0..100_000u64)
                .map(|i| LeaseOut {
                    opened: opened(&format!("invoice-{i}")),
                    fence: 1 << 60 | i,
                    max_hold_left_ms: Some(120_000),
                    secret: Some(format!("{i:0>32x}")),
                })
                .collect(),
            waits: Vec::new(),
        };
        let chunks = export.chunks();
        let bytes: usize = chunks.iter().map(String::len).sum();
        assert!(
            chunks.iter().all(|c| c.len() <= CHUNK),
            "each under etcd's 1.5 MiB"
        );
        assert!(
            (10..=40).contains(&chunks.len()),
            "{} chunks, {bytes} bytes",
            chunks.len()
        );
        let back = Export::from_chunks(chunks.iter().map(String::as_str)).unwrap();
        let store = Store::new();
        let orphans = Orphans::default();
        assert!(
            orphans.import(&store, back).is_empty(),
            "every lease held again"
        );
        let lock = store.lock("invoices").open().unwrap();
        assert_eq!(lock.stats().held_keys, 100_000);
    }

    #[test]
    fn secrets_are_letters_digits_dashes_and_underscores() {
        assert!(secret_ok(b"0123456789abcdef"));
        assert!(secret_ok(&[b'a'; 64]));
        assert!(!secret_ok(&[b'a'; 65]));
        assert!(!secret_ok(b"0123456789abcde"));
        assert!(!secret_ok(b"0123456789abcdef "));
    }

    #[test]
    fn a_sealed_registry_files_nothing_and_exports_live_leases_and_waits() {
        let store = Store::new();
        let lock = store.lock("invoices").open().unwrap();
        let held = lock.acquire("a").unwrap();
        let registry = Registry::default();
        let filed = Filed {
            opened: opened("a"),
            fence: held.fence(),
            secret: Some("x".repeat(32)),
            granted: Instant::now(),
            max_hold: Some(Duration::from_secs(60)),
            signal: held.signal(),
        };
        assert!(registry.admit(7, filed));
        let wait = FiledWait {
            opened: opened("a"),
            max_hold: None,
            until: Instant::now() + Duration::from_secs(5),
            secret: "y".repeat(32),
        };
        let n = registry.wait(wait).unwrap();
        let (export, ()) = registry.seal("127.0.0.1:1", || store.close());
        assert_eq!(export.leases.len(), 1);
        assert_eq!(export.leases[0].fence, held.fence());
        assert!(export.leases[0].max_hold_left_ms.unwrap() <= 60_000);
        assert_eq!(export.waits.len(), 1);
        let slot = super::super::slots::key_slot(b"a");
        assert_eq!(registry.exported_wait_slot(n), Some(slot));
        assert_eq!(registry.sealed().as_deref(), Some("127.0.0.1:1"));
        let late = FiledWait {
            opened: opened("b"),
            max_hold: None,
            until: Instant::now(),
            secret: "z".repeat(32),
        };
        assert_eq!(registry.wait(late), None);
    }

    #[test]
    fn an_import_holds_leases_and_lines_waits_until_taken_by_secret() {
        let store = Store::new();
        let lease = LeaseOut {
            opened: opened("a"),
            fence: 5,
            max_hold_left_ms: None,
            secret: Some("s".repeat(32)),
        };
        let wait = WaitOut {
            opened: opened("a"),
            max_hold_ms: None,
            wait_left_ms: 10_000,
            secret: "w".repeat(32),
        };
        let orphans = Orphans::default();
        let export = Export {
            leases: vec![lease],
            waits: vec![wait],
        };
        assert!(orphans.import(&store, export).is_empty());
        let lock = store.lock("invoices").open().unwrap();
        assert_eq!(lock.stats().waiters, 1);
        assert!(
            lock.key("a").try_acquire().unwrap().is_none(),
            "held for its holder"
        );
        assert!(orphans.take(&"s".repeat(32), "invoices", "b").is_none());
        let Some(Orphan::Lease { lease, .. }) = orphans.take(&"s".repeat(32), "invoices", "a")
        else {
            panic!("the lease is there under its secret");
        };
        assert!(
            orphans.take(&"s".repeat(32), "invoices", "a").is_none(),
            "once"
        );
        lease.release().unwrap();
        let Some(Orphan::Wait { future, .. }) = orphans.take(&"w".repeat(32), "invoices", "a")
        else {
            panic!("the wait is there under its secret");
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let granted = rt.block_on(future).unwrap();
        assert!(granted.fence() > 0);
    }
}
