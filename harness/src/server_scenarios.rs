//! The `server-*` scenarios: `holdline serve` against the servers a user
//! picks instead, each driven as its users drive it, one tokio task per
//! client: `redis-server` doing the usual single-instance lock (both
//! through `holdline_client::Connection`), etcd's Lock RPC and
//! PostgreSQL's advisory locks (`peers`); and holdline with its history
//! off, on, and written to an audit log (`server-history`). Every row
//! but the memory ones also reads the server's CPU time per operation.
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
use crate::peers::{EtcdSession, PeerClient, PeerHeld, PgSession};
use crate::procs::{self, ticks_per_sec};
use crate::row::Run;
use crate::scenario::{
    Cfg, Scenario, MEMORY_CONNECTIONS, PACED_RATE, PIPELINE, PIPELINED_DEPTH, REDIS_POLL,
};
use crate::servers::{tools_required, ServerKind, ServerProcess};
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

/// Which RESP server a [`Client`] talks to: a `holdline serve` (any
/// history setting) or Redis.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Resp {
    Holdline,
    Redis,
}

impl Resp {
    fn of(kind: ServerKind) -> Resp {
        match kind {
            ServerKind::Redis => Resp::Redis,
            k if k.is_holdline() => Resp::Holdline,
            k => panic!("{} is no RESP server", k.name()),
        }
    }
}

