//! What a scenario is: its name, kind, thread counts and legend, the
//! numbers it is run with ([`Cfg`]), and the constants its runners share.
//! The runners are one file per family (`rates`, `fresh_keys`, `handoff`,
//! `deadline`, `async_scenarios`, `permit_scenarios`, `server_scenarios`,
//! `cluster_scenarios`);
//! `scenarios` sends a scenario to its runner.

use std::time::Duration;

use crate::cluster::{Setup, ETCD_TTL, PARTITIONS};
use crate::servers::ServerKind;
use crate::units::fmt_ns;
use crate::zipf::{ZIPF_KEYS, ZIPF_S};

/// The scenarios by name, as `--scenario` takes them, in table order.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Scenario {
    Uncontended,
    HotKey,
    Zipf,
    MillionKeys,
    Handoff,
    Deadline,
    AsyncUncontended,
    AsyncHotKey,
    AsyncFreshKeys,
    AsyncDeadline,
    Semaphore,
    AsyncSemaphore,
    ReadMostly,
    ServerUncontended,
    ServerPipelined,
    ServerHotKey,
    ServerPaced,
    ServerMemory,
    ServerConnections,
    ServerHistory,
    Cluster,
}

/// What a scenario runs on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// Threads, through every design's blocking hold.
    Blocking,
    /// Tasks on a tokio multi-thread runtime, through the designs with an async hold.
    Async,
    /// Connections to `holdline serve` and to the servers a user picks
    /// instead (Redis, etcd, PostgreSQL), or to holdline with its history
    /// settings.
    Server,
    /// Connections to one plain `holdline serve` and to clusters of 1, 2
    /// and 3 nodes (with a private etcd).
    Cluster,
    /// Threads or tasks on a key of several permits, holdline's against
    /// the per-key semaphores and read-write locks of `permit_designs`.
    Permits,
}

/// Keys each thread holds round robin in `uncontended`.
pub const UNCONTENDED_KEYS: usize = 64;

/// Waiters beside the one holder in `deadline`.
pub const DEADLINE_WAITERS: usize = 3;

/// `million-keys` times one hold in this many.
pub const MILLION_TIMED_EVERY: usize = 16;

/// Tasks in the rows of `async-hot-key`.
pub const ASYNC_HOT_TASKS: [usize; 3] = [2, 4, 64];

/// Permits of the key in `semaphore` and `async-semaphore`.
pub const SEM_PERMITS: u32 = 4;

/// Threads in the rows of `semaphore` and `read-mostly`.
pub const PERMIT_THREADS: [usize; 3] = [2, 4, 8];

/// Tasks in the row of `async-semaphore`.
pub const ASYNC_SEM_TASKS: usize = 64;

/// Permits of the key in `read-mostly`: more than its threads, so shared
/// holds never run out; an exclusive hold takes them all.
pub const RW_PERMITS: u32 = 1024;

/// One hold in this many is exclusive in `read-mostly` (the rest shared).
pub const RW_WRITE_EVERY: usize = 10;

/// The work inside a hold of the permits scenarios: xorshift rounds
/// (each a dependent step the optimiser cannot drop). With no work inside,
/// a key of 4 permits and 2 to 4 threads would never make anyone wait.
pub const HOLD_WORK: u32 = 64;

/// Connections in the rows of `server-uncontended`, and of the other server scenarios.
pub const SERVER_CONNECTIONS: [usize; 3] = [1, 16, 64];
pub const SERVER_HOT_CONNECTIONS: usize = 16;

/// Clients of `server-connections` and of the verdict's memory per
/// connection: few enough for a default limit of 1,024 open files.
pub const MEMORY_CONNECTIONS: usize = 400;

/// Clients in the rows of `cluster`; each has a connection to every node.
pub const CLUSTER_CLIENTS: usize = 16;

/// Keys each client of `cluster` holds round robin (its own: spread over the nodes).
pub const CLUSTER_KEYS: usize = 16;

