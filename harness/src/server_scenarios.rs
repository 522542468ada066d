//! The `server-*` scenarios: `holdline serve` against `redis-server` doing
//! the usual single-instance lock, both driven by the same client code path
//! (`holdline_client::Connection`, one tokio task per connection).
//!
//! holdline: `HOLD bench key` (waits in the key's line, answered on grant),
//! `RELEASE lease`. Redis: `SET key token NX PX 30000` (retried every
//! [`REDIS_POLL`] while the key is taken), released by `EVALSHA` of the
//! compare-and-delete script.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use holdline_client::{Connection, Value};
use tokio::runtime::Runtime;

use crate::measure::{fill_lat, hist, io_runtime as runtime, merged, record_pairs, run_tasks};
use crate::row::Run;
use crate::scenario::{Cfg, Scenario, PIPELINE, PIPELINED_DEPTH, REDIS_POLL};
use crate::servers::{ServerKind, ServerProcess};
use crate::units::fmt_bytes;

/// The lock name holdline's commands use.
const LOCK: &str = "bench";

/// A Redis lock's time to live, as the recipe sets it.
const REDIS_PX: &str = "30000";

/// The release half of the Redis recipe: delete the key only if it still
/// holds this client's token.
const RELEASE_SCRIPT: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// How long [`SETTLE`] waits before the last memory reading (holdline
/// reclaims idle keys within about a second).
const SETTLE: Duration = Duration::from_millis(1500);

/// One connection and what a hold on it needs.
struct Client {
    conn: Connection,
    kind: ServerKind,
    /// The release script's SHA1 (Redis).
    sha: Arc<str>,
    /// Reused text buffers: the Redis token (unique per hold) and a lease id.
    token: String,
    number: String,
    id: usize,
    holds: u64,
}

/// What a hold answered: holdline's lease id (Redis's token stays in `Client::token`).
struct Held(i64);

fn expect_ok(reply: &Value, what: &str) {
    assert!(
        matches!(reply, Value::Simple(s) if s == "OK"),
        "{what}: answered {reply:?}"
    );
}

