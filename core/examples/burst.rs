//! The worst single hold after a burst of keys: a million keys held once
//! each (so a million records for the sweeper to retire and free), then
//! one thread holds a hot key for a few seconds while the store's thread
//! sweeps them; prints the slowest holds.
//!
//! ```sh
//! cargo run --release -p holdline --example burst -- 1000000 3
//! ```
//! Arguments: keys (default 1,000,000), seconds of hot holds (3).
use holdline::Store;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
    let keys = *args.first().unwrap_or(&1_000_000);
    let secs = *args.get(1).unwrap_or(&3);
    let store = Store::new();
    let burst = store.lock("burst").open().unwrap();
    for k in 0..keys {
        burst.hold(k, |_| ()).unwrap();
    }
    let hot = store.lock("hot").open().unwrap();
    let mut worst = [Duration::ZERO; 5];
    let started = Instant::now();
    let mut holds = 0u64;
    while started.elapsed() < Duration::from_secs(secs) {
        let t = Instant::now();
        hot.hold("k", |_| ()).unwrap();
        let took = t.elapsed();
        holds += 1;
        if took > worst[0] {
            worst[0] = took;
            worst.sort();
        }
    }
    println!(
        "{keys} keys, {holds} hot holds, {} left live: slowest holds {:?}",
        burst.stats().live_keys,
        worst.iter().rev().collect::<Vec<_>>()
    );
}