impl Scenario {
    pub const ALL: [Scenario; 21] = [
        Scenario::Uncontended,
        Scenario::HotKey,
        Scenario::Zipf,
        Scenario::MillionKeys,
        Scenario::Handoff,
        Scenario::Deadline,
        Scenario::AsyncUncontended,
        Scenario::AsyncHotKey,
        Scenario::AsyncFreshKeys,
        Scenario::AsyncDeadline,
        Scenario::Semaphore,
        Scenario::AsyncSemaphore,
        Scenario::ReadMostly,
        Scenario::ServerUncontended,
        Scenario::ServerPipelined,
        Scenario::ServerHotKey,
        Scenario::ServerPaced,
        Scenario::ServerMemory,
        Scenario::ServerConnections,
        Scenario::ServerHistory,
        Scenario::Cluster,
    ];

    /// Names that stand for several scenarios on the command line.
    pub const GROUPS: [(&'static str, Kind); 4] = [
        ("blocking", Kind::Blocking),
        ("async", Kind::Async),
        ("server", Kind::Server),
        ("permits", Kind::Permits),
    ];

    pub fn kind(self) -> Kind {
        match self {
            Scenario::AsyncUncontended
            | Scenario::AsyncHotKey
            | Scenario::AsyncFreshKeys
            | Scenario::AsyncDeadline => Kind::Async,
            Scenario::ServerUncontended
            | Scenario::ServerPipelined
            | Scenario::ServerHotKey
            | Scenario::ServerPaced
            | Scenario::ServerMemory
            | Scenario::ServerConnections
            | Scenario::ServerHistory => Kind::Server,
            Scenario::Cluster => Kind::Cluster,
            Scenario::Semaphore | Scenario::AsyncSemaphore | Scenario::ReadMostly => Kind::Permits,
            _ => Kind::Blocking,
        }
    }

    /// Part of `--quick`'s default set: the server scenarios need two
    /// servers built or installed, so CI's smoke run leaves them out.
    /// `cluster` stays (about 4 s when quick; its rows are n/a, saying what
    /// to install or build, without etcd or the holdline binary).
    pub fn in_quick(self) -> bool {
        self.kind() != Kind::Server
    }

    /// The name in tables, CSV, plots' file names and `--scenario`.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Uncontended => "uncontended",
            Scenario::HotKey => "hot-key",
            Scenario::Zipf => "zipf",
            Scenario::MillionKeys => "million-keys",
            Scenario::Handoff => "handoff",
            Scenario::Deadline => "deadline",
            Scenario::AsyncUncontended => "async-uncontended",
            Scenario::AsyncHotKey => "async-hot-key",
            Scenario::AsyncFreshKeys => "async-fresh-keys",
            Scenario::AsyncDeadline => "async-deadline",
            Scenario::Semaphore => "semaphore",
            Scenario::AsyncSemaphore => "async-semaphore",
            Scenario::ReadMostly => "read-mostly",
            Scenario::ServerUncontended => "server-uncontended",
            Scenario::ServerPipelined => "server-pipelined",
            Scenario::ServerHotKey => "server-hot-key",
            Scenario::ServerPaced => "server-paced",
            Scenario::ServerMemory => "server-memory",
            Scenario::ServerConnections => "server-connections",
            Scenario::ServerHistory => "server-history",
            Scenario::Cluster => "cluster",
        }
    }

    /// Scenarios run at fixed thread (task, connection) counts rather than
    /// at each `--threads` entry.
    pub fn fixed_threads(self) -> Option<&'static [usize]> {
        match self {
            Scenario::Handoff => Some(&[2]),
            Scenario::Deadline | Scenario::AsyncDeadline => Some(&[DEADLINE_WAITERS + 1]),
            Scenario::AsyncHotKey => Some(&ASYNC_HOT_TASKS),
            Scenario::Semaphore | Scenario::ReadMostly => Some(&PERMIT_THREADS),
            Scenario::AsyncSemaphore => Some(&[ASYNC_SEM_TASKS]),
            Scenario::ServerUncontended | Scenario::ServerPipelined => Some(&SERVER_CONNECTIONS),
            Scenario::ServerHotKey
            | Scenario::ServerPaced
            | Scenario::ServerMemory
            | Scenario::ServerHistory => Some(&[SERVER_HOT_CONNECTIONS]),
            Scenario::ServerConnections => Some(&[MEMORY_CONNECTIONS]),
            Scenario::Cluster => Some(&[CLUSTER_CLIENTS]),
            _ => None,
        }
    }

    /// The row the others' ratios read against: holdline's, for
    /// `cluster` the plain node's, for `server-history` holdline's with
    /// its history off.
    pub fn reference(self) -> &'static str {
        match self {
            Scenario::Cluster => Setup::Plain.name(),
            Scenario::ServerHistory => ServerKind::HistoryOff.name(),
            _ => "holdline",
        }
    }

    /// What a run of this scenario measures, with the numbers of `cfg`.
    pub fn legend(self, cfg: &Cfg) -> String {
        match self {
            Scenario::Uncontended => format!(
                "each thread its own {UNCONTENDED_KEYS} keys; rate = holds/s; latency = one hold (lock+unlock)"
            ),
            Scenario::HotKey => "all threads on one key; rate = holds/s; latency = one hold incl. waiting; \
                 ooo = grants out of arrival order (approx.)"
                .into(),
            Scenario::Zipf => format!(
                "zipf(s={ZIPF_S}) over {ZIPF_KEYS} keys; rate = holds/s; latency = one hold incl. waiting"
            ),
            Scenario::MillionKeys => format!(
                "{} distinct fresh keys, each held once; rate = holds/s; latency = 1 hold in {MILLION_TIMED_EVERY}; \
                 mem = bytes still allocated once all keys are idle (holdline after reclaim_idle)",
                cfg.million
            ),
            Scenario::Handoff => format!(
                "two threads ping-pong one key (holder lets go {} after the other announced it is coming); \
                 rate = handoffs/s; latency = release -> other thread's closure running",
                fmt_ns(cfg.handoff_linger.as_nanos() as u64)
            ),
            Scenario::Deadline => format!(
                "1 holder ({} holds) + {DEADLINE_WAITERS} waiters with a {} deadline; rate = timeouts/s; \
                 latency = how late a timeout returned",
                fmt_ns(cfg.dl_hold.as_nanos() as u64),
                fmt_ns(cfg.dl_wait.as_nanos() as u64)
            ),
            Scenario::AsyncUncontended => format!(
                "threads = tasks on a tokio runtime of {} workers, each task its own {UNCONTENDED_KEYS} keys; \
                 rate = holds/s; latency = one async hold",
                workers()
            ),
            Scenario::AsyncHotKey => format!(
                "threads = tasks on a tokio runtime of {} workers, all on one key; rate = holds/s; \
                 latency = one async hold incl. waiting; ooo = grants out of arrival order (approx.)",
                workers()
            ),
            Scenario::AsyncFreshKeys => format!(
                "threads = tasks; {} distinct fresh keys, each held once by a task; rate = holds/s; \
                 latency = 1 hold in {MILLION_TIMED_EVERY}; mem = bytes still allocated once all keys are idle",
                cfg.million
            ),
            Scenario::AsyncDeadline => format!(
                "1 holder thread ({} holds) + {DEADLINE_WAITERS} tasks waiting with a {} deadline; \
                 rate = timeouts/s; latency = how late a timeout returned (thread waiters: `deadline`)",
                fmt_ns(cfg.dl_hold.as_nanos() as u64),
                fmt_ns(cfg.dl_wait.as_nanos() as u64)
            ),
            Scenario::Semaphore | Scenario::AsyncSemaphore => permits_legend(self),
            Scenario::ReadMostly => permits_legend(self),
            Scenario::Cluster => cluster_legend(),
            // The server scenarios.
            _ => server_legend(self, cfg),
        }
    }
}

