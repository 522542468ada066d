//! The permits scenarios: `semaphore` (threads on one key of
//! [`SEM_PERMITS`], a permit a hold), `async-semaphore` (the same as tasks
//! on the async rows' runtime) and `read-mostly` (a read-write lock: 1 hold
//! in [`RW_WRITE_EVERY`] exclusive, with grant order sampled). Every hold
//! runs [`HOLD_WORK`] inside, so that permits held side by side matter.

use std::hint::black_box;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::async_scenarios::runtime;
use crate::measure::{fill_lat, hist, merged, run_for, run_tasks, GrantOrder};
use crate::permit_designs::{
    AsyncPermitLock, HoldlinePermits, HoldlinePermitsBounded, PermitDesign, PermitLock, PlRw, Take,
    TokioRw, TokioSem,
};
use crate::row::Run;
use crate::scenario::{
    workers, Cfg, Scenario, BATCH, HOLD_WORK, RW_PERMITS, RW_WRITE_EVERY, SEM_PERMITS,
};
use crate::units::fmt_ns;

/// The one key every thread or task holds.
const KEY: &str = "shared";

/// The designs that run scenario `s`: holdline and its peers.
pub fn subjects(s: Scenario) -> &'static [PermitDesign] {
    match s {
        Scenario::ReadMostly => &[
            PermitDesign::Holdline,
            PermitDesign::HoldlineBounded,
            PermitDesign::PlRw,
            PermitDesign::TokioRw,
        ],
        _ => &[PermitDesign::Holdline, PermitDesign::TokioSem],
    }
}

/// One run of permits scenario `s` with design `d` at `threads` threads
/// (tasks); an `n/a` row for a design that is not among the scenario's
/// [`subjects`].
pub fn run(s: Scenario, d: PermitDesign, cfg: &Cfg, threads: usize) -> Run {
    use PermitDesign as P;
    match (s, d) {
        (Scenario::Semaphore, P::Holdline) => semaphore::<HoldlinePermits>(cfg, threads),
        (Scenario::Semaphore, P::TokioSem) => semaphore::<TokioSem>(cfg, threads),
        (Scenario::AsyncSemaphore, P::Holdline) => async_semaphore::<HoldlinePermits>(cfg, threads),
        (Scenario::AsyncSemaphore, P::TokioSem) => async_semaphore::<TokioSem>(cfg, threads),
        (Scenario::ReadMostly, P::Holdline) => read_mostly::<HoldlinePermits>(cfg, threads),
        (Scenario::ReadMostly, P::HoldlineBounded) => {
            read_mostly::<HoldlinePermitsBounded>(cfg, threads)
        }
        (Scenario::ReadMostly, P::PlRw) => read_mostly::<PlRw>(cfg, threads),
        (Scenario::ReadMostly, P::TokioRw) => read_mostly::<TokioRw>(cfg, threads),
        _ => {
            let mut run = Run::new(s, threads, d.name());
            run.fifo = d.fifo();
            run.na = Some("not a peer of this scenario");
            run
        }
    }
}

/// A run of design `D` with nothing measured yet. Every design here has a
/// bounded wait (holdline's `wait(d)`, tokio's `timeout`, parking_lot's
/// `try_*_for`); the rows do not use it.
fn permit_run<D: PermitLock>(s: Scenario, threads: usize) -> Run {
    let mut run = Run::new(s, threads, D::NAME);
    run.fifo = D::FIFO;
    run.deadline = true;
    run.unit = if s == Scenario::ReadMostly {
        "holds"
    } else {
        "grants"
    };
    run.lat_of = "wait";
    run
}

/// The fixed work inside a hold: [`HOLD_WORK`] dependent xorshift rounds.
#[inline]
fn work() {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..HOLD_WORK {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = black_box(x);
    }
}

/// Inside a hold: how long since `t0` (the ask), then the work.
#[inline]
fn waited_then_work(t0: Instant) -> Duration {
    let waited = t0.elapsed();
    work();
    waited
}

