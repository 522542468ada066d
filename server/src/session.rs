//! One connection's state and what its commands do: its leases (renewed by
//! every command read, let go when it closes), its protocol version, its
//! authentication, and a small cache of lock handles.
//!
//! The session never blocks: a HOLD that must wait comes back as an
//! [`Outcome::Wait`] holding the future, which the connection polls while
//! it goes on reading; [`Session::granted`] then answers it.

use crate::command::{self, Command, LockOptions};
use crate::docs;
use crate::loss_watch::LossWatches;
use crate::reply::{core_error, invalid_key, invalid_store};
use holdline::{Error, HeldLease, Lock, Store};
use holdline_resp::{Proto, Value};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// Frames a client may send before it authenticated, when a token is
/// required: enough for HELLO with AUTH, too little to make the server
/// buffer much for a stranger (Redis does the same).
const UNAUTHENTICATED_MAX_FRAME: usize = 16 * 1024;

/// Distinct (name, options) lock handles a connection keeps open before
/// the cache starts afresh.
const LOCK_CACHE_ENTRIES: usize = 256;

/// What every connection shares: the store and the server's settings.
pub struct Shared {
    pub store: Store,
    token: Option<Vec<u8>>,
    max_frame: usize,
    next_lease: AtomicU64,
    next_client: AtomicU64,
}

impl Shared {
    pub fn new(store: Store, token: Option<Vec<u8>>, max_frame: usize) -> Shared {
        Shared {
            store,
            token,
            max_frame,
            next_lease: AtomicU64::new(1),
            next_client: AtomicU64::new(1),
        }
    }
}

/// A HOLD waiting in its key's line. Dropping it leaves the line.
pub type HoldFuture = Pin<Box<dyn Future<Output = Result<HeldLease, Error>> + Send>>;

/// The one place the server waits for a key: the core's async acquire,
/// which waits in the same FIFO line as threads and leaves it on drop.
fn wait_for_key(lock: Lock, key: String, wait: Duration) -> HoldFuture {
    Box::pin(async move { lock.key(key.as_str()).wait(wait).acquire_async().await })
}

/// A HOLD whose answer is still to come.
pub struct PendingHold {
    pub future: HoldFuture,
    slot: Box<str>,
}

/// What carrying out one command led to.
pub enum Outcome {
    Reply(Value),
    /// A HOLD must wait: poll its future, then call [`Session::granted`].
    Wait(PendingHold),
    /// Answer, then close the connection (QUIT).
    Close(Value),
}

struct Held {
    lease: HeldLease,
    /// `lock\0key`: the connection's record that it holds this key.
    slot: Box<str>,
}

/// Lock handles by name, then by options: opening a handle per command
/// would take the store's name map every time.
#[derive(Default)]
struct LockCache {
    map: HashMap<Vec<u8>, Vec<(LockOptions, Lock)>>,
}

impl LockCache {
    fn get(&mut self, store: &Store, name: &[u8], options: LockOptions) -> Result<Lock, Value> {
        if let Some(lock) = self
            .map
            .get(name)
            .and_then(|v| v.iter().find(|(o, _)| *o == options))
            .map(|(_, l)| l)
        {
            return Ok(lock.clone());
        }
        // A name that is not UTF-8 is no valid name: the core refuses the
        // replacement character with its own text.
        let text = String::from_utf8_lossy(name);
        let mut builder = store.lock(&text).ttl(options.ttl);
        if let Some(max_hold) = options.max_hold {
            builder = builder.max_hold(max_hold);
        }
        let lock = builder.open().map_err(|e| core_error(&e))?;
        if self.map.len() >= LOCK_CACHE_ENTRIES {
            self.map.clear();
        }
        self.map
            .entry(name.to_vec())
            .or_default()
            .push((options, lock.clone()));
        Ok(lock)
    }
}

/// One connection's state.
pub struct Session {
    shared: Arc<Shared>,
    id: u64,
    proto: Proto,
    authenticated: bool,
    name: Option<Vec<u8>>,
    locks: LockCache,
    leases: HashMap<u64, Held>,
    /// Slots (`lock\0key`) of the keys this connection holds.
    holding: HashSet<Box<str>>,
    /// Which leases were lost, polled by the connection.
    pub losses: LossWatches,
}