impl Client {
    async fn connect(addr: SocketAddr, kind: ServerKind, sha: Arc<str>, id: usize) -> Client {
        let conn = Connection::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("connect to {} at {addr}: {e}", kind.name()));
        Client {
            conn,
            kind,
            sha,
            token: String::with_capacity(32),
            number: String::with_capacity(24),
            id,
            holds: 0,
        }
    }

    /// Makes the next unique Redis token.
    fn next_token(&mut self) {
        self.holds += 1;
        self.token.clear();
        let _ = write!(self.token, "c{}-{}", self.id, self.holds);
    }

    /// Queues a hold of `key`: `HOLD` (with `extra` options), or `SET NX PX`
    /// with a fresh token.
    fn queue_hold(&mut self, key: &str, extra: &[&str]) {
        match self.kind {
            ServerKind::Holdline => {
                let mut args = vec!["HOLD", LOCK, key];
                args.extend_from_slice(extra);
                self.conn.queue(&args);
            }
            ServerKind::Redis => {
                self.next_token();
                let token = &self.token;
                self.conn
                    .queue(&["SET", key, token.as_str(), "NX", "PX", REDIS_PX]);
            }
        }
    }

    /// Reads a hold's answer: `Some` when granted, `None` when Redis said
    /// the key is taken.
    async fn read_hold(&mut self, key: &str) -> Option<Held> {
        let reply = self.conn.read_reply().await.expect("read a hold's answer");
        match (self.kind, &reply) {
            (ServerKind::Holdline, Value::Array(a)) => match a.as_slice() {
                [Value::Integer(lease), Value::Integer(_fence)] => Some(Held(*lease)),
                _ => panic!("HOLD {key}: answered {reply:?}"),
            },
            (ServerKind::Redis, Value::Null) => None,
            (ServerKind::Redis, _) => {
                expect_ok(&reply, &format!("SET {key} NX"));
                Some(Held(0))
            }
            _ => panic!("HOLD {key}: answered {reply:?}"),
        }
    }

    /// Queues the release of `held` (on `key`, whose token is `token` for Redis).
    fn queue_release(&mut self, key: &str, held: &Held, token: Option<&str>) {
        match self.kind {
            ServerKind::Holdline => {
                self.number.clear();
                let _ = write!(self.number, "{}", held.0);
                let lease = &self.number;
                self.conn.queue(&["RELEASE", lease.as_str()]);
            }
            ServerKind::Redis => {
                let token = token.unwrap_or(&self.token);
                self.conn.queue(&["EVALSHA", &self.sha, "1", key, token]);
            }
        }
    }

    async fn read_release(&mut self, key: &str) {
        let reply = self
            .conn
            .read_reply()
            .await
            .expect("read a release's answer");
        match self.kind {
            ServerKind::Holdline => expect_ok(&reply, &format!("RELEASE ({key})")),
            ServerKind::Redis => assert_eq!(
                reply,
                Value::Integer(1),
                "EVALSHA release of {key}: the key was no longer this client's"
            ),
        }
    }

    /// Holds `key`, waiting as each server's clients do: holdline's HOLD
    /// waits in line; a Redis client retries `SET NX` every [`REDIS_POLL`].
    async fn hold(&mut self, key: &str) -> Held {
        loop {
            self.queue_hold(key, &[]);
            self.conn.flush().await.expect("send a hold");
            if let Some(held) = self.read_hold(key).await {
                return held;
            }
            tokio::time::sleep(REDIS_POLL).await;
        }
    }

    /// Holds every key of `keys` in one pipelined batch (they are the
    /// connection's own: none is taken): the leases, and Redis's tokens.
    async fn hold_batch(&mut self, keys: &[String]) -> Vec<(Held, String)> {
        let mut tokens = Vec::with_capacity(keys.len());
        for k in keys {
            match self.kind {
                ServerKind::Holdline => self.conn.queue(&["TRYHOLD", LOCK, k]),
                ServerKind::Redis => self.queue_hold(k, &[]),
            }
            tokens.push(self.token.clone());
        }
        self.conn.flush().await.expect("send holds");
        let mut held = Vec::with_capacity(keys.len());
        for (k, token) in keys.iter().zip(tokens) {
            let lease = self.read_hold(k).await;
            held.push((
                lease.unwrap_or_else(|| panic!("own key {k} was taken")),
                token,
            ));
        }
        held
    }

    /// Releases a batch from [`hold_batch`](Client::hold_batch), pipelined.
    async fn release_batch(&mut self, keys: &[String], held: &[(Held, String)]) {
        for (k, (lease, token)) in keys.iter().zip(held) {
            self.queue_release(k, lease, Some(token));
        }
        self.conn.flush().await.expect("send releases");
        for k in keys {
            self.read_release(k).await;
        }
    }

    async fn release(&mut self, key: &str, held: Held) {
        self.queue_release(key, &held, None);
        self.conn.flush().await.expect("send a release");
        self.read_release(key).await;
    }
}

/// `n` connected clients (and, for Redis, the script loaded).
fn connect_all(rt: &Runtime, server: &ServerProcess, kind: ServerKind, n: usize) -> Vec<Client> {
    rt.block_on(async {
        let sha: Arc<str> = match kind {
            ServerKind::Holdline => Arc::from(""),
            ServerKind::Redis => {
                let mut c = Connection::connect(server.addr).await.expect("connect");
                match c.command(&["SCRIPT", "LOAD", RELEASE_SCRIPT]).await {
                    Ok(Value::Bulk(b)) => Arc::from(String::from_utf8(b).expect("sha").as_str()),
                    other => panic!("SCRIPT LOAD answered {other:?}"),
                }
            }
        };
        let mut clients = Vec::with_capacity(n);
        for id in 0..n {
            clients.push(Client::connect(server.addr, kind, sha.clone(), id).await);
        }
        clients
    })
}

/// Hands each task its client: `run_tasks` builds a task per index.
struct Clients(Vec<parking_lot::Mutex<Option<Client>>>);

