//! Holding a lock's keys over the connection: `hold`, `try_hold`,
//! `key(..).wait(..).permits(..)`, and the handle-style [`HeldLease`] they
//! are built on.
//!
//! Each hold takes a pooled connection for itself: `HOLD` (or `TRYHOLD`) on
//! it, the closure, then `RELEASE`, and the connection goes back to the
//! pool. Its background task renews every third of the ttl from the moment
//! `HOLD` is sent. A hold future dropped while its `HOLD` waits closes its
//! connection, which takes it out of the line on the server at once.

use crate::cluster::{Redirect, CLUSTER_DOWN_PAUSE};
use crate::driver::{local_deadline, Conn};
use crate::error::Error;
use crate::follow::{grant, new_secret, Follow, Home, SharedHome};
use crate::lease::{Lease, LeaseShared, Moved};
use crate::lock::{unexpected, Lock};
use crate::node::Node;
use crate::route::Route;
use crate::store::clamp_ms;
use crate::texts;
use holdline::wire::{self, Scope};
use holdline::{ErrorKind, IntoKey, DEFAULT_WAIT};
use holdline_resp::Value;
use std::fmt;
use std::io;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A `HOLD` or `TRYHOLD`'s arguments, borrowed, on the stack: at most
/// `HOLD lock key WAIT ms TTL ms MAXHOLD ms PERMITS n TAKE m NOTE text
/// BYPASS ms SECRET s`.
#[derive(Default)]
struct Args<'a> {
    items: [&'a [u8]; 19],
    len: usize,
}

impl<'a> Args<'a> {
    fn push(&mut self, arg: &'a [u8]) -> &mut Self {
        self.items[self.len] = arg;
        self.len += 1;
        self
    }

    fn as_slice(&self) -> &[&'a [u8]] {
        &self.items[..self.len]
    }
}

/// What one `HOLD` or `TRYHOLD` answered.
enum Sent {
    Granted(Granted),
    /// A try found the key held.
    Held,
    /// An error reply: the server's answer, or a redirect; `secret`:
    /// to a `HOLD` that carried the hold's secret.
    Refused {
        e: Error,
        secret: bool,
    },
}

/// A send's error reply; `secret`: to a `HOLD` that carried the hold's
/// secret; `by`: the node that answered.
struct Refused<'a> {
    e: Error,
    secret: bool,
    by: &'a Node,
}

/// How a hold's next send asks for its key.
struct Ask<'a> {
    mode: Mode,
    take: Take,
    note: Option<&'a str>,
    /// Sent (`SECRET`) to a node that can hand leases over: with it the
    /// lease, or the hold's place in line, can follow a hand-over. Made
    /// on first use: a hold of a node that cannot pays nothing for it.
    secret: OnceLock<String>,
    /// Set once the node answered a waiting `HOLD` `MOVED` (it handed
    /// the line over): from then on the hold sends `REATTACH lock key
    /// secret`, to take its place at the new node instead of asking again.
    handed: Option<Handed>,
}

impl Ask<'_> {
    /// The hold's secret, the same for every send.
    fn secret(&self) -> &str {
        self.secret.get_or_init(new_secret)
    }
}

/// A waiting `HOLD`'s line handed over: from the node that answered
/// `MOVED`, to the node it named.
struct Handed {
    from: String,
    to: String,
}

/// A grant, on the connection it was granted on, with its `HOLD`'s send
/// time.
struct Granted {
    conn: Conn,
    id: i64,
    fence: u64,
    sent: tokio::time::Instant,
}

/// How many permits a [`KeyHold`] asks for, as the caller said it.
#[derive(Clone, Copy, Debug)]
enum Want {
    One,
    Permits(u32),
    Exclusive,
}

/// The permits one hold takes, checked against the lock's count.
#[derive(Clone, Copy, Debug)]
struct Take {
    permits: u32,
    /// `exclusive()`: `TAKE ALL`, so the server gives all it has.
    all: bool,
}

impl Take {
    const ONE: Take = Take {
        permits: 1,
        all: false,
    };

    /// `TAKE`'s argument; `None` for one permit, which is never sent
    /// (servers without permits keep working for plain locks).
    fn arg(self) -> Option<String> {
        match self {
            Take { permits: 1, .. } => None,
            Take { all: true, .. } => Some("ALL".to_owned()),
            Take { permits, .. } => Some(permits.to_string()),
        }
    }
}

