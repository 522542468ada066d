//! The `async-*` scenarios: tasks on a tokio multi-thread runtime hold keys
//! through a design's async hold ([`AsyncKeyedLock`]). The `threads` of a
//! row is its number of tasks; the runtime has one worker per CPU.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use hdrhistogram::Histogram;
use tokio::runtime::Runtime;

use crate::alloc::live_bytes;
use crate::deadline::{deadline_duration, deadline_run, record_waits, Waits};
use crate::designs::AsyncKeyedLock;
use crate::measure::{base_run, hist, record_latencies, run_tasks, settle_fresh_keys, GrantOrder};
use crate::row::Run;
use crate::scenario::{
    workers, Cfg, Scenario, BATCH, DEADLINE_WAITERS, MILLION_TIMED_EVERY, UNCONTENDED_KEYS,
};

/// The runtime the async rows run on: one worker per CPU, with the timer.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers())
        .enable_time()
        .build()
        .expect("tokio runtime")
}

/// Throughput then latency, each task holding the keys of `seqs[t]` round
/// robin. A task yields after every batch of holds, so that a runtime with
/// fewer workers than tasks runs them all (and tokio's mutex never meets
/// its cooperative budget, which would yield for it).
fn rate_and_latency<D: AsyncKeyedLock>(
    run: &mut Run,
    cfg: &Cfg,
    rt: &Runtime,
    d: &Arc<D>,
    seqs: &Arc<Vec<Vec<String>>>,
    fairness: bool,
) {
    let tasks = seqs.len();
    let (counts, secs) = run_tasks(rt, tasks, cfg.duration, |t, stop| {
        let (d, seqs) = (d.clone(), seqs.clone());
        async move {
            let seq = &seqs[t];
            let (mut i, mut n) = (0usize, 0u64);
            while !stop.load(Relaxed) {
                for _ in 0..BATCH {
                    d.hold_async(&seq[i % seq.len()], || black_box(())).await;
                    i = i.wrapping_add(1);
                }
                n += BATCH as u64;
                tokio::task::yield_now().await;
            }
            n
        }
    });
    run.set_rate(counts.iter().sum(), secs);

    let order = Arc::new(GrantOrder::default());
    let (outs, _) = run_tasks(rt, tasks, cfg.lat_duration, |t, stop| {
        let (d, seqs, order) = (d.clone(), seqs.clone(), order.clone());
        async move {
            let seq = &seqs[t];
            let mut h = hist();
            let (mut i, mut late, mut grants) = (0usize, 0u64, 0u64);
            while !stop.load(Relaxed) {
                for _ in 0..BATCH {
                    let k = &seq[i % seq.len()];
                    i = i.wrapping_add(1);
                    let t0;
                    let granted_late = if fairness {
                        let my = order.ticket();
                        t0 = Instant::now();
                        d.hold_async(k, || order.granted_late(my)).await
                    } else {
                        t0 = Instant::now();
                        d.hold_async(k, || black_box(false)).await
                    };
                    let _ = h.record(t0.elapsed().as_nanos() as u64);
                    late += u64::from(granted_late);
                    grants += 1;
                }
                tokio::task::yield_now().await;
            }
            (h, [late, grants])
        }
    });
    record_latencies(run, outs, fairness);
}

pub fn uncontended<D: AsyncKeyedLock>(cfg: &Cfg, tasks: usize) -> Run {
    let mut run = base_run::<D>(Scenario::AsyncUncontended, tasks);
    let rt = runtime();
    let seqs: Vec<Vec<String>> = (0..tasks)
        .map(|t| (0..UNCONTENDED_KEYS).map(|j| format!("u{t}-{j}")).collect())
        .collect();
    let d = Arc::new(D::default());
    rate_and_latency(&mut run, cfg, &rt, &d, &Arc::new(seqs), false);
    run.note = format!(
        "{UNCONTENDED_KEYS} own keys per task, {} workers; {}",
        workers(),
        D::ASYNC_API
    );
    run
}