/// What the server scenarios' rows measure.
fn server_legend(s: Scenario, cfg: &Cfg) -> String {
    match s {
        Scenario::ServerUncontended => format!(
            "threads = connections, each on its own key; rate = hold+release pairs/s \
             ({RECIPES}); latency = one pair (2 round trips); {SERVERS_NOTE}"
        ),
        Scenario::ServerPaced => format!(
            "threads = connections, each on its own key, offering {PACED_RATE} hold+release \
             pairs/s in all (paced, schedules staggered), {} per run; rate = pairs/s done; \
             latency = one pair; cpu/op = the server's CPU per pair at this light load; \
             {SERVERS_NOTE}",
            fmt_ns(cfg.paced.as_nanos() as u64)
        ),
        Scenario::ServerConnections => format!(
            "threads = clients, each with its own connection (etcd: client and lease; \
             postgres: session) holding one key of its own; rate = clients connected and \
             holding per second; latency = a client's first hold; mem idle = the server's \
             memory growth per client, its processes' PSS (/proc/PID/smaps_rollup: \
             PostgreSQL's backends included, shared pages split among them), 1.5 s after \
             the last hold; {SERVERS_NOTE}"
        ),
        Scenario::ServerHistory => format!(
            "the server-uncontended load at {SERVER_HOT_CONNECTIONS} connections on holdline \
             with its history off (--history 0: the reference row), on (holdline, as it \
             ships: the last 10,000 events) and also written to a file (--audit-log FILE, a \
             temp file); rate = hold+release pairs/s; time vs hl = against history-off \
             (its rate / the row's: above 1 = history costs that factor); {SERVERS_NOTE}"
        ),
        Scenario::ServerPipelined => format!(
            "threads = connections, each on {PIPELINED_DEPTH} keys of its own, pipelining \
             {PIPELINED_DEPTH} holds (holdline: TRYHOLD; redis: SET NX PX), then their \
             {PIPELINED_DEPTH} releases (RELEASE; EVALSHA compare-and-delete); rate = \
             hold+release pairs/s; latency = one batch of holds; {}",
            SERVERS_NOTE
        ),
        Scenario::ServerHotKey => format!(
            "threads = connections, all on one key; rate = grants/s (holdline: HOLD waits in line; \
             redis: SET NX retried every {}; etcd: Lock waits for lower revisions; postgres: \
             pg_advisory_lock waits in the lock manager's queue); latency = wait from first \
             try to grant; ooo = grants made while a connection that began waiting earlier \
             still waited; {SERVERS_NOTE}",
            fmt_ns(REDIS_POLL.as_nanos() as u64)
        ),
        Scenario::ServerMemory => format!(
            "{} distinct keys, each held once and released, over {SERVER_HOT_CONNECTIONS} connections \
             pipelining {} holds then their releases; rate = keys/s; latency = one batch of holds; \
             mem idle = server RSS after the last release - RSS at start (note: RSS at start, peak, \
             after release, and later; keys the server still has)",
            cfg.million,
            PIPELINE
        ),
        other => panic!("{} is not a server scenario", other.name()),
    }
}