fn nanos(d: Duration) -> u64 {
    (d.as_nanos() as u64).max(1)
}

/// Threads on one key of [`SEM_PERMITS`], one permit a hold: grants/s
/// untimed, then each wait timed.
pub fn semaphore<D: PermitLock>(cfg: &Cfg, threads: usize) -> Run {
    let mut run = permit_run::<D>(Scenario::Semaphore, threads);
    let d = D::new(SEM_PERMITS);
    let (counts, secs) = run_for(threads, cfg.duration, |_, stop| {
        let mut n = 0u64;
        while !stop.load(Relaxed) {
            for _ in 0..BATCH {
                d.hold(KEY, Take::One, work);
            }
            n += BATCH as u64;
        }
        n
    });
    run.set_rate(counts.iter().sum(), secs);
    let (outs, _) = run_for(threads, cfg.lat_duration, |_, stop| {
        let mut h = hist();
        while !stop.load(Relaxed) {
            let t0 = Instant::now();
            let _ = h.record(nanos(d.hold(KEY, Take::One, || waited_then_work(t0))));
        }
        (h, [])
    });
    let (all, []) = merged(outs);
    fill_lat(&mut run, &all);
    run.note = format!("{threads} threads, {SEM_PERMITS} permits; {}", D::API[0]);
    run
}

/// Tasks on one key of [`SEM_PERMITS`], one permit a hold, on the async
/// rows' runtime. A task yields after every batch of holds, as in
/// `async_scenarios`, so that every task runs on fewer workers.
pub fn async_semaphore<D: AsyncPermitLock>(cfg: &Cfg, tasks: usize) -> Run {
    let mut run = permit_run::<D>(Scenario::AsyncSemaphore, tasks);
    let rt = runtime();
    let d = Arc::new(D::new(SEM_PERMITS));
    let (counts, secs) = run_tasks(&rt, tasks, cfg.duration, |_, stop| {
        let d = d.clone();
        async move {
            let mut n = 0u64;
            while !stop.load(Relaxed) {
                for _ in 0..BATCH {
                    d.hold_async(KEY, Take::One, work).await;
                }
                n += BATCH as u64;
                tokio::task::yield_now().await;
            }
            n
        }
    });
    run.set_rate(counts.iter().sum(), secs);
    let (outs, _) = run_tasks(&rt, tasks, cfg.lat_duration, |_, stop| {
        let d = d.clone();
        async move {
            let mut h = hist();
            while !stop.load(Relaxed) {
                for _ in 0..BATCH {
                    let t0 = Instant::now();
                    let waited = d.hold_async(KEY, Take::One, || waited_then_work(t0));
                    let _ = h.record(nanos(waited.await));
                }
                tokio::task::yield_now().await;
            }
            (h, [])
        }
    });
    let (all, []) = merged(outs);
    fill_lat(&mut run, &all);
    run.note = format!(
        "{tasks} tasks on {} workers, {SEM_PERMITS} permits; {}",
        workers(),
        D::ASYNC_API
    );
    run
}

/// What thread `t`'s hold number `i` takes in `read-mostly`: all the
/// permits one time in [`RW_WRITE_EVERY`], offset by thread so that the
/// threads' exclusive holds do not come in step.
fn take_of(t: usize, i: usize) -> Take {
    // A match, not `is_multiple_of`: that is newer than the workspace's rust-version.
    match (i + t) % RW_WRITE_EVERY {
        0 => Take::All,
        _ => Take::One,
    }
}

/// One thread's latency phase of `read-mostly`: every wait, the exclusive
/// holds' waits, and `[exclusive overtaken, exclusive grants, shared out
/// of order, shared grants]`.
type RwOut = (Histogram<u64>, Histogram<u64>, [u64; 4]);