/// `want` of a lock of `total` permits, checked as the core checks it, with
/// its text (the server would answer the same, a round trip later).
fn take(lock: &str, key: &str, total: u32, want: Want) -> Result<Take, Error> {
    match want {
        Want::One => Ok(Take::ONE),
        Want::Exclusive => Ok(Take {
            permits: total,
            all: total != 1,
        }),
        Want::Permits(m) if (1..=total).contains(&m) => Ok(Take {
            permits: m,
            all: false,
        }),
        Want::Permits(m) => {
            let what = format!("{m} permits asked of a lock of {total}");
            let kind = ErrorKind::Invalid;
            let scope = Scope::Key(lock, key);
            Err(Error::new(kind, wire::error(kind, scope, what).to_string()))
        }
    }
}

/// How a hold asks for its key.
#[derive(Clone, Copy)]
enum Mode {
    /// `HOLD ... WAIT ms`.
    Wait(u64),
    /// `TRYHOLD`: never waits.
    Try,
}

impl Mode {
    fn wait(self) -> Duration {
        match self {
            Mode::Wait(ms) => Duration::from_millis(ms),
            Mode::Try => Duration::ZERO,
        }
    }
}

/// A hold's time, from its call (texts.json's rules `wait_left` and
/// `wait_grace`): a `HOLD` sent again after `MOVED` or `CLUSTERDOWN`
/// carries only the wait left, and the hold as a whole gives up at the
/// wait plus max(ttl, 1 s), whatever it is doing then. Without one
/// deadline, each resend would wait its whole wait again.
#[derive(Clone, Copy)]
struct HoldTime {
    wait: Duration,
    grace: Duration,
    wait_ends: tokio::time::Instant,
    /// Whether a `HOLD` was sent already: the first carries the whole wait.
    sent: bool,
}

impl HoldTime {
    fn from_now(mode: Mode, ttl: Duration) -> HoldTime {
        let wait = mode.wait();
        HoldTime {
            wait,
            grace: ttl.max(MIN_PATIENCE),
            wait_ends: tokio::time::Instant::now() + wait,
            sent: false,
        }
    }

    fn give_up_at(self) -> tokio::time::Instant {
        self.wait_ends + self.grace
    }

    /// `WAIT`'s argument for the `HOLD` sent now: the whole wait the
    /// first time, then the wait left, in whole milliseconds.
    fn wait_arg(&mut self) -> String {
        let again = std::mem::replace(&mut self.sent, true);
        let now = tokio::time::Instant::now();
        let wait = if again {
            self.wait_ends.saturating_duration_since(now)
        } else {
            self.wait
        };
        wait.as_millis().to_string()
    }

    fn silent(self, lock: &str, key: &str) -> Error {
        texts::wait_silent(lock, key, self.wait, self.grace)
    }
}

impl Lock {
    /// Holds `key` while `f` runs, waiting in its line up to 10 s; answers
    /// what `f` answered. Fails `in use` past the wait, `lost` if the lease
    /// was lost before `f` returned (the server's text; `f`'s value is
    /// dropped), and with the server's error otherwise.
    pub async fn hold<'k, K: IntoKey<'k>, R>(
        &self,
        key: K,
        f: impl AsyncFnOnce(&Lease) -> R,
    ) -> Result<R, Error> {
        self.key(key.into_key()).hold(f).await
    }

    /// Runs `f` only if `key` is free now: `Ok(None)`, `f` not run, when held.
    pub async fn try_hold<'k, K: IntoKey<'k>, R>(
        &self,
        key: K,
        f: impl AsyncFnOnce(&Lease) -> R,
    ) -> Result<Option<R>, Error> {
        self.key(key.into_key()).try_hold(f).await
    }

