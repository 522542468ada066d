//! A hot key's rate while the sweeper walks many keys that are held (its
//! look at each, where a CAS would take every busy key's line), against
//! the same hot key with no sweep beside it.
//!
//! ```sh
//! cargo run --release -p holdline --example sweep_beside -- 1000000 5
//! ```
//! Arguments: held keys (default 1,000,000), runs (5), ms per run (500).
use holdline::Store;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
    let keys = *args.first().unwrap_or(&1_000_000) as usize;
    let runs = *args.get(1).unwrap_or(&5) as usize;
    let ms = *args.get(2).unwrap_or(&500);
    let store = Store::new();
    let lock = store.lock("many").open().unwrap();
    let held: Vec<_> = (0..keys).map(|k| lock.acquire(k).unwrap()).collect();
    let hot = store.lock("hot").open().unwrap();
    for run in 0..runs {
        for sweeping in [false, true] {
            let stop = AtomicBool::new(false);
            let (holds, sweeps) = thread::scope(|s| {
                let sweeper = s.spawn(|| {
                    let mut n = 0u64;
                    while sweeping && !stop.load(Ordering::Relaxed) {
                        store.reclaim_idle();
                        n += 1;
                    }
                    n
                });
                let started = Instant::now();
                let mut n = 0u64;
                while started.elapsed() < Duration::from_millis(ms) {
                    for _ in 0..256 {
                        hot.hold("k", |_| ()).unwrap();
                    }
                    n += 256;
                }
                stop.store(true, Ordering::Relaxed);
                (
                    n as f64 / started.elapsed().as_secs_f64(),
                    sweeper.join().unwrap(),
                )
            });
            println!(
                "run {run} sweeping {sweeping:<5}: hot key {:.2} M holds/s, {sweeps} sweeps of {keys} held keys",
                holds / 1e6
            );
        }
    }
    drop(held);
}