/// What the permits scenarios' rows measure.
fn permits_legend(s: Scenario) -> String {
    let work = format!("{HOLD_WORK} xorshift rounds of work inside each hold");
    let wait = "latency = wait (from asking to the closure starting)";
    match s {
        Scenario::Semaphore => format!(
            "all threads on one key of {SEM_PERMITS} permits, each hold taking 1; {work}; \
             rate = grants/s; {wait}; dashmap+tokio-sem: tokio's Semaphore has no blocking \
             acquire, so threads drive acquire_many(1) with a park/unpark block_on, as tokio's \
             own blocking_lock does (threads against threads, as dashmap+tokio)"
        ),
        Scenario::AsyncSemaphore => format!(
            "threads = tasks on a tokio runtime of {} workers, all on one key of {SEM_PERMITS} \
             permits, each hold taking 1; {work}; rate = grants/s; {wait}",
            workers()
        ),
        _ => format!(
            "all threads on one key of {RW_PERMITS} permits: 1 hold in {RW_WRITE_EVERY} exclusive \
             (all permits; rw: write), the rest shared (1 permit; rw: read); {work}; \
             rate = holds/s; {wait}, every hold; dashmap+pl-rw is parking_lot's (unfair: the \
             speed reference); dashmap+tokio-rw (FIFO) uses blocking_read/blocking_write \
             (threads against threads, as dashmap+tokio); ooo = exclusive grants overtaken / \
             exclusive grants: each hold takes a ticket (an atomic counter) just before asking, \
             and at its grant raises the highest ticket granted so far (fetch_max); an exclusive \
             grant is overtaken when a ticket above its own was granted first, i.e. a hold that \
             asked later got in before it (approx.: a thread preempted between its ticket and \
             joining the line counts too); the note gives the shared grants' count, which holders \
             granted together, starting in any order, make noisy"
        ),
    }
}