/// A key of [`RW_PERMITS`] permits, 1 hold in [`RW_WRITE_EVERY`] exclusive:
/// holds/s untimed, then every wait timed and grant order sampled.
pub fn read_mostly<D: PermitLock>(cfg: &Cfg, threads: usize) -> Run {
    let mut run = permit_run::<D>(Scenario::ReadMostly, threads);
    let d = D::new(RW_PERMITS);
    let (counts, secs) = run_for(threads, cfg.duration, |t, stop| {
        let (mut i, mut n) = (0usize, 0u64);
        while !stop.load(Relaxed) {
            for _ in 0..BATCH {
                d.hold(KEY, take_of(t, i), work);
                i = i.wrapping_add(1);
            }
            n += BATCH as u64;
        }
        n
    });
    run.set_rate(counts.iter().sum(), secs);
    let order = GrantOrder::default();
    let (outs, _) = run_for(threads, cfg.lat_duration, |t, stop| {
        rw_latency(&d, &order, t, stop)
    });
    let mut writes = hist();
    let outs = outs.into_iter().map(|(all, w, counts)| {
        writes.add(w).expect("merge");
        (all, counts)
    });
    let (all, [w_late, w_grants, r_late, r_grants]) = merged(outs);
    fill_lat(&mut run, &all);
    run.out_of_order = Some((w_late, w_grants));
    let w_p99 = (!writes.is_empty()).then(|| writes.value_at_quantile(0.99));
    run.note = format!(
        "exclusive p99 wait {}; shared {r_late}/{r_grants} out of order; {} / {}",
        w_p99.map_or_else(|| "-".into(), fmt_ns),
        D::API[0],
        D::API[1]
    );
    run
}

/// Thread `t`'s holds until `stop`, each wait timed, a ticket taken just
/// before each ask.
fn rw_latency<D: PermitLock>(
    d: &D,
    order: &GrantOrder,
    t: usize,
    stop: &std::sync::atomic::AtomicBool,
) -> RwOut {
    let (mut h, mut hw) = (hist(), hist());
    let mut counts = [0u64; 4];
    let mut i = 0usize;
    while !stop.load(Relaxed) {
        let take = take_of(t, i);
        i = i.wrapping_add(1);
        let my = order.ticket();
        let t0 = Instant::now();
        let (waited, late) = d.hold(KEY, take, || {
            let waited = t0.elapsed();
            let late = order.granted_late_shared(my);
            work();
            (waited, late)
        });
        let _ = h.record(nanos(waited));
        // Exclusive counts first, shared after.
        let at = if take == Take::All {
            let _ = hw.record(nanos(waited));
            0
        } else {
            2
        };
        counts[at] += u64::from(late);
        counts[at + 1] += 1;
    }
    (h, hw, counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subject_runs_its_permit_scenarios_briefly() {
        let cfg = Cfg::new(Duration::from_millis(5), 10);
        for s in [
            Scenario::Semaphore,
            Scenario::AsyncSemaphore,
            Scenario::ReadMostly,
        ] {
            let threads = s.fixed_threads().expect("fixed")[0];
            for &d in subjects(s) {
                let r = run(s, d, &cfg, threads);
                assert_eq!((r.design, r.scenario, r.na), (d.name(), s, None));
                assert!(r.ops > 0 && r.secs > 0.0, "{s:?} {d:?}");
                assert!(r.p99 > 0, "{s:?} {d:?}: no wait recorded");
                if s == Scenario::ReadMostly {
                    let (late, grants) = r.out_of_order.expect("order sampled");
                    assert!(grants > 0 && late <= grants, "{d:?}: {late}/{grants}");
                }
            }
        }
        // A design outside a scenario's peers is n/a, not run.
        let r = run(Scenario::Semaphore, PermitDesign::PlRw, &cfg, 2);
        assert_eq!(r.na, Some("not a peer of this scenario"));
    }

    #[test]
    fn one_hold_in_ten_is_exclusive_for_every_thread() {
        for t in 0..8 {
            let all = (0..1000).filter(|&i| take_of(t, i) == Take::All).count();
            assert_eq!(all, 1000 / RW_WRITE_EVERY);
        }
    }
}