impl Clients {
    fn new(clients: Vec<Client>) -> Arc<Clients> {
        Arc::new(Clients(
            clients
                .into_iter()
                .map(|c| parking_lot::Mutex::new(Some(c)))
                .collect(),
        ))
    }
    fn take(&self, i: usize) -> Client {
        self.0[i].lock().take().expect("each client is taken once")
    }
}

/// One run of a server scenario on `kind` with `conns` connections; a row
/// `n/a` (saying how to get the server) where it cannot start.
pub fn run(scenario: Scenario, kind: ServerKind, cfg: &Cfg, conns: usize) -> Run {
    let mut run = Run::new(scenario, conns, kind.name());
    run.fifo = kind.fifo();
    // Both have a bounded wait: HOLD's WAIT; a polling client gives up when it likes.
    run.deadline = true;
    let debug = match kind.binary() {
        Ok(path) => crate::servers::is_debug_build(&path),
        Err(missing) => {
            run.na = Some(missing.na);
            run.note = missing.how;
            return run;
        }
    };
    let server = ServerProcess::start(kind).unwrap_or_else(|e| panic!("{e}"));
    let rt = runtime();
    let on = Target {
        cfg,
        rt: &rt,
        server: &server,
        kind,
        conns,
    };
    match scenario {
        Scenario::ServerUncontended => uncontended(&mut run, &on),
        Scenario::ServerPipelined => pipelined(&mut run, &on),
        Scenario::ServerHotKey => hot_key(&mut run, &on),
        Scenario::ServerMemory => memory(&mut run, &on),
        other => panic!("{} is not a server scenario", other.name()),
    }
    if debug {
        run.note = format!("DEBUG BUILD of holdline (build --release); {}", run.note);
    }
    run
}

/// Connections the memory-per-connection figure opens: few enough for a
/// default limit of 1,024 open files.
pub const MEMORY_CONNECTIONS: usize = 400;

/// The server's resident memory per connection holding one key (HOLD, or
/// Redis's SET NX PX), over [`MEMORY_CONNECTIONS`] connections: the growth
/// from before they connected to [`SETTLE`] after the last hold, per
/// connection, in bytes.
pub fn connection_memory(kind: ServerKind) -> Result<f64, String> {
    kind.binary().map_err(|m| m.how)?;
    let server = ServerProcess::start(kind)?;
    let rt = runtime();
    let before = server.rss().ok_or("no RSS")?;
    let mut clients = connect_all(&rt, &server, kind, MEMORY_CONNECTIONS);
    let held: Vec<Held> = rt.block_on(async {
        let mut held = Vec::with_capacity(clients.len());
        for (i, c) in clients.iter_mut().enumerate() {
            held.push(c.hold(&format!("conn-{i}")).await);
        }
        held
    });
    std::thread::sleep(SETTLE);
    let after = server.rss().ok_or("no RSS")?;
    drop((held, clients));
    Ok((after - before) as f64 / MEMORY_CONNECTIONS as f64)
}

/// What a server row runs against: the run's settings, the clients'
/// runtime, the server started for the row, and how many connections.
struct Target<'a> {
    cfg: &'a Cfg,
    rt: &'a Runtime,
    server: &'a ServerProcess,
    kind: ServerKind,
    conns: usize,
}

impl Target<'_> {
    fn connect(&self) -> Vec<Client> {
        connect_all(self.rt, self.server, self.kind, self.conns)
    }
}

/// What a connection does again and again in [`repeat_rounds`].
enum Round {
    /// Holds and releases its own key; a latency sample covers both.
    Pair(String),
    /// Holds its own keys in one pipelined batch, then releases them; a
    /// latency sample is the batch of holds.
    Batch(Vec<String>),
}

