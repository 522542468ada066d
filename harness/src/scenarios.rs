//! The scenarios, and the blocking ones' runners. Every runner is generic
//! over the design, so the measured loops are monomorphised per design.
//! The `async-*` runners are in `async_scenarios`, the `server-*` ones in
//! `server_scenarios`.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::alloc::live_bytes;
use crate::designs::{AsyncKeyedLock, Deadline, KeyedLock};
use crate::report::fmt_ns;
use crate::row::{Run, QUANTILES};
use crate::zipf::{Rng, Zipf, ZIPF_KEYS, ZIPF_S};

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
    ServerUncontended,
    ServerHotKey,
    ServerMemory,
}

/// What a scenario runs on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// Threads, through every design's blocking hold.
    Blocking,
    /// Tasks on a tokio multi-thread runtime, through the designs with an async hold.
    Async,
    /// Connections to `holdline serve` and to `redis-server`.
    Server,
}

/// Keys each thread holds round robin in `uncontended`.
pub const UNCONTENDED_KEYS: usize = 64;

/// Waiters beside the one holder in `deadline`.
pub const DEADLINE_WAITERS: usize = 3;

/// `million-keys` times one hold in this many.
pub const MILLION_TIMED_EVERY: usize = 16;

/// Tasks in the rows of `async-hot-key`.
pub const ASYNC_HOT_TASKS: [usize; 3] = [2, 4, 64];

/// Connections in the rows of `server-uncontended`, and of the other server scenarios.
pub const SERVER_CONNECTIONS: [usize; 3] = [1, 16, 64];
pub const SERVER_HOT_CONNECTIONS: usize = 16;

impl Scenario {
    pub const ALL: [Scenario; 13] = [
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
        Scenario::ServerUncontended,
        Scenario::ServerHotKey,
        Scenario::ServerMemory,
    ];

