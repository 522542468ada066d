//! Times the uncontended hold (each thread its own 64 keys, round robin).
//! `cargo run --release -p holdline --example hot_path` prints ns per hold.
use holdline::Store;
use std::time::Instant;

fn main() {
    let store = Store::new();
    let lock = store.lock("bench").open().unwrap();
    let keys: Vec<String> = (0..64).map(|i| format!("key-{i}")).collect();
    let (rounds, n) = match std::env::var("HOT_PATH_N") {
        Ok(v) => (1, v.parse().unwrap()),
        Err(_) => (5, 4_000_000),
    };
    for round in 0..rounds {
        let started = Instant::now();
        for i in 0..n {
            lock.hold(keys[i % 64].as_str(), |_| ()).unwrap();
        }
        let per = started.elapsed().as_nanos() as f64 / n as f64;
        println!("round {round}: {per:.1} ns per uncontended hold");
    }
}
