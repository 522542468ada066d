//! Who observes which key (`OBSERVE lock key`), and the pushes each
//! observer is owed: `["observe", lock, key, event, fence, permits,
//! holder, note]`.
//!
//! Sessions tell the registry of every grant, end and note change of
//! their leases, and a cluster node of every store it closes. The registry
//! keeps, for observed keys only, who observes them and which leases their
//! observers were told hold them; each push is encoded once and appended
//! to every observer's [`Outbox`], which the observer's connection writes.
//! A key nobody observes costs a grant or an end one relaxed load.
//!
//! Invariants:
//! - a key is in `keys` exactly while some outbox observes it, and
//!   `observed` counts them;
//! - a key's `holders` are the leases its observers were last told hold
//!   it, each once: a grant already listed is not told again, an end not
//!   listed is not told at all;
//! - for one key, a lease's end is pushed before the next holder's grant.
//!   A RELEASE and a closing connection tell of their end before the core
//!   lets the key go. A lease the core ends on its own (ttl, maxHold, its
//!   store closed) is lost before the core grants the key again, and its
//!   session may learn of it later than the next holder's session learns
//!   of its grant: so a grant first tells of every listed lease whose
//!   signal says lost;
//! - an outbox keeps at most [`MAX_UNREAD`] bytes: the push that would
//!   pass it disconnects the observer instead, so an observer that stops
//!   reading never slows the server or anyone else.
//!
//! Lock order: `keys`, then an outbox's `queue`, then (through
//! `present`) a connection's map of held keys. Nothing is called back
//! with either held but those.

use crate::clients::ClientState;
use crate::events::Kind;
use crate::record::{HeldKey, LeaseRecord};
use holdline_resp::{encode, Proto, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;

/// Keys one connection may observe at once.
pub const MAX_OBSERVED_KEYS: usize = 1000;
/// Bytes of pushes an observer may leave unread before it is disconnected.
pub const MAX_UNREAD: usize = 1 << 20;

/// An observed key: the store it lives in (0: a single node's one store;
/// in a cluster, the partition's store id) and its held key.
pub type Watch = (u64, HeldKey);

/// A lease as its key's observers are told of it: its one record (its
/// note read when a push is made).
pub type Holding = Arc<LeaseRecord>;

/// What the event words of a push are: an end of a lease, or the state.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Word {
    Held,
    Free,
    Of(Kind),
}

impl Word {
    fn text(self) -> &'static str {
        match self {
            Word::Held => "held",
            Word::Free => "free",
            Word::Of(kind) => kind.word(),
        }
    }
}

/// Every observed key.
#[derive(Default)]
pub struct Observers {
    /// Keys in `keys` (read without the lock by grants and ends).
    observed: AtomicUsize,
    keys: Mutex<HashMap<Watch, Watched>>,
}

