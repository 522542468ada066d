//! The scenarios. Every runner is generic over the design, so the measured
//! loops are monomorphised per design.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::alloc::live_bytes;
use crate::designs::{Deadline, KeyedLock};

pub const SCENARIOS: [&str; 6] = [
    "uncontended",
    "hot-key",
    "zipf",
    "million-keys",
    "handoff",
    "deadline",
];

/// Scenarios run once (at a fixed thread count) rather than per `--threads` entry.
pub fn fixed_threads(scenario: &str) -> Option<usize> {
    match scenario {
        "handoff" => Some(2),
        // One holder and three waiters.
        "deadline" => Some(4),
        _ => None,
    }
}

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
}

/// Quantiles kept for the latency plots.
pub const QUANTILES: [f64; 9] = [0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999, 1.0];

#[derive(Clone, Debug, Default)]
pub struct Row {
    pub scenario: &'static str,
    pub threads: usize,
    pub design: &'static str,
    pub fifo: bool,
    pub deadline: bool,
    /// `Some(reason)` when the design cannot run the scenario.
    pub na: Option<&'static str>,
    /// What `ops` counts (holds, handoffs, timeouts).
    pub unit: &'static str,
    pub ops: u64,
    pub secs: f64,
    pub per_sec: f64,
    /// What the latency columns measure.
    pub lat_of: &'static str,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub quantiles: Vec<(f64, u64)>,
    /// Grants out of arrival order, and grants sampled (hot-key only).
    pub out_of_order: Option<(u64, u64)>,
    /// Bytes allocated after the run while keys are idle, before and after reclaim.
    pub mem_live: Option<i64>,
    pub mem_idle: Option<i64>,
    /// The same after five more reclaims 20 ms apart.
    pub mem_settled: Option<i64>,
    pub note: String,
}

impl Row {
    /// Records `ops` done in `secs`, and the rate they make.
    pub fn set_rate(&mut self, ops: u64, secs: f64) {
        self.ops = ops;
        self.secs = secs;
        self.per_sec = ops as f64 / secs;
    }
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram")
}

fn fill_lat(row: &mut Row, h: &Histogram<u64>) {
    if h.is_empty() {
        return;
    }
    row.p50 = h.value_at_quantile(0.5);
    row.p99 = h.value_at_quantile(0.99);
    row.p999 = h.value_at_quantile(0.999);
    row.max = h.max();
    row.quantiles = QUANTILES
        .iter()
        .map(|&q| (q, h.value_at_quantile(q)))
        .collect();
}

/// The row of a run that panicked.
pub fn failed_row<D: KeyedLock>(scenario: &'static str, threads: usize) -> Row {
    let mut row = base_row::<D>(scenario, threads);
    row.na = Some("PANICKED");
    row.note = "the run panicked (see stderr)".into();
    row
}