    /// Names that stand for several scenarios on the command line.
    pub const GROUPS: [(&'static str, Kind); 3] = [
        ("blocking", Kind::Blocking),
        ("async", Kind::Async),
        ("server", Kind::Server),
    ];

    pub fn kind(self) -> Kind {
        match self {
            Scenario::AsyncUncontended
            | Scenario::AsyncHotKey
            | Scenario::AsyncFreshKeys
            | Scenario::AsyncDeadline => Kind::Async,
            Scenario::ServerUncontended | Scenario::ServerHotKey | Scenario::ServerMemory => {
                Kind::Server
            }
            _ => Kind::Blocking,
        }
    }

    /// Part of `--quick`'s default set: the server scenarios need two
    /// servers built or installed, so CI's smoke run leaves them out.
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
            Scenario::ServerUncontended => "server-uncontended",
            Scenario::ServerHotKey => "server-hot-key",
            Scenario::ServerMemory => "server-memory",
        }
    }

    /// Scenarios run at fixed thread (task, connection) counts rather than
    /// at each `--threads` entry.
    pub fn fixed_threads(self) -> Option<&'static [usize]> {
        match self {
            Scenario::Handoff => Some(&[2]),
            Scenario::Deadline | Scenario::AsyncDeadline => Some(&[DEADLINE_WAITERS + 1]),
            Scenario::AsyncHotKey => Some(&ASYNC_HOT_TASKS),
            Scenario::ServerUncontended => Some(&SERVER_CONNECTIONS),
            Scenario::ServerHotKey | Scenario::ServerMemory => Some(&[SERVER_HOT_CONNECTIONS]),
            _ => None,
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
                crate::async_scenarios::workers()
            ),
            Scenario::AsyncHotKey => format!(
                "threads = tasks on a tokio runtime of {} workers, all on one key; rate = holds/s; \
                 latency = one async hold incl. waiting; ooo = grants out of arrival order (approx.)",
                crate::async_scenarios::workers()
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
            Scenario::ServerUncontended => format!(
                "threads = connections, each on its own key; rate = hold+release pairs/s \
                 (holdline: HOLD, RELEASE; redis: SET NX PX, EVALSHA compare-and-delete); \
                 latency = one pair (2 round trips); {}",
                crate::server_scenarios::SERVERS_NOTE
            ),
            Scenario::ServerHotKey => format!(
                "threads = connections, all on one key; rate = grants/s (holdline: HOLD waits in line; \
                 redis: SET NX retried every {}); latency = wait from first try to grant; \
                 ooo = grants made while a connection that began waiting earlier still waited",
                fmt_ns(crate::server_scenarios::REDIS_POLL.as_nanos() as u64)
            ),
            Scenario::ServerMemory => format!(
                "{} distinct keys, each held once and released, over {SERVER_HOT_CONNECTIONS} connections \
                 pipelining {} holds then their releases; rate = keys/s; latency = one batch of holds; \
                 mem idle = server RSS after the last release - RSS at start (note: RSS at start, peak, \
                 after release, and later; keys the server still has)",
                cfg.million,
                crate::server_scenarios::PIPELINE
            ),
        }
    }

    /// One run of this scenario with design `D`.
    pub fn run<D: KeyedLock>(self, cfg: &Cfg, threads: usize) -> Run {
        match self {
            Scenario::Uncontended => uncontended::<D>(cfg, threads),
            Scenario::HotKey => hot_key::<D>(cfg, threads),
            Scenario::Zipf => zipf::<D>(cfg, threads),
            Scenario::MillionKeys => million_keys::<D>(cfg, threads),
            Scenario::Handoff => handoff::<D>(cfg),
            Scenario::Deadline => deadline::<D>(cfg),
            // Reached for the designs without an async hold (bench sends the
            // others to `run_async`) and never for a server scenario.
            _ => {
                let mut run = base_run::<D>(self, threads);
                run.na = Some(match self.kind() {
                    Kind::Server => "a server scenario",
                    _ => "no async hold",
                });
                run
            }
        }
    }

    /// One run of this async scenario with design `D`; a blocking or server
    /// scenario is answered by [`Scenario::run`].
    pub fn run_async<D: AsyncKeyedLock>(self, cfg: &Cfg, tasks: usize) -> Run {
        use crate::async_scenarios as a;
        match self {
            Scenario::AsyncUncontended => a::uncontended::<D>(cfg, tasks),
            Scenario::AsyncHotKey => a::hot_key::<D>(cfg, tasks),
            Scenario::AsyncFreshKeys => a::fresh_keys::<D>(cfg, tasks),
            Scenario::AsyncDeadline => a::deadline::<D>(cfg),
            _ => self.run::<D>(cfg, tasks),
        }
    }

    /// The run of a design whose run panicked.
    pub fn failed<D: KeyedLock>(self, threads: usize) -> Run {
        let mut run = base_run::<D>(self, threads);
        run.na = Some("PANICKED");
        run.note = "the run panicked (see stderr)".into();
        run
    }
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
            // HARNESS_HANDOFF_LINGER_US overrides the linger (for experiments).
            handoff_linger: std::env::var("HARNESS_HANDOFF_LINGER_US")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_micros)
                .unwrap_or(HANDOFF_LINGER),
        }
    }
}

pub fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram")
}

pub fn fill_lat(run: &mut Run, h: &Histogram<u64>) {
    if h.is_empty() {
        return;
    }
    run.p50 = h.value_at_quantile(0.5);
    run.p99 = h.value_at_quantile(0.99);
    run.p999 = h.value_at_quantile(0.999);
    run.max = h.max();
    run.quantiles = QUANTILES
        .iter()
        .map(|&q| (q, h.value_at_quantile(q)))
        .collect();
}

pub fn base_run<D: KeyedLock>(scenario: Scenario, threads: usize) -> Run {
    let mut run = Run::new(scenario, threads, D::NAME);
    run.fifo = D::FIFO;
    run.deadline = matches!(D::DEADLINE, Deadline::Native(_));
    run
}

/// Runs `work(thread_index, stop)` on `threads` threads for `dur`, starting
/// them together; answers their results and the measured wall time.
fn run_for<T: Send>(
    threads: usize,
    dur: Duration,
    work: impl Fn(usize, &AtomicBool) -> T + Sync,
) -> (Vec<T>, f64) {
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (work, stop, barrier) = (&work, &stop, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    work(t, stop)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(dur);
        stop.store(true, Relaxed);
        let out: Vec<T> = hs.into_iter().map(|h| h.join().expect("worker")).collect();
        (out, start.elapsed().as_secs_f64())
    })
}

pub const BATCH: usize = 32;