/// One connection to a RESP server and what a hold on it needs.
struct Client {
    conn: Connection,
    resp: Resp,
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
            resp: Resp::of(kind),
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
        match self.resp {
            Resp::Holdline => {
                let mut args = vec!["HOLD", LOCK, key];
                args.extend_from_slice(extra);
                self.conn.queue(&args);
            }
            Resp::Redis => {
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
        match (self.resp, &reply) {
            (Resp::Holdline, Value::Array(a)) => match a.as_slice() {
                [Value::Integer(lease), Value::Integer(_fence)] => Some(Held(*lease)),
                _ => panic!("HOLD {key}: answered {reply:?}"),
            },
            (Resp::Redis, Value::Null) => None,
            (Resp::Redis, _) => {
                expect_ok(&reply, &format!("SET {key} NX"));
                Some(Held(0))
            }
            _ => panic!("HOLD {key}: answered {reply:?}"),
        }
    }

    /// Queues the release of `held` (on `key`, whose token is `token` for Redis).
    fn queue_release(&mut self, key: &str, held: &Held, token: Option<&str>) {
        match self.resp {
            Resp::Holdline => {
                self.number.clear();
                let _ = write!(self.number, "{}", held.0);
                let lease = &self.number;
                self.conn.queue(&["RELEASE", lease.as_str()]);
            }
            Resp::Redis => {
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
        match self.resp {
            Resp::Holdline => expect_ok(&reply, &format!("RELEASE ({key})")),
            Resp::Redis => assert_eq!(
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
            match self.resp {
                Resp::Holdline => self.conn.queue(&["TRYHOLD", LOCK, k]),
                Resp::Redis => self.queue_hold(k, &[]),
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
        let sha: Arc<str> = match Resp::of(kind) {
            Resp::Holdline => Arc::from(""),
            Resp::Redis => {
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

/// A client of any server the rows measure: a RESP connection (holdline,
/// Redis) or a peer's client (etcd, PostgreSQL).
enum Session {
    /// Boxed: a RESP connection's buffers make it the larger by far.
    Resp(Box<Client>),
    Peer(PeerClient),
}

/// What a session's hold answered.
enum Grant {
    Resp(Held),
    Peer(PeerHeld),
}

impl Session {
    /// Holds `key`, waiting as the server's users wait.
    async fn hold(&mut self, key: &str) -> Grant {
        match self {
            Session::Resp(c) => Grant::Resp(c.hold(key).await),
            Session::Peer(c) => Grant::Peer(c.hold(key).await),
        }
    }

    async fn release(&mut self, key: &str, grant: Grant) {
        match (self, grant) {
            (Session::Resp(c), Grant::Resp(h)) => c.release(key, h).await,
            (Session::Peer(c), Grant::Peer(h)) => c.release(key, h).await,
            _ => panic!("a release of another kind of hold"),
        }
    }

    /// The RESP connection (the pipelined rows run on RESP servers only).
    fn resp(&mut self) -> &mut Client {
        match self {
            Session::Resp(c) => c,
            Session::Peer(_) => panic!("a RESP-only scenario on a peer"),
        }
    }
}

/// `n` connected sessions of `kind`: RESP connections, or a peer's clients.
fn connect_sessions(
    rt: &Runtime,
    server: &ServerProcess,
    kind: ServerKind,
    n: usize,
) -> Vec<Session> {
    if !matches!(kind, ServerKind::Etcd | ServerKind::Postgres) {
        let clients = connect_all(rt, server, kind, n);
        return clients
            .into_iter()
            .map(|c| Session::Resp(Box::new(c)))
            .collect();
    }
    rt.block_on(async {
        let mut sessions = Vec::with_capacity(n);
        for _ in 0..n {
            let peer = match kind {
                ServerKind::Etcd => EtcdSession::connect(server.addr)
                    .await
                    .map(PeerClient::Etcd),
                _ => PgSession::connect(server).await.map(PeerClient::Postgres),
            };
            sessions.push(Session::Peer(peer.unwrap_or_else(|e| panic!("{e}"))));
        }
        sessions
    })
}

/// The server's CPU time (its processes' user + system ticks) over a
/// stretch of a row.
struct CpuMeter<'a> {
    server: &'a ServerProcess,
    start: Option<u64>,
}

impl<'a> CpuMeter<'a> {
    fn start(server: &'a ServerProcess) -> CpuMeter<'a> {
        CpuMeter {
            server,
            start: server.cpu_ticks(),
        }
    }

    /// The ticks since [`start`](CpuMeter::start) into `run`, per
    /// operation counted there.
    fn record(self, run: &mut Run) {
        if let (Some(a), Some(b)) = (self.start, self.server.cpu_ticks()) {
            run.set_cpu(b.saturating_sub(a), ticks_per_sec());
        }
    }
}

/// Hands each task its client: `run_tasks` builds a task per index.
struct Clients<C>(Vec<parking_lot::Mutex<Option<C>>>);

impl<C> Clients<C> {
    fn new(clients: Vec<C>) -> Arc<Clients<C>> {
        Arc::new(Clients(
            clients
                .into_iter()
                .map(|c| parking_lot::Mutex::new(Some(c)))
                .collect(),
        ))
    }
    fn take(&self, i: usize) -> C {
        self.0[i].lock().take().expect("each client is taken once")
    }
}

/// The servers a server scenario runs, in table order: every lock server
/// (the pipelined and memory rows: the RESP ones, holdline and Redis),
/// or holdline's history settings.
pub fn subjects(scenario: Scenario) -> &'static [ServerKind] {
    const RESP: [ServerKind; 2] = [ServerKind::Holdline, ServerKind::Redis];
    const RESP_BASE: [ServerKind; 3] = [
        ServerKind::Holdline,
        ServerKind::Baseline,
        ServerKind::Redis,
    ];
    const ALL_BASE: [ServerKind; 5] = [
        ServerKind::Holdline,
        ServerKind::Baseline,
        ServerKind::Redis,
        ServerKind::Etcd,
        ServerKind::Postgres,
    ];
    let base = ServerKind::baseline_set();
    match scenario {
        Scenario::ServerHistory => &ServerKind::HISTORY,
        Scenario::ServerPipelined | Scenario::ServerMemory if base => &RESP_BASE,
        Scenario::ServerPipelined | Scenario::ServerMemory => &RESP,
        _ if base => &ALL_BASE,
        _ => &ServerKind::ALL,
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
        Ok(path) => kind.is_holdline() && crate::servers::is_debug_build(&path),
        Err(missing) if kind.is_peer() && tools_required() => {
            panic!("HOLDLINE_REQUIRE_TOOLS=1: {}", missing.how)
        }
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
        Scenario::ServerUncontended | Scenario::ServerHistory => uncontended(&mut run, &on),
        Scenario::ServerPaced => paced(&mut run, &on),
        Scenario::ServerPipelined => pipelined(&mut run, &on),
        Scenario::ServerHotKey => hot_key(&mut run, &on),
        Scenario::ServerMemory => memory(&mut run, &on),
        Scenario::ServerConnections => connections(&mut run, &on),
        other => panic!("{} is not a server scenario", other.name()),
    }
    if let Some(log) = &server.audit_log {
        let written = std::fs::metadata(log).map_or(0, |m| m.len());
        let written = fmt_bytes(i64::try_from(written).unwrap_or(i64::MAX));
        run.note = format!("{}; audit log: {written} written", run.note);
    }
    if debug {
        run.note = format!("DEBUG BUILD of holdline (build --release); {}", run.note);
    }
    run
}

/// The server's resident memory per connection holding one key (HOLD, or
/// Redis's SET NX PX), over [`MEMORY_CONNECTIONS`] connections: the growth
/// from before they connected to [`SETTLE`] after the last hold, per
/// connection, in bytes.
pub fn connection_memory(kind: ServerKind) -> Result<f64, String> {
    kind.binary().map_err(|m| m.how)?;
    let server = ServerProcess::start(kind)?;
    let rt = runtime();
    let (per, _, _) = held_connections(&rt, &server, kind, ServerProcess::rss)?;
    Ok(per)
}

/// [`MEMORY_CONNECTIONS`] sessions of `kind`, each holding a key of its
/// own: the growth of `memory` from before they connected to [`SETTLE`]
/// after the last hold, per connection, in bytes; the seconds from the
/// first connection to the last hold; and each hold's time.
fn held_connections(
    rt: &Runtime,
    server: &ServerProcess,
    kind: ServerKind,
    memory: fn(&ServerProcess) -> Option<i64>,
) -> Result<(f64, f64, Histogram<u64>), String> {
    let before = memory(server).ok_or("no memory reading")?;
    let t0 = Instant::now();
    let mut sessions = connect_sessions(rt, server, kind, MEMORY_CONNECTIONS);
    let (held, h) = rt.block_on(async {
        let mut held = Vec::with_capacity(sessions.len());
        let mut h = hist();
        for (i, c) in sessions.iter_mut().enumerate() {
            let t = Instant::now();
            held.push(c.hold(&format!("conn-{i}")).await);
            let _ = h.record(t.elapsed().as_nanos() as u64);
        }
        (held, h)
    });
    let secs = t0.elapsed().as_secs_f64();
    std::thread::sleep(SETTLE);
    let after = memory(server).ok_or("no memory reading")?;
    drop((held, sessions));
    Ok(((after - before) as f64 / MEMORY_CONNECTIONS as f64, secs, h))
}

/// `server-connections`: [`MEMORY_CONNECTIONS`] clients each holding a
/// key; `mem idle` = the server's memory per client, its processes'
/// proportional set size (PostgreSQL's backends, a process per client,
/// included; shared pages split among them).
fn connections(run: &mut Run, on: &Target) {
    let (per, secs, h) = held_connections(on.rt, on.server, on.kind, ServerProcess::pss)
        .unwrap_or_else(|e| panic!("{e}"));
    run.unit = "clients";
    run.lat_of = "one client's first hold";
    run.set_rate(MEMORY_CONNECTIONS as u64, secs);
    fill_lat(run, &h);
    run.mem_idle = Some(per.round() as i64);
    run.note = format!(
        "{MEMORY_CONNECTIONS} clients, each its own connection and one key held; \
         memory (PSS) per client, {SETTLE:?} after the last hold; {}",
        recipe(on.kind)
    );
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
    fn connect(&self) -> Vec<Session> {
        connect_sessions(self.rt, self.server, self.kind, self.conns)
    }

    fn connect_resp(&self) -> Vec<Client> {
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
    async fn make(&self, c: &mut Session, h: &mut Histogram<u64>) -> u64 {
        let t0 = Instant::now();
        match self {
            Round::Pair(key) => {
                let held = c.hold(key).await;
                c.release(key, held).await;
                let _ = h.record(t0.elapsed().as_nanos() as u64);
                1
            }
            Round::Batch(keys) => {
                let c = c.resp();
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
    let cpu = CpuMeter::start(on.server);
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
    cpu.record(run);
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
            ServerKind::Redis => "SET NX PX x16, then EVALSHA compare-and-delete x16",
            _ => "TRYHOLD x16, then RELEASE x16",
        }
    );
}

fn recipe(kind: ServerKind) -> &'static str {
    match kind {
        ServerKind::Holdline | ServerKind::Baseline => "HOLD bench key / RELEASE lease",
        ServerKind::Redis => "SET key token NX PX 30000 / EVALSHA compare-and-delete",
        ServerKind::Etcd => "Lock(key, lease) / Unlock(key) RPCs, a lease per client",
        ServerKind::Postgres => "pg_advisory_lock / pg_advisory_unlock, a session per client",
        ServerKind::HistoryOff => "--history 0 (no history kept); HOLD / RELEASE",
        ServerKind::AuditLog => "--audit-log FILE (history kept and written); HOLD / RELEASE",
    }
}

/// Every connection holds and releases its own key at a steady pace,
/// [`PACED_RATE`] pairs a second in all (each connection one every
/// `conns / PACED_RATE` seconds, the connections' schedules staggered):
/// what the server spends per pair when it is far from busy. The CPU
/// and the context switches are read over the measured window; then a
/// second, shorter window at the same pace runs with `strace -c -f`
/// attached (ptrace slows every call, so its CPU is not counted) for the
/// system calls per pair, by kind.
fn paced(run: &mut Run, on: &Target) {
    let conns = on.conns;
    let period = Duration::from_secs_f64(conns as f64 / PACED_RATE as f64);
    let clients = on.connect();
    let cpu = CpuMeter::start(on.server);
    let switches = procs::tree_ctx_switches(on.server.pid());
    let (outs, secs, clients) = paced_window(on, clients, period, on.cfg.paced);
    let switches = switches.zip(procs::tree_ctx_switches(on.server.pid()));
    record_pairs(run, outs, secs, "hold+release");
    cpu.record(run);
    let per = |n: u64| n as f64 / run.ops.max(1) as f64;
    let switches = match switches {
        Some((a, b)) => {
            let d = b.since(a);
            format!(
                "ctx switches/op {:.2} ({:.2} voluntary, {:.2} involuntary)",
                per(d.voluntary + d.involuntary),
                per(d.voluntary),
                per(d.involuntary)
            )
        }
        None => "ctx switches/op n/a".into(),
    };
    let syscalls = paced_syscalls(on, clients, period);
    run.note = format!(
        "{conns} connections offering {PACED_RATE} pairs/s in all (one each every {}); {}; \
         {syscalls}; {switches}",
        crate::units::fmt_ns(period.as_nanos() as u64),
        recipe(on.kind)
    );
}

/// The system calls per pair of a window at the same pace with strace
/// attached, said for the note (or why there are none).
fn paced_syscalls(on: &Target, clients: Vec<Session>, period: Duration) -> String {
    let strace = match procs::Strace::attach(on.server.pid()) {
        Ok(s) => s,
        Err(why) => return format!("syscalls/op {why}"),
    };
    let window = (on.cfg.paced / 3).max(Duration::from_millis(200));
    let (outs, _, clients) = paced_window(on, clients, period, window);
    let counts = strace.stop();
    drop(clients);
    let pairs: u64 = outs.iter().map(|(_, [n])| n).sum();
    let Some(c) = counts.filter(|_| pairs > 0) else {
        return "syscalls/op n/a (strace could not attach)".into();
    };
    let per = |n: u64| n as f64 / pairs as f64;
    format!(
        "syscalls/op {:.2} (epoll_wait {:.2}, reads {:.2}, writes {:.2}, futex {:.2})",
        per(c.total),
        per(c.waits),
        per(c.reads),
        per(c.writes),
        per(c.futex)
    )
}

/// Latencies, pair counts and the wall time of one paced window of
/// `dur`, and the sessions back for the next.
type PacedWindow = (Vec<(Histogram<u64>, [u64; 1])>, f64, Vec<Session>);

/// One paced window: each session holds and releases its own key every
/// `period`, its schedule offset by its share of it.
fn paced_window(
    on: &Target,
    clients: Vec<Session>,
    period: Duration,
    dur: Duration,
) -> PacedWindow {
    let conns = clients.len();
    let clients = Clients::new(clients);
    let (outs, secs) = run_tasks(on.rt, conns, dur, |t, stop| {
        let clients = clients.clone();
        async move {
            let mut c = clients.take(t);
            let key = format!("own-{t}");
            let mut h = hist();
            let mut n = 0u64;
            let offset = period.mul_f64(t as f64 / conns as f64);
            // Its schedule's origin: on a loaded machine a task may start
            // before the window's clock does, so its own span is kept.
            let origin = tokio::time::Instant::now();
            let mut next = origin + offset;
            while !stop.load(SeqCst) {
                tokio::time::sleep_until(next).await;
                // A schedule that fell behind is kept: the load offered stays the same.
                next += period;
                let t0 = Instant::now();
                let held = c.hold(&key).await;
                c.release(&key, held).await;
                let _ = h.record(t0.elapsed().as_nanos() as u64);
                n += 1;
            }
            (h, [n], c, origin.elapsed().as_secs_f64())
        }
    });
    let mut back = Vec::with_capacity(conns);
    // The window: the clock's, or the longest a schedule ran if longer
    // (then no connection made more than window / period + 1 pairs).
    let mut window = secs;
    let outs = outs
        .into_iter()
        .map(|(h, n, c, ran)| {
            back.push(c);
            window = window.max(ran);
            (h, n)
        })
        .collect();
    (outs, window, back)
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
    let cpu = CpuMeter::start(on.server);
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
    cpu.record(run);
    fill_lat(run, &all);
    run.out_of_order = Some((ooo, grants));
    let how = match on.kind {
        ServerKind::Redis => format!("SET NX retried every {REDIS_POLL:?} until it succeeds"),
        ServerKind::Etcd => {
            "Lock waits for the keys of lower revision to go, answered on grant".into()
        }
        ServerKind::Postgres => {
            "pg_advisory_lock waits in the lock manager's queue, answered on grant".into()
        }
        _ => "HOLD waits in line, answered on grant".into(),
    };
    run.note = format!("{conns} connections; {how}");
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
    let clients = on.connect_resp();
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
    match c.resp {
        Resp::Holdline => {
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
        Resp::Redis => match c.conn.command(&["DBSIZE"]).await {
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

    /// Whether `kind` can be started here; a missing peer fails the test
    /// instead under `HOLDLINE_REQUIRE_TOOLS=1` (CI).
    fn available(kind: ServerKind) -> bool {
        match kind.binary() {
            Ok(_) => true,
            Err(m) if kind.is_peer() => crate::spawn::tool_available(&m.how, false),
            Err(m) => {
                eprintln!("skipped for {}: {}", kind.name(), m.how);
                false
            }
        }
    }

    impl Session {
        /// Whether a hold of `key` is granted at once (HOLD ... WAIT 0,
        /// one SET NX, pg_try_advisory_lock; etcd's Lock, which has no
        /// try, given 300 ms).
        async fn try_hold(&mut self, key: &str) -> bool {
            match self {
                Session::Resp(c) => {
                    c.queue_hold(key, &["WAIT", "0"]);
                    c.conn.flush().await.unwrap();
                    if c.resp == Resp::Redis {
                        return c.read_hold(key).await.is_some();
                    }
                    let reply = c.conn.read_reply().await.unwrap();
                    assert!(
                        matches!(&reply, Value::Error(e) if e.starts_with("INUSE")),
                        "{reply:?}"
                    );
                    false
                }
                Session::Peer(c) => c.try_hold(key, Duration::from_millis(300)).await.is_some(),
            }
        }
    }

    #[test]
    fn every_recipe_excludes_and_releases() {
        let kinds = ServerKind::ALL.into_iter().chain([ServerKind::AuditLog]);
        for kind in kinds.filter(|&k| available(k)) {
            let server = ServerProcess::start(kind).expect("server starts");
            let rt = runtime();
            let mut cs = connect_sessions(&rt, &server, kind, 2);
            rt.block_on(async {
                let held = cs[0].hold("k").await;
                // The other client cannot take it now.
                assert!(!cs[1].try_hold("k").await, "{kind:?}: taken twice");
                cs[0].release("k", held).await;
                let again = cs[1].hold("k").await;
                cs[1].release("k", again).await;
                // And once let go, it is free for the first one again.
                let third = cs[0].hold("k").await;
                cs[0].release("k", third).await;
            });
        }
    }

    #[test]
    fn a_peers_hot_key_grants_in_turn() {
        // Two etcd or PostgreSQL clients on one key: the second waits for the first.
        for kind in [ServerKind::Etcd, ServerKind::Postgres] {
            if !available(kind) {
                continue;
            }
            let server = ServerProcess::start(kind).expect("server starts");
            let rt = runtime();
            let mut cs = connect_sessions(&rt, &server, kind, 2).into_iter();
            let (mut a, mut b) = (cs.next().unwrap(), cs.next().unwrap());
            rt.block_on(async {
                let held = a.hold("hot").await;
                // Timed from before the spawn: the sleep below starts after this
                // instant and the release after the sleep, so a grant that waited
                // for the release comes at least 200 ms after it. (Timed from
                // inside the task, a late start shortened the wait it saw.)
                let t0 = Instant::now();
                let waiter = tokio::spawn(async move {
                    let got = b.hold("hot").await;
                    let waited = t0.elapsed();
                    b.release("hot", got).await;
                    waited
                });
                tokio::time::sleep(Duration::from_millis(200)).await;
                assert!(!waiter.is_finished(), "{kind:?}: granted while held");
                a.release("hot", held).await;
                let waited = waiter.await.unwrap();
                assert!(waited >= Duration::from_millis(200), "{kind:?}: {waited:?}");
            });
        }
    }

    #[test]
    fn server_scenarios_measure_on_every_server() {
        let cfg = Cfg::new(Duration::from_millis(60), 3_000);
        let all = ServerKind::ALL.into_iter().chain(ServerKind::HISTORY);
        for kind in all.filter(|&k| available(k)) {
            let scenarios = [
                (Scenario::ServerUncontended, 2),
                (Scenario::ServerPipelined, 2),
                (Scenario::ServerHotKey, 4),
                (Scenario::ServerPaced, 4),
                (Scenario::ServerMemory, 4),
                (Scenario::ServerHistory, 2),
            ];
            for (s, conns) in scenarios {
                if !subjects(s).contains(&kind) {
                    continue;
                }
                let r = run(s, kind, &cfg, conns);
                assert_eq!(r.na, None, "{s:?} {kind:?}");
                assert!(r.ops > 0 && r.p50 > 0, "{s:?} {kind:?}: {r:?}");
                check_row(s, kind, &r);
            }
        }
    }

    /// What a row of `s` on `kind` must show beyond a rate and a latency.
    fn check_row(s: Scenario, kind: ServerKind, r: &Run) {
        match s {
            Scenario::ServerMemory => {
                assert_eq!(r.ops, 3_000);
                assert!(r.note.contains("RSS: start"), "{}", r.note);
                // Every key was released: nothing is left held.
                assert!(
                    r.note.ends_with("live_keys 0") || r.note.ends_with("DBSIZE 0"),
                    "{kind:?}: {}",
                    r.note
                );
            }
            Scenario::ServerHotKey => {
                let (ooo, grants) = r.out_of_order.unwrap();
                assert!(grants > 0 && ooo <= grants, "{kind:?}");
            }
            Scenario::ServerPaced => check_paced(kind, r),
            _ => {}
        }
        if s != Scenario::ServerMemory {
            // The server's CPU was read (a few ticks at most in so short a row).
            assert!(r.cpu_ticks.is_some(), "{s:?} {kind:?}");
        }
        if kind == ServerKind::AuditLog {
            assert!(r.note.contains("audit log: "), "{}", r.note);
            assert!(!r.note.contains("audit log: 0B"), "{}", r.note);
        }
    }

    /// A paced row ran and kept to its schedule. No rate is asserted: a
    /// loaded machine makes fewer pairs (or, after a stall, the schedule
    /// catches up over a longer window). What holds on any machine: no
    /// connection's schedule runs ahead of the clock, and `secs` is at least
    /// the span of every connection's schedule (`paced_window`), so each
    /// connection made at most `secs / period` pairs plus its first (and
    /// one more of slack).
    fn check_paced(kind: ServerKind, r: &Run) {
        assert!(
            r.note.contains(&format!("offering {PACED_RATE} pairs/s")),
            "{}",
            r.note
        );
        let conns = r.threads as f64;
        let ceiling = PACED_RATE as f64 * r.secs + 2.0 * conns;
        assert!(
            (r.ops as f64) <= ceiling,
            "{kind:?}: {} pairs in {:.3}s ran ahead of {PACED_RATE}/s",
            r.ops,
            r.secs
        );
    }

    #[test]
    fn peers_hold_memory_per_client() {
        for kind in [ServerKind::Postgres, ServerKind::Etcd] {
            if !available(kind) {
                continue;
            }
            let cfg = Cfg::new(Duration::from_millis(10), 10);
            let r = run(Scenario::ServerConnections, kind, &cfg, MEMORY_CONNECTIONS);
            assert_eq!(r.ops, MEMORY_CONNECTIONS as u64);
            // A PostgreSQL backend is a process: well over 100 KiB each.
            let per = r.mem_idle.unwrap();
            if kind == ServerKind::Postgres {
                assert!(per > 100 << 10, "{per} bytes per client");
            }
            assert!(per > 0, "{kind:?}: {per}");
        }
    }
}