    /// One key, with options: `lock.key(&k).wait(d).hold(..)`.
    pub fn key<'a, K: IntoKey<'a>>(&'a self, key: K) -> KeyHold<'a> {
        KeyHold {
            lock: self,
            key: wire::key_text(key),
            wait: DEFAULT_WAIT,
            want: Want::One,
            note: None,
        }
    }

    /// A handle-style lease, waiting up to 10 s: renewed in the background,
    /// let go by [`HeldLease::release`] or on drop. Fails `in use` past the
    /// wait, and with the server's error otherwise (a bad key, the line
    /// full, the connection gone).
    pub async fn acquire<'k, K: IntoKey<'k>>(&self, key: K) -> Result<HeldLease, Error> {
        self.key(key.into_key()).acquire().await
    }

    /// A handle-style lease only if `key` is free now: `None` when it is
    /// held. Fails with the server's error (a bad key, the connection gone).
    pub async fn try_acquire<'k, K: IntoKey<'k>>(
        &self,
        key: K,
    ) -> Result<Option<HeldLease>, Error> {
        self.key(key.into_key()).try_acquire().await
    }

    /// `HOLD` or `TRYHOLD` on a connection of its own, sent to the node
    /// that serves the key (again after `MOVED` or `CLUSTERDOWN`; as
    /// `REATTACH` after a waiting `HOLD` was handed over); `None` when a
    /// try found the key held (or, with several permits, found too few
    /// free or someone waiting).
    async fn acquire_text(
        &self,
        key: String,
        mode: Mode,
        take: Take,
        note: Option<&str>,
    ) -> Result<Option<HeldLease>, Error> {
        wire::check_key(&self.name, &key).map_err(|e| Error::from_core(&e))?;
        let ttl = Duration::from_millis(self.ttl_ms);
        let mut time = HoldTime::from_now(mode, ttl);
        let give_up = time.give_up_at();
        let mut ask = Ask {
            mode,
            take,
            note,
            secret: OnceLock::new(),
            handed: None,
        };
        let mut route = Route::new(&self.store.inner, &key, Scope::Key(&self.name, &key));
        let routed = async {
            loop {
                let node = route.node().await?;
                let sent = match self.send_hold(&node, &key, &ask, &mut time).await {
                    // The node it was handed to is not up yet, or one
                    // that left was named: back to the one named first.
                    Err(e) if e.is_connection() && ask.handed.is_some() => {
                        self.back_to_handed(&mut route, &ask).await;
                        continue;
                    }
                    sent => sent?,
                };
                match sent {
                    Sent::Granted(granted) => return Ok(Some((node, granted))),
                    Sent::Held => return Ok(None),
                    Sent::Refused { e, secret } => {
                        let refused = Refused {
                            e,
                            secret,
                            by: &node,
                        };
                        self.again(&mut route, &mut ask, refused).await?
                    }
                }
            }
        };
        // Bounds the routing (connecting, the CLUSTERDOWN pause, the map);
        // a HOLD's own reply is bounded by the same instant in `send_hold`,
        // which tokio polls first, so a silent node is still suspected.
        // Dropping `routed` on time drops a HOLD's connection with it.
        let answered = tokio::time::timeout_at(give_up, routed).await;
        let Some((node, granted)) = answered.map_err(|_| time.silent(&self.name, &key))?? else {
            return Ok(None);
        };
        let lease = LeaseShared::new(
            granted.id,
            granted.fence,
            take.permits,
            self.name.clone(),
            key.into(),
            ttl,
        );
        let secret = ask.secret.take().unwrap_or_default();
        self.held(node, granted, lease, secret).await.map(Some)
    }

    /// After a refused send, where the next goes: a waiting `HOLD` with
    /// the secret answered `MOVED` was handed over with its line, and asks
    /// again as `REATTACH`; a `REATTACH` answered `LOST` (nothing was
    /// handed over under the secret: a stale map's `MOVED` reads the same)
    /// sends the `HOLD` again there, as after any `MOVED`; one answered
    /// `MOVED` back to the node that left waits for
    /// the new owner's claim. Else as any command's refusal.
    async fn again(
        &self,
        route: &mut Route<'_>,
        ask: &mut Ask<'_>,
        refused: Refused<'_>,
    ) -> Result<(), Error> {
        let Refused { e, secret, by } = refused;
        let moved = match Redirect::of(&e) {
            Some(Redirect::Moved(_, to)) => Some(to),
            _ => None,
        };
        let waited = matches!(ask.mode, Mode::Wait(ms) if ms > 0);
        if let (Some(to), true, true, None) = (&moved, secret, waited, &ask.handed) {
            let from = by.addr.to_string();
            ask.handed = Some(Handed {
                from,
                to: to.clone(),
            });
        }
        if let Some(handed) = &ask.handed {
            if e.kind() == ErrorKind::Lost {
                // Nothing was handed over under the secret: the MOVED was a
                // stale map's (or the wait joined as the partition was
                // sealed). The HOLD goes again, there, with its wait left.
                ask.handed = None;
                route.to(by.addr.to_string());
                return Ok(());
            }
            if moved.as_deref() == Some(handed.from.as_str()) {
                self.back_to_handed(route, ask).await;
                return Ok(());
            }
        }
        route.again_after(e).await
    }

    /// A pause (the partition is between owners), then the next try to
    /// the node the hand-over named.
    async fn back_to_handed(&self, route: &mut Route<'_>, ask: &Ask<'_>) {
        tokio::time::sleep(CLUSTER_DOWN_PAUSE).await;
        if let Some(handed) = &ask.handed {
            route.to(handed.to.clone());
        }
    }

    /// The [`HeldLease`] of a grant: it follows a hand-over when its node
    /// took the secret; its deadline set and it registered on its
    /// connection (see `confirm_grant`).
    async fn held(
        &self,
        node: Arc<Node>,
        granted: Granted,
        lease: Arc<LeaseShared>,
        secret: String,
    ) -> Result<HeldLease, Error> {
        let ttl = lease.ttl();
        let follow = granted.conn.handover().then(|| {
            let store = self.store.inner.clone();
            Arc::new(Follow { store, secret, ttl })
        });
        let home: SharedHome = Arc::new(tokio::sync::Mutex::new(Home {
            conn: Some(granted.conn),
            node,
        }));
        // Before it is registered: a `moved` push may have come already.
        if let Some(follow) = &follow {
            lease.set_on_moved(Some(follow.on_moved(&home)));
        }
        {
            let home = home.lock().await;
            let conn = home.conn.as_ref().expect("just granted");
            confirm_grant(conn, &lease, granted.sent, ttl).await?;
        }
        Ok(HeldLease {
            lease: Lease { shared: lease },
            home,
            follow,
            store: self.store.id(),
            ttl,
        })
    }

    /// One `HOLD`, `TRYHOLD` or `REATTACH` on a connection of `node`.
    async fn send_hold(
        &self,
        node: &Node,
        key: &str,
        ask: &Ask<'_>,
        time: &mut HoldTime,
    ) -> Result<Sent, Error> {
        let conn = node.checkout(Scope::Key(&self.name, key)).await?;
        // Renew while the HOLD waits, too: from now on.
        conn.renew_for(Some(Duration::from_millis(self.ttl_ms)));
        let wait_arg = match ask.mode {
            Mode::Wait(_) => time.wait_arg(),
            Mode::Try => String::new(),
        };
        let take_arg = ask.take.arg();
        let reattach = ask.handed.is_some();
        let secret = (conn.handover() && !reattach).then(|| ask.secret());
        let args = match reattach {
            true => reattach_args(&self.name, key, ask.secret()),
            false => self.hold_args(key, ask, &wait_arg, take_arg.as_deref(), secret),
        };
        // A server that answers nothing past the wait (and a ttl more) is
        // stalled or cut off: give up rather than hang. Returning drops
        // `conn`, which closes the connection: the server takes the HOLD
        // out of its line, and nothing can be granted to it later.
        let request = conn.request_timed(args.as_slice());
        let Ok(reply) = tokio::time::timeout_at(time.give_up_at(), request).await else {
            // A silent node, as a failed one, may have lost its slots.
            node.suspect();
            return Err(time.silent(&self.name, key));
        };
        match reply {
            Ok((Value::Null, _)) if matches!(ask.mode, Mode::Try) => {
                conn.renew_for(None);
                node.give_back(conn);
                Ok(Sent::Held)
            }
            Ok((v, sent)) => {
                let (id, fence) =
                    grant(&v).ok_or_else(|| unexpected(Scope::Key(&self.name, key), &v))?;
                Ok(Sent::Granted(Granted {
                    conn,
                    id,
                    fence,
                    sent,
                }))
            }
            Err(e) if e.is_connection() => Err(closed_for_key(&self.name, key, e)),
            Err(e) => {
                conn.renew_for(None);
                node.give_back(conn);
                let secret = secret.is_some();
                Ok(Sent::Refused { e, secret })
            }
        }
    }

    /// `HOLD lock key WAIT ms TTL ms [MAXHOLD ms] [PERMITS n] [TAKE m|ALL]
    /// [NOTE text] [BYPASS ms]`, or `TRYHOLD` without the wait.
    fn hold_args<'a>(
        &'a self,
        key: &'a str,
        ask: &Ask<'a>,
        wait_arg: &'a str,
        take_arg: Option<&'a str>,
        secret: Option<&'a str>,
    ) -> Args<'a> {
        let (mode, note) = (ask.mode, ask.note);
        let mut args = Args::default();
        let verb: &[u8] = match mode {
            Mode::Wait(_) => b"HOLD",
            Mode::Try => b"TRYHOLD",
        };
        args.push(verb)
            .push(self.name.as_bytes())
            .push(key.as_bytes());
        if let Mode::Wait(_) = mode {
            args.push(b"WAIT").push(wait_arg.as_bytes());
        }
        args.push(b"TTL").push(self.ttl_arg.as_bytes());
        if let Some(max_hold) = &self.max_hold_arg {
            args.push(b"MAXHOLD").push(max_hold.as_bytes());
        }
        if let Some(permits) = &self.permits_arg {
            args.push(b"PERMITS").push(permits.as_bytes());
        }
        if let Some(take) = take_arg {
            args.push(b"TAKE").push(take.as_bytes());
        }
        if let Some(note) = note {
            args.push(b"NOTE").push(note.as_bytes());
        }
        if let Some(bound) = &self.bypass_arg {
            args.push(b"BYPASS").push(bound.as_bytes());
        }
        if let Some(secret) = secret {
            args.push(b"SECRET").push(secret.as_bytes());
        }
        args
    }
}