/// What the `cluster` rows measure, and what they cannot show here.
fn cluster_legend() -> String {
    let cpus = workers();
    format!(
        "threads = clients, each holding its own {CLUSTER_KEYS} keys round robin (HOLD bench key \
         WAIT 0, RELEASE lease) over a connection to every node, each key sent to its slot's \
         owner (CRC16 computed by the client, owners from CLUSTER SLOTS); rate = hold+release \
         pairs/s; latency = one pair; plain = one holdline serve without --etcd, cluster-N = N \
         nodes of one cluster (a private etcd, {PARTITIONS} partitions, --etcd-ttl {ETCD_TTL}); \
         time vs hl = against plain. On this machine's {cpus} CPU(s) the nodes, etcd and the \
         client share the same cores, so more nodes cannot add throughput here: the rows show \
         the cost of routing and of cluster mode, not scaling"
    )
}

/// What the scenarios are run with.
pub struct Cfg {
    /// Throughput phase of a duration-based scenario.
    pub duration: Duration,
    /// Latency phase (every operation timed) of a duration-based scenario.
    pub lat_duration: Duration,
    /// Distinct keys in `million-keys`.
    pub million: usize,
    /// Wait deadline and hold time in `deadline`.
    pub dl_wait: Duration,
    pub dl_hold: Duration,
    /// How long a holder in `handoff` keeps the key after the other thread
    /// said it is about to wait: long enough for it to be in line.
    pub handoff_linger: Duration,
    /// A run of `server-paced`: 3 throughput phases, so that its few CPU
    /// ticks (10 ms each) at a light load still say something.
    pub paced: Duration,
}

/// The default of [`Cfg::handoff_linger`].
pub const HANDOFF_LINGER: Duration = Duration::from_micros(5);

impl Cfg {
    /// The configuration of a run with `duration` throughput phases and `million` keys.
    pub fn new(duration: Duration, million: usize) -> Self {
        Cfg {
            duration,
            lat_duration: (duration / 2).max(Duration::from_millis(1)),
            million,
            dl_wait: Duration::from_millis(1),
            dl_hold: Duration::from_millis(5),
            paced: duration * 3,
            // HARNESS_HANDOFF_LINGER_US overrides the linger (for experiments).
            handoff_linger: std::env::var("HARNESS_HANDOFF_LINGER_US")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_micros)
                .unwrap_or(HANDOFF_LINGER),
        }
    }
}

/// Holds a thread or task makes between looks at the stop flag.
pub const BATCH: usize = 32;

/// Worker threads of the runtime the async rows run on: one per CPU, as
/// `#[tokio::main]` would have.
pub fn workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// How often a Redis lock client retries a taken key (redis-py's default is 100 ms).
pub const REDIS_POLL: Duration = Duration::from_millis(1);

/// Commands queued before one flush in `server-memory`.
pub const PIPELINE: usize = 64;

/// How many holds a connection of the pipelined row sends before reading.
pub const PIPELINED_DEPTH: usize = 16;

/// Hold+release pairs offered per second, all connections together, in `server-paced`.
pub const PACED_RATE: u64 = 1600;

/// What the server rows send.
pub const RECIPES: &str = "holdline: HOLD, RELEASE; redis: SET NX PX, EVALSHA compare-and-delete; \
     etcd: Lock(key, lease), Unlock RPCs; postgres: pg_advisory_lock, pg_advisory_unlock";

pub const SERVERS_NOTE: &str = "every server started by the harness on loopback (etcd's data on \
     tmpfs, PostgreSQL with fsync off), each client its own connection (holdline and Redis \
     through holdline_client::Connection); cpu/op = the server's user + system CPU \
     (/proc/PID/stat, PostgreSQL's backends included) over the row / its operations";