impl Session {
    pub fn new(shared: Arc<Shared>) -> Session {
        let id = shared.next_client.fetch_add(1, Ordering::Relaxed);
        let authenticated = shared.token.is_none();
        Session {
            shared,
            id,
            proto: Proto::Resp2,
            authenticated,
            name: None,
            locks: LockCache::default(),
            leases: HashMap::new(),
            holding: HashSet::new(),
            losses: LossWatches::default(),
        }
    }

    /// The protocol replies are written in.
    pub fn proto(&self) -> Proto {
        self.proto
    }

    /// Whether the client may run every command (no token, or it gave it).
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }

    /// The frame limit for this connection now.
    pub fn frame_limit(&self) -> usize {
        if self.authenticated {
            self.shared.max_frame
        } else {
            self.shared.max_frame.min(UNAUTHENTICATED_MAX_FRAME)
        }
    }

    /// A command was read: the connection is alive, so all its leases are.
    ///
    /// O(leases) per command, on purpose: a silent connection then loses a
    /// lease exactly `ttl` after its last command read, as the contract says.
    /// (Renewing at most once per a fraction of the ttl was measured: it
    /// saves ~1.5 ms per command only for a connection holding ~10,000
    /// leases, and would lose a stalled holder's lease that fraction early.)
    pub fn renew_all(&self) {
        for held in self.leases.values() {
            // A lost lease stays lost; its holder learns it from a push or
            // from its next RENEW or RELEASE.
            let _ = held.lease.renew();
        }
    }

    /// Carries out one command.
    pub fn execute(&mut self, args: Vec<Vec<u8>>) -> Outcome {
        let command = match command::parse(args) {
            Ok(c) => c,
            Err(text) => {
                // An unauthenticated client learns nothing about commands.
                if !self.authenticated {
                    return Outcome::Reply(noauth());
                }
                return Outcome::Reply(Value::Error(text));
            }
        };
        if !self.authenticated && !command.allowed_before_auth() {
            return Outcome::Reply(noauth());
        }
        Outcome::Reply(match command {
            Command::Hold {
                lock,
                key,
                wait,
                options,
            } => return self.hold(&lock, key, wait, options),
            Command::TryHold { lock, key, options } => self.try_hold(&lock, key, options),
            Command::Release(id) => self.release(id),
            Command::Renew(id) => self.renew(id),
            Command::Put {
                lock,
                key,
                fence,
                row,
                value,
            } => self.put(&lock, key, fence, row, value),
            Command::Get(row) => self.get(row),
            Command::Stats(lock) => self.stats(&lock),
            Command::Ping(None) => Value::simple("PONG"),
            Command::Ping(Some(msg)) | Command::Echo(msg) => Value::Bulk(msg),
            Command::Quit => return Outcome::Close(Value::ok()),
            Command::Hello {
                proto,
                auth,
                setname,
            } => self.hello(proto, auth, setname),
            Command::Auth { user, token } => self.auth(user.is_some(), &token),
            Command::ClientSetName(name) => self.set_name(name),
            Command::ClientGetName => self.name.clone().map_or(Value::Null, Value::Bulk),
            Command::ClientSetInfo => Value::ok(),
            Command::ClientId => Value::Integer(self.id as i64),
            Command::Select(0) => Value::ok(),
            Command::Select(_) => Value::error("ERR DB index is out of range"),
            Command::Table => docs::info(&[]),
            Command::TableCount => docs::count(),
            Command::TableInfo(names) => docs::info(&names),
            Command::TableDocs(names) => docs::docs(&names),
        })
    }

    fn lock(&mut self, name: &[u8], options: LockOptions) -> Result<Lock, Value> {
        self.locks.get(&self.shared.store, name, options)
    }

    /// The lock and the key as text, or the refusal to answer.
    fn lock_and_key(
        &mut self,
        name: &[u8],
        key: Vec<u8>,
        options: LockOptions,
    ) -> Result<(Lock, String), Value> {
        let lock = self.lock(name, options)?;
        let key = String::from_utf8(key).map_err(|e| {
            invalid_key(
                lock.name(),
                &String::from_utf8_lossy(e.as_bytes()),
                "the key is not UTF-8",
            )
        })?;
        Ok((lock, key))
    }

    fn hold(&mut self, name: &[u8], key: Vec<u8>, wait: Duration, options: LockOptions) -> Outcome {
        let (lock, key) = match self.lock_and_key(name, key, options) {
            Ok(v) => v,
            Err(refusal) => return Outcome::Reply(refusal),
        };
        let slot = slot(lock.name(), &key);
        if self.holding.contains(&slot) {
            // It would wait for itself until its wait ran out.
            return Outcome::Reply(invalid_key(
                lock.name(),
                &key,
                "hold inside a hold of the same key",
            ));
        }
        Outcome::Wait(PendingHold {
            future: wait_for_key(lock, key, wait),
            slot,
        })
    }

    /// The answer to a HOLD that waited.
    pub fn granted(&mut self, result: Result<HeldLease, Error>, pending: PendingHold) -> Value {
        match result {
            Ok(lease) => self.keep(lease, pending.slot),
            Err(e) => core_error(&e),
        }
    }

    fn try_hold(&mut self, name: &[u8], key: Vec<u8>, options: LockOptions) -> Value {
        let (lock, key) = match self.lock_and_key(name, key, options) {
            Ok(v) => v,
            Err(refusal) => return refusal,
        };
        let slot = slot(lock.name(), &key);
        if self.holding.contains(&slot) {
            // As in process: a try of a key its caller holds answers None.
            return Value::Null;
        }
        match lock.key(key.as_str()).try_acquire() {
            Ok(Some(lease)) => self.keep(lease, slot),
            Ok(None) => Value::Null,
            Err(e) => core_error(&e),
        }
    }

    /// Files a granted lease under a fresh id: `[lease, fence]`.
    fn keep(&mut self, lease: HeldLease, slot: Box<str>) -> Value {
        let id = self.shared.next_lease.fetch_add(1, Ordering::Relaxed);
        let fence = lease.fence();
        // A HOLD that waited was granted a moment ago, while commands may
        // have been read: its ttl counts from now. (A lost lease stays
        // lost; the watch tells.)
        let _ = lease.renew();
        self.losses.watch(id, lease.signal().aborted());
        self.holding.insert(slot.clone());
        self.leases.insert(id, Held { lease, slot });
        // Fences stay below 2^63 (SPEC), so they travel as RESP integers.
        Value::Array(vec![
            Value::Integer(id as i64),
            Value::Integer(i64::try_from(fence).unwrap_or(i64::MAX)),
        ])
    }

    fn release(&mut self, id: i64) -> Value {
        let Some((lease_id, held)) = u64::try_from(id)
            .ok()
            .and_then(|id| Some((id, self.leases.remove(&id)?)))
        else {
            return not_ours(id);
        };
        self.holding.remove(&held.slot);
        self.losses.forget(lease_id);
        match held.lease.release() {
            Ok(()) => Value::ok(),
            Err(e) => core_error(&e),
        }
    }

    fn renew(&mut self, id: i64) -> Value {
        match u64::try_from(id).ok().and_then(|id| self.leases.get(&id)) {
            None => not_ours(id),
            Some(held) => match held.lease.renew() {
                Ok(()) => Value::ok(),
                Err(e) => core_error(&e),
            },
        }
    }

    /// The push telling a RESP3 client its lease `id` was lost, if it is.
    pub fn loss_push(&self, id: u64) -> Option<Value> {
        if self.proto != Proto::Resp3 {
            return None;
        }
        let error = self.leases.get(&id)?.lease.check().err()?;
        Some(Value::Push(vec![
            Value::bulk("lost"),
            Value::Integer(id as i64),
            Value::bulk(error.to_string()),
        ]))
    }

    fn put(
        &mut self,
        name: &[u8],
        key: Vec<u8>,
        fence: u64,
        row: Vec<u8>,
        value: Vec<u8>,
    ) -> Value {
        let (lock, key) = match self.lock_and_key(name, key, LockOptions::default()) {
            Ok(v) => v,
            Err(refusal) => return refusal,
        };
        let Ok(row) = String::from_utf8(row) else {
            return invalid_store("a row name is UTF-8 text");
        };
        match self
            .shared
            .store
            .tx(|tx| tx.put_fenced(&lock, key.as_str(), fence, &row, value))
        {
            Ok(()) => Value::ok(),
            Err(e) => core_error(&e),
        }
    }

    fn get(&self, row: Vec<u8>) -> Value {
        // No row has a name that is not UTF-8.
        let Ok(row) = String::from_utf8(row) else {
            return Value::Null;
        };
        match self
            .shared
            .store
            .tx(|tx| Ok(tx.get(&row).map(<[u8]>::to_vec)))
        {
            Ok(Some(v)) => Value::Bulk(v),
            Ok(None) => Value::Null,
            Err(e) => core_error(&e),
        }
    }

    fn stats(&mut self, name: &[u8]) -> Value {
        let lock = match self.lock(name, LockOptions::default()) {
            Ok(l) => l,
            Err(refusal) => return refusal,
        };
        let s = lock.stats();
        let count = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
        Value::Map(vec![
            (Value::bulk("live_keys"), count(s.live_keys as u64)),
            (Value::bulk("held_keys"), count(s.held_keys as u64)),
            (Value::bulk("waiters"), count(s.waiters as u64)),
            (Value::bulk("grants"), count(s.grants)),
            (Value::bulk("timeouts"), count(s.timeouts)),
            (Value::bulk("revocations"), count(s.revocations)),
            (Value::bulk("expirations"), count(s.expirations)),
        ])
    }

    fn token_matches(&self, given: &[u8]) -> bool {
        match &self.shared.token {
            // Constant time in the token's content (its length may show).
            Some(token) => bool::from(token.as_slice().ct_eq(given)),
            None => true,
        }
    }

    fn hello(
        &mut self,
        proto: Option<i64>,
        auth: Option<(Vec<u8>, Vec<u8>)>,
        setname: Option<Vec<u8>>,
    ) -> Value {
        let proto = match proto {
            None => self.proto,
            Some(2) => Proto::Resp2,
            Some(3) => Proto::Resp3,
            Some(_) => return Value::error("NOPROTO unsupported protocol version"),
        };
        if let Some((_user, token)) = auth {
            if !self.token_matches(&token) {
                return wrongpass();
            }
            self.authenticated = true;
        }
        if !self.authenticated {
            // Redis's answer: a client that connects without the token
            // learns it at HELLO, not at its first real command.
            return Value::error(HELLO_NOAUTH);
        }
        if let Some(name) = setname {
            if let Err(refusal) = check_client_name(&name) {
                return refusal;
            }
            self.name = (!name.is_empty()).then_some(name);
        }
        self.proto = proto;
        let proto_number = match proto {
            Proto::Resp2 => 2,
            Proto::Resp3 => 3,
        };
        Value::Map(vec![
            (Value::bulk("server"), Value::bulk("holdline")),
            (
                Value::bulk("version"),
                Value::bulk(env!("CARGO_PKG_VERSION")),
            ),
            (Value::bulk("proto"), Value::Integer(proto_number)),
            (Value::bulk("id"), Value::Integer(self.id as i64)),
            (Value::bulk("mode"), Value::bulk("standalone")),
            (Value::bulk("role"), Value::bulk("master")),
            (Value::bulk("modules"), Value::Array(vec![])),
        ])
    }

    fn auth(&mut self, with_user: bool, token: &[u8]) -> Value {
        if self.shared.token.is_none() && !with_user {
            // Redis's answer, so a misconfigured client notices.
            return Value::error(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            );
        }
        if !self.token_matches(token) {
            return wrongpass();
        }
        self.authenticated = true;
        Value::ok()
    }

    fn set_name(&mut self, name: Vec<u8>) -> Value {
        if let Err(refusal) = check_client_name(&name) {
            return refusal;
        }
        self.name = (!name.is_empty()).then_some(name);
        Value::ok()
    }
}