/// `REATTACH lock key secret`.
fn reattach_args<'a>(lock: &'a str, key: &'a str, secret: &'a str) -> Args<'a> {
    let mut args = Args::default();
    args.push(b"REATTACH")
        .push(lock.as_bytes())
        .push(key.as_bytes())
        .push(secret.as_bytes());
    args
}

/// Gives a fresh grant its first deadline (the `HOLD`'s send time + ttl -
/// margin: the server granted after reading it) and registers it, so that
/// later replies move the deadline on. A grant that arrives past that
/// deadline (its `HOLD` waited about a ttl) is proved alive first by a
/// `RENEW`, which the server answers `OK` only for a live lease.
async fn confirm_grant(
    conn: &Conn,
    lease: &Arc<LeaseShared>,
    hold_sent: tokio::time::Instant,
    ttl: Duration,
) -> Result<(), Error> {
    let first = local_deadline(hold_sent, ttl);
    if std::time::Instant::now() < first {
        lease.extend_deadline(first);
        conn.register(lease);
        return Ok(());
    }
    let id = lease.id().to_string();
    let args = ["RENEW", id.as_str()];
    let renewed = tokio::time::timeout(ttl.max(MIN_PATIENCE), conn.request_timed(&args));
    match renewed.await {
        Ok(Ok((_, renew_sent))) => {
            lease.extend_deadline(local_deadline(renew_sent, ttl));
            conn.register(lease);
            Ok(())
        }
        // The server's `LOST` text, or the connection's failure.
        Ok(Err(e)) if e.kind() == ErrorKind::Lost => Err(e),
        Ok(Err(e)) => Err(texts::lost_connection(&lease.lock, &lease.key, io_of(&e))),
        Err(_) => Err(texts::lost_silent(&lease.lock, &lease.key, ttl)),
    }
}

