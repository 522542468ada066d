//! What every runner shares: histograms, a run's identity, running work
//! on threads or tasks for a while, the server and cluster rows' runtime
//! and hold+release pairs, the throughput-then-latency loop of the keyed
//! rows, and the end of a fresh-keys row.

use std::future::Future;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::runtime::Runtime;

use crate::alloc::live_bytes;
use crate::designs::{Deadline, KeyedLock};
use crate::row::{Run, QUANTILES};
use crate::scenario::{workers, Cfg, Scenario, BATCH, MILLION_TIMED_EVERY};
use crate::units::fmt_bytes;

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
pub fn run_for<T: Send>(
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

/// Runs `work(task_index, stop)` as `tasks` tasks for `dur`, starting them
/// together; answers their results and the measured wall time.
pub fn run_tasks<T, F>(
    rt: &Runtime,
    tasks: usize,
    dur: Duration,
    work: impl Fn(usize, Arc<AtomicBool>) -> F,
) -> (Vec<T>, f64)
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    rt.block_on(async {
        let start_line = Arc::new(tokio::sync::Barrier::new(tasks + 1));
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let fut = work(t, stop.clone());
                let start_line = start_line.clone();
                tokio::spawn(async move {
                    start_line.wait().await;
                    fut.await
                })
            })
            .collect();
        start_line.wait().await;
        let start = Instant::now();
        tokio::time::sleep(dur).await;
        stop.store(true, Relaxed);
        let mut out = Vec::with_capacity(tasks);
        for h in handles {
            out.push(h.await.expect("task"));
        }
        (out, start.elapsed().as_secs_f64())
    })
}

/// The runtime the server and cluster rows' clients run on: one worker
/// per CPU, I/O and time enabled.
pub fn io_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers())
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Every worker's latencies merged into one histogram, and its counts summed.
pub fn merged<const N: usize>(
    outs: impl IntoIterator<Item = (Histogram<u64>, [u64; N])>,
) -> (Histogram<u64>, [u64; N]) {
    let mut all = hist();
    let mut sums = [0; N];
    for (h, counts) in outs {
        all.add(h).expect("merge");
        for (sum, n) in sums.iter_mut().zip(counts) {
            *sum += n;
        }
    }
    (all, sums)
}

/// The tasks' latencies merged and their hold+release pairs as the rate;
/// `lat_of` says what one latency sample is.
pub fn record_pairs(
    run: &mut Run,
    outs: Vec<(Histogram<u64>, [u64; 1])>,
    secs: f64,
    lat_of: &'static str,
) {
    let (all, [pairs]) = merged(outs);
    run.unit = "hold+release";
    run.lat_of = lat_of;
    run.set_rate(pairs, secs);
    fill_lat(run, &all);
}

/// Grant order, sampled: a ticket taken just before each hold, and the
/// newest ticket granted so far. A grant whose ticket is older than one
/// already granted came out of arrival order.
#[derive(Default)]
pub struct GrantOrder {
    ticket: AtomicU64,
    newest_granted: AtomicU64,
}

impl GrantOrder {
    /// A ticket, taken just before a hold.
    pub fn ticket(&self) -> u64 {
        self.ticket.fetch_add(1, Relaxed) + 1
    }

    /// Called inside the hold of ticket `my` (the lock orders these
    /// accesses): whether it was granted out of arrival order.
    pub fn granted_late(&self, my: u64) -> bool {
        let late = my < self.newest_granted.load(Relaxed);
        if !late {
            self.newest_granted.store(my, Relaxed);
        }
        late
    }

    /// [`granted_late`](GrantOrder::granted_late) for a lock that lets
    /// holders in together (a shared hold): the newest ticket is raised in
    /// one step, since grants no longer order these accesses.
    pub fn granted_late_shared(&self, my: u64) -> bool {
        my < self.newest_granted.fetch_max(my, Relaxed)
    }
}

/// The latency phase's figures from every worker's latencies and
/// `[grants out of order, grants]`, the order only where it was sampled.
pub fn record_latencies(run: &mut Run, outs: Vec<(Histogram<u64>, [u64; 2])>, fairness: bool) {
    let (all, [late, grants]) = merged(outs);
    fill_lat(run, &all);
    if fairness {
        run.out_of_order = Some((late, grants));
    }
}

/// One design instance on cache lines of its own (per-thread baselines must
/// not share a line, or false sharing is what gets measured).
#[repr(align(128))]
pub struct Padded<T>(pub T);

/// Throughput then latency over per-thread key sequences (`seqs[t]`, a power-of-two length).
/// `instances` is 1 (shared) or one per thread (single-key baselines, uncontended).
pub fn throughput_and_latency<D: KeyedLock>(
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
    let order = GrantOrder::default();
    let (outs, _) = run_for(threads, cfg.lat_duration, |t, stop| {
        let d = inst(t);
        let seq = &seqs[t];
        let mask = seq.len() - 1;
        let mut h = hist();
        let mut i = 0usize;
        let (mut late, mut grants) = (0u64, 0u64);
        while !stop.load(Relaxed) {
            let k = seq[i & mask];
            i = i.wrapping_add(1);
            if fairness {
                let my = order.ticket();
                let t0 = Instant::now();
                late += u64::from(d.hold(k, || order.granted_late(my)));
                let _ = h.record(t0.elapsed().as_nanos() as u64);
                grants += 1;
            } else {
                let t0 = Instant::now();
                d.hold(k, || black_box(()));
                let _ = h.record(t0.elapsed().as_nanos() as u64);
            }
        }
        (h, [late, grants])
    });
    record_latencies(run, outs, fairness);
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
    let (all, []) = merged(hs.into_iter().map(|h| (h, [])));
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
        fmt_bytes(run.mem_settled.unwrap_or(0))
    );
}
