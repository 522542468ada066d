//! criterion micro-benchmarks: holdline beside `parking_lot::Mutex`,
//! `std::sync::Mutex` and the `DashMap<String, Arc<parking_lot::Mutex<()>>>`
//! keyed pattern. This is the one timer of the uncontended hold; the
//! harness measures what criterion cannot (contention, a busy machine,
//! servers, memory), and `compare_cores.sh` runs the same groups with
//! earlier cores beside this one.
//!
//! Groups: `uncontended` (hold and let go of one key, one thread),
//! `uncontended-10k-keys` (10,000 keys round robin), `try-held` (a try on a
//! key another thread holds), `fresh-key` (a key or lock created, held once
//! and reclaimed), `handoff` (two threads take turns on one key; time per
//! turn). At the end, the uncontended groups' times against the map
//! pattern's.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant, SystemTime};

use criterion::Criterion;
use holdline_benches::{bench, dash_get, Compared, DashPl, Holdline, Named, Workload, MAP};

/// The uncontended groups: holdline, the map pattern, and (where the key
/// does not matter) the plain mutexes as a floor.
fn uncontended(c: &mut Criterion) -> Vec<Compared> {
    let (hl, map) = (Holdline::default(), DashPl::default());
    let (pl, std) = (parking_lot::Mutex::new(()), std::sync::Mutex::new(()));
    let one_key: [Named; 4] = [
        ("holdline", &hl),
        ("parking_lot", &pl),
        ("std", &std),
        (MAP, &map),
    ];
    vec![
        bench(c, Workload::OneKey, &one_key),
        bench(c, Workload::ManyKeys, &[("holdline", &hl), (MAP, &map)]),
        bench(c, Workload::TryHeld, &one_key),
    ]
}

fn holdline_lock() -> (holdline::Store, holdline::Lock) {
    let store = holdline::Store::new();
    let lock = store.lock("bench").open().expect("open");
    (store, lock)
}

fn fresh_key(c: &mut Criterion) {
    let mut g = c.benchmark_group("fresh-key");
    // Keys cycle through a large set: each is idle (reclaimed) by the time it comes round again.
    let keys: Vec<String> = (0..1 << 16).map(|i| format!("fresh-{i}")).collect();
    let mask = keys.len() - 1;
    let (store, lock) = holdline_lock();
    let mut i = 0usize;
    g.bench_function("holdline hold (create+reclaim)", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            lock.hold(&keys[i & mask], |_| black_box(())).unwrap()
        })
    });
    store.reclaim_idle();
    g.bench_function("parking_lot new+lock+drop", |b| {
        b.iter(|| {
            let m = Box::new(parking_lot::Mutex::new(()));
            drop(black_box(&m).lock());
        })
    });
    g.bench_function("std new+lock+drop", |b| {
        b.iter(|| {
            let m = Box::new(std::sync::Mutex::new(()));
            drop(black_box(&m).lock().unwrap());
        })
    });
    let map = DashPl::default();
    g.bench_function("dashmap+pl insert+lock+remove", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            let k = &keys[i & mask];
            let m = dash_get(&map, k);
            drop(m.lock());
            drop(m);
            map.remove(k);
        })
    });
    g.finish();
}

/// Two threads take turns on one key: each hold checks whose turn it is and,
/// when it is its own, passes the turn. Answers the time for `iters` turns
/// of each thread.
fn ping_pong(iters: u64, hold: &(dyn Fn(&mut dyn FnMut()) + Sync)) -> Duration {
    let turn = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    let player = |me: usize| {
        while !go.load(Relaxed) {
            std::hint::spin_loop();
        }
        let mut done = 0;
        while done < iters {
            hold(&mut || {
                if turn.load(Relaxed) == me {
                    turn.store(1 - me, Relaxed);
                    done += 1;
                }
            });
        }
    };
    std::thread::scope(|s| {
        let other = s.spawn(|| player(1));
        let start = Instant::now();
        go.store(true, Relaxed);
        player(0);
        other.join().unwrap();
        start.elapsed()
    })
}

fn handoff(c: &mut Criterion) {
    let mut g = c.benchmark_group("handoff");
    g.measurement_time(Duration::from_secs(3));
    let (_store, lock) = holdline_lock();
    g.bench_function("holdline ping-pong", |b| {
        b.iter_custom(|n| ping_pong(n, &|f| lock.hold("k", |_| f()).unwrap()))
    });
    let pl = parking_lot::Mutex::new(());
    g.bench_function("parking_lot ping-pong", |b| {
        b.iter_custom(|n| {
            ping_pong(n, &|f| {
                let _g = pl.lock();
                f()
            })
        })
    });
    let sm = std::sync::Mutex::new(());
    g.bench_function("std ping-pong", |b| {
        b.iter_custom(|n| {
            ping_pong(n, &|f| {
                let _g = sm.lock().unwrap();
                f()
            })
        })
    });
    let map = DashPl::default();
    g.bench_function("dashmap+pl ping-pong", |b| {
        b.iter_custom(|n| {
            ping_pong(n, &|f| {
                let m = dash_get(&map, "k");
                let _g = m.lock();
                f()
            })
        })
    });
    g.finish();
}

fn main() {
    let since = SystemTime::now();
    let mut c = holdline_benches::criterion();
    let compared = uncontended(&mut c);
    fresh_key(&mut c);
    handoff(&mut c);
    c.final_summary();
    holdline_benches::print_against_map(&compared, since);
}