/// An I/O error standing for `e`, as a `source()`.
fn io_of(e: &Error) -> io::Error {
    e.io_error()
        .map(|io| io::Error::new(io.kind(), io.to_string()))
        .unwrap_or_else(|| io::Error::other(e.to_string()))
}

tokio::task_local! {
    /// The keys the enclosing holds of this task hold: (store, lock, key).
    static HOLDING: Vec<(usize, Arc<str>, Box<str>)>;
}

/// Runs `f` with `held`'s key added to this task's enclosing holds.
async fn run_holding<R>(held: &HeldLease, f: impl AsyncFnOnce(&Lease) -> R) -> R {
    let mut holding = HOLDING.try_with(Vec::clone).unwrap_or_default();
    holding.push((
        held.store,
        held.lease.shared.lock.clone(),
        held.lease.shared.key.clone(),
    ));
    HOLDING.scope(holding, f(held.lease())).await
}

/// A wait in milliseconds: zero stays zero (do not wait), anything below
/// 1 ms rounds up to 1 ms, as in the core.
fn wait_ms(d: Duration) -> u64 {
    if d.is_zero() {
        0
    } else {
        clamp_ms(d).max(1)
    }
}

/// The least a call waits for the server beyond its own wait.
const MIN_PATIENCE: Duration = Duration::from_secs(1);

