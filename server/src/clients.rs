//! Every connection's public face, for operators: who it is (id, address,
//! name), how long it has lived and been idle, its last command, the
//! leases it holds (by key) and the key it waits for; and the switch that
//! kills it. The connection's task owns its session; this is the part
//! other connections may read (CLIENT LIST, INSPECT) or pull (CLIENT KILL).
//!
//! Kept cheap on the command path: a connection writes its idle clock and
//! last command once per batch of commands read, with relaxed atomics; the
//! maps change only on a grant, a release, a wait, or a connection's start
//! and end.

use holdline::Signal;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;
use tokio::sync::Notify;

/// The lease by which a connection holds a key: its id, and the grant's
/// fence and permits.
#[derive(Clone, Debug)]
pub struct HeldBy {
    pub lease: u64,
    pub fence: u64,
    pub permits: u32,
    /// What its holder says of it (`NOTE`; empty: nothing).
    pub note: Arc<str>,
    /// Its loss signal: whether the core ended it before its connection
    /// noticed (observers are told so before the next grant).
    pub signal: Signal,
}

/// What a connection shows of itself.
pub struct ClientState {
    pub id: u64,
    pub addr: SocketAddr,
    created: Instant,
    /// Milliseconds after `created` of the last batch of commands read.
    last_read_ms: AtomicU64,
    /// The command table's index of the last command carried out, or
    /// [`NO_COMMAND`].
    last_command: AtomicUsize,
    /// `CLIENT SETNAME`'s name.
    name: Mutex<Option<Vec<u8>>>,
    /// The user it authenticated as.
    user: Mutex<Option<Arc<str>>>,
    /// The held keys (`lock\0key`, the session's `held_key`) and the
    /// lease holding each.
    holding: Mutex<HashMap<Box<str>, HeldBy>>,
    /// The held key (`lock\0key`) a HOLD of this connection waits for.
    waiting: Mutex<Option<Box<str>>>,
    /// Pulled by CLIENT KILL.
    kill: Notify,
    /// Whether `CLIENT KILL` ended it (its leases end `killed`).
    killed: AtomicBool,
    /// Whether it was closed for leaving its pushes unread.
    behind: AtomicBool,
}

/// `last_command` before any command was carried out.
const NO_COMMAND: usize = usize::MAX;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while one is held; a poisoned map is still a map.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ClientState {
    pub fn new(id: u64, addr: SocketAddr) -> ClientState {
        ClientState {
            id,
            addr,
            created: Instant::now(),
            last_read_ms: AtomicU64::new(0),
            last_command: AtomicUsize::new(NO_COMMAND),
            name: Mutex::new(None),
            user: Mutex::new(None),
            holding: Mutex::new(HashMap::new()),
            waiting: Mutex::new(None),
            kill: Notify::new(),
            killed: AtomicBool::new(false),
            behind: AtomicBool::new(false),
        }
    }

    /// A batch of commands was read now.
    pub fn touch(&self) {
        let ms = u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX);
        // Relaxed: a reading for operators; nothing else is published by it.
        self.last_read_ms.store(ms, Ordering::Relaxed);
    }

    /// The command about to be carried out (its index in the command table).
    pub fn ran(&self, command: usize) {
        // Relaxed: as in `touch`.
        self.last_command.store(command, Ordering::Relaxed);
    }

    pub fn set_name(&self, name: Option<Vec<u8>>) {
        *lock(&self.name) = name;
    }

    pub fn set_user(&self, user: &str) {
        *lock(&self.user) = Some(Arc::from(user));
    }

    /// The user it authenticated as, if it has.
    pub fn user(&self) -> Option<Arc<str>> {
        lock(&self.user).clone()
    }

    pub fn name(&self) -> Option<Vec<u8>> {
        lock(&self.name).clone()
    }

    /// Whether this connection holds `held_key`.
    pub fn holds(&self, held_key: &str) -> bool {
        lock(&self.holding).contains_key(held_key)
    }

    /// The lease by which this connection holds `held_key`, if it does.
    pub fn lease_of(&self, held_key: &str) -> Option<HeldBy> {
        lock(&self.holding).get(held_key).cloned()
    }

    /// Replaces the note of the lease holding `held_key`.
    pub fn noted(&self, held_key: &str, note: Arc<str>) {
        if let Some(by) = lock(&self.holding).get_mut(held_key) {
            by.note = note;
        }
    }

    pub fn held(&self, held_key: Box<str>, by: HeldBy) {
        lock(&self.holding).insert(held_key, by);
    }

    pub fn let_go(&self, held_key: &str) {
        lock(&self.holding).remove(held_key);
    }

    /// Calls `f` with each held key and its lease, under the map's lock
    /// (so `f` must not call back into this connection): the page lists
    /// every held key without copying every connection's map.
    pub fn each_held(&self, mut f: impl FnMut(&str, &HeldBy)) {
        for (held_key, by) in lock(&self.holding).iter() {
            f(held_key, by);
        }
    }

    pub fn lease_count(&self) -> usize {
        lock(&self.holding).len()
    }

    pub fn set_waiting(&self, held_key: Option<Box<str>>) {
        *lock(&self.waiting) = held_key;
    }

    pub fn waiting(&self) -> Option<Box<str>> {
        lock(&self.waiting).clone()
    }

    /// Asks the connection to close (its keys go to the next in line).
    pub fn kill(&self) {
        // Relaxed: read by the connection's own task once it ends.
        self.killed.store(true, Ordering::Relaxed);
        self.kill.notify_one();
    }

    /// Closes an observer that leaves its pushes unread (its keys go to
    /// the next in line, as on CLIENT KILL).
    pub fn disconnect_behind(&self) {
        // Relaxed: as in `kill`.
        self.behind.store(true, Ordering::Relaxed);
        self.kill.notify_one();
    }

    /// Why an operator or the server closed it, if either did: `killed`
    /// (CLIENT KILL) or `unread pushes` (an observer that did not read).
    pub fn closed_because(&self) -> Option<&'static str> {
        // Relaxed: see `kill`.
        if self.killed.load(Ordering::Relaxed) {
            Some("killed")
        } else if self.behind.load(Ordering::Relaxed) {
            Some("unread pushes")
        } else {
            None
        }
    }

    /// Resolves once [`kill`](ClientState::kill) was called.
    pub async fn killed(&self) {
        self.kill.notified().await;
    }

    /// Seconds since the connection was made.
    pub fn age_secs(&self) -> u64 {
        self.created.elapsed().as_secs()
    }

    /// Seconds since a command was last read.
    pub fn idle_secs(&self) -> u64 {
        // Relaxed: as in `touch`.
        let last = self.last_read_ms.load(Ordering::Relaxed);
        let now = u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX);
        now.saturating_sub(last) / 1000
    }

    /// The command table's index of the last command carried out, if any.
    pub fn last_command(&self) -> Option<usize> {
        // Relaxed: as in `touch`.
        let index = self.last_command.load(Ordering::Relaxed);
        (index != NO_COMMAND).then_some(index)
    }
}