pub fn hot_key<D: AsyncKeyedLock>(cfg: &Cfg, tasks: usize) -> Run {
    let mut run = base_run::<D>(Scenario::AsyncHotKey, tasks);
    let rt = runtime();
    let seqs: Vec<Vec<String>> = (0..tasks).map(|_| vec!["hot".to_string()]).collect();
    let d = Arc::new(D::default());
    rate_and_latency(&mut run, cfg, &rt, &d, &Arc::new(seqs), true);
    run.note = format!("{tasks} tasks on {} workers; {}", workers(), D::ASYNC_API);
    run
}

pub fn fresh_keys<D: AsyncKeyedLock>(cfg: &Cfg, tasks: usize) -> Run {
    let mut run = base_run::<D>(Scenario::AsyncFreshKeys, tasks);
    let n = cfg.million;
    let chunk = n.div_ceil(tasks);
    let keys: Vec<Vec<String>> = (0..n)
        .map(|i| format!("m{i:07}"))
        .collect::<Vec<_>>()
        .chunks(chunk)
        .map(<[String]>::to_vec)
        .collect();
    let keys = Arc::new(keys);
    // The runtime exists before the baseline: its own memory is not the design's.
    let rt = runtime();
    let d = Arc::new(D::default());
    let base = live_bytes();
    let start = Instant::now();
    let hs: Vec<Histogram<u64>> = rt.block_on(async {
        let handles: Vec<_> = (0..keys.len())
            .map(|t| {
                let (d, keys) = (d.clone(), keys.clone());
                tokio::spawn(async move {
                    let mut h = hist();
                    for (i, k) in keys[t].iter().enumerate() {
                        if i % MILLION_TIMED_EVERY == 0 {
                            let t0 = Instant::now();
                            d.hold_async(k, || black_box(())).await;
                            let _ = h.record(t0.elapsed().as_nanos() as u64);
                        } else {
                            d.hold_async(k, || black_box(())).await;
                        }
                        if i % BATCH == BATCH - 1 {
                            tokio::task::yield_now().await;
                        }
                    }
                    h
                })
            })
            .collect();
        let mut hs = Vec::with_capacity(handles.len());
        for h in handles {
            hs.push(h.await.expect("task"));
        }
        hs
    });
    run.set_rate(n as u64, start.elapsed().as_secs_f64());
    settle_fresh_keys(&mut run, hs, base, D::IDLE, "held once by a task", || {
        d.reclaim()
    });
    drop(d);
    drop(rt);
    run
}

/// One thread holds the key `dl_hold` at a time, again and again (a
/// blocking hold: the same line); [`DEADLINE_WAITERS`] tasks wait on it
/// with a `dl_wait` deadline. Latency is how late each timeout came back.
pub fn deadline<D: AsyncKeyedLock>(cfg: &Cfg) -> Run {
    let waiters = DEADLINE_WAITERS;
    let mut run = deadline_run::<D>(Scenario::AsyncDeadline);
    let rt = runtime();
    let d = Arc::new(D::default());
    let (wait, hold_for) = (cfg.dl_wait, cfg.dl_hold);
    let holder_stop = Arc::new(AtomicBool::new(false));
    let holder = {
        let (d, stop) = (d.clone(), holder_stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                d.hold("dl", || std::thread::sleep(hold_for));
            }
        })
    };
    let (outs, secs) = run_tasks(&rt, waiters, deadline_duration(cfg), |_, stop| {
        let d = d.clone();
        async move {
            let mut waits = Waits::default();
            while !stop.load(Relaxed) {
                let t0 = Instant::now();
                let granted = d
                    .hold_within_async("dl", wait, || black_box(()))
                    .await
                    .is_some();
                waits.count(granted, t0.elapsed(), wait);
                // A granted waiter comes straight back: let the holder in line.
                tokio::task::yield_now().await;
            }
            waits.into_parts()
        }
    });
    holder_stop.store(true, Relaxed);
    holder.join().expect("holder");
    let [timeouts, early, grants] = record_waits(&mut run, outs, secs);
    run.note = format!(
        "{waiters} waiting tasks, wait {wait:?}, holder thread {hold_for:?}: {timeouts} timed out ({early} early), {grants} granted; compare `deadline` (thread waiters)"
    );
    run
}