/// A call about one key lost its connection (before any lease was held).
fn closed_for_key(lock: &str, key: &str, e: Error) -> Error {
    texts::connection_closed_key(lock, key, io_of(&e))
}

/// One key of a lock, with options; from [`Lock::key`].
#[derive(Debug)]
#[must_use = "a KeyHold does nothing until .hold(), .try_hold() or .acquire()"]
pub struct KeyHold<'l> {
    lock: &'l Lock,
    key: String,
    wait: Duration,
    want: Want,
    note: Option<String>,
}

impl KeyHold<'_> {
    /// How long to stand in line (default 10 s; zero: fail `in use` at once
    /// if held; below 1 ms rounds up to 1 ms).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Takes `permits` of the key's permits (default 1; 1 to the lock's
    /// count, else the hold fails `invalid` at once, with the core's text:
    /// `lock providers: key "stripe": 6 permits asked of a lock of 5: invalid`).
    pub fn permits(mut self, permits: u32) -> Self {
        self.want = Want::Permits(permits);
        self
    }

    /// Takes all the key's permits: alone with the key (a writer of a
    /// read-write lock). Sent as `TAKE ALL`.
    pub fn exclusive(mut self) -> Self {
        self.want = Want::Exclusive;
        self
    }

    /// Attaches `note` to the lease (`NOTE text`: a leader's address, a job
    /// id), shown wherever the holder is: `INSPECT` ([`Holder::note`](crate::Holder::note)),
    /// `OBSERVE`, `HISTORY`, the server's page. 1 to 1,024 bytes of UTF-8
    /// without control characters; the server refuses anything else,
    /// `invalid`: `lock L: key "K": a note is 1 to 1024 bytes of UTF-8
    /// without control characters: invalid`. [`HeldLease::set_note`]
    /// replaces it later.
    pub fn note(mut self, note: &str) -> Self {
        self.note = Some(note.to_owned());
        self
    }

    /// The permits asked for, checked against the lock's count.
    fn asked(&self) -> Result<Take, Error> {
        let lock = self.lock;
        take(&lock.name, &self.key, lock.permits, self.want)
    }

    /// Holds the key while `f` runs; see [`Lock::hold`]. A hold of a key
    /// that an enclosing hold of this task holds fails `invalid` at once
    /// (it would wait for itself).
    pub async fn hold<R>(self, f: impl AsyncFnOnce(&Lease) -> R) -> Result<R, Error> {
        self.asked()?;
        let store = self.lock.store.id();
        let name = &self.lock.name;
        let nested = HOLDING
            .try_with(|held| {
                held.iter()
                    .any(|(s, n, k)| *s == store && n == name && **k == *self.key)
            })
            .unwrap_or(false);
        if nested {
            return Err(Error::local(
                ErrorKind::Invalid,
                Scope::Key(name, &self.key),
                "hold inside a hold of the same key",
            ));
        }
        let held = self.acquire().await?;
        let r = run_holding(&held, f).await;
        held.release().await.map(|()| r)
    }

    /// Runs `f` only if the key is free now; see [`Lock::try_hold`]. With
    /// several permits: only if its permits fit now and nobody waits.
    /// `None` otherwise; fails `lost` if the lease was lost before `f`
    /// returned, and with the server's error otherwise.
    pub async fn try_hold<R>(self, f: impl AsyncFnOnce(&Lease) -> R) -> Result<Option<R>, Error> {
        let Some(held) = self.try_acquire().await? else {
            return Ok(None);
        };
        let r = run_holding(&held, f).await;
        held.release().await.map(|()| Some(r))
    }

    /// A handle-style lease, waiting up to `wait`. Fails `in use` past the
    /// wait, `invalid` for more permits than the lock has, and with the
    /// server's error otherwise.
    pub async fn acquire(self) -> Result<HeldLease, Error> {
        let take = self.asked()?;
        let mode = Mode::Wait(wait_ms(self.wait));
        let note = self.note.as_deref();
        let held = self.lock.acquire_text(self.key, mode, take, note).await?;
        // A waiting HOLD answers a grant or an error, never a null.
        held.ok_or_else(|| unexpected(Scope::Lock(&self.lock.name), &Value::Null))
    }

    /// A handle-style lease only if the key is free now.
    /// With several permits: only if its permits fit now and nobody waits.
    /// `None` otherwise; fails `invalid` for more permits than the lock
    /// has, and with the server's error otherwise.
    pub async fn try_acquire(self) -> Result<Option<HeldLease>, Error> {
        let take = self.asked()?;
        let note = self.note.as_deref();
        self.lock
            .acquire_text(self.key, Mode::Try, take, note)
            .await
    }
}