/// One observed key.
struct Watched {
    outboxes: Vec<Arc<Outbox>>,
    holders: Vec<Holding>,
    /// The highest fence told of (a free key's push carries it).
    last_fence: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while one is held; a poisoned map is still a map.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Observers {
    /// Whether no key is observed: then grants and ends tell nobody.
    ///
    /// Relaxed suffices: a grant or an end changes its connection's map of
    /// held keys (a mutex) before it asks, and [`Observers::observe`]
    /// counts the key before it reads those maps (`present`). Whichever
    /// of the two takes that connection's mutex second sees the other's
    /// work: the grant sees the count, or the observer sees the hold.
    /// Both may: a grant already listed is not told twice.
    pub fn is_empty(&self) -> bool {
        self.observed.load(Ordering::Relaxed) == 0
    }

    /// `outbox` observes `watch`: the key's present state is pushed to it
    /// at once, `present` giving the holders and the last fence when no
    /// one observed the key before. `Err` past [`MAX_OBSERVED_KEYS`].
    pub fn observe(
        &self,
        watch: Watch,
        outbox: &Arc<Outbox>,
        present: impl FnOnce() -> (Vec<Holding>, u64),
    ) -> Result<(), TooMany> {
        let mut keys = lock(&self.keys);
        // Observed already: told the present state again.
        outbox.add(&watch)?;
        let watched = keys.entry(watch.clone()).or_insert_with(|| {
            // Relaxed: see `is_empty`; the mutex orders the rest.
            self.observed.fetch_add(1, Ordering::Relaxed);
            let (holders, last_fence) = present();
            let holders = holders.into_iter().filter(|h| !h.is_lost()).collect();
            Watched {
                outboxes: Vec::new(),
                holders,
                last_fence,
            }
        });
        if !watched.outboxes.iter().any(|o| Arc::ptr_eq(o, outbox)) {
            watched.outboxes.push(outbox.clone());
        }
        let (lock_name, key) = (watch.1.lock(), watch.1.key());
        let mut pushes = Vec::new();
        if watched.holders.is_empty() {
            encode_push(
                lock_name,
                key,
                Word::Free,
                watched.last_fence,
                None,
                &mut pushes,
            );
        }
        for h in &watched.holders {
            encode_push(lock_name, key, Word::Held, h.fence, Some(h), &mut pushes);
        }
        outbox.append(&pushes);
        Ok(())
    }

    /// `outbox` no longer observes `watch` (nothing when it did not).
    pub fn unobserve(&self, watch: &Watch, outbox: &Arc<Outbox>) {
        let mut keys = lock(&self.keys);
        outbox.remove(watch);
        self.drop_outbox(&mut keys, watch, outbox);
    }

    /// `outbox` observes nothing more (its connection closed).
    pub fn forget(&self, outbox: &Arc<Outbox>) {
        let mut keys = lock(&self.keys);
        for watch in outbox.take_watches() {
            self.drop_outbox(&mut keys, &watch, outbox);
        }
    }

    fn drop_outbox(&self, keys: &mut HashMap<Watch, Watched>, watch: &Watch, outbox: &Arc<Outbox>) {
        let Some(watched) = keys.get_mut(watch) else {
            return;
        };
        watched.outboxes.retain(|o| !Arc::ptr_eq(o, outbox));
        if watched.outboxes.is_empty() {
            keys.remove(watch);
            // Relaxed: see `is_empty`.
            self.observed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A lease of `watch` was granted. Leases the core ended meanwhile are
    /// told of first.
    pub fn granted(&self, watch: &Watch, holding: Holding) {
        let mut keys = lock(&self.keys);
        let Some(watched) = keys.get_mut(watch) else {
            return;
        };
        let (lock_name, key) = (watch.1.lock(), watch.1.key());
        let mut pushes = Vec::new();
        let (lost, kept): (Vec<Holding>, Vec<Holding>) = std::mem::take(&mut watched.holders)
            .into_iter()
            .partition(|h| h.is_lost() && h.id != holding.id);
        watched.holders = kept;
        for h in &lost {
            let kind = Kind::of_loss(h.end_reason());
            encode_push(
                lock_name,
                key,
                Word::Of(kind),
                h.fence,
                Some(h),
                &mut pushes,
            );
        }
        if !watched.holders.iter().any(|h| h.id == holding.id) {
            let word = Word::Of(Kind::Granted);
            encode_push(
                lock_name,
                key,
                word,
                holding.fence,
                Some(&holding),
                &mut pushes,
            );
            watched.last_fence = watched.last_fence.max(holding.fence);
            watched.holders.push(holding);
        }
        send(&watched.outboxes, &pushes);
    }

    /// Lease `lease` of `watch` ended (`kind`), if its observers were told
    /// it holds the key.
    pub fn ended(&self, watch: &Watch, lease: u64, kind: Kind) {
        let mut keys = lock(&self.keys);
        let Some(watched) = keys.get_mut(watch) else {
            return;
        };
        let Some(at) = watched.holders.iter().position(|h| h.id == lease) else {
            return;
        };
        let h = watched.holders.remove(at);
        let (lock_name, key) = (watch.1.lock(), watch.1.key());
        let mut pushes = Vec::new();
        encode_push(
            lock_name,
            key,
            Word::Of(kind),
            h.fence,
            Some(&h),
            &mut pushes,
        );
        send(&watched.outboxes, &pushes);
    }

    /// Lease `lease` of `watch` has a new note (set on its record): its
    /// observers are told the key's state again (`held`, with the note).
    pub fn noted(&self, watch: &Watch, lease: u64) {
        let mut keys = lock(&self.keys);
        let Some(watched) = keys.get_mut(watch) else {
            return;
        };
        let Some(h) = watched.holders.iter().find(|h| h.id == lease) else {
            return;
        };
        let (lock_name, key) = (watch.1.lock(), watch.1.key());
        let mut pushes = Vec::new();
        encode_push(lock_name, key, Word::Held, h.fence, Some(h), &mut pushes);
        send(&watched.outboxes, &pushes);
    }

    /// Store `store` closed: every key observed in it is told `closed`
    /// (once per lease listed, or once with its last fence when free) and
    /// observed no more; its observers must observe it again (elsewhere).
    pub fn store_closed(&self, store: u64) {
        let mut keys = lock(&self.keys);
        let gone: Vec<Watch> = keys.keys().filter(|w| w.0 == store).cloned().collect();
        for watch in gone {
            let Some(watched) = keys.remove(&watch) else {
                continue;
            };
            // Relaxed: see `is_empty`.
            self.observed.fetch_sub(1, Ordering::Relaxed);
            let (lock_name, key) = (watch.1.lock(), watch.1.key());
            let mut pushes = Vec::new();
            let word = Word::Of(Kind::Closed);
            if watched.holders.is_empty() {
                encode_push(lock_name, key, word, watched.last_fence, None, &mut pushes);
            }
            for h in &watched.holders {
                encode_push(lock_name, key, word, h.fence, Some(h), &mut pushes);
            }
            for outbox in &watched.outboxes {
                outbox.remove(&watch);
            }
            send(&watched.outboxes, &pushes);
        }
    }
}

/// Appends `pushes` to every outbox (nothing when empty).
fn send(outboxes: &[Arc<Outbox>], pushes: &[u8]) {
    if pushes.is_empty() {
        return;
    }
    for outbox in outboxes {
        outbox.append(pushes);
    }
}

/// Appends one push, RESP3-encoded, to `out`.
fn encode_push(
    lock: &str,
    key: &str,
    word: Word,
    fence: u64,
    holding: Option<&Holding>,
    out: &mut Vec<u8>,
) {
    let integer = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    let push = Value::Push(vec![
        Value::bulk("observe"),
        Value::bulk(lock),
        Value::bulk(key),
        Value::bulk(word.text()),
        integer(fence),
        integer(holding.map_or(0, |h| u64::from(h.permits))),
        integer(holding.map_or(0, |h| h.client())),
        Value::bulk(holding.map_or_else(Arc::default, |h| h.note()).as_ref()),
    ]);
    encode(&push, Proto::Resp3, out);
}

/// More keys than a connection may observe.
#[derive(Debug)]
pub struct TooMany;

/// One observing connection's pushes not yet written, and the keys it
/// observes.
pub struct Outbox {
    client: Arc<ClientState>,
    queue: Mutex<Queue>,
    /// Pulled when pushes were appended; the connection then writes them.
    ready: Notify,
}

#[derive(Default)]
struct Queue {
    /// Encoded pushes, in order.
    bytes: Vec<u8>,
    watches: HashSet<Watch>,
    /// Set once the observer was disconnected for not reading.
    behind: bool,
}

impl Outbox {
    pub fn new(client: Arc<ClientState>) -> Outbox {
        Outbox {
            client,
            queue: Mutex::new(Queue::default()),
            ready: Notify::new(),
        }
    }

    /// Adds `watch` (nothing if observed already); `Err` past the limit.
    fn add(&self, watch: &Watch) -> Result<(), TooMany> {
        let mut queue = lock(&self.queue);
        if !queue.watches.contains(watch) && queue.watches.len() >= MAX_OBSERVED_KEYS {
            return Err(TooMany);
        }
        queue.watches.insert(watch.clone());
        Ok(())
    }

    fn remove(&self, watch: &Watch) {
        lock(&self.queue).watches.remove(watch);
    }

    fn take_watches(&self) -> HashSet<Watch> {
        std::mem::take(&mut lock(&self.queue).watches)
    }

    /// Queues `pushes` for the connection; an observer past
    /// [`MAX_UNREAD`] is disconnected instead (once).
    fn append(&self, pushes: &[u8]) {
        let mut queue = lock(&self.queue);
        if queue.behind {
            return;
        }
        if queue.bytes.len() + pushes.len() > MAX_UNREAD {
            queue.behind = true;
            queue.bytes = Vec::new();
            drop(queue);
            self.client.disconnect_behind();
            return;
        }
        queue.bytes.extend_from_slice(pushes);
        drop(queue);
        self.ready.notify_one();
    }

    /// The pushes queued so far, taken to be written.
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut lock(&self.queue).bytes)
    }

    /// Resolves once pushes were appended since the last [`take`](Outbox::take)
    /// began (a permit is kept when nobody waits, so none is missed).
    pub async fn ready(&self) {
        self.ready.notified().await;
    }
}