impl Round {
    /// What one latency sample is.
    fn lat_of(&self) -> &'static str {
        match self {
            Round::Pair(_) => "hold+release",
            Round::Batch(_) => "batch of holds",
        }
    }

    /// Makes the round on `c`, its latency recorded in `h`; answers the holds made.
    async fn make(&self, c: &mut Client, h: &mut Histogram<u64>) -> u64 {
        let t0 = Instant::now();
        match self {
            Round::Pair(key) => {
                let held = c.hold(key).await;
                c.release(key, held).await;
                let _ = h.record(t0.elapsed().as_nanos() as u64);
                1
            }
            Round::Batch(keys) => {
                let held = c.hold_batch(keys).await;
                let _ = h.record(t0.elapsed().as_nanos() as u64);
                c.release_batch(keys, &held).await;
                keys.len() as u64
            }
        }
    }
}

/// Every connection makes its round (`round_of(connection)`) again and
/// again for the run's duration: holds per second, the rounds' latency.
fn repeat_rounds(run: &mut Run, on: &Target, round_of: fn(usize) -> Round) {
    let clients = Clients::new(on.connect());
    let (outs, secs) = run_tasks(on.rt, on.conns, on.cfg.duration, |t, stop| {
        let clients = clients.clone();
        let round = round_of(t);
        async move {
            let mut c = clients.take(t);
            let mut h = hist();
            let mut n = 0u64;
            while !stop.load(SeqCst) {
                n += round.make(&mut c, &mut h).await;
            }
            (h, [n])
        }
    });
    record_pairs(run, outs, secs, round_of(0).lat_of());
}

/// Each connection holds and releases its own key, again and again.
fn uncontended(run: &mut Run, on: &Target) {
    repeat_rounds(run, on, |t| Round::Pair(format!("own-{t}")));
    run.note = format!(
        "{} connections, each its own key; {}",
        on.conns,
        recipe(on.kind)
    );
}

/// Each connection pipelines holds of its own keys, then their releases,
/// again and again: what a server does per command once round trips are
/// out of the way.
fn pipelined(run: &mut Run, on: &Target) {
    repeat_rounds(run, on, |t| {
        Round::Batch((0..PIPELINED_DEPTH).map(|i| format!("p{t}-{i}")).collect())
    });
    run.note = format!(
        "{} connections, {PIPELINED_DEPTH} deep; {}",
        on.conns,
        match on.kind {
            ServerKind::Holdline => "TRYHOLD x16, then RELEASE x16",
            ServerKind::Redis => "SET NX PX x16, then EVALSHA compare-and-delete x16",
        }
    );
}

fn recipe(kind: ServerKind) -> &'static str {
    match kind {
        ServerKind::Holdline => "HOLD bench key / RELEASE lease",
        ServerKind::Redis => "SET key token NX PX 30000 / EVALSHA compare-and-delete",
    }
}

/// Every connection on one key: wait (from the first try), hold, release.
fn hot_key(run: &mut Run, on: &Target) {
    let conns = on.conns;
    let clients = Clients::new(on.connect());
    // A ticket when a connection begins to wait, kept in `waiting` until it
    // is granted (0: not waiting). A grant made while a connection with an
    // older ticket still waits passed over it: out of arrival order. (A
    // barging client passes over every poller, and each such grant counts.)
    let ticket = Arc::new(AtomicU64::new(1));
    let waiting: Arc<Vec<AtomicU64>> = Arc::new((0..conns).map(|_| AtomicU64::new(0)).collect());
    let (outs, secs) = run_tasks(on.rt, conns, on.cfg.duration, |t, stop| {
        let clients = clients.clone();
        let (ticket, waiting) = (ticket.clone(), waiting.clone());
        async move {
            let mut c = clients.take(t);
            let mut h = hist();
            let (mut grants, mut ooo) = (0u64, 0u64);
            while !stop.load(SeqCst) {
                let my = ticket.fetch_add(1, SeqCst);
                waiting[t].store(my, SeqCst);
                let t0 = Instant::now();
                let held = c.hold("hot").await;
                let _ = h.record(t0.elapsed().as_nanos() as u64);
                waiting[t].store(0, SeqCst);
                let older_waits = waiting.iter().any(|w| {
                    let since = w.load(SeqCst);
                    since != 0 && since < my
                });
                ooo += u64::from(older_waits);
                grants += 1;
                c.release("hot", held).await;
            }
            (h, [grants, ooo])
        }
    });
    let (all, [grants, ooo]) = merged(outs);
    run.unit = "grants";
    run.lat_of = "wait";
    run.set_rate(grants, secs);
    fill_lat(run, &all);
    run.out_of_order = Some((ooo, grants));
    run.note = match on.kind {
        ServerKind::Holdline => {
            format!("{conns} connections; HOLD waits in line, answered on grant")
        }
        ServerKind::Redis => {
            format!("{conns} connections; SET NX retried every {REDIS_POLL:?} until it succeeds")
        }
    };
}