/// A lease not tied to a closure: its connection's task renews it every
/// third of the ttl until [`release`](HeldLease::release) or drop (which
/// sends `RELEASE` without waiting for the answer). Derefs to [`Lease`].
/// Held of a node that can hand leases over, it follows its partition to
/// the next node at a planned hand-over, and is renewed and released there.
pub struct HeldLease {
    lease: Lease,
    /// Its connection (`None` once released) and node; a re-attach moves
    /// both.
    home: SharedHome,
    /// What follows a hand-over; `None`: the node took no secret.
    follow: Option<Arc<Follow>>,
    /// The store's id (`Store::id`).
    store: usize,
    ttl: Duration,
}

impl HeldLease {
    /// The lease (what a `hold` closure gets).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Renews now (`RENEW`); `Err` (`lost`, the server's text) once lost.
    pub async fn renew(&self) -> Result<(), Error> {
        let mut home = self.home.lock().await;
        match self.on_home(&mut home, &["RENEW"]).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_connection() => Err(self.lost_on_failure(e)),
            Err(e) => Err(e),
        }
    }

    /// Replaces the lease's note (`NOTE lease text`; see [`KeyHold::note`]
    /// for what a note may be). `Err` (`lost`, the server's text) once the
    /// lease is lost, looked at here first: a lease past its local deadline
    /// fails without a round trip.
    pub async fn set_note(&self, note: &str) -> Result<(), Error> {
        self.lease.check()?;
        let mut home = self.home.lock().await;
        match self.on_home(&mut home, &["NOTE", note]).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_connection() => Err(self.lost_on_failure(e)),
            Err(e) => Err(e),
        }
    }

    /// Lets the key go (`RELEASE`), on the node the lease lives on now.
    /// `Err` (`lost`, the server's text) when the lease had been lost
    /// before, or the connection dropped.
    pub async fn release(self) -> Result<(), Error> {
        let home = self.home.clone();
        let mut home = home.lock().await;
        self.lease.shared.set_on_moved(None);
        if let Some(follow) = &self.follow {
            let followed = follow.follow(&self.lease.shared, &mut home).await;
            // It could not follow (now, or before): its old node no longer
            // holds it, and the error says why. Dropping the connection
            // closes it, which lets go of anything left there.
            let stranded = self.lease.shared.is_moving() && self.lease.is_lost();
            if followed.is_err() || stranded {
                home.conn = None;
                return Err(self.lease.check().expect_err("lost"));
            }
        }
        let conn = home
            .conn
            .as_ref()
            .expect("a HeldLease has its connection until released");
        if conn.went_silent() || self.lease.shared.past_deadline() {
            // Lost by silence: the server may not read this connection for
            // a long while, and a late `OK` must not turn the loss into a
            // success. Dropping the connection closes it, which lets the
            // key go whenever the server reads again.
            home.conn = None;
            return Err(self.lost_on_failure(Error::new(ErrorKind::Lost, "")));
        }
        let reply = self.on_home(&mut home, &["RELEASE"]).await;
        let conn = home.conn.take().expect("its connection until now");
        conn.renew_for(None);
        conn.unregister();
        match reply {
            Ok(_) => {
                home.node.give_back(conn);
                Ok(())
            }
            Err(e) if e.is_connection() => Err(self.lost_on_failure(e)),
            Err(e) => {
                home.node.give_back(conn);
                Err(e)
            }
        }
    }

    /// `verb lease-id rest...` on the lease's connection, after following
    /// the lease if it moved; answered `MOVED` (it moved just now: the
    /// push came first, so it is followed next), sent again there once.
    async fn on_home(&self, home: &mut Home, words: &[&str]) -> Result<Value, Error> {
        let mut tries = 0;
        loop {
            if let Some(follow) = &self.follow {
                follow.follow(&self.lease.shared, home).await?;
            }
            let conn = home
                .conn
                .as_ref()
                .expect("a HeldLease has its connection until released");
            let id = self.lease.id().to_string();
            let mut args = vec![words[0], id.as_str()];
            args.extend_from_slice(&words[1..]);
            let reply = self.answered(conn.request(&args)).await;
            tries += 1;
            match reply {
                Err(e) if tries < 2 && self.moved_by(&e) => continue,
                reply => return reply,
            }
        }
    }

    /// Whether `e` says the lease moved (`-MOVED slot addr`, to a lease
    /// that can follow): made sure it is followed, had the push not said so.
    fn moved_by(&self, e: &Error) -> bool {
        let (Some(_), Some(Redirect::Moved(slot, addr))) = (&self.follow, Redirect::of(e)) else {
            return false;
        };
        if !self.lease.shared.is_moving() {
            self.lease.shared.moved(Moved { slot, addr });
        }
        true
    }

    /// The reply of `request`, or a time-out error when the server answers
    /// nothing for a ttl (the lease is lost by then).
    async fn answered(
        &self,
        request: impl std::future::Future<Output = Result<Value, Error>>,
    ) -> Result<Value, Error> {
        let patience = self.ttl.max(MIN_PATIENCE);
        tokio::time::timeout(patience, request)
            .await
            .unwrap_or_else(|_| {
                let e = io::Error::new(io::ErrorKind::TimedOut, "nothing within the ttl");
                Err(texts::connection_closed(e))
            })
    }

    /// The connection failed under the lease: its task marked it lost (or
    /// the server answered nothing for a ttl, which loses it too).
    fn lost_on_failure(&self, e: Error) -> Error {
        if let Some(lost) = self.lease.shared.lost_error() {
            return lost.clone();
        }
        let (lock, key) = (self.lease.lock_name(), self.lease.key());
        let lost = match e.io_error().map(io::Error::kind) {
            Some(io::ErrorKind::TimedOut) => texts::lost_silent(lock, key, self.ttl),
            _ => {
                let io = io::Error::other(e.to_string());
                texts::lost_connection(lock, key, io)
            }
        };
        self.lease.shared.mark_lost(lost.clone());
        lost
    }
}