fn base_row<D: KeyedLock>(scenario: &'static str, threads: usize) -> Row {
    Row {
        scenario,
        threads,
        design: D::NAME,
        fifo: D::FIFO,
        deadline: matches!(D::DEADLINE, Deadline::Native(_)),
        unit: "holds",
        lat_of: "hold",
        ..Row::default()
    }
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

const BATCH: usize = 32;

/// One design instance on cache lines of its own (per-thread baselines must
/// not share a line, or false sharing is what gets measured).
#[repr(align(128))]
pub struct Padded<T>(pub T);

/// Throughput then latency over per-thread key sequences (`seqs[t]`, a power-of-two length).
/// `instances` is 1 (shared) or one per thread (single-key baselines, uncontended).
fn throughput_and_latency<D: KeyedLock>(
    row: &mut Row,
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
    row.set_rate(counts.iter().sum(), secs);

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
    fill_lat(row, &all);
    if fairness {
        row.out_of_order = Some((ooo, grants));
    }
}

pub fn uncontended<D: KeyedLock>(cfg: &Cfg, threads: usize) -> Row {
    let mut row = base_row::<D>("uncontended", threads);
    let keys: Vec<Vec<String>> = (0..threads)
        .map(|t| (0..64).map(|j| format!("u{t}-{j}")).collect())
        .collect();
    let seqs: Vec<Vec<&str>> = keys
        .iter()
        .map(|ks| ks.iter().map(String::as_str).collect())
        .collect();
    // A single-key baseline gets one lock per thread (each thread its own lock).
    let n = if D::SINGLE { threads } else { 1 };
    let instances: Vec<Padded<D>> = (0..n).map(|_| Padded(D::new())).collect();
    throughput_and_latency(&mut row, cfg, &instances, &seqs, false);
    if D::SINGLE {
        row.note = "one lock per thread".into();
    } else {
        row.note = "64 own keys per thread".into();
    }
    row
}

pub fn hot_key<D: KeyedLock>(cfg: &Cfg, threads: usize) -> Row {
    let mut row = base_row::<D>("hot-key", threads);
    let seqs: Vec<Vec<&str>> = (0..threads).map(|_| vec!["hot"]).collect();
    let d = [Padded(D::new())];
    throughput_and_latency(&mut row, cfg, &d, &seqs, true);
    row
}

/// A Zipf sampler over `1..=n` with exponent `s`, by inverse CDF (binary search).
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for k in 1..=n {
            acc += 1.0 / (k as f64).powf(s);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }
    /// Rank (0-based) for a uniform `u` in [0, 1).
    pub fn sample(&self, u: f64) -> usize {
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// xorshift64*: enough randomness for key sequences.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub const ZIPF_KEYS: usize = 10_000;
pub const ZIPF_S: f64 = 1.0;

pub fn zipf<D: KeyedLock>(cfg: &Cfg, threads: usize) -> Row {
    let mut row = base_row::<D>("zipf", threads);
    if D::SINGLE {
        row.na = Some("single key");
        return row;
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
    throughput_and_latency(&mut row, cfg, &d, &seqs, false);
    row.note = format!("{ZIPF_KEYS} keys, s={ZIPF_S}");
    row
}

pub fn million_keys<D: KeyedLock>(cfg: &Cfg, threads: usize) -> Row {
    let mut row = base_row::<D>("million-keys", threads);
    if D::SINGLE {
        row.na = Some("single key");
        return row;
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
                        if i % 16 == 0 {
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
    row.set_rate(n as u64, start.elapsed().as_secs_f64());
    let mut all = hist();
    for h in hs {
        all.add(h).expect("merge");
    }
    fill_lat(&mut row, &all);
    // The histogram is the harness's own memory: gone before measuring.
    drop(all);
    row.mem_live = Some((live_bytes() - base) as i64);
    d.reclaim();
    row.mem_idle = Some((live_bytes() - base) as i64);
    // Epoch reclamation may need a little further activity: a few more
    // reclaims, 20 ms apart, show whether what is left is only late.
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(20));
        d.reclaim();
    }
    row.mem_settled = Some((live_bytes() - base) as i64);
    row.note = format!(
        "{n} fresh keys, each held once; 1 in 16 timed; idle: {}; 100 ms later: {}",
        D::IDLE,
        crate::report::fmt_bytes(row.mem_settled.unwrap_or(0))
    );
    drop(d);
    row
}

/// How long a holder keeps the key in `handoff` after the other thread said
/// it is about to wait: long enough for it to be in line when the key goes.
pub const HANDOFF_LINGER: Duration = Duration::from_micros(5);

/// Two threads ping-pong one key: each, once it holds the key, waits until
/// the other has announced it is about to wait for the key, lingers
/// [`HANDOFF_LINGER`] so the other is in line, and lets go. Latency: from
/// the holder's last instant inside its closure to the other's closure
/// starting. Every hold is a handoff unless a design lets the releasing
/// thread take the key straight back (barging); the note says how many
/// holds changed thread.
pub fn handoff<D: KeyedLock>(cfg: &Cfg, _threads: usize) -> Row {
    let threads = 2;
    let mut row = base_row::<D>("handoff", threads);
    row.unit = "handoffs";
    row.lat_of = "release->next";
    let d = D::new();
    let base = Instant::now();
    let now = || base.elapsed().as_nanos() as u64;
    let last_release = AtomicU64::new(0);
    let last_holder = AtomicUsize::new(usize::MAX);
    let waiting = [AtomicBool::new(false), AtomicBool::new(false)];
    let total = cfg.duration + cfg.lat_duration;
    // HARNESS_HANDOFF_LINGER_US overrides the linger (for experiments).
    let linger_for = std::env::var("HARNESS_HANDOFF_LINGER_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_micros)
        .unwrap_or(HANDOFF_LINGER);
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
    fill_lat(&mut row, &all);
    row.set_rate(handoffs, secs);
    row.note = format!(
        "{handoffs} of {holds} holds changed thread ({:.0}%)",
        100.0 * handoffs as f64 / holds.max(1) as f64
    );
    row
}

/// One thread holds a key for `dl_hold` at a time, again and again; the other
/// threads wait on it with a `dl_wait` deadline. Latency is how late each
/// timeout came back (elapsed minus the deadline); a timeout before the
/// deadline counts as early (incorrect).
pub fn deadline<D: KeyedLock>(cfg: &Cfg, threads: usize) -> Row {
    let waiters = threads.saturating_sub(1).max(1);
    let mut row = base_row::<D>("deadline", waiters + 1);
    row.unit = "timeouts";
    row.lat_of = "lateness";
    if D::DEADLINE == Deadline::Lacks {
        row.na = Some("no bounded wait");
        return row;
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
    fill_lat(&mut row, &all);
    row.set_rate(timeouts, secs);
    row.note = format!(
        "{waiters} waiters, wait {:?}, holder {:?}: {timeouts} timed out ({early} early), {grants} granted",
        wait, hold_for
    );
    row
}

pub fn run<D: KeyedLock>(scenario: &str, cfg: &Cfg, threads: usize) -> Row {
    match scenario {
        "uncontended" => uncontended::<D>(cfg, threads),
        "hot-key" => hot_key::<D>(cfg, threads),
        "zipf" => zipf::<D>(cfg, threads),
        "million-keys" => million_keys::<D>(cfg, threads),
        "handoff" => handoff::<D>(cfg, threads),
        "deadline" => deadline::<D>(cfg, threads),
        other => panic!("unknown scenario {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_rank_one_is_most_likely() {
        let z = Zipf::new(ZIPF_KEYS, ZIPF_S);
        let mut rng = Rng::new(7);
        let mut counts = vec![0u32; ZIPF_KEYS];
        for _ in 0..200_000 {
            counts[z.sample(rng.unit())] += 1;
        }
        // P(rank 1) = 1 / H(10000) ~ 0.1022 for s = 1.
        let p1 = counts[0] as f64 / 200_000.0;
        assert!((p1 - 0.1022).abs() < 0.01, "p1 = {p1}");
        assert!(counts[0] > counts[1] && counts[1] > counts[9]);
        assert_eq!(z.sample(0.0), 0);
        assert_eq!(z.sample(0.999_999_999), ZIPF_KEYS - 1);
    }

    #[test]
    fn every_design_runs_every_scenario_briefly() {
        let cfg = Cfg {
            duration: Duration::from_millis(5),
            lat_duration: Duration::from_millis(5),
            million: 1000,
            dl_wait: Duration::from_millis(1),
            dl_hold: Duration::from_millis(2),
        };
        for d in crate::designs::ALL {
            for s in SCENARIOS {
                let row = crate::for_design!(d, D => run::<D>(s, &cfg, 2)).unwrap();
                assert_eq!(row.design, d);
                if row.na.is_none() {
                    assert!(row.secs > 0.0, "{s} {d}");
                }
            }
        }
    }
}