/// `cfg.million` distinct keys, each held once and released, in pipelined
/// batches ([`PIPELINE`] holds, then their releases) over `conns`
/// connections; the server's memory at start, at its peak, after the last
/// release and [`SETTLE`] later.
///
/// Batches rather than every key held at once: holdline renews all of a
/// connection's leases on every command it reads, so one connection holding
/// tens of thousands of leases makes each command cost as many renewals.
fn memory(run: &mut Run, on: &Target) {
    let (cfg, rt, server, conns) = (on.cfg, on.rt, on.server, on.conns);
    let clients = on.connect();
    let start_rss = server.rss().expect("server RSS");
    let n = cfg.million;
    let per = n.div_ceil(conns);
    let t_start = Instant::now();
    let outs: Vec<(Histogram<u64>, Client)> = rt.block_on(async {
        let handles: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(t, c)| {
                let keys: Vec<String> = (t * per..((t + 1) * per).min(n))
                    .map(|i| format!("m{i:07}"))
                    .collect();
                tokio::spawn(fresh_keys(c, keys))
            })
            .collect();
        let mut outs = Vec::with_capacity(handles.len());
        for h in handles {
            outs.push(h.await.expect("task"));
        }
        outs
    });
    let secs = t_start.elapsed().as_secs_f64();
    let released_rss = server.rss().expect("server RSS");
    let peak_rss = server.peak_rss().expect("server peak RSS");
    let mut all = hist();
    let mut clients: Vec<Client> = Vec::new();
    for (h, c) in outs {
        all.add(h).expect("merge");
        clients.push(c);
    }
    std::thread::sleep(SETTLE);
    let settled_rss = server.rss().expect("server RSS");
    let left = rt.block_on(keys_left(&mut clients[0]));
    run.unit = "keys";
    run.lat_of = "batch of holds";
    run.set_rate(n as u64, secs);
    fill_lat(run, &all);
    run.mem_live = Some(peak_rss - start_rss);
    run.mem_idle = Some(released_rss - start_rss);
    run.mem_settled = Some(settled_rss - start_rss);
    run.note = format!(
        "RSS: start {}, peak {}, after release {}, {SETTLE:?} later {}; {left}",
        fmt_bytes(start_rss),
        fmt_bytes(peak_rss),
        fmt_bytes(released_rss),
        fmt_bytes(settled_rss),
    );
}

/// One connection's part of `memory`: holds its fresh keys a pipelined
/// batch at a time, each batch released after; the batches' times.
async fn fresh_keys(mut c: Client, keys: Vec<String>) -> (Histogram<u64>, Client) {
    let mut h = hist();
    let mut tokens: Vec<String> = Vec::with_capacity(PIPELINE);
    let mut leases: Vec<Held> = Vec::with_capacity(PIPELINE);
    for batch in keys.chunks(PIPELINE) {
        let t0 = Instant::now();
        tokens.clear();
        for k in batch {
            c.queue_hold(k, &["TTL", REDIS_PX]);
            tokens.push(c.token.clone());
        }
        c.conn.flush().await.expect("send holds");
        leases.clear();
        for k in batch {
            let held = c.read_hold(k).await;
            leases.push(held.unwrap_or_else(|| panic!("fresh key {k} was taken")));
        }
        let _ = h.record(t0.elapsed().as_nanos() as u64);
        for ((k, held), token) in batch.iter().zip(&leases).zip(&tokens) {
            c.queue_release(k, held, Some(token));
        }
        c.conn.flush().await.expect("send releases");
        for k in batch {
            c.read_release(k).await;
        }
    }
    (h, c)
}

