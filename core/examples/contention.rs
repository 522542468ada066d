//! One hot key, N threads, B CPU-bound threads beside them: holdline's FIFO
//! hold against tokio's FIFO mutex (`blocking_lock`), each row `RUNS` times,
//! with holdline's wait counters (build with `--features wait-counters`).
//!
//! ```sh
//! cargo run --release -p holdline --features wait-counters --example contention -- 2 1
//! ```
//! Arguments: threads (default 2), busy threads (default 0), runs (3),
//! milliseconds per run (1000), holdline's bypass bound in µs (0, the
//! default: FIFO; else `Fairness::BoundedBypass`).
use holdline::counters;
use holdline::{Fairness, Store};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
    let threads = *args.first().unwrap_or(&2) as usize;
    let busy = *args.get(1).unwrap_or(&0) as usize;
    let runs = *args.get(2).unwrap_or(&3) as usize;
    let ms = *args.get(3).unwrap_or(&1000);
    let fairness = match *args.get(4).unwrap_or(&0) {
        0 => Fairness::Fifo,
        us => Fairness::BoundedBypass(Duration::from_micros(us)),
    };

    let stop_busy = Arc::new(AtomicBool::new(false));
    let hogs: Vec<_> = (0..busy)
        .map(|_| {
            let stop = stop_busy.clone();
            thread::spawn(move || {
                let mut x = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..10_000 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    }
                    std::hint::black_box(x);
                }
            })
        })
        .collect();

    println!(
        "hot key: {threads} threads, {busy} busy threads, {runs} runs of {ms} ms, holdline {fairness:?}"
    );
    for run in 0..runs {
        let before = counters::snapshot();
        let (rate, p99) = holdline_row(threads, ms, fairness);
        let after = counters::snapshot();
        let waits_before = TOKIO_WAITS.load(Ordering::Relaxed);
        let (trate, tp99) = tokio_row(threads, ms);
        let tokio_waits = TOKIO_WAITS.load(Ordering::Relaxed) - waits_before;
        print!(
            "run {run}: holdline {:>8.0} k/s p99 {:>8.1} us | tokio {:>8.0} k/s p99 {:>8.1} us | ",
            rate / 1e3,
            p99 / 1e3,
            trate / 1e3,
            tp99 / 1e3
        );
        let deltas: Vec<String> = before
            .iter()
            .zip(after.iter())
            .map(|((e, b), (_, a))| format!("{e:?} {}", a - b))
            .collect();
        println!("{} | tokio waits {tokio_waits}", deltas.join(", "));
    }
    stop_busy.store(true, Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
}

/// Runs `hold` on `threads` threads for `ms`; answers holds/s and the p99
/// of sampled hold times (wait included), in ns.
fn row(threads: usize, ms: u64, hold: impl Fn() + Sync) -> (f64, f64) {
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let samples = std::sync::Mutex::new(Vec::new());
    let started = Instant::now();
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut n = 0u64;
                let mut mine = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if n % 16 == 0 {
                        let t = Instant::now();
                        hold();
                        mine.push(t.elapsed().as_nanos() as u64);
                    } else {
                        hold();
                    }
                    n += 1;
                }
                total.fetch_add(n, Ordering::Relaxed);
                samples.lock().unwrap().extend(mine);
            });
        }
        thread::sleep(Duration::from_millis(ms));
        stop.store(true, Ordering::Relaxed);
    });
    let secs = started.elapsed().as_secs_f64();
    let mut s = samples.into_inner().unwrap();
    s.sort_unstable();
    let p99 = s.get(s.len() * 99 / 100).copied().unwrap_or(0) as f64;
    (total.load(Ordering::Relaxed) as f64 / secs, p99)
}

fn holdline_row(threads: usize, ms: u64, fairness: Fairness) -> (f64, f64) {
    let store = Store::new();
    let lock = store.lock("hot").fairness(fairness).open().unwrap();
    row(threads, ms, || {
        lock.key("k")
            .wait(Duration::from_secs(60))
            .hold(|_| ())
            .unwrap()
    })
}

/// Counts, for tokio, the holds that found the mutex taken (and so waited
/// in its line): the comparable of holdline's handoffs.
static TOKIO_WAITS: AtomicU64 = AtomicU64::new(0);

fn tokio_row(threads: usize, ms: u64) -> (f64, f64) {
    let m = tokio::sync::Mutex::new(());
    row(threads, ms, || match m.try_lock() {
        Ok(g) => drop(g),
        Err(_) => {
            TOKIO_WAITS.fetch_add(1, Ordering::Relaxed);
            drop(m.blocking_lock())
        }
    })
}