/// Lets a dropped lease's key go without waiting: the task writes the
/// `RELEASE` and discards the answer; the connection is reusable at once,
/// its next command queued behind this one.
fn release_detached(home: &mut Home, lease: &LeaseShared) {
    if let Some(conn) = home.conn.take() {
        conn.send_detached(&["RELEASE", &lease.id().to_string()]);
        conn.renew_for(None);
        conn.unregister();
        home.node.give_back(conn);
    }
}

impl Deref for HeldLease {
    type Target = Lease;

    fn deref(&self) -> &Lease {
        &self.lease
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        let lease = self.lease.shared.clone();
        lease.set_on_moved(None);
        match self.home.try_lock() {
            Ok(mut home) => release_detached(&mut home, &lease),
            // A re-attach holds it: let go where it leaves the lease.
            Err(_) => {
                let home = self.home.clone();
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        release_detached(&mut *home.lock().await, &lease);
                    });
                }
            }
        }
    }
}

impl fmt::Debug for HeldLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HeldLease").field(&self.lease).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts outside the lock's, through the core: the same kind and text.
    #[test]
    fn permits_asked_fail_as_the_core_does() {
        let store = holdline::Store::new();
        let core_lock = store.lock("providers").permits(5).open().unwrap();
        for m in [0, 6, u32::MAX] {
            let core = core_lock.key("stripe").permits(m).hold(|_| ()).unwrap_err();
            let ours = take("providers", "stripe", 5, Want::Permits(m)).unwrap_err();
            assert_eq!(
                (ours.kind(), ours.to_string()),
                (core.kind(), core.to_string())
            );
        }
        let six = take("providers", "stripe", 5, Want::Permits(6)).unwrap_err();
        assert_eq!(
            six.to_string(),
            "lock providers: key \"stripe\": 6 permits asked of a lock of 5: invalid"
        );
    }

    /// `TAKE` is sent only for more than one permit; `ALL` for exclusive.
    #[test]
    fn take_is_sent_only_when_not_one() {
        let arg = |total, want| take("l", "k", total, want).unwrap().arg();
        assert_eq!(arg(5, Want::One), None);
        assert_eq!(arg(5, Want::Permits(1)), None);
        assert_eq!(arg(5, Want::Permits(2)).as_deref(), Some("2"));
        assert_eq!(arg(5, Want::Exclusive).as_deref(), Some("ALL"));
        assert_eq!(arg(1, Want::Exclusive), None);
        let all = take("l", "k", 5, Want::Exclusive).unwrap();
        assert_eq!(all.permits, 5);
    }
}