fn slot(lock: &str, key: &str) -> Box<str> {
    // Neither a lock name nor a valid key holds NUL, so the pair is unambiguous.
    format!("{lock}\0{key}").into_boxed_str()
}

fn not_ours(id: i64) -> Value {
    invalid_store(&format!("lease {id} is not held by this connection"))
}

const HELLO_NOAUTH: &str = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time";

fn noauth() -> Value {
    Value::error("NOAUTH Authentication required.")
}

fn wrongpass() -> Value {
    Value::error("WRONGPASS invalid username-password pair or user is disabled.")
}

fn check_client_name(name: &[u8]) -> Result<(), Value> {
    if name.iter().all(|&b| (b'!'..=b'~').contains(&b)) {
        Ok(())
    } else {
        Err(Value::error(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(token: Option<&str>) -> Session {
        let shared = Shared::new(Store::new(), token.map(|t| t.as_bytes().to_vec()), 1 << 19);
        Session::new(Arc::new(shared))
    }

    fn run(s: &mut Session, words: &[&str]) -> Value {
        match s.execute(words.iter().map(|w| w.as_bytes().to_vec()).collect()) {
            Outcome::Reply(v) | Outcome::Close(v) => v,
            Outcome::Wait(_) => panic!("{words:?} waits"),
        }
    }

    #[test]
    fn a_token_gates_everything_but_hello_auth_and_quit() {
        let mut s = session(Some("sekret"));
        assert_eq!(run(&mut s, &["PING"]), noauth());
        assert_eq!(run(&mut s, &["FROB"]), noauth());
        assert!(matches!(run(&mut s, &["HELLO", "3"]), Value::Map(_)));
        assert_eq!(run(&mut s, &["AUTH", "nope"]), wrongpass());
        assert_eq!(
            run(&mut s, &["HELLO", "3", "AUTH", "default", "sekre"]),
            wrongpass()
        );
        assert_eq!(s.frame_limit(), UNAUTHENTICATED_MAX_FRAME);
        assert_eq!(run(&mut s, &["AUTH", "anyone", "sekret"]), Value::ok());
        assert_eq!(run(&mut s, &["PING"]), Value::simple("PONG"));
        assert_eq!(s.frame_limit(), 1 << 19);
    }

    #[test]
    fn try_hold_release_and_the_lost_second_release() {
        let mut s = session(None);
        let Value::Array(pair) = run(&mut s, &["TRYHOLD", "inv", "9"]) else {
            panic!("not granted")
        };
        let id = pair[0].as_integer().unwrap().to_string();
        assert_eq!(run(&mut s, &["TRYHOLD", "inv", "9"]), Value::Null);
        assert_eq!(
            run(&mut s, &["HOLD", "inv", "9"]),
            Value::error(
                "INVALID lock inv: key \"9\": hold inside a hold of the same key: invalid"
            )
        );
        assert_eq!(run(&mut s, &["RENEW", &id]), Value::ok());
        assert_eq!(run(&mut s, &["RELEASE", &id]), Value::ok());
        assert_eq!(
            run(&mut s, &["RELEASE", &id]),
            Value::Error(format!(
                "INVALID store: lease {id} is not held by this connection: invalid"
            ))
        );
    }

    fn grant_id(v: Value) -> String {
        let Value::Array(pair) = v else {
            panic!("not granted: {v:?}")
        };
        pair[0].as_integer().unwrap().to_string()
    }

    #[test]
    fn commands_read_keep_leases_alive_past_their_ttl() {
        let mut s = session(None);
        let id = grant_id(run(&mut s, &["TRYHOLD", "inv", "1", "TTL", "1000"]));
        // 1.5 s of commands read every 100 ms: past the 1 s ttl, which only
        // their renewals can get it through.
        for _ in 0..15 {
            std::thread::sleep(Duration::from_millis(100));
            s.renew_all();
        }
        assert_eq!(run(&mut s, &["RENEW", &id]), Value::ok());
    }

    #[test]
    fn bad_names_and_keys_carry_core_texts() {
        let mut s = session(None);
        let Value::Error(text) = run(&mut s, &["TRYHOLD", "bad name", "k"]) else {
            panic!()
        };
        assert!(text.starts_with("INVALID lock \"bad name\": "), "{text}");
        let Value::Error(text) = run(&mut s, &["TRYHOLD", "inv", "a\nb"]) else {
            panic!()
        };
        assert_eq!(
            text,
            "INVALID lock inv: key \"a\\nb\": the key holds a control character: invalid"
        );
        let Value::Error(text) = run(&mut s, &["TRYHOLD", "inv", "1", "TTL", "0"]) else {
            panic!()
        };
        assert!(text.starts_with("INVALID "), "{text}");
    }
}