/// One design instance on cache lines of its own (per-thread baselines must
/// not share a line, or false sharing is what gets measured).
#[repr(align(128))]
pub struct Padded<T>(pub T);

/// Throughput then latency over per-thread key sequences (`seqs[t]`, a power-of-two length).
/// `instances` is 1 (shared) or one per thread (single-key baselines, uncontended).
fn throughput_and_latency<D: KeyedLock>(
    run: &mut Run,
    cfg: &Cfg,
    instances: &[Padded<D>],
    seqs: &[Vec<&str>],
    fairness: bool,
) {
    let threads = seqs.len();
    let inst = |t: usize| &instances[t % instances.len()].0;
    // Throughput: nothing timed inside the loop.
    let (counts, secs) = run_for(threads, cfg.duration, |t, stop| {
        let d = inst(t);
        let seq = &seqs[t];
        let mask = seq.len() - 1;
        let mut i = 0usize;
        let mut n = 0u64;
        while !stop.load(Relaxed) {
            for _ in 0..BATCH {
                d.hold(seq[i & mask], || black_box(()));
                i = i.wrapping_add(1);
            }
            n += BATCH as u64;
        }
        n
    });
    run.set_rate(counts.iter().sum(), secs);

    // Latency: every hold timed; for fairness also a ticket taken before each hold.
    let ticket = AtomicU64::new(0);
    let max_granted = AtomicU64::new(0);
    let (hs, _) = run_for(threads, cfg.lat_duration, |t, stop| {
        let d = inst(t);
        let seq = &seqs[t];
        let mask = seq.len() - 1;
        let mut h = hist();
        let mut i = 0usize;
        let (mut ooo, mut grants) = (0u64, 0u64);
        while !stop.load(Relaxed) {
            let k = seq[i & mask];
            i = i.wrapping_add(1);
            if fairness {
                let my = ticket.fetch_add(1, Relaxed) + 1;
                let t0 = Instant::now();
                d.hold(k, || {
                    // Inside the hold: the lock orders these accesses.
                    if my < max_granted.load(Relaxed) {
                        ooo += 1;
                    } else {
                        max_granted.store(my, Relaxed);
                    }
                });
                let _ = h.record(t0.elapsed().as_nanos() as u64);
                grants += 1;
            } else {
                let t0 = Instant::now();
                d.hold(k, || black_box(()));
                let _ = h.record(t0.elapsed().as_nanos() as u64);
            }
        }
        (h, ooo, grants)
    });
    let mut all = hist();
    let (mut ooo, mut grants) = (0, 0);
    for (h, o, g) in hs {
        all.add(h).expect("merge");
        ooo += o;
        grants += g;
    }
    fill_lat(run, &all);
    if fairness {
        run.out_of_order = Some((ooo, grants));
    }
}

fn uncontended<D: KeyedLock>(cfg: &Cfg, threads: usize) -> Run {
    let mut run = base_run::<D>(Scenario::Uncontended, threads);
    let keys: Vec<Vec<String>> = (0..threads)
        .map(|t| (0..UNCONTENDED_KEYS).map(|j| format!("u{t}-{j}")).collect())
        .collect();
    let seqs: Vec<Vec<&str>> = keys
        .iter()
        .map(|ks| ks.iter().map(String::as_str).collect())
        .collect();
    // A single-key baseline gets one lock per thread (each thread its own lock).
    let n = if D::SINGLE { threads } else { 1 };
    let instances: Vec<Padded<D>> = (0..n).map(|_| Padded(D::new())).collect();
    throughput_and_latency(&mut run, cfg, &instances, &seqs, false);
    if D::SINGLE {
        run.note = "one lock per thread".into();
    } else {
        run.note = format!("{UNCONTENDED_KEYS} own keys per thread");
    }
    run
}

fn hot_key<D: KeyedLock>(cfg: &Cfg, threads: usize) -> Run {
    let mut run = base_run::<D>(Scenario::HotKey, threads);
    let seqs: Vec<Vec<&str>> = (0..threads).map(|_| vec!["hot"]).collect();
    let d = [Padded(D::new())];
    throughput_and_latency(&mut run, cfg, &d, &seqs, true);
    run
}

