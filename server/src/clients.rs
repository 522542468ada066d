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

use crate::record::{ByKey, HeldKey, LeaseRecord};
use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;
use tokio::sync::Notify;

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
    /// The leases it holds, each filed by its held key.
    holding: Mutex<HashSet<ByKey>>,
    /// The key a HOLD of this connection waits for.
    waiting: Mutex<Option<HeldKey>>,
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
            holding: Mutex::new(HashSet::new()),
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
    pub fn holds(&self, held_key: &HeldKey) -> bool {
        lock(&self.holding).contains(held_key)
    }

    /// The lease by which this connection holds `held_key`, if it does.
    pub fn lease_of(&self, held_key: &HeldKey) -> Option<Arc<LeaseRecord>> {
        lock(&self.holding).get(held_key).map(|by| by.0.clone())
    }

    pub fn held(&self, record: Arc<LeaseRecord>) {
        lock(&self.holding).replace(ByKey(record));
    }

    pub fn let_go(&self, held_key: &HeldKey) {
        lock(&self.holding).remove(held_key);
    }

    /// Calls `f` with each lease held, under the map's lock (so `f` must
    /// not call back into this connection): the page lists every held key
    /// without copying every connection's map.
    pub fn each_held(&self, mut f: impl FnMut(&LeaseRecord)) {
        for by in lock(&self.holding).iter() {
            f(&by.0);
        }
    }

    pub fn lease_count(&self) -> usize {
        lock(&self.holding).len()
    }

    pub fn set_waiting(&self, held_key: Option<HeldKey>) {
        *lock(&self.waiting) = held_key;
    }

    pub fn waiting(&self) -> Option<HeldKey> {
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
    pub fn holders_of(&self, held_key: &HeldKey) -> Vec<(Arc<ClientState>, Arc<LeaseRecord>)> {
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