/// Every live connection, by id.
#[derive(Default)]
pub struct Clients {
    map: Mutex<BTreeMap<u64, Arc<ClientState>>>,
    /// The most connections open at once since [`take_peak`](Clients::take_peak).
    peak: AtomicUsize,
}

impl Clients {
    pub fn add(&self, client: Arc<ClientState>) {
        let mut map = lock(&self.map);
        map.insert(client.id, client);
        // Relaxed: a high-water mark for the heap trimmer; nothing is
        // published through it.
        self.peak.fetch_max(map.len(), Ordering::Relaxed);
    }

    /// The high-water mark since the last call; it starts again from now.
    pub fn take_peak(&self) -> usize {
        let now = self.count();
        // Relaxed: as in `add`.
        self.peak.swap(now, Ordering::Relaxed).max(now)
    }

    pub fn remove(&self, id: u64) {
        lock(&self.map).remove(&id);
    }

    pub fn get(&self, id: u64) -> Option<Arc<ClientState>> {
        lock(&self.map).get(&id).cloned()
    }

    /// Every connection now, by id.
    pub fn all(&self) -> Vec<Arc<ClientState>> {
        lock(&self.map).values().cloned().collect()
    }

    pub fn count(&self) -> usize {
        lock(&self.map).len()
    }

    /// The connections holding `held_key` and their leases, oldest grant
    /// first (a lock of several permits has several).
    pub fn holders_of(&self, held_key: &str) -> Vec<(Arc<ClientState>, HeldBy)> {
        let mut holders: Vec<_> = self
            .all()
            .into_iter()
            .filter_map(|c| c.lease_of(held_key).map(|by| (c, by)))
            .collect();
        holders.sort_by_key(|(_, by)| by.fence);
        holders
    }

    /// Connections with a waiting HOLD.
    pub fn blocked(&self) -> usize {
        self.all().iter().filter(|c| c.waiting().is_some()).count()
    }
}

/// A held key, `lock\0key`: a lock's name and a key as one string, the
/// key by which a connection files what it holds and waits for. Neither a
/// lock name nor a valid key holds NUL, so the pair is unambiguous.
pub fn held_key(lock: &str, key: &str) -> Box<str> {
    format!("{lock}\0{key}").into_boxed_str()
}

/// A held key's lock name and key.
pub fn held_key_parts(held_key: &str) -> (&str, &str) {
    held_key.split_once('\0').unwrap_or((held_key, ""))
}