fn zipf<D: KeyedLock>(cfg: &Cfg, threads: usize) -> Run {
    let mut run = base_run::<D>(Scenario::Zipf, threads);
    if D::SINGLE {
        run.na = Some("single key");
        return run;
    }
    let keys: Vec<String> = (0..ZIPF_KEYS).map(|i| format!("z{i}")).collect();
    let z = Zipf::new(ZIPF_KEYS, ZIPF_S);
    let seqs: Vec<Vec<&str>> = (0..threads)
        .map(|t| {
            let mut rng = Rng::new(t as u64 + 1);
            (0..1 << 16)
                .map(|_| keys[z.sample(rng.unit())].as_str())
                .collect()
        })
        .collect();
    let d = [Padded(D::new())];
    throughput_and_latency(&mut run, cfg, &d, &seqs, false);
    run.note = format!("{ZIPF_KEYS} keys, s={ZIPF_S}");
    run
}

/// The end of a fresh-keys row (threads or tasks): the latencies, and the
/// memory the design still has once every key is idle (`base`: the live
/// bytes before the row), right after a reclaim and ~100 ms later.
pub fn settle_fresh_keys(
    run: &mut Run,
    hs: Vec<Histogram<u64>>,
    base: isize,
    idle: &str,
    held: &str,
    reclaim: impl Fn(),
) {
    let mut all = hist();
    for h in hs {
        all.add(h).expect("merge");
    }
    fill_lat(run, &all);
    // The histogram is the harness's own memory: gone before measuring.
    drop(all);
    run.mem_live = Some((live_bytes() - base) as i64);
    reclaim();
    run.mem_idle = Some((live_bytes() - base) as i64);
    // Epoch reclamation may need a little further activity: a few more
    // reclaims, 20 ms apart, show whether what is left is only late.
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(20));
        reclaim();
    }
    run.mem_settled = Some((live_bytes() - base) as i64);
    run.note = format!(
        "{} fresh keys, each {held}; 1 in {MILLION_TIMED_EVERY} timed; idle: {idle}; 100 ms later: {}",
        run.ops,
        crate::report::fmt_bytes(run.mem_settled.unwrap_or(0))
    );
}