/// What the server still keeps: holdline's `live_keys` (STATS), Redis's `DBSIZE`.
async fn keys_left(c: &mut Client) -> String {
    match c.kind {
        ServerKind::Holdline => {
            let reply = c.conn.command(&["STATS", LOCK]).await.expect("STATS");
            let live = match &reply {
                Value::Map(pairs) => pairs.iter().find_map(|(k, v)| match (k, v) {
                    (Value::Bulk(k), Value::Integer(n)) if k == b"live_keys" => Some(*n),
                    (Value::Simple(k), Value::Integer(n)) if k == "live_keys" => Some(*n),
                    _ => None,
                }),
                _ => None,
            };
            match live {
                Some(n) => format!("live_keys {n}"),
                None => format!("STATS answered {reply:?}"),
            }
        }
        ServerKind::Redis => match c.conn.command(&["DBSIZE"]).await {
            Ok(Value::Integer(n)) => format!("DBSIZE {n}"),
            other => format!("DBSIZE answered {other:?}"),
        },
    }
}

/// Whether a hold by another connection is refused while one holds the
/// key, on both servers: the recipes the rows time really exclude.
#[cfg(test)]
mod tests {
    use super::*;

    fn available(kind: ServerKind) -> bool {
        match kind.binary() {
            Ok(_) => true,
            Err(m) => {
                eprintln!("skipped for {}: {}", kind.name(), m.how);
                false
            }
        }
    }

    #[test]
    fn both_recipes_exclude_and_release() {
        for kind in ServerKind::ALL {
            if !available(kind) {
                continue;
            }
            let server = ServerProcess::start(kind).expect("server starts");
            let rt = runtime();
            let mut cs = connect_all(&rt, &server, kind, 2);
            rt.block_on(async {
                let held = cs[0].hold("k").await;
                // The other connection cannot take it now.
                cs[1].queue_hold("k", &["WAIT", "0"]);
                cs[1].conn.flush().await.unwrap();
                match kind {
                    ServerKind::Holdline => {
                        let reply = cs[1].conn.read_reply().await.unwrap();
                        assert!(
                            matches!(&reply, Value::Error(e) if e.starts_with("INUSE")),
                            "{reply:?}"
                        );
                    }
                    ServerKind::Redis => assert!(cs[1].read_hold("k").await.is_none()),
                }
                cs[0].release("k", held).await;
                let again = cs[1].hold("k").await;
                cs[1].release("k", again).await;
            });
        }
    }

    #[test]
    fn server_scenarios_measure_on_both_servers() {
        let cfg = Cfg::new(Duration::from_millis(60), 3_000);
        for kind in ServerKind::ALL {
            if !available(kind) {
                continue;
            }
            for (s, conns) in [
                (Scenario::ServerUncontended, 2),
                (Scenario::ServerPipelined, 2),
                (Scenario::ServerHotKey, 4),
                (Scenario::ServerMemory, 4),
            ] {
                let r = run(s, kind, &cfg, conns);
                assert_eq!(r.na, None, "{s:?} {kind:?}");
                assert!(r.ops > 0 && r.p50 > 0, "{s:?} {kind:?}: {r:?}");
                if s == Scenario::ServerMemory {
                    assert_eq!(r.ops, 3_000);
                    assert!(r.note.contains("RSS: start"), "{}", r.note);
                    // Every key was released: nothing is left held.
                    assert!(
                        r.note.ends_with("live_keys 0") || r.note.ends_with("DBSIZE 0"),
                        "{kind:?}: {}",
                        r.note
                    );
                }
                if s == Scenario::ServerHotKey && kind == ServerKind::Holdline {
                    let (ooo, grants) = r.out_of_order.unwrap();
                    assert!(grants > 0 && ooo <= grants);
                }
            }
        }
    }
}