fn million_keys<D: KeyedLock>(cfg: &Cfg, threads: usize) -> Run {
    let mut run = base_run::<D>(Scenario::MillionKeys, threads);
    if D::SINGLE {
        run.na = Some("single key");
        return run;
    }
    let n = cfg.million;
    let keys: Vec<String> = (0..n).map(|i| format!("m{i:07}")).collect();
    let d = D::new();
    let base = live_bytes();
    let chunk = n.div_ceil(threads);
    let start = Instant::now();
    let hs: Vec<Histogram<u64>> = std::thread::scope(|s| {
        let hs: Vec<_> = keys
            .chunks(chunk)
            .map(|ks| {
                let d = &d;
                s.spawn(move || {
                    let mut h = hist();
                    for (i, k) in ks.iter().enumerate() {
                        if i % MILLION_TIMED_EVERY == 0 {
                            let t0 = Instant::now();
                            d.hold(k, || black_box(()));
                            let _ = h.record(t0.elapsed().as_nanos() as u64);
                        } else {
                            d.hold(k, || black_box(()));
                        }
                    }
                    h
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("worker")).collect()
    });
    run.set_rate(n as u64, start.elapsed().as_secs_f64());
    settle_fresh_keys(&mut run, hs, base, D::IDLE, "held once", || d.reclaim());
    drop(d);
    run
}

/// Two threads ping-pong one key: each, once it holds the key, waits until
/// the other has announced it is about to wait for the key, lingers
/// [`Cfg::handoff_linger`] so the other is in line, and lets go. Latency: from
/// the holder's last instant inside its closure to the other's closure
/// starting. Every hold is a handoff unless a design lets the releasing
/// thread take the key straight back (barging); the note says how many
/// holds changed thread.
fn handoff<D: KeyedLock>(cfg: &Cfg) -> Run {
    let threads = 2;
    let mut run = base_run::<D>(Scenario::Handoff, threads);
    run.unit = "handoffs";
    run.lat_of = "release->next";
    let d = D::new();
    let base = Instant::now();
    let now = || base.elapsed().as_nanos() as u64;
    let last_release = AtomicU64::new(0);
    let last_holder = AtomicUsize::new(usize::MAX);
    let waiting = [AtomicBool::new(false), AtomicBool::new(false)];
    let total = cfg.duration + cfg.lat_duration;
    let linger_for = cfg.handoff_linger;
    let (outs, secs) = run_for(threads, total, |t, stop| {
        let mut h = hist();
        let (mut holds, mut handoffs) = (0u64, 0u64);
        while !stop.load(Relaxed) {
            waiting[t].store(true, std::sync::atomic::Ordering::SeqCst);
            d.hold("ping", || {
                let start = now();
                waiting[t].store(false, std::sync::atomic::Ordering::SeqCst);
                let prev = last_holder.load(Relaxed);
                if prev != t && prev != usize::MAX {
                    let _ = h.record(start.saturating_sub(last_release.load(Relaxed)).max(1));
                    handoffs += 1;
                }
                // Wait for the other thread to come for the key.
                let mut spins = 0u32;
                while !waiting[1 - t].load(std::sync::atomic::Ordering::SeqCst)
                    && !stop.load(Relaxed)
                {
                    spins += 1;
                    if spins < 1_000 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
                let linger = Instant::now();
                while linger.elapsed() < linger_for {
                    std::hint::spin_loop();
                }
                last_holder.store(t, Relaxed);
                last_release.store(now(), Relaxed);
            });
            holds += 1;
        }
        (h, holds, handoffs)
    });
    let mut all = hist();
    let (mut holds, mut handoffs) = (0, 0);
    for (h, a, b) in outs {
        all.add(h).expect("merge");
        holds += a;
        handoffs += b;
    }
    fill_lat(&mut run, &all);
    run.set_rate(handoffs, secs);
    run.note = format!(
        "{handoffs} of {holds} holds changed thread ({:.0}%)",
        100.0 * handoffs as f64 / holds.max(1) as f64
    );
    run
}

/// One thread holds a key for `dl_hold` at a time, again and again; the other
/// threads wait on it with a `dl_wait` deadline. Latency is how late each
/// timeout came back (elapsed minus the deadline); a timeout before the
/// deadline counts as early (incorrect).
fn deadline<D: KeyedLock>(cfg: &Cfg) -> Run {
    let waiters = DEADLINE_WAITERS;
    let mut run = base_run::<D>(Scenario::Deadline, waiters + 1);
    run.unit = "timeouts";
    run.lat_of = "lateness";
    if D::DEADLINE == Deadline::Lacks {
        run.na = Some("no bounded wait");
        return run;
    }
    let d = D::new();
    let wait = cfg.dl_wait;
    let hold_for = cfg.dl_hold;
    let total = (cfg.duration + cfg.lat_duration).max(hold_for * 60);
    let (outs, secs) = run_for(waiters + 1, total, |t, stop| {
        let mut h = hist();
        let (mut timeouts, mut early, mut grants) = (0u64, 0u64, 0u64);
        if t == 0 {
            while !stop.load(Relaxed) {
                d.hold("dl", || std::thread::sleep(hold_for));
            }
            return (h, 0, 0, 0);
        }
        while !stop.load(Relaxed) {
            let t0 = Instant::now();
            match d.hold_within("dl", wait, || black_box(())) {
                Some(()) => grants += 1,
                None => {
                    let el = t0.elapsed();
                    timeouts += 1;
                    if el < wait {
                        early += 1;
                    } else {
                        let _ = h.record(((el - wait).as_nanos() as u64).max(1));
                    }
                }
            }
        }
        (h, timeouts, early, grants)
    });
    let mut all = hist();
    let (mut timeouts, mut early, mut grants) = (0, 0, 0);
    for (h, a, b, c) in outs {
        all.add(h).expect("merge");
        timeouts += a;
        early += b;
        grants += c;
    }
    fill_lat(&mut run, &all);
    run.set_rate(timeouts, secs);
    run.note = format!(
        "{waiters} waiters, wait {:?}, holder {:?}: {timeouts} timed out ({early} early), {grants} granted",
        wait, hold_for
    );
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn a_scenarios_flag_name_is_its_table_name() {
        for s in Scenario::ALL {
            let flag = s.to_possible_value().expect("not skipped");
            assert_eq!(flag.get_name(), s.name());
        }
        assert_eq!(Scenario::ALL.len(), Scenario::value_variants().len());
    }

    #[test]
    fn legends_carry_the_configuration() {
        let mut cfg = Cfg::new(Duration::from_millis(5), 1234);
        cfg.handoff_linger = Duration::from_micros(7);
        cfg.dl_wait = Duration::from_millis(3);
        assert!(Scenario::MillionKeys
            .legend(&cfg)
            .starts_with("1234 distinct"));
        assert!(Scenario::Handoff
            .legend(&cfg)
            .contains("lets go 7.0us after"));
        assert!(Scenario::Deadline
            .legend(&cfg)
            .contains("with a 3.00ms deadline"));
    }

    #[test]
    fn every_design_runs_every_scenario_briefly() {
        let mut cfg = Cfg::new(Duration::from_millis(5), 1000);
        cfg.dl_hold = Duration::from_millis(2);
        for d in crate::designs::Design::ALL {
            for s in Scenario::ALL
                .into_iter()
                .filter(|s| s.kind() == Kind::Blocking)
            {
                let run = crate::for_design!(d, D => s.run::<D>(&cfg, 2));
                assert_eq!((run.design, run.scenario), (d.name(), s));
                if run.na.is_none() {
                    assert!(run.secs > 0.0 && run.ops > 0, "{s:?} {d:?}");
                }
            }
        }
    }

    #[test]
    fn async_scenarios_run_on_the_async_designs_and_are_na_on_the_others() {
        let mut cfg = Cfg::new(Duration::from_millis(5), 1000);
        cfg.dl_hold = Duration::from_millis(2);
        let asyncs = Scenario::ALL
            .into_iter()
            .filter(|s| s.kind() == Kind::Async);
        for s in asyncs {
            let tasks = s.fixed_threads().map_or(2, |t| t[0]);
            for d in crate::designs::Design::ALL {
                let run = crate::for_async_design!(d, D => s.run_async::<D>(&cfg, tasks),
                    else crate::for_design!(d, D => s.run::<D>(&cfg, tasks)));
                assert_eq!((run.design, run.scenario), (d.name(), s));
                if d.has_async() {
                    assert_eq!(run.na, None, "{s:?} {d:?}");
                    assert!(run.secs > 0.0 && run.ops > 0, "{s:?} {d:?}");
                    assert!(run.p99 > 0, "{s:?} {d:?}: no latency recorded");
                } else {
                    assert_eq!(run.na, Some("no async hold"), "{s:?} {d:?}");
                }
            }
        }
    }

    #[test]
    fn async_fresh_keys_gives_holdlines_memory_back_and_tokios_map_keeps_it() {
        let cfg = Cfg::new(Duration::from_millis(5), 20_000);
        let hl = Scenario::AsyncFreshKeys.run_async::<crate::designs::Holdline>(&cfg, 2);
        let tk = Scenario::AsyncFreshKeys.run_async::<crate::designs::DashTokio>(&cfg, 2);
        assert_eq!(hl.ops, 20_000);
        // 20,000 entries of a map of Arc<Mutex> are well over 200 KiB.
        assert!(tk.mem_idle.unwrap() > 200 << 10, "{:?}", tk.mem_idle);
        assert!(
            hl.mem_settled.unwrap() < tk.mem_idle.unwrap() / 4,
            "holdline kept {:?} bytes of 20,000 idle keys, tokio's map {:?}",
            hl.mem_settled,
            tk.mem_idle
        );
    }

    #[test]
    fn async_deadline_waits_time_out_late_never_early() {
        let mut cfg = Cfg::new(Duration::from_millis(100), 10);
        cfg.dl_hold = Duration::from_millis(20);
        for run in [
            Scenario::AsyncDeadline.run_async::<crate::designs::Holdline>(&cfg, 4),
            Scenario::AsyncDeadline.run_async::<crate::designs::DashTokio>(&cfg, 4),
        ] {
            assert!(run.ops > 0, "{}: {}", run.design, run.note);
            assert!(
                run.note.contains("(0 early)"),
                "{}: {}",
                run.design,
                run.note
            );
        }
    }

    #[test]
    fn async_hot_key_counts_grants_in_order_for_fifo_designs() {
        let cfg = Cfg::new(Duration::from_millis(20), 10);
        let run = Scenario::AsyncHotKey.run_async::<crate::designs::Holdline>(&cfg, 4);
        let (ooo, grants) = run.out_of_order.expect("hot key samples order");
        assert!(grants > 0 && ooo <= grants, "{ooo}/{grants}");
    }
}
